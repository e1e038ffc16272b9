"""Split-K workspaces: one fp32 buffer and one flag array per (device,
stream), grown on demand and reused across calls.

Streams get their own workspaces so that GEMMs running concurrently on
different streams never share fix-up slots.  Only the flags must start at
zero: they are zeroed once, with ``cudaMemsetAsync`` on the stream, when a
buffer is allocated, and every launch leaves them zero again (a tile's last
split resets its flag).  The fp32 partials are always written before read.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_buffers: dict[tuple[int, int], tuple[object, object]] = {}


def get(dev: int, stream: int, floats: int, flags: int) -> tuple[int, int]:
    """(workspace pointer, flags pointer) with room for ``floats`` fp32 values
    and ``flags`` int32 flags, all flags zero when the launch on ``stream`` starts."""
    key = (dev, stream)
    hit = _buffers.get(key)
    if hit is not None and hit[0].size >= floats and hit[1].size >= flags:
        return hit[0].data.ptr, hit[1].data.ptr
    import cupy as cp
    with _lock:
        ws, fl = _buffers.get(key, (None, None))
        if ws is None or ws.size < floats or fl.size < flags:
            with cp.cuda.Device(dev):
                ws = cp.empty(max(floats, ws.size if ws is not None else 0), dtype=cp.float32)
                fl = cp.empty(max(flags, fl.size if fl is not None else 0, 64), dtype=cp.int32)
                cp.cuda.runtime.memsetAsync(fl.data.ptr, 0, fl.size * 4, stream)
            _buffers[key] = (ws, fl)
    return ws.data.ptr, fl.data.ptr


def release_all() -> None:
    with _lock:
        _buffers.clear()
