"""CPU: rawcoop.gemm's eager path for torch tensors (rawcoop/torch/_tensors.py),
without a GPU.

CPU tensors stand in for CUDA ones: their CuPy views for planning are stub
arrays (helpers.stub) on a device -1 that the stand-in side accepts, planning
runs with the recorders of helpers.stub.stub_planning, results are allocated
on the CPU, and the plan's bound launch is a recorder.  What it shows: the
plan is built once per tensor metadata (a tensor that requires grad shares
it) and every later call only launches; results are torch tensors from
torch.empty that the kernel's D map points at (a padded temporary and a
contiguous copy for rows that are not 16-byte multiples, also under
capture); ``out`` is written in place and returned; fp8 scales become kernel
pointers (tensors) or alpha (floats); K == 0 and empty problems are
computed with torch ops; bad arguments raise TypeError/ValueError naming the
argument before any launch; under capture a kernel that is not loaded is
refused (KernelNotReady) before anything is launched.
"""
import threading
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rawcoop  # noqa: E402
import rawcoop.torch  # noqa: E402,F401
from rawcoop import _cuda  # noqa: E402
from rawcoop.torch import _tensors  # noqa: E402

import helpers.stub as stub  # noqa: E402

G = stub.G
_NP = {torch.float16: np.float16, torch.bfloat16: stub.BF16, torch.float32: np.float32,
       torch.float8_e4m3fn: stub.E4M3, torch.float8_e5m2: stub.E5M2}
STREAM = 0x5EED


class _Launches:
    """A plan's argument block and bound launch: records (stream, D map, values set) per launch."""

    def __init__(self):
        self.lock = threading.Lock()
        self.args, self.launches = {}, []

    def set(self, i, value):
        self.args[i] = value

    def __call__(self, stream, params):
        self.launches.append((stream, self.args[G._ARG_D]))


@pytest.fixture
def path(monkeypatch):
    rec = stub.stub_planning(monkeypatch)
    monkeypatch.setattr(_cuda, "cupy", lambda: stub.CP)

    def view(cp, name, t):
        isz = np.dtype(_NP[t.dtype]).itemsize
        return stub.StubArray(tuple(t.shape), _NP[t.dtype], strides=tuple(s * isz for s in t.stride()), dev=-1,
                              ptr=t.data_ptr())
    monkeypatch.setattr(_tensors, "torch_view", view)
    launches, builds = _Launches(), []
    real_build = _tensors._build_plan

    def build(*args, **kw):
        plan = real_build(*args, **kw)
        builds.append(plan)
        if isinstance(plan, G._Plan):
            plan.params = plan.launch = launches
        return plan
    monkeypatch.setattr(_tensors, "_build_plan", build)
    monkeypatch.setattr(_tensors, "current_stream", lambda dev: STREAM)
    monkeypatch.setattr(_tensors, "_device", lambda dev: torch.device("cpu"))
    monkeypatch.setattr(G._device, "stream_capturing", lambda dev, s: pytest.fail("asked whether capturing"))
    G._PLANS.clear()
    yield SimpleNamespace(maps=rec.maps, launches=launches.launches, builds=builds)
    G._PLANS.clear()


def _tn(m, n, k, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(dtype)
    bt = torch.randn(n, k, generator=g).to(dtype)
    return a, bt.t()


def test_result_is_a_torch_tensor_the_kernel_stores_into(path):
    a, b = _tn(256, 384, 512)
    d = rawcoop.gemm(a, b)
    assert type(d) is torch.Tensor and d.shape == (256, 384) and d.dtype == torch.bfloat16 and d.is_contiguous()
    (stream, map_d), = path.launches
    assert stream == STREAM and map_d.address == d.data_ptr() and map_d.strides[0] == 384 * 2
    d2 = rawcoop.gemm(a, b, out_dtype=torch.float32)
    assert d2.dtype == torch.float32 and len(path.builds) == 2


def test_one_plan_per_tensor_metadata_requires_grad_included(path):
    a, b = _tn(256, 384, 512)
    rawcoop.gemm(a, b)
    w = b.detach().requires_grad_()            # the same memory, strides and dtype: the same plan
    rawcoop.gemm(a, w)
    rawcoop.gemm(a.requires_grad_(), w)
    assert len(path.builds) == 1 and len(path.launches) == 3
    rawcoop.gemm(a[:128], b)                   # another shape: another plan
    assert len(path.builds) == 2


def test_out_is_written_in_place_and_its_d_map_remembered(path):
    a, b = _tn(256, 384, 512)
    out = torch.empty(256, 384, dtype=torch.bfloat16)
    for _ in range(3):
        assert rawcoop.gemm(a, b, out=out) is out
    assert {m.address for _, m in path.launches} == {out.data_ptr()}
    assert sum(m.address == out.data_ptr() for m in path.maps) == 1      # D's map encoded once
    col = torch.empty(384, 256, dtype=torch.bfloat16).t()              # not TMA-storable: a temporary, then a copy
    assert rawcoop.gemm(a, b, out=col) is col
    assert path.launches[-1][1].address != col.data_ptr()


def test_a_new_result_at_an_address_seen_before_reuses_its_d_map(path, monkeypatch):
    block = torch.empty(256, 384, dtype=torch.bfloat16)          # what a caching allocator hands back each time
    monkeypatch.setattr(_tensors._TorchTensors, "empty", lambda self, shape, dtype, dev: block)
    a, b = _tn(256, 384, 512)
    assert rawcoop.gemm(a, b) is block
    encoded = len(path.maps)                                       # A's, B's and D's maps
    assert rawcoop.gemm(a, b) is block and len(path.maps) == encoded
    assert [m.address for _, m in path.launches] == [block.data_ptr()] * 2
    assert path.launches[0][1] is path.launches[1][1]


@pytest.mark.parametrize("out, exc, message", [
    (lambda: torch.empty(384, 256, dtype=torch.bfloat16), ValueError, r"out has shape \(384, 256\), expected \(256, 384\)"),
    (lambda: torch.empty(256, 384, dtype=torch.float16), TypeError, "out has dtype float16, expected bfloat16"),
    (lambda: np.empty((256, 384), np.float32), TypeError, "out must be a torch tensor .a is one., got numpy.ndarray"),
])
def test_a_bad_out_is_refused_before_any_launch(path, out, exc, message):
    a, b = _tn(256, 384, 512)
    with pytest.raises(exc, match=message):
        rawcoop.gemm(a, b, out=out())
    assert not path.launches


def test_rows_that_are_not_16_byte_multiples(path):
    a, b = _tn(300, 203, 96, torch.float16)
    d = rawcoop.gemm(a, b)                     # padded temporary (208 columns), then a contiguous copy
    assert d.shape == (300, 203) and d.is_contiguous()
    (_, map_d), = path.launches
    assert map_d.address != d.data_ptr() and map_d.strides[0] == 208 * 2


@pytest.mark.parametrize("bad, exc, message", [
    (dict(b=np.zeros((512, 384), np.float16)), TypeError, "b must be a torch tensor like the other operand, got a "
                                                          "numpy.ndarray"),
    (dict(bias=[0.0] * 384), TypeError, "bias must be a torch tensor like the other operand, got a builtins.list"),
    (dict(c=torch.zeros(256, 384), beta=1.0), TypeError, "c has dtype float32; it must have the output dtype bfloat16"),
    (dict(alpha=torch.tensor(2.0)), TypeError, "alpha and beta must be real numbers .Python floats., not tensors"),
    (dict(bias=torch.zeros(383)), ValueError, r"bias has shape \(383,\); expected \(384,\)"),
    (dict(b=_tn(256, 384, 512, torch.float16)[1]), TypeError, "a and b must have the same dtype"),
    (dict(scale_a=2.0), ValueError, "scale_a applies to fp8 inputs only"),
])
def test_bad_arguments_name_themselves_before_any_launch(path, bad, exc, message):
    a, b = _tn(256, 384, 512)
    kw = dict(b=b)
    kw.update(bad)
    with pytest.raises(exc, match=message):
        rawcoop.gemm(a, **kw)
    assert not path.launches


def test_fp8_scales_tensor_pointer_or_float_alpha(path):
    a, b = _tn(256, 384, 512, torch.float8_e4m3fn)
    sa, sb = torch.tensor([0.5]), torch.tensor([2.0])
    rawcoop.gemm(a, b, scale_a=sa, scale_b=sb)
    plan = path.builds[-1]
    assert plan.extra == (sa.data_ptr(), sb.data_ptr()) and plan.out_dtype == stub.BF16
    sa.fill_(4.0)                              # read by the kernel at launch: the same plan
    rawcoop.gemm(a, b, scale_a=sa, scale_b=sb)
    assert len(path.builds) == 1
    rawcoop.gemm(a, b, scale_a=0.5, scale_b=3.0, alpha=2.0)
    plan = path.builds[-1]
    assert len(path.builds) == 2 and plan.extra == (0, 0) and plan.scalars[8] == 3.0   # alpha·sa·sb
    with pytest.raises(TypeError, match="scale_b must be a Python float or a 1-element float32 torch tensor"):
        rawcoop.gemm(a, b, scale_b=[1.0])
    mixed = rawcoop.gemm(a, _tn(256, 384, 512, torch.float8_e5m2)[1], out_dtype=torch.float16)
    assert mixed.dtype == torch.float16


def test_k_zero_and_empty_problems_are_computed_with_torch(path):
    a, b = torch.empty(4, 0, dtype=torch.bfloat16), torch.empty(0, 8, dtype=torch.bfloat16)
    c = torch.randn(4, 8).to(torch.bfloat16)
    bias = torch.randn(8)
    d = rawcoop.gemm(a, b, c=c, beta=-0.5, bias=bias, activation="relu")
    ref = torch.clamp_min(-0.5 * c.float() + bias, 0).to(torch.bfloat16)
    assert torch.equal(d, ref)
    out = torch.full((4, 8), float("nan"), dtype=torch.float32)
    assert rawcoop.gemm(a, b, bias=bias, out=out, out_dtype=torch.float32) is out and torch.equal(out, bias.expand(4, 8))
    e = rawcoop.gemm(torch.empty(2, 0, 16, dtype=torch.float16), torch.empty(16, 8, dtype=torch.float16))
    assert e.shape == (2, 0, 8) and e.dtype == torch.float16
    assert not path.launches


def test_an_unloaded_kernel_is_refused_under_capture(path, monkeypatch):
    real_build = _tensors._build_plan

    def build(*args, **kw):
        plan = real_build(*args, **kw)
        plan.launch = None
        plan.kernel = SimpleNamespace(loaded=lambda dev: False, spec=SimpleNamespace(label="gemm_test"), arch="sm_90a",
                                      cache=SimpleNamespace(contains=lambda spec, arch: True),
                                      bind=lambda *a: pytest.fail("bound under capture"))
        return plan
    monkeypatch.setattr(_tensors, "_build_plan", build)
    asked = []
    monkeypatch.setattr(G._device, "stream_capturing", lambda dev, s: asked.append(s) or True)
    a, b = _tn(256, 384, 512)
    with pytest.raises(rawcoop.torch.KernelNotReady, match="compiled but not loaded on device -1.*Run the same call "
                                                           "once before the capture"):
        rawcoop.gemm(a, b)
    assert asked == [STREAM] and not path.launches
    assert issubclass(rawcoop.torch.KernelNotReady, RuntimeError)


def test_a_loaded_kernel_is_never_asked_about_capture(path):
    kernel = SimpleNamespace(loaded=lambda dev: True)
    G._require_loaded(kernel, 0, SimpleNamespace(stream=lambda dev: pytest.fail("stream queried")))
