"""GPU: rawcoop.gemm on torch tensors, and rawcoop.torch.

* torch tensors in, torch tensors out: on the input's device, from torch's
  caching allocator, launched on torch's current stream of that device (a
  side stream's ordering is checked with a producer that sleeps on it);
  tensors that require grad go in as they are; ``out=`` is filled in place.
  CuPy arrays keep CuPy results and CuPy's stream.
* fp8 torch tensors with float and tensor scales, against torch._scaled_mm
  and float64 (relative Frobenius error).
* torch.library.opcheck on CUDA tensors; torch.compile(fullgraph=True) of
  an MLP, also with CUDA graphs (mode="reduce-overhead"), equal to eager.
* torch.cuda.graph capture and replay of a model equal to eager, with no
  CuPy allocation during capture; a kernel not loaded when capture starts
  is refused (KernelNotReady) and works once run outside capture.
* autograd of rawcoop.torch.linear / matmul against float64 torch.
* a tensor on cuda:1 runs on device 1 and its stream (two GPUs).
"""
import numpy as np
import pytest

import helpers

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch():
    return helpers.torch_or_skip()


def _rel(torch, d, ref):
    e = float(torch.linalg.norm((d.double() - ref).flatten()) / torch.linalg.norm(ref.flatten()))
    assert np.isfinite(e), "non-finite result"
    return e


def _tn(torch, m, n, k, dtype, seed=0, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn(m, k, device=device, generator=g).to(dtype)
    bt = torch.randn(n, k, device=device, generator=g).to(dtype)
    return a, bt.t()


@pytest.fixture
def launches(monkeypatch):
    """(device, stream) of every bound launch rawcoop makes."""
    from rawcoop import launch
    seen, real = [], launch.BoundLaunch.__call__

    def call(self, stream, params):
        seen.append((self.dev, stream))
        return real(self, stream, params)
    monkeypatch.setattr(launch.BoundLaunch, "__call__", call)
    return seen


TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 3e-3}


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
def test_torch_in_torch_out(torch, launches, name):
    import rawcoop
    dt = getattr(torch, name)
    kw = dict(precision="tf32") if name == "float32" else {}
    a, b = _tn(torch, 520, 776, 1000, dt)
    bias = torch.randn(776, device="cuda")
    d = rawcoop.gemm(a, b, bias=bias, activation="relu", **kw)
    assert type(d) is torch.Tensor and d.device == a.device and d.dtype == dt and d.shape == (520, 776)
    assert d.is_contiguous() and not d.requires_grad
    assert launches == [(0, torch.cuda.current_stream(0).cuda_stream)]
    ref = torch.relu(a.double() @ b.double() + bias.double())
    assert _rel(torch, d, ref) < TOL[name]


def test_requires_grad_tensors_and_out(torch):
    import rawcoop
    w = torch.nn.Parameter(torch.randn(384, 512, device="cuda", dtype=torch.bfloat16))   # requires grad
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            d = rawcoop.gemm(x, w.t())
        assert d.grad_fn is None
        assert _rel(torch, d, x.detach().double() @ w.detach().double().t()) < TOL["bfloat16"]
    c = torch.randn(256, 384, device="cuda", dtype=torch.bfloat16)
    ref = 0.5 * (x.detach().double() @ w.detach().double().t()) + c.double()
    assert rawcoop.gemm(x, w.t(), c=c, alpha=0.5, beta=1.0, out=c) is c          # in place: c = 0.5·x@w.T + c
    assert _rel(torch, c, ref) < TOL["bfloat16"]
    odd = torch.full((256, 203), float("nan"), device="cuda", dtype=torch.float16)   # rows of 406 bytes
    a, b = _tn(torch, 256, 203, 512, torch.float16, seed=3)
    assert rawcoop.gemm(a, b, out=odd) is odd
    assert _rel(torch, odd, a.double() @ b.double()) < TOL["float16"]
    with pytest.raises(TypeError, match="out has dtype float32, expected float16"):
        rawcoop.gemm(a, b, out=odd.float())


def test_launch_goes_on_torchs_current_stream(torch, launches):
    """A side stream that sleeps before writing a: correct only if the GEMM is ordered after the write on
    that stream (the default stream would race it); CuPy's current stream is left alone."""
    import cupy as cp
    import rawcoop
    a, b = _tn(torch, 1024, 1024, 1024, torch.bfloat16)
    new_a = torch.randn_like(a)
    cupy_stream = cp.cuda.get_current_stream().ptr
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(200_000_000)            # ~0.1 s of spinning on s
        a.copy_(new_a)
        d = rawcoop.gemm(a, b)
    assert launches == [(0, s.cuda_stream)] and cp.cuda.get_current_stream().ptr == cupy_stream
    s.synchronize()
    assert _rel(torch, d, new_a.double() @ b.double()) < TOL["bfloat16"]


def test_cupy_inputs_keep_cupy_results_and_stream(torch, launches):
    import cupy as cp
    import rawcoop
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        a = helpers.rand(cp, (256, 512), helpers.dtype("bfloat16"), 1)
        bt = helpers.rand(cp, (384, 512), helpers.dtype("bfloat16"), 2)
        d = rawcoop.gemm(a, bt.T)
    s.synchronize()
    assert isinstance(d, cp.ndarray) and launches == [(0, s.ptr)]
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ bt.T.astype(cp.float64), TOL["bfloat16"])


@pytest.mark.parametrize("fa, fb", [("e4m3", "e4m3"), ("e4m3", "e5m2")])
def test_fp8_float_and_tensor_scales(torch, fa, fb):
    import rawcoop
    tdt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    g = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(1024, 2048, device="cuda", generator=g).to(tdt[fa])
    bt = torch.randn(1536, 2048, device="cuda", generator=g).to(tdt[fb])
    exact = a.double() @ bt.double().t()
    sa, sb = torch.tensor([0.8], device="cuda"), torch.tensor([1.7], device="cuda")
    d_tensor = rawcoop.gemm(a, bt.t(), scale_a=sa, scale_b=sb)
    d_float = rawcoop.gemm(a, bt.t(), scale_a=0.8, scale_b=1.7)
    assert d_tensor.dtype == d_float.dtype == torch.bfloat16
    for d in (d_tensor, d_float):
        assert _rel(torch, d, 0.8 * 1.7 * exact) < 6e-3
    sa.fill_(2.0)                                   # read at launch: the next call sees it
    assert _rel(torch, rawcoop.gemm(a, bt.t(), scale_a=sa, scale_b=sb), 2.0 * 1.7 * exact) < 6e-3
    d32 = rawcoop.gemm(a, bt.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    assert d32.dtype == torch.float32 and _rel(torch, d32, 2.0 * 1.7 * exact) < 3e-3
    try:
        ref = torch._scaled_mm(a, bt.t(), scale_a=sa.reshape(()), scale_b=sb.reshape(()), out_dtype=torch.bfloat16,
                               use_fast_accum=True)
    except (RuntimeError, TypeError) as e:
        pytest.skip(f"torch._scaled_mm refused this case: {e}")
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert _rel(torch, d32, ref.double()) < 1e-2


def test_opcheck_on_cuda(torch):
    import rawcoop.torch  # noqa: F401
    a, b = _tn(torch, 128, 256, 512, torch.bfloat16)
    c = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(256, device="cuda")
    cases = [((a, b), {}), ((a, b, c), dict(alpha=0.5, beta=-1.0, bias=bias, activation="silu")),
             ((a.unsqueeze(0).expand(3, -1, -1), b), dict(out_dtype=torch.float32))]
    a8, b8 = _tn(torch, 128, 256, 512, torch.float8_e4m3fn, seed=2)
    cases.append(((a8, b8), dict(scale_a=torch.tensor([0.5], device="cuda"), scale_b_value=2.0)))
    for args, kwargs in cases:
        torch.library.opcheck(torch.ops.rawcoop.gemm.default, args, kwargs)
        shape, dtype = rawcoop.torch.ops.result_meta(args[0], args[1], kwargs.get("out_dtype"))
        out = torch.empty(shape, device="cuda", dtype=dtype)
        torch.library.opcheck(torch.ops.rawcoop.gemm_out.default, (args[0], args[1], out) + args[2:], kwargs)


def _mlp(torch, seed=0):
    import rawcoop
    import rawcoop.torch as rt

    class RawLinear(torch.nn.Linear):               # what a user writes: rawcoop.gemm in a forward
        def forward(self, x):
            return rawcoop.gemm(x, self.weight.t(), bias=self.bias)
    torch.manual_seed(seed)
    return torch.nn.Sequential(rt.Linear(512, 1536), torch.nn.SiLU(), RawLinear(1536, 512)).to("cuda", torch.bfloat16)


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_compile_fullgraph_equals_eager(torch, mode):
    model = _mlp(torch)
    x = torch.randn(4, 64, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, mode=mode)
        for _ in range(3):                          # reduce-overhead: warm-up, then CUDA graph replays
            got = compiled(x)
    torch.cuda.synchronize()
    assert _rel(torch, got, eager.double()) < 1e-2     # inductor may fuse the SiLU differently: bf16 roundings


def _capture(torch, stream, fn):
    """Capture ``fn`` on ``stream``: the stream the warm-up ran on, which holds its split-K workspaces."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        res = fn()
    return g, res


def test_cuda_graph_capture_and_replay_equals_eager(torch):
    import cupy as cp
    model = _mlp(torch)
    static_x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):     # warm-up on the stream that will capture
        for _ in range(2):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    s.synchronize()

    class Count(cp.cuda.MemoryHook):
        name = "rawcoop_torch_capture_counter"

        def __init__(self):
            self.n = 0

        def malloc_preprocess(self, **kw):
            self.n += 1
    count = Count()
    with torch.no_grad(), count:
        graph, static_y = _capture(torch, s, lambda: model(static_x))
    assert count.n == 0, "CuPy allocated during capture"
    for seed in range(3):
        x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16, generator=torch.Generator("cuda").manual_seed(seed))
        static_x.copy_(x)
        graph.replay()
        with torch.no_grad():
            eager = model(x)
        torch.cuda.synchronize()
        assert torch.equal(static_y, eager), f"replay {seed} differs from eager"


def test_capture_refuses_a_kernel_that_is_not_loaded(torch):
    import rawcoop
    from rawcoop.gemm import KernelNotReady, _plan_for
    a, b = _tn(torch, 200, 328, 640, torch.float16, seed=5)
    c = torch.randn(200, 328, device="cuda", dtype=torch.float32)
    kw = dict(c=c, beta=-0.25, bias=torch.randn(328, device="cuda", dtype=torch.float16), activation="silu",
              out_dtype=torch.float32)
    plan = _plan_for(a, b, **{k: v for k, v in kw.items()})
    if plan.kernel.loaded(0):
        pytest.skip(f"{plan.cfg.spec.label} was loaded by an earlier test of this process")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with pytest.raises(KernelNotReady, match="Run the same call once before the capture"):
        _capture(torch, s, lambda: rawcoop.gemm(a, b, **kw))
    with torch.cuda.stream(s):
        eager = rawcoop.gemm(a, b, **kw)             # outside capture: compiled (or read from disk) and loaded
    s.synchronize()
    graph, d = _capture(torch, s, lambda: rawcoop.gemm(a, b, **kw))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(d, eager)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_autograd_against_float64(torch, name):
    import rawcoop.torch as rt
    dt = getattr(torch, name)
    x = torch.randn(3, 100, 256, device="cuda", dtype=dt, requires_grad=True)
    w = torch.randn(384, 256, device="cuda", dtype=dt, requires_grad=True)
    bias = torch.randn(384, device="cuda", dtype=dt, requires_grad=True)
    dy = torch.randn(3, 100, 384, device="cuda", dtype=dt)
    rt.linear(x, w, bias).backward(dy)
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, bias))
    torch.nn.functional.linear(x64, w64, b64).backward(dy.double())
    tol = 2e-2 if name == "bfloat16" else 2e-3
    for got, ref in ((x.grad, x64.grad), (w.grad, w64.grad), (bias.grad, b64.grad)):
        assert got.dtype == dt and _rel(torch, got, ref) < tol
    a = torch.randn(4, 96, 128, device="cuda", dtype=dt, requires_grad=True)
    b = torch.randn(128, 200, device="cuda", dtype=dt, requires_grad=True)      # shared over the batch
    dz = torch.randn(4, 96, 200, device="cuda", dtype=dt)
    rt.matmul(a, b).backward(dz)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    torch.matmul(a64, b64).backward(dz.double())
    assert _rel(torch, a.grad, a64.grad) < tol and _rel(torch, b.grad, b64.grad) < tol


def test_second_gpu_runs_on_its_device_and_stream(torch, launches):
    import rawcoop
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    a, b = _tn(torch, 520, 776, 1000, torch.bfloat16, device="cuda:1")
    torch.cuda.set_device(0)
    d0 = rawcoop.gemm(a, b)                          # device 0 current: device 1's current stream all the same
    assert torch.cuda.current_device() == 0 and d0.device == torch.device("cuda", 1)
    s1 = torch.cuda.Stream(device=1)
    s1.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.stream(s1):
        d = rawcoop.gemm(a, b)
    assert torch.cuda.current_device() == 0
    assert launches == [(1, torch.cuda.current_stream(1).cuda_stream), (1, s1.cuda_stream)]
    s1.synchronize()
    for res in (d0, d):
        assert _rel(torch, res, a.double() @ b.double()) < TOL["bfloat16"]
    with pytest.raises(ValueError, match="b is on device 0, but a is on device 1"):
        rawcoop.gemm(a, b.to("cuda:0"))
