"""GPU: block-scaled fp8 GEMM (``scale_mode="block"``, the DeepSeek-V3 recipe).

The tolerances are derived, not measured; every check prints its errors (run
with -s).

Data: random fp8 values (normal samples rounded by ml_dtypes on the host),
per-(row, k-block) A scales and per-128x128-block B scales 2^U(-8, 8) (16
binades each, so a product spans 2^±16; 2^U(-2, 2) for fp16 output, whose
range would overflow otherwise).  Reference: float64 products of the
dequantised inputs, A·diag-block(SA) and B·block(SB), i.e. exactly the values
the kernel is asked to sum; the input quantisation is not part of the error.

Expected error.  The kernel promotes every 128-deep k-block: the fp8 tensor
core only ever accumulates one k-block (4 chained k32 wgmmas, 128 products)
into its limited-precision accumulator (DeepSeek-V3 reports ~14 retained
bits on H800), which is then scaled and added in fp32 registers.  Assuming 14
bits (truncation, 2^-13 relative per accumulator update, 4 updates per
block), an element's error is at most ~2^-11 of the sum of the absolute
values of its products (``ref_abs``); across k-blocks the promoted partials
add in fp32 (2^-24 each, negligible).  Two checks per result:
  * element-wise: max |d - ref| / ref_abs < u_out + 2^-9 (u_out: the output
    rounding, 2^-8 bf16, 2^-11 fp16, 2^-24 fp32; 2^-9 is 4x the 2^-11
    accumulator bound).  This catches a wrong scale on any one block, row or
    k-block even where other blocks' scales are 2^16 times larger (where a
    Frobenius norm would not see it).
  * relative Frobenius: < 3e-3 (fp32, fp16 out), 6e-3 (bf16 out), as the
    per-tensor fp8 tests.
A wrong row/k-block/column-block scale gives element errors of order 1.
"""
import importlib

import numpy as np
import pytest

import helpers

pytestmark = pytest.mark.gpu

FP8 = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
U_OUT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11, "float32": 2.0 ** -24}
ELEM_TOL = {k: u + 2.0 ** -9 for k, u in U_OUT.items()}
FROB_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}


def _fp8_host(shape, fmt, rng):
    import ml_dtypes
    q = rng.standard_normal(shape).astype(np.float32).astype(getattr(ml_dtypes, FP8[fmt]))
    return q.view(np.uint8), q.astype(np.float64)


def _expand(s, axis, size):
    """Repeat every scale 128 times along ``axis`` and cut to ``size``."""
    return np.take(np.repeat(s, 128, axis=axis), np.arange(size), axis=axis)


class Problem:
    """fp8 a (…, M, K) row-major, b = bt.T (bt (…, N, K) row-major), block scales
    (SA M-major through rawcoop.mn_major_scales, SB (…, NB, KB) row-major), and
    the float64 reference D = A_deq @ B_deq with its |A_deq| @ |B_deq|."""

    def __init__(self, cp, m, n, k, fa="e4m3", fb="e4m3", seed=0, spread=8.0, batch=None, b_batch=True):
        import ml_dtypes
        import rawcoop
        rng = np.random.default_rng(seed)
        la = (batch,) if batch else ()
        lb = (batch,) if batch and b_batch else ()
        kb, nb = -(-k // 128), -(-n // 128)
        a8, a64 = _fp8_host(la + (m, k), fa, rng)
        b8, b64 = _fp8_host(lb + (n, k), fb, rng)
        sa = np.exp2(rng.uniform(-spread, spread, la + (m, kb))).astype(np.float32)
        sb = np.exp2(rng.uniform(-spread, spread, lb + (nb, kb))).astype(np.float32)
        a_deq = a64 * _expand(sa.astype(np.float64), -1, k)
        b_deq = b64 * _expand(_expand(sb.astype(np.float64), -2, n), -1, k)       # (…, N, K)
        A, Bt = cp.asarray(a_deq), cp.asarray(b_deq)
        self.ref = A @ cp.swapaxes(Bt, -1, -2)
        self.ref_abs = cp.abs(A) @ cp.swapaxes(cp.abs(Bt), -1, -2)
        self.a = cp.asarray(a8).view(getattr(ml_dtypes, FP8[fa]))
        self.b = cp.swapaxes(cp.asarray(b8).view(getattr(ml_dtypes, FP8[fb])), -1, -2)
        self.sa_host, self.sb_host = sa, sb
        self.sa = rawcoop.mn_major_scales(cp.asarray(sa))
        self.sb = cp.asarray(sb)
        self.m, self.n, self.k = m, n, k

    def run(self, **kw):
        import rawcoop
        return rawcoop.gemm(self.a, self.b, scale_a=self.sa, scale_b=self.sb, scale_mode="block", **kw)


def _errors(cp, d, ref, ref_abs):
    d64 = d.astype(cp.float64)
    assert bool(cp.isfinite(d64).all()), "non-finite output"
    frob = float(cp.linalg.norm((d64 - ref).ravel()) / cp.linalg.norm(ref.ravel()))
    elem = float(cp.max(cp.abs(d64 - ref) / cp.maximum(ref_abs, 1e-300)))
    return frob, elem


def _rel(cp, d, ref):
    return float(cp.linalg.norm((d.astype(cp.float64) - ref).ravel()) / cp.linalg.norm(ref.ravel()))


def _check(cp, d, ref, ref_abs, out_name, what):
    frob, elem = _errors(cp, d, ref, ref_abs)
    print(f"\n  {what}: relative Frobenius {frob:.3e} (tol {FROB_TOL[out_name]:.1e}), element-wise / sum|products| "
          f"{elem:.3e} (tol {ELEM_TOL[out_name]:.2e})")
    assert frob < FROB_TOL[out_name], f"{what}: relative Frobenius error {frob:.3e}"
    assert elem < ELEM_TOL[out_name], f"{what}: element-wise error {elem:.3e}"
    return frob, elem


SHAPES = [
    (128, 128, 128), (256, 384, 512), (1000, 1000, 1008), (129, 257, 144), (1001, 999, 1040), (127, 255, 16),
    (333, 777, 272), (2049, 2047, 2064), (17, 3000, 4112), (1, 1, 16), (300, 9, 128), (64, 4099, 1296),
    (3000, 5000, 1024), (130, 250, 8208), (4096, 4096, 7168),
]
OUTS = ["bfloat16", "float32", "float16"]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_block_fp8_vs_float64(m, n, k):
    """Ragged M, N and K (K not a multiple of 128: a partial last k-block),
    scales spanning 2^±8 per block, every output dtype."""
    import cupy as cp
    out_name = OUTS[(m + n + k) % 3]
    p = Problem(cp, m, n, k, seed=m + 3 * n + 7 * k, spread=2.0 if out_name == "float16" else 8.0)
    d = p.run(out_dtype=helpers.dtype(out_name))
    assert d.dtype == helpers.dtype(out_name) and d.shape == (m, n)
    _check(cp, d, p.ref, p.ref_abs, out_name, f"block e4m3 {m}x{n}x{k} -> {out_name}")


@pytest.mark.parametrize("fa,fb", [("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")])
def test_block_fp8_mixed_formats(fa, fb):
    import cupy as cp
    p = Problem(cp, 700, 900, 2000, fa, fb, seed=5)
    _check(cp, p.run(out_dtype=cp.float32), p.ref, p.ref_abs, "float32", f"block {fa}x{fb}")


VARIANTS = [dict(_splits=3), dict(_splits=4, _block_n=64), dict(_block_n=64), dict(_block_n=64, _pingpong=True),
            dict(_block_n=64, _pingpong=True, _splits=2), dict(_cluster=2), dict(_cluster=(1, 2)),
            dict(_cluster=(1, 2), _block_n=64, _splits=2), dict(_cluster=2, _splits=3), dict(_group=1),
            dict(_streamk=True, _block_n=128), dict(_streamk=True, _block_n=64)]


@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_block_fp8_kernel_variants(kw):
    """Split-K (each split promotes its own k-blocks), 128x64 tiles, ping-pong,
    both cluster shapes with ghost tiles (9 x 9 tiles of 128: odd), stream-K
    (81 128x128 tiles on all SMs: every tile in pieces, each promoting its own k-blocks)."""
    import cupy as cp
    p = Problem(cp, 1100, 1100, 4096 + 80, seed=11)
    _check(cp, p.run(out_dtype=cp.float32, **kw), p.ref, p.ref_abs, "float32", f"block {kw}")


def test_block_fp8_small_m_runs_unswapped():
    import cupy as cp
    for m in (1, 16, 48, 64):
        p = Problem(cp, m, 3000, 2048 + 16, seed=m)
        _check(cp, p.run(), p.ref, p.ref_abs, "bfloat16", f"block small M = {m}")


def test_block_fp8_tail_wave_split(monkeypatch):
    """One wave of 128x128 tiles plus an 11-tile tail split 8 ways (forced: the cooperative 128x128 tile
    without a cluster and the scheduler's split of the partial last wave, helpers.plan.tail_split; spread,
    scheduler.TAIL_MAX_SPLITS): each split promotes its own k-blocks; right against float64 and
    bit-identical when run again."""
    import cupy as cp
    from rawcoop import device
    from rawcoop.gemm import _plan_for
    from helpers.plan import tail_split
    tail_split(monkeypatch)
    p = Problem(cp, 1664, 1408, 8192, seed=31)
    kw = dict(out_dtype=cp.float32, _block_n=128, _block_m=128, _cluster=1, _pingpong=False, _streamk=False)
    if device.info(0).sm_count == 132:
        dec = _plan_for(p.a, p.b, scale_a=p.sa, scale_b=p.sb, scale_mode="block", **kw).decomposition
        assert (dec.tiles, dec.tiles_dp, dec.splits) == (143, 132, 8), dec
    d1 = p.run(**kw)
    _check(cp, d1, p.ref, p.ref_abs, "float32", "block tail split")
    assert bool(cp.array_equal(d1, p.run(**kw))), "tail split reruns differ"


def test_block_fp8_bit_identical_reruns():
    import cupy as cp
    p = Problem(cp, 1500, 1300, 6000, seed=21)
    for kw in ({}, dict(_splits=4), dict(_block_n=64, _pingpong=True), dict(_cluster=(1, 2))):
        d1 = p.run(out_dtype=cp.float32, **kw)
        d2 = p.run(out_dtype=cp.float32, **kw)
        out = cp.empty_like(d1)
        d3 = p.run(out_dtype=cp.float32, out=out, **kw)
        assert bool(cp.array_equal(d1, d2)) and bool(cp.array_equal(d1, d3)), f"reruns differ: {kw}"


def test_block_fp8_batched_with_epilogue():
    import cupy as cp
    L, m, n, k = 3, 300, 520, 400
    p = Problem(cp, m, n, k, seed=31, spread=4.0, batch=L)
    dt = helpers.dtype("bfloat16")
    c = helpers.rand(cp, (L, m, n), dt, 32)
    bias = helpers.rand(cp, (n,), cp.float32, 33)
    d = p.run(c=c, alpha=0.5, beta=2.0, bias=bias, activation="gelu")
    v = 0.5 * p.ref + 2.0 * c.astype(cp.float64) + bias
    ref = 0.5 * v * (1 + cp.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
    e = _rel(cp, d, ref)
    print(f"\n  block batched + C, bias, gelu: relative Frobenius {e:.3e}")
    assert e < 8e-3
    # b shared by the batch (2-D b and SB), a batched
    q = Problem(cp, m, n, k, seed=34, batch=L, b_batch=False)
    assert q.b.ndim == 2 and q.sb.ndim == 2
    _check(cp, q.run(out_dtype=cp.float32), q.ref, q.ref_abs, "float32", "block batched a, shared b")


def test_block_fp8_uniform_scales_vs_per_tensor():
    """With every block scale equal, block mode computes what per-tensor mode
    does, but promotes every 128-deep block into fp32: its error at large K is
    what the promotion buys (printed; both must meet the fp8 tolerances)."""
    import cupy as cp
    import rawcoop
    m, n, k = 512, 512, 16384
    p = Problem(cp, m, n, k, seed=41, spread=0.0)                        # all scales 2^0 = 1
    f32 = cp.float32
    blk = p.run(out_dtype=f32)
    per = rawcoop.gemm(p.a, p.b, out_dtype=f32)
    _check(cp, blk, p.ref, p.ref_abs, "float32", "block (uniform scales 1), K = 16384")
    ep = _errors(cp, per, p.ref, p.ref_abs)
    print(f"  per-tensor on the same data: relative Frobenius {ep[0]:.3e}, element-wise {ep[1]:.3e}")
    assert ep[0] < FROB_TOL["float32"] * 3


def test_block_fp8_scales_change_in_place():
    import cupy as cp
    import rawcoop
    from rawcoop import launch
    G = importlib.import_module("rawcoop.gemm")
    p = Problem(cp, 640, 384, 2048, seed=51)
    out = cp.empty((640, 384), dtype=cp.float32)
    p.run(out=out, out_dtype=cp.float32)
    kernels, plans = len(launch._kernels), len(G._PLANS)
    for x, y in [(0.5, 4.0), (3.0, 0.125)]:
        p.sa *= x                               # in place: the same buffer, the same layout
        p.sb *= y
        p.ref *= x * y
        p.ref_abs *= x * y
        rawcoop.gemm(p.a, p.b, scale_a=p.sa, scale_b=p.sb, scale_mode="block", out=out, out_dtype=cp.float32)
        _check(cp, out, p.ref, p.ref_abs, "float32", f"scales x{x}, x{y} in place")
    assert len(launch._kernels) == kernels and len(G._PLANS) == plans


def test_mn_major_scales_and_padding_never_read():
    """mn_major_scales' layout; gemm rejects the row-major array; NaN in SA's
    padding (rows M..Mp of each k-block line) and past SB's used blocks is
    never read (TMA bounds SA at M; rows past M are zero-filled)."""
    import cupy as cp
    import rawcoop
    m, n, k = 1001, 300, 1000 + 24
    p = Problem(cp, m, n, k, seed=61)
    kb = -(-k // 128)
    sa = p.sa
    assert sa.shape == (m, kb) and sa.strides == (4, 1004 * 4)
    assert bool(cp.array_equal(sa, cp.asarray(p.sa_host)))
    with pytest.raises(ValueError, match=r"mn_major_scales"):
        rawcoop.gemm(p.a, p.b, scale_a=cp.asarray(p.sa_host), scale_b=p.sb, scale_mode="block")
    buf = cp.full((kb, 1004), cp.nan, dtype=cp.float32)
    buf[:, :m] = cp.asarray(p.sa_host).T
    sb_buf = cp.full((p.sb.shape[0] + 3, kb + 5), cp.nan, dtype=cp.float32)
    sb_buf[:p.sb.shape[0], :kb] = p.sb
    d = rawcoop.gemm(p.a, p.b, scale_a=buf[:, :m].T, scale_b=sb_buf[:p.sb.shape[0], :kb], scale_mode="block",
                     out_dtype=cp.float32)
    _check(cp, d, p.ref, p.ref_abs, "float32", "NaN padding around the scales")
    # 3-D helper: (L, M, KB) -> M-major per batch, 16-byte batch strides
    s3 = rawcoop.mn_major_scales(cp.ones((2, 5, 3), dtype=cp.float64))
    assert s3.dtype == cp.float32 and s3.shape == (2, 5, 3) and s3.strides == (3 * 8 * 4, 4, 8 * 4)


def test_block_fp8_bad_inputs_raise_before_launch(monkeypatch):
    import cupy as cp
    import rawcoop
    p = Problem(cp, 256, 256, 512, seed=71)

    helpers.spy_launches(monkeypatch, fail="a kernel was launched for a bad input")
    out = cp.full((256, 256), cp.nan, dtype=cp.float32)
    bad = [
        (ValueError, "scale_a must be M-major", dict(scale_a=cp.asarray(p.sa_host))),
        (ValueError, r"scale_a has shape \(256, 3\)", dict(scale_a=rawcoop.mn_major_scales(cp.ones((256, 3))))),
        (ValueError, r"scale_b has shape \(4, 2\)", dict(scale_b=cp.ones((4, 2), cp.float32))),
        (TypeError, "scale_b must be a float32 array", dict(scale_b=cp.ones((2, 4), cp.float64))),
        (TypeError, "scale_a must be a float32 GPU array", dict(scale_a=2.0)),
        (ValueError, "needs scale_b", dict(scale_b=None)),
        (ValueError, "no swap-AB kernel", dict(_swap=True)),
        (ValueError, r"_block_n must be one of \(64, 128\)", dict(_block_n=256)),
        (ValueError, "needs _block_n=64", dict(_pingpong=True)),
        (ValueError, "scale_mode must be None", dict(scale_mode="blocks")),
    ]
    for exc, fragment, kw in bad:
        args = dict(scale_a=p.sa, scale_b=p.sb, scale_mode="block", out=out, out_dtype=cp.float32)
        args.update(kw)
        with pytest.raises(exc, match=fragment):
            rawcoop.gemm(p.a, p.b, **args)
    assert bool(cp.isnan(out).all()), "a rejected call wrote the output"
