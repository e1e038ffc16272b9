"""GPU: one tile row (M <= 128) of 128x64 tiles, not swapped (forced), with A's TMA box trimmed to
round8(M) lines when A is K-major, without a cluster and in 1x2 clusters (A's half boxes), and the
automatic plan (the planner's choice, often swap-AB here): correct against float64 for every 16-bit
layout, ragged M/N/K, an epilogue with C, and fp8 e4m3; outputs are poisoned first."""
import numpy as np
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 7e-4, "bfloat16": 5e-3}


def _runs(a, b, **kw):
    """The forced options of the runs: 128x64 tiles not swapped, without a cluster and in 1x2 clusters,
    then none (the automatic plan) where it is another configuration (helpers.plan.variant_runs)."""
    from helpers.plan import variant_runs
    plain, paired = (dict(_block_n=64, _swap=False, _cluster=cluster) for cluster in (1, (1, 2)))
    return variant_runs(a, b, plain, paired, **kw)


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k,layout", [
    (96, 8192, 4096, "TN"), (65, 8200, 1000, "TN"), (120, 7600, 776, "TN"), (128, 8192, 2048, "TN"),
    (104, 8192, 1000, "NN"), (96, 8000, 1000, "NT"), (112, 8192, 520, "TT"),
    (64, 8192, 4096, "TN"), (16, 8192, 2048, "TN"), (1, 8192, 1000, "TN"), (40, 8000, 776, "NN"),
    (8, 8192, 520, "NT"), (33, 7600, 1000, "TT"),
])
def test_one_row_narrow_tiles(m, n, k, layout, dt_name):
    import cupy as cp
    import rawcoop
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, 3)
    for kw in _runs(a, b):
        d = cp.full((m, n), float("nan"), dtype=cp.float32).astype(dt)
        rawcoop.gemm(a, b, out=d, **kw)
        helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


def test_one_row_narrow_tiles_with_c_fp32_out():
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a, b = helpers.layout_operands(cp, 100, 8192, 1496, dt, "TN", 5)
    c = helpers.rand(cp, (100, 8192), cp.float32, 9)
    ref = 0.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 1.5 * c
    for kw in _runs(a, b, c=c, beta=-1.5, out_dtype=cp.float32):
        d = cp.full((100, 8192), float("nan"), dtype=cp.float32)
        rawcoop.gemm(a, b, c=c, alpha=0.5, beta=-1.5, out=d, out_dtype=cp.float32, **kw)
        helpers.assert_rel_err(cp, d, ref, 2e-5)


@pytest.mark.parametrize("m", [1, 16, 64, 96, 100, 128])
def test_one_row_narrow_tiles_fp8(m):
    import cupy as cp
    import ml_dtypes
    import rawcoop
    n, k = 8192, 2048
    rng = np.random.default_rng(m)
    a8 = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
    b8 = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn)
    a = cp.asarray(a8.view(np.uint8))
    bt = cp.asarray(b8.view(np.uint8))
    kw = dict(a_format="e4m3", b_format="e4m3", scale_a=0.5, scale_b=3.0)
    bf = np.dtype(ml_dtypes.bfloat16)
    ref = 1.5 * (cp.asarray(a8.astype(np.float64)) @ cp.asarray(b8.astype(np.float64)).T)
    for forced in _runs(a, bt.T, **kw):
        d = cp.full((m, n), float("nan"), dtype=cp.float32).astype(bf)
        rawcoop.gemm(a, bt.T, out=d, **kw, **forced)
        helpers.assert_rel_err(cp, d, ref, 5e-3)
