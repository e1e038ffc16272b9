"""GPU: the fp32 column-major epilogue: swap-AB with fp32 output
(the kernel's D column-major, its chunks stored as two 32-row boxes) and
column-major fp32 C (loaded as two boxes), for 16-bit, tf32 and per-tensor
fp8 inputs; kernel M ragged against the 32-row boxes (a second box partly or
wholly past M), ping-pong, split-K (spread and chain), 192-row tiles, C in
either order with bias and activation.  Float64 reference, NaN-poisoned
outputs, reruns bit-identical; the plan must run the configuration asked for."""
import pytest

import helpers

pytestmark = pytest.mark.gpu

F32_TOL = 2e-5          # 16-bit inputs, fp32 accumulation and output


def _operands(cp, m, n, k, dt, layout, seed):
    a = (helpers.rand(cp, (m, k), dt, seed) if layout[0] == "T"
         else helpers.rand(cp, (k, m + (-m) % 8), dt, seed)[:, :m].T)
    b = (helpers.rand(cp, (k, n + (-n) % 8), dt, seed + 1)[:, :n] if layout[1] == "T"
         else helpers.rand(cp, (n, k), dt, seed + 1).T)
    return a, b


def _c(cp, m, n, order, seed):
    """fp32 C, row- or column-major, rows padded to 16 bytes for TMA."""
    if order == "row":
        return helpers.rand(cp, (m, n + (-n) % 4), cp.float32, seed)[:, :n]
    return helpers.rand(cp, (n, m + (-m) % 4), cp.float32, seed)[:, :m].T


def _run_twice(cp, rawcoop, a, b, shape, **kw):
    """The plan fp32 output gets, and its output (helpers.run_twice)."""
    from rawcoop.gemm import _plan_for
    plan = _plan_for(a, b, out_dtype=cp.float32, **kw)
    return plan, helpers.run_twice(cp, rawcoop, a, b, shape, cp.float32, out_dtype=cp.float32, **kw)


@pytest.mark.parametrize("c_order", [None, "row", "col"])
@pytest.mark.parametrize("m,n,k,layout,kw", [
    (48, 1000, 520, "TN", {}),                          # kernel M 1000: the last half's second box holds 8 rows
    (200, 40, 1000, "NN", {}),                          # kernel M 40: one tile row, second box rows 32-39
    (300, 1016, 2000, "NT", dict(_splits=3)),          # split-K, kernel M 1016 = 31 x 32 + 24
    (64, 4000, 8192, "TT", dict(_splits=4, _block_n=64)),
    (500, 712, 768, "TN", dict(_pingpong=True, _block_n=128)),
    (700, 1100, 1504, "TN", dict(_block_m=192)),       # three consumers; kernel M 1100 = 5 x 192 + 140
], ids=str)
def test_swap_fp32_out(m, n, k, layout, kw, c_order):
    """Forced swap-AB with fp32 output: the kernel's D (and a row-major user
    C) column-major, a column-major user C row-major; bias along the
    kernel's rows, silu."""
    import cupy as cp
    import rawcoop
    from rawcoop._reference import activation as act64
    dt = helpers.dtype("bfloat16")
    a, b = _operands(cp, m, n, k, dt, layout, 61)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    extra = dict(_swap=True, **kw)
    if c_order:
        c = _c(cp, m, n, c_order, 63)
        bias = helpers.rand(cp, (n,), cp.float32, 64)
        extra.update(c=c, alpha=0.75, beta=-0.5, bias=bias, activation="silu")
        ref = act64(cp, 0.75 * ref - 0.5 * c.astype(cp.float64) + bias, "silu")
    plan, d = _run_twice(cp, rawcoop, a, b, (m, n), **extra)
    cfg = plan.cfg
    assert cfg.d_colmajor and cfg.out_type == 2, cfg.spec.label
    if c_order:
        assert cfg.c_colmajor == (c_order == "row") and cfg.bias_on_rows
    helpers.assert_rel_err(cp, d, ref, F32_TOL)


@pytest.mark.parametrize("m,n,k,kw", [
    (1000, 300, 640, {}), (1000, 300, 640, dict(_pingpong=True, _block_n=128)), (330, 900, 3000, dict(_splits=3)),
    (1000, 900, 2000, dict(_block_m=192)), (40, 2000, 1000, {}),
], ids=str)
def test_colmajor_fp32_c_unswapped(m, n, k, kw):
    """A column-major fp32 C on an un-swapped kernel: two 32-row boxes per C
    chunk, the second past M where M is ragged."""
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("float16")
    a, b = _operands(cp, m, n, k, dt, "TN", 71)
    c = _c(cp, m, n, "col", 73)
    plan, d = _run_twice(cp, rawcoop, a, b, (m, n), c=c, beta=2.0, _swap=False, **kw)
    assert plan.cfg.c_colmajor and not plan.cfg.d_colmajor, plan.cfg.spec.label
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) + 2.0 * c.astype(cp.float64),
                               F32_TOL)


@pytest.mark.parametrize("kind", ["tf32", "e4m3"])
@pytest.mark.parametrize("m,n,k", [(16, 4000, 1024), (600, 1000, 2048)], ids=str)
def test_swap_fp32_out_tf32_fp8(kind, m, n, k):
    """tf32 and per-tensor fp8 (K-major operands stay K-major when swapped)
    with fp32 output through the column-major epilogue, C row-major."""
    import cupy as cp
    import rawcoop
    from helpers.lowp import lowp_operands
    a, b, a64, b64, extra, tol = lowp_operands(cp, kind, m, n, k, 81, (0.5, 2.0))
    c = _c(cp, m, n, "row", 83)
    plan, d = _run_twice(cp, rawcoop, a, b, (m, n), c=c, beta=0.5, _swap=True, **extra)
    assert plan.cfg.d_colmajor and plan.cfg.c_colmajor, plan.cfg.spec.label
    helpers.assert_rel_err(cp, d, a64 @ b64 + 0.5 * c.astype(cp.float64), tol["float32"])
