"""What rawcoop is compared with: cuBLAS through CuPy (``cupy.matmul``, and
``cublasGemmStridedBatchedEx`` for batches), cuBLASLt through
``torch._scaled_mm`` (fp8), cuBLAS and torch with TF32 switched on, and the
CuPy element-wise kernels that complete cuBLAS's output where rawcoop fuses
an epilogue.

Nothing here imports CuPy or torch at import time.
"""
from __future__ import annotations

import contextlib
import os
import warnings

BASE_SCALED_MM = "cuBLASLt _scaled_mm"
BASE_SCALED_MM_FAST = "cuBLASLt _scaled_mm fast-accum"
BASE_CUBLAS_TF32 = "cuBLAS tf32"
BASE_TORCH_TF32 = "torch tf32"
NO_BASELINE = "none"
"""Baseline name of a row timed without one (rawcoop alone: torch missing or refusing)."""


def first_line(e: BaseException) -> str:
    """``Type: first line of the message``: an error in one line."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}"


# ---------------------------------------------------------------- cuBLAS
def cublas_strided_batched(cp, a, b, d):
    """A callable computing ``d = a @ b`` for 3-D a (L, M, K), b (L, K, N)
    (each batch row- or column-major, as the strides say) into a C-contiguous
    d (L, M, N) with one ``cublasGemmStridedBatchedEx`` (fp32 compute, default
    algorithm): cuBLAS's batched GEMM, which ``cupy.matmul`` on 3-D arrays does
    not reach for fp16 and rejects for bfloat16."""
    import numpy as np
    from cupy_backends.cuda.libs import cublas

    types = {"float16": 2, "bfloat16": 14}            # CUDA_R_16F, CUDA_R_16BF
    if a.ndim != 3 or b.ndim != 3 or d.ndim != 3 or not d.flags.c_contiguous:
        raise ValueError("3-D a, b and a C-contiguous 3-D d expected")
    if a.dtype != b.dtype or a.dtype != d.dtype or a.dtype.name not in types:
        raise ValueError(f"float16/bfloat16 operands of one dtype expected, got {a.dtype}, {b.dtype}, {d.dtype}")
    L, m, k = a.shape
    n = b.shape[2]
    isz = a.dtype.itemsize

    def op_ld(x):
        # cuBLAS is column-major: d^T (N x M) = b^T (N x K) . a^T (K x M); return op and leading
        # dimension that turn x's memory into x^T, and x's batch stride (elements).
        sb, sr, sc = (s // isz for s in x.strides)
        if sc == 1:
            return cublas.CUBLAS_OP_N, sr, sb
        if sr == 1:
            return cublas.CUBLAS_OP_T, sc, sb
        raise ValueError(f"operand with strides {x.strides} is neither row- nor column-major")

    opx, ldx, sx = op_ld(b)
    opy, ldy, sy = op_ld(a)
    ctype = types[a.dtype.name]
    alpha = np.ones((), np.float32)
    beta = np.zeros((), np.float32)

    def run():
        h = cp.cuda.device.get_cublas_handle()
        cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)
        cublas.gemmStridedBatchedEx(h, opx, opy, n, m, k, alpha.ctypes.data, b.data.ptr, ctype, ldx, sx,
                                    a.data.ptr, ctype, ldy, sy, beta.ctypes.data, d.data.ptr, ctype, n, m * n, L,
                                    cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
    return run


def axpby_kernel(cp):
    """``d = alpha * x + beta * c`` in float32, one CuPy element-wise kernel
    (what cuBLAS + an epilogue costs where rawcoop fuses beta*C)."""
    return cp.ElementwiseKernel("T x, T c, float32 alpha, float32 beta", "T d",
                                "d = (T)(alpha * (float)x + beta * (float)c)", "rc_axpby")


def bias_gelu_kernel(cp):
    """``d = gelu(x + bias[column])`` (tanh form), one CuPy element-wise kernel."""
    return cp.ElementwiseKernel(
        "T x, raw float32 bias, int32 n", "T d",
        "float v = (float)x + bias[i % n];"
        "d = (T)(0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))))", "rc_bias_gelu")


# ---------------------------------------------------------------- TF32 switches
def cupy_linalg():
    """CuPy's GEMM module when it has the compute-type switch (CuPy >= 8), else None."""
    try:
        from cupy._core import _routines_linalg as L
        L.get_compute_type, L.set_compute_type, L.COMPUTE_TYPE_TF32, L.compute_type_to_str  # noqa: B018
        return L
    except Exception:  # noqa: BLE001
        return None


CUBLAS_COMPUTE = {"COMPUTE_TYPE_TF32": "CUBLAS_COMPUTE_32F_FAST_TF32", "COMPUTE_TYPE_DEFAULT": "CUBLAS_COMPUTE_32F",
                  "COMPUTE_TYPE_FP32": "CUBLAS_COMPUTE_32F", "COMPUTE_TYPE_PEDANTIC": "CUBLAS_COMPUTE_32F_PEDANTIC"}
"""CuPy float32 compute type -> what cupy.matmul passes to cublasGemmEx (tensordot_core_v11)."""


@contextlib.contextmanager
def cupy_f32_compute_type(cp, name: str):
    """Within the block, cupy.matmul on float32 uses CuPy compute type
    ``name`` ("TF32" or "DEFAULT"); yields what CuPy then reports, e.g.
    "COMPUTE_TYPE_TF32".  CuPy reads CUPY_TF32 once, lazily, at the first
    float32 GEMM of the process (not at import); ``set_compute_type`` is the
    switch behind it.  Without that switch: CUPY_TF32 is set (effective only
    if no float32 GEMM ran yet) and "unknown (CUPY_TF32=1 set)" is yielded."""
    L = cupy_linalg()
    if L is None:
        old_env = os.environ.get("CUPY_TF32")
        if name == "TF32":
            os.environ["CUPY_TF32"] = "1"
        try:
            yield "unknown (CUPY_TF32=1 set)" if name == "TF32" else "unknown"
        finally:
            if old_env is None:
                os.environ.pop("CUPY_TF32", None)
            else:
                os.environ["CUPY_TF32"] = old_env
        return
    old = L.get_compute_type(cp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L.set_compute_type(cp.float32, getattr(L, "COMPUTE_TYPE_" + name))
    try:
        yield str(L.compute_type_to_str(L.get_compute_type(cp.float32)))
    finally:
        L.set_compute_type(cp.float32, old)


@contextlib.contextmanager
def torch_tf32(torch):
    """Within the block torch's float32 matmuls may use TF32; yields the
    setting used.  torch >= 2.9 has ``torch.backends.cuda.matmul.fp32_precision``
    and raises RuntimeError when it is mixed with the legacy ``allow_tf32``,
    so the legacy flag is touched only where the new one does not exist."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        old = m.fp32_precision
        m.fp32_precision = "tf32"
        try:
            yield 'torch.backends.cuda.matmul.fp32_precision = "tf32"'
        finally:
            m.fp32_precision = old
    else:
        old = m.allow_tf32
        m.allow_tf32 = True
        try:
            yield "torch.backends.cuda.matmul.allow_tf32 = True"
        finally:
            m.allow_tf32 = old


# ---------------------------------------------------------------- torch
def import_torch():
    """(torch, None) when torch imports and sees a GPU, else (None, why).
    Any exception counts: ``import torch`` has been seen to raise
    RuntimeError on an H200 machine."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        return None, f"import torch failed: {first_line(e)}"
    try:
        if not torch.cuda.is_available():
            return None, f"torch {torch.__version__} sees no CUDA GPU"
    except Exception as e:  # noqa: BLE001
        return None, f"torch.cuda.is_available() failed: {type(e).__name__}: {e}"
    return torch, None


def scaled_mm(torch, TA, TB, TSA, TSB, TD, fast: bool):
    """cuBLASLt through ``torch._scaled_mm`` on input set i: (fn(i), call
    text, writes_out, None), or (None, None, False, why) when torch refuses.
    fn writes into TD[i] (bf16 views of CuPy memory) when ``out=`` is
    accepted (writes_out), else returns torch's output."""
    kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
    text = (f"torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, "
            f"use_fast_accum={fast}")
    try:
        torch._scaled_mm(TA[0], TB[0], scale_a=TSA[0], scale_b=TSB[0], out=TD[0], **kw)

        def with_out(i):
            return torch._scaled_mm(TA[i], TB[i], scale_a=TSA[i], scale_b=TSB[i], out=TD[i], **kw)
        return with_out, text + ", out=d)", True, None
    except (TypeError, RuntimeError, ValueError):
        pass
    try:
        torch._scaled_mm(TA[0], TB[0], scale_a=TSA[0], scale_b=TSB[0], **kw)
    except (TypeError, RuntimeError, ValueError) as e:
        return None, None, False, f"torch._scaled_mm refused: {first_line(e)}"

    def no_out(i):
        r = torch._scaled_mm(TA[i], TB[i], scale_a=TSA[i], scale_b=TSB[i], **kw)
        return r[0] if isinstance(r, tuple) else r       # torch < 2.4: (out, amax)
    return no_out, text + ")  [out= refused: torch allocates the output]", False, None
