"""CPU: the autograd formulas of rawcoop.torch.matmul and linear.

rawcoop.torch.autograd's GEMM is replaced, in these tests only, by a float64
reference (a test double) that also checks what rawcoop would check of each
operand: unit stride along one of the last two axes, and for tf32 the K-major
layouts.  So the backward's operands are ones rawcoop takes as they are (no
copies for 16-bit inputs), and torch.autograd.gradcheck (float64, numerical
against analytical) checks the formulas: dX = dY·W, dW = dYᵀ·X, the bias
gradient, and the batch sums of broadcast operands.
"""
import pytest

torch = pytest.importorskip("torch")

import rawcoop.torch as rt  # noqa: E402
from rawcoop.torch import autograd as ag  # noqa: E402


def _gemm_double(calls):
    def gemm(a, b, *, bias=None, out_dtype=None, precision=None):
        for name, x, k_axis in (("a", a, -1), ("b", b, -2)):
            assert 1 in (x.stride(-1), x.stride(-2)) or min(x.shape[-2:]) == 1, (name, x.shape, x.stride())
            if precision == "tf32":
                assert x.stride(k_axis) == 1, f"tf32 {name} must be K-major, got strides {x.stride()}"
        calls.append((tuple(a.shape), tuple(b.shape), precision))
        d = torch.matmul(a.double(), b.double())
        if bias is not None:
            d = d + bias.double()
        return d.to(out_dtype or a.dtype)
    return gemm


@pytest.fixture
def calls(monkeypatch):
    seen = []
    monkeypatch.setattr(ag, "gemm", _gemm_double(seen))
    return seen


def _t(*shape, seed=0, grad=True, dtype=torch.float64):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    return x.requires_grad_(grad)


@pytest.mark.parametrize("x_shape", [(6, 16), (2, 5, 16), (16,)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_gradcheck(calls, x_shape, with_bias):
    x, w = _t(*x_shape, seed=1), _t(8, 16, seed=2)
    b = _t(8, seed=3) if with_bias else None
    assert torch.autograd.gradcheck(lambda *t: rt.linear(*t), (x, w, b) if with_bias else (x, w))
    y = rt.linear(x, w, b)
    assert torch.allclose(y, torch.nn.functional.linear(x, w, b))


def test_linear_backward_uses_only_the_gemms_it_needs(calls):
    x, w = _t(4, 16, seed=1, grad=False), _t(8, 16, seed=2)
    rt.linear(x, w).sum().backward()                 # an expanded (stride-0) gradient
    assert calls == [((4, 16), (16, 8), None), ((8, 4), (4, 16), None)]   # forward, dW = dYᵀ·X; no dX
    assert torch.allclose(w.grad, torch.ones(4, 8, dtype=torch.float64).t() @ x)


def test_linear_16bit_grads_in_their_dtype(calls):
    x, w, b = (_t(4, 16, seed=1, dtype=torch.bfloat16), _t(8, 16, seed=2, dtype=torch.bfloat16),
               _t(8, seed=3, dtype=torch.bfloat16))
    dy = _t(4, 8, seed=4, grad=False, dtype=torch.bfloat16)
    rt.linear(x, w, b).backward(dy)
    x64, w64 = x.detach().double(), w.detach().double()
    for got, ref in ((x.grad, dy.double() @ w64), (w.grad, dy.double().t() @ x64), (b.grad, dy.double().sum(0))):
        assert got.dtype == torch.bfloat16
        assert float((got.double() - ref).norm() / ref.norm()) < 1e-2


def test_linear_tf32_backward_makes_the_k_major_copies(calls):
    x, w = _t(6, 16, seed=1, dtype=torch.float32), _t(8, 16, seed=2, dtype=torch.float32)
    rt.linear(x, w, precision="tf32").sum().backward()   # the double asserts K-major operands for tf32
    assert [c[2] for c in calls] == ["tf32"] * 3
    assert torch.allclose(w.grad, torch.ones(6, 8).t() @ x.detach(), atol=1e-5)


BATCH_CASES = [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((5, 7), (2, 7, 3)), ((2, 5, 7), (2, 7, 3)),
               ((1, 5, 7), (3, 7, 4)), ((3, 5, 7), (1, 7, 4))]


@pytest.mark.parametrize("a_shape, b_shape", BATCH_CASES)
def test_matmul_gradcheck_with_broadcast_batches(calls, a_shape, b_shape):
    a, b = _t(*a_shape, seed=1), _t(*b_shape, seed=2)
    assert torch.autograd.gradcheck(rt.matmul, (a, b))
    assert torch.allclose(rt.matmul(a, b), torch.matmul(a, b))


def test_matmul_fp32_output_of_16bit_inputs(calls):
    a, b = _t(4, 8, seed=1, dtype=torch.float16), _t(8, 6, seed=2, dtype=torch.float16)
    y = rt.matmul(a, b, out_dtype=torch.float32)
    assert y.dtype == torch.float32
    y.backward(torch.ones_like(y))                 # an fp32 gradient, rounded to fp16 for the GEMMs
    assert a.grad.dtype == b.grad.dtype == torch.float16
    assert torch.allclose(a.grad.double(), torch.ones(4, 6, dtype=torch.float64) @ b.detach().double().t(),
                          rtol=1e-2)


def test_no_grad_skips_the_autograd_function(calls):
    x, w = _t(4, 16, seed=1), _t(8, 16, seed=2)
    with torch.no_grad():
        y = rt.linear(x, w)
    assert y.grad_fn is None and not y.requires_grad
    y = rt.linear(x.detach(), w.detach())
    assert y.grad_fn is None
    assert type(rt.linear(x, w).grad_fn).__name__ == "_LinearBackward"


def test_fp8_has_no_backward(calls):
    a = torch.zeros(4, 16).to(torch.float8_e4m3fn).requires_grad_()
    b = torch.zeros(16, 8).to(torch.float8_e4m3fn)
    y = ag._MatMul.apply(a, b, torch.bfloat16, None)
    with pytest.raises(TypeError, match="no backward for torch.float8_e4m3fn inputs"):
        y.float().sum().backward()
