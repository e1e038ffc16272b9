"""``rawcoop.gemm`` on torch tensors, eager: the plan cache keyed on what a
tensor says about itself (``data_ptr()``, ``get_device()``, ``shape``,
``stride()``, ``dtype``), so a repeated call builds no CuPy array and no
DLPack capsule; the result from torch's caching allocator on a's device; the
launch on torch's current stream of that device.

A plan is built once per key, from CuPy views of the tensors
(operands.torch_view: no DLPack, so tensors that require grad are fine), by
the same gemm_plan._build_plan as for CuPy arrays, and kept in the same
cache.  ``_TorchTensors`` is the torch side of gemm_plan._Plan.run (the CuPy
side is gemm_plan._CupyArrays).  Under ``torch.compile`` and for tensor
subclasses (FakeTensor, FunctionalTensor) or meta tensors the call goes
through the ``rawcoop::gemm`` custom op instead (rawcoop/torch/ops.py)."""
from __future__ import annotations

import numpy as np
import torch

from .. import _cuda
from .._reference import activation as _activation
from ..gemm_plan import (_DATA_PARALLEL, _PLANS, _build_plan, _Empty, _print_config, _remember, _run_plan)
from ..operands import np_dtype, torch_dtype_name, torch_view

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_OUT_DTYPES = {np_dtype(n): getattr(torch, n) for n in ("float16", "bfloat16", "float32")}
_DEVICES: dict[int, torch.device] = {}
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream(dev: int) -> int:
    """The raw handle of torch's current stream on device ``dev``."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(dev)
    return torch.cuda.current_stream(dev).cuda_stream


def _device(dev: int) -> torch.device:
    d = _DEVICES.get(dev)
    if d is None:
        d = _DEVICES[dev] = torch.device("cuda", dev)
    return d


def _kind(x) -> str:
    return f"{type(x).__module__}.{type(x).__name__}"


class _TorchTensors:
    """The torch side of gemm_plan._Plan.run: ``out`` must be a torch tensor
    on the plan's device; results come from ``torch.empty`` (torch's caching
    allocator, also inside ``torch.cuda.graph``'s private pool, so temporaries
    are fine under capture); the launch goes on torch's current stream of the
    device; nothing switches the current device."""

    __slots__ = ()
    capture_temporaries = True

    def check_out(self, out, dev, shape, dtype):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch tensor (a is one), got {_kind(out)}")
        od = out.get_device()
        if od != dev:
            raise ValueError(f"out is on device {od if od >= 0 else repr(out.device.type)}, but a is on device {dev}")
        if out.shape != shape:
            raise ValueError(f"out has shape {tuple(out.shape)}, expected {shape}")
        if out.dtype != _OUT_DTYPES[dtype]:
            raise TypeError(f"out has dtype {torch_dtype_name(out.dtype)}, expected {dtype.name}")

    def enter(self, dev):
        return None

    def exit(self, prev):
        pass

    def stream(self, dev) -> int:
        return current_stream(dev)

    def out_key(self, x):
        return x.data_ptr(), x.stride()      # element strides: the plan fixes the dtype

    def layout(self, x):
        isz = x.element_size()
        return x.data_ptr(), tuple(s * isz for s in x.stride())

    def empty(self, shape, dtype, dev):
        return torch.empty(shape, dtype=_OUT_DTYPES[dtype], device=_device(dev))

    def result(self, res, strided: bool):
        return res if res.is_contiguous() else res.contiguous()

    def copy(self, out, d):
        out.copy_(d)


TORCH = _TorchTensors()


def _tensor_key(t):
    return t.data_ptr(), t.get_device(), t.shape, t.stride(), t.dtype


def _scale_key(s):
    if s is None or type(s) in (float, int):
        return type(s), s
    if isinstance(s, torch.Tensor):
        return _tensor_key(s)
    return type(s), s                   # NumPy numbers; anything else fails validation (or hashing)


def gemm(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b, a_format, b_format,
         precision, scale_mode, forced):
    """``rawcoop.gemm`` with torch tensors (rawcoop/gemm.py routes them
    here): the ``rawcoop::gemm`` custom op while torch.compile traces, and
    for tensor subclasses (FakeTensor, FunctionalTensor) and meta tensors;
    else :func:`eager_gemm`."""
    if (torch.compiler.is_compiling() or (type(a) not in _PLAIN and isinstance(a, torch.Tensor))
            or (type(b) not in _PLAIN and isinstance(b, torch.Tensor))
            or (isinstance(a, torch.Tensor) and a.is_meta)):
        return ops.gemm_op(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b,
                           a_format, b_format, precision, scale_mode, forced)
    return eager_gemm(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b, a_format,
                      b_format, precision, scale_mode, forced)


def eager_gemm(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b, a_format, b_format,
               precision, scale_mode, forced):
    """The call on real CUDA tensors: its cached plan, run on torch's stream
    (also the custom op's CUDA implementation)."""
    lowp = (None if scale_a is None and scale_b is None and a_format is None and b_format is None
            and precision is None and scale_mode is None
            else (scale_a, scale_b, a_format, b_format, precision, scale_mode))
    cp = _cuda.cupy()
    plan = _cached(cp, a, b, c, alpha, beta, bias, activation, out_dtype, pdl, forced, lowp)
    if isinstance(plan, _Empty):
        return _no_launch(plan, a, c, bias, out)
    _print_config(plan)
    return _run_plan(cp, plan, out, forced, lambda: _cached(cp, a, b, c, alpha, beta, bias, activation, out_dtype,
                                                            pdl, _DATA_PARALLEL, lowp), TORCH)


def _cached(cp, a, b, c, alpha, beta, bias, activation, out_dtype, pdl, forced, lowp):
    """The cached plan for these tensors and options (the same cache as CuPy
    arrays' plans, which torch dtypes in the key keep apart), built on a miss;
    an _Empty for an empty / K == 0 problem."""
    try:
        key = (a.data_ptr(), a.get_device(), a.shape, a.stride(), a.dtype,
               b.data_ptr(), b.get_device(), b.shape, b.stride(), b.dtype,
               None if c is None else _tensor_key(c), alpha, beta,
               None if bias is None else _tensor_key(bias), activation, out_dtype, pdl, forced,
               None if lowp is None else (_scale_key(lowp[0]), _scale_key(lowp[1])) + lowp[2:])
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):        # not all torch tensors, or unhashable options: full validation
        key = plan = None
    if plan is None:
        for x in (alpha, beta):
            if isinstance(x, torch.Tensor):
                raise TypeError("alpha and beta must be real numbers (Python floats), not tensors: rawcoop reads "
                                "them on the host; a device scale of fp8 inputs goes in scale_a / scale_b")
        args = _views(cp, a, b, c, bias, lowp)
        plan = _build_plan(cp, args[0], args[1], args[2], alpha, beta, args[3], activation, None, out_dtype, pdl,
                           forced, args[4], side=TORCH)
        if key is not None:
            _remember(key, plan)
    return plan


def _views(cp, a, b, c, bias, lowp):
    """CuPy views of the tensors for planning (operands.torch_view), with
    TypeError naming any array argument that is not a torch tensor."""
    def view(name, x, required=False):
        if x is None and not required:
            return None
        if not isinstance(x, torch.Tensor):
            what = "None" if x is None else f"a {_kind(x)}"
            raise TypeError(f"{name} must be a torch tensor like the other operand, got {what}: pass torch "
                            "tensors for every array argument (or CuPy arrays for every one)")
        return torch_view(cp, name, x)
    va, vb, vc, vbias = view("a", a, True), view("b", b, True), view("c", c), view("bias", bias)
    if lowp is not None:
        scales = []
        for name, s in (("scale_a", lowp[0]), ("scale_b", lowp[1])):
            if isinstance(s, torch.Tensor):
                s = torch_view(cp, name, s)
            elif s is not None and not isinstance(s, (int, float, np.number)):
                raise TypeError(f"{name} must be a Python float or a 1-element float32 torch tensor on a's "
                                f"device, got {_kind(s)}")
            scales.append(s)
        lowp = tuple(scales) + tuple(lowp[2:])
    return va, vb, vc, vbias, lowp


_XP = type("_TorchXP", (), {"maximum": staticmethod(torch.clamp_min), "tanh": staticmethod(torch.tanh),
                            "exp": staticmethod(torch.exp)})


def _no_launch(plan: _Empty, a, c, bias, out):
    """An empty result, or K == 0: D = act(beta·c + bias) in fp32, rounded
    once (as the CuPy path), with torch ops on torch's current stream."""
    dtype = _OUT_DTYPES[np_dtype(plan.out_name)]
    if out is not None:
        TORCH.check_out(out, plan.dev, plan.out_shape, np_dtype(plan.out_name))
    if plan.empty:
        return out if out is not None else torch.empty(plan.out_shape, dtype=dtype, device=a.device)
    v = torch.zeros(plan.out_shape, dtype=torch.float32, device=a.device)
    if plan.use_c:
        v = v + plan.beta * c.float()
    if bias is not None:
        v = v + bias.float()
    v = _activation(_XP, v, plan.activation)
    if out is None:
        return v.to(dtype)
    out.copy_(v)
    return out


from . import ops  # noqa: E402  (the custom ops, whose CUDA implementation is eager_gemm)
