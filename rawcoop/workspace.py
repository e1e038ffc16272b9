"""Split-K workspaces: one fp32 buffer and one flag array per (device,
stream), grown on demand and reused across calls.

Streams get their own workspaces so that GEMMs running concurrently on
different streams never share fix-up slots (the per-thread default stream,
one stream per host thread behind a single handle, gets one per thread).
Only the flags must start at zero: they are zeroed once, with
``cudaMemsetAsync`` on the stream, when a buffer is allocated, and every
launch leaves them zero again (a tile's last split resets its flag).  The
fp32 partials are always written before read.

CUDA graphs.  A workspace is created only outside stream capture: a GEMM
captured into a graph uses the capturing stream's existing workspace, so
running the same GEMM once on that stream before ``begin_capture()`` is all a
graph needs.  A split-K GEMM whose workspace is missing or too small while
its stream captures raises :class:`CaptureWorkspaceError`, a RuntimeError
(rawcoop.gemm then captures the data-parallel kernel instead when split-K or
stream-K was its own choice; allocating here would bind the
graph to memory allocated inside the capture, and the memset that zeroes its
flags would run only when the graph runs).  The first workspace of a stream is
generous (``MIN_FLOATS``) and growth at least doubles, so few problems ever
need a second one.  A buffer replaced by a larger one is never freed, since a
captured graph may still point at it (that retains at most about the size of
the live buffers).  Replay a graph on its capturing stream, or order it with
that stream's other rawcoop GEMMs: both use the same slots.
:func:`release_all` frees everything; graphs captured earlier must not be
launched after it.
"""
from __future__ import annotations

import threading


class CaptureWorkspaceError(RuntimeError):
    """A workspace would have to be allocated while its stream is being
    captured into a CUDA graph."""


_lock = threading.Lock()
_buffers: dict[tuple, tuple[object, object]] = {}
_retired: list = []                 # replaced buffers, kept alive for graphs captured with them

PER_THREAD_STREAM = 2               # cudaStreamPerThread / CU_STREAM_PER_THREAD
MIN_FLOATS = 1 << 22                # 16 MiB: 128 split tiles of 128x256 (two consumer slots each)
MIN_FLAGS = 4096


def _key(dev: int, stream: int) -> tuple:
    if stream == PER_THREAD_STREAM:
        return (dev, stream, threading.get_ident())
    return (dev, stream)


def get(dev: int, stream: int, floats: int, flags: int) -> tuple[int, int]:
    """(workspace pointer, flags pointer) with room for ``floats`` fp32 values
    and ``flags`` int32 flags, all flags zero when the launch on ``stream`` starts.
    ``dev``'s CuPy current stream must be ``stream`` (the new buffers come from
    CuPy's pool arena of that stream).  Raises :class:`CaptureWorkspaceError`
    when a buffer would have to be allocated while ``stream`` is being
    captured into a CUDA graph."""
    hit = _buffers.get(_key(dev, stream))
    if hit is not None and hit[0].size >= floats and hit[1].size >= flags:
        return hit[0].data.ptr, hit[1].data.ptr
    return _grow(dev, stream, floats, flags)


def _grow(dev: int, stream: int, floats: int, flags: int) -> tuple[int, int]:
    import cupy as cp

    from . import device as _device
    key = _key(dev, stream)
    with _lock:
        ws, fl = _buffers.get(key, (None, None))
        if ws is not None and ws.size >= floats and fl.size >= flags:
            return ws.data.ptr, fl.data.ptr
        with cp.cuda.Device(dev):
            if _device.stream_capturing(dev, stream):
                have = "has none" if ws is None else f"has only {ws.size} and {fl.size}"
                raise CaptureWorkspaceError(
                    f"rawcoop.gemm: this split-K GEMM needs a workspace of {floats} fp32 slots and {flags} flags "
                    f"for stream 0x{stream:x} on device {dev}, which {have}, and none can be allocated while the "
                    "stream is being captured into a CUDA graph. Run the same gemm once on this stream before "
                    "begin_capture(): workspaces are kept per device and stream, and the graph then uses the "
                    "stream's")
            new_ws, new_fl = ws, fl
            if ws is None or ws.size < floats:
                new_ws = cp.empty(max(floats, MIN_FLOATS, 2 * ws.size if ws is not None else 0), dtype=cp.float32)
            if fl is None or fl.size < flags:
                new_fl = cp.empty(max(flags, MIN_FLAGS, 2 * fl.size if fl is not None else 0), dtype=cp.int32)
                cp.cuda.runtime.memsetAsync(new_fl.data.ptr, 0, new_fl.size * 4, stream)
        for old, new in ((ws, new_ws), (fl, new_fl)):
            if old is not None and old is not new:
                _retired.append(old)
        _buffers[key] = (new_ws, new_fl)
    return new_ws.data.ptr, new_fl.data.ptr


def release_all() -> None:
    """Free every workspace (after the work using them has finished; graphs
    captured with them must not be launched afterwards)."""
    with _lock:
        _buffers.clear()
        _retired.clear()
