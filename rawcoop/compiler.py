"""NVRTC: kernel source + our headers + compile-time defines -> sm_90a cubin.

A :class:`KernelSpec` names one kernel configuration: the source file in
``kernels/``, the ``extern "C"`` entry point, and the ``-D`` defines that bake
the configuration in as constants.  :func:`compile_spec` compiles it; it never
touches the disk cache (see :mod:`rawcoop.cache`).

Options: ``-minimal`` (skips NVRTC's implicit CUDA runtime declarations,
which our header-free sources do not need; measured ~35% faster on small
kernels) where the NVRTC version accepts it.  ``--pch`` was
measured and is not used: our sources include no heavy headers, it made a
small compile slower, and it writes a ``.pch`` file into the working
directory.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache

from . import config, sources
from ._cuda import nvrtc, nvrtc_check

DEFAULT_ARCH = "sm_90a"


class CompileError(RuntimeError):
    """NVRTC rejected a kernel.  Carries the log, kernel name, options, arch."""

    def __init__(self, kernel: str, arch: str, options: list[str], log: str, reason: str = ""):
        self.kernel = kernel
        self.arch = arch
        self.options = list(options)
        self.log = log
        head = f"NVRTC failed to compile kernel {kernel!r} for {arch}"
        if reason:
            head += f" ({reason})"
        super().__init__(f"{head}\noptions: {' '.join(options)}\n--- NVRTC log ---\n{log.strip()}")


@dataclass(frozen=True)
class KernelSpec:
    """One compiled configuration of one kernel."""

    source: str                      # path relative to kernels/, e.g. "tile_copy.cu"
    name: str                        # extern "C" entry point
    defines: tuple = field(default=())  # sorted ((NAME, value), ...)

    @staticmethod
    def make(source: str, name: str, **defines) -> "KernelSpec":
        return KernelSpec(source, name, tuple(sorted((k, int(v) if isinstance(v, bool) else v)
                                                     for k, v in defines.items())))

    @property
    def label(self) -> str:
        d = ",".join(f"{k}={v}" for k, v in self.defines)
        return f"{self.name}[{d}]" if d else self.name

    def define_options(self) -> list[str]:
        return [f"-D{k}={v}" for k, v in self.defines]


@dataclass
class CompileResult:
    cubin: bytes
    ptx: str | None
    log: str
    options: list[str]
    seconds: float
    resources: dict = field(default_factory=dict)   # resource_usage_of(cubin, log, kernel)
    log_note: str = ""          # set when NVRTC returned no ptxas report although -v was asked for


@lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    major, minor = nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


@lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    return tuple(int(a) for a in nvrtc_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def base_options(arch: str = DEFAULT_ARCH) -> list[str]:
    """The options every kernel is compiled with (part of the cache key)."""
    # 177: "declared but never referenced" - configuration-dependent helpers
    # are unused in some variants by design.
    opts = [f"--gpu-architecture={arch}", "--std=c++17", "--ptxas-options=-v",
            "--device-as-default-execution-space", "--diag-suppress=177"]
    if nvrtc_version() >= (12, 4):
        opts.append("-minimal")
    if config.lineinfo():
        opts.append("-lineinfo")
    if config.watchdog_cycles():
        opts.append(f"-DRAWCOOP_WATCHDOG={config.watchdog_cycles()}ULL")
    return opts


def _out_buffer(size: int) -> bytes:
    """A fresh ``size``-byte buffer for an NVRTC getter to write into.

    cuda-bindings' NVRTC getters fill a ``bytes`` object in place.  For one
    byte, ``b" " * 1`` is ``b" "`` itself, the object CPython shares for
    every 1-byte ``b" "`` (``" ".encode()``, ``bytes([32])``), so an empty
    result (size 1: just the terminator) written into it turned that shared
    object into NUL: every space encoded afterwards, print's separators
    included, became NUL (seen on the H200 once torch had initialised CUDA,
    where NVRTC's logs came back empty).  Callers never ask for sizes below 2
    (see :func:`_log`); the guard keeps it so."""
    if size < 2:
        raise ValueError(f"NVRTC output buffer of {size} bytes: would alias a shared bytes object")
    return b" " * size


def _log(prog) -> str:
    size = nvrtc_check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    if size <= 1:                       # empty log (the terminator only)
        return ""
    buf = _out_buffer(size)
    nvrtc_check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00").decode(errors="replace")


def compile_spec(spec: KernelSpec, arch: str = DEFAULT_ARCH, want_ptx: bool = False,
                 options: list[str] | None = None) -> CompileResult:
    """Compile ``spec``; raise :class:`CompileError` (no cubin) on failure."""
    if int(arch.removeprefix("sm_").rstrip("a")) not in supported_archs():
        raise CompileError(spec.name, arch, [], "", f"NVRTC {nvrtc_version()} does not support {arch}")
    files = sources.closure(spec.source)
    main_text = files[spec.source]
    headers = [(rel, text) for rel, text in files.items() if rel != spec.source]
    opts = (options if options is not None else base_options(arch)) + spec.define_options()
    want_ptx = want_ptx or config.dump_dir() is not None
    t0 = time.perf_counter()
    prog = nvrtc_check(nvrtc.nvrtcCreateProgram(
        main_text.encode(), spec.source.encode(), len(headers),
        [t.encode() for _, t in headers], [r.encode() for r, _ in headers]), "nvrtcCreateProgram")
    try:
        ret = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _log(prog)
        if ret[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(spec.name, arch, opts, log, nvrtc.nvrtcGetErrorString(ret[0])[1].decode())
        size = nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        if size < 2:
            raise CompileError(spec.name, arch, opts, log, "NVRTC produced no cubin")
        cubin = _out_buffer(size)
        nvrtc_check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        ptx = None
        if want_ptx:
            psize = nvrtc_check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            if psize < 2:
                raise CompileError(spec.name, arch, opts, log, "NVRTC produced no PTX")
            pbuf = _out_buffer(psize)
            nvrtc_check(nvrtc.nvrtcGetPTX(prog, pbuf), "nvrtcGetPTX")
            ptx = pbuf.rstrip(b"\x00").decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    seconds = time.perf_counter() - t0
    cubin = bytes(cubin)
    result = CompileResult(cubin, ptx, log, opts, seconds, resource_usage_of(cubin, log, spec.name),
                           _log_note(log, opts, spec.name))
    _dump(spec, files, result)
    return result


def _log_note(log: str, options: list[str], kernel: str) -> str:
    """A note for the cache's metadata when a successful compile asked ptxas
    for its report (``--ptxas-options=-v``) and NVRTC's log has none, with
    what may explain it: which NVRTC libraries the process has loaded, and
    whether torch (which brings its own CUDA libraries) was imported first."""
    if not any(o.startswith("--ptxas-options") and "-v" in o for o in options):
        return ""
    if "registers" in resource_usage(log, kernel):
        return ""
    import sys
    libs = []
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "nvrtc" in line and "/" in line})
    except OSError:
        pass
    return (f"NVRTC returned {'an empty log' if not log.strip() else 'a log without the ptxas report'} for a "
            f"successful compile with --ptxas-options=-v; torch imported: {'torch' in sys.modules}; NVRTC "
            f"libraries loaded: {', '.join(libs) or 'unknown'}")


def _dump(spec: KernelSpec, files: dict[str, str], result: CompileResult) -> None:
    d = config.dump_dir()
    if d is None:
        return
    import hashlib
    tag = spec.name + "-" + hashlib.sha256(repr(spec).encode()).hexdigest()[:10]
    out = d / tag
    out.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (out / rel).write_text(text)
    (out / "options.txt").write_text("\n".join(result.options) + "\n")
    (out / "nvrtc.log").write_text(result.log)
    (out / f"{spec.name}.cubin").write_bytes(result.cubin)
    if result.ptx is not None:
        (out / f"{spec.name}.ptx").write_text(result.ptx)


def resource_usage(log: str, kernel: str | None = None) -> dict:
    """Parse ptxas ``-v`` output: registers, shared memory, spills, stack.
    With ``kernel``, only that entry function's report (a log can also hold
    other kernels' and device functions' reports); without, the first."""
    import re
    if kernel is not None:
        entry = re.search(rf"Compiling entry function '{re.escape(kernel)}'.*?(?=Compiling entry function|\Z)",
                          log, re.S)
        if entry is None:
            return {}
        log = entry.group(0)
        own = log.split(f"Function properties for {kernel}\n", 1)
        stack_text = own[1] if len(own) == 2 else log
    else:
        stack_text = log
    info: dict = {}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        info["registers"] = int(m.group(1))
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", stack_text)
    if m:
        info["stack"], info["spill_stores"], info["spill_loads"] = map(int, m.groups())
    m = re.search(r"Used \d+ registers.*?(\d+) bytes smem", log)
    if m:
        info["static_smem"] = int(m.group(1))
    return info


USAGE_KEYS = ("registers", "stack", "spill_stores", "spill_loads", "static_smem")


def resource_usage_of(cubin: bytes, log: str, kernel: str) -> dict:
    """What ``kernel`` uses, whether or not the log has ptxas's report:
    ``{"registers", "stack", "spill_stores", "spill_loads", "static_smem",
    "source"}`` (bytes, except registers).  From the log's report where it
    has one ("source": "ptxas"; ptxas prints no shared-memory figure for 0);
    else read from the cubin ("source": "cubin", see rawcoop/cubin.py):
    registers, stack frame and static shared memory are ptxas's numbers,
    and the spill bytes are 0 for a kernel without a stack frame (spills go
    to the frame) and None (not recorded) for one with a frame.  An empty
    dict when neither says (not a cubin of ``kernel``)."""
    usage = resource_usage(log, kernel)
    if "registers" in usage and "spill_stores" in usage:
        usage.setdefault("static_smem", 0)
        return {**{k: usage[k] for k in USAGE_KEYS}, "source": "ptxas"}
    from .cubin import CubinError, kernel_resources
    try:
        found = kernel_resources(cubin, kernel)
    except CubinError:
        return {}
    spills = 0 if found["stack"] == 0 else None
    return {"registers": found["registers"], "stack": found["stack"], "spill_stores": spills, "spill_loads": spills,
            "static_smem": found["static_smem"], "source": "cubin"}
