"""GPU machine: the compiled kernels' SASS has the Hopper instructions and no
local-memory traffic; registers per thread are reported."""
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.gpu


def _cuobjdump():
    exe = shutil.which("cuobjdump")
    for d in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if not exe and d and os.path.exists(os.path.join(d, "bin", "cuobjdump")):
            exe = os.path.join(d, "bin", "cuobjdump")
    if not exe:
        pytest.fail("cuobjdump not found (needed to inspect SASS on the GPU machine)")
    return exe


def _sass(spec, tmp_path):
    from rawcoop.launch import get_kernel
    path = tmp_path / f"{spec.name}.cubin"
    path.write_bytes(get_kernel(spec).cubin())
    return subprocess.run([_cuobjdump(), "-sass", str(path)], check=True, capture_output=True, text=True).stdout


def _configs():
    from rawcoop import gemm_configs
    return gemm_configs.all_configs()


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.spec.label)
def test_gemm_sass(cfg, tmp_path, capsys):
    from rawcoop.compiler import resource_usage
    from rawcoop.launch import get_kernel
    sass = _sass(cfg.spec, tmp_path)
    for instr in ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in sass, f"{instr} missing from the SASS of {cfg.spec.label}"
    assert "LDL" not in sass and "STL" not in sass, "local-memory traffic (spills) in the SASS"
    usage = resource_usage(get_kernel(cfg.spec).log())
    assert usage.get("spill_stores", 0) == 0 and usage.get("spill_loads", 0) == 0
    regs = get_kernel(cfg.spec).registers(0)
    with capsys.disabled():
        print(f"\n{cfg.spec.label}: {regs} registers/thread at launch (setmaxnreg 40/232), "
              f"{sass.count('HGMMA')} HGMMA, {sass.count('UTMALDG')} UTMALDG, {sass.count('UTMASTG')} UTMASTG")


def _mainloop_ops(sass):
    """Opcodes from the first to the last (H|Q)GMMA of the SASS: the mainloop."""
    import re
    lines = sass.splitlines()
    idx = [i for i, line in enumerate(lines) if "GMMA" in line]
    ops = []
    for line in lines[idx[0]:idx[-1] + 1]:
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            ops.append(m.group(1))
    return ops


def _cooperative_configs():
    from rawcoop import gemm_configs
    cfgs = gemm_configs.all_configs() + gemm_configs.block_scaled_configs() + gemm_configs.lowp_configs()
    return [c for c in cfgs if not c.pingpong]


@pytest.mark.parametrize("cfg", _cooperative_configs(), ids=lambda c: c.spec.label)
def test_cooperative_mainloop_keeps_uniform_datapath(cfg, tmp_path):
    """The cooperative mainloop's ring and descriptor arithmetic is warp-uniform
    and ptxas keeps it on the uniform datapath (U* instructions).  A chunk range
    assigned inside the split-K fix-up's branches once made ptxas lose that proof:
    the mainloop ran per-thread IMAD/LEA/R2UR instead, with WARPSYNCs, and
    block-scaled fp8 lost ~10% (stop 14).  (Ping-pong kernels never had it.)"""
    ops = _mainloop_ops(_sass(cfg.spec, tmp_path))
    uniform = [o for o in ops if o.startswith("U") and not o.startswith("UTMA")]
    assert uniform, f"no uniform-datapath instructions in the mainloop of {cfg.spec.label}"
    assert "WARPSYNC" not in ops, f"WARPSYNC in the mainloop of {cfg.spec.label}"


def test_tile_copy_sass(tmp_path):
    from rawcoop import tile_copy
    sass = _sass(tile_copy.spec(2, 2), tmp_path)
    for instr in ("UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in sass
    assert "LDL" not in sass and "STL" not in sass
