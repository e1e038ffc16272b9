// Compile-time configuration of gemm_kernel, read in one place.
//
// Every -D macro the host passes (rawcoop/plan/configs.py, KernelSpec defines) is read here once,
// given its default, checked by the static_asserts at the end, and exposed as a constant of the
// namespace `cfg` (enum Switch, unqualified below: `using namespace cfg`); the tile geometry
// derived from them follows.  The rest of the kernel names only these constants and branches on
// them with `if constexpr`.  The few `#if`s left elsewhere test RC_FP8, RC_BLOCK_SCALED and
// RC_SPREAD, defined here, where a declaration exists in some kernels only: the fp8 kernels' extra
// parameters, the block-scaled kernels' SA slots, the spread split-K reduction's helper.
//
// The switches (default in brackets):
//   BLOCK_M [128]      tile rows: 128, or 192 (three consumer warpgroups, see "Tall tiles" in gemm.cu)
//   BLOCK_N [256]      tile columns: a multiple of 64, or 144..240 in steps of 16 ("Narrow boxes")
//   STAGES [4]         mainloop ring stages
//   IN_KIND [1]        A: 0 fp16, 1 bf16, 2 tf32 (fp32 storage), 3 fp8 e4m3, 4 fp8 e5m2
//   IN_KIND_B [IN_KIND] B: IN_KIND, except that fp8 A and B may differ (e4m3 x e5m2)
//   A_KMAJOR, B_KMAJOR [1]  operand layouts (MN-major for 16-bit inputs only)
//   OUT_TYPE           D and C: 0 fp16, 1 bf16, 2 fp32 [fp16 for fp16 inputs, fp32 for tf32, else bf16]
//   HAS_C [0], C_COLMAJOR [0], D_COLMAJOR [0]   beta·C term; column-major C / D (swap-AB)
//   BIAS [0]           0 none, 1 fp32, 2 bf16, 3 fp16;  BIAS_ON_ROWS [0]: one bias per row
//   ACT [0]            0 none, 1 relu, 2 gelu (tanh form), 3 silu
//   CLUSTER_M, CLUSTER_N [1]  2: two CTAs on vertically (horizontally) adjacent tiles share B (A)
//   PINGPONG [0]       0 cooperative: the consumers share a tile; 1: they alternate units
//   SCALE_MODE [0]     fp8 scales: 0 per-tensor (scale_a, scale_b), 1 block-scaled (1x128 A, 128x128 B)
//   BS_TWO_TMP [1]     block-scaled: two promotion temporaries (cooperative only)
//   BS_SB_AHEAD        block-scaled: k-blocks SB is read ahead of its use [1 with two temporaries, else 2]
//   UNIFORM_CONSUMER   consumer index through redux.sync [ping-pong kernels without clusters]
//   SPLIT_SPREAD [1]   split-K: every split reduces a share of the tile (1) or a serial chain (0)
//   STREAM_K [0]       stream-K decomposition of the last wave (scheduler.cuh)
//   EPI_RING [0]       staging buffers in the ring's first A stages (gemm_smem.cuh)
//   RC_TIMELINE        diagnostics only, never in a shipped kernel: %globaltimer stamps per unit
#pragma once
#include "ptx.cuh"

// ------------------------------------------------------------------ the -D macros and their defaults
#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef IN_KIND
#define IN_KIND 1
#endif
#ifndef IN_KIND_B
#define IN_KIND_B IN_KIND
#endif
#ifndef A_KMAJOR
#define A_KMAJOR 1
#endif
#ifndef B_KMAJOR
#define B_KMAJOR 1
#endif
#ifndef OUT_TYPE
#define OUT_TYPE (IN_KIND == 0 ? 0 : IN_KIND == 2 ? 2 : 1)
#endif
#ifndef HAS_C
#define HAS_C 0
#endif
#ifndef C_COLMAJOR
#define C_COLMAJOR 0
#endif
#ifndef D_COLMAJOR
#define D_COLMAJOR 0
#endif
#ifndef BIAS
#define BIAS 0
#endif
#ifndef BIAS_ON_ROWS
#define BIAS_ON_ROWS 0
#endif
#ifndef ACT
#define ACT 0
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#ifndef CLUSTER_N
#define CLUSTER_N 1
#endif
#ifndef PINGPONG
#define PINGPONG 0
#endif
#ifndef SCALE_MODE
#define SCALE_MODE 0
#endif
#ifndef BS_TWO_TMP
#define BS_TWO_TMP 1
#endif
#ifndef STREAM_K
#define STREAM_K 0
#endif
// Measured on the H200: ping-pong 4096x14336x4096 +1.7%; cooperative kernels +-1%, block-scaled
// 4096^2x7168 -1.7%, ping-pong 2x1 clusters spilled: so on for ping-pong without clusters only.
#ifndef UNIFORM_CONSUMER
#define UNIFORM_CONSUMER (PINGPONG && CLUSTER_M * CLUSTER_N == 1)
#endif
#ifndef SPLIT_SPREAD
#define SPLIT_SPREAD 1
#endif
// Measured on the H200: with two temporaries, reading SB 1 k-block ahead is 3-4% faster than 2.
#ifndef BS_SB_AHEAD
#define BS_SB_AHEAD (BS_TWO_TMP && !PINGPONG ? 1 : 2)
#endif
#ifndef EPI_RING
#define EPI_RING 0
#endif

// For the few #ifs that must stay: declarations that exist in some kernels only (fp8 kernels'
// parameters, block-scaled kernels' SA slots, the spread split-K reduction).
#define RC_FP8 (IN_KIND >= 3)
#define RC_BLOCK_SCALED (SCALE_MODE == 1)
#define RC_SPREAD (SPLIT_SPREAD && !PINGPONG && !STREAM_K)   // cooperative data-parallel/split-K only

// Diagnostics (RC_TIMELINE defined): thread 0 of each consumer stamps %globaltimer (ns) at its units'
// start, mainloop end, fix-up end and epilogue end into the module global rc_timeline, RC_TL_UNITS
// units per (CTA, consumer), records of 5 u64: unit index, then the four stamps.  bench/timeline.py
// reads it back.  RC_STAMP / RC_TL_NEXT name the consumer's `tid`, `c` and unit counter `tl_n`.
#ifdef RC_TIMELINE
#define RC_TL_UNITS 16
__device__ unsigned long long rc_timeline[1024 * 4 * RC_TL_UNITS * 5];
#define RC_STAMP(f, val) do { if (tid == 0 && tl_n < RC_TL_UNITS) \
            rc_timeline[((blockIdx.x * kConsumers + c) * RC_TL_UNITS + tl_n) * 5u + (f)] = (val); } while (0)
#define RC_NOW globaltimer_ns()
#define RC_TL_NEXT() ++tl_n
#else
#define RC_STAMP(f, val) do {} while (0)
#define RC_TL_NEXT() do {} while (0)
#endif

// The k-step wrapper of wgmma.cuh for this kernel's input kinds (names only exist for the shapes
// built, hence a macro): RC_WGMMA_TILE(d, desc_a, desc_b, accumulate), n = BLOCK_N.  Only the
// 16-bit wrappers take the transpose bits (K-major 0, MN-major 1).
#define RC_WGMMA_NAME(n_, k_, t_) wgmma_m64n##n_##k##k_##_##t_
#define RC_WGMMA_XNAME(n_, k_, t_) RC_WGMMA_NAME(n_, k_, t_)
// fp8 wrappers are named by both kinds, e.g. e4m3_e5m2 for IN_KIND 3, IN_KIND_B 4.
#define RC_F8_3 e4m3
#define RC_F8_4 e5m2
#define RC_F8_JOIN(a_, b_) a_##_##b_
#define RC_F8_XJOIN(a_, b_) RC_F8_JOIN(a_, b_)
#define RC_F8_KINDS(a_, b_) RC_F8_XJOIN(RC_F8_##a_, RC_F8_##b_)
#define RC_F8_XKINDS(a_, b_) RC_F8_KINDS(a_, b_)
#if IN_KIND == 0
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 16, f16)<1 - A_KMAJOR, 1 - B_KMAJOR>
#elif IN_KIND == 1
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 16, bf16)<1 - A_KMAJOR, 1 - B_KMAJOR>
#elif IN_KIND == 2
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 8, tf32)
#else
#define RC_WGMMA(n) RC_WGMMA_XNAME(n, 32, RC_F8_XKINDS(IN_KIND, IN_KIND_B))
#endif
#define RC_WGMMA_TILE RC_WGMMA(BLOCK_N)

// Element size: a k-step always reads 32 bytes of K per row (k16 of a 16-bit type, k8 of tf32,
// k32 of fp8), and a K-major shared-memory row is one 128-byte swizzle atom.
#define RC_IN_BYTES (IN_KIND <= 1 ? 2 : IN_KIND == 2 ? 4 : 1)

// The switches as constants.  Enumerators rather than constexpr variables: NVRTC compiles with
// --device-as-default-execution-space, under which every namespace-scope constexpr variable is
// also a __device__ variable, a symbol of the cubin; an enumerator is a constant only.  They are
// ints, as the macros are, so expressions compute in the same types.
namespace cfg {
enum Switch : int {
    kBlockM = BLOCK_M,
    kBlockN = BLOCK_N,
    kStages = STAGES,
    kInKind = IN_KIND,
    kInKindB = IN_KIND_B,
    kAKMajor = A_KMAJOR,
    kBKMajor = B_KMAJOR,
    kOutType = OUT_TYPE,
    kHasC = HAS_C,
    kCColMajor = C_COLMAJOR,
    kDColMajor = D_COLMAJOR,
    kBias = BIAS,
    kBiasOnRows = BIAS_ON_ROWS,
    kAct = ACT,
    kClusterM = CLUSTER_M,
    kClusterN = CLUSTER_N,
    kCluster = CLUSTER_M * CLUSTER_N,            // CTAs per cluster (launched as (kCluster, 1, 1))
    kPingPong = PINGPONG,
    kScaleMode = SCALE_MODE,
    kFp8 = RC_FP8,
    kBlockScaled = RC_BLOCK_SCALED,
    kBsTwoTmp = BS_TWO_TMP && !PINGPONG,                // ping-pong keeps one temporary (registers)
    kBsSbAhead = BS_SB_AHEAD,
    kUniformConsumer = UNIFORM_CONSUMER,
    kSpread = RC_SPREAD,
    kStreamK = STREAM_K,
    kEpiRing = EPI_RING,
    kBlockK = 128 / RC_IN_BYTES,                 // one 128-byte swizzle row of K per k-block: 64 / 32 / 128
    kKSteps = kBlockK * RC_IN_BYTES / 32,        // wgmma k-steps of 32 bytes per k-block: always 4
};
}  // namespace cfg
using namespace cfg;

// ------------------------------------------------------------------ tile geometry
constexpr u32 kInBytes = RC_IN_BYTES;
constexpr u32 kOutBytes = kOutType == 2 ? 4 : 2;
constexpr u32 kABytes = kBlockM * kBlockK * kInBytes;       // 16 KB
constexpr u32 kBBytes = kBlockN * kBlockK * kInBytes;
constexpr u32 kStageBytes = kABytes + kBBytes;
constexpr u32 kAtomBytes = 64 * kBlockK * kInBytes;          // one 64-wide MN-major box (16-bit only): 8 KB
// Epilogue chunk: 64 rows × kEpiCols columns = 8 KB, 128-byte lines.
//   row-major:    a line is a row of kEpiCols elements
//   column-major: a line is a column of 64 16-bit elements; fp32: a column's
//                 64 values take two lines, so the chunk is two boxes of 32
//                 rows × 32 columns (4 KB each, rows 32-63 at +4 KB), two TMA
//                 loads (C) or stores (D) per chunk (colmajor_f32)
constexpr u32 kEpiCols = 128 / kOutBytes;
constexpr u32 kEpiBytes = 64 * 128;
constexpr u32 kConsumers = kBlockM / 64;                     // cooperative: one 64-row half (third) each
constexpr u32 kThreads = 128 * (1 + kConsumers);             // a producer warpgroup and the consumers
// Registers per consumer thread after setmaxnreg (the producer keeps 40): 40·128 + 232·256 and
// 40·128 + 152·384 both fit the SM's 64K.
constexpr u32 kConsumerRegs = kConsumers == 2 ? 232 : 152;
// Staging (and C) buffers per consumer: two alternate; a tall tile keeps one, so
// that four stages of its 48 KB (192x192) fit beside three consumers' buffers.
constexpr u32 kEpiBuffers = kBlockM == 128 ? 2 : 1;
// Cooperative: consumer c owns the 64-row half c of every tile.  Ping-pong:
// consumer c owns every other unit of the CTA's sequence, both halves of it.
constexpr u32 kHalves = kPingPong ? 2 : 1;                   // 64-row halves per consumer and unit
constexpr u32 kAccRegs = kBlockN / 2;                        // per half
constexpr u32 kStageReaders = (kPingPong ? 1 : kConsumers) * 4 * kCluster;  // warps that release a stage
constexpr u32 kChunkRegs = kEpiCols / 2;                     // accumulators per chunk per thread
// Tile widths between the multiples of the chunk (BLOCK_N % kEpiCols != 0: 144 ... 240 for 16-bit
// output, see "Narrow boxes" below): the last chunk of a 64-row half has only kTailCols columns.
constexpr u32 kTailCols = kBlockN % kEpiCols;
constexpr u32 kChunks = (kBlockN + kEpiCols - 1) / kEpiCols;  // epilogue chunks per 64-row half
// Narrow boxes.  A TMA store writes whole boxes (clipped only at the tensor's edge), so a 64-column
// box would overwrite the next tile's first columns from a partial chunk.  Kernels whose tile width
// is not a multiple of the chunk therefore store (and load C) in boxes of 32-byte lines: 64 lines x
// kBoxCols columns (16 16-bit or 8 fp32 values), 32B-swizzled, kEpiCols / kBoxCols boxes of 2 KB per
// chunk (a partial chunk stores only its own), all of one chunk in one bulk group.  Row-major D and
// C only (column-major ones keep whole-chunk boxes: their lines are columns, and a column-major
// C box loaded past the tile is only read as far as the tile goes).
constexpr bool kNarrowBox = kTailCols != 0;
constexpr u32 kBoxCols = kNarrowBox ? 32 / kOutBytes : kEpiCols;
constexpr u32 kBoxBytes = 64 * 32;                             // a narrow box: 64 lines of 32 B
// Columns of chunk jc (compile-time wherever jc is an unrolled index).
RC_DEVICE constexpr u32 chunk_cols(u32 jc) { return (kTailCols && jc == kChunks - 1) ? kTailCols : kEpiCols; }
// Block-scaled kernels' SA slots (gemm_block_scale.cuh); declared in those kernels only (a cubin
// symbol, see above), like every name that touches them.
#if RC_BLOCK_SCALED
constexpr u32 kSABytes = kBlockM * 4;                        // per stage: one fp32 A scale per tile row
#endif

// ------------------------------------------------------------------ legality
static_assert(kBlockK * kInBytes == 128, "one 128-byte swizzle atom per K-major tile row");
static_assert(kKSteps == 4, "four 32-byte wgmma k-steps per 128-byte row");
static_assert(kInKind >= 0 && kInKind <= 4 && kInKindB >= 0 && kInKindB <= 4, "IN_KIND: 0..4");
static_assert(kInKind == kInKindB || (kInKind >= 3 && kInKindB >= 3),
              "A and B kinds may differ only for fp8 (e4m3 x e5m2)");
static_assert(kInBytes == 2 || (kAKMajor && kBKMajor),
              "wgmma cannot transpose 32-bit/8-bit operands: tf32 and fp8 A and B must be K-major");
static_assert(kOutType >= 0 && kOutType <= 2, "OUT_TYPE: 0 fp16, 1 bf16, 2 fp32");
static_assert(kBias >= 0 && kBias <= 3, "BIAS: 0 none, 1 fp32, 2 bf16, 3 fp16");
static_assert(kAct >= 0 && kAct <= 3, "ACT: 0 none, 1 relu, 2 gelu, 3 silu");
static_assert(kBlockN % 64 == 0 || (kBlockN % 16 == 0 && kBlockN > 128 && kBlockN < 256 && kInBytes == 2 &&
                                    kBKMajor && !kDColMajor && kBlockM == 128 && !kBlockScaled),
              "tile shape: a multiple of 64 columns, or (narrow boxes) 144..240 in steps of 16 for 16-bit inputs "
              "with K-major B (no 64-wide B atoms), row-major D, 128-row tiles, no block scales");
static_assert(kTailCols % kBoxCols == 0 && kEpiCols % kBoxCols == 0, "narrow boxes tile a chunk");
static_assert(!kPingPong || kBlockN <= 128, "ping-pong holds two 64-row halves: 128 columns at most");
static_assert((kClusterM == 1 || kClusterM == 2) && (kClusterN == 1 || kClusterN == 2) && kCluster <= 2,
              "clusters: 1x1, 2x1 (CLUSTER_M = 2) or 1x2 (CLUSTER_N = 2)");
static_assert(kClusterM == 1 || kBlockN >= 128, "a 2x1 cluster splits B into halves of whole 64-wide atoms");
static_assert(kClusterM == 1 || kBKMajor || kBlockN % 128 == 0,
              "a 2x1 cluster with N-major B: each CTA loads BLOCK_N / 128 whole 64-wide atoms (192 has 3)");
static_assert(kClusterN == 1 || kAKMajor || kBlockM % 128 == 0,
              "a 1x2 cluster with M-major A: each CTA loads BLOCK_M / 128 whole 64-wide atoms");
static_assert(kScaleMode == 0 || kScaleMode == 1, "SCALE_MODE: 0 per-tensor, 1 block-scaled");
static_assert(!kBlockScaled || kFp8, "block scales (SCALE_MODE 1) are for fp8 inputs");
static_assert(!kBlockScaled || kBlockN <= 128,
              "block-scaled: a tile must lie inside one 128-column B scale block (BLOCK_N 64 or 128)");
static_assert(!kBlockScaled || kHalves * kAccRegs <= 64,
              "block-scaled: accumulators + promotion temporaries must fit in 128 registers per thread "
              "(128x128 cooperative or 128x64; not 128x256, not 128x128 ping-pong)");
static_assert(kBsSbAhead >= 0 && kBsSbAhead <= 4, "BS_SB_AHEAD: 0..4 k-blocks");
static_assert(kBlockM == 128 || (kBlockM == 192 && !kPingPong && !kBlockScaled && kCluster == 1 && !kStreamK
                                 && kBlockN <= 192),
              "tall tiles (BLOCK_M 192): cooperative, 128 or 192 columns, no clusters, stream-K or block scales");
static_assert(!kStreamK || (kCluster == 1 && !(kPingPong && kBlockScaled)),
              "stream-K kernels are without clusters (gridDim.x CTAs share the ranges); ping-pong stream-K "
              "is not built block-scaled");
