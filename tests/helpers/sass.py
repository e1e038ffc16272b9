"""SASS of rawcoop's kernels for the tests, on any machine: the cubin comes
from the kernel cache (NVRTC compiles sm_90a without a GPU) and is read by
nvdisasm (pip ``nvidia-cuda-nvdisasm``, in the ``test`` extra, or on PATH)
or, on a CUDA machine without it, ``cuobjdump -sass``.  The two print the
same instruction lines (``/*offset*/ [@pred] OPCODE operands ;``)."""
import os
import re
import shutil
import subprocess


def _nvdisasm():
    exe = shutil.which("nvdisasm")
    if exe:
        return exe
    try:
        import nvidia                      # namespace package of NVIDIA's pip wheels
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for sub in sorted(os.listdir(base), reverse=True):       # cu13 before cu12
            path = os.path.join(base, sub, "bin", "nvdisasm")
            if os.access(path, os.X_OK):
                return path
    return None


def _cuobjdump():
    exe = shutil.which("cuobjdump")
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if not exe and d and os.access(os.path.join(d, "bin", "cuobjdump"), os.X_OK):
            exe = os.path.join(d, "bin", "cuobjdump")
    return exe


def disassembler() -> list | None:
    """The command that prints a cubin's SASS (the cubin's path appended), or None."""
    exe = _nvdisasm()
    if exe:
        return [exe]
    exe = _cuobjdump()
    return [exe, "-sass"] if exe else None


_SASS: dict = {}


def sass(spec, tmp_path) -> str:
    """The SASS of ``spec``'s cubin (compiled through the kernel cache),
    disassembled once per process (the SASS checks and the uniform-datapath
    checks read the same kernels: disassembling twice took half of their
    time)."""
    import pytest

    if spec.label in _SASS:
        return _SASS[spec.label]

    from rawcoop.cache import default_cache
    cmd = disassembler()
    if cmd is None:
        pytest.fail("no SASS disassembler: pip install nvidia-cuda-nvdisasm (the test extra has it), "
                    "or put nvdisasm or cuobjdump on PATH")
    path = tmp_path / f"{spec.name}.cubin"
    path.write_bytes(default_cache().get(spec))
    text = subprocess.run(cmd + [str(path)], check=True, capture_output=True, text=True).stdout
    _SASS[spec.label] = text
    return text


def spill_report(spec) -> dict:
    """Registers, stack frame and spill bytes of ``spec``'s build, as the
    kernel cache recorded them when it compiled the kernel (ptxas's report,
    or, where NVRTC's log had none, the cubin's own attributes:
    rawcoop.compiler.resource_usage_of), so the answer does not depend on
    which process built the kernel.  Fails when the spill bytes are unknown
    (a stack frame and no ptxas report): that must not read as zero spills."""
    import pytest

    from rawcoop.cache import default_cache
    usage = default_cache().resource_usage(spec)
    if usage.get("spill_stores") is None or usage.get("spill_loads") is None:
        pytest.fail(f"no spill figures for {spec.label}: {usage} (a stack frame, and no ptxas report in the log)")
    return usage


_OP = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def mainloop_ops(text: str) -> list:
    """Opcodes from the first to the last (H|Q)GMMA of the SASS: the mainloop."""
    lines = text.splitlines()
    idx = [i for i, line in enumerate(lines) if "GMMA" in line]
    ops = []
    for line in lines[idx[0]:idx[-1] + 1]:
        m = _OP.search(line)
        if m:
            ops.append(m.group(1))
    return ops


def gemm_configs():
    """The default 16-bit configurations, whose SASS the SASS checks read."""
    from helpers.plan import gc as configs
    return configs.all_configs()


def uniform_configs():
    """Every configuration whose mainloop keeps its arithmetic on the uniform datapath."""
    from helpers.plan import gc as configs
    cfgs = configs.all_configs() + configs.block_scaled_configs() + configs.lowp_configs()
    # Ping-pong with clusters keeps the threadIdx-derived consumer index (UNIFORM_CONSUMER off: it spilled).
    return [c for c in cfgs if not (c.pingpong and c.cluster_size > 1)]


def check_gemm_sass(cfg, tmp_path):
    """The Hopper instructions (HGMMA, UTMALDG, UTMASTG, SYNCS) are in the SASS, and nothing goes through
    local memory (no LDL/STL, no spills in ptxas's report)."""
    text = sass(cfg.spec, tmp_path)
    for instr in ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in text, f"{instr} missing from the SASS of {cfg.spec.label}"
    assert "LDL" not in text and "STL" not in text, "local-memory traffic (spills) in the SASS"
    usage = spill_report(cfg.spec)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def check_mainloop_keeps_uniform_datapath(cfg, tmp_path):
    """The mainloop's ring and descriptor arithmetic is on the uniform datapath (U* instructions), with no
    WARPSYNC."""
    ops = mainloop_ops(sass(cfg.spec, tmp_path))
    uniform = [o for o in ops if o.startswith("U") and not o.startswith("UTMA")]
    assert uniform, f"no uniform-datapath instructions in the mainloop of {cfg.spec.label}"
    assert "WARPSYNC" not in ops, f"WARPSYNC in the mainloop of {cfg.spec.label}"


def check_tile_copy_sass(tmp_path):
    """The tile-copy kernel's SASS has its TMA and barrier instructions and no local memory."""
    from rawcoop import tile_copy
    text = sass(tile_copy.spec(2, 2), tmp_path)
    for instr in ("UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in text
    assert "LDL" not in text and "STL" not in text
