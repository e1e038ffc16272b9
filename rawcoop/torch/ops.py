"""The ``rawcoop::gemm`` and ``rawcoop::gemm_out`` custom ops, what
``torch.compile`` (and any FakeTensor tracing: ``torch.export``, AOT autograd)
sees of a rawcoop GEMM: one opaque node with a fake implementation, never the
data pointers behind it.

    rawcoop::gemm(Tensor a, Tensor b, Tensor? c=None, float alpha=1., float beta=0., Tensor? bias=None,
                  str? activation=None, ScalarType? out_dtype=None, bool pdl=False, Tensor? scale_a=None,
                  Tensor? scale_b=None, float? scale_a_value=None, float? scale_b_value=None, str? a_format=None,
                  str? b_format=None, str? precision=None, str? scale_mode=None) -> Tensor
    rawcoop::gemm_out(Tensor a, Tensor b, Tensor(a!) out, <the same options>) -> ()

The fake implementations apply rawcoop.gemm's own shape and dtype rules
(operands.result_shape, input_kinds, result_dtype): batch broadcasting, the
output dtype defaults (the input dtype; float32 for tf32; bfloat16 for fp8),
the same TypeError/ValueError.  A scale is a 1-element float32 tensor
(``scale_a``) or a Python float (``scale_a_value``: the op's schema cannot
take either in one argument).  Eager calls do not go through the dispatcher
(it costs tens of microseconds per call): rawcoop.gemm calls the CUDA
implementation directly unless torch.compile is tracing or the tensors are
fake (rawcoop/torch/_tensors.py)."""
from __future__ import annotations

from typing import Optional

import torch

from ..gemm_plan import FORCED_OPTIONS
from ..operands import check_activation, dtype_name, input_kinds, result_dtype, result_shape, torch_dtype_name
from . import _tensors

_NOT_FORCED = (None,) * len(FORCED_OPTIONS)


def _scale(tensor, value):
    if tensor is not None and value is not None:
        raise ValueError("a scale is either a tensor or a float, not both")
    return tensor if tensor is not None else value


@torch.library.custom_op("rawcoop::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, c: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: float = 0.0,
         bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
         out_dtype: Optional[torch.dtype] = None, pdl: bool = False, scale_a: Optional[torch.Tensor] = None,
         scale_b: Optional[torch.Tensor] = None, scale_a_value: Optional[float] = None,
         scale_b_value: Optional[float] = None, a_format: Optional[str] = None, b_format: Optional[str] = None,
         precision: Optional[str] = None, scale_mode: Optional[str] = None) -> torch.Tensor:
    """``act(alpha · (a @ b) + beta · c + bias)``: rawcoop.gemm as a custom op (a new result)."""
    return _tensors.eager_gemm(a, b, c, alpha, beta, bias, activation, None, out_dtype, pdl,
                               _scale(scale_a, scale_a_value), _scale(scale_b, scale_b_value), a_format, b_format,
                               precision, scale_mode, _NOT_FORCED)


@torch.library.custom_op("rawcoop::gemm_out", mutates_args=("out",))
def gemm_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, c: Optional[torch.Tensor] = None,
             alpha: float = 1.0, beta: float = 0.0, bias: Optional[torch.Tensor] = None,
             activation: Optional[str] = None, out_dtype: Optional[torch.dtype] = None, pdl: bool = False,
             scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
             scale_a_value: Optional[float] = None, scale_b_value: Optional[float] = None,
             a_format: Optional[str] = None, b_format: Optional[str] = None, precision: Optional[str] = None,
             scale_mode: Optional[str] = None) -> None:
    """rawcoop.gemm into ``out`` (shape and dtype of the result, unit stride along N; may be ``c``)."""
    _tensors.eager_gemm(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, _scale(scale_a, scale_a_value),
                        _scale(scale_b, scale_b_value), a_format, b_format, precision, scale_mode, _NOT_FORCED)


def result_meta(a, b, out_dtype=None, activation=None, a_format=None, b_format=None, precision=None):
    """(shape, torch dtype) of rawcoop.gemm(a, b, ...), from the metadata of
    ``a`` and ``b`` only (also symbolic shapes), with rawcoop.gemm's errors."""
    ka, _ = input_kinds(torch_dtype_name(a.dtype), torch_dtype_name(b.dtype), a_format, b_format, precision)
    shape = result_shape(tuple(a.shape), tuple(b.shape))[4]
    check_activation(activation)
    return shape, getattr(torch, result_dtype(ka, out_dtype))


@gemm.register_fake
def _gemm_fake(a, b, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, out_dtype=None, pdl=False,
               scale_a=None, scale_b=None, scale_a_value=None, scale_b_value=None, a_format=None, b_format=None,
               precision=None, scale_mode=None):
    shape, dtype = result_meta(a, b, out_dtype, activation, a_format, b_format, precision)
    return a.new_empty(shape, dtype=dtype)


@gemm_out.register_fake
def _gemm_out_fake(a, b, out, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, out_dtype=None, pdl=False,
                   scale_a=None, scale_b=None, scale_a_value=None, scale_b_value=None, a_format=None, b_format=None,
                   precision=None, scale_mode=None):
    shape, dtype = result_meta(a, b, out_dtype, activation, a_format, b_format, precision)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.dtype != dtype:
        raise TypeError(f"out has dtype {torch_dtype_name(out.dtype)}, expected {torch_dtype_name(dtype)}")


def _split_scale(name: str, s):
    """A scale as the op takes it: (tensor, None), (None, float) or (None, None)."""
    if s is None or isinstance(s, torch.Tensor):
        return s, None
    if isinstance(s, bool) or not isinstance(s, (int, float)):
        raise TypeError(f"{name} must be a Python float or a 1-element float32 torch tensor, got "
                        f"{type(s).__module__}.{type(s).__name__}")
    return None, float(s)


def _torch_dtype(dt):
    return dt if isinstance(dt, torch.dtype) else getattr(torch, dtype_name(dt))


def gemm_op(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b, a_format, b_format,
            precision, scale_mode, forced):
    """rawcoop.gemm's arguments as a call of the custom op (functional, or
    ``gemm_out`` with ``out``, which is returned)."""
    if any(x is not None for x in forced):
        names = ", ".join(n for n, x in zip(FORCED_OPTIONS, forced) if x is not None)
        raise ValueError(f"rawcoop.gemm's private options ({names}) are not available under torch.compile or on "
                         "fake tensors")
    sa, sa_value = _split_scale("scale_a", scale_a)
    sb, sb_value = _split_scale("scale_b", scale_b)
    options = (float(alpha), float(beta), bias, activation, None if out_dtype is None else _torch_dtype(out_dtype),
               bool(pdl), sa, sb, sa_value, sb_value, a_format, b_format, precision, scale_mode)
    if out is None:
        return torch.ops.rawcoop.gemm(a, b, c, *options)
    torch.ops.rawcoop.gemm_out(a, b, out, c, *options)
    return out
