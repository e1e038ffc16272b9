"""The one place that imports the CUDA Python bindings and CuPy, both lazily.

``import rawcoop`` needs neither.  ``driver`` and ``nvrtc`` below stand for
``cuda.bindings.driver`` and ``cuda.bindings.nvrtc`` (cuda-bindings 12.x and
13.x; very old cuda-python < 12.6 had ``cuda.cuda``/``cuda.nvrtc``): the first
attribute read imports the bindings, and every attribute read is kept on the
stand-in, so later reads cost what a module attribute costs.  :func:`cupy`
returns the CuPy module.  When a package is missing, the first use raises
:class:`MissingCudaPackage`, an ImportError that says which extra to install
(``rawcoop[cu12]`` or ``rawcoop[cu13]``, by the driver's CUDA major version).
Every other module imports ``driver`` and ``nvrtc`` from here and turns their
``(error, *values)`` tuples into values or exceptions with :func:`check`.
"""
from __future__ import annotations

import re
import sys

CUPY_MIN = (14,)
"""CuPy's first release with bfloat16 arrays (``ml_dtypes.bfloat16``)."""
NUMPY_MIN = (2, 1, 2)
"""CuPy's bfloat16 support needs NumPy 2.1.2 or newer (CuPy 14's upgrade guide)."""


class MissingCudaPackage(ImportError):
    """A CUDA package rawcoop needs (cuda-bindings, CuPy) is missing or too old."""


def driver_cuda_major() -> int | None:
    """The CUDA major version the installed driver supports, read from the
    driver library itself with ctypes (no bindings needed); None without one."""
    import ctypes
    names = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            version = ctypes.c_int(0)
            if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
                return version.value // 1000
        except (OSError, AttributeError):
            continue
    return None


def install_hint() -> str:
    """What to install for the CUDA packages, by this machine's driver."""
    major = driver_cuda_major()
    if major is None:
        return ("pip install 'rawcoop[cu12]' or 'rawcoop[cu13]' (no CUDA driver found here: either works for "
                "`python -m rawcoop warmup`, which compiles without a GPU; on a GPU machine pick the extra of its "
                "driver's CUDA major version)")
    if major >= 13:
        return f"pip install 'rawcoop[cu13]' (this machine's driver supports CUDA {major})"
    if major == 12:
        return "pip install 'rawcoop[cu12]' (this machine's driver supports CUDA 12)"
    return (f"this machine's driver supports CUDA {major} only; rawcoop needs a CUDA 12 or 13 driver: update "
            "the driver, then pip install 'rawcoop[cu12]' or 'rawcoop[cu13]' to match it")


def _missing(what: str, why) -> MissingCudaPackage:
    return MissingCudaPackage(f"rawcoop needs {what}, which cannot be imported ({why}): {install_hint()}")


_MODULES: dict = {}


def _bindings() -> dict:
    if not _MODULES:
        try:
            from cuda.bindings import driver as drv
            from cuda.bindings import nvrtc as rtc
        except ImportError as e:
            try:  # pragma: no cover - legacy cuda-python layout
                from cuda import cuda as drv  # type: ignore[no-redef]
                from cuda import nvrtc as rtc  # type: ignore[no-redef]
            except ImportError:
                raise _missing("the CUDA Python bindings (cuda-bindings)", e) from None
        _MODULES.update(driver=drv, nvrtc=rtc)
    return _MODULES


class _Lazy:
    """Stands for one bindings module: imports it at the first attribute read
    and keeps each attribute read on itself (plain attribute lookups after)."""

    def __init__(self, name: str):
        self._module_name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)          # copy/pickle/inspect probes: never an import
        value = getattr(_bindings()[self._module_name], attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<rawcoop stand-in for cuda.bindings.{self._module_name}>"


driver = _Lazy("driver")
nvrtc = _Lazy("nvrtc")


def bindings_available() -> bool:
    """Whether the CUDA Python bindings import (without raising)."""
    try:
        _bindings()
    except ImportError:
        return False
    return True


def _version_tuple(text: str) -> tuple:
    """(major, minor, patch) of a version string, as far as it has them."""
    m = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    return tuple(int(g) for g in m.groups() if g is not None) if m else ()


def check_versions(cupy_version: str, numpy_version: str) -> None:
    """Raise :class:`MissingCudaPackage` for a CuPy or NumPy too old for
    bfloat16 arrays (possible where CuPy came from outside rawcoop's extras)."""
    if _version_tuple(cupy_version) < CUPY_MIN:
        raise MissingCudaPackage(f"rawcoop needs CuPy >= {'.'.join(map(str, CUPY_MIN))} (bfloat16 arrays); this "
                                 f"environment has CuPy {cupy_version}: {install_hint()}")
    if _version_tuple(numpy_version) < NUMPY_MIN:
        raise MissingCudaPackage(f"rawcoop needs NumPy >= {'.'.join(map(str, NUMPY_MIN))} (CuPy's bfloat16 "
                                 f"arrays need it); this environment has NumPy {numpy_version}: "
                                 "pip install -U 'numpy>=2.1.2'")


_CUPY = None


def cupy():
    """The CuPy module (imported and version-checked once)."""
    global _CUPY
    if _CUPY is None:
        try:
            import cupy as cp
        except ImportError as e:
            raise _missing("CuPy", e) from None
        import numpy
        check_versions(cp.__version__, numpy.__version__)
        _CUPY = cp
    return _CUPY


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
    from importlib.metadata import PackageNotFoundError, version
    for name in ("cuda-bindings", "cuda-python"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "not installed"
