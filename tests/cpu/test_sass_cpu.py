"""The kernels' SASS, on any machine (NVRTC compiles sm_90a without a GPU;
nvdisasm from the test extra reads it, see tests/helpers/sass.py): the Hopper
instructions are there (HGMMA, UTMALDG, UTMASTG, SYNCS), nothing goes through
local memory, and the mainloop keeps its warp-uniform arithmetic on the
uniform datapath.  tests/gpu/test_sass_gpu.py runs the same checks on the GPU
machine, whose NVRTC (CUDA 13) is not CI's (CUDA 12)."""
import pytest

from helpers.sass import (check_gemm_sass, check_mainloop_keeps_uniform_datapath, check_tile_copy_sass,
                          gemm_configs, mainloop_ops, sass, uniform_configs)


@pytest.mark.parametrize("cfg", gemm_configs(), ids=lambda c: c.spec.label)
def test_gemm_sass(cfg, tmp_path):
    check_gemm_sass(cfg, tmp_path)


@pytest.mark.parametrize("cfg", uniform_configs(), ids=lambda c: c.spec.label)
def test_mainloop_keeps_uniform_datapath(cfg, tmp_path):
    """The mainloop's ring and descriptor arithmetic is warp-uniform and ptxas
    keeps it on the uniform datapath (U* instructions).  A chunk range assigned
    inside the split-K fix-up's branches once made ptxas lose that proof in the
    cooperative kernels: the mainloop ran per-thread IMAD/LEA/R2UR instead, with
    WARPSYNCs, and block-scaled fp8 lost ~10%.  Ping-pong kernels have
    it since their consumer index goes through redux.sync (UNIFORM_CONSUMER:
    74 -> 57 instructions per k-block at 128x128, +1.3-2.4%)."""
    check_mainloop_keeps_uniform_datapath(cfg, tmp_path)


def test_tile_copy_sass(tmp_path):
    check_tile_copy_sass(tmp_path)


def test_block_scaled_mainloop_keeps_the_proxy_fence(tmp_path):
    """The block-scaled cooperative mainloop releases each stage after
    fence.proxy.async (a MEMBAR.ALL.CTA per k-block in SASS): its SA slot was
    read through the generic proxy before the producer's next TMA write.
    (Dropping the fence measured 0.987-1.010: no gain.)"""
    from helpers.plan import gc as g
    cfg = g.GemmConfig(128, g.E4M3, scale_mode=1)
    plain = mainloop_ops(sass(cfg.spec, tmp_path))
    assert "MEMBAR" in plain and "QGMMA" in plain
