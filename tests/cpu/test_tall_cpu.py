"""CPU: 192-row ("tall") tiles - three consumer warpgroups of 64 rows each
(kernels/gemm.cu "Tall tiles").  The configuration rules and their errors,
shared memory and threads, the PTX (setmaxnreg 152, 512 threads, a third C
loader and named barrier), the schedule's split-K slots (three per tile), the
plan rawcoop.gemm builds, and the automatic choice (configs.choose_tall)
on the shapes it was measured on."""
import pytest

from rawcoop import compiler
from rawcoop.plan import configs as gc, scheduler

from helpers.stub import BF16, build, stub_planning, tn, without_lowp_pingpong_rules

TALL = [c for c in gc.all_configs() + gc.epilogue_configs() if c.block_m == gc.TALL_BLOCK_M]


@pytest.fixture
def planning(monkeypatch):
    return stub_planning(monkeypatch)


def test_tall_configs_cover_layouts_widths_and_epilogues():
    assert {(c.a_kmajor, c.b_kmajor) for c in TALL} == {(True, True), (True, False), (False, True), (False, False)}
    assert {c.block_n for c in TALL} == set(gc.TALL_BLOCK_NS)
    assert {c.in_kind for c in TALL} == {gc.FP16, gc.BF16}
    assert any(c.has_c and c.bias and c.act and c.out_type == 2 for c in TALL)
    assert any(c.d_colmajor and c.c_colmajor and c.bias_on_rows for c in TALL)


def test_tall_config_shape_of_the_kernel():
    c = gc.GemmConfig(192, True, block_m=192)
    assert c.consumers == 3 and c.threads == 512 and c.stages == 4
    assert c.smem_bytes == 4 * 384 * 128 + 3 * 8192 + (2 * 4 + 2 * 3 + 1 + 3) * 8 + 1024 <= gc.SMEM_LIMIT
    assert gc.GemmConfig(128, True, block_m=192).stages == 5
    assert gc.GemmConfig(192, True, has_c=True, block_m=192).stages == 3
    assert dict(c.spec.defines)["BLOCK_M"] == 192
    d = gc.GemmConfig(128, True)
    assert d.consumers == 2 and d.threads == gc.THREADS == 384 and "BLOCK_M" not in dict(d.spec.defines)


@pytest.mark.parametrize("kw, message", [
    (dict(block_n=256), "128 or 192 wide"), (dict(block_n=64), "128 or 192 wide"),
    (dict(pingpong=True, block_n=128), "cooperative"), (dict(stream_k=True), "stream-K"),
    (dict(cluster_n=2), "without clusters"), (dict(cluster_m=2), "without clusters"),
    (dict(in_kind=gc.E4M3, scale_mode=1, block_n=128), "block scales"),
    (dict(block_m=256), "block_m must be"),
])
def test_tall_config_rejects(kw, message):
    args = dict(block_n=192, in_kind=gc.BF16, block_m=192)
    args.update(kw)
    with pytest.raises(ValueError, match=message):
        gc.GemmConfig(**args)


def test_tall_tf32_fp8_configs():
    """tf32 and per-tensor fp8 (K-major A and B) take 192-row tiles too: the
    same 48 KB stages (BLOCK_K is 128 bytes for every kind) and 96
    accumulators per thread; m64n192 k8/k32 wgmmas."""
    for kind, b_kind, out in ((gc.TF32, gc.TF32, 2), (gc.E4M3, gc.E4M3, 1), (gc.E4M3, gc.E5M2, 2)):
        c = gc.GemmConfig(192, kind, b_kind=b_kind, out_type=out, block_m=192)
        assert (c.stages, c.threads, c.block_k) == (4, 512, 128 // c.in_bytes)
        assert c.smem_bytes == gc.GemmConfig(192, gc.BF16, out_type=out, block_m=192).smem_bytes
        cfg = _auto(1000, 1304, 520, kinds=(kind, b_kind), out_name="float32", block_m=192)
        assert (cfg.block_m, cfg.in_kind, cfg.b_kind) == (192, kind, b_kind)
    with pytest.raises(ValueError, match="K-major"):
        gc.GemmConfig(192, gc.E4M3, a_kmajor=False, block_m=192)


TALL_LOWP = [gc.GemmConfig(bn, kind, b_kind=b_kind, out_type=out, has_c=c, bias=1 if c else 0, block_m=192)
             for bn, kind, b_kind, out, c in ((192, gc.TF32, gc.TF32, 2, False), (128, gc.TF32, gc.TF32, 1, True),
                                               (192, gc.E4M3, gc.E4M3, 2, True), (128, gc.E4M3, gc.E5M2, 2, False),
                                               (192, gc.E5M2, gc.E4M3, 2, False))]


@pytest.mark.parametrize("cfg", TALL + TALL_LOWP, ids=lambda c: c.spec.label)
def test_tall_kernels_compile(cfg):
    """512 threads, consumers at setmaxnreg 152, no spills, no serialised wgmma."""
    r = compiler.compile_spec(cfg.spec, want_ptx=True)
    for instr in gc.expected_instructions(cfg.spec):
        assert instr in r.ptx, f"{instr!r} not in the PTX of {cfg.spec.label}"
    assert "setmaxnreg.inc.sync.aligned.u32 152" in r.ptx and ".maxntid 512" in r.ptx
    usage = r.resources
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, usage
    assert cfg.smem_bytes <= gc.SMEM_LIMIT
    assert "C7508" not in r.log and "C7517" not in r.log, "setmaxnreg ignored or wgmma serialised:\n" + r.log


def test_tall_epilogue_spills_stay_out_of_the_mainloop(tmp_path):
    """Known and accepted: 192-row tiles with C, a bias and a 16-bit output
    spill a few registers (each consumer thread has 152: 96 accumulators, and
    a 64-column chunk's C and bias values), in the epilogue and the tile
    loop's prologue - never between the first and the last HGMMA (QGMMA).  (fp32
    output has 32-column chunks and does not spill: the warm-up set's tall
    epilogue kernel.)"""
    from helpers.sass import mainloop_ops, sass
    for kind, out in ((gc.BF16, 1), (gc.FP16, 0), (gc.TF32, 1), (gc.E4M3, 1)):
        cfg = gc.GemmConfig(192, kind, out_type=out, has_c=True, bias=1, block_m=192)
        ops = mainloop_ops(sass(cfg.spec, tmp_path))
        assert "GMMA" in "".join(ops) and not {"LDL", "STL"} & set(ops), cfg.spec.label


def test_tall_schedule_slots_and_workspace():
    sched = scheduler.schedule(1536, 768, 192, 192, 132, k=65536, block_k=64)
    dec = sched.decomposition
    assert (sched.tiles_m, sched.tiles_n, sched.consumers) == (8, 4, 3)
    assert dec.tiles_dp == 0 and dec.splits == 4 and sched.grid == 128
    slots = {sched.workspace_slot(t, 0, c) for t in range(dec.tiles) for c in range(3)}
    assert slots == set(range(dec.flag_count(3))) and dec.flag_count(3) == 3 * 32
    assert dec.workspace_floats(192, True, 3) == 32 * 3 * 64 * 192 * 4


def _auto(m, n, k, **kw):
    args = dict(kinds=(gc.BF16, gc.BF16), kmajor=(True, True), out_name="bfloat16", use_c=False, c_rowmajor=True,
                bias_kind=0, activation=None, block=False)
    args.update(kw)
    return gc.plan_config(m, n, k, 1, 132, **args)


def test_forced_tall_plan_config():
    cfg = _auto(1000, 1304, 520, block_m=192)
    assert (cfg.block_m, cfg.block_n, cfg.pingpong, cfg.stream_k, cfg.cluster) == (192, 192, False, False, (1, 1))
    assert _auto(1000, 1304, 520, block_m=192, block_n=128).block_n == 128
    assert _auto(64, 1000, 2000, block_m=192).d_colmajor                  # swap-AB still applies to small M
    assert _auto(1000, 1304, 520, block_m=128).block_m == 128             # 128 forced: the usual rules, no tall
    for kw, message in ((dict(block_n=256), "_block_n in"), (dict(pingpong=True), "cooperative"),
                        (dict(streamk=True), "stream-K"), (dict(cluster=(1, 2)), "clusters"),
                        (dict(kinds=(gc.E4M3, gc.E4M3), block=True), "block-scaled"),
                        (dict(block_m=64), "_block_m must be")):
        args = dict(block_m=192)
        args.update(kw)
        with pytest.raises(ValueError, match=message):
            _auto(1000, 1304, 520, **args)


@pytest.mark.parametrize("shape, block_n", [
    ((1536, 768, 65536), 192), ((1536, 1024, 65536), 128), ((1536, 1536, 16384), 192), ((3072, 3072, 4096), 192),
    ((3072, 1536, 16384), 192), ((3072, 3072, 3072), 192), ((1536, 1536, 4096), 192), ((960, 1152, 32768), 192),
    ((1536, 3072, 8192), 192), ((768, 1536, 32768), 192)])
def test_choose_tall_picks(shape, block_n):
    """The shapes measured faster with 192-row tiles (fitted and out
    of sample), in every layout and both 16-bit types, with an epilogue too;
    the warm-up set has the kernels."""
    warm = {c.spec for c in gc.all_configs()}
    for kinds, out_name in (((gc.BF16, gc.BF16), "bfloat16"), ((gc.FP16, gc.FP16), "float16")):
        for kmajor in ((True, True), (False, True), (True, False), (False, False)):
            cfg = _auto(*shape, kinds=kinds, kmajor=kmajor, out_name=out_name)
            assert (cfg.block_m, cfg.block_n) == (192, block_n), (shape, kmajor)
            assert not cfg.pingpong and not cfg.stream_k and cfg.cluster == (1, 1)
            assert cfg.spec in warm
    assert _auto(*shape, use_c=True, bias_kind=1, activation="relu").block_m == 192


@pytest.mark.parametrize("shape, why", [
    ((2304, 2304, 8192), "measured -11%"), ((4608, 4608, 4608), "measured -5%"), ((4096, 4096, 4096), "-11%"),
    ((6144, 6144, 6144), "-4%"), ((2048, 2048, 8192), "not better in the model"),
    ((3456, 3456, 4096), "not better in the model"), ((8192, 8192, 8192), "bench shape"),
    ((8192, 28672, 8192), "bench shape"), ((256, 16384, 4096), "M under 384"), ((1024, 1024, 65536), "bench shape"),
    ((128, 8192, 8192), "one row"), ((32, 4096, 8192), "swap-AB"),
])
def test_choose_tall_keeps_the_usual_tiles(shape, why):
    assert _auto(*shape).block_m == 128, why


LOWP_AUTO = [((gc.E4M3, gc.E4M3), "bfloat16"), ((gc.E4M3, gc.E5M2), "float32"), ((gc.TF32, gc.TF32), "float32")]


@pytest.mark.parametrize("kinds, out_name", LOWP_AUTO, ids=lambda v: str(v))
def test_choose_tall_tf32_fp8(kinds, out_name):
    """The same rule for tf32 and per-tensor fp8 (measured e4m3 and
    tf32, forced 192x192 against the 128-row choice): picked where they won
    (+9% to +85%), kept where they lost (-4% to -10%) or were even; the
    kernels are in warm-up --all's tf32/fp8 set.  Block-scaled fp8 never."""
    # (1536x4608x8192 measured -4% against the 16-bit rule's plan, but is not in the list: its 128x256 plan
    # is stream-K, and 192x192 measured +3.1% / +4.5% / +0.1% over that, bf16 TN / fp16 TN / bf16 NN)
    warm = {c.spec for c in gc.lowp_configs()}
    for shape, block_n in (((1536, 768, 65536), 192), ((1536, 3072, 8192), 192), ((1536, 1536, 16384), 192),
                           ((1536, 1024, 65536), 128)):
        cfg = _auto(*shape, kinds=kinds, out_name=out_name)
        assert (cfg.block_m, cfg.block_n, cfg.cluster) == (192, block_n, (1, 1)), shape
        if gc.OUT_TYPES[out_name] == gc.DEFAULT_OUT[kinds[0]]:
            assert cfg.spec in warm, shape                  # (warm-up builds the default output type)
    for shape in ((4096, 4096, 4096), (2304, 2304, 8192), (4096, 7168, 16384), (8192, 8192, 8192),
                  (4096, 14336, 4096)):
        assert _auto(*shape, kinds=kinds, out_name=out_name).block_m == 128, shape
    assert _auto(1536, 768, 65536, kinds=(gc.E4M3, gc.E4M3), block=True).block_m == 128


def test_no_tall_where_not_measured_or_forced():
    shape = (1536, 768, 65536)
    assert gc.plan_config(*shape, 2, 132, kinds=(gc.BF16, gc.BF16), kmajor=(True, True), out_name="bfloat16",
                          use_c=False, c_rowmajor=True, bias_kind=0, activation=None, block=False).block_m == 128
    for kw in (dict(block_n=256), dict(splits=4), dict(cluster=1), dict(pingpong=False), dict(streamk=False),
               dict(swap=False)):
        assert _auto(*shape, **kw).block_m == 128, kw


def test_plan_tall_launch(planning):
    """rawcoop.gemm's plan for 1536x768x65536 TN: 192x192 tiles, 512 threads,
    A's box 192 rows, 4 splits in one round (spread), three workspace slots
    per tile."""
    a, b = tn(1536, 768, 65536, BF16)
    plan = build(a, b)
    assert plan.cfg.block_m == 192 and plan.threads == 512
    assert planning.maps[0].box == (64, 192, 1) and planning.maps[1].box == (64, 192, 1)
    dec = plan.decomposition
    assert plan.scalars[4:6] == (8, 4) and dec.splits == 4 and plan.grid == (128, 1, 1)
    assert plan.ws_flags == 3 * 32 and plan.ws_floats == 3 * 32 * 64 * 192 * 4


@pytest.mark.parametrize("kinds, out_name, shape, want", [
    ((gc.BF16, gc.BF16), "bfloat16", (2304, 4224, 16384), (192, 192)),     # +5.7% over 128x256
    ((gc.BF16, gc.BF16), "bfloat16", (6528, 6912, 3072), (128, 128)),      # +5.7% over 192x192
    ((gc.BF16, gc.BF16), "bfloat16", (5376, 3840, 2048), (128, 128)),      # +6.7%
    ((gc.FP16, gc.FP16), "float16", (6528, 6912, 2048), (128, 128)),       # +3.3%
    ((gc.E4M3, gc.E4M3), "bfloat16", (3072, 3072, 3072), (192, 192)),      # +15%
    ((gc.E4M3, gc.E4M3), "bfloat16", (4480, 1920, 8192), (192, 192)),      # +12%
    ((gc.E4M3, gc.E4M3), "bfloat16", (1664, 2304, 4096), (128, 128)),      # +17.5% over 192x128
    ((gc.E4M3, gc.E4M3), "bfloat16", (3968, 3456, 4096), (192, 192)),      # +7%
    ((gc.TF32, gc.TF32), "float32", (3072, 3456, 4096), (192, 192)),       # tf32: no term (-11% with it)
], ids=str)
def test_split_tail_term_choices(kinds, out_name, shape, want, monkeypatch):
    """choose_tall's model charges a last wave split 3+ ways (SPLIT_TAIL_OVERHEAD,
    not for tf32): the choices the H200 measured faster; without the term
    each of the 16-bit/fp8 ones was the other tile.  fp8 against the plans
    they were measured on (the low-precision ping-pong rules off; see
    test_fp8_pingpong_over_split_tail_choices)."""
    if gc.is_fp8(kinds[0]):
        without_lowp_pingpong_rules(monkeypatch)
    # choose_tall judged 128x128 plans: the nearly-full-wave band (78%, fp8 K >= 1536)
    # makes e4m3 1664x2304x4096 (117 tiles of 128x256) 128x256 before choose_tall sees it.
    monkeypatch.setattr(gc, "WIDE_TILES_FILL", 0.9)
    # ... and chose between 128x256 and the tall tiles only (choose_width_192 runs 2304x4224x16384
    # on 128x192: 396 tiles, three whole waves; tests/cpu/test_width192_cpu.py)
    monkeypatch.setattr(gc, "WIDTH_192_RATIO", 0.0)
    cfg = _auto(*shape, kinds=kinds, out_name=out_name)
    assert (cfg.block_m, cfg.block_n) == want
    if kinds[0] != gc.TF32:
        # the term alone: the cap on 192x192 over ping-pong choices (TALL_OVER_PINGPONG_MAX_WAVES)
        # would also keep 6528x6912x3072 at 128x128
        monkeypatch.setattr(gc, "TALL_OVER_PINGPONG_MAX_WAVES", 10 ** 9)
        old = gc.SPLIT_TAIL_OVERHEAD
        try:
            gc.SPLIT_TAIL_OVERHEAD = 0.0
            assert (_auto(*shape, kinds=kinds, out_name=out_name).block_m, ) != (want[0], )
        finally:
            gc.SPLIT_TAIL_OVERHEAD = old


@pytest.mark.parametrize("shape, want", [
    ((4480, 1920, 8192), (128, 128)),      # ping-pong / 192x192: 1.054 (both automatic plans measured)
    ((3968, 3456, 4096), (128, 128)),      # 0.999
    ((3072, 3072, 3072), (192, 192)),      # choose_tall over the ping-pong 128x128 choice too
], ids=str)
def test_fp8_pingpong_over_split_tail_choices(shape, want):
    """fp8's many-waves ping-pong rule (PINGPONG_WAVES_K_BLOCKS) takes two of
    the split-tail term's 192x192 choices (test_split_tail_term_choices)."""
    cfg = _auto(*shape, kinds=(gc.E4M3, gc.E4M3), out_name="bfloat16")
    assert (cfg.block_m, cfg.block_n) == want and cfg.pingpong == (want == (128, 128))


@pytest.mark.parametrize("kinds, out_name, shape, want", [
    ((gc.BF16, gc.BF16), "bfloat16", (3072, 3072, 3072), (192, 192)),      # 1.94 waves of 192x192: +5.5%
    ((gc.E4M3, gc.E4M3), "bfloat16", (3072, 3072, 4096), (192, 192)),      # +4.6%
    ((gc.BF16, gc.BF16), "bfloat16", (3712, 4992, 2048), (128, 128)),      # 3.9 waves: ping-pong +5.4%
    ((gc.FP16, gc.FP16), "float16", (11584, 6912, 512), (128, 128)),       # +17.6%
    ((gc.TF32, gc.TF32), "float32", (6336, 12736, 1024), (128, 128)),      # +12.6%
    ((gc.E4M3, gc.E4M3), "bfloat16", (12032, 7488, 1024), (128, 128)),     # +18.1%
], ids=str)
def test_tall_192_over_pingpong_only_in_two_waves(kinds, out_name, shape, want, monkeypatch):
    """choose_tall takes 192x192 over a ping-pong 128x128 choice only when
    the 192x192 grid fills at most TALL_OVER_PINGPONG_MAX_WAVES (2) waves
    (both automatic plans measured); without the cap every one of these is 192x192."""
    cfg = _auto(*shape, kinds=kinds, out_name=out_name)
    assert (cfg.block_m, cfg.block_n) == want and cfg.pingpong == (want == (128, 128))
    monkeypatch.setattr(gc, "TALL_OVER_PINGPONG_MAX_WAVES", 10 ** 9)
    uncapped = _auto(*shape, kinds=kinds, out_name=out_name)
    assert (uncapped.block_m, uncapped.block_n) == (192, 192)


@pytest.mark.parametrize("kinds, out_name, shape, want", [
    ((gc.BF16, gc.BF16), "bfloat16", (3328, 2304, 1024), (128, 128)),      # 16 k-blocks: ping-pong +20.7%
    ((gc.BF16, gc.BF16), "bfloat16", (8576, 1792, 512), (128, 128)),       # 8 k-blocks: +10.7%
    ((gc.TF32, gc.TF32), "float32", (5568, 1344, 512), (128, 128)),        # 16 k-blocks: +20.1%
    ((gc.E4M3, gc.E4M3), "bfloat16", (6336, 5120, 1024), (128, 128)),      # 8 k-blocks: +5.5%
    ((gc.BF16, gc.BF16), "bfloat16", (2112, 5184, 3072), (192, 128)),      # 48 k-blocks: 192x128 +6.7%
    ((gc.BF16, gc.BF16), "bfloat16", (960, 6656, 2048), (192, 128)),       # 1.97 waves of 192x128: +26%
], ids=str)
def test_tall_128_over_pingpong_needs_k_blocks(kinds, out_name, shape, want, monkeypatch):
    """Beyond two waves choose_tall takes 192x128 over a ping-pong 128x128
    choice only with K >= TALL_128_OVER_PINGPONG_MIN_K_BLOCKS (32) k-blocks
    (both automatic plans measured); without the floor every one is 192x128."""
    cfg = _auto(*shape, kinds=kinds, out_name=out_name)
    assert (cfg.block_m, cfg.block_n) == want and cfg.pingpong == (want == (128, 128))
    monkeypatch.setattr(gc, "TALL_128_OVER_PINGPONG_MIN_K_BLOCKS", 0)
    floorless = _auto(*shape, kinds=kinds, out_name=out_name)
    assert (floorless.block_m, floorless.block_n) == (192, 128)


@pytest.mark.parametrize("kind, layout, shape, tall, want", [
    (gc.FP16, "TT", (1344, 1008, 1760), (192, 192), (128, 128)),   # 42 tiles x 3 splits of 9.3: oracle +30%
    (gc.BF16, "TT", (1880, 672, 2336), (192, 192), (128, 128)),    # 3 of 12.3 (+15.7%)
    (gc.FP16, "TT", (2896, 328, 2240), (192, 192), (128, 128)),    # 4 of 8.8 (+14.5%)
    (gc.FP16, "NN", (1832, 648, 1920), (192, 192), (128, 128)),    # 3 of 10 (+5.9%)
    (gc.BF16, "NN", (640, 1928, 2592), (192, 192), (128, 256)),    # 3 of 13.7 (+4.0%)
    (gc.FP16, "NN", (560, 3376, 5976), (192, 192), (192, 192)),    # 2 of 47: stays
], ids=str)
def test_tall_split_min_k_blocks(kind, layout, shape, tall, want, monkeypatch):
    """TALL_SPLIT_MIN_K_BLOCKS (21: 11 of 16 random shapes faster, +3.9%): no 192-row tile whose
    every tile splits into splits of fewer than 21 k-blocks; 0 gives back the tall plan."""
    name = "float16" if kind == gc.FP16 else "bfloat16"
    cfg = _auto(*shape, kinds=(kind, kind), kmajor=gc.LAYOUTS[layout], out_name=name)
    assert (cfg.block_m, cfg.block_n) == want and cfg.cluster == (1, 1) and not cfg.d_colmajor, cfg
    if want == (128, 128):
        dec = scheduler.decompose(gc.tile_count(*shape[:2], 128, 1), scheduler.cdiv(shape[2], 64), 132)
        assert dec.splits == 1 and not cfg.stream_k          # data-parallel: one round of whole-K tiles
    monkeypatch.setattr(gc, "TALL_SPLIT_MIN_K_BLOCKS", 0)
    old = _auto(*shape, kinds=(kind, kind), kmajor=gc.LAYOUTS[layout], out_name=name)
    assert (old.block_m, old.block_n) == tall


def test_tall_split_floor_is_16_bit_only():
    """TALL_SPLIT_MIN_K_BLOCKS was measured on fp16 / bf16: e4m3 and tf32 1536x1536x4096 keep their
    192x192 (2 splits of 16 and 32 k-blocks; test_tall_gpu.test_auto_tall_tiles_tf32_fp8)."""
    for kinds, out_name in (((gc.E4M3, gc.E4M3), "bfloat16"), ((gc.TF32, gc.TF32), "float32")):
        cfg = _auto(1536, 1536, 4096, kinds=kinds, out_name=out_name)
        assert (cfg.block_m, cfg.block_n) == (192, 192), cfg
