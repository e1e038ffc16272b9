"""CPU: the host side of the tf32 and fp8 GEMMs, without a GPU.

``rawcoop.gemm``'s validation and planning take the CuPy module as an
argument, so a stub module whose ``ndarray`` carries only shape, strides,
dtype and an address drives them on the CPU: the input-kind rules
(``precision``, ``a_format``/``b_format``, fp8 storage), the K-major-only
layout rule for tf32/fp8, the scale arguments, and, with the device query,
kernel lookup and tensor-map encoding replaced by recorders, the plan itself
(kernel configuration, TMA element types and boxes, the scale pointers and
the alpha folding).  Everything here raises or is decided before any launch.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from helpers.plan import gc as gc
from rawcoop import operands
from rawcoop import tma

from helpers.stub import BF16, E4M3, E5M2, G, StubArray, build, stub_planning, tn

@pytest.fixture
def planning(monkeypatch):
    """The tensor maps planning encodes (GPU-facing calls stubbed)."""
    return stub_planning(monkeypatch).maps


# ---------------------------------------------------------------- input kinds (pure)
@pytest.mark.parametrize("a_dt, b_dt, kw, kinds", [
    ("float16", "float16", {}, (0, 0)),
    ("bfloat16", "bfloat16", {}, (1, 1)),
    ("float32", "float32", dict(precision="tf32"), (2, 2)),
    ("float8_e4m3fn", "float8_e4m3fn", {}, (3, 3)),
    ("float8_e5m2", "float8_e5m2", {}, (4, 4)),
    ("float8_e4m3fn", "float8_e5m2", {}, (3, 4)),
    ("float8_e5m2", "float8_e4m3fn", {}, (4, 3)),
    ("uint8", "uint8", dict(a_format="e4m3", b_format="e5m2"), (3, 4)),
    ("uint8", "float8_e4m3fn", dict(a_format="e5m2"), (4, 3)),
    ("float8_e4m3fn", "float8_e4m3fn", dict(a_format="e4m3", b_format="e4m3"), (3, 3)),
])
def test_input_kinds_accepted(a_dt, b_dt, kw, kinds):
    args = dict(a_format=None, b_format=None, precision=None)
    args.update(kw)
    assert operands.input_kinds(a_dt, b_dt, args["a_format"], args["b_format"], args["precision"]) == kinds


@pytest.mark.parametrize("a_dt, b_dt, kw, exc, fragment", [
    ("float32", "float32", {}, TypeError, "rawcoop has no full-fp32 GEMM: pass precision='tf32'"),
    ("float32", "float32", dict(precision="fp32"), ValueError, "precision must be None or 'tf32'"),
    ("float16", "float16", dict(precision="tf32"), TypeError, "precision='tf32' needs float32 a and b"),
    ("float32", "bfloat16", dict(precision="tf32"), TypeError, "got float32 and bfloat16"),
    ("uint8", "uint8", {}, TypeError, "a is uint8: pass a_format='e4m3' or 'e5m2'"),
    ("uint8", "uint8", dict(a_format="e4m3"), TypeError, "b is uint8: pass b_format="),
    ("uint8", "uint8", dict(a_format="fp8", b_format="e4m3"), ValueError, "a_format must be None, 'e4m3' or 'e5m2'"),
    ("uint8", "uint8", dict(a_format="e4m3", b_format="E5M2"), ValueError, "b_format must be None"),
    ("float16", "float16", dict(a_format="e4m3"), ValueError, "a_format applies to fp8 operands"),
    ("float8_e4m3fn", "float8_e4m3fn", dict(b_format="e5m2"), ValueError,
     "b has dtype float8_e4m3fn but b_format='e5m2'"),
    ("float16", "bfloat16", {}, TypeError, "a and b must have the same dtype (only fp8 e4m3 and e5m2 may be mixed)"),
    ("float8_e4m3fn", "bfloat16", {}, TypeError, "a and b must have the same dtype"),
    ("int8", "int8", {}, TypeError, "rawcoop.gemm takes float16 or bfloat16"),
    ("float64", "float64", {}, TypeError, "float32 with precision='tf32', or fp8"),
    ("float8_e4m3fnuz", "float8_e4m3fnuz", {}, TypeError, "a has dtype float8_e4m3fnuz"),
])
def test_input_kinds_rejected(a_dt, b_dt, kw, exc, fragment):
    args = dict(a_format=None, b_format=None, precision=None)
    args.update(kw)
    with pytest.raises(exc) as ei:
        operands.input_kinds(a_dt, b_dt, args["a_format"], args["b_format"], args["precision"])
    assert fragment in str(ei.value)


# ---------------------------------------------------------------- validation before launch (stub arrays)
@pytest.mark.parametrize("dt, kw", [(E4M3, {}), ("uint8", dict(a_format="e4m3", b_format="e4m3")),
                                    ("float32", dict(precision="tf32"))])
def test_lowp_operands_must_be_k_major(dt, kw):
    what = "tf32" if dt == "float32" else "fp8"
    a, b = tn(256, 256, 256, dt)
    a_col = StubArray((256, 256), dt, order="F")
    with pytest.raises(ValueError) as ei:
        build(a_col, b, **kw)
    msg = str(ei.value)
    assert "wgmma cannot transpose 32-bit/8-bit operands: a must be row-major (K contiguous" in msg
    assert f"for {what} inputs" in msg and "no silent copy" in msg and str(a_col.strides) in msg
    b_row = StubArray((256, 256), dt)                       # (K, N) row-major: N contiguous
    with pytest.raises(ValueError) as ei:
        build(a, b_row, **kw)
    msg = str(ei.value)
    assert "b: wgmma cannot transpose 32-bit/8-bit operands: b must be column-major (K contiguous" in msg
    assert "b = bt.T" in msg


def test_lowp_k_major_pitch_rule_names_the_padding():
    # fp8 rows of 40 bytes: TMA needs 16-byte pitches -> pad K to a multiple of 16 elements
    a, b = tn(64, 64, 40, E4M3)
    with pytest.raises(ValueError, match="multiple of 16 elements"):
        build(a, b)
    a, b = tn(64, 64, 6, "float32")                          # tf32: 24-byte rows -> multiple of 4
    with pytest.raises(ValueError, match="multiple of 4 elements"):
        build(a, b, precision="tf32")


def test_sixteen_bit_layouts_unchanged(planning):
    # every layout is still planned, without copies, for 16-bit inputs
    for order_a in "CF":
        for order_b in "CF":
            a = StubArray((256, 192), BF16, order=order_a)
            b = StubArray((192, 320), BF16, order=order_b)
            cfg = build(a, b).cfg
            assert (cfg.a_kmajor, cfg.b_kmajor) == (order_a == "C", order_b == "F")


@pytest.mark.parametrize("scale, exc, fragment", [
    (StubArray((1,), "float64"), TypeError, "scale_a must be a float32 array"),
    (StubArray((2,), "float32"), ValueError, "scale_a must hold exactly one value (0-d or 1-element), got shape (2,)"),
    (StubArray((1, 2), "float32"), ValueError, "exactly one value"),
    (StubArray((1,), "float32", dev=1), ValueError, "scale_a is on device 1, but a is on device 0"),
    (np.ones(1, np.float32), TypeError, "scale_a must be a Python float or a 1-element float32 GPU array"),
    ("1.0", TypeError, "scale_a must be a Python float"),
    (True, TypeError, "scale_a must be a Python float"),
])
def test_bad_scales_raise_before_launch(scale, exc, fragment):
    a, b = tn(128, 128, 128, E4M3)
    with pytest.raises(exc) as ei:
        build(a, b, scale_a=scale)
    assert fragment in str(ei.value)


def test_scales_only_for_fp8():
    a, b = tn(128, 128, 128, BF16)
    with pytest.raises(ValueError, match="scale_b applies to fp8 inputs only"):
        build(a, b, scale_b=2.0)
    a, b = tn(128, 128, 128, "float32")
    with pytest.raises(ValueError, match="scale_a applies to fp8 inputs only"):
        build(a, b, scale_a=StubArray((), "float32"), precision="tf32")


def test_lowp_bias_and_out_dtype_rules():
    a, b = tn(128, 128, 128, E4M3)
    with pytest.raises(TypeError, match="with e4m3 inputs it must be float32, float16 or bfloat16"):
        build(a, b, bias=StubArray((128,), "float64"))
    with pytest.raises(TypeError, match="out_dtype must be float16, bfloat16 or float32"):
        build(a, b, out_dtype="float64")
    # C has the output dtype (bf16 by default for fp8, fp32 for tf32)
    with pytest.raises(TypeError, match="output dtype bfloat16"):
        build(a, b, c=StubArray((128, 128), "float32"), beta=1.0)
    a, b = tn(128, 128, 128, "float32")
    with pytest.raises(TypeError, match="output dtype float32"):
        build(a, b, c=StubArray((128, 128), BF16), beta=1.0, precision="tf32")


# ---------------------------------------------------------------- planning (GPU calls recorded)


def test_fp8_default_scales_are_null_pointers(planning):
    a, b = tn(256, 256, 256, "uint8")
    plan = build(a, b, a_format="e5m2", b_format="e5m2", out_dtype="float32")
    assert (plan.cfg.in_kind, plan.cfg.b_kind, plan.cfg.out_type) == (4, 4, 2)
    assert plan.extra == (0, 0) and plan.scalars[8] == 1.0


def test_fp8_swap_ab_keeps_k_major_and_swaps_the_kinds(planning):
    a, b = tn(16, 4096, 2048, E4M3, E5M2)                    # M <= 64 < N: swap-AB
    plan = build(a, b)
    cfg = plan.cfg
    assert cfg.d_colmajor and cfg.a_kmajor and cfg.b_kmajor
    assert (cfg.in_kind, cfg.b_kind) == (4, 3)               # the kernel's A is b (e5m2), its B is a (e4m3)
    map_a, map_b = planning[:2]
    assert map_a.address == b.data.ptr and map_a.dims == (2048, 4096, 1)
    assert map_b.address == a.data.ptr and map_b.dims == (2048, 16, 1)
    assert map_a.box == (128, 128, 1) and map_b.box == (128, 16, 1)   # kernel N = 16 < 64: trimmed box


def test_bf16_plan_unchanged(planning):
    a, b = tn(1000, 3000, 4096, BF16)
    plan = build(a, b)
    assert (plan.cfg.in_kind, plan.cfg.block_k) == (1, 64)
    assert planning[0].dtype == tma.DType.BFLOAT16 and planning[0].box == (64, 128, 1)
    assert plan.types == G._TYPES and plan.extra == ()
    assert plan.signature.split("|")[1] == "bfloat16->bfloat16"
    assert plan.decomposition.k_blocks == 4096 // 64
    planning.clear()
    a = StubArray((1000, 4096), BF16, order="F")              # M-major A: 64x64 boxes
    plan = build(a, b)
    assert not plan.cfg.a_kmajor and planning[0].box == (64, 64, 1)


def test_plan_key_separates_scales_and_formats():
    a, b = tn(64, 64, 64, "uint8")
    k = lambda **kw: G._plan_key(a, b, None, 1.0, 0.0, None, None, None, False, (None,) * 6,  # noqa: E731
                                 tuple(kw.get(x) for x in ("scale_a", "scale_b", "a_format", "b_format",
                                                           "precision")))
    s1, s2 = StubArray((1,), "float32"), StubArray((1,), "float32")
    keys = [k(a_format="e4m3", b_format="e4m3"), k(a_format="e5m2", b_format="e4m3"),
            k(a_format="e4m3", b_format="e4m3", scale_a=2.0), k(a_format="e4m3", b_format="e4m3", scale_a=s1),
            k(a_format="e4m3", b_format="e4m3", scale_a=s2), k(a_format="e4m3", b_format="e4m3", scale_a=True),
            k(a_format="e4m3", b_format="e4m3", scale_a=1.0)]
    assert len(set(keys)) == len(keys)
    assert k(a_format="e4m3", b_format="e4m3", scale_a=s1) == k(a_format="e4m3", b_format="e4m3", scale_a=s1)
    # 16-bit keys keep their old shape (no options: None)
    assert G._plan_key(a, b, None, 1.0, 0.0, None, None, None, False, (None,) * 6)[-1] is None


# ---------------------------------------------------------------- configurations, warm-up selection
def test_gemm_config_kind_rules():
    assert gc.GemmConfig(128, True).in_kind == 1 and gc.GemmConfig(128, False).in_kind == 0
    assert gc.GemmConfig(128, True) == gc.GemmConfig(128, 1) and gc.GemmConfig(128, True).in_bf16
    with pytest.raises(ValueError, match="wgmma cannot transpose"):
        gc.GemmConfig(128, gc.TF32, a_kmajor=False)
    with pytest.raises(ValueError, match="wgmma cannot transpose"):
        gc.GemmConfig(128, gc.E4M3, b_kmajor=False)
    with pytest.raises(ValueError, match="may differ only for fp8"):
        gc.GemmConfig(128, gc.BF16, b_kind=gc.E4M3)
    for kind in range(5):
        c = gc.GemmConfig(256, kind)
        assert c.block_k * c.in_bytes == gc.ROW_BYTES
        assert c.smem_bytes == gc.GemmConfig(256, True).smem_bytes and c.stages == gc.GemmConfig(256, True).stages
    assert [gc.GemmConfig(128, k).out_type for k in range(5)] == [0, 1, 2, 1, 1]
    assert "IN_KIND_B" not in dict(gc.GemmConfig(128, gc.E4M3).spec.defines)


def test_expected_instructions_per_kind():
    def wgmma(kind, b_kind=-1, bn=128):
        return gc.expected_instructions(gc.GemmConfig(bn, kind, b_kind=b_kind).spec)[0]
    assert wgmma(gc.BF16) == "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"
    assert wgmma(gc.FP16, bn=256) == "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16"
    assert wgmma(gc.TF32) == "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32"
    assert wgmma(gc.E4M3) == "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3"
    assert wgmma(gc.E4M3, gc.E5M2, 256) == "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e5m2"
    assert "ld.global.cg.f32" in gc.expected_instructions(gc.GemmConfig(128, gc.E5M2).spec)
    assert "ld.global.cg.f32" not in gc.expected_instructions(gc.GemmConfig(128, gc.TF32).spec)


def _select(**kw):
    from rawcoop import cli
    base = dict(dtypes=None, layouts=None, all=False, kernel=None, shapes=None, sms=132)
    base.update(kw)
    return cli._select_specs(SimpleNamespace(**base))


def test_wgmma_header_is_generated():
    """kernels/wgmma.cuh is exactly what tools/gen_wgmma.py writes (regenerate, never hand-edit)."""
    import contextlib
    import io
    import runpy
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(str(root / "tools" / "gen_wgmma.py"), run_name="__main__")
    assert buf.getvalue() == (root / "kernels" / "wgmma.cuh").read_text()


def test_torch_fp8_tensors_travel_as_uint8_views(monkeypatch):
    """torch float8 tensors (which DLPack/__cuda_array_interface__ may refuse)
    go through a uint8 view and come back with the ml_dtypes fp8 dtype; the
    fnuz formats (other encodings) are refused.  A stand-in torch module."""
    import sys

    class Dt:
        def __init__(self, name):
            self.name = name

        def __str__(self):
            return "torch." + self.name

    class Tensor:
        def __init__(self, dtype, shape=(4, 32)):
            self.dtype, self.shape = dtype, shape

        def view(self, dtype):
            return Tensor(dtype, self.shape)

        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kw):
            raise AssertionError("not used by the stand-in from_dlpack")

    fake_torch = SimpleNamespace(Tensor=Tensor, uint8=Dt("uint8"), float8_e4m3fn=Dt("float8_e4m3fn"),
                                 float8_e5m2=Dt("float8_e5m2"), float8_e4m3fnuz=Dt("float8_e4m3fnuz"))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)

    class Viewable(StubArray):
        def view(self, dtype):
            return Viewable(self.shape, dtype, strides=self.strides, ptr=self.data.ptr)

    seen = []

    def from_dlpack(t):
        seen.append(t.dtype.name)
        return Viewable(t.shape, "uint8")

    cp = SimpleNamespace(ndarray=StubArray, from_dlpack=from_dlpack)
    x = operands.as_cupy(cp, "a", Tensor(fake_torch.float8_e4m3fn))
    assert x.dtype == E4M3 and x.shape == (4, 32) and seen == ["uint8"]
    assert operands.as_cupy(cp, "b", Tensor(fake_torch.float8_e5m2)).dtype == E5M2
    with pytest.raises(TypeError, match="torch.float8_e4m3fnuz is not supported"):
        operands.as_cupy(cp, "a", Tensor(fake_torch.float8_e4m3fnuz))


# ---------------------------------------------------------------- trimmed TMA boxes (configs.trimmed_lines)


def test_trimmed_boxes_not_for_mn_major(planning):
    a = StubArray((1024, 104), "float16").T                     # (104, 1024) column-major: M-major A
    b = StubArray((1024, 4096), "float16")                      # N-major B
    build(a, b)
    map_a, map_b = planning[:2]
    assert map_a.box == (64, 64, 1) and map_b.box == (64, 64, 1)  # 64-wide atoms, whole tile
