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


def test_tile_copy_sass(tmp_path):
    from rawcoop import tile_copy
    sass = _sass(tile_copy.spec(2, 2), tmp_path)
    for instr in ("UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in sass
    assert "LDL" not in sass and "STL" not in sass
