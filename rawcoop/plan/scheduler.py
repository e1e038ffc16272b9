"""Persistent tile scheduling, host side.  kernels/scheduler.cuh is the
device side of the same contract: both walk the identical unit sequence.

Tiles: a linear tile index maps to (batch, tile row, tile column) in grouped
raster order (groups of ``group`` tile-rows, down the rows first inside a
group; batches one after another).

Work units (:class:`Decomposition`): the first ``tiles_dp`` tiles are
data-parallel (one unit = the whole K range of a tile); every later tile is
split ``splits`` ways along K (split-K on the partial last wave, or on all
tiles when there are fewer tiles than SMs), or, with stream-K (opt-in,
:func:`decompose_stream_k`), the later tiles' k-blocks are shared equally by
all CTAs in contiguous ranges (pieces of tiles).  CTA ``b`` of ``grid``
handles units ``b, b + grid, ...``.  Split units and pieces need an fp32
workspace slot per (tile, consumer warpgroup) and one flag each; only the
flags are zeroed, on the launch stream.

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
MAX_SPLITS = 4                # after full waves, tail splits reduced in a serial chain (ping-pong kernels):
                              # measured up to 4 (the chain is serial in the split index)
TAIL_MAX_SPLITS = 16          # ... and reduced spread (cooperative kernels; every tail split resident in one
                              # round): H200 bf16 128x256, one full wave + a 3-6-tile tail, 16 splits vs 4
                              # +10.5% (2880x1408x8192), 8 vs 4 after four waves +1.5%
CONSUMERS = 2                 # workspace slots per split tile (consumer warpgroups; 3 for 192-row tiles)


@dataclass(frozen=True)
class Decomposition:
    """The work units of a launch.  Split-K (``sk_ctas`` 0): ``splits`` equal
    K-ranges per tile past ``tiles_dp``.  Stream-K (``sk_ctas`` = the grid,
    kernels built with STREAM_K=1, no clusters, cooperative or ping-pong): the k-blocks of
    every tile past ``tiles_dp`` (one global sequence, tile after tile) are cut
    into ``sk_ctas`` contiguous ranges as equal as integers allow, one per CTA;
    a range's intersection with a tile is a *piece*, numbered in K order
    within its tile (the split index of the serial fix-up).  ``splits`` is
    then the most pieces any CTA has (the kernel's ``splits`` argument): unit
    ``tiles_dp + q * sk_ctas + c`` is CTA c's q-th piece, walked from its last
    tile back to its first, so that the piece another CTA waits for (the head
    of a tile whose tail is in the next CTA) is done first; a CTA with fewer
    pieces has empty units (k-block count 0)."""
    tiles: int
    k_blocks: int
    tiles_dp: int
    splits: int
    sk_ctas: int = 0

    @property
    def units(self) -> int:
        if self.sk_ctas:
            return self.tiles_dp + self.sk_ctas * self.splits
        return self.tiles_dp + (self.tiles - self.tiles_dp) * self.splits

    @property
    def split_tiles(self) -> int:
        """Tiles whose K range is cut (each needs workspace slots and flags)."""
        if self.sk_ctas:
            return self.tiles - self.tiles_dp
        return 0 if self.splits == 1 else self.tiles - self.tiles_dp

    def unit(self, u: int) -> tuple[int, int, int, int, int]:
        """Exactly kernels/scheduler.cuh's ``work_unit``:
        (tile, split, splits, first k-block, k-block count); stream-K's empty
        units have k-block count 0."""
        if u < self.tiles_dp:
            tile, split, splits = u, 0, 1
        elif self.sk_ctas:
            return self.sk_piece(u - self.tiles_dp)
        else:
            v = u - self.tiles_dp
            tile, split, splits = self.tiles_dp + v // self.splits, v % self.splits, self.splits
        base, rem = divmod(self.k_blocks, splits)
        return tile, split, splits, split * base + min(split, rem), base + (1 if split < rem else 0)

    # ------------------------------------------------------------ stream-K (kernels/scheduler.cuh, same integers)
    @property
    def sk_shares(self) -> tuple[int, int]:
        """(per, rem): every CTA's range holds per k-blocks, the first rem one more."""
        return divmod((self.tiles - self.tiles_dp) * self.k_blocks, self.sk_ctas)

    def sk_range(self, c: int) -> tuple[int, int]:
        """CTA c's range [begin, end) of the global stream-K k-block sequence."""
        per, rem = self.sk_shares
        begin = c * per + min(c, rem)
        return begin, begin + per + (1 if c < rem else 0)

    def sk_pieces(self, c: int) -> int:
        """How many pieces CTA c has: the tiles its range touches (0 if empty)."""
        begin, end = self.sk_range(c)
        return 0 if begin >= end else (end - 1) // self.k_blocks - begin // self.k_blocks + 1

    def sk_owner(self, x: int) -> int:
        """The CTA whose range holds global stream-K k-block x."""
        per, rem = self.sk_shares
        return x // (per + 1) if x < rem * (per + 1) else rem + (x - rem * (per + 1)) // per

    def sk_piece(self, v: int) -> tuple[int, int, int, int, int]:
        """Stream-K unit v = q * sk_ctas + c: CTA c's q-th piece (last tile first)."""
        q, c = divmod(v, self.sk_ctas)
        if q >= self.sk_pieces(c):
            return self.tiles_dp, 0, 1, 0, 0                    # empty unit
        begin, end = self.sk_range(c)
        kbs = self.k_blocks
        t = (end - 1) // kbs - q                               # stream-K tile index
        lo, hi = max(begin, t * kbs), min(end, (t + 1) * kbs)
        first = self.sk_owner(t * kbs)
        split, splits = self.sk_owner(lo) - first, self.sk_owner((t + 1) * kbs - 1) - first + 1
        return self.tiles_dp + t, split, splits, lo - t * kbs, hi - lo

    def time_in_rounds(self, sm_count: int) -> float:
        """The schedule's length in whole-K tile rounds on ``sm_count`` SMs
        (one unit per SM at a time, a split's time proportional to its K):
        the data-parallel waves, then the split units' rounds of K / splits
        (split-K only).  A model for choosing tiles, not a measurement."""
        if self.splits == 1:
            return float(cdiv(self.tiles, sm_count))
        return cdiv(self.tiles_dp, sm_count) + cdiv(self.units - self.tiles_dp, sm_count) / self.splits

    def spread(self, grid: int) -> bool:
        """Whether a cooperative kernel (kernels/gemm.cu, SPLIT_SPREAD) reduces
        this split-K decomposition spread over the splits (each split sums and
        stores a share of its tile, after all splits stored their partials)
        rather than in a serial chain: only when the splits of every tile run at
        once, each on its own CTA (cluster) of the ``grid``: all split units fit
        in one round (at most one per CTA), or they start at a round boundary
        (``tiles_dp`` a multiple of ``grid``) and ``splits`` divides ``grid``, so
        no tile's splits straddle two rounds.  Never stream-K."""
        if self.sk_ctas or self.splits < 2:
            return False
        return self.units - self.tiles_dp <= grid or (self.tiles_dp % grid == 0 and grid % self.splits == 0)

    def workspace_floats(self, block_n: int, spread: bool = False, consumers: int = CONSUMERS) -> int:
        """fp32 workspace: a 64 x block_n slot per (split tile, consumer), one per
        split of it when the reduction is spread."""
        return self.split_tiles * consumers * 64 * block_n * (self.splits if spread else 1)

    def flag_count(self, consumers: int = CONSUMERS) -> int:
        return self.split_tiles * consumers


MIN_SK_KBLOCKS = 4            # stream-K: every CTA's range holds at least this many k-blocks


def decompose_stream_k(tiles: int, k_blocks: int, sm_count: int) -> Decomposition:
    """Data-parallel for the full waves, stream-K over the tiles of the partial
    last wave (all tiles when there are fewer than SMs): each of the
    ``sm_count`` CTAs gets an equal share of their k-blocks, so no SM idles
    in the last wave.  Plain data-parallel when there is no partial wave or
    the shares would be under MIN_SK_KBLOCKS k-blocks."""
    full_waves, tail = divmod(tiles, sm_count)
    if tail == 0 or tail * k_blocks < MIN_SK_KBLOCKS * sm_count:
        return Decomposition(tiles, k_blocks, tiles, 1)
    probe = Decomposition(tiles, k_blocks, full_waves * sm_count, 1, sm_count)
    pieces = max(map(probe.sk_pieces, range(sm_count)))
    return Decomposition(tiles, k_blocks, full_waves * sm_count, pieces, sm_count)


# Without a full wave (every split unit resident, the spread reduction):
ONE_ROUND_MAX_SPLITS = 8      # up to this many splits (512x512x65536: 8 splits +10% to +31% vs 4),
FEW_TILES_MAX_SPLITS = 16     # or this many where all of them fit (at most 8 tiles on 132 SMs; tiles of 128
                              # columns or more: 8 128x64 tiles ran 16 splits 2-5% slower than 8),
ONE_ROUND_MIN_KBLOCKS = 16    # each split keeping >= 16 k-blocks (1024 of K for 16-bit inputs);
NARROW_ONE_ROUND_MIN_KBLOCKS = 64   # 128x64 tiles: 8 splits at most, of >= 64 k-blocks,
NARROW_FEW_TILES_MIN_KBLOCKS = 32   # or of >= 32 where 16 splits of every tile would fit (at most 8 tiles).
# H200, against the previous 4- and 8-split caps: 13 of 14 bf16 shapes faster (256x256x16384 +48%,
# 192x192x65536 +39%, 384x384x16384 +30%); 128x64 tiles with 8 splits of >= 32 k-blocks against 4:
# 48x1024x16384 +17% / +22% (bf16 / fp16).


def decompose(tiles: int, k_blocks: int, sm_count: int, splits: int | None = None,
              narrow: bool = False, chain: bool = False) -> Decomposition:
    """Data-parallel for full waves; split-K for the tiles of a partial last wave (or all tiles when there are fewer
    than SMs), with as many splits as fill the idle SMs, at least MIN_KBLOCKS_PER_SPLIT k-blocks each and at most
    TAIL_MAX_SPLITS (all of them resident in the last round, reduced spread by cooperative kernels) or MAX_SPLITS
    where the kernel reduces them in a serial ``chain`` (ping-pong); without a full wave (all splits in one round,
    reduced spread) up to ONE_ROUND_MAX_SPLITS (FEW_TILES_MAX_SPLITS where that many splits of every tile fit on
    the SMs) of at least ONE_ROUND_MIN_KBLOCKS; ``narrow`` (128x64 tiles, :func:`schedule`): up to
    ONE_ROUND_MAX_SPLITS of at least NARROW_ONE_ROUND_MIN_KBLOCKS (NARROW_FEW_TILES_MIN_KBLOCKS for at most 8
    tiles). ``splits`` forces split-K on every tile (tests, tuning).  Stream-K: :func:`decompose_stream_k`.

    Not split over several rounds: with one partial wave of more than half the SMs, 3 splits in 2 rounds measured
    between -7% and +21% against data-parallel on repeated runs, 4 splits in 3 rounds -14% and -16%, 6 in 5 rounds
    -29% (H200, bf16); 128x256 tiles split in one round beat both there."""
    if splits is not None:
        splits = max(1, min(splits, k_blocks))
        return Decomposition(tiles, k_blocks, tiles if splits == 1 else 0, splits)
    full_waves, tail = divmod(tiles, sm_count)
    if tail == 0:
        return Decomposition(tiles, k_blocks, tiles, 1)
    s = min(sm_count // tail, MAX_SPLITS if chain or full_waves == 0 else TAIL_MAX_SPLITS,
            k_blocks // MIN_KBLOCKS_PER_SPLIT)
    if full_waves == 0:
        few_tiles = tail * FEW_TILES_MAX_SPLITS <= sm_count        # 16 splits of every tile fit
        if narrow:
            cap = ONE_ROUND_MAX_SPLITS
            min_kb = NARROW_FEW_TILES_MIN_KBLOCKS if few_tiles else NARROW_ONE_ROUND_MIN_KBLOCKS
        else:
            cap = FEW_TILES_MAX_SPLITS if few_tiles else ONE_ROUND_MAX_SPLITS
            min_kb = ONE_ROUND_MIN_KBLOCKS
        s = max(s, min(sm_count // tail, cap, k_blocks // min_kb))
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
    consumers: int = CONSUMERS          # consumer warpgroups (block_m / 64): split-K slots per tile

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
            if kbn == 0:
                continue                    # a stream-K CTA with fewer pieces than the most: skipped
            tc = cta_tile(tile_coord(tile, self.tiles_m, self.tiles_n, self.group), rank, self.cluster)
            out.append((u, *tc, split, splits, kb0, kbn))
        return out

    def workspace_slot(self, tile: int, rank: int, consumer: int) -> int:
        """Split-K workspace slot (and flag) of (schedule tile, rank, consumer
        warpgroup) as the kernel computes it; ``tile`` >= tiles_dp."""
        return ((tile - self.decomposition.tiles_dp) * self.cluster_size + rank) * self.consumers + consumer

    def tiles_of(self, cta: int) -> list[tuple[int, int, int]]:
        return [tile_coord(t, self.tiles_m, self.tiles_n, self.group)
                for t in range(cta, self.tiles, self.grid)]


def schedule(m: int, n: int, block_m: int, block_n: int, sm_count: int, group: int | None = None,
             batches: int = 1, k: int | None = None, block_k: int = 64, splits: int | None = None,
             cluster: tuple[int, int] = (1, 1), stream_k: bool = False, chain: bool = False) -> Schedule:
    """Tiles, raster group, decomposition (when ``k`` is given; ``chain``:
    the kernel reduces split-K serially, see :func:`decompose`) and the
    persistent grid: min(#SMs, #units).  With a ``cluster`` of (2, 1) or
    (1, 2) the tiles are pairs of kernel tiles and ``sm_count`` is the number
    of clusters that can be resident (the grid then counts clusters)."""
    cm, cn = cluster
    tiles_m, tiles_n = cdiv(cdiv(m, block_m), cm), cdiv(cdiv(n, block_n), cn)
    if group is None:
        group = default_group(tiles_m, tiles_n)
    group = max(1, min(group, tiles_m))
    tiles = batches * tiles_m * tiles_n
    if stream_k and (splits is not None or cluster != (1, 1)):
        raise ValueError("stream-K takes neither forced splits nor clusters")
    if k is None:
        dec = None
    elif stream_k:
        dec = decompose_stream_k(tiles, max(1, cdiv(k, block_k)), sm_count)
    else:
        dec = decompose(tiles, max(1, cdiv(k, block_k)), sm_count, splits, narrow=block_n < 128, chain=chain)
    units = dec.units if dec is not None else tiles
    return Schedule(tiles_m, tiles_n, group, min(sm_count, units), batches, dec, (cm, cn), block_m // 64)


def default_group(tiles_m: int, tiles_n: int) -> int:
    """Tile-rows per raster group: enough that the CTAs running together share A and B blocks in L2 (groups of 4, 8
    and 16 measured within noise of each other at 4096^3 and 8192^3)."""
    return 8
