"""GPU machine: the SASS checks of tests/cpu/test_sass_cpu.py on this machine's NVRTC
(CUDA 13 on the H200 machines; CI compiles with CUDA 12's), and every
configuration launches with its 384 threads (registers at launch <= 168,
setmaxnreg then moves them 40/232; 192-row tiles: 512 threads, <= 128, then
40/152)."""
import pytest

from helpers.sass import (check_gemm_sass, check_mainloop_keeps_uniform_datapath, check_tile_copy_sass,
                          gemm_configs, spill_report, uniform_configs)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cfg", gemm_configs(), ids=lambda c: c.spec.label)
def test_gemm_sass(cfg, tmp_path):
    check_gemm_sass(cfg, tmp_path)


@pytest.mark.parametrize("cfg", uniform_configs(), ids=lambda c: c.spec.label)
def test_mainloop_keeps_uniform_datapath(cfg, tmp_path):
    check_mainloop_keeps_uniform_datapath(cfg, tmp_path)


def test_tile_copy_sass(tmp_path):
    check_tile_copy_sass(tmp_path)


@pytest.mark.parametrize("cfg", gemm_configs(), ids=lambda c: c.spec.label)
def test_registers_at_launch(cfg):
    from rawcoop.launch import get_kernel
    regs = get_kernel(cfg.spec).registers(0)
    assert 0 < regs and regs * cfg.threads <= 65536, (cfg.spec.label, regs)


def _every_spec():
    from helpers.plan import gc as configs
    return configs.all_specs(everything=True)


@pytest.mark.parametrize("spec", _every_spec(), ids=lambda s: s.label)
def test_no_spills_in_any_warmup_kernel(spec):
    """ptxas's resource report from this machine's NVRTC: no spills in any
    kernel `warmup --all` builds (CI checks the same families with CUDA 12's
    NVRTC in test_compile.py and test_cluster_cpu.py; the SASS tests above
    cover the default 16-bit configurations only, and a batched split-K
    reduction once spilled in the fp8/tf32/block-scaled/epilogue/cluster
    kernels alone: block-scaled fp8 then ran 6x slower)."""
    usage = spill_report(spec)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, (spec.label, usage)
