"""Differentiable rawcoop GEMMs: :func:`matmul` and :func:`linear`, each an
``torch.autograd.Function`` whose backward runs rawcoop GEMMs too, in the
layouts rawcoop takes without copies (16-bit inputs):

    Y = X @ W^T (+ bias)   forward:  gemm(X, W.t())        TN
    dX = dY @ W            backward: gemm(dY, W)           TT (W row-major (N, K) as b)
    dW = dY^T @ X                    gemm(dY.t(), X)       NT (dY.t() column-major as a)
    dbias = dY.sum(0)                fp32 sum, in the bias dtype

Gradients come out in their input's dtype with fp32 accumulation; an
incoming gradient of another dtype (an fp32 ``out_dtype``) is rounded to the
inputs' dtype first.  tf32 inputs (``precision="tf32"``) need K-major
operands, so their backward makes the transposed copies explicitly; fp8
inputs have no backward.  Both functions call rawcoop.gemm, so under
torch.compile forward and backward are ``rawcoop::gemm`` nodes.  Without
grad (``torch.no_grad()``, or no input requiring it) they skip the
autograd.Function and call rawcoop.gemm directly."""
from __future__ import annotations

import torch

from ..gemm import gemm

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _needs_grad(*xs) -> bool:
    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in xs)


def _no_fp8(*xs) -> None:
    for x in xs:
        if x.dtype in _FP8:
            raise TypeError(f"rawcoop.torch: no backward for {x.dtype} inputs (fp8 GEMMs take K-major operands "
                            "only); train in bfloat16 or float16")


def _as_a(x, precision):
    """``x`` as an ``a`` operand: K-major (row-major) copy only where tf32 needs one."""
    return x.contiguous() if precision == "tf32" and x.stride(-1) != 1 else x


def _as_b(x, precision):
    """``x`` as a ``b`` operand: K-major (column-major) copy only where tf32 needs one."""
    return x.mT.contiguous().mT if precision == "tf32" and x.stride(-2) != 1 else x


def _sum_to(g, shape, dtype):
    """``g`` summed over the broadcast batch of an operand of ``shape``."""
    if g.dim() > len(shape):
        g = g.sum(0)
    elif g.shape[0] != shape[0]:
        g = g.sum(0, keepdim=True)
    return g.to(dtype)


class _MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, out_dtype, precision):
        ctx.save_for_backward(a, b)
        ctx.precision = precision
        return gemm(a, b, out_dtype=out_dtype, precision=precision)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        _no_fp8(a, b)
        p = ctx.precision
        dy = dy.to(a.dtype).contiguous()    # (an expanded gradient has no unit stride)
        batch = dy.shape[:-2]
        da = db = None
        if ctx.needs_input_grad[0]:          # dA = dY @ B^T, summed over a broadcast batch
            wide = tuple(batch) + tuple(a.shape[-2:]) != tuple(a.shape)
            da = gemm(dy, _as_b(b.mT, p), out_dtype=torch.float32 if wide else a.dtype, precision=p)
            da = _sum_to(da, a.shape, a.dtype) if wide else da
        if ctx.needs_input_grad[1]:          # dB = A^T @ dY, summed over a broadcast batch
            if b.dim() == 2 and a.dim() == 3:    # one GEMM over the batch: fp32 sums over L·M
                k, n = b.shape
                db = gemm(_as_a(a.reshape(-1, k).mT, p), _as_b(dy.reshape(-1, n), p), out_dtype=b.dtype,
                          precision=p)
            else:
                wide = tuple(batch) + tuple(b.shape[-2:]) != tuple(b.shape)
                db = gemm(_as_a(a.mT, p), _as_b(dy, p), out_dtype=torch.float32 if wide else b.dtype, precision=p)
                db = _sum_to(db, b.shape, b.dtype) if wide else db
        return da, db, None, None


def matmul(a, b, *, out_dtype=None, precision=None):
    """``a @ b`` for 2-D or 3-D tensors (batches broadcast as rawcoop.gemm:
    equal, or one of them 2-D or of batch 1), differentiable in ``a`` and
    ``b``.  ``out_dtype``/``precision`` as rawcoop.gemm."""
    if _needs_grad(a, b):
        return _MatMul.apply(a, b, out_dtype, precision)
    return gemm(a, b, out_dtype=out_dtype, precision=precision)


def _linear_forward(x, weight, bias, precision):
    k, n = weight.shape[1], weight.shape[0]
    y = gemm(x.reshape(-1, k), weight.t(), bias=bias, precision=precision)
    return y.view(*x.shape[:-1], n)


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, precision):
        ctx.save_for_backward(x, weight)
        ctx.precision, ctx.bias_dtype = precision, None if bias is None else bias.dtype
        return _linear_forward(x, weight, bias, precision)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        _no_fp8(x, w)
        p = ctx.precision
        n, k = w.shape
        dy2 = dy.reshape(-1, n).to(x.dtype).contiguous()
        dx = dw = db = None
        if ctx.needs_input_grad[0]:          # dX = dY @ W
            dx = gemm(_as_a(dy2, p), _as_b(w, p), precision=p).view(x.shape)
        if ctx.needs_input_grad[1]:          # dW = dY^T @ X
            dw = gemm(_as_a(dy2.t(), p), _as_b(x.reshape(-1, k), p), out_dtype=w.dtype, precision=p)
        if ctx.needs_input_grad[2]:
            db = dy2.sum(0, dtype=torch.float32).to(ctx.bias_dtype)
        return dx, dw, db, None


def linear(x, weight, bias=None, *, precision=None):
    """``x @ weight.T + bias`` as ``torch.nn.functional.linear`` (x (..., K),
    weight (N, K), bias (N,)), differentiable in all three."""
    if _needs_grad(x, weight, bias):
        return _Linear.apply(x, weight, bias, precision)
    return _linear_forward(x, weight, bias, precision)
