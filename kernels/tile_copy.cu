// tile_replicate: the foundation's exercise of TMA, mbarrier rings and
// cluster multicast, with bit-exact output.
//
//   out[r, i, j] = src[i, j]   for r in [0, CLUSTER)
//
// Roles (64 threads, 2 warps):
//   warp 0, lane 0  producer: for each tile of the cluster's sequence, waits
//                   for the ring slot to be free in *every* CTA of the cluster,
//                   then loads its 1/CLUSTER slice of the tile rows with one
//                   TMA load multicast to all CTAs of the cluster.  Every CTA
//                   thus receives the whole tile, one slice from each peer.
//   warp 1, lane 0  storer: waits for the full tile, TMA-stores it to out[rank]
//                   (a rank-3 map: cols, rows, copy), and frees the slot of the
//                   previous tile in every CTA once its store has read smem.
//
// Barriers per ring slot s (STAGES of them; phases wrap when tiles > STAGES):
//   full[s]   count 1 (own producer's arrive.expect_tx of the whole tile's bytes;
//             the slices' complete_tx come from all CTAs' loads)
//   empty[s]  count CLUSTER (every CTA's storer arrives, since every CTA's
//             producer writes into this CTA's slot s)
// Ragged edges: loads past the edge fill zeros (and still count the full box
// of bytes); stores are clipped by TMA.
//
// Compile-time configuration: TILE_ROWS, TILE_COLS, ELEM_BYTES, STAGES, CLUSTER.
#include "ptx.cuh"

#ifndef TILE_ROWS
#define TILE_ROWS 64
#endif
#ifndef TILE_COLS
#define TILE_COLS 64
#endif
#ifndef ELEM_BYTES
#define ELEM_BYTES 2
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef CLUSTER
#define CLUSTER 2
#endif

constexpr u32 kTileBytes = TILE_ROWS * TILE_COLS * ELEM_BYTES;
constexpr u32 kSliceRows = TILE_ROWS / CLUSTER;
constexpr u32 kSliceBytes = kTileBytes / CLUSTER;
static_assert(TILE_ROWS % CLUSTER == 0, "tile rows must split evenly across the cluster");
static_assert((TILE_COLS * ELEM_BYTES) % 16 == 0, "TMA box rows must be multiples of 16 bytes");
static_assert(kSliceBytes % 128 == 0, "slices must stay 128-byte aligned");
static_assert(STAGES >= 2, "a ring needs at least two stages");

extern "C" __global__ void __launch_bounds__(64, 1)
tile_replicate(const __grid_constant__ TmaMap src, const __grid_constant__ TmaMap dst, int tiles_m, int tiles_n)
{
    extern __shared__ __align__(128) unsigned char smem_raw[];
    const u32 base = (smem_u32(smem_raw) + 127u) & ~127u;   // host adds 128 B of slack
    auto stage = [&](u32 s) { return base + s * kTileBytes; };
    auto full = [&](u32 s) { return base + STAGES * kTileBytes + 8u * s; };
    auto empty = [&](u32 s) { return base + STAGES * kTileBytes + 8u * (STAGES + s); };

    const u32 rank = CLUSTER > 1 ? cluster_ctarank() : 0u;
    const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int cluster_id = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int tiles = tiles_m * tiles_n;

    if (threadIdx.x == 0) {
        tma_prefetch_map(&src);
        tma_prefetch_map(&dst);
        for (u32 s = 0; s < STAGES; ++s) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), CLUSTER);
        }
        fence_mbar_init();
    }
    // Peers multicast into our ring and arrive on our barriers: all CTAs of the
    // cluster must see initialised barriers before anyone starts.
    if (CLUSTER > 1) cluster_sync(); else __syncthreads();

    if (warp == 0 && lane == 0) {
        u32 it = 0;
        for (int t = cluster_id; t < tiles; t += clusters, ++it) {
            const u32 s = it % STAGES, phase = (it / STAGES) & 1u;
            mbar_wait(empty(s), phase ^ 1u, "empty (copy ring)");                    // first pass falls through
            mbar_arrive_expect_tx(full(s), kTileBytes);         // whole tile, all slices
            const int row = (t / tiles_n) * TILE_ROWS + int(rank * kSliceRows);
            const int col = (t % tiles_n) * TILE_COLS;
            if (CLUSTER > 1)
                tma_load_2d_multicast(stage(s) + rank * kSliceBytes, &src, full(s), col, row,
                                      (u16)((1u << CLUSTER) - 1u));
            else
                tma_load_2d(stage(s), &src, full(s), col, row);
        }
    } else if (warp == 1 && lane == 0) {
        u32 it = 0, prev = 0;
        for (int t = cluster_id; t < tiles; t += clusters, ++it) {
            const u32 s = it % STAGES, phase = (it / STAGES) & 1u;
            mbar_wait(full(s), phase, "full (copy ring)");
            tma_store_3d(&dst, stage(s), (t % tiles_n) * TILE_COLS, (t / tiles_n) * TILE_ROWS, int(rank));
            tma_store_commit();
            if (it > 0) {                                       // previous store has read its slot
                tma_store_wait_read<1>();
                for (u32 c = 0; c < CLUSTER; ++c) mbar_arrive_cluster(empty(prev), c);
            }
            prev = s;
        }
        tma_store_wait_all();
    }
    // No CTA may leave while a peer can still arrive on its barriers.
    if (CLUSTER > 1) cluster_sync();
}
