"""``rawcoop.gemm``: the public GEMM entry point (host side of kernels/gemm.cu).

Contract with the kernel (see the header comment of kernels/gemm.cu):
  * A: (M, K) with unit stride along K (row-major), as a rank-2 TMA map
    dims (K, M), box (64, 128), 128-byte swizzle.
  * B: (K, N) with unit stride along K (column-major; ``b = bt.T`` of a
    row-major (N, K) array), as dims (K, N), box (64, BLOCK_N), 128B swizzle.
  * D: (M, N) row-major, dims (N, M), box (64, 64), 128B swizzle (the
    epilogue's staging layout).  Row pitch must be a multiple of 16 bytes; for
    other N we compute into a padded buffer and copy.
  * grid = min(#SMs, #tiles) persistent CTAs of 384 threads, one per SM.
"""
from __future__ import annotations

import numpy as np

from . import device as _device
from . import gemm_configs, scheduler, tma
from .launch import I32, TENSOR_MAP, get_kernel

_BF16 = None


def _bf16():
    global _BF16
    if _BF16 is None:
        import ml_dtypes
        _BF16 = np.dtype(ml_dtypes.bfloat16)
    return _BF16


_SUPPORTED = ("float16", "bfloat16")
_TYPES = (TENSOR_MAP, TENSOR_MAP, TENSOR_MAP, I32, I32, I32, I32, I32, I32)


def _check_operand(name: str, x, cp) -> None:
    if not isinstance(x, cp.ndarray):
        raise TypeError(f"{name} must be a cupy.ndarray, got {type(x).__module__}.{type(x).__name__}")
    if x.dtype.name not in _SUPPORTED:
        raise TypeError(f"{name} has dtype {x.dtype.name}; rawcoop.gemm supports float16 and bfloat16 "
                        "(ml_dtypes.bfloat16)")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {x.shape}")


def _pitch(x, axis: int, other: int, name: str, what: str) -> int:
    """Byte stride of ``x`` along ``axis`` as TMA will see it.  When that
    dimension has size 1 its stride is never used, so any valid value works."""
    isz = x.dtype.itemsize
    if x.shape[axis] == 1:
        return -(-(x.shape[other] * isz) // 16) * 16
    s = x.strides[axis]
    if s <= 0 or s % 16:
        raise ValueError(f"{name}: the stride between {what} is {s} bytes; TMA needs a positive multiple of "
                         f"16 bytes (pad that dimension to a multiple of {16 // isz} elements, "
                         "e.g. allocate a larger array and slice it)")
    return s


def gemm(a, b, *, out=None, _block_n: int | None = None, _group: int | None = None):
    """``a @ b`` on the GPU with rawcoop's Hopper kernel.

    a: (M, K) row-major, b: (K, N) column-major (``bt.T`` for a row-major
    (N, K) ``bt``); float16 or bfloat16 (ml_dtypes), fp32 accumulation, result
    in the input dtype.  ``out``: optional C-contiguous (M, N) array of that
    dtype on the same device.  Returns a cupy array.  (``_block_n``/``_group``
    force a configuration; for benchmarks and tests only.)
    """
    import cupy as cp

    _check_operand("a", a, cp)
    _check_operand("b", b, cp)
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have the same dtype, got {a.dtype.name} and {b.dtype.name}")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise ValueError(f"shape mismatch: a is {a.shape}, b is {b.shape} (a.shape[1] must equal b.shape[0])")
    dev = a.device.id
    if b.device.id != dev:
        raise ValueError(f"a is on device {dev} but b is on device {b.device.id}")
    isz = a.dtype.itemsize
    if out is not None:
        if not isinstance(out, cp.ndarray):
            raise TypeError(f"out must be a cupy.ndarray, got {type(out).__name__}")
        if out.shape != (m, n):
            raise ValueError(f"out has shape {out.shape}, expected {(m, n)}")
        if out.dtype != a.dtype:
            raise TypeError(f"out has dtype {out.dtype.name}, expected {a.dtype.name}")
        if not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous (row-major)")
        if out.device.id != dev:
            raise ValueError(f"out is on device {out.device.id}, a and b on device {dev}")
    if m == 0 or n == 0 or k == 0:
        if out is None:
            with cp.cuda.Device(dev):
                out = cp.zeros((m, n), dtype=a.dtype)
        else:
            out.fill(0)
        return out
    # Layout: this kernel takes TN (both operands K-major).
    if a.strides[1] != isz and k > 1:
        raise NotImplementedError(
            "a must be row-major (unit stride along K); column-major A (the NN/NT layouts) is not "
            "supported yet: pass cupy.ascontiguousarray(a)")
    if b.strides[0] != isz and k > 1:
        raise NotImplementedError(
            "b must be column-major (b = bt.T of a row-major (N, K) array: the TN layout); row-major B "
            "is not supported yet: pass cupy.ascontiguousarray(b.T).T")
    lda = _pitch(a, 0, 1, "a", "rows of a (a.strides[0])")
    ldb = _pitch(b, 1, 0, "b", "columns of b (b.strides[1])")
    for name, x in (("a", a), ("b", b)):
        if x.data.ptr % 16:
            raise ValueError(f"{name}: base address 0x{x.data.ptr:x} is not 16-byte aligned, as TMA needs "
                             "(slicing at an offset that is not a multiple of 16 bytes causes this)")

    info = _device.info(dev)
    bf16 = a.dtype.name == "bfloat16"
    cfg = (gemm_configs.config(_block_n, bf16) if _block_n is not None
           else gemm_configs.choose(m, n, k, bf16, info.sm_count))
    sched = scheduler.schedule(m, n, gemm_configs.BLOCK_M, cfg.block_n, info.sm_count, _group)

    pitch_ok = (n * isz) % 16 == 0
    dt = tma.dtype_of(a.dtype)
    sw = tma.Swizzle.B128
    kernel = get_kernel(cfg.spec)
    with cp.cuda.Device(dev):
        if out is not None and pitch_ok:
            d = out
        else:  # TMA stores need a row pitch that is a multiple of 16 bytes
            d = cp.empty((m, -(-n // 8) * 8), dtype=a.dtype)
        map_a = tma.tiled(dt, a.data.ptr, (k, m), (lda,), (64, 128), sw)
        map_b = tma.tiled(dt, b.data.ptr, (k, n), (ldb,), (64, cfg.block_n), sw)
        map_d = tma.tiled(dt, d.data.ptr, (n, m), (d.strides[0],), (64, 64), sw)
        with _device.on_device(dev):
            kernel.function(dev)
            stream = cp.cuda.get_current_stream(dev).ptr
            kernel.launch(dev, (sched.grid, 1, 1), gemm_configs.THREADS, cfg.smem_bytes, stream,
                          (map_a, map_b, map_d, m, n, k, sched.tiles_m, sched.tiles_n, sched.group), _TYPES)
        if d is out:
            return out
        if out is None:
            return d if d.shape[1] == n else cp.ascontiguousarray(d[:, :n])
        out[...] = d[:, :n]
        return out
