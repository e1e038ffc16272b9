"""GPU: tiles between the multiples of 64 columns (``_block_n`` in NARROW_BOX_NS, 128 rows,
16-bit inputs, K-major b; kernels/gemm.cu "Narrow boxes": the epilogue stores 32-byte-wide TMA boxes so
that a partial 64-column chunk never writes into the next tile).  Against a float64 reference with
NaN-poisoned outputs (a box stored past its tile, or one not stored, shows): every width, both 16-bit
types, both A majornesses (layouts TN and NN: b = bt.T), ragged M/N/K (N under one tile, N between the
chunks of one tile), split-K spread and chained, stream-K, 2x1 clusters, C row- and column-major with
bias and activations, fp32 output (8-column boxes), batches, an output whose pitch TMA cannot store
(the padded buffer); reruns bit-identical (helpers.run_twice).  Then tiles forced on shapes where the
planner weighs them against others, each with the automatic plan too."""
import pytest

import helpers
from helpers.plan import gc

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}
SHAPES = [
    ((1000, 1304, 520), {}), ((128, 144, 64), {}), ((776, 100, 1000), {}), ((300, 200, 3000), {}),
    ((1024, 4608, 3584), {}), ((1536, 700, 8192), dict(_splits=4)), ((2504, 2104, 1000), dict(_splits=3)),
    ((1000, 2000, 6000), dict(_streamk=True)), ((2000, 3000, 2048), dict(_cluster=(2, 1))),
]


def _check(m, n, k, kw, layout, dt_name, block_n, seed):
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, seed)
    plan = _plan_for(a, b, _block_n=block_n, **kw)
    assert (plan.cfg.block_m, plan.cfg.block_n) == (128, block_n), plan.cfg.spec.label
    if kw.get("_streamk"):
        assert plan.cfg.stream_k
    if kw.get("_cluster"):
        assert plan.cfg.cluster == (2, 1)
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, _block_n=block_n, **kw)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("block_n", gc.NARROW_BOX_NS)
@pytest.mark.parametrize("shape, kw", SHAPES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_narrow_widths_bf16_tn(shape, kw, block_n):
    """Every width on every shape (bf16, both operands K-major)."""
    _check(*shape, kw, "TN", "bfloat16", block_n, 11)


@pytest.mark.parametrize("block_n", [144, 176, 224, 240])
@pytest.mark.parametrize("shape, kw", SHAPES[::2] + SHAPES[5:7],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_narrow_widths_fp16_nn(shape, kw, block_n):
    """fp16 with M-major a (the kernel's A through 64-wide atoms, B K-major)."""
    _check(*shape, kw, "NN", "float16", block_n, 13)


@pytest.mark.parametrize("out_name", ["bfloat16", "float32"])
@pytest.mark.parametrize("c_order", ["row", "col"])
@pytest.mark.parametrize("block_n", [176, 160])
def test_narrow_box_epilogue(out_name, c_order, block_n):
    """C (row-major: loaded in narrow boxes; column-major: whole-chunk boxes read only within the tile),
    bias along N, gelu / silu / relu, alpha and beta, with split-K and stream-K too; fp32 output at 176
    (8-column boxes, a 16-column tail) and at 160 (whole 32-column chunks, 16-bit C/D none)."""
    import cupy as cp
    import rawcoop
    helpers.check_epilogue_variants(cp, rawcoop, "TN", out_name, c_order, _block_n=block_n)


def test_narrow_box_batched_and_padded_out():
    """A batch of 3 (b shared by the batch), and an output of odd N without ``out`` (the padded buffer)."""
    import cupy as cp
    import rawcoop
    helpers.check_shared_b_batch(cp, rawcoop, _block_n=208)
    dt = helpers.dtype("float16")
    a = helpers.rand(cp, (900, 1000), dt, 33)
    b = helpers.rand(cp, (1001, 1000), dt, 34).T
    d = rawcoop.gemm(a, b, _block_n=176)
    assert d.shape == (900, 1001)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL["float16"])


def test_narrow_box_refusals():
    """N-major b and swap-AB are refused before launch (ValueError naming the rule)."""
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a, b = helpers.layout_operands(cp, 512, 512, 512, dt, "TT", 41)
    with pytest.raises(ValueError, match="K-major kernel B"):
        rawcoop.gemm(a, b, _block_n=176)
    a, b = helpers.layout_operands(cp, 512, 512, 512, dt, "TN", 41)
    with pytest.raises(ValueError, match="row-major kernel D"):
        rawcoop.gemm(a, b, _block_n=176, _swap=True)


def _check_tile(m, n, k, layout, dt_name, tile, seed, epilogue=None):
    """``tile`` = (block_m, block_n, cluster) forced (not swapped), and the automatic plan where the planner
    chooses another configuration (helpers.plan.variant_runs): right against float64 and deterministic;
    ``epilogue`` = (C's order, activation): with helpers.full_epilogue's C, alpha, beta and bias."""
    import cupy as cp
    import rawcoop
    from helpers.plan import variant_runs
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, seed)
    if epilogue:
        kw, ref = helpers.full_epilogue(cp, a, b, *epilogue, seed + 2)
    else:
        kw, ref = {}, a.astype(cp.float64) @ b.astype(cp.float64)
    block_m, block_n, cluster = tile
    for forced in variant_runs(a, b, dict(_block_m=block_m, _block_n=block_n, _cluster=cluster, _swap=False), **kw):
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw, **forced)
        helpers.assert_rel_err(cp, d, ref, TOL[dt_name])


@pytest.mark.parametrize("dt_name, layout", [("bfloat16", "TN"), ("float16", "NN")])
@pytest.mark.parametrize("m, n, k, tile", [
    (1024, 3584, 3584, (128, 224)), (8288, 688, 3008, (128, 176)),
    (2008, 416, 7040, (128, 208)), (4176, 400, 4488, (128, 208)),     # long K: split-K of narrow tiles
    (936, 2016, 11200, (128, 256)), (6352, 392, 6272, (128, 208)),
    (3072, 528, 9216, (128, 176)),                                    # stream-K of narrow tiles
    (432, 4712, 3856, (128, 160)),                                    # D's pitch misaligned
    (2944, 792, 5920, (128, 160)),
], ids=str)
def test_narrow_and_wide_tiles(m, n, k, tile, dt_name, layout):
    """Tiles of a width between the multiples of 64 (and 128x256) on shapes where they compete with
    128x128 and 192x128 tiles: forced, and the automatic plan, right against float64 and deterministic."""
    _check_tile(m, n, k, layout, dt_name, (*tile, (1, 1)), 53)


@pytest.mark.parametrize("dt_name, layout, m, n, k, tile", [
    ("float16", "TT", 1064, 1512, 12968, (128, 256, (1, 1))),   # N-major B, long K
    ("bfloat16", "TT", 272, 2456, 15032, (128, 192, (1, 1))),
    ("float16", "NT", 1856, 416, 8480, (128, 256, (1, 1))),
    ("float16", "NN", 4752, 312, 1576, (128, 128, (2, 1))),     # M-major A: 38 tile rows in pairs
    ("bfloat16", "NN", 10424, 320, 1152, (128, 128, (2, 1))),   # ... 82 rows
    ("float16", "NN", 5232, 376, 8280, (128, 128, (1, 1))),     # ... 41 rows (odd)
], ids=str)
def test_mn_major_operands(dt_name, layout, m, n, k, tile):
    """MN-major operands (an N-major B at long K in 128x192 / 128x256 tiles; an M-major A in 2x1 pairs of
    128x128 tiles): forced, and the automatic plan, right against float64 and deterministic."""
    _check_tile(m, n, k, layout, dt_name, tile, 59)


@pytest.mark.parametrize("dt_name, layout, m, n, k, tile", [
    ("float16", "TT", 1344, 1008, 1760, (128, 128, (1, 1))),
    ("bfloat16", "TT", 1880, 672, 2336, (128, 128, (1, 1))),
    ("bfloat16", "NN", 640, 1928, 2592, (128, 256, (1, 1))),
    ("float16", "NN", 560, 3376, 5976, (192, 192, (1, 1))),     # 192x192, split-K
], ids=str)
def test_tiles_at_short_split_k(dt_name, layout, m, n, k, tile):
    """Shapes where 192-row tiles would split K into short shares: the tile forced, and the automatic
    plan, right against float64 and deterministic."""
    _check_tile(m, n, k, layout, dt_name, tile, 67)


@pytest.mark.parametrize("dt_name, layout, m, n, k, tile", [
    ("bfloat16", "TT", 2400, 856, 432, (192, 128, (1, 1))),     # misaligned pitches, K < 1024
    ("float16", "NT", 4568, 1008, 320, (192, 128, (1, 1))),
    ("float16", "NN", 424, 9840, 512, (192, 128, (1, 1))),
    ("bfloat16", "TN", 4216, 600, 296, (192, 128, (1, 1))),
    ("bfloat16", "TT", 984, 2568, 1864, (128, 256, (2, 1))),    # misaligned pitches, K >= 1024
], ids=str)
def test_misaligned_short_k(dt_name, layout, m, n, k, tile):
    """16-bit misaligned pitches at short K in 192x128 tiles (and at K >= 1024 in 128x256 pairs): forced,
    and the automatic plan, right against float64 and deterministic."""
    _check_tile(m, n, k, layout, dt_name, tile, 71)


@pytest.mark.parametrize("c_order", ["C", "F"])
def test_mn_major_a_pairs_with_epilogue(c_order):
    """2x1 pairs of NN 128x128 tiles with C, alpha, beta, bias and an activation (a cluster kernel with an
    M-major A and the full epilogue), and the automatic plan, right against float64."""
    _check_tile(4752, 312, 1576, "NN", "float16", (128, 128, (2, 1)), 61, epilogue=(c_order, "relu"))
