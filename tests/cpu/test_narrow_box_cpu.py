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
from helpers.plan import gc as gc
from rawcoop.plan import scheduler

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
    plan = build(a, b, c=c, beta=1.0, out_dtype=out_name, _block_n=block_n, _swap=False)
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


