"""GPU: 192-row ("tall") tiles - three consumer warpgroups of 64 rows each
(``_block_m=192``; also where the planner weighs them against 128-row tiles,
with the automatic plan too).  Against
a float64 reference with NaN-poisoned outputs: four layouts, both 16-bit
types, 192- and 128-wide tiles, ragged M/N/K (M not a multiple of 192, N under
one tile), C row- and column-major with bias and activations, fp32 output,
split-K reduced spread and in a chain, batches, swap-AB; reruns bit-identical."""
import pytest

import helpers

from helpers.lowp import lowp_operands

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}


def _operands(cp, m, n, k, dt, layout, seed, batch=None):
    lead = (batch,) if batch else ()
    a = (helpers.rand(cp, lead + (m, k), dt, seed) if layout[0] == "T"
         else helpers.rand(cp, lead + (k, m + (-m) % 8), dt, seed)[..., :m].swapaxes(-1, -2))
    b = (helpers.rand(cp, lead + (k, n + (-n) % 8), dt, seed + 1)[..., :n] if layout[1] == "T"
         else helpers.rand(cp, lead + (n, k), dt, seed + 1).swapaxes(-1, -2))
    return a, b


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("m,n,k,kw", [
    (1000, 1304, 520, {}), (192, 192, 64, {}), (777, 300, 1000, dict(_block_n=128)), (2000, 48, 3000, {}),
    (1536, 768, 8192, dict(_splits=4)), (500, 700, 40000, dict(_splits=5)), (2500, 2100, 1000, dict(_splits=3)),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_tall_tiles(m, n, k, kw, layout, dt_name):
    """Forced 192-row tiles, not swapped, 192 wide unless 128 is forced: ragged
    shapes, both widths, split-K in one round (spread; 1536x768 4 splits of 32
    tiles, 500x700 5 of 12) and over rounds (2500x2100: 154 tiles x 3 splits)."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    kw = {"_block_n": 192, "_swap": False, **kw}
    dt = helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, layout, 11)
    plan = _plan_for(a, b, _block_m=192, **kw)
    assert plan.cfg.block_m == 192 and plan.threads == 512
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, _block_m=192, **kw)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("out_name", ["bfloat16", "float32"])
@pytest.mark.parametrize("c_order", ["row", "col"])
def test_tall_tiles_epilogue(out_name, c_order):
    """C (row- or column-major; fp32 too), bias along N, gelu /
    silu, alpha and beta, with split-K too; the third consumer's C loader."""
    import cupy as cp
    import rawcoop
    from rawcoop._reference import activation as act64
    dt, odt = helpers.dtype("bfloat16"), helpers.dtype(out_name)
    m, n, k = 1000, 900, 2000
    a, b = _operands(cp, m, n, k, dt, "TN", 21)
    c = (helpers.rand(cp, (m, n + (-n) % 8), odt, 23)[:, :n] if c_order == "row"
         else helpers.rand(cp, (n, m + (-m) % 8), odt, 23)[:, :m].T)
    bias = helpers.rand(cp, (n,), cp.float32, 24)
    for act, kw in (("gelu", {}), ("silu", dict(_splits=3)), ("relu", dict(_block_n=128))):
        ref = act64(cp, 1.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64) + bias,
                    act)
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), odt, c=c, alpha=1.5, beta=-0.5, bias=bias, activation=act,
                       out_dtype=odt, _block_m=192, **kw)
        helpers.assert_rel_err(cp, d, ref, 1e-2 if out_name == "bfloat16" else 2e-5)


def test_tall_tiles_batched_and_swapped():
    """A batch of 3 (b shared by the batch), and swap-AB (M <= 64: the kernel's
    rows are N, column-major D, bias on the kernel's rows)."""
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("float16")
    a, b = _operands(cp, 700, 500, 1504, dt, "TN", 31, batch=3)
    b = b[0]
    d = helpers.run_twice(cp, rawcoop, a, b, (3, 700, 500), dt, _block_m=192)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL["float16"])
    a, b = _operands(cp, 48, 3000, 2000, dt, "TN", 33)
    bias = helpers.rand(cp, (3000,), cp.float32, 35)
    d = helpers.run_twice(cp, rawcoop, a, b, (48, 3000), dt, bias=bias, _block_m=192, _swap=True)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) + bias, TOL["float16"])


@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape, block_n", [((1536, 1536, 4096), 192), ((768, 1536, 32768), 192),
                                            ((1536, 1024, 16384), 128)], ids=str)
def test_tall_tiles_and_the_automatic_plan(shape, block_n, dt_name):
    """192 x ``block_n`` tiles, not swapped (forced; split-K in one round
    where the tiles are few), and the automatic plan (the planner's choice)
    where it is another configuration: right and deterministic."""
    import cupy as cp
    import rawcoop
    from helpers.plan import variant_runs
    m, n, k = shape
    dt = helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, "TN", 41)
    for forced in variant_runs(a, b, dict(_block_m=192, _block_n=block_n, _swap=False)):
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **forced)
        helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("kind", ["tf32", "e4m3", "e4m3xe5m2"])
@pytest.mark.parametrize("m,n,k,kw", [
    (1000, 1304, 520, {}), (777, 300, 1000, dict(_block_n=128)), (1536, 768, 8192, dict(_splits=4)),
    (2500, 2100, 1000, dict(_splits=3)), (200, 130, 4100, {}),
], ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_tall_tiles_tf32_fp8(kind, m, n, k, kw):
    """Forced 192-row tiles for tf32 and per-tensor fp8 (TN; k8 / k32 wgmmas,
    BLOCK_K 32 / 128): ragged shapes, both widths, split-K spread and chained,
    fp32 and bf16 output with C and bias, against float64 of the exact inputs."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    a, b, a64, b64, extra, tol = lowp_operands(cp, kind, m, n, k if kind == "tf32" else (k + 15) // 16 * 16, 51,
                                                (0.75, 1.5))
    plan = _plan_for(a, b, _block_m=192, **extra, **kw)
    assert plan.cfg.block_m == 192 and plan.threads == 512
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), cp.float32, out_dtype=cp.float32, _block_m=192, **extra, **kw)
    helpers.assert_rel_err(cp, d, a64 @ b64, tol["float32"])
    bf16 = helpers.dtype("bfloat16")
    c = helpers.rand(cp, (m, n + (-n) % 8), bf16, 54)[:, :n]     # (rows padded to 16 bytes for TMA)
    bias = helpers.rand(cp, (n,), cp.float32, 55)
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), bf16, out_dtype=bf16, c=c, beta=0.5, bias=bias, _block_m=192,
                   **extra, **kw)
    helpers.assert_rel_err(cp, d, a64 @ b64 + 0.5 * c.astype(cp.float64) + bias, 1e-2)


@pytest.mark.parametrize("kind", ["tf32", "e4m3"])
def test_tall_tiles_and_the_automatic_plan_tf32_fp8(kind):
    """tf32 and per-tensor fp8, 1536x1536x4096: 192x192 tiles, not swapped
    (forced), and the automatic plan where it is another configuration;
    right and deterministic."""
    import cupy as cp
    import rawcoop
    from helpers.plan import variant_runs
    m, n, k = 1536, 1536, 4096
    a, b, a64, b64, extra, tol = lowp_operands(cp, kind, m, n, k, 61, (0.5, 4.0))
    ref, out = a64 @ b64, cp.float32 if kind == "tf32" else helpers.dtype("bfloat16")
    for forced in variant_runs(a, b, dict(_block_m=192, _block_n=192, _swap=False), **extra):
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), out, **extra, **forced)
        helpers.assert_rel_err(cp, d, ref, tol["float32" if kind == "tf32" else "bfloat16"])
