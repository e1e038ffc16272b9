// Persistent tile scheduler, device side.  rawcoop/scheduler.py is the host
// side of the same contract: both must walk the identical sequence.
//
// CTA b of a grid of G CTAs handles linear tile indices b, b + G, b + 2G, ...
// (over L * tiles_m * tiles_n tiles for a batch of L problems).
// A linear index maps to an output tile in grouped ("swizzled") raster order:
// tiles are walked in groups of `group` tile-rows; inside a group, down the
// rows first, then across the columns.  CTAs running at the same time then
// share A row-blocks and B column-blocks in L2.  The last group may be shorter.
#pragma once

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

// Work decomposition (host side: rawcoop/scheduler.py `Decomposition`).
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

static __device__ __forceinline__ int unit_count(int tiles, int tiles_dp, int splits) {
    return tiles_dp + (tiles - tiles_dp) * splits;
}

static __device__ __forceinline__ WorkUnit work_unit(int u, int tiles_m, int tiles_n, int group, int tiles_dp,
                                                     int splits, int k_blocks) {
    WorkUnit w;
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
