"""GPU: problems whose operand pitch is an odd multiple of 16 bytes (every other TMA box line
straddles an L2 sector; the cost model prices it, docs/planner.md).  Each case runs the kernel variant
its list names (forced: 128x256, 128x192 or 128xW tiles in 2x1 or 1x2 clusters, 192x192 or 192x128 tiles,
never swapped) and the automatic plan (the planner's choice) where that is another configuration; both
right against a float64 reference with a NaN-poisoned output and bit-identical when run again: 16-bit in
all four layouts (ragged M and N, odd tile-row and tile-column counts that leave a ghost half-pair), with
C, alpha/beta, a bias and an activation, padded views whose pitch and not K decides, per-tensor fp8 and
tf32."""
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 2e-3, "bfloat16": 1e-2}

VARIANTS = {"wide": (128, 256, (2, 1)), "wide192": (128, 192, (2, 1)), "tall": (192, 192, (1, 1)),
            "short": (192, 128, (1, 1)), "wide12": (128, 256, (1, 2))}
"""(block_m, block_n, cluster) of the variant a case names; "pairW": 128xW tiles in 2x1 clusters."""


def _run_plans(cp, rawcoop, a, b, variant, shape, dt, ref, tol, **kw):
    """``variant`` (forced, not swapped) and the automatic plan where that is another configuration
    (helpers.plan.variant_runs), each NaN-poisoned, twice (bit-identical), against ``ref``."""
    from helpers.plan import variant_runs
    block_m, block_n, cluster = VARIANTS.get(variant) or (128, int(variant[len("pair"):]), (2, 1))
    tile = dict(_block_m=block_m, _block_n=block_n, _cluster=cluster, _swap=False)
    for forced in variant_runs(a, b, tile, **kw):
        d = helpers.run_twice(cp, rawcoop, a, b, shape, dt, **kw, **forced)
        helpers.assert_rel_err(cp, d, ref, tol)


WIDE_16BIT = [("TN", 5416, 6280, 1400), ("TN", 5968, 856, 1000), ("TN", 4360, 512, 5016),
              ("NN", 3000, 7272, 824), ("NT", 776, 2776, 8984), ("TT", 1000, 11256, 1744), ("TT", 1800, 2008, 1032)]
PAIRS_16BIT = [("NN", 4856, 592, 3912, 208), ("TN", 8080, 776, 1896, 208), ("NN", 4032, 680, 14328, 176),
               ("TN", 480, 4312, 7000, 160), ("TN", 11824, 864, 2232, 224), ("NN", 3400, 1544, 4104, 224),
               ("TN", 400, 5560, 3448, 176), ("NN", 1592, 1824, 10984, 208), ("TN", 3424, 1384, 2392, 208),
               ("NN", 1784, 1096, 2568, 160), ("NN", 5280, 1944, 10728, 224)]
TALL_16BIT = [("float16", "TN", 552, 7768, 648), ("bfloat16", "NN", 544, 3552, 6472),
              ("float16", "NT", 864, 4888, 1184), ("bfloat16", "TT", 7712, 1064, 856),
              ("bfloat16", "NN", 856, 4760, 1360), ("float16", "NN", 536, 8432, 3472),
              ("bfloat16", "TT", 576, 7208, 4016)]

PAIRS_1X2 = [("bfloat16", "NT", 2904, 10232, 432), ("float16", "TN", 1896, 10768, 712),
             ("bfloat16", "TT", 6200, 840, 8200),     # 98 pairs: more than one round of them
             ("float16", "NN", 1368, 5848, 9520),     # 23 tile columns: the last pair's right tile is a ghost
             ("float16", "TN", 344, 9368, 1240)]      # 3 tile rows: 2x1 pairs would leave a third empty


@pytest.mark.parametrize("variant,dt_name,layout,m,n,k,seed",
                         [("wide", dt, *s, 51) for dt in ("bfloat16", "float16") for s in WIDE_16BIT]
                         + [("wide192", dt, "TN", 4744, 568, 3288, 51) for dt in ("bfloat16", "float16")]
                         + [("wide192", "bfloat16", "NN", 2312, 1544, 4104, 53)]
                         + [(f"pair{w}", dt, *s, 55) for dt in ("bfloat16", "float16") for *s, w in PAIRS_16BIT]
                         + [("tall", *s, 91) for s in TALL_16BIT]
                         + [("wide12", *s, 57) for s in PAIRS_1X2], ids=str)
def test_misaligned_16bit(variant, dt_name, layout, m, n, k, seed):
    import cupy as cp
    import rawcoop
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, seed)
    _run_plans(cp, rawcoop, a, b, variant, (m, n), dt, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


SMALL_16BIT = [("bfloat16", "TN", 1984, 512, 5016), ("float16", "NT", 648, 2776, 8984),
               ("bfloat16", "TN", 592, 640, 584), ("float16", "NN", 536, 2264, 656)]


@pytest.mark.parametrize("dt_name,layout,m,n,k", SMALL_16BIT, ids=str)
def test_small_misaligned_problems(dt_name, layout, m, n, k):
    """Small misaligned problems (under half the SMs' worth of 128x256 tiles): the automatic plan is the
    planner's choice, right against float64 and deterministic."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    dt = helpers.dtype(dt_name)
    a, b = helpers.layout_operands(cp, m, n, k, dt, layout, 57)
    helpers.assert_planner_choice(_plan_for(a, b))
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("c_order", ["C", "F"])
@pytest.mark.parametrize("variant,m,n,k,seed", [("wide192", 2312, 1544, 2472, 61),  # N = 1544: 1728 of 192-wide
                                                ("wide12", 1896, 10768, 712, 65)],  # columns against 1792
                         ids=str)
def test_misaligned_with_epilogue(c_order, variant, m, n, k, seed):
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a, b = helpers.layout_operands(cp, m, n, k, dt, "TN", seed)
    kw, ref = helpers.full_epilogue(cp, a, b, c_order, "gelu", seed + 2)
    _run_plans(cp, rawcoop, a, b, variant, (m, n), dt, ref, 1e-2, **kw)


def test_padded_view_pitch_decides():
    """K = 1024 (aligned) in a view whose rows are 1032 elements apart (2064 B: misaligned): the pitch,
    not K, is what the planner sees; the results are right and the padding (NaN) is never read."""
    import cupy as cp
    import rawcoop
    m, n, k = 3208, 2280, 1024
    dt = helpers.dtype("bfloat16")
    base = cp.full((m, k + 8), float("nan"), dtype=cp.float32).astype(dt)
    base[:, :k] = helpers.rand(cp, (m, k), dt, 71)
    a = base[:, :k]
    b = helpers.rand(cp, (n, k), dt, 72).T
    from rawcoop.gemm import _plan_for
    assert _plan_for(a, b).problem.misaligned(False) == (True, False)
    _run_plans(cp, rawcoop, a, b, "wide", (m, n), dt, a.astype(cp.float64) @ b.astype(cp.float64), TOL["bfloat16"])


@pytest.mark.parametrize("m,n,k", [(1576, 1672, 3884), (7960, 5560, 684), (1000, 2777, 1004)], ids=str)
def test_misaligned_tf32(m, n, k):
    _tf32(m, n, k, "wide", 81)


@pytest.mark.parametrize("m,n,k", [(4792, 5520, 1168), (2408, 2136, 5456), (1000, 2600, 2064)], ids=str)
def test_misaligned_fp8(m, n, k):
    _fp8(m, n, k, "wide", m + n + k)


def test_misaligned_tall_with_epilogue():
    import cupy as cp
    import rawcoop
    m, n, k = 552, 7768, 648
    dt = helpers.dtype("bfloat16")
    a, b = helpers.layout_operands(cp, m, n, k, dt, "TN", 93)
    c = helpers.rand(cp, (m, n), dt, 94)
    bias = helpers.rand(cp, (n,), cp.float32, 95)
    kw = dict(c=c, alpha=1.25, beta=0.5, bias=bias, activation="silu")
    from rawcoop._reference import activation as act64
    ref = act64(cp, 1.25 * (a.astype(cp.float64) @ b.astype(cp.float64)) + 0.5 * c.astype(cp.float64)
                + bias.astype(cp.float64), "silu")
    _run_plans(cp, rawcoop, a, b, "tall", (m, n), dt, ref, 1e-2, **kw)


def _fp8(m, n, k, variant, seed, fa="e4m3", fb="e4m3"):
    """A per-tensor fp8 problem (scales 0.5, 2.0) in ``variant`` and the automatic plan (:func:`_run_plans`):
    the bf16 output right against float64 of the dequantised inputs, NaN-poisoned, bit-identical when run
    again."""
    import cupy as cp
    import rawcoop
    from helpers.lowp import fp8_pair
    a, b, a64, b64 = fp8_pair(cp, m, n, k, fa, fb, seed)
    _run_plans(cp, rawcoop, a, b, variant, (m, n), helpers.dtype("bfloat16"), a64 @ b64, 6e-3,
               scale_a=0.5, scale_b=2.0)


def _tf32(m, n, k, variant, seed):
    """The same for precision="tf32" (fp32 out, K-major a and b, operands from seeds ``seed``, ``seed + 1``)."""
    import cupy as cp
    import rawcoop
    a = helpers.rand(cp, (m, k), cp.float32, seed)
    b = helpers.rand(cp, (n, k), cp.float32, seed + 1).T
    _run_plans(cp, rawcoop, a, b, variant, (m, n), cp.float32, a.astype(cp.float64) @ b.astype(cp.float64), 3e-3,
               precision="tf32")


def test_misaligned_tall_fp8_and_tf32():
    _fp8(2272, 1808, 1744, "tall", 97)
    _tf32(7536, 552, 2516, "tall", 98)


@pytest.mark.parametrize("fa,fb,m,n,k", [("e4m3", "e4m3", 2328, 904, 688), ("e4m3", "e4m3", 2456, 2440, 496),
                                         ("e5m2", "e5m2", 888, 2928, 688), ("e4m3", "e5m2", 3520, 1240, 400),
                                         ("e4m3", "e4m3", 2824, 672, 1040), ("e5m2", "e4m3", 768, 3032, 1904),
                                         ("e4m3", "e4m3", 1000, 2600, 1040)], ids=str)
def test_misaligned_short_k_fp8(fa, fb, m, n, k):
    """Misaligned fp8 pitches at K < 2048 in 192x128 tiles (and the automatic plan), right against float64
    (per-tensor scales) and deterministic."""
    _fp8(m, n, k, "short", m + k, fa, fb)


@pytest.mark.parametrize("m,n,k", [(2964, 1632, 404), (3280, 796, 420), (940, 2324, 436)], ids=str)
def test_misaligned_short_k_tf32(m, n, k):
    """tf32 at K < 512 (under 16 k-blocks of 32; K = 4 mod 8 is tf32's misaligned pitch) in 192x128 tiles
    (and the automatic plan), right against float64 and deterministic."""
    _tf32(m, n, k, "short", 83)


def test_misaligned_pairs_fp8_and_tf32():
    """Misaligned e4m3 in 128x256 tiles in 1x2 clusters, tf32 in 2x1 ones (and the automatic plans)."""
    _fp8(264, 9480, 528, "wide12", 264 + 528)
    _fp8(520, 8768, 3568, "wide12", 520 + 3568)       # 90 pairs: more than one round of them
    _tf32(600, 12020, 388, "wide", 101)
