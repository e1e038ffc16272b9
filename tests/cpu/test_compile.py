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


def test_tile_choice_rule():
    from helpers.plan import gc as _g; choose_block_n = _g.choose_block_n; choose_pingpong = _g.choose_pingpong; config_for_problem = _g.config_for_problem
    assert choose_block_n(8192, 8192, 1, 132, 8192) == 256          # many tiles, long K
    assert choose_block_n(4096, 4096, 1, 132, 4096) == 256          # 3.9 waves of 128x256
    # 16-bit, >= 2 waves of 128x256: ping-pong 128x128 when the last wave is <= 80% full (K <= 6144) or K <= 2048
    assert choose_block_n(3072, 3072, 1, 132, 3072, waves_max_k=(6144, 2048)) == 128    # last wave 18% full
    assert choose_block_n(6144, 6144, 1, 132, 6144, waves_max_k=(6144, 2048)) == 128    # 73%
    assert choose_block_n(3072, 4096, 1, 132, 2048, waves_max_k=(6144, 2048)) == 128    # 91%, but K = 2048
    assert choose_block_n(4096, 4096, 1, 132, 4096, waves_max_k=(6144, 2048)) == 256    # 88% full
    assert choose_block_n(3072, 3072, 1, 132, 8192, waves_max_k=(6144, 2048)) == 256    # longer K
    assert choose_block_n(3072, 3072, 1, 132, 3072) == 256                         # not 16-bit
    # 16-bit, between one and two waves of 128x256 with the second 20-80% full, K <= 2048: ping-pong 128x128
    assert choose_block_n(2304, 2304, 1, 132, 2048, one_wave_max_k=2048) == 128    # 162 tiles: 23% in wave 2
    assert choose_block_n(1024, 5760, 1, 132, 2048, one_wave_max_k=2048) == 128    # 184 tiles: 39%
    assert choose_block_n(3072, 2048, 1, 132, 1024, one_wave_max_k=2048) == 128    # 192 tiles: 45%
    assert choose_block_n(1024, 5760, 1, 132, 2560, one_wave_max_k=2048) == 256    # K > 2048
    assert choose_block_n(1024, 5760, 1, 132, 2048) == 256                         # not 16-bit
    assert choose_block_n(1024, 5760, 1, 132, 2048, waves_max_k=(6144, 2048)) == 256    # one_wave_max_k 0: off
    assert choose_block_n(2048, 2304, 1, 132, 2048, one_wave_max_k=2048) == 256    # 144 tiles: 9% in wave 2
    assert choose_block_n(4672, 1568, 1, 132, 1536, one_wave_max_k=2048) == 256    # 259 tiles: 96%
    assert choose_block_n(384, 20224, 1, 132, 2048, one_wave_max_k=2048) == 128    # 237 tiles: 105 <= 0.8 x 132
    assert choose_block_n(2176, 3584, 1, 132, 2048, one_wave_max_k=2048) == 256    # 238 tiles: 106 > 0.8 x 132
    assert choose_block_n(384, 13568, 1, 132, 2048, one_wave_max_k=2048) == 128    # 159 tiles: 27 >= 0.2 x 132
    assert choose_block_n(256, 20224, 1, 132, 2048, one_wave_max_k=2048) == 256    # 158 tiles: 26 < 0.2 x 132
    assert choose_block_n(1536, 2816, 1, 132, 2048, one_wave_max_k=2048) == 256    # 132 tiles: one whole wave
    assert choose_block_n(4096, 14336, 1, 132, 4096) == 128         # 13.6 waves, short K: ping-pong 128
    assert choose_block_n(4096, 14336, 1, 132, 4096, many_waves=0) == 256   # that band off (as for 16-bit inputs)
    assert choose_block_n(4096, 14336, 1, 132, 4096, many_waves=0, waves_max_k=(6144, 2048)) == 128  # 58% tail
    assert choose_block_n(7104, 6928, 1, 132, 2288, many_waves=0, waves_max_k=(6144, 2048)) == 256  # 88% tail
    assert choose_block_n(1024, 1024, 1, 132, 65536) == 128         # few tiles: 128 (+ split-K) ...
    assert choose_block_n(1024, 1024, 1, 132, 65536, wide_split_k=True) == 256   # ... 16-bit: 256 + 4 splits
    assert choose_block_n(1024, 1024, 1, 132, 32768, wide_split_k=True) == 128   # splits under 16384 of K
    assert choose_block_n(1024, 2048, 1, 132, 32768, wide_split_k=True) == 128   # 128x128 needs no split
    assert choose_block_n(512, 512, 1, 132, 65536, wide_split_k=True) == 128     # 8 x 4 splits < 16 x 4
    assert config_for_problem(1024, 1024, 65536, True, True, True).block_n == 256
    assert config_for_problem(1024, 1024, 65536, 3, True, True).block_n == 128  # fp8: not measured
    assert choose_block_n(128, 8192, 1, 132, 8192) == 64           # M = 128: 128 narrow tiles, no split
    assert choose_block_n(128, 8192, 1, 132, 8192, one_row_narrow=False) == 128
    assert choose_block_n(96, 8192, 1, 132, 8192) == 64            # ragged one tile row: narrow too
    assert choose_block_n(65, 8192, 1, 132, 8192) == 64
    assert choose_block_n(64, 8192, 1, 132, 8192) == 64            # M <= 64: one row too (un-swapped)
    assert choose_block_n(1, 8192, 1, 132, 8192) == 64
    assert choose_block_n(64, 4096, 1, 132, 8192) == 128           # 64 narrow tiles: too few (swap-AB then)
    assert choose_block_n(129, 8192, 1, 132, 8192) == 128          # two tile rows: not the narrow rule
    assert choose_block_n(128, 16384, 1, 132, 8192) == 128          # 128x128 tiles fill the SMs
    assert choose_block_n(128, 4096, 1, 132, 8192) == 128           # 64 narrow tiles: too few
    assert choose_block_n(2048, 2048, 1, 132, 512) == 128            # 128 wide tiles (97%), but short K
    assert choose_block_n(2048, 2048, 1, 132, 2048) == 256           # 128 wide tiles fill 97% of the SMs
    assert choose_block_n(256, 16384, 1, 132, 4096) == 256           # (measured +4-5% over 128x128)
    assert choose_block_n(1920, 2048, 1, 132, 8192) == 256           # 120 wide tiles: 91%
    assert choose_block_n(256, 12288, 1, 132, 4096) == 128           # 96 wide tiles: 73% (128x256 lost 6-11%)
    assert choose_block_n(1792, 2048, 1, 132, 8192) == 256           # 112 wide tiles: 85% (>= 78%)
    assert choose_block_n(1664, 2048, 1, 132, 8192) == 256           # 104 wide tiles: 78.8%
    assert choose_block_n(1280, 2560, 1, 132, 8192) == 128           # 100 wide tiles: 75.8%
    assert choose_block_n(1792, 2048, 1, 132, 512, wide_fill_min_k=512) == 256    # 16-bit: K >= 8 k-blocks
    assert choose_block_n(1792, 2048, 1, 132, 448, wide_fill_min_k=512) == 128    # ... shorter: 128x128
    assert choose_block_n(1792, 2048, 1, 132, 8192, wide_fill_min_k=0) == 128     # 0: the band is off
    assert choose_pingpong(128) and not choose_pingpong(256) and not choose_pingpong(64)
    assert choose_pingpong(128, 264, 132) and not choose_pingpong(128, 263, 132)
    assert config_for_problem(4096, 14336, 4096, True, True, True).pingpong
    assert not config_for_problem(1024, 1024, 65536, True, True, True).pingpong   # one tile per CTA
    assert not config_for_problem(128, 8192, 8192, True, True, True).pingpong
    assert not config_for_problem(8192, 8192, 8192, True, True, True).pingpong
    assert choose_block_n(8192, 16, 1, 132, 8192) == 64             # swap-AB small M


def test_one_wave_rule_kinds(monkeypatch):
    """choose_block_n's one-wave rule counts K in k-blocks of the kernel A's
    kind (PINGPONG_ONE_WAVE_K_BLOCKS: 16-bit 32 x 64 = K <= 2048, fp8 48 x
    128 = K <= 6144; tf32 not listed: off) and only where ping-pong is not
    ruled out and not block-scaled."""
    from helpers.plan import gc as gc

    def plan(kind, m, n, k, out="bfloat16", **kw):
        return gc.plan_config(m, n, k, 1, 132, kinds=(kind, kind), kmajor=(True, True), out_name=out,
                              use_c=False, c_rowmajor=True, bias_kind=0, activation=None, **kw)
    monkeypatch.setattr(gc, "WIDTH_192_RATIO", 0.0)      # (the 128x192 rule would take 1024x5760x2560)
    monkeypatch.setattr(gc, "NARROW_WIDTH_RATIO", 0.0)   # (and the narrow widths, 128x176)
    wide = plan(gc.BF16, 1024, 5760, 2560, block=False)           # 184 tiles, 39% second wave, K > 2048
    assert (wide.block_n, wide.pingpong) == (256, False)
    for kind in (gc.BF16, gc.FP16):
        p = plan(kind, 1024, 5760, 2048, block=False)
        assert (p.block_m, p.block_n, p.pingpong) == (128, 128, True)
        assert plan(kind, 1024, 5760, 2048, block=False, pingpong=False).block_n == 256   # ruled out: not the rule
    for kind in (gc.E4M3, gc.E5M2):                               # 195 tiles: fp8 up to 48 x 128 of K
        for k in (2048, 4096, 6144):
            p = plan(kind, 1856, 3200, k, block=False)
            assert (p.block_m, p.block_n, p.pingpong) == (128, 128, True), (kind, k, p)
        assert plan(kind, 1856, 3200, 6272, block=False).block_n == 256
    blk = plan(gc.E4M3, 1856, 3200, 2048, block=True)            # block-scaled: never ping-pong 128x128
    assert not blk.pingpong
    tf32 = plan(gc.TF32, 3568, 1552, 512, out="float32", block=False)   # 196 tiles, K = 16 k-blocks: not listed
    assert not (tf32.block_n == 128 and tf32.pingpong), tf32
    monkeypatch.setattr(gc, "PINGPONG_ONE_WAVE_K_BLOCKS", {gc.FP16: 32, gc.BF16: 32})
    assert plan(gc.E4M3, 1856, 3200, 2048, block=False).block_n == 256   # fp8 unlisted: off (its plan without the rule)
    monkeypatch.setattr(gc, "PINGPONG_ONE_WAVE_K_BLOCKS", {})
    assert plan(gc.BF16, 1024, 5760, 2048, block=False).block_n == 256   # no kinds: the rule is off


def test_waves_rule_kinds(monkeypatch):
    """choose_block_n's many-waves rule (>= 2 waves of 128x256 tiles: ping-pong
    128x128 with a partial last wave up to PINGPONG_WAVES_K_BLOCKS[0] k-blocks,
    whatever the fill up to [1]) per kind: 16-bit 96 / 32 (K 6144 / 2048),
    fp8 64 / 32 (K 8192 / 4096), tf32 96 / 32 (K 3072 / 1024), block-scaled
    never."""
    from helpers.plan import gc as gc

    def plan(kind, m, n, k, out="bfloat16", block=False, **kw):
        return gc.plan_config(m, n, k, 1, 132, kinds=(kind, kind), kmajor=(True, True), out_name=out,
                              use_c=False, c_rowmajor=True, bias_kind=0, activation=None, block=block, **kw)

    def pp128(c):
        return (c.block_m, c.block_n, c.pingpong) == (128, 128, True)
    for kind in (gc.E4M3, gc.E5M2):
        assert pp128(plan(kind, 8192, 8192, 8192))          # 2048 tiles: 15.5 waves, 52% last, 64 k-blocks
        assert pp128(plan(kind, 8192, 28672, 8192))
        assert not pp128(plan(kind, 8192, 8192, 8320))      # 65 k-blocks
        assert pp128(plan(kind, 4096, 4096, 4096))          # 3.9 waves, 88% last: K = 32 k-blocks any fill
        assert plan(kind, 4096, 4096, 4224).block_n == 256  # 33 k-blocks and 88%: not the rule
        assert not plan(kind, 8192, 8192, 8192, pingpong=False).pingpong    # ruled out: not the rule
    assert pp128(plan(gc.BF16, 6144, 6144, 6144)) and not pp128(plan(gc.BF16, 6144, 6144, 6208))
    assert pp128(plan(gc.TF32, 4096, 4096, 1024, out="float32"))           # tf32: 32 k-blocks of 32, 88% ...
    assert plan(gc.TF32, 4096, 4096, 1056, out="float32").block_n == 256   # ... 33 k-blocks: not the rule
    blk = plan(gc.E4M3, 8192, 8192, 8192, block=True)
    assert blk.block_n == 128 and not blk.pingpong                          # block-scaled: its own tiles
    monkeypatch.setattr(gc, "PINGPONG_WAVES_K_BLOCKS", {gc.FP16: (96, 32), gc.BF16: (96, 32)})
    assert plan(gc.E4M3, 8192, 8192, 8192).block_n == 256                   # fp8 unlisted: its plan without the rule


def test_swap_choice_rule():
    from helpers.plan import gc as _g; BF16 = _g.BF16; E4M3 = _g.E4M3; TF32 = _g.TF32; choose_swap = _g.choose_swap; config_for_problem = _g.config_for_problem
    kw = dict(out_fp32=False, block=False)
    assert not choose_swap(None, 64, 8192, 1, 132, **kw)           # one row of 128x64 whole-K tiles fits
    assert not choose_swap(None, 1, 8192, 1, 132, **kw)
    assert choose_swap(None, 64, 4096, 1, 132, **kw)               # 64 narrow tiles: swap-AB
    assert choose_swap(None, 16, 16384, 1, 132, **kw)              # 256 narrow tiles: too many for one wave
    assert not choose_swap(None, 65, 4096, 1, 132, **kw)           # M > 64: never by default
    assert not choose_swap(None, 16, 64, 1, 132, **kw)             # N <= 64
    assert choose_swap(True, 64, 8192, 1, 132, **kw) and not choose_swap(False, 16, 4096, 1, 132, **kw)
    assert choose_swap(True, 16, 4096, 1, 132, out_fp32=True, block=False)      # forced: fp32 out swaps
    assert not choose_swap(None, 16, 4096, 1, 132, out_fp32=True, block=False)  # ... not by itself
    assert not choose_swap(True, 16, 4096, 1, 132, out_fp32=False, block=True)
    for kind in (BF16, E4M3):
        small = config_for_problem(16, 8192, 8192, kind, True, True)
        assert not small.d_colmajor and small.block_n == 64 and small.spec == config_for_problem(
            64, 8192, 4096, kind, True, True).spec                  # the same 128x64 one-row kernel
        assert config_for_problem(16, 4096, 8192, kind, True, True).d_colmajor      # swap-AB: D column-major
    assert not config_for_problem(16, 4096, 8192, TF32, True, True).d_colmajor   # fp32 out: not swapped by itself


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
