"""Persistent tile scheduling, host side.  kernels/scheduler.cuh is the
device side of the same contract: both walk the identical tile sequence.

CTA ``b`` of ``grid`` CTAs handles linear tiles ``b, b + grid, ...``; a linear
index maps to an output tile ``(m, n)`` in grouped raster order (groups of
``group`` tile-rows, down the rows first inside a group).
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


@dataclass(frozen=True)
class Schedule:
    tiles_m: int
    tiles_n: int
    group: int
    grid: int
    batches: int = 1

    @property
    def tiles(self) -> int:
        return self.batches * self.tiles_m * self.tiles_n

    def tiles_of(self, cta: int) -> list[tuple[int, int, int]]:
        return [tile_coord(t, self.tiles_m, self.tiles_n, self.group)
                for t in range(cta, self.tiles, self.grid)]


def schedule(m: int, n: int, block_m: int, block_n: int, sm_count: int, group: int | None = None,
             batches: int = 1) -> Schedule:
    tiles_m, tiles_n = cdiv(m, block_m), cdiv(n, block_n)
    if group is None:
        group = default_group(tiles_m, tiles_n)
    group = max(1, min(group, tiles_m))
    return Schedule(tiles_m, tiles_n, group, min(sm_count, batches * tiles_m * tiles_n), batches)


def default_group(tiles_m: int, tiles_n: int) -> int:
    """Tile-rows per raster group: enough that the CTAs running together
    share A and B blocks in L2 (measured choice: bench/NOTES.md)."""
    return 8
