"""The one place that imports the CUDA Python bindings.

cuda-bindings 12.x and 13.x both provide ``cuda.bindings.driver`` and
``cuda.bindings.nvrtc``; very old cuda-python (< 12.6) only had
``cuda.cuda``/``cuda.nvrtc``.  Every other module imports ``driver`` and
``nvrtc`` from here and turns their ``(error, *values)`` tuples into values or
exceptions with :func:`check`.
"""
from __future__ import annotations

try:  # cuda-bindings >= 12.6 (both the 12.x and 13.x lines)
    from cuda.bindings import driver, nvrtc
except ImportError:  # pragma: no cover - legacy cuda-python layout
    from cuda import cuda as driver  # type: ignore[no-redef]
    from cuda import nvrtc  # type: ignore[no-redef]


class CudaError(RuntimeError):
    """A CUDA driver API call failed."""

    def __init__(self, call: str, code, name: str, text: str):
        self.call = call
        self.code = code
        self.name = name
        super().__init__(f"{call} failed: {name} ({text})")


def _error_strings(err) -> tuple[str, str]:
    try:
        name = driver.cuGetErrorName(err)[1]
        text = driver.cuGetErrorString(err)[1]
        return (name.decode() if isinstance(name, bytes) else str(name),
                text.decode() if isinstance(text, bytes) else str(text))
    except Exception:  # pragma: no cover - error while reporting an error
        return str(err), ""


def check(ret, call: str):
    """Unpack a driver-API result tuple; raise :class:`CudaError` on failure.

    Returns ``None``, the single value, or a tuple of values.
    """
    err = ret[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        name, text = _error_strings(err)
        raise CudaError(call, err, name, text)
    rest = ret[1:]
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def nvrtc_check(ret, call: str):
    """Like :func:`check` for NVRTC calls (raises ``RuntimeError``)."""
    err = ret[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        msg = nvrtc.nvrtcGetErrorString(err)[1]
        raise RuntimeError(f"{call} failed: {msg.decode() if isinstance(msg, bytes) else msg}")
    rest = ret[1:]
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def bindings_version() -> str:
    try:
        from importlib.metadata import version
        return version("cuda-bindings")
    except Exception:
        try:
            from importlib.metadata import version
            return version("cuda-python")
        except Exception:
            return "unknown"
