"""CPU: gemm's repeated-call path (``_Plan.run``) with a storable ``out``,
without a GPU.  A plan is built with the stub CuPy of tests/helpers/stub.py and planning
recorders; run() then gets a stub of the CuPy calls it makes (current
device and stream) and recorders for the argument block and the bound
launch.  What it shows: D's tensor map is encoded once per (address,
strides) of ``out`` and remembered (at most ``_OUT_MAPS_MAX``, then the plan
starts over); each launch gets the map of the ``out`` of its own call; a bad
``out`` is refused before anything is launched.  The GPU side of the same
contract (fresh data in several outs of one plan, threads sharing a plan) is
tests/gpu/test_host_path.py.
"""
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.stub import BF16, G, StubArray, build, stub_planning, tn



class _Recorder:
    """The plan's argument block and bound launch: records each launch's C
    and D maps (what run() set just before it)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.args = {}
        self.launches = []

    def set(self, i, value):
        self.args[i] = value

    def __call__(self, stream, params):
        assert params is self
        self.launches.append((stream, self.args[G._ARG_C], self.args[G._ARG_D]))


RUN_CP = SimpleNamespace(
    ndarray=StubArray,
    cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: 0),
                         get_current_stream=lambda dev: SimpleNamespace(ptr=0x5EED)))


@pytest.fixture
def plan(monkeypatch):
    rec = stub_planning(monkeypatch)
    a, b = tn(256, 384, 512, BF16)
    p = build(a, b)
    assert p.ws_flags == 0 and p.map_c is None             # data-parallel, no C: nothing else per call
    r = _Recorder()
    p.params = r
    p.launch = r
    return SimpleNamespace(plan=p, maps=rec.maps, rec=r)


def _out(shape=(256, 384), strides=None):
    return StubArray(shape, BF16, strides=strides)


def test_d_map_encoded_once_per_out_and_used_by_its_own_launch(plan):
    p, maps, rec = plan.plan, plan.maps, plan.rec
    o1, o2 = _out(), _out()
    o3 = _out(strides=(400 * 2, 2))                         # a view of a wider array: another row pitch
    before = len(maps)
    for out in (o1, o2, o3, o1, o2, o3, o1):
        assert p.run(RUN_CP, out) is out
    assert len(maps) == before + 3                          # one encoding per distinct out
    d_maps = [d for _, _, d in rec.launches]
    assert d_maps[0] is d_maps[3] is d_maps[6] and d_maps[1] is d_maps[4] and d_maps[2] is d_maps[5]
    assert len({id(m) for m in d_maps}) == 3
    m1, m2, m3 = maps[before:before + 3]
    assert (m1.address, m2.address, m3.address) == (o1.data.ptr, o2.data.ptr, o3.data.ptr)
    assert m3.strides[0] == 800 and m1.strides[0] == 768
    assert all(c is d for _, c, d in rec.launches)         # no C: the C slot carries D's map
    assert all(s == 0x5EED for s, _, _ in rec.launches)
    assert set(p.out_maps) == {(o.data.ptr, o.strides) for o in (o1, o2, o3)}


def test_the_remembered_maps_are_capped(plan):
    p, maps = plan.plan, plan.maps
    outs = [_out() for _ in range(G._OUT_MAPS_MAX + 1)]
    for out in outs:
        p.run(RUN_CP, out)
    assert len(p.out_maps) == 1                             # the (cap + 1)-th started over
    before = len(maps)
    p.run(RUN_CP, outs[-1])                                 # still remembered
    p.run(RUN_CP, outs[0])                                  # forgotten: encoded again
    assert len(maps) == before + 1 and len(p.out_maps) == 2


def test_a_bad_out_is_refused_before_any_launch(plan):
    p, rec = plan.plan, plan.rec
    p.run(RUN_CP, _out())
    with pytest.raises(ValueError, match=r"out has shape \(384, 256\), expected \(256, 384\)"):
        p.run(RUN_CP, _out((384, 256)))
    with pytest.raises(TypeError, match="out has dtype float32, expected bfloat16"):
        p.run(RUN_CP, StubArray((256, 384), np.float32))
    assert len(rec.launches) == 1
