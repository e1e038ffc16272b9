"""CPU: every registered kernel configuration compiles under NVRTC for sm_90a,
its PTX contains the instructions it is meant to use, and ptxas reports no
spills."""
import re

import pytest

from rawcoop import compiler, registry
from helpers.plan import gc as _gc
from rawcoop.compiler import KernelSpec

SPECS = registry.all_specs()


def _usage(r) -> dict:
    """ptxas's resource report of a compile; an empty log fails clearly (on
    the H200, NVRTC returned empty logs in a process where torch had
    initialised CUDA: run these tests in their own process there)."""
    assert r.log.strip(), "NVRTC returned an empty log: no ptxas -v report to check"
    return r.resources


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.label)
def test_compiles_with_expected_ptx(spec):
    r = compiler.compile_spec(spec, want_ptx=True)
    assert r.cubin[:4] == b"\x7fELF", "NVRTC did not return an ELF cubin"
    assert ".target sm_90a" in r.ptx
    for instr in registry.expected_instructions(spec):
        assert instr in r.ptx, f"{instr!r} not in the PTX of {spec.label}"
    usage = _usage(r)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert "C7508" not in r.log and "C7517" not in r.log, "setmaxnreg ignored or wgmma serialised:\n" + r.log


@pytest.mark.parametrize("cfg", _gc.epilogue_configs(),
                         ids=lambda c: c.spec.label)
def test_gemm_epilogue_variants_compile(cfg):
    """Every epilogue option value (C row/col, D col, bias types/rows, each
    activation, each output type) compiles without spills."""
    r = compiler.compile_spec(cfg.spec, want_ptx=True)
    for instr in registry.expected_instructions(cfg.spec):
        assert instr in r.ptx, f"{instr!r} not in the PTX of {cfg.spec.label}"
    usage = _usage(r)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert cfg.smem_bytes <= 232448


LOWP = _gc.lowp_configs() + _gc.lowp_epilogue_configs()


@pytest.mark.parametrize("cfg", LOWP, ids=lambda c: c.spec.label)
def test_tf32_fp8_configs_compile(cfg):
    """tf32 and fp8 (e4m3, e5m2, mixed) in the same kernel: compiles, the PTX
    has the right wgmma (k8 .tf32 / k32 .e4m3/.e5m2) and TMA instructions,
    the fp8 scale loads, the setmaxnreg split, no spills, no serialised wgmma."""
    r = compiler.compile_spec(cfg.spec, want_ptx=True)
    assert r.cubin[:4] == b"\x7fELF"
    for instr in registry.expected_instructions(cfg.spec):
        assert instr in r.ptx, f"{instr!r} not in the PTX of {cfg.spec.label}"
    assert "k16.f32" not in r.ptx, "a 16-bit wgmma in a tf32/fp8 kernel"
    usage = _usage(r)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert "C7508" not in r.log and "C7517" not in r.log, "setmaxnreg ignored or wgmma serialised:\n" + r.log
    assert cfg.smem_bytes <= _gc.SMEM_LIMIT


BLOCK = _gc.block_scaled_configs()
_TMA_LOAD = "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "


@pytest.mark.parametrize("cfg", BLOCK, ids=lambda c: c.spec.label)
def test_block_scaled_fp8_configs_compile(cfg):
    """Block-scaled fp8 (SCALE_MODE=1): compiles without spills or serialised
    wgmma, and against the same configuration with per-tensor scales its PTX
    has exactly one more TMA load (the stage's A scales) and, per promotion
    site, one fma.rn.f32 per accumulator register (acc += tmp * (sa * sb))
    and one fence.proxy.async (before the stage is released); per issue site
    two ld.shared.f32 per 64-row half (the thread's rows' A scales).
    Ping-pong (one temporary): one issue and one promotion site, SB read with
    three ld.global.cg.f32 (two before the k-loop, one in it: BS_SB_AHEAD = 2)
    instead of the per-tensor scales' two, and no k-block in flight across
    the promotion (no wgmma.wait_group 1).  Cooperative (two temporaries,
    BS_TWO_TMP): the k-loop unrolled by two, so five promotion sites (two in
    the loop, two when two k-blocks are left, one when one is) and four issue
    sites (one before the loop, two in it, one in the tail), with k-block
    kb + 1 in flight while kb is promoted (wgmma.wait_group 1) and SB read
    one promotion ahead (BS_SB_AHEAD = 1)."""
    from dataclasses import replace
    r = compiler.compile_spec(cfg.spec, want_ptx=True)
    assert r.cubin[:4] == b"\x7fELF"
    for instr in registry.expected_instructions(cfg.spec):
        assert instr in r.ptx, f"{instr!r} not in the PTX of {cfg.spec.label}"
    usage = _usage(r)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert "C7508" not in r.log and "C7517" not in r.log and "C7514" not in r.log, r.log
    assert cfg.smem_bytes <= _gc.SMEM_LIMIT
    plain = compiler.compile_spec(replace(cfg, scale_mode=0, stages=0).spec, want_ptx=True).ptx
    ptx = r.ptx
    halves = 2 if cfg.pingpong else 1
    promotions, issues = (1, 1) if cfg.pingpong else (5, 4)
    assert ptx.count(_TMA_LOAD) == plain.count(_TMA_LOAD) + 1
    assert ptx.count("fma.rn.f32") == plain.count("fma.rn.f32") + promotions * halves * cfg.block_n // 2
    assert ptx.count("ld.shared.f32 ") == issues * 2 * halves
    assert (ptx.count("fence.proxy.async.shared::cta")
            == plain.count("fence.proxy.async.shared::cta") + promotions)
    assert plain.count("ld.global.cg.f32 ") == 2 and "wgmma.wait_group.sync.aligned 1;" in plain
    if cfg.pingpong:
        assert ptx.count("ld.global.cg.f32 ") == 3
        assert "wgmma.wait_group.sync.aligned 1;" not in ptx
    else:
        assert ptx.count("ld.global.cg.f32 ") >= 3
        assert "wgmma.wait_group.sync.aligned 1;" in ptx


@pytest.mark.parametrize("change, message", [
    (dict(BLOCK_N=256), "block-scaled: a tile must lie inside one 128-column B scale block"),
    (dict(PINGPONG=1), "accumulators + promotion temporaries must fit in 128 registers"),
    (dict(IN_KIND=1), "block scales (SCALE_MODE 1) are for fp8 inputs"),
    (dict(SCALE_MODE=2), "SCALE_MODE: 0 per-tensor, 1 block-scaled"),
])
def test_block_scaled_kernel_static_asserts(change, message):
    """The static_asserts behind the host's block-scaled tile rules."""
    spec = _gc.GemmConfig(128, _gc.E4M3, scale_mode=1).spec
    bad = KernelSpec(spec.source, spec.name, tuple((k, change.get(k, v)) for k, v in spec.defines))
    with pytest.raises(compiler.CompileError, match=re.escape(message)):
        compiler.compile_spec(bad)


def test_tf32_fp8_configs_cover_every_kind_pair_and_tile():
    got = {(c.in_kind, c.b_kind, c.block_n) for c in LOWP}
    for ka, kb in _gc.LOWP_KIND_PAIRS:
        assert {(ka, kb, 128), (ka, kb, 256)} <= got
    assert {c.out_type for c in LOWP} == {0, 1, 2} and {c.act for c in LOWP} == {0, 1, 2, 3}
    assert any(c.has_c for c in LOWP) and any(c.cluster_m == 2 for c in LOWP) and any(c.pingpong for c in LOWP)
    assert any(c.d_colmajor and c.c_colmajor for c in LOWP)


def test_lowp_kernel_rejects_mn_major_operands():
    """The static_assert behind the host's K-major rule."""
    spec = _gc.GemmConfig(128, _gc.TF32).spec
    bad = KernelSpec(spec.source, spec.name, tuple((k, 0 if k == "A_KMAJOR" else v) for k, v in spec.defines))
    with pytest.raises(compiler.CompileError, match="wgmma cannot transpose 32-bit/8-bit operands"):
        compiler.compile_spec(bad)


def test_registry_has_gemm_and_copy_kernels():
    names = {s.name for s in SPECS}
    assert {"gemm_kernel", "tile_replicate"} <= names
    assert len(SPECS) == len(set(SPECS))


def test_gemm_configs_fit_shared_memory():
    from helpers.plan import gc as configs
    for cfg in configs.all_configs():
        assert cfg.smem_bytes <= configs.SMEM_LIMIT
        assert cfg.stages >= 3


def test_compile_error_carries_log(tmp_path, monkeypatch):
    from rawcoop import sources
    (tmp_path / "broken.cu").write_text('extern "C" __global__ void broken() { this is not C++; }\n')
    monkeypatch.setattr(sources, "kernels_dir", lambda: tmp_path)
    spec = KernelSpec.make("broken.cu", "broken")
    with pytest.raises(compiler.CompileError) as ei:
        compiler.compile_spec(spec)
    e = ei.value
    assert e.kernel == "broken" and e.arch == "sm_90a"
    assert "--gpu-architecture=sm_90a" in e.options
    assert "error" in e.log.lower()
    assert "broken" in str(e)


def test_ptx_only_build_has_no_cubin_but_ptx(tmp_path):
    # A PTX-only target (compute_90a) yields no cubin: reported as a CompileError.
    spec = registry.all_specs()[0]
    opts = [o.replace("sm_90a", "compute_90a") for o in compiler.base_options()]
    with pytest.raises(compiler.CompileError, match="no cubin"):
        compiler.compile_spec(spec, options=opts)


def test_scheduler_matches_device_formula_and_covers_every_tile():
    """Host mirror of scheduler.cuh: every tile exactly once over all CTAs."""
    import random
    from rawcoop.plan import scheduler
    rng = random.Random(0)
    for _ in range(300):
        m, n = rng.randint(1, 5000), rng.randint(1, 5000)
        bn = rng.choice([64, 128, 192, 256])
        batches = rng.choice([1, 1, 3])
        sched = scheduler.schedule(m, n, 128, bn, rng.choice([1, 7, 66, 132]), rng.choice([None, 1, 2, 5, 8, 16]),
                                   batches)
        seen = [t for c in range(sched.grid) for t in sched.tiles_of(c)]
        assert sorted(seen) == sorted((b, i, j) for b in range(batches) for i in range(sched.tiles_m)
                                      for j in range(sched.tiles_n))


def test_decomposition_covers_every_tile_kblock_exactly_once():
    """Host mirror of scheduler.cuh's work_unit: over all CTAs of the grid,
    every (tile, k-block) is covered exactly once, splits of a tile are
    consecutive units, and only a tile's last split runs its epilogue."""
    import random
    from rawcoop.plan import scheduler
    rng = random.Random(1)
    for _ in range(400):
        tiles = rng.randint(1, 700)
        k_blocks = rng.randint(1, 600)
        sms = rng.choice([1, 7, 66, 132])
        forced = rng.choice([None, None, 1, 2, 3, 5, 64])
        dec = scheduler.decompose(tiles, k_blocks, sms, forced)
        grid = min(sms, dec.units)
        covered = {}
        epilogues = []
        for cta in range(grid):
            for u in range(cta, dec.units, grid):
                tile, split, splits, kb0, kbn = dec.unit(u)
                assert kbn >= 1
                for kb in range(kb0, kb0 + kbn):
                    key = (tile, kb)
                    assert key not in covered, f"{key} covered twice"
                    covered[key] = u
                if split == splits - 1:
                    epilogues.append(tile)
        assert len(covered) == tiles * k_blocks
        assert sorted(epilogues) == list(range(tiles))
        if dec.splits > 1:
            assert 2 <= dec.splits and dec.tiles_dp % sms == 0 or forced is not None
            assert dec.workspace_floats(128) == dec.split_tiles * 2 * 64 * 128
            if forced is None:
                assert dec.units - dec.tiles_dp <= sms, "split units must fit in one wave"


def test_trimmed_lines_rule():
    """configs.trimmed_lines (the host half of kernels/gemm.cu's
    trimmed_lines): K-major operands with fewer rows than their tile get a
    box of round8(rows) lines; MN-major operands, full tiles and clusters
    keep the whole tile."""
    from helpers.plan import gc as _g; GemmConfig = _g.GemmConfig; trimmed_lines = _g.trimmed_lines
    cfg, pair = GemmConfig(64, True), GemmConfig(128, True, cluster_n=2)
    assert trimmed_lines(True, 16, 128, cfg) == 16
    assert trimmed_lines(True, 1, 64, cfg) == 8
    assert trimmed_lines(True, 97, 128, cfg) == 104
    assert trimmed_lines(True, 128, 128, cfg) == 128 and trimmed_lines(True, 5000, 128, cfg) == 128
    assert trimmed_lines(False, 16, 128, cfg) == 128                    # MN-major: 64-wide boxes
    assert trimmed_lines(True, 16, 128, pair) == 128                    # multicast halves


STREAM_K = _gc.stream_k_configs()


@pytest.mark.parametrize("cfg", STREAM_K, ids=lambda c: c.spec.label)
def test_stream_k_configs_compile(cfg):
    """Stream-K kernels (STREAM_K=1, opt-in): compile without spills or
    serialised wgmma, the expected instructions, and the same mainloop as the
    data-parallel kernel (as many wgmma and TMA instructions)."""
    from dataclasses import replace
    r = compiler.compile_spec(cfg.spec, want_ptx=True)
    assert r.cubin[:4] == b"\x7fELF"
    for instr in registry.expected_instructions(cfg.spec):
        assert instr in r.ptx, f"{instr!r} not in the PTX of {cfg.spec.label}"
    usage = _usage(r)
    if cfg.has_c and cfg.block_n == 256:
        # The C-loader warp (setmaxnreg 40) spills its stream-K range arithmetic: a few bytes, once per
        # unit, off the mainloop (found by removing the stream-K branch from the C loader alone).
        assert usage["spill_stores"] <= 8 and usage["spill_loads"] <= 16 and usage["stack"] <= 8, usage
    else:
        assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert "C7508" not in r.log and "C7517" not in r.log and "C7514" not in r.log, r.log
    # Against the data-parallel kernel with the chain split-K reduction (SPLIT_SPREAD=0): the spread
    # reduction of a plain kernel runs the C loader over a share of the chunks (runtime bounds, so
    # its loop is not unrolled as with the whole tile's constant bounds).
    dp = replace(cfg, stream_k=False).spec
    plain_spec = compiler.KernelSpec(dp.source, dp.name, tuple(sorted(dp.defines + (("SPLIT_SPREAD", 0),))))
    plain = compiler.compile_spec(plain_spec, want_ptx=True).ptx
    for instr in ("wgmma.mma_async", _TMA_LOAD, "cp.async.bulk.tensor.3d.global.shared::cta"):
        assert r.ptx.count(instr) == plain.count(instr), instr


@pytest.mark.parametrize("base, change", [
    (_gc.GemmConfig(128, True, stream_k=True), dict(CLUSTER_M=2)),
    (_gc.GemmConfig(64, _gc.E4M3, pingpong=True, scale_mode=1), dict(STREAM_K=1)),
])
def test_stream_k_kernel_static_asserts(base, change):
    spec = base.spec
    defines = dict(spec.defines)
    defines.update(change)
    bad = KernelSpec(spec.source, spec.name, tuple(sorted(defines.items())))
    with pytest.raises(compiler.CompileError, match=re.escape("stream-K kernels are without clusters")):
        compiler.compile_spec(bad)


def test_stream_k_config_rules():
    assert _gc.GemmConfig(128, True, stream_k=True, pingpong=True).stream_k      # ping-pong stream-K
    with pytest.raises(ValueError, match="without clusters"):
        _gc.GemmConfig(128, True, stream_k=True, cluster_n=2)
    with pytest.raises(ValueError, match="ping-pong stream-K is not built block-scaled"):
        _gc.GemmConfig(64, _gc.E4M3, stream_k=True, pingpong=True, scale_mode=1)
    assert ("STREAM_K", 1) in _gc.GemmConfig(256, True, stream_k=True).spec.defines
    assert all(k != "STREAM_K" for k, _ in _gc.GemmConfig(256, True).spec.defines)   # default specs unchanged


def test_empty_nvrtc_log_leaves_shared_bytes_alone():
    """Regression (found on the H200): an empty NVRTC program log
    (size 1, the terminator) was fetched into ``b" " * 1``, which CPython
    shares interpreter-wide, so NVRTC's NUL overwrote ``b" "`` and every
    space encoded afterwards (print's separators too) became NUL.  Compiling
    without ptxas -v gives an empty log here."""
    spec = _gc.GemmConfig(128, True).spec
    opts = [o for o in compiler.base_options() if o != "--ptxas-options=-v"]
    r = compiler.compile_spec(spec, options=opts)
    assert r.log == ""
    assert r.cubin[:4] == b"\x7fELF"
    # (comparing against bytes([32]) would not do: that is the same shared object)
    assert " ".encode()[0] == 32 and b" "[0] == 32 and chr(32).encode()[0] == 32


def _uniform_consumer_configs():
    from helpers.plan import gc as g
    return [g.GemmConfig(128, g.BF16, pingpong=True), g.GemmConfig(256, g.BF16), g.GemmConfig(128, g.FP16, False, False),
            g.GemmConfig(128, g.E4M3, scale_mode=1), g.GemmConfig(64, g.E4M3, scale_mode=1, pingpong=True),
            g.GemmConfig(256, g.E4M3), g.GemmConfig(128, g.TF32, out_type=2), g.GemmConfig(256, g.BF16, stream_k=True),
            g.GemmConfig(128, g.BF16, True, False, True, True, cluster_m=2, bias=1, act=2)]


@pytest.mark.parametrize("extra", [(("UNIFORM_CONSUMER", 1),), (("UNIFORM_CONSUMER", 0),)], ids=str)
@pytest.mark.parametrize("cfg", _uniform_consumer_configs(), ids=lambda c: c.spec.label)
def test_uniform_consumer_experiments_compile(cfg, extra):
    """UNIFORM_CONSUMER (the consumer index through redux.sync; default for
    ping-pong kernels, off for the others), forced
    on and off: the kernels compile without spills or serialised wgmma, with
    the same wgmma and TMA instructions as the default.  (The block-scaled
    switches BS_SB_AFTER_FENCE and BS_PROXY_FENCE were measured no faster and
    removed.)"""
    spec = compiler.KernelSpec(cfg.spec.source, cfg.spec.name, tuple(sorted(cfg.spec.defines + extra)))
    r = compiler.compile_spec(spec, want_ptx=True)
    uniform = dict(extra).get("UNIFORM_CONSUMER", int(cfg.pingpong and cfg.cluster_size == 1))
    assert ("redux.sync.min.u32" in r.ptx) == bool(uniform)
    usage = _usage(r)
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert "C7508" not in r.log and "C7517" not in r.log and "C7514" not in r.log, r.log
    plain = compiler.compile_spec(cfg.spec, want_ptx=True).ptx
    assert ("redux.sync" in plain) == (cfg.pingpong and cfg.cluster_size == 1)   # the default: ping-pong, no cluster
    for instr in ("wgmma.mma_async", _TMA_LOAD):
        assert r.ptx.count(instr) == plain.count(instr), instr
