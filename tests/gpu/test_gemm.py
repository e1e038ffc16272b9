"""GPU: rawcoop.gemm (TN layout) against a float64 reference.

Error metric: relative Frobenius error ||D - R||_F / ||R||_F, R computed in
float64 from the same 16-bit inputs.  Accumulation is fp32 (error ~ sqrt(K)
* 2^-24, negligible), so the error is dominated by rounding the output to the
16-bit type: for round-to-nearest with unit roundoff u the relative rms error
is about u / sqrt(3).  bf16 (8-bit significand, u = 2^-8): ~2.3e-3 expected;
fp16 (11-bit, u = 2^-11): ~2.8e-4.  Tolerances are ~2x those: 5e-3 and 7e-4.
A missing tile, a wrong k-block or a swapped fragment gives errors of order 1.
"""
import numpy as np
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 7e-4, "bfloat16": 5e-3}

# >= 60 shapes (M, N, K).  K must keep row pitches 16-byte aligned (K % 8 == 0).
SHAPES = [
    # exact tiles
    (128, 128, 64), (128, 256, 64), (256, 256, 128), (256, 512, 256), (1024, 1024, 1024),
    (2048, 2048, 512), (4096, 4096, 4096),
    # ragged M, N, K (not multiples of 128 / 256 / 64)
    (129, 130, 72), (127, 255, 136), (300, 500, 200), (1000, 1000, 1000), (1001, 999, 1000),
    (333, 777, 264), (513, 257, 520), (1100, 1300, 1480), (2049, 2047, 2056), (3000, 5000, 1000),
    (4095, 4097, 4104), (555, 2222, 3336), (640, 640, 648), (129, 129, 8), (257, 383, 72),
    # K smaller than one k-block
    (256, 256, 8), (200, 300, 16), (512, 512, 24), (130, 260, 40), (1024, 1024, 56), (64, 64, 32),
    # M or N smaller than 64
    (1, 256, 256), (7, 300, 512), (33, 64, 128), (63, 1000, 64), (256, 1, 64), (256, 9, 64),
    (300, 63, 128), (1, 1, 8), (5, 7, 16), (17, 3, 24), (48, 48, 48), (64, 8, 8),
    # N not a multiple of 8 (output through a padded buffer)
    (100, 100, 64), (257, 129, 128), (1000, 1001, 200), (31, 4099, 64),
    # very tall / very wide
    (16384, 64, 256), (64, 16384, 256), (8192, 8, 1024), (8, 8192, 1024), (65536, 128, 64),
    (128, 65536, 64), (32768, 256, 512), (200, 20000, 128),
    # long K
    (128, 128, 16384), (256, 384, 32768), (130, 250, 8200), (1024, 512, 65536),
    # many tiles, partial last wave
    (4096, 8192, 1024), (6000, 6000, 512), (8192, 4096, 264), (2176, 4352, 640), (3968, 7936, 128),
    # the big one
    (8192, 8192, 8192),
]


_data = helpers.rand          # fresh normal data


def _check(a, b, d, dtype_name):
    import cupy as cp
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    err = float(cp.linalg.norm(d.astype(cp.float64) - ref) / cp.linalg.norm(ref))
    assert np.isfinite(err), "non-finite output (unwritten or poisoned elements survived)"
    assert err < TOL[dtype_name], f"relative Frobenius error {err:.3e} >= {TOL[dtype_name]:.1e}"
    return err


_dtype = helpers.dtype


def _poisoned(cp, shape, dtype):
    out = cp.empty(shape, dtype=dtype)
    out.view(cp.uint16)[...] = 0x7E00 if dtype.name == "float16" else 0x7FC0   # NaN
    return out


def test_shape_count():
    assert len(set(SHAPES)) >= 60


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_tn_against_float64(shape, dtype_name):
    import cupy as cp
    import rawcoop
    m, n, k = shape
    dt = _dtype(dtype_name)
    seed = (m * 1000003 + n * 1009 + k) % 2**31
    a = _data(cp, (m, k), dt, seed)
    bt = _data(cp, (n, k), dt, seed + 1)
    out = _poisoned(cp, (m, n), dt)
    rawcoop.gemm(a, bt.T, out=out)
    _check(a, bt.T, out, dtype_name)


@pytest.mark.parametrize("block_n", [128, 256])
@pytest.mark.parametrize("group", [1, 3, 8, 64])
def test_every_config_and_raster_group(block_n, group):
    import cupy as cp
    import rawcoop
    dt = _dtype("bfloat16")
    a = _data(cp, (1500, 520), dt, 1)
    bt = _data(cp, (2100, 520), dt, 2)
    out = _poisoned(cp, (1500, 2100), dt)
    rawcoop.gemm(a, bt.T, out=out, _block_n=block_n, _group=group)
    _check(a, bt.T, out, "bfloat16")


def test_returned_array_without_out():
    import cupy as cp
    import rawcoop
    dt = _dtype("float16")
    a = _data(cp, (300, 96), dt, 5)
    bt = _data(cp, (203, 96), dt, 6)
    d = rawcoop.gemm(a, bt.T)
    assert d.shape == (300, 203) and d.dtype == dt and d.flags.c_contiguous
    _check(a, bt.T, d, "float16")


def test_strided_operands_no_copy():
    """Row pitches larger than K (slices of bigger arrays) go straight to TMA."""
    import cupy as cp
    import rawcoop
    dt = _dtype("bfloat16")
    abig = _data(cp, (700, 1024), dt, 8)
    btbig = _data(cp, (900, 1024), dt, 9)
    a, bt = abig[:, :600], btbig[:, :600]
    d = rawcoop.gemm(a, bt.T)
    _check(a, bt.T, d, "bfloat16")


def test_bit_identical_runs():
    import cupy as cp
    import rawcoop
    dt = _dtype("bfloat16")
    a = _data(cp, (3000, 4000), dt, 11)
    bt = _data(cp, (5000, 4000), dt, 12)
    d1 = rawcoop.gemm(a, bt.T)
    d2 = rawcoop.gemm(a, bt.T)
    assert cp.array_equal(d1.view(cp.uint16), d2.view(cp.uint16))


def test_non_default_stream():
    import cupy as cp
    import rawcoop
    dt = _dtype("float16")
    a = _data(cp, (2000, 1000), dt, 13)
    bt = _data(cp, (3000, 1000), dt, 14)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        out = _poisoned(cp, (2000, 3000), dt)
        rawcoop.gemm(a, bt.T, out=out)
    s.synchronize()
    _check(a, bt.T, out, "float16")


def test_k_zero_and_empty():
    import cupy as cp
    import rawcoop
    dt = _dtype("bfloat16")
    a = cp.empty((5, 0), dtype=dt)
    b = cp.empty((0, 7), dtype=dt)
    d = rawcoop.gemm(a, b)
    assert d.shape == (5, 7) and not bool(cp.any(d.astype(cp.float32)))
    assert rawcoop.gemm(cp.empty((0, 8), dtype=dt), cp.empty((16, 8), dtype=dt).T).shape == (0, 16)


def test_rejects_bad_input_before_launch():
    import cupy as cp
    import rawcoop
    f16 = _dtype("float16")
    a = _data(cp, (64, 64), f16, 1)
    bt = _data(cp, (64, 64), f16, 2)
    with pytest.raises(TypeError, match="dtype"):
        rawcoop.gemm(a.astype(cp.float32), bt.T)
    with pytest.raises(TypeError, match="same dtype"):
        rawcoop.gemm(a, bt.T.astype(_dtype("bfloat16")))
    with pytest.raises(TypeError, match="cupy.ndarray"):
        rawcoop.gemm(np.zeros((4, 8), np.float16), bt.T)
    with pytest.raises(ValueError, match="shape mismatch"):
        rawcoop.gemm(a[:, :32], bt.T)
    with pytest.raises(ValueError, match="2-D"):
        rawcoop.gemm(a[0], bt.T)
    with pytest.raises(ValueError, match="unit stride"):
        rawcoop.gemm(a[:, ::2], bt.T[::2])
    odd = _data(cp, (64, 60), f16, 3)                      # 120-byte rows
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        rawcoop.gemm(odd[:, :50], _data(cp, (64, 50), f16, 4).T)
    with pytest.raises(ValueError, match="16-byte aligned"):
        rawcoop.gemm(a.ravel()[4:4 + 64 * 56].reshape(64, 56), _data(cp, (64, 56), f16, 5).T)
    out_bad = cp.empty((64, 65), dtype=f16)
    with pytest.raises(ValueError, match="out has shape"):
        rawcoop.gemm(a, bt.T, out=out_bad)
    # An `out` TMA cannot store into (here column-major) still gets the right
    # answer, through a padded buffer and a copy.
    out_f = cp.empty((64, 64), dtype=f16).T
    assert rawcoop.gemm(a, bt.T, out=out_f) is out_f
    _check(a, bt.T, out_f, "float16")
