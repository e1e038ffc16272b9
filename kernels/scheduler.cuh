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
