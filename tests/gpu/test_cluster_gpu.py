"""GPU: clusters of 2 CTAs (forced by the private ``_cluster`` option; the
planner may also choose them).  2x1 (``_cluster=2`` or ``(2, 1)``): CTA pairs on
vertically adjacent tiles multicast the shared B tile.  1x2
(``_cluster=(1, 2)``): pairs on horizontally adjacent tiles (tile columns 2j,
2j+1) multicast the shared A tile; an odd number of tile columns leaves a
ghost column that runs the protocol with zero-filled loads and clipped
stores.  Both get the same matrix: 4 layouts x tile widths x shapes with
ghosts, split-K, C/bias/activation, batches, bit-identical reruns, ping-pong."""
import numpy as np  # noqa: F401
import pytest

import helpers

from helpers.lowp import fp8_pair

pytestmark = pytest.mark.gpu


_dt = helpers.dtype
_rand = helpers.rand


def _check(cp, d, ref, tol):
    helpers.assert_rel_err(cp, d, ref, tol)


@pytest.mark.parametrize("block_n", [128, 256])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("shape", [(1000, 1304, 520), (384, 256, 64), (130, 2000, 1000), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cluster_multicast_layouts(block_n, layout, shape):
    import cupy as cp
    import rawcoop
    m, n, k = shape          # 1000 rows -> 8 tiles (4 pairs); 130 rows -> 2 tiles; 384 -> 3 tiles (a ghost)
    dt = _dt("bfloat16")
    a = _rand(cp, (m, k), dt, 1) if layout[0] == "T" else _rand(cp, (k, m + (-m) % 8), dt, 1)[:, :m].T
    b = _rand(cp, (n, k), dt, 2).T if layout[1] == "N" else _rand(cp, (k, n), dt, 2)
    out = cp.full((m, n), cp.nan, dtype=cp.float32).astype(dt)
    rawcoop.gemm(a, b, out=out, _cluster=2, _block_n=block_n, _swap=False)
    _check(cp, out, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)


def _split_k_epilogue_problem(cp):
    """fp16 a (2, 600, 4096), b (2, 4096, 520), C and an fp32 bias, and the
    float64 reference of relu(a @ b + 0.5 C + bias)."""
    dt = _dt("float16")
    a, b = _rand(cp, (2, 600, 4096), dt, 3), _rand(cp, (2, 4096, 520), dt, 4)
    c = _rand(cp, (2, 600, 520), dt, 5)
    bias = _rand(cp, (520,), cp.float32, 6)
    ref = a.astype(cp.float64) @ b.astype(cp.float64) + 0.5 * c.astype(cp.float64) + bias
    return a, b, c, bias, cp.maximum(ref, 0)


def test_cluster_with_split_k_epilogue_and_batch():
    import cupy as cp
    import rawcoop
    a, b, c, bias, ref = _split_k_epilogue_problem(cp)
    for splits in (None, 2, 3):
        d = rawcoop.gemm(a, b, c=c, beta=0.5, bias=bias, activation="relu", _cluster=2, _splits=splits)
        _check(cp, d, ref, 7e-4)
        again = rawcoop.gemm(a, b, c=c, beta=0.5, bias=bias, activation="relu", _cluster=2, _splits=splits)
        assert cp.array_equal(d.view(cp.uint16), again.view(cp.uint16))


def test_cluster_rejects_narrow_tiles():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    with pytest.raises(ValueError, match="_cluster"):
        rawcoop.gemm(_rand(cp, (256, 64), dt, 1), _rand(cp, (64, 64), dt, 2), _cluster=2, _block_n=64)


# ---------------------------------------------------------------- 1x2: A multicast
# Tile columns for 128 / 256-wide tiles: 1304 -> 11 / 6, 256 -> 2 / 1, 130 -> 2 / 1, 384 -> 3 / 2,
# 4096 -> 32 / 16: a ghost column (odd count) for both widths, and even counts.
CN_SHAPES = [(1000, 1304, 520), (384, 256, 64), (2000, 130, 1000), (520, 384, 300), (4096, 4096, 4096)]


def _operands(cp, layout, m, n, k, dt, batch=None, seeds=(1, 2)):
    """a (M, K) row-major ("T") or column-major ("N"), b (K, N) column-major
    ("N") or row-major ("T"), contiguous dimensions padded to 8 elements."""
    lead = () if batch is None else (batch,)

    def padded(rows, cols, seed):
        return _rand(cp, lead + (rows, cols + (-cols) % 8), dt, seed)[..., :cols]
    a = padded(m, k, seeds[0]) if layout[0] == "T" else padded(k, m, seeds[0]).swapaxes(-1, -2)
    b = padded(n, k, seeds[1]).swapaxes(-1, -2) if layout[1] == "N" else padded(k, n, seeds[1])
    return a, b


@pytest.mark.parametrize("block_n", [128, 256])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("shape", CN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_cluster_n_multicast_layouts(block_n, layout, shape):
    """K-major A (TN, TT): each CTA loads 64 of the 128 rows; M-major A (NN,
    NT): one 64-wide atom each.  D starts as NaN, so a missed tile shows."""
    import cupy as cp
    import rawcoop
    m, n, k = shape
    dt = _dt("bfloat16")
    a, b = _operands(cp, layout, m, n, k, dt)
    out = cp.full((m, n + (-n) % 8), cp.nan, dtype=cp.float32).astype(dt)[:, :n]
    rawcoop.gemm(a, b, out=out, _cluster=(1, 2), _block_n=block_n, _pingpong=False, _swap=False)
    _check(cp, out, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)


@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("kw", [dict(_block_n=128, _pingpong=False, _splits=1),
                                dict(_block_n=256, _pingpong=False, _splits=1),
                                dict(_block_n=128, _pingpong=True, _splits=1),
                                dict(_block_n=128, _pingpong=False, _splits=3),
                                dict(_block_n=128, _pingpong=True, _splits=2)],
                         ids=["coop128", "coop256", "pingpong", "coop128-split3", "pingpong-split2"])
def test_cluster_n_bit_identical_to_no_cluster(layout, kw):
    """The same tiles, k-ranges and reduction order with and without the
    cluster: a 1x2 (and a 2x1) result equals the unclustered one bit for bit
    (only where the A tile comes from differs).  Tile height and orientation
    are forced too, so that both runs have the same tiles."""
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a, b = _operands(cp, layout, 1000, 1304, 2000, dt, seeds=(7, 8))
    kw = dict(kw, _block_m=128, _swap=False)
    plain = rawcoop.gemm(a, b, **kw)
    for cluster in ((1, 2), (2, 1)):
        d = rawcoop.gemm(a, b, _cluster=cluster, **kw)
        assert cp.array_equal(d.view(cp.uint16), plain.view(cp.uint16)), f"_cluster={cluster} {kw}"
    _check(cp, plain, a.astype(cp.float64) @ b.astype(cp.float64), 7e-4)


def test_cluster_two_means_two_by_one():
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    a, b = _rand(cp, (1000, 520), dt, 9), _rand(cp, (520, 1304), dt, 10)
    d2 = rawcoop.gemm(a, b, _cluster=2, _block_n=128)
    d21 = rawcoop.gemm(a, b, _cluster=(2, 1), _block_n=128)
    assert cp.array_equal(d2.view(cp.uint16), d21.view(cp.uint16))


def test_cluster_n_ghost_column_stores_nothing_outside():
    """N = 1304 with 128-wide tiles: 11 tile columns, the ghost column 11
    (columns 1408..1535) lies past N.  out is a view of a wider buffer: the
    columns right of N must keep their sentinel."""
    import cupy as cp
    import rawcoop
    m, n, k = 1000, 1304, 520
    dt = _dt("bfloat16")
    a, b = _rand(cp, (m, k), dt, 11), _rand(cp, (k, n), dt, 12)
    for kw in (dict(_block_n=128), dict(_block_n=128, _pingpong=True), dict(_block_n=128, _splits=2),
               dict(_block_n=256)):
        big = cp.full((m, n + 256), 7.0, dtype=cp.float32).astype(dt)
        rawcoop.gemm(a, b, out=big[:, :n], _cluster=(1, 2), _swap=False, **kw)
        assert bool(cp.all(big[:, n:].astype(cp.float32) == 7.0)), f"store past N with {kw}"
        _check(cp, big[:, :n], a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)


def test_cluster_n_with_split_k_epilogue_and_batch():
    """600 x 520: 128-wide tiles give 5 tile columns (a ghost column), with C,
    bias, relu, a batch of 2, the planner's decomposition and forced splits;
    reruns are bit for bit identical."""
    import cupy as cp
    import rawcoop
    a, b, c, bias, ref = _split_k_epilogue_problem(cp)
    for pingpong in (False, True):
        for splits in (None, 2, 3):
            kw = dict(c=c, beta=0.5, bias=bias, activation="relu", _cluster=(1, 2), _splits=splits,
                      _pingpong=pingpong, _block_n=128, _swap=False)
            d = rawcoop.gemm(a, b, **kw)
            _check(cp, d, ref, 7e-4)
            again = rawcoop.gemm(a, b, **kw)
            assert cp.array_equal(d.view(cp.uint16), again.view(cp.uint16))


@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_cluster_n_epilogue_variants(layout):
    """Column-major C, bf16 bias, gelu into fp32 and into bf16; broadcast B
    over a batch of 3; 256-wide tiles (ghost column at N = 300: 2 tiles, even;
    N = 700: 3 tiles, odd)."""
    import cupy as cp
    import rawcoop
    from rawcoop._reference import activation as activation64
    dt = _dt("bfloat16")
    for n in (300, 700):
        a, b = _operands(cp, layout, 777, n, 1000, dt, batch=3, seeds=(13, 14))
        b = b[0]                                          # shared by the batch
        bias = _rand(cp, (n,), dt, 15)
        for out_name in ("float32", "bfloat16"):
            odt = _dt(out_name)
            if out_name == "float32":                     # a float32 C must be row-major
                c = _rand(cp, (3, 777, n + (-n) % 8), odt, 16)[..., :n]
            else:                                         # column-major C (lines of 777 padded to 784)
                c = _rand(cp, (3, n, 784), odt, 16)[..., :777].swapaxes(-1, -2)
            ref = activation64(cp, 1.5 * (a.astype(cp.float64) @ b.astype(cp.float64))
                               - 0.25 * c.astype(cp.float64) + bias.astype(cp.float64), "gelu")
            for block_n in (128, 256):
                d = rawcoop.gemm(a, b, c=c, alpha=1.5, beta=-0.25, bias=bias, activation="gelu",
                                 out_dtype=odt, _cluster=(1, 2), _block_n=block_n, _swap=False)
                _check(cp, d, ref, 5e-3)


@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("shape", [(1000, 1304, 520), (4096, 4096, 1024), (129, 257, 65), (8, 8, 8)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cluster_n_pingpong(layout, shape):
    """Ping-pong with 1x2: the empty barriers count 4 warps x 2 CTAs; both
    CTAs walk the same units, so the same consumer handles a unit in both.
    4096 x 4096 x 1024: many units per CTA (both consumers, every ring
    position); 8 x 8 x 8: one unit, a ghost column, consumer 1 idle."""
    import cupy as cp
    import rawcoop
    m, n, k = shape
    dt = _dt("bfloat16")
    a, b = _operands(cp, layout, m, n, k, dt, seeds=(17, 18))
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    first = rawcoop.gemm(a, b, _cluster=(1, 2), _pingpong=True, _block_n=128, _swap=False)
    _check(cp, first, ref, 5e-3)
    for _ in range(3):
        again = rawcoop.gemm(a, b, _cluster=(1, 2), _pingpong=True, _block_n=128, _swap=False)
        assert cp.array_equal(first.view(cp.uint16), again.view(cp.uint16))


def test_cluster_n_narrow_tiles_and_swap_ab():
    """1x2 splits A, so 64-wide tiles work too: the swap-AB small-M case
    (kernel N = M = 48: one tile column, always a ghost), and a plain 64-wide
    problem with an odd number of tile columns."""
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    a, b = _rand(cp, (48, 2000), dt, 19), _rand(cp, (2000, 1000), dt, 20)
    d = rawcoop.gemm(a, b, _cluster=(1, 2), _block_n=64, _swap=True)
    _check(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)
    a, b = _rand(cp, (700, 504), dt, 21), _rand(cp, (504, 320), dt, 22)     # 320 / 64 = 5 columns
    d = rawcoop.gemm(a, b, _cluster=(1, 2), _block_n=64, _swap=False)
    _check(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)


def test_cluster_option_rejects_bad_values():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a, b = _rand(cp, (256, 64), dt, 1), _rand(cp, (64, 256), dt, 2)
    for bad in ((2, 2), 3, (1, 4), "2"):
        with pytest.raises(ValueError, match="_cluster"):
            rawcoop.gemm(a, b, _cluster=bad)
    with pytest.raises(ValueError, match="_cluster"):
        rawcoop.gemm(a, b, _cluster=(2, 1), _block_n=64)


def _same_tiles_unclustered(plan):
    """The forced options that run ``plan``'s tiles, consumers and splits without a cluster."""
    cfg = plan.cfg
    return dict(_cluster=1, _block_n=cfg.block_n, _block_m=cfg.block_m, _pingpong=cfg.pingpong,
                _swap=cfg.d_colmajor, _splits=plan.decomposition.splits)


def _spread(plan):
    """Whether the kernel reduces the plan's split-K spread over the splits (bit 3 of its batch mask)."""
    return bool(plan.scalars[7] & 8)


# Long K, few tiles: one round of split units, clustered (forced, with the cooperative 128x128 tile).
LONG_K_CLUSTERS = [((500, 500, 40000), False, (1, 2), 4), ((512, 1000, 24576), True, (1, 2), 3),
                   ((256, 256, 65536), False, (1, 2), 8), ((512, 384, 65536), False, (2, 1), 4),
                   ((1000, 296, 40000), True, (2, 1), 4)]


@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("shape, epilogue, cluster, splits", LONG_K_CLUSTERS, ids=str)
def test_cluster_split_k_one_round(layout, shape, epilogue, cluster, splits):
    """Long-K split-K in clusters (forced: ``_cluster``, ``_splits``, 128x128 cooperative tiles,
    not swapped), every split unit in one round: the output (poisoned with NaN first) matches the float64
    reference, reruns are bit-identical, and they equal the same tiles and splits without a cluster bit
    for bit (the same split ranges and reduction order; only which CTA loads the shared operand
    changes)."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    m, n, k = shape
    dt = _dt("bfloat16")
    a = _rand(cp, (m, k), dt, 31) if layout[0] == "T" else _rand(cp, (k, m + (-m) % 8), dt, 31)[:, :m].T
    b = _rand(cp, (n, k), dt, 32).T if layout[1] == "N" else _rand(cp, (k, n + (-n) % 8), dt, 32)[:, :n]
    kw, ref = {}, a.astype(cp.float64) @ b.astype(cp.float64)
    if epilogue:
        c, bias = _rand(cp, (m, n), dt, 33), _rand(cp, (n,), cp.float32, 34)
        kw = dict(c=c, beta=0.5, bias=bias, activation="relu")
        ref = cp.maximum(ref + 0.5 * c.astype(cp.float64) + bias, 0)
    forced = dict(_cluster=cluster, _splits=splits, _block_n=128, _pingpong=False, _swap=False)
    plan = _plan_for(a, b, **kw, **forced)
    assert plan.cfg.cluster == cluster and plan.decomposition.splits == splits and plan.decomposition.tiles_dp == 0
    plain = _same_tiles_unclustered(plan)
    assert _spread(plan) and _spread(_plan_for(a, b, **kw, **plain)), "both should reduce spread (one round)"

    def run(**extra):
        d = cp.full((m, n), cp.nan, dtype=cp.float32).astype(dt)
        rawcoop.gemm(a, b, out=d, **kw, **extra)
        return d

    d, again, unclustered = run(**forced), run(**forced), run(**plain)
    _check(cp, d, ref, 5e-3)
    assert cp.array_equal(d.view(cp.uint16), again.view(cp.uint16)), "clustered split-K is not deterministic"
    assert cp.array_equal(d.view(cp.uint16), unclustered.view(cp.uint16)), "the cluster changed the sums"


@pytest.mark.parametrize("shape, cluster, splits", [((512, 512, 32768), (1, 2), 4), ((512, 384, 32768), (2, 1), 4),
                                                    ((500, 272, 40000), (2, 1), 8)], ids=str)
def test_cluster_split_k_one_round_fp8(shape, cluster, splits):
    """Per-tensor fp8 (e4m3 x e5m2 too), long-K split-K in clusters (forced as above): the output
    (NaN-poisoned) matches the float64 reference of the dequantised inputs, and equals the same tiles and
    splits without a cluster bit for bit."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    m, n, k = shape
    forced = dict(_cluster=cluster, _splits=splits, _block_n=128, _pingpong=False, _swap=False)
    for fb in ("e4m3", "e5m2"):
        a, b, a64, b64 = fp8_pair(cp, m, n, k, "e4m3", fb, 41)
        ref = 0.5 * (a64 @ b64)
        plan = _plan_for(a, b, scale_a=0.25, scale_b=2.0, **forced)
        assert plan.cfg.cluster == cluster and plan.decomposition.splits == splits and plan.decomposition.tiles_dp == 0
        plain = _same_tiles_unclustered(plan)
        assert _spread(plan) and _spread(_plan_for(a, b, scale_a=0.25, scale_b=2.0, **plain))

        def run(**extra):
            d = cp.full((m, n), cp.nan, dtype=cp.float32).astype(_dt("bfloat16"))
            rawcoop.gemm(a, b, scale_a=0.25, scale_b=2.0, out=d, **extra)
            return d

        d, unclustered = run(**forced), run(**plain)
        # fp8 wgmma accumulation (~2^-14 per k32 step, random signs: ~2e-3 at K = 32768) + bf16 rounding
        _check(cp, d, ref, 1e-2)
        assert cp.array_equal(d.view(cp.uint16), unclustered.view(cp.uint16)), "the cluster changed the sums"
