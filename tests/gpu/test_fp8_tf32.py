"""GPU: tf32 and fp8 (per-tensor scales) GEMMs of the one rawcoop kernel.

The tolerances (TF32_TOL, FP8_TOL in tests/helpers/lowp.py) are derived, not
measured; the tests print the measured errors (run with -s).

TF32 reference: float64 products of the fp32 *inputs*.  TF32 keeps a 10-bit
mantissa: each input carries a relative error <= 2^-11 if the tensor core
rounds to nearest, <= 2^-10 if it truncates to the top 19 bits (which of the
two Hopper does is what ``test_tf32_rounding_mode`` reports).  Per product
that is <= ~2^-9 relative, and for random-sign sums the relative Frobenius
error is the rms per-product error, about 2^-10 * sqrt(2/3) ~ 8e-4 with
truncation (half that with rounding); fp32 accumulation adds ~sqrt(K)*2^-24,
negligible.  Tolerance 3e-3 for fp32 output (~4x the truncation estimate);
with bf16 output the output rounding (u/sqrt(3) = 2.3e-3 rms) dominates:
6e-3.

FP8 reference: float64 products of the dequantised fp8 inputs (the exact
values the tensor core multiplies, from ml_dtypes on the host) times the
scales, so input quantisation is not part of the error.  What remains is the
accumulation: the fp8 wgmma does not accumulate in full fp32 (DeepSeek-V3
reports ~14 retained bits on H800 with their kernels; other sources suggest
~22).  Assuming the worst, 2^-14 per k32 step relative to the partial sum,
random signs give ~2^-14 * sqrt(K/32) ~ 7e-4 at K = 4096.  Tolerance, with
room for that worst case: 3e-3 for fp32/fp16 output, 6e-3 for bf16 output
(bf16 rounding dominates), K <= 8192.  A missing tile, a wrong k-block
(BLOCK_K is 128 for fp8, 32 for tf32) or a wrong scale gives errors of order 1.
"""
import importlib

import numpy as np
import pytest

import helpers

from helpers.lowp import FP8_TOL, TF32_TOL, fp8_pair

pytestmark = pytest.mark.gpu



def _rel_err(cp, d, ref):
    e = float(cp.linalg.norm((d.astype(cp.float64) - ref).ravel()) / cp.linalg.norm(ref.ravel()))
    assert np.isfinite(e), "non-finite output"
    return e


def _check(cp, d, ref, tol, what):
    e = _rel_err(cp, d, ref)
    print(f"\n  {what}: relative Frobenius error {e:.3e} (tolerance {tol:.1e})")
    assert e < tol, f"{what}: relative error {e:.3e} >= {tol:.1e}"
    return e


def _scales(cp, rng):
    sa, sb = float(rng.uniform(0.05, 4.0)), float(rng.uniform(0.05, 4.0))
    return sa, sb, cp.asarray([sa], dtype=cp.float32), cp.asarray(np.float32(sb))     # 1-element and 0-d


def _out_dt(name):
    return helpers.dtype(name)


# ---------------------------------------------------------------- TF32
TF32_SHAPES = [
    (128, 128, 32), (256, 256, 64), (1000, 1000, 1000), (129, 257, 36), (1001, 999, 1004), (127, 255, 4),
    (333, 777, 260), (2049, 2047, 2052), (4096, 4096, 4096), (7, 300, 512), (1, 1, 4), (300, 9, 128),
    (64, 4099, 260), (3000, 5000, 1000), (130, 250, 8200),
]


@pytest.mark.parametrize("m,n,k", TF32_SHAPES)
@pytest.mark.parametrize("out_name", ["float32", "bfloat16"])
def test_tf32_vs_float64(m, n, k, out_name):
    import cupy as cp
    import rawcoop
    a = helpers.rand(cp, (m, k), cp.float32, 1)
    bt = helpers.rand(cp, (n, k), cp.float32, 2)
    kw = {} if out_name == "float32" else dict(out_dtype=_out_dt(out_name))
    d = rawcoop.gemm(a, bt.T, precision="tf32", **kw)
    assert d.dtype == _out_dt(out_name) and d.shape == (m, n)
    _check(cp, d, a.astype(cp.float64) @ bt.T.astype(cp.float64), TF32_TOL[out_name], f"tf32 {m}x{n}x{k} -> {out_name}")


def _kernel_variants(splits: int, narrow_swap: dict) -> list[dict]:
    """The forced configurations every low-precision kind runs: split-K, clusters, ping-pong, widths,
    swap-AB, stream-K and their combinations (``narrow_swap``: the 128x64 swap-AB case's options)."""
    return [dict(_splits=splits), dict(_cluster=2), dict(_pingpong=True, _block_n=128),
            dict(_block_n=256), narrow_swap,
            dict(_cluster=(1, 2), _block_n=256),
            dict(_cluster=(1, 2), _pingpong=True, _block_n=128, _splits=2),
            dict(_streamk=True, _block_n=256), dict(_streamk=True, _block_n=128),
            dict(_swap=True, _pingpong=True, _block_n=128),
            dict(_streamk=True, _pingpong=True, _block_n=128),
            dict(_swap=True, _streamk=True, _pingpong=True, _block_n=128)]


@pytest.mark.parametrize("kw", _kernel_variants(3, dict(_block_n=64, out_dtype="bfloat16", _swap=True)))
def test_tf32_kernel_variants(kw):
    import cupy as cp
    import rawcoop
    m, n, k = (48, 1000, 2000) if kw.get("_block_n") == 64 else (1000, 1100, 2000)
    a = helpers.rand(cp, (m, k), cp.float32, 3)
    bt = helpers.rand(cp, (n, k), cp.float32, 4)
    d = rawcoop.gemm(a, bt.T, precision="tf32", **kw)
    out = kw.get("out_dtype", "float32")
    _check(cp, d, a.astype(cp.float64) @ bt.T.astype(cp.float64), TF32_TOL[out], f"tf32 {kw}")


def test_tf32_batched_with_epilogue():
    import cupy as cp
    import rawcoop
    L, m, n, k = 3, 300, 200, 128
    a = helpers.rand(cp, (L, m, k), cp.float32, 5)
    bt = helpers.rand(cp, (n, k), cp.float32, 6)          # shared over the batch
    c = helpers.rand(cp, (L, m, n), cp.float32, 7)
    bias = helpers.rand(cp, (n,), cp.float32, 8)
    d = rawcoop.gemm(a, bt.T, c=c, alpha=0.5, beta=-1.5, bias=bias, activation="relu", precision="tf32")
    ref = 0.5 * (a.astype(cp.float64) @ bt.T.astype(cp.float64)) - 1.5 * c + bias
    _check(cp, d, cp.maximum(ref, 0), TF32_TOL["float32"], "tf32 batched + epilogue")


def test_tf32_rounding_mode():
    """Reports whether the tensor core rounds fp32 inputs to tf32 or truncates
    them (the documented behaviour is 'uses the top 19 bits'); asserts that the
    product is computed in tf32 (not fp32): 1 + 2^-20 becomes 1."""
    import cupy as cp
    import rawcoop
    k = 4
    a = cp.zeros((1, k), dtype=cp.float32)
    bt = cp.zeros((1, k), dtype=cp.float32)
    bt[0, 0] = 1.0
    a[0, 0] = 1 + 2.0 ** -20
    assert float(rawcoop.gemm(a, bt.T, precision="tf32")[0, 0]) == 1.0
    a[0, 0] = 1 + 2.0 ** -11 + 2.0 ** -12                        # 0.75 tf32 ulp (2^-10) above 1
    got = float(rawcoop.gemm(a, bt.T, precision="tf32")[0, 0])
    mode = {1 + 2.0 ** -10: "round to nearest", 1.0: "truncation (top 19 bits)"}.get(got, f"unexpected {got!r}")
    print(f"\n  tf32 input conversion on this GPU: {mode}")
    assert got in (1 + 2.0 ** -10, 1.0), mode


def test_float32_needs_precision_and_k_major():
    import cupy as cp
    import rawcoop
    a = cp.ones((64, 64), dtype=cp.float32)
    with pytest.raises(TypeError, match="precision='tf32'"):
        rawcoop.gemm(a, a.T)
    with pytest.raises(ValueError, match="b must be column-major"):
        rawcoop.gemm(a, a, precision="tf32")                      # row-major b: N-major
    with pytest.raises(ValueError, match="a must be row-major"):
        rawcoop.gemm(a.T, a.T, precision="tf32")


# ---------------------------------------------------------------- FP8
FP8_SHAPES = [
    (128, 128, 128), (256, 256, 256), (1000, 1000, 1008), (129, 257, 144), (1001, 999, 1024), (127, 255, 16),
    (333, 777, 272), (2049, 2047, 2064), (4096, 4096, 4096), (17, 3000, 512), (1, 1, 16), (300, 9, 128),
    (3000, 5000, 1024), (130, 250, 8208),
]
FORMATS = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e5m2", "e4m3")]


@pytest.mark.parametrize("fa,fb", FORMATS)
@pytest.mark.parametrize("m,n,k", FP8_SHAPES)
def test_fp8_vs_float64_of_dequantised(fa, fb, m, n, k):
    import cupy as cp
    import rawcoop
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a, b, a64, b64 = fp8_pair(cp, m, n, k, fa, fb, 10)
    sa, sb, sa_dev, sb_dev = _scales(cp, rng)
    out_name = ["bfloat16", "float32", "float16"][(m + n) % 3]
    d = rawcoop.gemm(a, b, scale_a=sa_dev, scale_b=sb_dev, out_dtype=_out_dt(out_name))
    assert d.dtype == _out_dt(out_name) and d.shape == (m, n)
    _check(cp, d, sa * sb * (a64 @ b64), FP8_TOL[out_name], f"{fa}x{fb} {m}x{n}x{k} -> {out_name}")


@pytest.mark.parametrize("kw", _kernel_variants(4, dict(_block_n=64, _swap=True)))
def test_fp8_kernel_variants(kw):
    import cupy as cp
    import rawcoop
    m, n, k = (48, 1000, 4096) if kw.get("_block_n") == 64 else (1000, 1100, 4096)
    a, b, a64, b64 = fp8_pair(cp, m, n, k, "e4m3", "e5m2", 20)
    d = rawcoop.gemm(a, b, scale_a=0.75, scale_b=1.5, **kw)
    _check(cp, d, 1.125 * (a64 @ b64), FP8_TOL["bfloat16"], f"fp8 {kw}")


def test_fp8_batched_with_epilogue():
    import cupy as cp
    import rawcoop
    L, m, n, k = 2, 300, 520, 256
    a, b, a64, b64 = fp8_pair(cp, m, n, k, "e4m3", "e4m3", 30, batch=L)
    dt = _out_dt("bfloat16")
    c = helpers.rand(cp, (L, m, n), dt, 31)
    bias = helpers.rand(cp, (n,), cp.float32, 32)
    sa, sb = cp.asarray([0.5], cp.float32), cp.asarray([3.0], cp.float32)
    d = rawcoop.gemm(a, b, c=c, alpha=2.0, beta=0.5, bias=bias, activation="gelu", scale_a=sa, scale_b=sb)
    v = 2.0 * 0.5 * 3.0 * (a64 @ b64) + 0.5 * c.astype(cp.float64) + bias
    ref = 0.5 * v * (1 + cp.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
    _check(cp, d, ref, 8e-3, "fp8 batched + C, bias, gelu")


def test_fp8_storage_policies_agree():
    """ml_dtypes fp8 arrays, uint8 + format, and Python-float vs device scales."""
    import cupy as cp
    import rawcoop
    m, n, k = 520, 776, 1040
    a, b, a64, b64 = fp8_pair(cp, m, n, k, "e5m2", "e4m3", 40)
    f32 = _out_dt("float32")
    d1 = rawcoop.gemm(a, b, scale_a=0.25, scale_b=8.0, out_dtype=f32)
    d2 = rawcoop.gemm(a.view(cp.uint8), b.view(cp.uint8), a_format="e5m2", b_format="e4m3", scale_a=0.25,
                      scale_b=8.0, out_dtype=f32)
    assert bool(cp.array_equal(d1, d2)), "uint8 + format must run the same kernel on the same bytes"
    d3 = rawcoop.gemm(a, b, scale_a=cp.asarray([0.25], cp.float32), scale_b=cp.asarray([8.0], cp.float32),
                      out_dtype=f32)
    assert _rel_err(cp, d3, d1.astype(cp.float64)) < 1e-6          # powers of two: the same products
    d4 = rawcoop.gemm(a, b, out_dtype=f32)                          # default scales: 1
    _check(cp, d4, a64 @ b64, FP8_TOL["float32"], "fp8 default scales")


def test_fp8_device_scales_change_without_recompiling():
    import cupy as cp
    import rawcoop
    from rawcoop import launch
    G = importlib.import_module("rawcoop.gemm")            # the module (rawcoop.gemm is the function)
    m, n, k = 640, 384, 2048
    a, b, a64, b64 = fp8_pair(cp, m, n, k, "e4m3", "e4m3", 50)
    sa, sb = cp.asarray([1.0], cp.float32), cp.asarray([1.0], cp.float32)
    out = cp.empty((m, n), dtype=_out_dt("float32"))
    rawcoop.gemm(a, b, scale_a=sa, scale_b=sb, out=out, out_dtype=out.dtype)
    kernels, plans = len(launch._kernels), len(G._PLANS)
    prod = a64 @ b64
    for i, (x, y) in enumerate([(0.5, 2.5), (3.0, 0.125), (1e-3, 7.0)]):
        sa[...] = x
        sb[...] = y
        rawcoop.gemm(a, b, scale_a=sa, scale_b=sb, out=out, out_dtype=out.dtype)
        _check(cp, out, x * y * prod, FP8_TOL["float32"], f"scales {x}, {y}")
    assert len(launch._kernels) == kernels, "new scale values compiled/loaded a kernel"
    assert len(G._PLANS) == plans, "new scale values built a new plan"


def test_fp8_graph_replay_reads_current_scales():
    import cupy as cp
    import rawcoop
    m, n, k = 256, 512, 1024
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        a, b, a64, b64 = fp8_pair(cp, m, n, k, "e4m3", "e5m2", 60)
        sa, sb = cp.asarray([1.0], cp.float32), cp.asarray([1.0], cp.float32)
        out = cp.empty((m, n), dtype=_out_dt("float32"))
        rawcoop.gemm(a, b, scale_a=sa, scale_b=sb, out=out, out_dtype=out.dtype)      # once before capturing
    s.synchronize()
    with s:
        s.begin_capture()
        try:
            rawcoop.gemm(a, b, scale_a=sa, scale_b=sb, out=out, out_dtype=out.dtype)
        finally:
            graph = s.end_capture()
    prod = a64 @ b64
    for x, y in [(2.0, 0.5), (0.3, 0.7), (5.0, 1.25)]:
        with s:
            sa[...] = x
            sb[...] = y
        graph.launch(s)
        s.synchronize()
        _check(cp, out, x * y * prod, FP8_TOL["float32"], f"graph replay, scales {x}, {y}")


def test_fp8_bad_inputs_raise_before_launch(monkeypatch):
    import cupy as cp
    import ml_dtypes
    import rawcoop
    a, b, _, _ = fp8_pair(cp, 128, 128, 128, "e4m3", "e4m3", 70)

    helpers.spy_launches(monkeypatch, fail="a kernel was launched for a bad input")
    out = cp.full((128, 128), cp.nan, dtype=cp.float32)
    bad = [
        (ValueError, "a must be row-major", dict(a=cp.asfortranarray(a.view(cp.uint8)).view(ml_dtypes.float8_e4m3fn))),
        (ValueError, "b must be column-major", dict(b=cp.ascontiguousarray(b.view(cp.uint8)).view(ml_dtypes.float8_e4m3fn))),
        (ValueError, "exactly one value", dict(scale_a=cp.ones(2, cp.float32))),
        (TypeError, "float32 array", dict(scale_b=cp.ones(1, cp.float64))),
        (TypeError, "a is uint8: pass a_format", dict(a=a.view(cp.uint8))),
        (ValueError, "b_format must be None, 'e4m3' or 'e5m2'", dict(b=b.view(cp.uint8), b_format="fp8")),
        (ValueError, "a has dtype float8_e4m3fn but a_format='e5m2'", dict(a_format="e5m2")),
        (TypeError, "precision='tf32' needs float32", dict(precision="tf32")),
    ]
    for exc, fragment, kw in bad:
        args = dict(a=a, b=b, out_dtype=cp.float32)
        args.update(kw)
        with pytest.raises(exc, match=fragment.replace("(", r"\(").replace(")", r"\)")):
            rawcoop.gemm(args.pop("a"), args.pop("b"), out=out, **args)
    assert bool(cp.isnan(out).all()), "a rejected call wrote the output"
    bf = helpers.rand(cp, (128, 128), _out_dt("bfloat16"), 71)
    with pytest.raises(ValueError, match="scale_a applies to fp8 inputs only"):
        rawcoop.gemm(bf, bf.T, scale_a=2.0)


# ---------------------------------------------------------------- torch
def _torch_fp8():
    torch = helpers.torch_or_skip()
    if not torch.cuda.is_available() or not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without CUDA, _scaled_mm or float8 dtypes")
    return torch


@pytest.mark.parametrize("fa,fb", [("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")])   # cuBLASLt: no e5m2 x e5m2
@pytest.mark.parametrize("m,n,k", [(256, 512, 1024), (1024, 2048, 4096), (16, 4096, 2048), (4096, 16, 1024)])
def test_fp8_vs_torch_scaled_mm(fa, fb, m, n, k):
    """torch float8 tensors straight into rawcoop.gemm (a torch result),
    against torch._scaled_mm on the same tensors and scales (bf16 out)."""
    torch = _torch_fp8()
    import cupy as cp
    import rawcoop
    tdt = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(tdt[fa])
    bt = torch.randn(n, k, device="cuda", generator=g).to(tdt[fb])
    sa = torch.tensor(0.8, device="cuda", dtype=torch.float32)
    sb = torch.tensor(1.7, device="cuda", dtype=torch.float32)
    try:
        ref = torch._scaled_mm(a, bt.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError) as e:
        pytest.skip(f"torch._scaled_mm refused this case: {e}")
    if isinstance(ref, tuple):                       # torch < 2.4 returns (out, amax)
        ref = ref[0]
    d = rawcoop.gemm(a, bt.t(), scale_a=sa, scale_b=sb, out_dtype=_out_dt("bfloat16"))
    assert isinstance(d, torch.Tensor) and d.shape == (m, n) and d.dtype == torch.bfloat16
    d = cp.from_dlpack(d)
    ref64 = cp.from_dlpack(ref.float().contiguous()).astype(cp.float64)
    # both are rounded to bf16 (2.3e-3 rms each) after different accumulation orders
    _check(cp, d, ref64, 1e-2, f"vs torch._scaled_mm {fa}x{fb} {m}x{n}x{k}")
    exact = 0.8 * 1.7 * (cp.from_dlpack(a.float().double().contiguous()) @
                         cp.from_dlpack(bt.float().double().t().contiguous()))
    _check(cp, d, exact, FP8_TOL["bfloat16"], f"torch fp8 {fa}x{fb} vs float64")


@pytest.mark.parametrize("fa,fb,out_name,shape", [
    ("e4m3", "e4m3", "bfloat16", (1856, 3200, 2048)), ("e5m2", "e5m2", "float16", (2990, 2030, 3072)),
    ("e4m3", "e5m2", "float32", (1184, 4832, 6144))],
    ids=lambda v: v if isinstance(v, str) else "x".join(map(str, v)))
def test_fp8_auto_pingpong_one_wave(fa, fb, out_name, shape):
    """fp8 between one and two waves of 128x256 tiles with the second 20-80%
    full and K <= 6144 (48 k-blocks of 128: configs.PINGPONG_ONE_WAVE_K_BLOCKS):
    the automatic plan is ping-pong 128x128 (on a 132-SM GPU), right
    against float64 of the dequantised inputs with a NaN-poisoned output,
    deterministic; e4m3 with C, a bias and gelu too."""
    import cupy as cp
    import rawcoop
    from rawcoop import device
    from rawcoop.gemm import _plan_for
    m, n, k = shape
    a, b, a64, b64 = fp8_pair(cp, m, n, k, fa, fb, 40)
    dt = _out_dt(out_name)
    kw = dict(scale_a=0.75, scale_b=cp.asarray([1.5], cp.float32), out_dtype=dt)
    if device.info(0).sm_count == 132:
        cfg = _plan_for(a, b, **kw).cfg
        assert cfg.pingpong and (cfg.block_m, cfg.block_n) == (128, 128) and not cfg.d_colmajor, cfg.spec.label
    ref = 1.125 * (a64 @ b64)
    d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw)
    _check(cp, d, ref, FP8_TOL[out_name], f"{fa}x{fb} {m}x{n}x{k} -> {out_name} (one-wave ping-pong)")
    if fa == "e4m3" and fb == "e4m3":
        c = helpers.rand(cp, (m, n), dt, 41)
        bias = helpers.rand(cp, (n,), cp.float32, 42)
        kw.update(c=c, alpha=0.5, beta=-1.25, bias=bias, activation="gelu")
        if device.info(0).sm_count == 132:
            assert _plan_for(a, b, **kw).cfg.pingpong
        d = helpers.run_twice(cp, rawcoop, a, b, (m, n), dt, **kw)
        v = 0.5 * ref - 1.25 * c.astype(cp.float64) + bias
        _check(cp, d, 0.5 * v * (1 + cp.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3))), 8e-3,
               "e4m3 one-wave ping-pong + C, bias, gelu")
