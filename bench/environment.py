"""What a benchmark's numbers depend on, recorded with them: GPU, driver,
CUDA / CuPy / NVRTC versions, clocks, power and temperature (nvidia-smi at
the start and at the end of a run), the git revision; and whether this
machine can run the benchmark at all (:func:`gpu_problem`).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

_SMI_FIELDS = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "power.draw", "power.limit", "temperature.gpu")


def nvidia_smi(gpu_id: str | None = None, timeout: float = 10.0) -> dict | None:
    """Driver version, clocks (MHz), power (W) and temperature of one GPU
    from ``nvidia-smi`` (None when it is not installed; {"error": ...} when it fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits", "-i", gpu_id or "0"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    if p.returncode != 0 or not p.stdout.strip():
        return {"error": (p.stderr or p.stdout).strip()[:300] or f"exit {p.returncode}"}
    values = [v.strip() for v in p.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(_SMI_FIELDS, values))


def bus_id(ordinal: int) -> str | None:
    """The PCI bus id of CuPy device ``ordinal`` (what nvidia-smi -i takes), or None."""
    try:
        import cupy
        return cupy.cuda.Device(ordinal).pci_bus_id
    except Exception:  # noqa: BLE001
        return None


def git_revision() -> str | None:
    """The checkout's short revision, "+dirty" with uncommitted changes; None outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("+dirty" if dirty else "")) or None


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def environment(ordinal: int = 0) -> dict:
    """The run's environment as a dict (the results file's ``env``); a part
    that cannot be queried says why instead of stopping the run."""
    import platform

    import rawcoop
    env: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "python": platform.python_version(), "platform": platform.platform(), "argv": sys.argv[:],
                 "rawcoop": rawcoop.__version__, "git": git_revision()}

    def bindings():
        from rawcoop._cuda import bindings_version
        return bindings_version()

    def nvrtc():
        from rawcoop.compiler import nvrtc_version
        return ".".join(map(str, nvrtc_version()))

    def cupy_version():
        import cupy
        return cupy.__version__

    def cuda_runtime():
        import cupy
        return _cuda_version(cupy.cuda.runtime.runtimeGetVersion())

    def cuda_driver():
        import cupy
        return _cuda_version(cupy.cuda.runtime.driverGetVersion())

    def numpy_version():
        import numpy
        return numpy.__version__

    def gpu():
        from rawcoop import device
        i = device.info(ordinal)
        return {"ordinal": ordinal, "name": i.name, "cc": f"{i.cc[0]}.{i.cc[1]}", "sm_count": i.sm_count,
                "l2_bytes": i.l2_bytes}

    for key, fn in (("cuda_bindings", bindings), ("nvrtc", nvrtc), ("cupy", cupy_version),
                    ("cuda_runtime", cuda_runtime), ("driver_cuda_version", cuda_driver), ("numpy", numpy_version),
                    ("gpu", gpu)):
        try:
            env[key] = fn()
        except Exception as e:  # noqa: BLE001 - the environment report never stops a run
            env[key] = f"unavailable ({type(e).__name__}: {e})"
    env["nvidia_smi_start"] = smi = nvidia_smi(bus_id(ordinal))
    env["driver"] = (smi or {}).get("driver_version")
    return env


def gpu_problem(ordinal: int = 0) -> str | None:
    """None when device ``ordinal`` is a Hopper GPU CuPy can use; else why not."""
    try:
        from rawcoop import device
    except Exception as e:  # noqa: BLE001
        return f"the CUDA Python bindings could not be loaded ({type(e).__name__}: {e})"
    try:
        n = device.gpu_count()
    except Exception as e:  # noqa: BLE001
        return f"the CUDA driver could not be queried ({type(e).__name__}: {e})"
    if n == 0:
        return ("no NVIDIA GPU is visible (no CUDA driver, no device, or CUDA_VISIBLE_DEVICES hides them); "
                "the benchmark needs a Hopper (sm_90) GPU such as an H100 or H200")
    if n <= ordinal:
        return f"GPU {ordinal} does not exist ({n} visible)"
    i = device.info(ordinal)
    if i.cc != (9, 0):
        return (f"GPU {ordinal} is {i.name} (sm_{i.cc[0]}{i.cc[1]}); rawcoop's kernels need a Hopper (sm_90) GPU "
                "(select one with CUDA_VISIBLE_DEVICES)")
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return f"CuPy cannot use the GPU ({type(e).__name__}: {e})"
    return None
