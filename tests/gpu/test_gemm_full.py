"""GPU: the whole GEMM problem space - four layouts, batched and broadcast
problems, alpha/beta with C, bias, activations, output types, small M with
and without swap-AB - against a float64 reference.

Error metric: relative Frobenius error against float64 math on the same
(16-bit) inputs, C and bias.  Accumulation is fp32, so the error is set by
the final rounding to the output type: u/sqrt(3) relative rms for unit
roundoff u, i.e. ~2.3e-3 for bf16, ~2.8e-4 for fp16.  Tolerances are about
2x that: bf16 5e-3, fp16 7e-4.  fp32 output keeps fp32 accumulation error
(~sqrt(K)·2^-24 relative) and the activations' ex2.approx (2^-22 relative):
tolerance 2e-5.
"""
import numpy as np
import pytest

import helpers
from rawcoop._reference import activation as activation64

pytestmark = pytest.mark.gpu

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}
LAYOUTS = ["TN", "NN", "NT", "TT"]        # first letter: A, second: B; T = K-major ("transposed" BLAS view)
EPILOGUES = ["plain", "alpha_beta_c", "bias", "bias_relu", "bias_gelu", "silu"]


def _dt(name):
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def _rand(cp, shape, dtype, seed, scale=1.0):
    rs = cp.random.RandomState(seed)
    return (rs.standard_normal(shape, dtype=cp.float32) * scale).astype(dtype)


def _operand(cp, rows, cols, kmajor_axis_is_cols, dtype, seed, batch=None):
    """A (rows x cols) matrix (or batch) whose columns are contiguous when
    kmajor_axis_is_cols, else whose rows are (a transposed view)."""
    lead = () if batch is None else (batch,)
    if kmajor_axis_is_cols:
        return _rand(cp, lead + (rows, cols), dtype, seed)
    x = _rand(cp, lead + (cols, rows), dtype, seed)
    return x.swapaxes(-1, -2)


def _layout_operands(cp, layout, m, n, k, dtype, seed, batch=None):
    a = _operand(cp, m, k, layout[0] == "T", dtype, seed, batch)            # A K-major when "T"
    b = _operand(cp, k, n, layout[1] == "N", dtype, seed + 1, batch)        # B K-major (column-major) when "N"
    return a, b


def _act64(cp, v, act):
    return activation64(cp, v, act)


def _reference(cp, a, b, alpha=1.0, beta=0.0, c=None, bias=None, act=None):
    r = alpha * cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
    if c is not None and beta != 0:
        r = r + beta * c.astype(cp.float64)
    if bias is not None:
        r = r + bias.astype(cp.float64)
    return _act64(cp, r, act)


def _err(cp, d, ref):
    return float(cp.linalg.norm((d.astype(cp.float64) - ref).ravel()) / cp.linalg.norm(ref.ravel()))


def _poison(cp, shape, dtype):
    out = cp.empty(shape, dtype=dtype)
    if dtype.itemsize == 2:
        out.view(cp.uint16)[...] = 0x7E00 if dtype.name == "float16" else 0x7FC0
    else:
        out[...] = cp.nan
    return out


def _assert_close(cp, d, ref, out_name):
    e = _err(cp, d, ref)
    assert np.isfinite(e), "non-finite output (unwritten or poisoned elements survived)"
    assert e < TOL[out_name], f"relative Frobenius error {e:.3e} >= {TOL[out_name]:.1e}"


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("out_name", ["same", "float32", "other16"])
@pytest.mark.parametrize("in_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_dtype_epilogue_matrix(layout, in_name, out_name, epilogue):
    import cupy as cp
    import rawcoop
    m, n, k = 333, 517, 264
    seed = hash((layout, in_name, out_name, epilogue)) % 2**30
    dt = _dt(in_name)
    if out_name == "same":
        out_name = in_name
    elif out_name == "other16":
        out_name = "float16" if in_name == "bfloat16" else "bfloat16"
    odt = _dt(out_name)
    # MN-major operands need their contiguous extent padded to 8 elements: slice a padded buffer.
    a, b = _layout_operands(cp, layout, 336, 520, k, dt, seed)
    a, b = a[:m], b[:, :n]
    kw, ref_kw = {}, {}
    if epilogue == "alpha_beta_c":
        c = _rand(cp, (m, 520), odt, seed + 7)[:, :n]        # 16-byte row pitch
        c_before = c.copy()
        kw = dict(c=c, alpha=0.75, beta=-1.25)
        ref_kw = dict(alpha=0.75, beta=-1.25, c=c)
    if epilogue.startswith("bias"):
        bias = _rand(cp, (n,), cp.float32 if seed % 2 else dt, seed + 9)
        kw["bias"] = ref_kw["bias"] = bias
    act = {"bias_relu": "relu", "bias_gelu": "gelu", "silu": "silu"}.get(epilogue)
    kw["activation"] = ref_kw["act"] = act
    out = _poison(cp, (m, n), odt)
    a_before, b_before = a.copy(), b.copy()
    d = rawcoop.gemm(a, b, out=out, out_dtype=odt, **kw)
    assert d is out
    _assert_close(cp, out, _reference(cp, a, b, **ref_kw), out_name)
    assert cp.array_equal(a.view(cp.uint16), a_before.view(cp.uint16))
    assert cp.array_equal(b.view(cp.uint16), b_before.view(cp.uint16))
    if epilogue == "alpha_beta_c":
        assert cp.array_equal(c, c_before), "c was modified"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(1, 1, 8), (7, 300, 40), (129, 130, 72), (1000, 1001, 1000), (4097, 63, 520),
                                   (64, 64, 64), (2048, 2048, 2048)], ids=lambda s: "x".join(map(str, s)))
def test_layouts_ragged_shapes(layout, shape):
    import cupy as cp
    import rawcoop
    m, n, k = shape
    dt = _dt("bfloat16")
    # MN-major operands need their contiguous extent padded to 8 elements: slice a padded buffer.
    a, b = _layout_operands(cp, layout, -(-m // 8) * 8, -(-n // 8) * 8, k, dt, m * 7 + n)
    a, b = a[:m, :], b[:, :n]
    _assert_close(cp, rawcoop.gemm(a, b), _reference(cp, a, b), "bfloat16")


@pytest.mark.parametrize("c_layout", ["row", "col"])
@pytest.mark.parametrize("swap", [False, True])
def test_c_layouts_and_in_place(c_layout, swap):
    import cupy as cp
    import rawcoop
    m, n, k = (48, 704, 128) if swap else (296, 520, 128)
    dt = _dt("float16")
    a = _rand(cp, (m, k), dt, 1)
    b = _rand(cp, (n, k), dt, 2).T
    c = _rand(cp, (m, n), dt, 3) if c_layout == "row" else _rand(cp, (n, m), dt, 3).T
    ref = _reference(cp, a, b, alpha=2.0, beta=0.5, c=c)
    d = rawcoop.gemm(a, b, c=c, alpha=2.0, beta=0.5, _swap=swap)
    _assert_close(cp, d, ref, "float16")
    if c_layout == "row":
        cc = c.copy()
        r = rawcoop.gemm(a, b, c=cc, alpha=2.0, beta=0.5, out=cc, _swap=swap)     # in place
        assert r is cc
        _assert_close(cp, cc, ref, "float16")


def test_beta_zero_does_not_read_c():
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    a, b = _rand(cp, (200, 64), dt, 1), _rand(cp, (64, 136), dt, 2)
    c = _poison(cp, (200, 136), dt)                      # NaNs: must not leak in when beta == 0
    d = rawcoop.gemm(a, b, c=c, beta=0.0)
    _assert_close(cp, d, _reference(cp, a, b), "bfloat16")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_batched_all_layouts(layout):
    import cupy as cp
    import rawcoop
    L, m, n, k = 3, 200, 304, 136
    dt = _dt("float16")
    a, b = _layout_operands(cp, layout, m, n, k, dt, 5, batch=L)
    out = _poison(cp, (L, m, n), dt)
    rawcoop.gemm(a, b, out=out)
    ref = cp.matmul(a, b)
    assert out.shape == ref.shape
    _assert_close(cp, out, _reference(cp, a, b), "float16")


@pytest.mark.parametrize("case", ["2d_a", "2d_b", "a_batch1", "b_batch1", "b_stride0", "c_2d", "c_batched",
                                  "both_batch1"])
def test_broadcasting_matches_cupy(case):
    import cupy as cp
    import rawcoop
    L, m, n, k = 4, 130, 264, 72
    dt = _dt("bfloat16")
    a3, b3 = _rand(cp, (L, m, k), dt, 1), _rand(cp, (L, k, n), dt, 2)
    a2, b2 = _rand(cp, (m, k), dt, 3), _rand(cp, (k, n), dt, 4)
    kw, ref_kw = {}, {}
    a, b = {"2d_a": (a2, b3), "2d_b": (a3, b2), "a_batch1": (a3[:1], b3), "b_batch1": (a3, b3[:1]),
            "b_stride0": (a3, cp.broadcast_to(b2, (L, k, n))), "c_2d": (a3, b3), "c_batched": (a3, b3),
            "both_batch1": (a3[:1], b3[:1])}[case]
    if case.startswith("c_"):
        c = _rand(cp, (m, n) if case == "c_2d" else (L, m, n), dt, 5)
        kw = dict(c=c, beta=1.5)
        ref_kw = dict(c=c, beta=1.5)
    d = rawcoop.gemm(a, b, **kw)
    # cupy.matmul's result shape (computed in float32: CuPy 14's broadcasting
    # matmul path rejects bfloat16 operands, rawcoop does not).
    expect = cp.matmul(a.astype(cp.float32), b.astype(cp.float32))
    assert d.shape == expect.shape and d.dtype == a.dtype
    _assert_close(cp, d, _reference(cp, a, b, **ref_kw), "bfloat16")


def test_batched_with_batch_stride_padding_and_epilogue():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    big = _rand(cp, (5, 160, 96), dt, 1)
    a = big[:, :150, :80]                                  # strided batch and rows
    b = _rand(cp, (5, 80, 120), dt, 2)
    bias = _rand(cp, (120,), cp.float32, 3)
    d = rawcoop.gemm(a, b, bias=bias, activation="gelu", out_dtype=cp.float32)
    _assert_close(cp, d, _reference(cp, a, b, bias=bias, act="gelu"), "float32")


@pytest.mark.parametrize("m", [1, 16, 64])
@pytest.mark.parametrize("swap", [None, False])
@pytest.mark.parametrize("in_name", ["float16", "bfloat16"])
def test_small_m_swap_ab(m, swap, in_name):
    import cupy as cp
    import rawcoop
    n, k = 1000, 520
    dt = _dt(in_name)
    a = _rand(cp, (m, k), dt, m)
    b = _rand(cp, (n, k), dt, m + 1).T
    bias = _rand(cp, (n,), dt, 3)
    c = _rand(cp, (m, n), dt, 4)
    out = _poison(cp, (m, n), dt)
    rawcoop.gemm(a, b, c=c, beta=0.5, bias=bias, activation="relu", out=out, _swap=swap)
    _assert_close(cp, out, _reference(cp, a, b, beta=0.5, c=c, bias=bias, act="relu"), in_name)


def test_small_m_swap_layouts_and_batch():
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    for layout in LAYOUTS:
        a, b = _layout_operands(cp, layout, 32, 520, 200, dt, 11, batch=2)
        _assert_close(cp, rawcoop.gemm(a, b, _swap=True), _reference(cp, a, b), "bfloat16")


def test_zero_size_like_cupy():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    for sa, sb in [((0, 8), (8, 5)), ((5, 8), (8, 0)), ((3, 0, 8), (3, 8, 5)), ((2, 4, 0), (2, 0, 6)),
                   ((4, 0), (0, 6))]:
        a, b = cp.ones(sa, dtype=dt), cp.ones(sb, dtype=dt)
        d = rawcoop.gemm(a, b)
        e = cp.matmul(a, b)
        assert d.shape == e.shape and d.dtype == e.dtype
        assert cp.array_equal(d.astype(cp.float32), e.astype(cp.float32))
    # K == 0 with an epilogue: act(beta * c + bias)
    c = _rand(cp, (4, 6), dt, 1)
    bias = _rand(cp, (6,), cp.float32, 2)
    d = rawcoop.gemm(cp.ones((4, 0), dt), cp.ones((0, 6), dt), c=c, beta=2.0, bias=bias, activation="relu")
    ref = cp.maximum(2.0 * c.astype(cp.float64) + bias, 0)
    _assert_close(cp, d, ref, "float16")


# ---------------------------------------------------------------- bad input catalogue
def _bad_inputs(cp):
    f16, bf16 = _dt("float16"), _dt("bfloat16")
    a = _rand(cp, (64, 64), f16, 1)
    b = _rand(cp, (64, 64), f16, 2)
    a3 = _rand(cp, (2, 64, 64), f16, 3)
    b3 = _rand(cp, (3, 64, 64), f16, 4)
    odd = _rand(cp, (64, 60), f16, 5)
    cases = [
        ("a float32", TypeError, "dtype", (a.astype(cp.float32), b), {}),
        ("a int8", TypeError, "dtype", (a.astype(cp.int8), b), {}),
        ("mixed dtypes", TypeError, "same dtype", (a, b.astype(bf16)), {}),
        ("numpy a", TypeError, "cupy.ndarray", (np.zeros((4, 8), np.float16), b), {}),
        ("list b", TypeError, "cupy.ndarray", (a, [[1.0]]), {}),
        ("1-D a", ValueError, "2-D", (a[0], b), {}),
        ("4-D b", ValueError, "2-D", (a, b.reshape(1, 1, 64, 64)), {}),
        ("K mismatch", ValueError, "shape mismatch", (a[:, :32], b), {}),
        ("batch mismatch", ValueError, "batch mismatch", (a3, b3), {}),
        ("no unit stride", ValueError, "unit stride", (a[::2, ::2], b[:32]), {}),
        ("row pitch not 16B", ValueError, "multiple of 16 bytes", (odd[:, :50], _rand(cp, (50, 64), f16, 6)), {}),
        ("misaligned base", ValueError, "16-byte aligned", (a.ravel()[4:4 + 64 * 56].reshape(64, 56),
                                                             _rand(cp, (56, 64), f16, 7)), {}),
        ("out shape", ValueError, "out has shape", (a, b), dict(out=cp.empty((64, 65), f16))),
        ("out dtype", TypeError, "out has dtype", (a, b), dict(out=cp.empty((64, 64), cp.float32))),
        ("out numpy", TypeError, "cupy.ndarray", (a, b), dict(out=np.empty((64, 64), np.float16))),
        ("bad out_dtype", TypeError, "out_dtype", (a, b), dict(out_dtype=cp.int32)),
        ("c shape", ValueError, "c has shape", (a, b), dict(c=cp.empty((64, 63), f16), beta=1.0)),
        ("c dtype", TypeError, "c has dtype", (a, b), dict(c=cp.empty((64, 64), cp.float32), beta=1.0)),
        ("beta without c", ValueError, "needs c", (a, b), dict(beta=1.0)),
        ("bias shape", ValueError, "bias has shape", (a, b), dict(bias=cp.zeros((63,), cp.float32))),
        ("bias dtype", TypeError, "bias has dtype", (a, b), dict(bias=cp.zeros((64,), cp.float64))),
        ("bias strided", ValueError, "contiguous", (a, b), dict(bias=cp.zeros((128,), cp.float32)[::2])),
        ("activation", ValueError, "activation", (a, b), dict(activation="tanh")),
        ("alpha not a number", TypeError, "alpha", (a, b), dict(alpha="x")),
    ]
    return cases


def test_bad_input_catalogue_raises_before_launch(monkeypatch):
    import cupy as cp
    import rawcoop

    helpers.spy_launches(monkeypatch, fail="a kernel was launched for a bad input")
    cases = _bad_inputs(cp)
    assert len(cases) >= 20
    for name, exc, match, args, kw in cases:
        out = kw.get("out")
        if out is not None and isinstance(out, cp.ndarray):
            before = out.copy()
        with pytest.raises(exc, match=match):
            rawcoop.gemm(*args, **kw)
        if out is not None and isinstance(out, cp.ndarray):
            assert cp.array_equal(out.view(cp.uint8), before.view(cp.uint8)), f"{name}: out was written"
