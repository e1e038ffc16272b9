"""CPU: the host side of block-scaled fp8 (``scale_mode="block"``), without a GPU.

Reuses the stub CuPy of tests/helpers/stub.py (``StubArray``), its ``build`` (gemm's
_build_plan) and ``stub_planning`` (device info, kernel lookup and tensor-map
encoding recorded): the scale contract (shapes, dtypes, devices, SA's
M-major layout and TMA rules, SB's strides), the errors raised before any
launch, and the plan (configuration, SA's tensor map, SB's pointer and
strides, tiles, no swap-AB, split-K, clusters, batches, plan keys, tuning
candidates).
"""
import pytest

from helpers.plan import gc as gc
from rawcoop import tma

from helpers.stub import BF16, E4M3, E5M2, G, StubArray, build, stub_planning, tn



def sa_mn(m, kb, batch=None, dev=0, mp=None):
    """SA as the kernel wants it: (M, KB) M-major, k-block pitch padded to 16 bytes (M -> multiple of 4)."""
    mp = mp if mp is not None else max(4, -(-m // 4) * 4)
    if batch:
        return StubArray((batch, m, kb), "float32", strides=(kb * mp * 4, 4, mp * 4), dev=dev)
    return StubArray((m, kb), "float32", strides=(4, mp * 4), dev=dev)


def sb_rm(nb, kb, batch=None, dev=0):
    """SB in its natural layout: (NB, KB) row-major (any strides are accepted)."""
    return StubArray(((batch,) if batch else ()) + (nb, kb), "float32", dev=dev)


def scales(m, n, k, batch_a=None, batch_b=None):
    kb = -(-k // 128)
    return sa_mn(m, kb, batch_a), sb_rm(-(-n // 128), kb, batch_b)


@pytest.fixture
def rec(monkeypatch):
    return stub_planning(monkeypatch)


# ---------------------------------------------------------------- the plan
def test_block_plan(rec):
    m, n, k = 1000, 3000, 4096 + 64                            # ragged K: 33 k-blocks, the last one half full
    a, b = tn(m, n, k, E4M3)
    sa, sb = scales(m, n, k)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", alpha=0.5)
    cfg = plan.cfg
    assert cfg.block_scaled and cfg.scale_mode == 1 and dict(cfg.spec.defines)["SCALE_MODE"] == 1
    assert (cfg.in_kind, cfg.b_kind, cfg.block_k, cfg.out_type) == (3, 3, 128, 1)
    assert cfg.block_n == 128 and not cfg.pingpong and not cfg.d_colmajor
    assert cfg.stages == gc.max_stages(128, False, 1) == 5 and cfg.smem_bytes <= gc.SMEM_LIMIT
    map_a, map_b, map_sa = rec.maps
    assert map_a.dtype == map_b.dtype == tma.DType.UINT8
    assert map_sa.dtype == tma.DType.FLOAT32 and map_sa.address == sa.data.ptr
    assert map_sa.dims == (m, 33, 1) and map_sa.box == (128, 1, 1) and map_sa.swizzle == tma.Swizzle.NONE
    assert map_sa.strides == (1000 * 4, 1000 * 4 * 33)          # M-major: k-block lines of M floats
    assert plan.types == G._TYPES_BLOCK and len(plan.types) == len(G._TYPES) + 5
    assert plan.extra[0] is map_sa and plan.extra[1:] == (sb.data.ptr, 33, 1, 0)
    assert plan.scalars[8] == 0.5                              # alpha as given: nothing folded
    assert plan.decomposition.k_blocks == 33
    assert plan.signature.split("|")[1] == "e4m3+block128->bfloat16"
    assert not plan.swap_ok


def test_block_never_uses_256_wide_tiles_or_pingpong_128(rec):
    a, b = tn(8192, 8192, 4096, E4M3)
    sa, sb = scales(8192, 8192, 4096)
    cfg = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block").cfg
    assert (cfg.block_n, cfg.pingpong) == (128, False)
    a, b = tn(8192, 8192, 16384, E4M3)
    sa, sb = scales(8192, 8192, 16384)
    assert gc.config_for_problem(8192, 8192, 16384, gc.E4M3, True, True).block_n == 256
    assert build(a, b, scale_a=sa, scale_b=sb, scale_mode="block").cfg.block_n == 128


def test_block_narrow_n_and_forced_tiles(rec):
    a, b = tn(3000, 48, 1024, E4M3, E5M2)
    sa, sb = scales(3000, 48, 1024)
    cfg = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block").cfg
    assert (cfg.block_n, cfg.pingpong, cfg.in_kind, cfg.b_kind) == (64, False, 3, 4)
    a, b = tn(1000, 1000, 1024, E4M3)
    sa, sb = scales(1000, 1000, 1024)
    cfg = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _block_n=64, _pingpong=True).cfg
    assert (cfg.block_n, cfg.pingpong) == (64, True)
    with pytest.raises(ValueError, match=r"block-scaled fp8 needs a 128x128 cooperative or 128x64 tile"):
        build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _block_n=256)
    with pytest.raises(ValueError, match="block-scaled fp8 needs a 128x128 cooperative or 128x64 tile"):
        build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _pingpong=True, _block_n=128)
    assert build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _pingpong=True).cfg.block_n == 64
    # stream-K: cooperative block-scaled kernels only (ping-pong stream-K is not built block-scaled)
    assert build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _streamk=True).cfg.stream_k
    with pytest.raises(ValueError, match="ping-pong stream-K is not built block-scaled"):
        build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _block_n=64, _pingpong=True, _streamk=True)


def test_block_small_m_is_not_swapped(rec):
    m, n, k = 16, 4096, 2048
    a, b = tn(m, n, k, E4M3)
    sa, sb = scales(m, n, k)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block")
    assert not plan.cfg.d_colmajor and plan.cfg.block_n in (64, 128)
    assert rec.maps[0].address == a.data.ptr and rec.maps[2].dims == (16, 16, 1)
    with pytest.raises(ValueError, match="block-scaled fp8 has no swap-AB kernel"):
        build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _swap=True)
    assert not build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _swap=False).cfg.d_colmajor


def test_block_split_k_and_clusters(rec):
    m, n, k = 1024, 1024, 8192
    a, b = tn(m, n, k, E4M3)
    sa, sb = scales(m, n, k)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _splits=3)
    assert plan.decomposition.splits == 3 and plan.cfg.block_scaled and plan.ws_flags > 0
    for cl, (cm, cn) in ((2, (2, 1)), ((1, 2), (1, 2))):
        rec.maps.clear()
        cfg = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _cluster=cl).cfg
        assert cfg.cluster == (cm, cn) and cfg.block_scaled
        map_a, map_b, map_sa = rec.maps
        assert map_a.box == (128, 128 // cn, 1) and map_b.box == (128, 128 // cm, 1)
        assert map_sa.box == (128, 1, 1)                       # SA is never multicast: each CTA loads its own
    with pytest.raises(ValueError, match=r"2x1 cluster \(B multicast\)"):
        build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _cluster=2, _block_n=64)


def test_block_batched_scales_follow_their_operands(rec):
    L, m, n, k = 3, 300, 520, 384
    a, b = tn(m, n, k, E4M3, batch=L)
    sa, sb = scales(m, n, k, batch_a=L, batch_b=L)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block")
    map_sa = rec.maps[2]
    assert map_sa.dims == (300, 3, 3) and map_sa.strides == (300 * 4, 3 * 300 * 4)
    assert plan.extra[2:] == (3, 1, 5 * 3)                     # SB strides in floats: n-block, k-block, batch
    rec.maps.clear()
    a3 = StubArray((L, m, k), E4M3)
    bt = StubArray((n, k), E4M3)
    b2 = StubArray((k, n), E4M3, strides=(1, k), ptr=bt.data.ptr)     # b shared by the batch: SB 2-D
    sa, sb = scales(m, n, k, batch_a=L)
    plan = build(a3, b2, scale_a=sa, scale_b=sb, scale_mode="block")
    assert rec.maps[2].dims == (300, 3, 3) and plan.extra[4] == 0
    with pytest.raises(ValueError, match=r"scale_b has shape \(3, 5, 3\); scale_mode='block' needs \(5, 3\)"):
        build(a3, b2, scale_a=sa, scale_b=sb_rm(5, 3, batch=3), scale_mode="block")


def test_block_single_k_block_accepts_either_layout(rec):
    a, b = tn(200, 256, 128, E4M3)
    sa = StubArray((200, 1), "float32")                       # row-major (M, 1): M is contiguous too
    build(a, b, scale_a=sa, scale_b=sb_rm(2, 1), scale_mode="block")
    assert rec.maps[2].dims == (200, 1, 1) and rec.maps[2].strides == (800, 800)


def test_block_scales_checked_even_for_empty_problems(rec):
    a, b = tn(0, 256, 256, E4M3)                               # M = 0: no launch, but the scales are still checked
    with pytest.raises(ValueError, match=r"scale_a has shape \(0, 3\); scale_mode='block' needs \(0, 2\)"):
        build(a, b, scale_a=StubArray((0, 3), "float32"), scale_b=sb_rm(2, 2), scale_mode="block")
    assert rec.maps == []


# ---------------------------------------------------------------- errors before launch
def _bad(kw_sa=None, kw_sb=None, m=300, n=500, k=1008, **kw):     # 8 k-blocks, the last one partial
    a, b = tn(m, n, k, E4M3)
    sa, sb = scales(m, n, k)
    args = dict(scale_a=sa if kw_sa is None else kw_sa, scale_b=sb if kw_sb is None else kw_sb, scale_mode="block")
    args.update(kw)
    return build(a, b, **args)


@pytest.mark.parametrize("case, exc, fragment", [
    (dict(kw_sa=StubArray((300, 7), "float32", strides=(4, 1200))), ValueError,
     "scale_a has shape (300, 7); scale_mode='block' needs (300, 8) (one fp32 scale per row of a and 128-wide "
     "k-block: (M, ceil(K/128)), M-major)"),
    (dict(kw_sb=sb_rm(8, 4)), ValueError, "scale_b has shape (8, 4); scale_mode='block' needs (4, 8) (one fp32 "
     "scale per 128x128 block of b: (ceil(N/128), ceil(K/128)))"),
    (dict(kw_sb=sb_rm(3, 8)), ValueError, "scale_b has shape (3, 8); scale_mode='block' needs (4, 8)"),
    (dict(kw_sa=StubArray((300, 8), "float32")), ValueError,
     "scale_a must be M-major (unit stride along M"),
    (dict(kw_sa=StubArray((300, 8), "float32")), ValueError, "rawcoop.mn_major_scales(scale_a)"),
    (dict(kw_sa=StubArray((300, 8), "float32", strides=(4, 1204))), ValueError,
     "the stride between k-blocks is 1204 bytes; TMA needs a positive multiple of 16 bytes"),
    (dict(kw_sa=StubArray((300, 8), "float32", strides=(4, 400))), ValueError, "of at least 4*M = 1200"),
    (dict(kw_sa=StubArray((300, 8), "float64", strides=(8, 2400))), TypeError, "scale_a must be a float32 array"),
    (dict(kw_sb=StubArray((4, 8), "float16")), TypeError, "scale_b must be a float32 array"),
    (dict(kw_sa=sa_mn(300, 8, dev=1)), ValueError, "scale_a is on device 1, but a is on device 0"),
    (dict(kw_sa=2.0), TypeError, "scale_a must be a float32 GPU array of shape (300, 8) with scale_mode='block'"),
    (dict(kw_sb=StubArray((4, 8), "float32", strides=(-32, 4))), ValueError, "scale_b has a negative stride"),
    (dict(kw_sa=StubArray((300, 8), "float32", strides=(4, 1200), ptr=0x7000_0000_0008)), ValueError,
     "scale_a: base address 0x700000000008 is not 16-byte aligned"),
])
def test_block_scale_errors(case, exc, fragment):
    with pytest.raises(exc) as ei:
        _bad(**case)
    assert fragment in str(ei.value)


def test_block_scales_are_required():
    a, b = tn(256, 256, 256, E4M3)
    with pytest.raises(ValueError, match=r"scale_mode='block' needs scale_a: a float32 GPU array of shape \(256, 2\)"):
        build(a, b, scale_b=sb_rm(2, 2), scale_mode="block")
    with pytest.raises(ValueError, match=r"needs scale_b: a float32 GPU array of shape \(2, 2\)"):
        build(a, b, scale_a=sa_mn(256, 2), scale_mode="block")


def test_scale_mode_values():
    a, b = tn(256, 256, 256, E4M3)
    with pytest.raises(ValueError, match="scale_mode must be None, 'tensor'"):
        build(a, b, scale_mode="blockwise")
    with pytest.raises(ValueError, match="scale_mode must be None, 'tensor'"):
        build(a, b, scale_mode=["block"])
    x, y = tn(256, 256, 256, BF16)
    with pytest.raises(ValueError, match="scale_mode='block' applies to fp8 inputs only"):
        build(x, y, scale_mode="block")
    # per-tensor mode (the default) names block mode when handed a 2-D scale array
    with pytest.raises(ValueError, match="block scales: pass scale_mode='block'"):
        build(a, b, scale_a=sa_mn(256, 2), scale_b=sb_rm(2, 2))


def test_per_tensor_plan_unchanged_by_scale_mode_tensor(rec):
    a, b = tn(1000, 3000, 4096, E4M3, E5M2)
    sa = StubArray((), "float32")
    p1 = build(a, b, scale_a=sa, scale_b=3.0)
    p2 = build(a, b, scale_a=sa, scale_b=3.0, scale_mode="tensor")
    assert p1.cfg == p2.cfg and p1.extra == p2.extra == (sa.data.ptr, 0) and p1.types == G._TYPES_FP8
    assert p1.cfg.scale_mode == 0 and "SCALE_MODE" not in dict(p1.cfg.spec.defines)


def test_m_one_row_major_sa_needs_the_padded_copy(rec):
    a, b = tn(1, 512, 1024, E4M3)
    with pytest.raises(ValueError, match="stride between k-blocks is 4 bytes"):
        build(a, b, scale_a=StubArray((1, 8), "float32"), scale_b=sb_rm(4, 8), scale_mode="block")
    build(a, b, scale_a=sa_mn(1, 8), scale_b=sb_rm(4, 8), scale_mode="block")
    assert rec.maps[2].dims == (1, 8, 1) and rec.maps[2].strides == (16, 128)


def test_plan_key_separates_block_scales():
    a, b = tn(256, 256, 256, E4M3)
    sa = sa_mn(256, 2)
    sa2 = StubArray((256, 2), "float32", strides=(4, 2048), ptr=sa.data.ptr)   # same address, other pitch
    sb = sb_rm(2, 2)

    def key(s, mode="block"):
        return G._plan_key(a, b, None, 1.0, 0.0, None, None, None, False, (None,) * 6,
                           (s, sb, None, None, None, mode))
    assert key(sa) == key(sa) and key(sa) != key(sa2) and key(sa) != key(sa, None)


# ---------------------------------------------------------------- configurations and tuning
def test_block_config_rules():
    c = gc.GemmConfig(128, gc.E4M3, scale_mode=1)
    assert c.block_scaled and c.stages == 5
    # 5 stages of A + B + 512 bytes of A scales, the epilogue buffers, 21 barriers, alignment slack
    assert c.smem_bytes == 5 * (256 * 128 + 512) + 2 * 2 * 64 * 128 + 21 * 8 + 1024 == 200360
    with pytest.raises(ValueError, match="need fp8 A and B"):
        gc.GemmConfig(128, gc.BF16, scale_mode=1)
    with pytest.raises(ValueError, match="128x128 cooperative or 128x64 tile"):
        gc.GemmConfig(256, gc.E4M3, scale_mode=1)
    with pytest.raises(ValueError, match="128x128 cooperative or 128x64 tile"):
        gc.GemmConfig(128, gc.E4M3, pingpong=True, scale_mode=1)
    with pytest.raises(ValueError, match="scale_mode must be 0"):
        gc.GemmConfig(128, gc.E4M3, scale_mode=2)
    assert gc.GemmConfig(64, gc.E5M2, pingpong=True, scale_mode=1).stages == gc.max_stages(64, False, 1)
    for cfg in gc.block_scaled_configs():
        assert cfg.smem_bytes <= gc.SMEM_LIMIT and cfg.stages >= 4
    specs = gc.all_specs(everything=True)
    assert all(c.spec in specs for c in gc.block_scaled_configs())
    assert not any(dict(s.defines).get("SCALE_MODE") for s in gc.all_specs())


def test_block_tuning_candidates(rec):
    a, b = tn(2048, 2048, 4096, E4M3)
    sa, sb = scales(2048, 2048, 4096)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block")
    cands = gc.tuning_candidates(plan.problem)
    tiles = {(c["block_n"], c["pingpong"]) for c in cands[1:]}
    assert tiles == {(128, False), (64, False), (64, True)}
    assert not any(c["swap"] for c in cands)
    for c in cands[1:]:                                       # every candidate plans
        rec.maps.clear()
        build(a, b, scale_a=sa, scale_b=sb, scale_mode="block", _block_n=c["block_n"], _pingpong=c["pingpong"],
              _swap=c["swap"], _group=c["group"], _splits=c["splits"])


def test_block_ignores_a_tuned_entry_it_cannot_run(monkeypatch):
    rec = stub_planning(monkeypatch)
    choice = dict(block_n=256, group=8, swap=False, splits=None, pingpong=False)
    monkeypatch.setattr(G.tuning, "lookup", lambda sig: dict(choice) if "+block128" in sig else None)
    a, b = tn(2048, 2048, 4096, E4M3)
    sa, sb = scales(2048, 2048, 4096)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block")
    assert plan.cfg.block_n == 128 and not plan.tuned
    choice.update(block_n=64, pingpong=True)
    plan = build(a, b, scale_a=sa, scale_b=sb, scale_mode="block")
    assert (plan.cfg.block_n, plan.cfg.pingpong, plan.tuned) == (64, True, True) and rec.maps
