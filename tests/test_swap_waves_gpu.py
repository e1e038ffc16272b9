"""GPU: large 16-bit problems that rawcoop.gemm runs swap-AB because the tile
grid over N x M quantises into fewer waves (gemm_configs.swap_for_waves_fits,
stop 22).  The automatic plan is the swapped one (on a 132-SM H100/H200, where
the rule's shapes were measured), and its output is right against a float64
reference with a NaN-poisoned output, in all four layouts, with C (row- and
column-major), alpha/beta, a bias and an activation, and bit-identical when
run again."""
import pytest

import gpu_helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


def _operands(cp, m, n, k, dt, layout, seed):
    a = (gpu_helpers.rand(cp, (m, k), dt, seed) if layout[0] == "T"
         else gpu_helpers.rand(cp, (k, m), dt, seed).T)
    b = (gpu_helpers.rand(cp, (k, n), dt, seed + 1) if layout[1] == "T"
         else gpu_helpers.rand(cp, (n, k), dt, seed + 1).T)
    return a, b


def _expect_swapped(plan):
    from rawcoop import device
    if device.info(0).sm_count == 132:
        assert plan.cfg.d_colmajor and plan.cfg.block_m == 128, plan.cfg.spec.label


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("m,n,k", [(7040, 896, 8192), (2880, 1408, 2048), (5696, 1344, 3072)],
                         ids=lambda v: str(v))
def test_auto_swap_for_waves(m, n, k, layout, dt_name):
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    dt = gpu_helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, layout, 41)
    _expect_swapped(_plan_for(a, b))
    d = gpu_helpers.run_twice(cp, rawcoop, a, b, (m, n), dt)
    gpu_helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("c_order", ["row", "col"])
def test_auto_swap_for_waves_epilogue(c_order):
    """C, alpha, beta, a bias along N and gelu through the swapped kernel (its
    C is column-major where the user's is row-major, its bias runs along rows)."""
    import cupy as cp
    import rawcoop
    from rawcoop._reference import activation as act64
    from rawcoop.gemm import _plan_for
    dt = gpu_helpers.dtype("bfloat16")
    m, n, k = 2880, 1408, 2048
    a, b = _operands(cp, m, n, k, dt, "TN", 43)
    c = gpu_helpers.rand(cp, (m, n), dt, 45) if c_order == "row" else gpu_helpers.rand(cp, (n, m), dt, 45).T
    bias = gpu_helpers.rand(cp, (n,), cp.float32, 46)
    kw = dict(c=c, alpha=1.5, beta=-0.5, bias=bias, activation="gelu")
    _expect_swapped(_plan_for(a, b, **kw))
    d = gpu_helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw)
    ref = act64(cp, 1.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64) + bias, "gelu")
    gpu_helpers.assert_rel_err(cp, d, ref, TOL["bfloat16"])
    # the un-swapped kernels compute the same function
    d0 = gpu_helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, _swap=False, **kw)
    gpu_helpers.assert_rel_err(cp, d, d0.astype(cp.float64), TOL["bfloat16"])
