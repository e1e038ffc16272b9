"""Persistent tile scheduling, host side.  kernels/scheduler.cuh is the
device side of the same contract: both walk the identical unit sequence.

Tiles: a linear tile index maps to (batch, tile row, tile column) in grouped
raster order (groups of ``group`` tile-rows, down the rows first inside a
group; batches one after another).

Work units (:class:`Decomposition`): the first ``tiles_dp`` tiles are
data-parallel (one unit = the whole K range of a tile); every later tile is
split ``splits`` ways along K (split-K on the partial last wave, or on all
tiles when there are fewer tiles than SMs).  CTA ``b`` of ``grid`` handles
units ``b, b + grid, ...``.  Split units need an fp32 workspace slot per
(tile, consumer warpgroup) and one flag each; only the flags are zeroed, on
the launch stream.

Clusters (``cluster`` = (cluster_m, cluster_n), (2, 1) or (1, 2)): a tile of
the schedule is then a pair of kernel tiles, vertically (2x1) or horizontally
(1x2) adjacent; ``tiles_m``/``tiles_n`` count pairs, ``grid`` counts clusters
and the launch has ``grid * 2`` CTAs.  CTA ``b`` walks the units of cluster
``b // 2`` and its rank ``b % 2`` picks the tile inside each pair
(:func:`cta_tile`).  An odd number of tile rows/columns leaves a ghost tile
in the last pair: it runs the whole protocol, its loads are zero-filled and
its stores clipped.  Workspace slots and flags are per (tile, rank).
"""
from __future__ import annotations

from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_coord(t: int, tiles_m: int, tiles_n: int, group: int) -> tuple[int, int, int]:
    """Exactly kernels/scheduler.cuh's ``tile_coord``: (batch, tile row, tile column)."""
    per_batch = tiles_m * tiles_n
    l = t // per_batch
    t -= l * per_batch
    per_group = group * tiles_n
    g = t // per_group
    first_m = g * group
    rows = min(tiles_m - first_m, group)
    r = t - g * per_group
    return l, first_m + r % rows, r // rows


def cta_tile(tc: tuple[int, int, int], rank: int, cluster: tuple[int, int] = (1, 1)) -> tuple[int, int, int]:
    """The kernel tile (batch, tile row, tile column) that CTA ``rank`` of a
    cluster handles for the schedule tile ``tc`` (kernels/gemm.cu's m0/n0)."""
    cm, cn = cluster
    l, tm, tn = tc
    return l, tm * cm + (rank if cm > 1 else 0), tn * cn + (rank if cn > 1 else 0)


MIN_KBLOCKS_PER_SPLIT = 8     # a split must amortise its fix-up (>= 512 of K)
MAX_SPLITS = 4                # the deterministic fix-up is serial in the split index
CONSUMERS = 2                 # workspace slots per split tile


@dataclass(frozen=True)
class Decomposition:
    tiles: int
    k_blocks: int
    tiles_dp: int
    splits: int

    @property
    def units(self) -> int:
        return self.tiles_dp + (self.tiles - self.tiles_dp) * self.splits

    @property
    def split_tiles(self) -> int:
        return 0 if self.splits == 1 else self.tiles - self.tiles_dp

    def unit(self, u: int) -> tuple[int, int, int, int, int]:
        """Exactly kernels/scheduler.cuh's ``work_unit``:
        (tile, split, splits, first k-block, k-block count)."""
        if u < self.tiles_dp:
            tile, split, splits = u, 0, 1
        else:
            v = u - self.tiles_dp
            tile, split, splits = self.tiles_dp + v // self.splits, v % self.splits, self.splits
        base, rem = divmod(self.k_blocks, splits)
        return tile, split, splits, split * base + min(split, rem), base + (1 if split < rem else 0)

    def workspace_floats(self, block_n: int) -> int:
        return self.split_tiles * CONSUMERS * 64 * block_n

    def flag_count(self) -> int:
        return self.split_tiles * CONSUMERS


def decompose(tiles: int, k_blocks: int, sm_count: int, splits: int | None = None) -> Decomposition:
    """Data-parallel for full waves; split-K for the tiles of a partial last
    wave (or all tiles when there are fewer than SMs), with as many splits as
    fill the idle SMs, at most MAX_SPLITS and at least MIN_KBLOCKS_PER_SPLIT
    k-blocks each.  ``splits`` forces split-K on every tile (tests, tuning)."""
    if splits is not None:
        splits = max(1, min(splits, k_blocks))
        return Decomposition(tiles, k_blocks, tiles if splits == 1 else 0, splits)
    full_waves, tail = divmod(tiles, sm_count)
    if tail == 0:
        return Decomposition(tiles, k_blocks, tiles, 1)
    s = min(sm_count // tail, MAX_SPLITS, k_blocks // MIN_KBLOCKS_PER_SPLIT)
    if s < 2:
        return Decomposition(tiles, k_blocks, tiles, 1)
    return Decomposition(tiles, k_blocks, full_waves * sm_count, s)


@dataclass(frozen=True)
class Schedule:
    tiles_m: int
    tiles_n: int
    group: int
    grid: int
    batches: int = 1
    decomposition: Decomposition | None = None
    cluster: tuple[int, int] = (1, 1)

    @property
    def tiles(self) -> int:
        return self.batches * self.tiles_m * self.tiles_n

    @property
    def cluster_size(self) -> int:
        return self.cluster[0] * self.cluster[1]

    @property
    def ctas(self) -> int:
        """CTAs launched: ``grid`` clusters of ``cluster_size``."""
        return self.grid * self.cluster_size

    def cta_units(self, cta: int) -> list[tuple[int, int, int, int, int, int, int, int]]:
        """Exactly what CTA ``cta`` of the launched grid (``ctas`` CTAs) works
        on, in order (kernels/gemm.cu: first unit ``cta // cluster_size``,
        step ``grid``, rank ``cta % cluster_size``): (unit, batch, tile row,
        tile column, split, splits, first k-block, k-block count) in kernel
        tiles.  Needs the decomposition (``k`` given to :func:`schedule`)."""
        dec = self.decomposition
        size = self.cluster_size
        rank = cta % size
        out = []
        for u in range(cta // size, dec.units, self.grid):
            tile, split, splits, kb0, kbn = dec.unit(u)
            tc = cta_tile(tile_coord(tile, self.tiles_m, self.tiles_n, self.group), rank, self.cluster)
            out.append((u, *tc, split, splits, kb0, kbn))
        return out

    def workspace_slot(self, tile: int, rank: int, consumer: int) -> int:
        """Split-K workspace slot (and flag) of (schedule tile, rank, consumer
        warpgroup) as the kernel computes it; ``tile`` >= tiles_dp."""
        return ((tile - self.decomposition.tiles_dp) * self.cluster_size + rank) * CONSUMERS + consumer

    def tiles_of(self, cta: int) -> list[tuple[int, int, int]]:
        return [tile_coord(t, self.tiles_m, self.tiles_n, self.group)
                for t in range(cta, self.tiles, self.grid)]


def schedule(m: int, n: int, block_m: int, block_n: int, sm_count: int, group: int | None = None,
             batches: int = 1, k: int | None = None, block_k: int = 64, splits: int | None = None,
             cluster: tuple[int, int] = (1, 1)) -> Schedule:
    """Tiles, raster group, decomposition (when ``k`` is given) and the
    persistent grid: min(#SMs, #units).  With a ``cluster`` of (2, 1) or
    (1, 2) the tiles are pairs of kernel tiles and ``sm_count`` is the number
    of clusters that can be resident (the grid then counts clusters)."""
    cm, cn = cluster
    tiles_m, tiles_n = cdiv(cdiv(m, block_m), cm), cdiv(cdiv(n, block_n), cn)
    if group is None:
        group = default_group(tiles_m, tiles_n)
    group = max(1, min(group, tiles_m))
    tiles = batches * tiles_m * tiles_n
    dec = decompose(tiles, max(1, cdiv(k, block_k)), sm_count, splits) if k is not None else None
    units = dec.units if dec is not None else tiles
    return Schedule(tiles_m, tiles_n, group, min(sm_count, units), batches, dec, (cm, cn))


def default_group(tiles_m: int, tiles_n: int) -> int:
    """Tile-rows per raster group: enough that the CTAs running together
    share A and B blocks in L2 (measured choice: bench/NOTES.md)."""
    return 8
