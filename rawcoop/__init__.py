"""rawcoop: Hopper GEMM kernels in CUDA C++ with inline PTX, compiled at run
time by NVRTC for sm_90a and launched from Python.

Importing rawcoop needs neither the CUDA Python bindings nor CuPy; the first
call that does raises ``MissingCudaPackage`` (an ImportError) naming the extra
to install: ``rawcoop[cu12]`` or ``rawcoop[cu13]``."""
from __future__ import annotations

__version__ = "0.1.0"

from ._cuda import MissingCudaPackage  # noqa: E402
from .compiler import CompileError, KernelSpec  # noqa: E402
from .gemm import gemm  # noqa: E402
from .operands import mn_major_scales  # noqa: E402
from .tile_copy import replicate  # noqa: E402
from .tuning import tune  # noqa: E402
from .tma import TensorMapError  # noqa: E402

__all__ = ["gemm", "mn_major_scales", "tune", "CompileError", "KernelSpec", "MissingCudaPackage", "TensorMapError",
           "replicate", "__version__"]
