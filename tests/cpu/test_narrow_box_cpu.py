"""CPU: tiles between the multiples of 64 columns (configs.NARROW_BOX_NS: 128x144 ... 128x240,
16-bit inputs, K-major B, row-major D; kernels/gemm.cu "Narrow boxes").  Every width compiles for both
16-bit types, both A majornesses and every output type with 0 spills and its own wgmma shape; where the
width is not a multiple of the output chunk the epilogue stores (and loads row-major C) in 32-byte-wide
boxes, one TMA store site per box; the host encodes those boxes (32B swizzle) for C and D and refuses
what the kernel does not build (N-major B, swap-AB, tf32/fp8, 192-row tiles, block scales) with a
ValueError before anything is compiled or launched."""
from dataclasses import replace

import pytest

from rawcoop import compiler, tma
from rawcoop.plan import configs as gc, scheduler

from helpers.stub import BF16, StubArray, build, stub_planning, tn

STORE = "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"
LOAD = "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes ["


def _compile(cfg):
    return compiler.compile_spec(cfg.spec, want_ptx=True)


@pytest.mark.parametrize("block_n", gc.NARROW_BOX_NS)
@pytest.mark.parametrize("kind, a_kmajor", [(gc.BF16, True), (gc.FP16, False)], ids=["bf16-TN", "fp16-NN"])
def test_narrow_widths_compile(block_n, kind, a_kmajor):
    """The plain kernel: its wgmma m64n<W>, no spills, and one TMA store site per narrow box (the chunk
    loop is unrolled): W / 16 boxes of 16 columns, or W / 64 whole chunks where W is a multiple of 64."""
    cfg = gc.GemmConfig(block_n, kind, a_kmajor, True)
    res = _compile(cfg)
    t = "bf16" if kind == gc.BF16 else "f16"
    assert f"wgmma.mma_async.sync.aligned.m64n{block_n}k16.f32.{t}.{t}" in res.ptx
    assert "0 bytes spill stores" in res.log and "0 bytes spill loads" in res.log
    assert cfg.narrow_box and cfg.box_cols == 16
    assert res.ptx.count(STORE) == block_n // 16


@pytest.mark.parametrize("block_n, out_type, boxes", [(176, 2, 22), (160, 2, 5), (224, 2, 7), (144, 0, 9)])
def test_narrow_box_epilogue_variants(block_n, out_type, boxes):
    """fp32 output: chunks of 32 columns, so 160 and 224 store whole chunks (5 and 7) while 176 stores
    22 boxes of 8 columns; with a row-major C the loader has one load site for the narrow boxes
    beside the mainloop's; a column-major C keeps whole-chunk boxes (its lines are columns)."""
    base = gc.GemmConfig(block_n, gc.BF16, True, True, out_type, True, False, False, 1, False, 2)
    res = _compile(base)
    assert base.narrow_box == (boxes != block_n // base.epi_cols)
    assert res.ptx.count(STORE) == boxes
    assert "0 bytes spill stores" in res.log
    col = _compile(replace(base, c_colmajor=True, act=3, bias=2))
    assert col.ptx.count(STORE) == boxes and "0 bytes spill stores" in col.log


@pytest.mark.parametrize("kw", [dict(cluster_m=2), dict(stream_k=True), dict(stages=3)], ids=str)
def test_narrow_box_schedules_compile(kw):
    """2x1 clusters (each CTA multicasts half of B's 176 K-major rows: 88, 1024-byte aligned), stream-K
    and a short ring."""
    cfg = gc.GemmConfig(176, gc.BF16, True, True, **kw)
    res = _compile(cfg)
    assert "0 bytes spill stores" in res.log and "wgmma.mma_async.sync.aligned.m64n176k16" in res.ptx


@pytest.mark.parametrize("kw, what", [
    (dict(block_n=100), "block_n must be one of"),
    (dict(block_n=176, b_kmajor=False), "K-major kernel B"),
    (dict(block_n=176, d_colmajor=True), "row-major kernel D"),
    (dict(block_n=176, in_kind=gc.TF32), "16-bit inputs"),
    (dict(block_n=176, in_kind=gc.E4M3), "16-bit inputs"),
    (dict(block_n=176, block_m=gc.TALL_BLOCK_M), "128-row tiles"),
])
def test_config_refuses_unbuilt_widths(kw, what):
    args = dict(block_n=128, in_kind=gc.BF16, a_kmajor=True, b_kmajor=True)
    args.update(kw)
    with pytest.raises(ValueError, match=what):
        gc.GemmConfig(**args)


@pytest.fixture
def planning(monkeypatch):
    return stub_planning(monkeypatch).maps


@pytest.mark.parametrize("out_name, block_n, box, swizzle", [
    ("bfloat16", 176, (16, 64, 1), tma.Swizzle.B32), ("float32", 176, (8, 64, 1), tma.Swizzle.B32),
    ("float32", 160, (32, 64, 1), tma.Swizzle.B128), ("bfloat16", 256, (64, 64, 1), tma.Swizzle.B128)])
def test_epilogue_maps(planning, out_name, block_n, box, swizzle):
    """Forced ``_block_n``: row-major C and D maps have the kernel's box (32-byte lines, 32B swizzle, with
    narrow boxes); the tile counts follow the width."""
    m, n, k = 1000, 1904, 512
    a, b = tn(m, n, k, BF16)
    c = StubArray((m, n), BF16 if out_name == "bfloat16" else out_name)
    plan = build(a, b, c=c, beta=1.0, out_dtype=out_name, _block_n=block_n)
    assert plan.cfg.block_n == block_n and not plan.cfg.d_colmajor
    map_c = planning[2]
    assert map_c.address == c.data.ptr and map_c.box == box and map_c.swizzle == swizzle
    map_d = plan.epilogue_map(c.data.ptr, False, n * c.dtype.itemsize, m * n * c.dtype.itemsize, 1)
    assert map_d.box == box and map_d.swizzle == swizzle and map_d.dims == (n, m, 1)
    assert plan.scalars[5] == scheduler.cdiv(n, block_n)            # tiles_n


def test_column_major_c_keeps_whole_chunk_boxes(planning):
    """A column-major C with a narrow-box tile: the kernel reads it as whole 64-line chunks."""
    m, n, k = 1000, 1904, 512
    a, b = tn(m, n, k, BF16)
    c = StubArray((n, m), BF16).T
    plan = build(a, b, c=c, beta=1.0, _block_n=176)
    assert plan.cfg.c_colmajor and planning[2].box == (64, 64, 1)


def test_forced_narrow_widths_refused_before_launch(planning):
    """N-major b (the kernel's B would need 64-column atoms), swap-AB and tf32 inputs: ValueError naming
    the rule, before anything is compiled."""
    m, n, k = 1000, 1904, 512
    a, b = tn(m, n, k, BF16)
    with pytest.raises(ValueError, match="K-major kernel B"):
        build(a, StubArray((k, n), BF16), _block_n=176)
    with pytest.raises(ValueError, match="row-major kernel D"):
        build(a, b, _block_n=176, _swap=True)
    with pytest.raises(ValueError, match="block_n must be one of"):
        build(a, b, _block_n=100)
    af, bf = tn(m, n, k, "float32")
    with pytest.raises(ValueError):
        build(af, bf, _block_n=176, precision="tf32")


def _plan(m, n, k, kind=gc.BF16, kmajor=(True, True), **kw):
    return gc.plan_config(m, n, k, 1, 132, kinds=(kind, kind), kmajor=kmajor, out_name="bfloat16", use_c=False,
                          c_rowmajor=True, bias_kind=0, activation=None, block=False, **kw)


@pytest.mark.parametrize("m, n, k, width", [(1024, 3584, 18944, 224), (1024, 3584, 3584, 224),
                                            (8288, 688, 3008, 176), (2048, 3584, 4096, 224)])
@pytest.mark.parametrize("kind, a_kmajor", [(gc.BF16, True), (gc.FP16, False)], ids=["bf16-TN", "fp16-NN"])
def test_choose_narrow_width(m, n, k, width, kind, a_kmajor):
    """choose_narrow_width on the shapes of the oracle where the model and the measurement agree
    (+9% to +16% over 128x256): K-major B takes the width, N-major B, a zero NARROW_WIDTH_RATIO and K
    under NARROW_MIN_K keep the old plan."""
    cfg = _plan(m, n, k, kind, (a_kmajor, True))
    assert (cfg.block_m, cfg.block_n, cfg.cluster) == (128, width, (1, 1)) and not cfg.d_colmajor, cfg
    assert cfg == _plan(m, n, k, kind, (a_kmajor, True), block_n=width)          # the forced kernel
    assert _plan(m, n, k, kind, (a_kmajor, False)).block_n not in gc.NARROW_BOX_NS


def test_narrow_width_switches(monkeypatch):
    m, n, k = 1024, 3584, 3584
    assert _plan(m, n, k).block_n == 224
    monkeypatch.setattr(gc, "NARROW_WIDTH_RATIO", 0.0)
    assert _plan(m, n, k).block_n == 256
    monkeypatch.setattr(gc, "NARROW_WIDTH_RATIO", 0.95)
    monkeypatch.setattr(gc, "NARROW_MIN_K", 4096)
    assert _plan(m, n, k).block_n == 256


def test_narrow_pad_slack_and_over_tall_switches(monkeypatch):
    """NARROW_PAD_SLACK (off: 0.05 measured -0.4%) lets a width that pads N more than 256-wide
    columns compete (2736x1280x8816: 6 x 224 = 1344 fills one wave of 132 tiles, the oracle's +11%);
    NARROW_OVER_TALL_RATIO (0.85) weighs the widths against a 192x128 choice
    (NARROW_OVER_TALL_NS; 432x4712x3856: the oracle's +47%), and with 192 in NARROW_OVER_TALL_NS against
    192x192 too (1400x880x4800 at 0.9: 192x192 split-K -> 128x224, the oracle's +14.5%)."""
    assert gc.NARROW_PAD_SLACK == 0
    assert _plan(2736, 1280, 8816).block_n == 256
    monkeypatch.setattr(gc, "NARROW_PAD_SLACK", 0.05)
    assert _plan(2736, 1280, 8816).block_n == 224
    assert gc.NARROW_OVER_TALL_RATIO == 0.85 and gc.NARROW_OVER_TALL_NS == (128,)
    cfg = _plan(432, 4712, 3856)
    assert (cfg.block_m, cfg.block_n, cfg.cluster) == (128, 160, (1, 1)), cfg
    cfg = _plan(1400, 880, 4800)
    assert (cfg.block_m, cfg.block_n) == (192, 192), cfg
    monkeypatch.setattr(gc, "NARROW_OVER_TALL_RATIO", 0.9)
    monkeypatch.setattr(gc, "NARROW_OVER_TALL_NS", (128, 192))
    cfg = _plan(1400, 880, 4800)
    assert (cfg.block_m, cfg.block_n, cfg.cluster) == (128, 224, (1, 1)), cfg
    monkeypatch.setattr(gc, "NARROW_OVER_TALL_RATIO", 0.0)
    cfg = _plan(432, 4712, 3856)
    assert (cfg.block_m, cfg.block_n) == (192, 128), cfg


def test_bench_shapes_keep_their_plans():
    """No shape of the bench's main suite takes a narrow width (their N are multiples of 256 that every
    narrow width pads more, or the model has them no shorter)."""
    from bench.options import DEFAULT_SHAPES
    shapes = [tuple(map(int, s.split("x"))) for s in DEFAULT_SHAPES]
    assert len(shapes) == 8
    for m, n, k in shapes:
        for kind in (gc.BF16, gc.FP16):
            for kmajor in ((True, True), (False, True), (True, False), (False, False)):
                assert _plan(m, n, k, kind, kmajor).block_n not in gc.NARROW_BOX_NS, (m, n, k)


def test_warmup_set_has_the_narrow_kernels():
    specs = {c.spec for c in gc.all_configs()}
    for bn in gc.NARROW_BOX_NS:
        for kind in (gc.BF16, gc.FP16):
            for ak in (True, False):
                assert gc.GemmConfig(bn, kind, ak, True).spec in specs
                assert gc.GemmConfig(bn, kind, ak, True, stream_k=True).spec in specs


@pytest.mark.parametrize("m, n, k, kmajor, width", [
    (2008, 416, 7040, (False, True), 208),      # +52% over 128x128 split-K
    (4176, 400, 4488, (True, True), 208),       # +38%
    (936, 2016, 11200, (False, True), 256),     # 128x256 split-K, +25%
    (968, 800, 10080, (False, True), 208),      # the fp16 NN oracle's +43% (in sample)
])
def test_narrow_over_128(m, n, k, kmajor, width, monkeypatch):
    """NARROW_OVER_128_RATIO (21 of 24 random shapes faster, +12%): a long-K cooperative 128x128
    choice gives way to a narrow width, 128x192 or 128x256 (their own split-K / stream-K) where the model
    has it >= 5% shorter; K under NARROW_OVER_128_MIN_K, N-major B and the switch at 0 keep 128x128."""
    for kind in (gc.BF16, gc.FP16):
        cfg = _plan(m, n, k, kind, kmajor)
        assert (cfg.block_m, cfg.block_n, cfg.cluster, cfg.pingpong) == (128, width, (1, 1), False), cfg
        assert cfg == _plan(m, n, k, kind, kmajor, block_n=width)      # the forced kernel
        assert _plan(m, n, k, kind, (kmajor[0], False)).block_n not in gc.NARROW_BOX_NS
    monkeypatch.setattr(gc, "NARROW_OVER_128_RATIO", 0.0)
    cfg = _plan(m, n, k, gc.BF16, kmajor)
    assert (cfg.block_m, cfg.block_n) == (128, 128), cfg
    monkeypatch.setattr(gc, "NARROW_OVER_128_RATIO", 0.95)
    monkeypatch.setattr(gc, "NARROW_OVER_128_MIN_K", k + 8)
    assert _plan(m, n, k, gc.BF16, kmajor).block_n == 128


def test_narrow_over_128_leaves_ping_pong_and_short_k():
    """Ping-pong 128x128 (many waves) and K < NARROW_OVER_128_MIN_K are not this rule's."""
    assert _plan(4096, 14336, 4096).pingpong                      # the bench's ping-pong shape
    cfg = _plan(1152, 472, 1000)                                  # the oracle's: 128x128 split 2, K 1000
    assert (cfg.block_m, cfg.block_n) == (128, 128), cfg


@pytest.mark.parametrize("m, n, k, width", [(3072, 528, 9216, 176), (5816, 432, 7744, 224),
                                            (2856, 576, 11568, 192)])
def test_narrow_over_128_stream_k(m, n, k, width, monkeypatch):
    """NARROW_OVER_128_STREAM_K with NARROW_OVER_128_EFFICIENCY 0.8 (13 of 16 faster,
    +6.25%): a width's stream-K plan where its tiles are fewer than the SMs competes too (3072x528x9216:
    one round of 120 128x128 tiles -> 72 128x176 tiles stream-K, the oracle's +25%); off, 128x128 stays."""
    cfg = _plan(m, n, k)
    assert (cfg.block_m, cfg.block_n, cfg.cluster, cfg.stream_k) == (128, width, (1, 1), True), cfg
    assert cfg == _plan(m, n, k, block_n=width, streamk=True)      # the forced kernel
    monkeypatch.setattr(gc, "NARROW_OVER_128_STREAM_K", False)
    monkeypatch.setattr(gc, "NARROW_OVER_128_EFFICIENCY", 0.92)
    assert _plan(m, n, k).block_n == 128


def test_narrow_over_tall_split_and_mn_major_b_switches(monkeypatch):
    """NARROW_OVER_TALL_192_SPLIT (off: 9 of 16 ran faster, mixed) weighs the widths against a 192x192
    choice with fewer tiles than SMs (3696x304x1680: 192x192 split 3 -> 128x160, measured +21%);
    NARROW_OVER_128_MN_MAJOR_B (on: 14 of 16 faster, +8.7%) weighs 128x192 / 128x256
    against a long-K 128x128 choice with an N-major B (fp16 NT 1992x912x5120: 128x256, the oracle's +22%)."""
    assert gc.NARROW_OVER_TALL_192_SPLIT is False and gc.NARROW_OVER_128_MN_MAJOR_B is True
    monkeypatch.setattr(gc, "TALL_SPLIT_MIN_K_BLOCKS", 0)     # (else 128x128: 9-k-block splits)
    cfg = _plan(3696, 304, 1680)
    assert (cfg.block_m, cfg.block_n) == (192, 192), cfg
    monkeypatch.setattr(gc, "NARROW_OVER_TALL_192_SPLIT", True)
    cfg = _plan(3696, 304, 1680)
    assert (cfg.block_m, cfg.block_n, cfg.cluster) == (128, 160, (1, 1)), cfg
    nt, tt = (False, False), (True, False)
    for m, n, k, kind, km, w in [(1992, 912, 5120, gc.FP16, nt, 256), (1064, 1512, 12968, gc.FP16, tt, 256),
                                 (272, 2456, 15032, gc.BF16, tt, 192)]:
        cfg = _plan(m, n, k, kind, km)
        assert (cfg.block_m, cfg.block_n, cfg.cluster, cfg.b_kmajor) == (128, w, (1, 1), False), cfg
    monkeypatch.setattr(gc, "NARROW_OVER_128_MN_MAJOR_B", False)
    assert _plan(1992, 912, 5120, gc.FP16, nt).block_n == 128


@pytest.mark.parametrize("m, n, k, kind, cluster", [
    (4752, 312, 1576, gc.FP16, (2, 1)),      # 38 tile rows
    (10424, 320, 1152, gc.BF16, (2, 1)),     # 82
    (5232, 376, 8280, gc.FP16, (1, 1)),      # 41: odd, no idle half-pairs
    (1440, 856, 680, gc.FP16, (1, 1)),       # M < CLUSTER_MN_MAJOR_A_MIN_M
])
def test_mn_major_a_pairs(m, n, k, kind, cluster, monkeypatch):
    """CLUSTER_MN_MAJOR_A_MIN_M (1536): an NN problem's cooperative 128x128 plan runs in 2x1 clusters
    over an even number of tile rows; TN keeps single CTAs; 0 turns the rule off."""
    nn, tn = gc.LAYOUTS["NN"], gc.LAYOUTS["TN"]
    cfg = _plan(m, n, k, kind, nn)
    assert (cfg.block_m, cfg.block_n, cfg.cluster, cfg.pingpong, cfg.stream_k) == (128, 128, cluster, False,
                                                                                  False), cfg
    assert _plan(m, n, k, kind, tn).cluster == (1, 1)
    if m >= gc.CLUSTER_MN_MAJOR_A_MIN_M:     # CLUSTER_MN_MAJOR_A_ODD_MIN_ROWS (measured mixed, off): odd rows from 19
        assert gc.CLUSTER_MN_MAJOR_A_ODD_MIN_ROWS == 0
        monkeypatch.setattr(gc, "CLUSTER_MN_MAJOR_A_ODD_MIN_ROWS", 19)
        assert _plan(m, n, k, kind, nn).cluster == (2, 1)
    monkeypatch.setattr(gc, "CLUSTER_MN_MAJOR_A_MIN_M", 0)
    assert _plan(m, n, k, kind, nn).cluster == (1, 1)
