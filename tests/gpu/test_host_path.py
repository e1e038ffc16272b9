"""GPU: the repeated-call path of rawcoop.gemm.

A plan (cached by the inputs) launches through one bound launch (its
``CUlaunchConfig`` built once, the stream set per call under the plan's
lock) and remembers the D tensor map of every storable ``out`` by address
and strides.  These tests make that cache and the shared launch config earn
their keep: several outputs of one plan in turn (storable, with another row
pitch, and one TMA cannot store into), each poisoned and checked against a
float64 reference of fresh data every time; and threads sharing one plan on
their own streams.
"""

import importlib

import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = 7e-4          # float16 output, fp32 accumulation (as test_streams_gpu)


def _reference(cp, a, b):
    return cp.matmul(a.astype(cp.float64), b.astype(cp.float64))


def _plan(cp, a, b, out):
    """The cached plan gemm(a, b, out=out) runs (rawcoop.gemm the module: the
    package attribute of that name is the function)."""
    g = importlib.import_module("rawcoop.gemm")
    return g._cached_plan(cp, a, b, None, 1.0, 0.0, None, None, out, None, False,
                          (None,) * len(g.FORCED_OPTIONS), None)


def test_one_plan_many_outs_each_written_with_fresh_data():
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("float16")
    m, n, k = 300, 264, 200                       # ragged: no dimension a multiple of the tile
    a = helpers.rand(cp, (m, k), dt, 1)
    bt = helpers.rand(cp, (n, k), dt, 2)
    outs = {
        "fresh": cp.empty((m, n), dtype=dt),
        "another": cp.empty((m, n), dtype=dt),
        "wider pitch": cp.empty((m, n + 8), dtype=dt)[:, :n],     # 544-byte rows: storable, other strides
        "misaligned": cp.empty((m, n + 1), dtype=dt)[:, 1:],      # base off by 2 bytes: through a temporary
    }
    seed = 10
    for _ in range(2):
        for name, out in outs.items():
            seed += 1
            a[...] = helpers.rand(cp, (m, k), dt, seed)          # same buffer (same plan), new data
            out.view(cp.uint16)[...] = 0x7E00                         # NaN: an unwritten element shows
            r = rawcoop.gemm(a, bt.T, out=out)
            assert r is out
            helpers.assert_rel_err(cp, out, _reference(cp, a, bt.T), TOL)
    plan = _plan(cp, a, bt.T, outs["fresh"])
    remembered = set(plan.out_maps)
    for name in ("fresh", "another", "wider pitch"):
        assert (outs[name].data.ptr, outs[name].strides) in remembered, name
    bad = outs["misaligned"]
    assert (bad.data.ptr, bad.strides) not in remembered
    assert plan.launch is not None and plan.launch.dev == a.device.id


def test_the_launch_spy_sees_gemm_launches(monkeypatch):
    """The bad-input tests forbid launches through helpers.spy_launches:
    it must see the repeated-call path's launches, or they could not fail."""
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("float16")
    a, bt = helpers.rand(cp, (128, 64), dt, 5), helpers.rand(cp, (128, 64), dt, 6)
    rawcoop.gemm(a, bt.T)                                   # the plan exists: the next call is a repeated one
    seen = helpers.spy_launches(monkeypatch)
    rawcoop.gemm(a, bt.T)
    assert len(seen) == 1
    helpers.spy_launches(monkeypatch, fail="forbidden")
    with pytest.raises(AssertionError, match="forbidden"):
        rawcoop.gemm(a, bt.T)


def test_threads_share_one_plan_on_their_own_streams():
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a = helpers.rand(cp, (384, 512), dt, 3)
    bt = helpers.rand(cp, (520, 512), dt, 4)
    ref = _reference(cp, a, bt.T)
    rawcoop.gemm(a, bt.T)                                  # the shared plan exists before the threads start
    cp.cuda.Device().synchronize()

    def work(t, barrier):
        s = cp.cuda.Stream(non_blocking=True)
        outs = [cp.full((384, 520), cp.nan, dtype=dt) for _ in range(4)]
        with s:
            barrier.wait()
            for i in range(40):
                rawcoop.gemm(a, bt.T, out=outs[i % 4])
        s.synchronize()
        for o in outs:
            helpers.assert_rel_err(cp, o, ref, 5e-3)

    helpers.run_in_threads(work, range(4))
    plan = _plan(cp, a, bt.T, None)
    assert len(plan.out_maps) == 16                        # 4 threads x 4 outs, all storable (the cap is 16)
