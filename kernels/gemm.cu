// rawcoop GEMM: persistent, TMA warp-specialized, cooperative (sm_90a).
//
//   D[M, N] = A[M, K] · B[K, N]      fp16/bf16 in, fp32 accumulate, fp16/bf16 out
//   A is K-major (row-major M×K), B is K-major (column-major K×N, i.e. the
//   transpose of a row-major N×K array): the "TN" layout.
//
// Threads: 384 = 3 warpgroups, __launch_bounds__(384, 1).
//   WG0  producer, setmaxnreg 40
//        warp 0, lane 0: mainloop loads.  For every k-block of every tile of
//                        this CTA's sequence: wait empty[s], arrive.expect_tx
//                        on full[s] for the stage's bytes, TMA-load the A tile
//                        (BLOCK_M×BLOCK_K) and the B tile (BLOCK_N×BLOCK_K).
//        warp 1:         reserved for the epilogue's C loads (beta != 0, next
//                        issue); idle here.  Warps 2-3 idle.
//   WG1, WG2  consumers, setmaxnreg 232.  Consumer c owns rows [64c, 64c+64)
//        of the shared 128×BLOCK_N tile: for each k-block it waits full[s],
//        issues BLOCK_K/16 wgmma m64nBLOCK_Nk16 from 128B-swizzled smem
//        descriptors into fp32 registers, commits, waits until only this
//        batch is in flight and releases the previous stage (one arrive per
//        warp on empty[s']).  Then the epilogue: fp32 -> 16-bit, written into
//        a 128B-swizzled 64×64 staging buffer (bank-conflict free),
//        fence.proxy.async, named barrier, one thread TMA-stores the chunk.
//        Two staging buffers per consumer alternate; a buffer is rewritten
//        only after cp.async.bulk.wait_group.read says its last store read it.
//
// Barriers (mbarrier, shared memory), per ring stage s of STAGES:
//   full[s]   count 1: the producer's arrive.expect_tx; TMA's complete_tx
//             delivers the bytes.  Consumers wait with parity `phase`.
//   empty[s]  count 8: one arrive per consumer warp after its wgmmas that
//             read stage s completed.  The producer waits with parity
//             `phase ^ 1` (the first pass over the ring falls through).
//   Both sides advance (stage, phase) identically over the whole tile
//   sequence, so phases stay in step across tiles.
//   Named barriers 1 and 2: the 128 threads of consumer 0 / 1 in the epilogue.
//
// Persistence: grid = min(#SMs, #tiles); CTA b walks tiles b, b+G, ... in the
// grouped order of scheduler.cuh.  The producer runs ahead into the next tile
// while the consumers run the epilogue.  Ragged M/N/K: TMA loads zero-fill
// outside the tensor (and still count the whole box), stores are clipped.
//
// Compile-time configuration: BLOCK_N (64/128/192/256), STAGES, DTYPE_BF16 (0/1).
#include "ptx.cuh"
#include "wgmma.cuh"
#include "scheduler.cuh"

#ifndef BLOCK_N
#define BLOCK_N 256
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef DTYPE_BF16
#define DTYPE_BF16 1
#endif

#define BLOCK_M 128
#define BLOCK_K 64

#if DTYPE_BF16
#define RC_ELEM bf16
#define RC_PACK pack_bf16x2
#else
#define RC_ELEM f16
#define RC_PACK pack_f16x2
#endif
#define RC_WGMMA_NAME(n, t) wgmma_m64n##n##k16_##t
#define RC_WGMMA(n, t) RC_WGMMA_NAME(n, t)

constexpr u32 kElem = 2;
constexpr u32 kABytes = BLOCK_M * BLOCK_K * kElem;           // 16 KB
constexpr u32 kBBytes = BLOCK_N * BLOCK_K * kElem;
constexpr u32 kStageBytes = kABytes + kBBytes;
constexpr u32 kEpiRows = 64, kEpiCols = 64;                  // one TMA store box, 128 B rows
constexpr u32 kEpiBytes = kEpiRows * kEpiCols * kElem;       // 8 KB
constexpr u32 kEpiBuffers = 2;                               // per consumer
constexpr u32 kConsumers = 2;
constexpr u32 kAccRegs = BLOCK_N / 2;

// Shared-memory map (offsets from a 1024-byte aligned base).
constexpr u32 kOffA = 0;
constexpr u32 kOffB = kOffA + STAGES * kABytes;
constexpr u32 kOffEpi = kOffB + STAGES * kBBytes;
constexpr u32 kOffBar = kOffEpi + kConsumers * kEpiBuffers * kEpiBytes;
constexpr u32 kSmemBytes = kOffBar + 2 * STAGES * 8 + 1024;  // + alignment slack
static_assert(kSmemBytes <= 232448, "shared memory over the sm_90 per-block limit");
static_assert(BLOCK_K * kElem == 128, "one 128-byte swizzle atom per tile row");
static_assert(BLOCK_N % kEpiCols == 0, "epilogue chunks must tile BLOCK_N");

extern "C" __global__ void __launch_bounds__(384, 1)
gemm_tn(const __grid_constant__ TmaMap map_a, const __grid_constant__ TmaMap map_b,
        const __grid_constant__ TmaMap map_d, int M, int N, int K, int tiles_m, int tiles_n, int group)
{
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    const u32 base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    auto smem_a = [&](u32 s) { return base + kOffA + s * kABytes; };
    auto smem_b = [&](u32 s) { return base + kOffB + s * kBBytes; };
    auto full = [&](u32 s) { return base + kOffBar + 8u * s; };
    auto empty = [&](u32 s) { return base + kOffBar + 8u * (STAGES + s); };

    const u32 wg = threadIdx.x / 128;
    const int tiles = tiles_m * tiles_n;
    const int k_blocks = (K + BLOCK_K - 1) / BLOCK_K;

    if (threadIdx.x == 0) {
        tma_prefetch_map(&map_a);
        tma_prefetch_map(&map_b);
        tma_prefetch_map(&map_d);
        for (u32 s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), kConsumers * 4);
        }
        fence_mbar_init();
    }
    __syncthreads();

    if (wg == 0) {
        // ------------------------------------------------------------ producer
        setmaxnreg_dec<40>();
        const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (warp == 0 && lane == 0) {
            u32 stage = 0, phase = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const TileCoord tc = tile_coord(t, tiles_m, tiles_n, group);
                const int m0 = tc.m * BLOCK_M, n0 = tc.n * BLOCK_N;
                for (int kb = 0; kb < k_blocks; ++kb) {
                    mbar_wait(empty(stage), phase ^ 1u);
                    mbar_arrive_expect_tx(full(stage), kStageBytes);
                    tma_load_2d(smem_a(stage), &map_a, full(stage), kb * BLOCK_K, m0);
                    tma_load_2d(smem_b(stage), &map_b, full(stage), kb * BLOCK_K, n0);
                    if (++stage == STAGES) { stage = 0; phase ^= 1u; }
                }
            }
        }
        // warp 1: epilogue C loads (reserved).
    } else {
        // ------------------------------------------------------------ consumers
        setmaxnreg_inc<232>();
        const u32 c = wg - 1;                     // which 64-row half of the tile
        const u32 tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
        const u32 epi = base + kOffEpi + c * kEpiBuffers * kEpiBytes;
        float acc[kAccRegs];
#pragma unroll
        for (u32 i = 0; i < kAccRegs; ++i) acc[i] = 0.f;

        u32 stage = 0, phase = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const TileCoord tc = tile_coord(t, tiles_m, tiles_n, group);
            const int m0 = tc.m * BLOCK_M, n0 = tc.n * BLOCK_N;

            u32 prev = 0;
            for (int kb = 0; kb < k_blocks; ++kb) {
                mbar_wait(full(stage), phase);
                wgmma_fence();
                const u32 a = smem_a(stage) + c * 64u * 128u;
                const u32 b = smem_b(stage);
#pragma unroll
                for (u32 k = 0; k < BLOCK_K / 16; ++k)
                    RC_WGMMA(BLOCK_N, RC_ELEM)<0, 0>(acc, smem_desc_k128(a + 32u * k), smem_desc_k128(b + 32u * k),
                                                     (kb > 0 || k > 0) ? 1u : 0u);
                wgmma_commit();
                if (kb > 0) {                     // the previous batch is done: free its stage
                    wgmma_wait<1>();
                    if (lane == 0) mbar_arrive(empty(prev));
                }
                prev = stage;
                if (++stage == STAGES) { stage = 0; phase ^= 1u; }
            }
            wgmma_wait<0>();
            if (lane == 0) mbar_arrive(empty(prev));

            // -------------------------------------------------------- epilogue
            const bool rows_in = m0 + int(c * 64u) < M;
            const u32 row0 = warp * 16u + lane / 4u;
#pragma unroll
            for (u32 j = 0; j < BLOCK_N / kEpiCols; ++j) {
                if (n0 + int(j * kEpiCols) >= N) break;          // uniform over the warpgroup
                const u32 buf = epi + (j % kEpiBuffers) * kEpiBytes;
                if (tid == 0) tma_store_wait_read<kEpiBuffers - 1>();
                named_barrier_sync(1 + c, 128);
#pragma unroll
                for (u32 q = 0; q < 8; ++q) {
#pragma unroll
                    for (u32 h = 0; h < 2; ++h) {
                        const u32 i = j * 32u + q * 4u + h * 2u;
                        const u32 row = row0 + 8u * h;
                        const u32 addr = buf + row * 128u + ((q ^ (row & 7u)) << 4) + 4u * (lane & 3u);
                        st_shared_u32(addr, RC_PACK(acc[i], acc[i + 1]));
                    }
                }
                fence_proxy_async_smem();
                named_barrier_sync(1 + c, 128);
                if (tid == 0 && rows_in) {
                    tma_store_2d(&map_d, buf, n0 + int(j * kEpiCols), m0 + int(c * 64u));
                    tma_store_commit();
                }
            }
        }
        if (tid == 0) tma_store_wait_all();
    }
}
