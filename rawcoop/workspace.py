"""Split-K workspaces: one fp32 buffer and one flag array per (device,
stream), grown on demand and reused across calls.

Streams get their own workspaces so that GEMMs running concurrently on
different streams never share fix-up slots.  Only the flags must start at
zero; they are cleared with one ``cudaMemsetAsync`` on the launch stream
before each split-K launch (the fp32 partials are always written before they
are read).
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_buffers: dict[tuple[int, int], tuple[object, object]] = {}


def get(dev: int, stream: int, floats: int, flags: int) -> tuple[int, int]:
    """(workspace pointer, flags pointer) with room for ``floats`` fp32 values
    and ``flags`` int32 flags; the flags are zeroed on ``stream``."""
    import cupy as cp
    key = (dev, stream)
    with _lock:
        ws, fl = _buffers.get(key, (None, None))
        if ws is None or ws.size < floats or fl.size < flags:
            with cp.cuda.Device(dev):
                ws = cp.empty(max(floats, ws.size if ws is not None else 0), dtype=cp.float32)
                fl = cp.empty(max(flags, fl.size if fl is not None else 0, 64), dtype=cp.int32)
            _buffers[key] = (ws, fl)
    cp.cuda.runtime.memsetAsync(fl.data.ptr, 0, flags * 4, stream)
    return ws.data.ptr, fl.data.ptr


def release_all() -> None:
    with _lock:
        _buffers.clear()
