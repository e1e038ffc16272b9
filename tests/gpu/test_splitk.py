"""GPU: split-K / tail-wave split decomposition with the in-kernel fix-up:
correct against float64, deterministic (bit-identical runs), and every
configuration reachable (forced splits, multiple rounds of units, epilogues)."""
import numpy as np  # noqa: F401
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}


_dt = helpers.dtype
_rand = helpers.rand


def _check(cp, d, ref, name):
    helpers.assert_rel_err(cp, d, ref, TOL[name])


def _decomposition(m, n, k, swap=False, splits=None, block_n=None, batch=1):
    from rawcoop import device
    from rawcoop.plan import scheduler
    sms = device.info(0).sm_count
    km, kn = (n, m) if swap else (m, n)
    bn = block_n or 128
    return scheduler.schedule(km, kn, 128, bn, sms, None, batch, k=k, splits=splits).decomposition


@pytest.mark.parametrize("splits", [2, 3, 5])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
def test_forced_splits_all_layouts_with_epilogue(splits, layout):
    import cupy as cp
    import rawcoop
    m, n, k = 520, 776, 1000
    dt = _dt("bfloat16")
    a = _rand(cp, (m, k), dt, 1) if layout[0] == "T" else _rand(cp, (k, m), dt, 1).T
    b = _rand(cp, (n, k), dt, 2).T if layout[1] == "N" else _rand(cp, (k, n), dt, 2)
    c = _rand(cp, (m, n), dt, 3)
    bias = _rand(cp, (n,), cp.float32, 4)
    d = rawcoop.gemm(a, b, c=c, alpha=0.5, beta=2.0, bias=bias, activation="silu", _splits=splits)
    r = 0.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) + 2.0 * c.astype(cp.float64) + bias
    r = r / (1 + cp.exp(-r))
    _check(cp, d, r, "bfloat16")


def test_many_rounds_of_split_units():
    """Forced splits with far more units than CTAs: splits of one tile land in
    different rounds, so waits cross rounds (the no-deadlock argument)."""
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a, b = _rand(cp, (2048, 4096), dt, 5), _rand(cp, (2048, 4096), dt, 6).T
    dec = _decomposition(2048, 2048, 4096, splits=4, block_n=128)     # 256 tiles (128x256 would give 128)
    assert dec.units > 4 * 132
    d = rawcoop.gemm(a, b, _splits=4, _block_n=128, _block_m=128, _swap=False)
    _check(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), "float16")


def _runs_bit_identical(cp, rawcoop, a, b, ref, **kw):
    """``rawcoop.gemm(a, b, **kw)`` right against ``ref`` and bit-identical over ten reruns."""
    first = rawcoop.gemm(a, b, **kw)
    _check(cp, first, ref, "bfloat16")
    for _ in range(10):
        again = rawcoop.gemm(a, b, **kw)
        assert cp.array_equal(again.view(cp.uint16), first.view(cp.uint16)), "split-K result changed between runs"


@pytest.mark.parametrize("shape,swap,block_n,splits", [
    ((1024, 1024, 65536), False, 256, 4),    # 32 tiles in one round
    ((96, 4096, 8192), False, 128, 4),
    ((1, 8192, 8192), True, 64, 2), ((16, 8192, 8192), True, 64, 2),
    ((3000, 1000, 8192), False, 128, 2),     # a wave of 132 tiles, the 60-tile tail split in two
    ((1408, 1000, 24576), False, 256, 3),    # 44 tiles in 3 splits: 132 units, one round
    ((512, 500, 32768), False, 128, 8),      # one round of up to 8 splits (scheduler.ONE_ROUND_MAX_SPLITS)
    ((256, 250, 16384), False, 128, 16),     # 4 tiles: 16 splits (scheduler.FEW_TILES_MAX_SPLITS), one round
    ((48, 1000, 16384), True, 64, 8),        # swap-AB, 8 tiles of 128x64: 8 splits of >= 32 k-blocks
], ids=str)
def test_scheduler_split_correct_and_bit_identical(monkeypatch, shape, swap, block_n, splits):
    """The automatic plan (the planner's choice), then the scheduler's own split-K with the tile forced
    (128 x ``block_n`` cooperative, no cluster, orientation ``swap``; helpers.plan.tail_split): right
    against float64 and bit-identical over ten reruns; on 132 SMs the split count is the scheduler's, reduced
    spread."""
    import cupy as cp
    import rawcoop
    from rawcoop import device
    from rawcoop.gemm import _plan_for
    from helpers.plan import tail_split
    m, n, k = shape
    dt = _dt("bfloat16")
    a, b = _rand(cp, (m, k), dt, 7), _rand(cp, (n, k), dt, 8).T
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    helpers.assert_planner_choice(_plan_for(a, b))
    _runs_bit_identical(cp, rawcoop, a, b, ref)
    tail_split(monkeypatch)
    forced = dict(_block_m=128, _block_n=block_n, _swap=swap, _cluster=1, _pingpong=False, _streamk=False)
    plan = _plan_for(a, b, **forced)
    dec = plan.decomposition
    assert dec.splits > 1 and plan.colmajor_d == swap and plan.cfg.block_n == block_n, (plan.cfg.spec.label, dec)
    if device.info(0).sm_count == 132:
        assert dec.splits == splits and dec.spread(plan.grid[0]), dec
    _runs_bit_identical(cp, rawcoop, a, b, ref, **forced)


def test_split_batched_and_fp32_out_and_c_colmajor():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a, b = _rand(cp, (3, 200, 2048), dt, 9), _rand(cp, (3, 2048, 136), dt, 10)
    c = _rand(cp, (3, 136, 200), cp.float32, 11).swapaxes(1, 2)     # column-major fp32 C ...
    d = rawcoop.gemm(a, b, c=c, beta=1.0, out_dtype=cp.float32, _splits=3)
    _check(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) + c, "float32")
    c = cp.ascontiguousarray(c)                                     # ... and row-major
    d = rawcoop.gemm(a, b, c=c, beta=1.0, out_dtype=cp.float32, _splits=3)
    _check(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) + c, "float32")
    c16 = _rand(cp, (3, 136, 200), dt, 12).swapaxes(1, 2)          # column-major 16-bit C
    d = rawcoop.gemm(a, b, c=c16, beta=-1.0, _splits=2)
    _check(cp, d, a.astype(cp.float64) @ b.astype(cp.float64) - c16.astype(cp.float64), "float16")


def test_pdl_chain_is_correct():
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    x = _rand(cp, (1024, 1024), dt, 13)
    w = (_rand(cp, (1024, 1024), dt, 14).astype(cp.float32) / 32).astype(dt)
    ref = x.astype(cp.float64)
    for _ in range(8):
        x = rawcoop.gemm(x, w, pdl=True)
        ref = ref @ w.astype(cp.float64)
    e = float(cp.linalg.norm(x.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    assert e < 3e-2, e          # 8 chained bf16 roundings


# ------------------------------------------------------------------ spread reduction
SPREAD_CASES = [
    # (m, n, k, dtype, options): one chunk per split (128x256, 4 splits), uneven shares (3 splits),
    # more splits than chunks (128x64: one chunk, 2 splits), ragged N inside a share, fp32 output
    # (32-column chunks), C + bias + activation (the C loader's share), clusters, tf32
    (1024, 1024, 8192, "bfloat16", dict(_block_n=256, _splits=4)),
    (1000, 900, 4000, "bfloat16", dict(_block_n=256, _splits=3)),
    (512, 1000, 3000, "float16", dict(_block_n=64, _splits=2)),
    (500, 900, 3000, "float16", dict(_block_n=128, _splits=3, out_dtype="float32")),
    (520, 776, 2000, "bfloat16", dict(_block_n=256, _splits=4, epilogue=True)),
    (1024, 1024, 8192, "bfloat16", dict(_block_n=128, _splits=2, _cluster=2)),
    (1000, 1000, 4000, "float16", dict(_block_n=256, _splits=3, _cluster=(1, 2), epilogue=True)),
    (500, 900, 2000, "float32", dict(_block_n=128, _splits=3, precision="tf32")),
]


@pytest.mark.parametrize("m,n,k,dt_name,opts", SPREAD_CASES)
def test_spread_reduction_matches_chain_and_reference(m, n, k, dt_name, opts):
    """Cooperative kernels reduce split-K spread over the splits when every split
    unit is resident (SPLIT_SPREAD, default).  The result must match float64, be
    bit-identical run to run (the sum's order is fixed), and agree with the chain
    reduction (SPLIT_SPREAD=0) to rounding: the two sum in different orders."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    opts = dict(opts)
    epilogue = opts.pop("epilogue", False)
    out_dtype = opts.pop("out_dtype", None)
    dt = _dt(dt_name)
    a, b = _rand(cp, (m, k), dt, 11), _rand(cp, (n, k), dt, 12).T
    kw = dict(opts, out_dtype=out_dtype, _pingpong=False)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    if epilogue:
        c = _rand(cp, (m, n), dt, 13)
        bias = _rand(cp, (n,), cp.float32, 14)
        kw.update(c=c, beta=0.75, alpha=1.5, bias=bias, activation="relu")
        ref = cp.maximum(1.5 * ref + 0.75 * c.astype(cp.float64) + bias, 0)
    plan = _plan_for(a, b, **kw)
    grid = plan.grid[0] // plan.cluster[0]
    assert not plan.cfg.pingpong and plan.decomposition.splits == opts["_splits"]
    assert plan.decomposition.spread(grid), (plan.decomposition, grid)
    out_name = out_dtype or ("float32" if dt_name == "float32" else dt_name)
    runs = []
    for _ in range(2):
        d = cp.full((m, n), float("nan"), dtype=cp.float32).astype(_dt(out_name))
        rawcoop.gemm(a, b, out=d, **kw)
        runs.append(d)
    with helpers.extra_defines((("SPLIT_SPREAD", 0),)):
        chain = rawcoop.gemm(a, b, **kw)
    tol = 2e-3 if kw.get("precision") == "tf32" else TOL[out_name]
    helpers.assert_rel_err(cp, runs[0], ref, tol)
    assert cp.array_equal(runs[0].view(cp.uint8), runs[1].view(cp.uint8)), "spread split-K is not deterministic"
    helpers.assert_rel_err(cp, runs[0], chain.astype(cp.float64), tol)


@pytest.mark.parametrize("kind,shape,tile,splits", [
    ("bfloat16", (1792, 2560, 10240), (128, 256), 16),    # one wave + 8 tail tiles in 16 splits (128 units)
    ("float16", (320, 6016, 11264), (128, 128), 14),      # 9 tail tiles, 132 // 9 splits
    ("e4m3", (640, 6720, 12288), (128, 256), 12),         # 3 tail tiles, 96 k-blocks // 8
    ("tf32", (3136, 1024, 6144), (192, 128), 16),         # 192x128 tiles, three consumers' slots per split
], ids=str)
def test_tail_wave_split_spread(monkeypatch, kind, shape, tile, splits):
    """After a full wave the partial last wave's few tiles split up to
    scheduler.TAIL_MAX_SPLITS ways, reduced spread (forced: the cooperative
    ``tile`` without a cluster, not swapped, and the scheduler's split of the
    partial last wave, helpers.plan.tail_split): right against float64 of the
    exact inputs, NaN-poisoned, bit-identical when run again; with C, a bias
    and an activation too."""
    import cupy as cp
    import rawcoop
    from rawcoop import device
    from rawcoop.gemm import _plan_for
    from helpers.lowp import lowp_operands
    from helpers.plan import tail_split
    m, n, k = shape
    if kind in ("bfloat16", "float16"):
        dt = _dt(kind)
        a, b = _rand(cp, (m, k), dt, 21), _rand(cp, (n, k), dt, 22).T
        a64, b64, extra, tol = a.astype(cp.float64), b.astype(cp.float64), {}, TOL[kind]
    else:
        a, b, a64, b64, extra, tols = lowp_operands(cp, kind, m, n, k, 23, (0.75, 1.5))
        dt = cp.dtype(cp.float32) if kind == "tf32" else _dt("bfloat16")
        extra = dict(extra, out_dtype=dt)
        tol = tols["float32" if kind == "tf32" else "bfloat16"]
    tail_split(monkeypatch)
    extra.update(_block_m=tile[0], _block_n=tile[1], _swap=False, _cluster=1, _pingpong=False, _streamk=False)
    plan = _plan_for(a, b, **extra)
    dec = plan.decomposition
    if device.info(0).sm_count == 132:
        assert dec.tiles_dp == 132 and dec.splits == splits and dec.spread(plan.grid[0]), dec
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **extra)
    helpers.assert_rel_err(cp, d, a64 @ b64, tol)
    c = _rand(cp, (m, n), dt, 24)
    bias = _rand(cp, (n,), cp.float32, 25)
    kw = dict(extra, c=c, alpha=0.5, beta=-1.0, bias=bias, activation="relu")
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw)
    helpers.assert_rel_err(cp, d, cp.maximum(0.5 * (a64 @ b64) - c.astype(cp.float64) + bias, 0.0), tol)
