"""GPU machine: tests/test_sass.py's SASS checks on this machine's NVRTC
(CUDA 13 on the H200 machines; CI compiles with CUDA 12's), and every
configuration launches with its 384 threads (registers at launch <= 168,
setmaxnreg then moves them 40/232)."""
import pytest

from test_sass import _configs, test_gemm_sass, test_mainloop_keeps_uniform_datapath, test_tile_copy_sass  # noqa: F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.spec.label)
def test_registers_at_launch(cfg):
    from rawcoop import gemm_configs
    from rawcoop.launch import get_kernel
    regs = get_kernel(cfg.spec).registers(0)
    assert 0 < regs and regs * gemm_configs.THREADS <= 65536, (cfg.spec.label, regs)
