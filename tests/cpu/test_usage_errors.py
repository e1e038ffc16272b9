"""CPU: what a new user gets wrong gets one clear error, before anything
reaches a GPU.

* Bad arguments to ``rawcoop.gemm``, ``rawcoop.tune`` and
  ``rawcoop.replicate`` (None, numbers, lists, host arrays, arrays on
  different GPUs) raise TypeError/ValueError naming the argument and the rule.
* The three take the same inputs (CuPy arrays, DLPack and
  ``__cuda_array_interface__`` arrays) through one helper, operands.as_cupy;
  a stub CuPy stands in for the real one (helpers.stub).
* ``import rawcoop`` works without cuda-bindings and CuPy; the first use that
  needs them raises an ImportError naming the extra to install, and the
  command line prints one line instead of a traceback.
* The packaging bounds admit only environments where bfloat16 works.
"""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.stub import BF16, E4M3, StubArray, stub_planning, tn
from rawcoop import _cuda, device, gemm_plan, operands

ROOT = Path(__file__).resolve().parents[2]


class CAIArray:
    """A GPU array of another library seen only through __cuda_array_interface__."""

    def __init__(self, stub):
        self.stub = stub
        self.__cuda_array_interface__ = {"shape": stub.shape, "version": 3}


class DLPackArray:
    """A GPU (device type 2) or host (1) array seen only through DLPack."""

    def __init__(self, stub, device_type=2):
        self.stub, self.device_type = stub, device_type

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, **kw):
        raise AssertionError("the stub CuPy's from_dlpack does not call it")


class Reached(Exception):
    """Raised where a call would launch: everything before it was validated."""


@pytest.fixture
def cp(monkeypatch):
    """rawcoop's CuPy replaced by a stub that views CAIArray/DLPackArray as StubArray."""
    stub = SimpleNamespace(ndarray=StubArray, asarray=lambda x: x.stub, from_dlpack=lambda x: x.stub)
    monkeypatch.setattr(_cuda, "cupy", lambda: stub)
    return stub


@pytest.fixture
def no_launch(monkeypatch, cp):
    """Planning without a GPU (helpers.stub) and a run that raises Reached
    with the plan and out it was given."""
    stub_planning(monkeypatch)

    def run(cp_, plan, out, forced, data_parallel):
        raise Reached(plan, out)
    monkeypatch.setattr(gemm_plan, "_run_plan", run)


# ---------------------------------------------------------------- bad arguments name themselves
def test_gemm_of_none_is_a_type_error_not_a_recursion():
    pytest.importorskip("cupy")
    import rawcoop
    with pytest.raises(TypeError, match=r"^a must be a GPU array, got None\. Accepted: a cupy\.ndarray"):
        rawcoop.gemm(None, None)


def _bad_calls():
    a, b = tn(256, 256, 256, BF16)
    host = np.zeros((4, 4), np.float16)
    return [
        ("a None", (None, b), {}, TypeError, "a must be a GPU array, got None"),
        ("b None", (a, None), {}, TypeError, "b must be a GPU array, got None"),
        ("a int", (1, b), {}, TypeError, "a must be a GPU array, got builtins.int"),
        ("b list", (a, [[1.0]]), {}, TypeError, "b must be a GPU array, got builtins.list"),
        ("a numpy", (host, b), {}, TypeError, r"a is a numpy\.ndarray in host \(CPU\) memory; .*cupy\.asarray\(a\)"),
        ("a DLPack host", (DLPackArray(a, 1), b), {}, TypeError, r"a is a .*DLPackArray in host \(CPU\) memory"),
        ("a DLPack ROCm", (DLPackArray(a, 10), b), {}, TypeError, "DLPack device type 10 \\(not CUDA\\)"),
        ("c list", (a, b), dict(c=[1.0], beta=1.0), TypeError, "c must be a GPU array, got builtins.list"),
        ("bias numpy", (a, b), dict(bias=np.zeros(256, np.float32)), TypeError, "bias is a numpy.ndarray"),
        ("out str", (a, b), dict(out="d"), TypeError, "out must be a GPU array, got builtins.str"),
        ("scale list", tn(256, 256, 256, E4M3), dict(scale_a=[2.0]), TypeError, "scale_a must be a GPU array"),
        ("b device", (a, StubArray(b.shape, BF16, strides=b.strides, dev=1)), {}, ValueError,
         "b is on device 1, but a is on device 0: every array of one call must be on the same GPU"),
        ("c device", (a, b), dict(c=StubArray((256, 256), BF16, dev=1), beta=1.0), ValueError,
         "c is on device 1, but a is on device 0"),
        ("bias device", (a, b), dict(bias=StubArray((256,), "float32", dev=1)), ValueError,
         "bias is on device 1, but a is on device 0"),
        ("out device", (a, b), dict(out=StubArray((256, 256), BF16, dev=1)), ValueError,
         "out is on device 1, but a is on device 0"),
        ("foreign devices", (CAIArray(a), CAIArray(StubArray(b.shape, BF16, strides=b.strides, dev=1))), {},
         ValueError, "b is on device 1, but a is on device 0"),
        ("alpha", (a, b), dict(alpha="two"), TypeError, "alpha and beta must be real numbers"),
        ("activation", (a, b), dict(activation="tanh"), ValueError, "activation must be one of"),
        ("out_dtype", (a, b), dict(out_dtype="int8"), TypeError, "out_dtype must be float16, bfloat16 or float32"),
        ("1-D", (StubArray((256,), BF16), b), {}, ValueError, r"a must be 2-D \(M, K\)"),
        ("shapes", (a, tn(256, 256, 128, BF16)[1]), {}, ValueError, "shape mismatch"),
        ("int dtype", (StubArray((8, 8), "int32"), StubArray((8, 8), "int32")), {}, TypeError, "a has dtype int32"),
    ]


@pytest.mark.parametrize("what, args, kw, exc, message", _bad_calls(), ids=[c[0] for c in _bad_calls()])
def test_gemm_rejects_bad_arguments_before_any_launch(no_launch, what, args, kw, exc, message):
    import rawcoop
    with pytest.raises(exc, match=message):
        rawcoop.gemm(*args, **kw)


def test_gemm_takes_other_libraries_arrays_and_returns_their_out(no_launch):
    import rawcoop
    a, b = tn(256, 384, 512, BF16)
    out = StubArray((256, 384), BF16)
    with pytest.raises(Reached) as hit:
        rawcoop.gemm(CAIArray(a), DLPackArray(b))
    plan, run_out = hit.value.args
    assert (plan.m, plan.n, plan.k, run_out) == (256, 384, 512, None)
    with pytest.raises(Reached) as hit:
        rawcoop.gemm(CAIArray(a), b, out=CAIArray(out))
    assert hit.value.args[1] is out                     # the view of the caller's out reaches the kernel


def test_gemm_returns_the_callers_out_object(monkeypatch, cp):
    import rawcoop
    stub_planning(monkeypatch)
    monkeypatch.setattr(gemm_plan, "_run_plan", lambda cp_, plan, out, forced, dp: out)
    a, b = tn(256, 384, 512, BF16)
    theirs = CAIArray(StubArray((256, 384), BF16))
    assert rawcoop.gemm(a, DLPackArray(b), out=theirs) is theirs
    mine = StubArray((256, 384), BF16)
    assert rawcoop.gemm(a, b, out=mine) is mine


# ---------------------------------------------------------------- tune and replicate: the same inputs
def test_tune_takes_the_inputs_gemm_takes(no_launch, monkeypatch):
    import rawcoop
    seen = []
    real = operands.as_cupy
    monkeypatch.setattr(operands, "as_cupy", lambda cp_, name, x, required=False: seen.append(name) or
                        real(cp_, name, x, required))
    a, b = tn(256, 384, 512, BF16)
    with pytest.raises(Reached) as hit:                 # its reference gemm call: planned from the views
        rawcoop.tune(CAIArray(a), DLPackArray(b), bias=CAIArray(StubArray((384,), "float32")))
    assert (hit.value.args[0].m, hit.value.args[0].n) == (256, 384)
    assert seen[:5] == ["a", "b", "c", "bias", "out"]   # through operands.gemm_operands, as gemm
    with pytest.raises(ValueError, match="shape mismatch"):
        rawcoop.tune(CAIArray(a), CAIArray(tn(256, 384, 128, BF16)[1]))
    with pytest.raises(TypeError, match="a must be a GPU array, got None"):
        rawcoop.tune(None, b)
    with pytest.raises(TypeError, match=r"b is a numpy\.ndarray in host \(CPU\) memory"):
        rawcoop.tune(a, np.zeros((512, 384), np.float16))


def test_replicate_takes_the_inputs_gemm_takes(cp, monkeypatch):
    import rawcoop
    seen = []
    real = operands.as_cupy
    monkeypatch.setattr(operands, "as_cupy", lambda cp_, name, x, required=False: seen.append(name) or
                        real(cp_, name, x, required))
    src = StubArray((64, 64), "float16")
    with pytest.raises(ValueError, match="src must be 2-D"):       # reached the shape rules: it was viewed
        rawcoop.replicate(CAIArray(StubArray((2, 64, 64), "float16")))
    with pytest.raises(ValueError, match=r"out must have shape \(2, 64, 64\)"):
        rawcoop.replicate(DLPackArray(src), 2, out=CAIArray(StubArray((3, 64, 64), "float16")))
    assert seen == ["src", "out", "src", "out"]
    with pytest.raises(TypeError, match="src must be a GPU array, got None"):
        rawcoop.replicate(None)
    with pytest.raises(TypeError, match=r"src is a numpy\.ndarray in host \(CPU\) memory"):
        rawcoop.replicate(np.zeros((64, 64), np.float16))
    with pytest.raises(ValueError, match="copies must be one of"):
        rawcoop.replicate(src, 3)


# ---------------------------------------------------------------- no GPU, no CUDA packages
def _python(code: str, env_extra=None, args=()):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


BLOCK = "import sys; sys.modules['cuda'] = None; sys.modules['cupy'] = None\n"
"""Makes `import cuda...` and `import cupy` fail, as where neither is installed."""


def test_import_works_without_the_cuda_packages_and_first_use_says_what_to_install():
    r = _python(BLOCK + """
import rawcoop
from rawcoop import compiler
for use in (lambda: rawcoop.gemm(None, None), compiler.nvrtc_version, lambda: rawcoop.replicate(None)):
    try:
        use()
    except ImportError as e:
        print(type(e).__name__, "|", e)
print("gpus", rawcoop.device.gpu_count())
""")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4 and lines[-1] == "gpus 0", r.stdout
    cupy_line, bindings_line, replicate_line = lines[:3]
    assert cupy_line.startswith("MissingCudaPackage | rawcoop needs CuPy") and "pip install 'rawcoop[cu1" in cupy_line
    assert bindings_line.startswith("MissingCudaPackage | rawcoop needs the CUDA Python bindings (cuda-bindings)")
    assert "pip install 'rawcoop[cu1" in bindings_line and replicate_line.startswith("MissingCudaPackage")


@pytest.mark.parametrize("command", ["demo", "warmup", "info"])
def test_the_command_line_without_cuda_packages_prints_one_line(command):
    r = _python(BLOCK + "import runpy; sys.argv = ['rawcoop', sys.argv[1]]; runpy.run_module('rawcoop', "
                "run_name='__main__')", args=(command,), env_extra={"RAWCOOP_CACHE_DIR": "/nonexistent/rc"})
    assert "Traceback" not in r.stderr, r.stderr
    if command == "info":                               # info reports what is missing and succeeds
        assert r.returncode == 0 and "nvrtc         unavailable: rawcoop needs the CUDA Python bindings" in r.stdout
        return
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert f"rawcoop {command}" in r.stderr and "pip install 'rawcoop[cu1" in r.stderr


def test_demo_without_a_hopper_gpu_says_so_in_one_line():
    if device.why_no_hopper() is None:
        pytest.skip("this machine has a Hopper GPU: the demo runs")
    r = _python("import runpy, sys; sys.argv = ['rawcoop', 'demo']; runpy.run_module('rawcoop', run_name='__main__')")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("rawcoop demo needs a Hopper GPU: ") and len(r.stderr.strip().splitlines()) == 1


def test_why_no_hopper_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(_cuda, "bindings_available", lambda: False)
    assert "CUDA Python bindings are not installed: pip install" in device.why_no_hopper()
    monkeypatch.setattr(_cuda, "bindings_available", lambda: True)
    monkeypatch.setattr(device, "_driver_ready", lambda: False)
    assert device.why_no_hopper().startswith("no CUDA driver found")
    monkeypatch.setattr(device, "_driver_ready", lambda: True)
    monkeypatch.setattr(device, "gpu_count", lambda: 0)
    assert "sees no GPU" in device.why_no_hopper()
    monkeypatch.setattr(device, "gpu_count", lambda: 1)
    monkeypatch.setattr(device, "info", lambda d: device.DeviceInfo(d, "NVIDIA A100", (8, 0), 108, 0, 0, 12080))
    assert "found NVIDIA A100 (sm_80)" in device.why_no_hopper()
    monkeypatch.setattr(device, "info", lambda d: device.DeviceInfo(d, "NVIDIA H200", (9, 0), 132, 0, 0, 13000))
    assert device.why_no_hopper() is None


@pytest.mark.parametrize("major, extra", [(None, "'rawcoop[cu12]' or 'rawcoop[cu13]' (no CUDA driver found"),
                                          (12, "'rawcoop[cu12]'"), (13, "'rawcoop[cu13]'"),
                                          (11, "needs a CUDA 12 or 13 driver")])
def test_the_install_hint_follows_the_driver(monkeypatch, major, extra):
    monkeypatch.setattr(_cuda, "driver_cuda_major", lambda: major)
    assert extra in _cuda.install_hint()


# ---------------------------------------------------------------- versions where bf16 works
@pytest.mark.parametrize("cupy_v, numpy_v, problem", [
    ("13.6.0", "2.2.0", "CuPy >= 14"), ("14.0.0", "2.1.1", "NumPy >= 2.1.2"), ("14.0.0rc1", "1.26.4", "NumPy"),
    ("14.0.0", "2.1.2", None), ("15.1.0", "2.4.6", None)])
def test_cupy_and_numpy_too_old_for_bfloat16_are_refused(cupy_v, numpy_v, problem):
    if problem is None:
        _cuda.check_versions(cupy_v, numpy_v)
        return
    with pytest.raises(_cuda.MissingCudaPackage, match=problem):
        _cuda.check_versions(cupy_v, numpy_v)


def test_the_package_bounds_admit_only_working_environments():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.10"      # CuPy 14 and NumPy 2.1.2 need it
    assert "numpy>=2.1.2" in project["dependencies"]
    for extra in ("cu12", "cu13"):
        cupy = [d for d in project["optional-dependencies"][extra] if d.startswith("cupy")]
        assert len(cupy) == 1 and ">=14" in cupy[0], cupy
    assert (ROOT / "LICENSE").read_text().startswith("Copyright 2026 The rawcoop authors")
    assert "Apache License" in (ROOT / "LICENSE").read_text()
