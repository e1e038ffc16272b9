"""GPU: large problems whose tile grid over N x M quantises into fewer waves
than over M x N, run swap-AB with 128-row tiles (forced: the kernel's D
column-major) and as the automatic plan (the planner's choice, swapped or
not): fp16/bf16, tf32 and per-tensor fp8, fp16/bf16 with fp32 output, and a
shape whose swapped grid is larger.  Each output is right against a float64
reference with a NaN-poisoned output, in all four layouts, with C (row- and
column-major), alpha/beta, a bias and an activation, and bit-identical when
run again."""
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


SWAPPED = dict(_swap=True, _block_m=128)


def _runs(a, b, **kw):
    """The forced options of the runs: swap-AB with 128-row tiles, then none (the automatic plan) where it
    is another configuration (helpers.plan.variant_runs)."""
    from helpers.plan import variant_runs
    return variant_runs(a, b, SWAPPED, **kw)


def _run_all(cp, rawcoop, a, b, shape, dt, ref, tol, **kw):
    """Each of :func:`_runs`, NaN-poisoned and twice (bit-identical), against ``ref``; the swapped
    result."""
    outs = []
    for forced in _runs(a, b, **kw):
        outs.append(helpers.run_twice(cp, rawcoop, a, b, shape, dt, **kw, **forced))
        helpers.assert_rel_err(cp, outs[-1], ref, tol)
    return outs[0]


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("m,n,k", [(7040, 896, 8192), (2880, 1408, 2048), (5696, 1344, 3072)],
                         ids=lambda v: str(v))
def test_swap_for_waves(m, n, k, layout, dt_name):
    import cupy as cp
    import rawcoop
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, 41)
    _run_all(cp, rawcoop, a, b, (m, n), dt, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("dt_name,m,n,k", [("bfloat16", 7168, 832, 8192), ("float16", 2880, 1408, 2048)],
                         ids=str)
def test_swap_for_waves_fp32_out(dt_name, m, n, k):
    """fp16/bf16 in, fp32 out: swapped (the column-major fp32 epilogue), and
    the automatic plan, right against float64, bit-identical when run again."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, "TN", 47)
    assert _plan_for(a, b, out_dtype=cp.float32, **SWAPPED).cfg.out_type == 2
    _run_all(cp, rawcoop, a, b, (m, n), cp.float32, a.astype(cp.float64) @ b.astype(cp.float64), 2e-5,
             out_dtype=cp.float32)


def test_swap_onto_a_larger_grid():
    """832x6208x4096 swapped in 128x256 tiles: the swapped grid is larger (its
    last 256-wide column three-quarters past M = 832); that plan, the
    un-swapped one and the automatic plan are right."""
    import cupy as cp
    import rawcoop
    from helpers.plan import variant_runs
    m, n, k = 832, 6208, 4096
    dt = helpers.dtype("bfloat16")
    a, b = helpers.layout_operands(cp, m, n, k, dt, "TN", 49)
    for forced in variant_runs(a, b, dict(SWAPPED, _block_n=256), dict(_swap=False)):
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **forced)
        helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL["bfloat16"])


@pytest.mark.parametrize("c_order", ["row", "col"])
def test_swap_for_waves_epilogue(c_order):
    """C, alpha, beta, a bias along N and gelu through the swapped kernel (its
    C is column-major where the user's is row-major, its bias runs along rows),
    and the automatic plan."""
    import cupy as cp
    import rawcoop
    from rawcoop._reference import activation as act64
    dt = helpers.dtype("bfloat16")
    m, n, k = 2880, 1408, 2048
    a, b = helpers.layout_operands(cp, m, n, k, dt, "TN", 43)
    c = helpers.rand(cp, (m, n), dt, 45) if c_order == "row" else helpers.rand(cp, (n, m), dt, 45).T
    bias = helpers.rand(cp, (n,), cp.float32, 46)
    kw = dict(c=c, alpha=1.5, beta=-0.5, bias=bias, activation="gelu")
    ref = act64(cp, 1.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64) + bias, "gelu")
    d = _run_all(cp, rawcoop, a, b, (m, n), dt, ref, TOL["bfloat16"], **kw)
    # the un-swapped kernels compute the same function
    d0 = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, _swap=False, **kw)
    helpers.assert_rel_err(cp, d, d0.astype(cp.float64), TOL["bfloat16"])


@pytest.mark.parametrize("kind,out_name,m,n,k", [
    ("tf32", "float32", 7680, 640, 2048), ("tf32", "float32", 3328, 1920, 2048),
    ("tf32", "bfloat16", 4288, 1856, 4096), ("e4m3", "bfloat16", 2944, 1408, 8192),
    ("e4m3", "float16", 2496, 1600, 4096),
    ("e4m3xe5m2", "bfloat16", 3392, 1088, 8192),    # mixed kinds: the kernel's A is b
], ids=lambda v: str(v))
def test_swap_for_waves_tf32_fp8(kind, out_name, m, n, k):
    """tf32 (fp32 output: the column-major fp32 epilogue) and per-tensor fp8
    swapped, and the automatic plan; right against float64 of the exact inputs
    (fp8: times the scales), NaN-poisoned, bit-identical when run again."""
    import cupy as cp
    import rawcoop
    from helpers.lowp import lowp_operands
    a, b, a64, b64, extra, tol = lowp_operands(cp, kind, m, n, k, 61, (0.75, 1.5))
    dt = helpers.dtype(out_name)
    _run_all(cp, rawcoop, a, b, (m, n), dt, a64 @ b64, tol[out_name], out_dtype=dt, **extra)


@pytest.mark.parametrize("kind", ["tf32", "e4m3"])
def test_swap_for_waves_tf32_fp8_epilogue(kind):
    """C (row-major: the swapped kernel's column-major C), alpha/beta, a bias
    along N and relu through the swapped tf32 (fp32 out) / fp8 (bf16 out)
    kernel, and the automatic plan; the un-swapped kernel computes the same."""
    import cupy as cp
    import rawcoop
    from helpers.lowp import lowp_operands
    m, n, k = (7680, 640, 2048) if kind == "tf32" else (2496, 1600, 4096)
    a, b, a64, b64, extra, _ = lowp_operands(cp, kind, m, n, k, 71, (0.5, 2.0))
    dt = cp.dtype(cp.float32) if kind == "tf32" else helpers.dtype("bfloat16")
    c = helpers.rand(cp, (m, n), dt, 73)
    bias = helpers.rand(cp, (n,), cp.float32, 74)
    kw = dict(c=c, alpha=1.5, beta=-0.5, bias=bias, activation="relu", out_dtype=dt, **extra)
    ref = cp.maximum(1.5 * (a64 @ b64) - 0.5 * c.astype(cp.float64) + bias, 0.0)
    tol = 3e-3 if kind == "tf32" else 1e-2
    d = _run_all(cp, rawcoop, a, b, (m, n), dt, ref, tol, **kw)
    d0 = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, _swap=False, **kw)
    helpers.assert_rel_err(cp, d, d0.astype(cp.float64), tol)
