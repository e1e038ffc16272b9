"""The kernels' SASS, on any machine (NVRTC compiles sm_90a without a GPU;
nvdisasm from the test extra reads it, see sass_helpers.py): the Hopper
instructions are there (HGMMA, UTMALDG, UTMASTG, SYNCS), nothing goes through
local memory, and the mainloop keeps its warp-uniform arithmetic on the
uniform datapath.  tests/test_sass_gpu.py runs the same tests on the GPU
machine, whose NVRTC (CUDA 13) is not CI's (CUDA 12)."""
import pytest

from sass_helpers import mainloop_ops, sass, spill_report


def _configs():
    from rawcoop.plan import configs
    return configs.all_configs()


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.spec.label)
def test_gemm_sass(cfg, tmp_path):
    text = sass(cfg.spec, tmp_path)
    for instr in ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in text, f"{instr} missing from the SASS of {cfg.spec.label}"
    assert "LDL" not in text and "STL" not in text, "local-memory traffic (spills) in the SASS"
    usage = spill_report(cfg.spec)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage


def _uniform_configs():
    from rawcoop.plan import configs
    cfgs = configs.all_configs() + configs.block_scaled_configs() + configs.lowp_configs()
    # Ping-pong with clusters keeps the threadIdx-derived consumer index (UNIFORM_CONSUMER off: it spilled).
    return [c for c in cfgs if not (c.pingpong and c.cluster_size > 1)]


@pytest.mark.parametrize("cfg", _uniform_configs(), ids=lambda c: c.spec.label)
def test_mainloop_keeps_uniform_datapath(cfg, tmp_path):
    """The mainloop's ring and descriptor arithmetic is warp-uniform and ptxas
    keeps it on the uniform datapath (U* instructions).  A chunk range assigned
    inside the split-K fix-up's branches once made ptxas lose that proof in the
    cooperative kernels: the mainloop ran per-thread IMAD/LEA/R2UR instead, with
    WARPSYNCs, and block-scaled fp8 lost ~10% (stop 14).  Ping-pong kernels have
    it since their consumer index goes through redux.sync (UNIFORM_CONSUMER,
    stop 15: 74 -> 57 instructions per k-block at 128x128, +1.3-2.4%)."""
    ops = mainloop_ops(sass(cfg.spec, tmp_path))
    uniform = [o for o in ops if o.startswith("U") and not o.startswith("UTMA")]
    assert uniform, f"no uniform-datapath instructions in the mainloop of {cfg.spec.label}"
    assert "WARPSYNC" not in ops, f"WARPSYNC in the mainloop of {cfg.spec.label}"


def test_tile_copy_sass(tmp_path):
    from rawcoop import tile_copy
    text = sass(tile_copy.spec(2, 2), tmp_path)
    for instr in ("UTMALDG", "UTMASTG", "SYNCS"):
        assert instr in text
    assert "LDL" not in text and "STL" not in text


def test_block_scaled_mainloop_keeps_the_proxy_fence(tmp_path):
    """The block-scaled cooperative mainloop releases each stage after
    fence.proxy.async (a MEMBAR.ALL.CTA per k-block in SASS): its SA slot was
    read through the generic proxy before the producer's next TMA write.
    (Dropping the fence was measured in stop 16: 0.987-1.010, no gain; the
    switch is gone.)"""
    from rawcoop.plan import configs as g
    cfg = g.GemmConfig(128, g.E4M3, scale_mode=1)
    plain = mainloop_ops(sass(cfg.spec, tmp_path))
    assert "MEMBAR" in plain and "QGMMA" in plain
