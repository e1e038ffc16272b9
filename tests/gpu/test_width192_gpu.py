"""GPU: 128x192 tiles (``_block_n=192, _block_m=128``, 16-bit inputs; also on a shape where the
planner weighs them against 128x256, with the automatic plan too).  Against a float64
reference with NaN-poisoned outputs: four layouts (B's MN-major 64-wide atoms: three per tile), both
16-bit types, ragged M/N/K (N under one tile, N between 128 and 192, M not a multiple of 128),
split-K spread and chained, stream-K, C row- and column-major with bias and activations, fp32 output,
batches, swap-AB; reruns bit-identical (helpers.run_twice)."""
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("m,n,k,kw", [
    (1000, 1304, 520, {}), (128, 192, 64, {}), (776, 152, 1000, {}), (296, 40, 3000, {}),
    (1024, 4608, 3584, {}), (1536, 768, 8192, dict(_splits=4)), (2504, 2104, 1000, dict(_splits=3)),
    (1000, 2000, 6000, dict(_streamk=True)), (4000, 3000, 5000, dict(_streamk=True)),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_width_192_tiles(m, n, k, kw, layout, dt_name):
    """Forced 128x192 tiles, not swapped: ragged shapes, split-K in one round (1536x768: 4 splits of 48
    tiles) and over rounds (2504x2104: 220 tiles), stream-K's partial wave."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    kw = dict(kw, _block_n=192, _block_m=128, _swap=False)
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, 11)
    plan = _plan_for(a, b, **kw)
    assert (plan.cfg.block_m, plan.cfg.block_n) == (128, 192) and not plan.cfg.pingpong
    if kw.get("_streamk"):
        assert plan.cfg.stream_k
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("out_name", ["bfloat16", "float32"])
@pytest.mark.parametrize("c_order", ["row", "col"])
@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_width_192_epilogue(out_name, c_order, layout):
    """C (row- or column-major), bias along N, gelu / silu / relu, alpha and beta, with split-K and
    stream-K too: the epilogue's three 64-column chunks and the C loader."""
    import cupy as cp
    import rawcoop
    helpers.check_epilogue_variants(cp, rawcoop, layout, out_name, c_order, _block_n=192, _block_m=128)


def test_width_192_batched_and_swapped():
    """A batch of 3 (b shared by the batch), and swap-AB (M <= 64: the kernel's rows are N, column-major
    D, bias on the kernel's rows)."""
    import cupy as cp
    import rawcoop
    helpers.check_shared_b_batch(cp, rawcoop, _block_n=192, _block_m=128)
    dt = helpers.dtype("float16")
    a = helpers.rand(cp, (48, 2000), dt, 33)
    b = helpers.rand(cp, (3000, 2000), dt, 34).T
    bias = helpers.rand(cp, (3000,), cp.float32, 35)
    d = helpers.run_twice(cp, rawcoop, a, b, (48, 3000), dt, bias=bias, _block_n=192, _block_m=128, _swap=True)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) + bias, TOL["float16"])


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
def test_width_192_and_the_automatic_plan(layout, dt_name):
    """5248x576x2304 (192-wide columns pad N = 576 not at all, 256-wide ones by a third): 128x192
    tiles, not swapped (forced), and the automatic plan where it is another configuration
    (helpers.plan.variant_runs), right and deterministic."""
    import cupy as cp
    import rawcoop
    from helpers.plan import variant_runs
    m, n, k = 5248, 576, 2304
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, 41)
    for forced in variant_runs(a, b, dict(_block_m=128, _block_n=192, _swap=False)):
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **forced)
        helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])
