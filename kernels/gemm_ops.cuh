// Device functions the roles of gemm_kernel call: the epilogue's math, conversions and chunk
// addressing, which chunks a unit stores, the split-K flag count, the consumers' stage release
// and the producer's TMA operand loads.  The role code itself is in gemm_producer.cuh,
// gemm_consumer.cuh, gemm_block_scale.cuh and gemm_epilogue.cuh.
#pragma once
#include "gemm_smem.cuh"
#include "scheduler.cuh"

// ------------------------------------------------------------------ epilogue math
RC_DEVICE float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
RC_DEVICE float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// 1 / (1 + exp(-x)) with two MUFU ops; exact limits 0 and 1 at the extremes.
RC_DEVICE float sigmoid_fast(float x) { return rcp_approx(1.f + ex2_approx(-1.4426950408889634f * x)); }

RC_DEVICE float activate(float v) {
    if constexpr (kAct == 1) {
        return v > 0.f ? v : (v == v ? 0.f : v);              // relu, NaN propagates
    } else if constexpr (kAct == 2) {
        // gelu, tanh form: 0.5 v (1 + tanh(y)) = v · sigmoid(2y), y = sqrt(2/pi) (v + 0.044715 v^3)
        const float y2 = v * (1.5957691216057308f + 0.0713548162726f * v * v);   // 2y
        return v * sigmoid_fast(y2);
    } else if constexpr (kAct == 3) {
        return v * sigmoid_fast(v);                           // silu
    } else {
        return v;
    }
}

RC_DEVICE float bf16_to_f32(u16 h) { return u32_as_f32(((u32)h) << 16); }
RC_DEVICE float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

RC_DEVICE float load_bias(const void* bias, int i) {
    if constexpr (kBias == 1) return static_cast<const float*>(bias)[i];
    else if constexpr (kBias == 2) return bf16_to_f32(static_cast<const u16*>(bias)[i]);
    else if constexpr (kBias == 3) return f16_to_f32(static_cast<const u16*>(bias)[i]);
    else return 0.f;
}

// 16-bit element <-> fp32 for the epilogue (output type)
RC_DEVICE float out16_to_f32(u16 h) {
    if constexpr (kOutType == 1) return bf16_to_f32(h);
    else return f16_to_f32(h);
}
RC_DEVICE u32 pack_out16(float lo, float hi) {
    if constexpr (kOutType == 1) return pack_bf16x2(lo, hi);
    else return pack_f16x2(lo, hi);
}

// ------------------------------------------------------------------ which chunks a unit stores
// The epilogue chunks (of kChunks per 64-row half) a unit stores: all of its
// tile's, except with the spread split-K reduction, where split s of S stores
// [s·kChunks/S, (s+1)·kChunks/S) (possibly none).  The consumers and the C
// loader both take it from here.  `spread`: the launch spreads its reductions
// (kSpread and the host's bmask bit 3, see the kernel).
struct ChunkRange {
    bool spread;    // this unit is a split of a spread reduction
    u32 lo, hi;
};
RC_DEVICE ChunkRange epilogue_chunks(const WorkUnit& w, bool spread) {
    const bool sp = kSpread && spread && w.splits > 1;
    return ChunkRange{sp, sp ? u32(w.split) * kChunks / u32(w.splits) : 0u,
                      sp ? u32(w.split + 1) * kChunks / u32(w.splits) : kChunks};
}

// ------------------------------------------------------------------ split-K workspace and flags
// Chain split-K: one slot (64 x BLOCK_N fp32 per 64-row half) per (tile, rank, consumer).
RC_DEVICE float* ws_chain(float* workspace, int slot) { return workspace + (size_t)slot * (64 * kBlockN); }
// Spread split-K: once consumer warpgroup c's 128 threads have stored (named
// barrier 1 + c), thread 0 counts the tile's flag up (release) and waits until
// all `splits` splits have counted (acquire); then the warpgroup goes on
// together.  Past its wait each split counts once more, and the one whose count
// is the flag's 2·splits-th zeroes it for the next launch: every split is past
// its last wait then.
RC_DEVICE void spread_count_and_wait(int* flag, int splits, u32 c, u32 tid, u32 slot, u32 split) {
    named_barrier_sync(1 + c, 128);          // every thread's stores are written ...
    if (tid == 0) {
        red_add_release_gpu(flag, 1);        // ... before the count moves
        RC_WATCH_START(start);
        while (ld_acquire_gpu(flag) < splits) {
            nanosleep_ns(64);
            RC_WATCH(start, "split-K flag (spread)", slot, split);
        }
        if (atom_add_relaxed_gpu(flag, 1) == 2 * splits - 1) st_release_gpu(flag, 0);
    }
    named_barrier_sync(1 + c, 128);
}

// ------------------------------------------------------------------ consumers: stage release
// A consumer warp is done reading a stage: arrive on its empty barrier in every
// CTA of the cluster (with multicast, each CTA's producer writes into both).
RC_DEVICE void release_stage(u32 bar) {
    if constexpr (kCluster > 1) {
#pragma unroll
        for (u32 r = 0; r < kCluster; ++r) mbar_arrive_remote(bar, r);
    } else {
        mbar_arrive(bar);
    }
}

// ------------------------------------------------------------------ producer: operand loads
// TMA-load one operand's ROWS x BLOCK_K tile of a stage: one box when K-major
// (rows of 128 B), 64-row boxes when MN-major (16-bit only: lines of 64 MN
// elements per K).
template <int KMAJOR, u32 ROWS>
RC_DEVICE void load_operand(u32 dst, const TmaMap* map, u32 bar, int k0, int row0, int l) {
    if (KMAJOR) {
        tma_load_3d(dst, map, bar, k0, row0, l);
    } else {
#pragma unroll
        for (u32 h = 0; h < ROWS / 64; ++h) tma_load_3d(dst + h * kAtomBytes, map, bar, row0 + int(64 * h), k0, l);
    }
}

// Cluster of 2: the two CTAs work on adjacent tiles that share one operand
// tile: B for 2x1 (vertically adjacent tiles), A for 1x2 (horizontally
// adjacent ones).  CTA `rank` loads half of the shared tile (half the rows when
// K-major, half the 64-wide atoms when MN-major) and multicasts it to both.
template <int KMAJOR, u32 ROWS>
RC_DEVICE void load_operand_multicast(u32 dst, const TmaMap* map, u32 bar, int k0, int row0, int l, u32 rank) {
    if (KMAJOR) {
        tma_load_3d_multicast(dst + rank * (ROWS / 2) * 128u, map, bar, k0, row0 + int(rank * (ROWS / 2)), l, 3);
    } else {
#pragma unroll
        for (u32 i = 0; i < ROWS / 128; ++i) {
            const u32 h = rank * (ROWS / 128) + i;
            tma_load_3d_multicast(dst + h * kAtomBytes, map, bar, row0 + int(64 * h), k0, l, 3);
        }
    }
}

// ------------------------------------------------------------------ epilogue: chunk addressing
// Address of byte `x` of 128-byte line `line` in a 128B-swizzled buffer.
RC_DEVICE u32 swz(u32 buf, u32 line, u32 x) {
    return buf + line * 128u + ((((x >> 4) ^ (line & 7u)) << 4) | (x & 15u));
}

// Byte x of row `row` of a row-major epilogue chunk (D staging, row-major C): one 128B-swizzled box of
// 64 lines of 128 B, or with narrow boxes (gemm_config.cuh) box x / 32 of 64 lines of 32 B, 32B-swizzled
// (the 16-byte half of a line flips with bit 2 of the line: address bit 4 ^= bit 7).
RC_DEVICE u32 chunk_addr(u32 buf, u32 row, u32 x) {
    if (kNarrowBox) {
        const u32 xb = x % 32u;
        return buf + (x / 32u) * kBoxBytes + row * 32u + ((((xb >> 4) ^ ((row >> 2) & 1u)) << 4) | (xb & 15u));
    }
    return swz(buf, row, x);
}

// fp32 element (row, col) of a column-major epilogue chunk (C or D with the
// kernel's M contiguous): box row / 32 (4 KB of 32 lines), line col, byte
// 4 · (row % 32) of it.
RC_DEVICE u32 colmajor_f32(u32 buf, u32 row, u32 col) {
    return swz(buf + (row / 32u) * 4096u, col, (row % 32u) * 4u);
}

// ------------------------------------------------------------------ producer: trimmed boxes
// A K-major operand with fewer rows than its tile (M < 128
// for A, N < BLOCK_N for B: then there is a single tile row/column) is
// loaded with a box of only round8(rows) lines (the host encodes its map so,
// rawcoop/plan/configs.py `trimmed_lines`); the rest of the tile's shared-memory lines keep
// whatever an earlier stage left there.  Those lines only feed rows (columns)
// of D at or past M (N), which are never stored, so their values do not
// matter; the point is that a box that is mostly out of bounds costs TMA
// time (zero fill) on problems that are bound by memory (small M, swap-AB).
// Not with clusters (multicast halves) nor MN-major operands (64-wide boxes).
template <int KMAJOR>
RC_DEVICE u32 trimmed_lines(int rows, int tile) {
    return (KMAJOR && kCluster == 1 && rows < tile) ? u32((rows + 7) & ~7) : u32(tile);
}
