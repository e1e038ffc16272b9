// Persistent tile scheduler, device side: which work units a CTA runs, in which order.  Every
// role of a CTA walks the same sequence (Schedule), which is what keeps the mainloop ring, the C
// loader and the consumers' epilogues in step.  rawcoop/plan/scheduler.py is the host side of the
// same contract: both must walk the identical sequence.
//
// CTA b of a grid of G CTAs handles linear tile indices b, b + G, b + 2G, ...
// (over L * tiles_m * tiles_n tiles for a batch of L problems).
// A linear index maps to an output tile in grouped ("swizzled") raster order:
// tiles are walked in groups of `group` tile-rows; inside a group, down the
// rows first, then across the columns.  CTAs running at the same time then
// share A row-blocks and B column-blocks in L2.  The last group may be shorter.
#pragma once
#include "gemm_config.cuh"

struct TileCoord {
    int l, m, n;   // batch index, tile row, tile column
};

// Batches are walked one after another: t = l * tiles_m * tiles_n + (index in batch l).
static __device__ __forceinline__ TileCoord tile_coord(int t, int tiles_m, int tiles_n, int group) {
    const int per_batch = tiles_m * tiles_n;
    const int l = t / per_batch;
    t -= l * per_batch;
    const int per_group = group * tiles_n;
    const int g = t / per_group;
    const int first_m = g * group;
    const int left = tiles_m - first_m;
    const int rows = left < group ? left : group;
    const int r = t - g * per_group;
    return TileCoord{l, first_m + r % rows, r / rows};
}

// Work decomposition (host side: rawcoop/plan/scheduler.py `Decomposition`).
// The first `tiles_dp` tiles are data-parallel units (the whole K range); each
// remaining tile is cut into `splits` units along K (split-K on the tail
// wave), numbered consecutively so that the splits of one tile run in the same
// wave.  Unit u of CTA b: u = b, b + G, ...
struct WorkUnit {
    TileCoord tc;
    int tile;       // linear tile index
    int split;      // 0 .. splits-1
    int splits;     // 1 for data-parallel tiles
    int kb_begin;   // first k-block
    int kb_count;   // number of k-blocks (>= 1)
};

// Stream-K (STREAM_K 1; no clusters; cooperative or ping-pong consumers): the k-blocks of
// the tiles past tiles_dp form one sequence (tile after tile), cut into
// gridDim.x contiguous ranges as equal as integers allow, one per CTA.  A
// range's intersection with a tile is a piece; a tile's pieces belong to
// consecutive CTAs and are numbered in K order (the split index of the serial
// fix-up).  `splits` is then the most pieces any CTA has: unit tiles_dp +
// q * gridDim.x + c is CTA c's q-th piece, walked from the last tile of its
// range back to the first.  The head of a tile that continues in the next CTA
// is thus the first piece its CTA runs, and the tail piece that waits for it
// (flag == split) the last one the next CTA runs: a wait only ever targets
// another CTA's first piece (or, for a CTA whose range lies inside one tile,
// its only piece), so waits point to lower CTAs and cannot form a cycle.  A
// CTA with fewer pieces gets empty units (kb_count 0), which every role skips.
// Host mirror: rawcoop/plan/scheduler.py Decomposition.sk_piece.

static __device__ __forceinline__ int unit_count(int tiles, int tiles_dp, int splits) {
    if constexpr (kStreamK) return tiles_dp + int(gridDim.x) * splits;
    else return tiles_dp + (tiles - tiles_dp) * splits;
}

// gridDim.x read anew at every call (asm volatile): the range arithmetic below
// is then redone per unit instead of being hoisted out of the unit loop, where
// its values would stay live across the mainloop (the 128x256 consumers have
// no register to spare: hoisted, they spilled).
static __device__ __forceinline__ unsigned sk_grid_ctas() {
    unsigned n;
    asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(n));
    return n;
}

// The CTA whose range holds stream-K k-block x (ranges: `rem` of per + 1, then per).
// Unsigned arithmetic throughout: cheaper divisions (fewer registers in the 40-register producer warps).
static __device__ __forceinline__ unsigned sk_owner(unsigned x, unsigned per, unsigned rem) {
    const unsigned big = rem * (per + 1u);
    return x < big ? x / (per + 1u) : rem + (x - big) / per;
}

static __device__ __forceinline__ WorkUnit work_unit(int u, int tiles_m, int tiles_n, int group, int tiles_dp,
                                                     int splits, int k_blocks, int tiles) {
    WorkUnit w;
    if constexpr (kStreamK) {
        if (u >= tiles_dp) {
            const unsigned ctas = sk_grid_ctas(), v = unsigned(u - tiles_dp), kbs = unsigned(k_blocks);
            const unsigned q = v / ctas, c = v - q * ctas;
            const unsigned total = unsigned(tiles - tiles_dp) * kbs;
            const unsigned per = total / ctas, rem = total - per * ctas;
            const unsigned begin = c * per + (c < rem ? c : rem), end = begin + per + (c < rem ? 1u : 0u);
            w.kb_count = 0;                              // an empty unit unless CTA c has a q-th piece
            w.tile = tiles_dp;
            w.split = 0;
            w.splits = 1;
            w.kb_begin = 0;
            if (begin < end && q <= (end - 1u) / kbs - begin / kbs) {
                const unsigned t = (end - 1u) / kbs - q; // stream-K tile, last one of the range first
                const unsigned t0 = t * kbs;
                const unsigned lo = begin > t0 ? begin : t0, hi = end < t0 + kbs ? end : t0 + kbs;
                // The tile's first and last k-blocks belong to CTA c itself when the piece reaches them.
                const unsigned first = lo == t0 ? c : sk_owner(t0, per, rem);
                const unsigned last = hi == t0 + kbs ? c : sk_owner(t0 + kbs - 1u, per, rem);
                w.tile = tiles_dp + int(t);
                w.split = int(c - first);
                w.splits = int(last - first + 1u);
                w.kb_begin = int(lo - t0);
                w.kb_count = int(hi - lo);
            }
            w.tc = tile_coord(w.tile, tiles_m, tiles_n, group);
            return w;
        }
    } else {
        (void)tiles;
    }
    if (u < tiles_dp) {
        w.tile = u;
        w.split = 0;
        w.splits = 1;
    } else {
        const int v = u - tiles_dp;
        w.tile = tiles_dp + v / splits;
        w.split = v - (v / splits) * splits;
        w.splits = splits;
    }
    const int base = k_blocks / w.splits, rem = k_blocks - base * w.splits;
    w.kb_begin = w.split * base + (w.split < rem ? w.split : rem);
    w.kb_count = base + (w.split < rem ? 1 : 0);
    w.tc = tile_coord(w.tile, tiles_m, tiles_n, group);
    return w;
}
