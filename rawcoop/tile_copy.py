"""``replicate``: the foundation's TMA + cluster-multicast kernel as an op.

``replicate(src, copies)`` returns ``out`` of shape ``(copies, M, N)`` with
``out[r] == src`` bit for bit.  One cluster of ``copies`` CTAs handles each
tile: every CTA loads ``1/copies`` of the tile's rows and multicasts them to
all CTAs of the cluster, then each CTA stores the whole tile it received to
``out[rank]``.  A wrong slice, a lost multicast or a stale ring slot shows up
as a bit difference.  See kernels/tile_copy.cu for the barrier protocol.
"""
from __future__ import annotations

from . import device as _device
from . import tma
from .compiler import KernelSpec
from .launch import I32, TENSOR_MAP, get_kernel

TILE_ROWS = 64
TILE_ROW_BYTES = 128
STAGES = 4
BLOCK = 64
SUPPORTED_COPIES = (1, 2, 4)
SUPPORTED_ITEMSIZES = (1, 2, 4, 8)


def spec(itemsize: int, copies: int) -> KernelSpec:
    return KernelSpec.make("tile_copy.cu", "tile_replicate", TILE_ROWS=TILE_ROWS,
                           TILE_COLS=TILE_ROW_BYTES // itemsize, ELEM_BYTES=itemsize,
                           STAGES=STAGES, CLUSTER=copies)


def all_specs() -> list[KernelSpec]:
    return [spec(i, c) for i in SUPPORTED_ITEMSIZES for c in SUPPORTED_COPIES]


def smem_bytes(itemsize: int) -> int:
    return STAGES * TILE_ROWS * TILE_ROW_BYTES + 16 * STAGES + 128


def replicate(src, copies: int = 2, out=None):
    """``out[r] = src`` for each of ``copies`` (1, 2 or 4) ranks, through TMA
    loads multicast across a cluster of ``copies`` CTAs.  ``src``: a 2-D GPU
    array of 1-, 2-, 4- or 8-byte elements with unit stride along its rows (a
    CuPy array or, as for ``rawcoop.gemm``, another library's CUDA array);
    ``out``: None or a C-contiguous ``(copies, M, N)`` array of src's dtype,
    returned as given."""
    from ._cuda import cupy
    from .operands import as_cupy
    cp = cupy()
    user_out = out
    src = as_cupy(cp, "src", src, required=True)
    out = as_cupy(cp, "out", out)
    if isinstance(copies, bool) or copies not in SUPPORTED_COPIES:
        raise ValueError(f"copies must be one of {SUPPORTED_COPIES}, got {copies}")
    if src.ndim != 2:
        raise ValueError(f"src must be 2-D, got shape {src.shape}")
    isz = src.dtype.itemsize
    if isz not in SUPPORTED_ITEMSIZES:
        raise TypeError(f"src dtype {src.dtype} has itemsize {isz}; supported: {SUPPORTED_ITEMSIZES}")
    m, n = src.shape
    if src.size and src.strides[1] != isz:
        raise ValueError("src must have unit stride along its last axis (row-major rows); use cupy.ascontiguousarray(src)")
    if src.size and (src.strides[0] % 16 or src.strides[0] <= 0):
        raise ValueError(f"src row stride {src.strides[0]} B must be a positive multiple of 16 bytes for TMA")
    if src.data.ptr % 16:
        raise ValueError("src base address must be 16-byte aligned for TMA")
    dev = src.device.id
    if out is None:
        with cp.cuda.Device(dev):
            out = cp.empty((copies, m, n), dtype=src.dtype)
    else:
        if out.shape != (copies, m, n) or out.dtype != src.dtype:
            raise ValueError(f"out must have shape {(copies, m, n)} and dtype {src.dtype}, got {out.shape} {out.dtype}")
        if not out.flags.c_contiguous:
            raise ValueError("out must be C-contiguous")
        if out.device.id != dev:
            raise ValueError(f"out is on device {out.device.id}, src on device {dev}")
    if src.size == 0:
        return out if user_out is None else user_out
    if (n * isz) % 16:
        raise ValueError(f"out rows are {n * isz} B; TMA needs row strides that are multiples of 16 bytes")

    tile_cols = TILE_ROW_BYTES // isz
    dt = tma.dtype_of(src.dtype)
    src_map = tma.tiled(dt, src.data.ptr, (n, m), (src.strides[0],), (tile_cols, TILE_ROWS // copies))
    dst_map = tma.tiled(dt, out.data.ptr, (n, m, copies), (n * isz, m * n * isz), (tile_cols, TILE_ROWS, 1))
    tiles_m, tiles_n = -(-m // TILE_ROWS), -(-n // tile_cols)
    kernel = get_kernel(spec(isz, copies))
    smem = smem_bytes(isz)
    with _device.on_device(dev):
        kernel.function(dev)
        clusters = min(tiles_m * tiles_n, max(1, kernel.max_active_clusters(dev, BLOCK, smem, (copies, 1, 1))))
        stream = cp.cuda.get_current_stream(dev).ptr
        kernel.launch(dev, (clusters * copies, 1, 1), BLOCK, smem, stream,
                      (src_map, dst_map, tiles_m, tiles_n), (TENSOR_MAP, TENSOR_MAP, I32, I32),
                      cluster=(copies, 1, 1))
    return out if user_out is None else user_out
