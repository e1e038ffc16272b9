"""GPU: the ping-pong consumer schedule (``_pingpong=True``): the two consumer
warpgroups alternate units of the CTA's sequence, each owning both 64-row
halves of its tile, so one's epilogue overlaps the other's mainloop.  Every
path that depends on which consumer owns which rows is exercised: the four
layouts, ragged and tiny shapes (a CTA with one unit leaves consumer 1 idle),
odd unit counts per CTA, split-K (flags per tile half, reduction by one
consumer), C loads by two loader warps, bias on rows/columns, swap-AB with a
column-major D, batches and clusters of 2."""
import pytest

import helpers
from rawcoop._reference import activation as activation64

pytestmark = pytest.mark.gpu

_dt = helpers.dtype
_rand = helpers.rand
_TOL = {"bfloat16": 5e-3, "float16": 7e-4}


def _padded(cp, lead, rows, cols, dt, seed):
    """rows x cols with the contiguous dimension padded to 8 elements (TMA's
    16-byte pitch rule), as a view."""
    return _rand(cp, lead + (rows, cols + (-cols) % 8), dt, seed)[..., :cols]


def _operands(cp, layout, m, n, k, dt, batch=None):
    lead = () if batch is None else (batch,)
    a = _padded(cp, lead, m, k, dt, 1) if layout[0] == "T" else _padded(cp, lead, k, m, dt, 1).swapaxes(-1, -2)
    b = _padded(cp, lead, n, k, dt, 2).swapaxes(-1, -2) if layout[1] == "N" else _padded(cp, lead, k, n, dt, 2)
    return a, b


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("shape", [(1000, 1304, 520), (128, 128, 64), (129, 257, 65), (4096, 4096, 4096),
                                   (2000, 300, 3000), (8, 8, 8)], ids=lambda s: "x".join(map(str, s)))
def test_pingpong_layouts(dtype, layout, shape):
    import cupy as cp
    import rawcoop
    m, n, k = shape
    dt = _dt(dtype)
    a, b = _operands(cp, layout, m, n, k, dt)
    out = cp.full((m, n + (-n) % 8), cp.nan, dtype=cp.float32).astype(dt)[:, :n]
    rawcoop.gemm(a, b, out=out, _pingpong=True, _block_n=128, _swap=False)
    helpers.assert_rel_err(cp, out, a.astype(cp.float64) @ b.astype(cp.float64), _TOL[dtype])


@pytest.mark.parametrize("splits", [2, 3, 4])
@pytest.mark.parametrize("shape", [(256, 256, 8192), (1000, 520, 4096), (384, 2048, 2048)],
                         ids=lambda s: "x".join(map(str, s)))
def test_pingpong_split_k_bit_identical(splits, shape):
    import cupy as cp
    import rawcoop
    m, n, k = shape
    dt = _dt("bfloat16")
    a, b = _rand(cp, (m, k), dt, 3), _rand(cp, (k, n), dt, 4)
    first = rawcoop.gemm(a, b, _pingpong=True, _block_n=128, _splits=splits)
    helpers.assert_rel_err(cp, first, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)
    for _ in range(9):
        again = rawcoop.gemm(a, b, _pingpong=True, _block_n=128, _splits=splits)
        assert cp.array_equal(first.view(cp.uint16), again.view(cp.uint16))


@pytest.mark.parametrize("c_order", ["C", "F"])
@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_pingpong_epilogue(c_order, out_dtype, activation):
    import cupy as cp
    import rawcoop
    m, n, k = 712, 1000, 768
    dt = _dt("float16")
    a, b = _rand(cp, (2, m, k), dt, 5), _rand(cp, (k, n), dt, 6)
    c = cp.asarray(_rand(cp, (2, m, n), cp.dtype(out_dtype), 7), order=c_order)
    if c_order == "F":
        c = cp.ascontiguousarray(c.swapaxes(-1, -2)).swapaxes(-1, -2)
    bias = _rand(cp, (n,), cp.float32, 8)
    ref = 0.75 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64) + bias
    ref = activation64(cp, ref, activation)
    for splits in (None, 2):
        d = rawcoop.gemm(a, b, c=c, alpha=0.75, beta=-0.5, bias=bias, activation=activation,
                         out_dtype=out_dtype, _pingpong=True, _block_n=128, _splits=splits)
        helpers.assert_rel_err(cp, d, ref, 1e-3)


@pytest.mark.parametrize("m", [1, 17, 64])
def test_pingpong_swap_ab_column_major_d(m):
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    a, b = _rand(cp, (m, 4096), dt, 9), _rand(cp, (4096, 3000), dt, 10)
    bias = _rand(cp, (3000,), cp.float32, 11)
    for splits in (None, 1, 4):
        d = rawcoop.gemm(a, b, bias=bias, _pingpong=True, _swap=True, _splits=splits)
        helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) + bias, 5e-3)


@pytest.mark.parametrize("dtype,layout,shape", [
    ("bfloat16", "TN", (1000, 5700, 2000)), ("float16", "NN", (2750, 2300, 1008)),
    ("bfloat16", "NT", (8190, 640, 1000)), ("float16", "TT", (1400, 4140, 1036))],
    ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_pingpong_one_to_two_waves_short_k(dtype, layout, shape):
    """Between one and two waves of 128x256 tiles with the second 20-80% full
    and K <= 2048: ping-pong 128x128 tiles, not swapped (forced), and the
    automatic plan (the planner's choice), right against float64 with a
    NaN-poisoned output, deterministic; with C, a bias and an activation
    too (helpers.plan.variant_runs).  The operands' padded pitches are
    multiples of 32 bytes."""
    import cupy as cp
    import rawcoop
    from helpers.plan import variant_runs
    m, n, k = shape
    dt = _dt(dtype)
    a, b = _operands(cp, layout, m, n, k, dt)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    c = _padded(cp, (), m, n, dt, 5)             # TMA: C's rows 16-byte aligned
    bias = _rand(cp, (n,), cp.float32, 6)
    epilogue = dict(c=c, alpha=0.5, beta=-1.25, bias=bias, activation="relu")
    pingpong = dict(_pingpong=True, _block_m=128, _block_n=128, _swap=False)
    with_epilogue = activation64(cp, 0.5 * ref - 1.25 * c.astype(cp.float64) + bias, "relu")
    for kw, want in (({}, ref), (epilogue, with_epilogue)):
        for forced in variant_runs(a, b, pingpong, **kw):
            d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw, **forced)
            helpers.assert_rel_err(cp, d, want, _TOL[dtype])


def test_pingpong_cluster_pairs():
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    for layout in ("TN", "NT"):
        a, b = _operands(cp, layout, 1000, 1304, 520, dt)
        d = rawcoop.gemm(a, b, _pingpong=True, _cluster=2, _block_n=128)
        helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)


def test_pingpong_rejects_wide_tiles():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    with pytest.raises(ValueError, match="_pingpong"):
        rawcoop.gemm(_rand(cp, (256, 64), dt, 1), _rand(cp, (64, 512), dt, 2), _pingpong=True, _block_n=256)


@pytest.mark.parametrize("kw", [dict(_pingpong=True, _block_n=128), dict(_pingpong=True, _block_n=128, _splits=1),
                                dict(_pingpong=False, _block_n=128), dict(_pingpong=False, _block_n=256)],
                         ids=["pingpong", "pingpong-dp", "coop128", "coop256"])
def test_last_tile_row_half_empty_many_units(kw):
    """M = 3000: the last tile row's second 64-row half is below M, so its
    chunks store nothing.  With many units per CTA that once let the next
    chunk rewrite a staging buffer while its TMA store still read it (wrong,
    run-to-run different values in the last tile row's first half).  128-row
    tiles, not swapped (forced)."""
    import cupy as cp
    import rawcoop
    kw = dict(kw, _block_m=128, _swap=False)
    dt = _dt("bfloat16")
    a, b = _rand(cp, (3000, 1000), dt, 21), _rand(cp, (1000, 5000), dt, 22)
    first = rawcoop.gemm(a, b, **kw)
    helpers.assert_rel_err(cp, first, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)
    for _ in range(4):
        assert cp.array_equal(first.view(cp.uint16), rawcoop.gemm(a, b, **kw).view(cp.uint16))
