"""CPU: the ``rawcoop::gemm`` / ``rawcoop::gemm_out`` custom ops without a GPU.

* ``import rawcoop`` never imports torch; ``import rawcoop.torch`` registers
  both ops with the schemas the docs give (``gemm_out`` mutates ``out``).
* The fake implementations, under FakeTensorMode on fake CUDA tensors (no GPU
  needed), give the shapes and dtypes rawcoop.gemm's planning gives
  (compared with gemm_plan._build_plan on stub arrays) and raise its errors.
* rawcoop.gemm on fake tensors is the op (never a data pointer).
* With a float64 reference registered as the ops' CPU kernel (a test double,
  enabled only inside the ``cpu_double`` fixture), torch.library.opcheck
  passes and torch.compile(fullgraph=True) traces modules that call
  rawcoop.gemm and rawcoop.torch layers into graphs holding the op, with
  results equal to eager and a training step's gradients equal to torch's.
"""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import rawcoop  # noqa: E402
import rawcoop.torch as rt  # noqa: E402
from rawcoop._reference import activation as activation64  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

import helpers.stub as stub  # noqa: E402

ROOT = stub.G.__file__.rsplit("/rawcoop/", 1)[0]


def test_import_rawcoop_does_not_import_torch():
    code = "import sys, rawcoop; print('torch' in sys.modules, 'rawcoop.torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_ops_are_registered_with_their_schemas():
    g = str(torch.ops.rawcoop.gemm.default._schema)
    o = str(torch.ops.rawcoop.gemm_out.default._schema)
    assert g.startswith("rawcoop::gemm(Tensor a, Tensor b, Tensor? c=None, float alpha=1., float beta=0., "
                        "Tensor? bias=None, str? activation=None, ScalarType? out_dtype=None, bool pdl=False, "
                        "Tensor? scale_a=None, Tensor? scale_b=None, float? scale_a_value=None")
    assert g.endswith("-> Tensor")
    assert o.startswith("rawcoop::gemm_out(Tensor a, Tensor b, Tensor(a2!) out, Tensor? c=None") and o.endswith("-> ()")
    assert not torch.ops.rawcoop.gemm.default._schema.is_mutable
    assert torch.ops.rawcoop.gemm_out.default._schema.is_mutable


# ---------------------------------------------------------------- the fake implementation
_T = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
      "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
_NP = {"float16": "float16", "bfloat16": stub.BF16, "float32": "float32", "e4m3": stub.E4M3, "e5m2": stub.E5M2}

FAKE_CASES = [
    # (a shape, b shape (K-major: a transposed row-major bt), a dtype, b dtype, options, result shape, dtype)
    ((64, 128), (128, 256), "bfloat16", "bfloat16", {}, (64, 256), torch.bfloat16),
    ((64, 128), (128, 256), "float16", "float16", dict(out_dtype=torch.float32), (64, 256), torch.float32),
    ((3, 64, 128), (128, 256), "bfloat16", "bfloat16", {}, (3, 64, 256), torch.bfloat16),
    ((64, 128), (4, 128, 256), "float16", "float16", {}, (4, 64, 256), torch.float16),
    ((1, 64, 128), (4, 128, 256), "float16", "float16", {}, (4, 64, 256), torch.float16),
    ((4, 64, 128), (1, 128, 256), "bfloat16", "bfloat16", dict(out_dtype=torch.float16), (4, 64, 256), torch.float16),
    ((64, 128), (128, 256), "float32", "float32", dict(precision="tf32"), (64, 256), torch.float32),
    ((64, 128), (128, 256), "e4m3", "e4m3", {}, (64, 256), torch.bfloat16),
    ((64, 128), (128, 256), "e4m3", "e5m2", dict(out_dtype=torch.float32), (64, 256), torch.float32),
]


def _fake_operands(mode, a_shape, b_shape, da, db):
    with mode:
        a = torch.empty(a_shape, device="cuda", dtype=_T[da])
        bt = torch.empty(b_shape[:-2] + (b_shape[-1], b_shape[-2]), device="cuda", dtype=_T[db])
        return a, bt.mT


def _stub_plan(monkeypatch, a_shape, b_shape, da, db, kw):
    """(out_shape, out dtype name) of the plan gemm_plan._build_plan makes for stub arrays of the same shapes."""
    stub.stub_planning(monkeypatch)
    a = stub.StubArray(a_shape, _NP[da])
    bt = stub.StubArray(b_shape[:-2] + (b_shape[-1], b_shape[-2]), _NP[db])
    b = stub.StubArray(b_shape, bt.dtype, strides=bt.strides[:-2] + (bt.strides[-1], bt.strides[-2]), ptr=bt.data.ptr)
    plan = stub.build(a, b, **kw)
    return tuple(plan.out_shape), plan.out_dtype.name


@pytest.mark.parametrize("a_shape, b_shape, da, db, kw, shape, dtype", FAKE_CASES)
def test_fake_results_follow_the_planning_rules(monkeypatch, a_shape, b_shape, da, db, kw, shape, dtype):
    mode = FakeTensorMode()
    a, b = _fake_operands(mode, a_shape, b_shape, da, db)
    with mode:
        d = rawcoop.gemm(a, b, **kw)              # the public entry: fake tensors go to the op
        d_op = torch.ops.rawcoop.gemm(a, b, out_dtype=kw.get("out_dtype"), precision=kw.get("precision"))
    assert isinstance(d, FakeTensor) and d.device.type == "cuda"
    assert (tuple(d.shape), d.dtype) == (shape, dtype) == (tuple(d_op.shape), d_op.dtype)
    assert d.is_contiguous()
    np_kw = dict(kw, out_dtype=None if "out_dtype" not in kw else str(kw["out_dtype"]).removeprefix("torch."))
    assert _stub_plan(monkeypatch, a_shape, b_shape, da, db, np_kw) == (shape, str(dtype).removeprefix("torch."))


BAD_CASES = [
    ("k mismatch", (64, 128), (120, 256), "bfloat16", "bfloat16", {}, ValueError, "shape mismatch"),
    ("batch mismatch", (3, 64, 128), (2, 128, 256), "bfloat16", "bfloat16", {}, ValueError, "batch mismatch"),
    ("1-D", (128,), (128, 256), "bfloat16", "bfloat16", {}, ValueError, r"a must be 2-D \(M, K\)"),
    ("mixed dtypes", (64, 128), (128, 256), "bfloat16", "float16", {}, TypeError, "must have the same dtype"),
    ("float32 needs tf32", (64, 128), (128, 256), "float32", "float32", {}, TypeError, "no full-fp32 GEMM"),
    ("tf32 on 16-bit", (64, 128), (128, 256), "float16", "float16", dict(precision="tf32"), TypeError,
     "precision='tf32' needs float32"),
    ("out dtype", (64, 128), (128, 256), "bfloat16", "bfloat16", dict(out_dtype=torch.int8), TypeError,
     "out_dtype must be float16, bfloat16 or float32, got int8"),
    ("activation", (64, 128), (128, 256), "bfloat16", "bfloat16", dict(activation="tanh"), ValueError,
     "activation must be one of"),
    ("fp8 format on bf16", (64, 128), (128, 256), "bfloat16", "bfloat16", dict(a_format="e4m3"), ValueError,
     "a_format applies to fp8 operands"),
]


@pytest.mark.parametrize("what, a_shape, b_shape, da, db, kw, exc, message", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_fake_raises_what_gemm_raises(monkeypatch, what, a_shape, b_shape, da, db, kw, exc, message):
    mode = FakeTensorMode()
    a, b = _fake_operands(mode, a_shape, b_shape, da, db)
    with mode, pytest.raises(exc, match=message) as fake_err:
        rawcoop.gemm(a, b, **kw)
    if len(a_shape) == 1 or da != db:
        return                                    # (stub arrays of these need another layout; same helpers)
    np_kw = dict(kw)
    if "out_dtype" in kw:
        np_kw["out_dtype"] = "int8"
    with pytest.raises(exc) as plan_err:
        _stub_plan(monkeypatch, a_shape, b_shape, da, db, np_kw)
    assert str(plan_err.value) == str(fake_err.value)


def test_fake_out_form_checks_out_and_returns_it():
    mode = FakeTensorMode()
    a, b = _fake_operands(mode, (2, 64, 128), (128, 96), "float16", "float16")
    with mode:
        out = torch.empty((2, 64, 96), device="cuda", dtype=torch.float32)
        assert rawcoop.gemm(a, b, out=out, out_dtype=torch.float32) is out
        with pytest.raises(ValueError, match=r"out has shape \(2, 96, 64\), expected \(2, 64, 96\)"):
            rawcoop.gemm(a, b, out=torch.empty((2, 96, 64), device="cuda", dtype=torch.float16))
        with pytest.raises(TypeError, match="out has dtype float16, expected float32"):
            rawcoop.gemm(a, b, out=torch.empty((2, 64, 96), device="cuda", dtype=torch.float16),
                         out_dtype=torch.float32)
        with pytest.raises(ValueError, match=r"private options \(_splits\)"):
            rawcoop.gemm(a, b, _splits=2)
        with pytest.raises(TypeError, match="scale_a must be a Python float or a 1-element float32 torch tensor"):
            rawcoop.gemm(a, b, scale_a=[2.0])


def test_meta_tensors_get_the_fake_result():
    a = torch.empty(5, 64, 32, device="meta", dtype=torch.bfloat16)
    w = torch.empty(48, 32, device="meta", dtype=torch.bfloat16)
    d = rawcoop.gemm(a, w.t(), bias=torch.empty(48, device="meta"))
    assert d.device.type == "meta" and tuple(d.shape) == (5, 64, 48) and d.dtype == torch.bfloat16


def test_symbolic_shapes():
    """torch.compile(dynamic=True) traces the fake implementation with symbolic M and batch."""
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
    mode = FakeTensorMode(shape_env=ShapeEnv())
    dims = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.DYNAMIC, DimDynamic.STATIC])
    a = mode.from_tensor(torch.empty(4, 40, 64, dtype=torch.bfloat16), symbolic_context=dims)
    with mode:
        w = torch.empty(24, 64, dtype=torch.bfloat16)
        d = torch.ops.rawcoop.gemm(a, w.t())
    assert [isinstance(s, torch.SymInt) for s in d.shape] == [True, True, False]
    assert d.shape[0] is a.shape[0] or str(d.shape[0]) == str(a.shape[0])
    assert str(d.shape[1]) == str(a.shape[1]) and d.shape[2] == 24


# ---------------------------------------------------------------- a CPU test double: opcheck and torch.compile
_DOUBLE = {"on": False}


def _reference(a, b, c, alpha, beta, bias, activation, out_dtype, scale_a, scale_b, sa_value, sb_value, a_format,
               b_format, precision):
    """The op's result in float64, rounded to its dtype (what the kernel computes, by definition)."""
    shape, dtype = rt.ops.result_meta(a, b, out_dtype, activation, a_format, b_format, precision)
    s = alpha
    for t, v in ((scale_a, sa_value), (scale_b, sb_value)):
        s *= float(t) if t is not None else (1.0 if v is None else v)
    d = s * torch.matmul(a.double(), b.double())
    if beta:
        d = d + beta * c.double()
    if bias is not None:
        d = d + bias.double()
    xp = type("xp", (), {"maximum": staticmethod(torch.clamp_min), "tanh": staticmethod(torch.tanh),
                         "exp": staticmethod(torch.exp)})
    return activation64(xp, d, activation).to(dtype).reshape(shape)


def _gemm_double(a, b, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, out_dtype=None, pdl=False,
                 scale_a=None, scale_b=None, scale_a_value=None, scale_b_value=None, a_format=None, b_format=None,
                 precision=None, scale_mode=None):
    if not _DOUBLE["on"]:                         # outside the fixture: what the real kernel says of CPU tensors
        return rt._tensors.eager_gemm(a, b, c, alpha, beta, bias, activation, None, out_dtype, pdl, scale_a, scale_b,
                                      a_format, b_format, precision, scale_mode, (None,) * 8)
    return _reference(a, b, c, alpha, beta, bias, activation, out_dtype, scale_a, scale_b, scale_a_value,
                      scale_b_value, a_format, b_format, precision).contiguous()


def _gemm_out_double(a, b, out, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, out_dtype=None, pdl=False,
                     scale_a=None, scale_b=None, scale_a_value=None, scale_b_value=None, a_format=None, b_format=None,
                     precision=None, scale_mode=None):
    if not _DOUBLE["on"]:
        rt._tensors.eager_gemm(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b,
                               a_format, b_format, precision, scale_mode, (None,) * 8)
        return
    out.copy_(_reference(a, b, c, alpha, beta, bias, activation, out_dtype, scale_a, scale_b, scale_a_value,
                         scale_b_value, a_format, b_format, precision))


rt.ops.gemm.register_kernel("cpu", _gemm_double)
rt.ops.gemm_out.register_kernel("cpu", _gemm_out_double)


@pytest.fixture
def cpu_double():
    _DOUBLE["on"] = True
    try:
        yield
    finally:
        _DOUBLE["on"] = False


def test_without_the_double_cpu_tensors_get_rawcoops_error():
    a, b = torch.ones(8, 16, dtype=torch.bfloat16), torch.ones(16, 8, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"a is a torch\.Tensor in host \(CPU\) memory; .*a\.cuda\(\)"):
        torch.ops.rawcoop.gemm(a, b)
    with pytest.raises(TypeError, match=r"a is a torch\.Tensor in host \(CPU\) memory"):
        rawcoop.gemm(a, b)


def _randn(*shape, dtype=torch.bfloat16, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


OPCHECK_CASES = {
    "plain": lambda: ((_randn(32, 64), _randn(48, 64, seed=1).t()), {}),
    "epilogue": lambda: ((_randn(32, 64), _randn(48, 64, seed=1).t(), _randn(32, 48, seed=2)),
                         dict(alpha=0.5, beta=-1.0, bias=_randn(48, dtype=torch.float32, seed=3), activation="gelu")),
    "batched broadcast": lambda: ((_randn(3, 32, 64, dtype=torch.float16), _randn(64, 48, dtype=torch.float16)),
                                  dict(out_dtype=torch.float32)),
    "fp8 scales": lambda: ((_randn(32, 64).to(torch.float8_e4m3fn), _randn(48, 64, seed=1).to(torch.float8_e5m2).t()),
                           dict(scale_a=torch.tensor([0.5]), scale_b_value=2.0)),
}


@pytest.mark.parametrize("case", list(OPCHECK_CASES))
def test_opcheck(cpu_double, case):
    args, kwargs = OPCHECK_CASES[case]()
    # (torch's CPU build has no fp8 arithmetic, which the schema check's comparisons need)
    utils = ("test_faketensor", "test_aot_dispatch_dynamic") if case.startswith("fp8") else "ALL"
    torch.library.opcheck(torch.ops.rawcoop.gemm.default, args, kwargs, test_utils=utils)
    ref = _reference(*(args + (None,) * (3 - len(args))), kwargs.get("alpha", 1.0), kwargs.get("beta", 0.0),
                     kwargs.get("bias"), kwargs.get("activation"), kwargs.get("out_dtype"), kwargs.get("scale_a"),
                     None, None, kwargs.get("scale_b_value"), None, None, None)
    torch.library.opcheck(torch.ops.rawcoop.gemm_out.default, (args[0], args[1], torch.empty_like(ref)) + args[2:],
                          kwargs, test_utils=utils)
    out = torch.full_like(ref, float("nan"))
    torch.ops.rawcoop.gemm_out(args[0], args[1], out, *args[2:], **kwargs)
    assert torch.equal(out, ref)
    assert torch.equal(torch.ops.rawcoop.gemm(*args, **kwargs), ref)


class _RawLinear(torch.nn.Linear):
    """What a user writes: nn.Linear whose forward calls rawcoop.gemm."""

    def forward(self, x):
        return rawcoop.gemm(x, self.weight.t(), bias=self.bias)


def _graph_ops(model, *inputs, **compile_kw):
    """(compiled result, call_function targets of the graph Dynamo made: fullgraph, so one graph; with
    dynamic shapes Dynamo may first trace the Python floats as tensors and restart with them specialized,
    which calls the backend once more for the same frame)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
                       for n in sub.graph.nodes if n.op == "call_function"])     # (with autograd.Function bodies)
        from torch._dynamo.backends.debugging import aot_eager
        return aot_eager(gm, example_inputs)
    out = torch.compile(model, fullgraph=True, backend=backend, **compile_kw)(*inputs)
    assert graphs
    return out, graphs[-1]


@pytest.mark.parametrize("dynamic", [False, True])
def test_compile_fullgraph_of_rawcoop_gemm_in_a_forward(cpu_double, dynamic):
    torch.manual_seed(0)
    model = torch.nn.Sequential(_RawLinear(64, 128), torch.nn.SiLU(), _RawLinear(128, 32)).to(torch.bfloat16)
    x = _randn(2, 16, 64, seed=5)
    with torch.no_grad():
        # eager on the CPU means the op through the dispatcher (the double), layer by layer
        h = torch.nn.functional.silu(torch.ops.rawcoop.gemm(x, model[0].weight.t(), bias=model[0].bias))
        eager = torch.ops.rawcoop.gemm(h, model[2].weight.t(), bias=model[2].bias)
        compiled, targets = _graph_ops(model, x, dynamic=dynamic)
    assert sum("rawcoop.gemm" in t for t in targets) == 2, targets
    assert torch.equal(compiled, eager)


def test_compile_fullgraph_training_step_of_swapped_layers(cpu_double):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    ref = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32)).double()
    ref.load_state_dict(model.state_dict())
    assert rt.swap_linear(model, precision="tf32") == ["0", "2"]
    x = _randn(8, 64, dtype=torch.float32, seed=6)
    y, targets = _graph_ops(model, x)
    # two forward GEMMs, dW of both layers, dX of the second only (x does not require grad)
    assert sum("rawcoop.gemm" in t for t in targets) == 2 + 2 + 1, targets
    y.square().sum().backward()
    ref(x.double()).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        err = float((p.grad.double() - q.grad).norm() / q.grad.norm())
        assert err < 1e-6, (name, err)
