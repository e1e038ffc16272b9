"""GPU operands of the low-precision kernels: fp8 made on the host with
ml_dtypes, tf32 / fp8 operand pairs with their float64 values, and the
tolerances of the tf32 and per-tensor fp8 GEMMs (derived in the docstring of
tests/gpu/test_fp8_tf32.py)."""
import numpy as np

from helpers import rand

TF32_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""tf32 inputs: relative Frobenius error against float64 of the fp32 inputs, by output dtype."""
FP8_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""Per-tensor fp8, K <= 8192: relative Frobenius error against float64 of the fp8 values, by output dtype."""
FP8 = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
"""Short fp8 format names -> ml_dtypes names."""


def fp8_host(shape, fmt, seed, spread=1.0):
    """Random fp8 values made on the host with ml_dtypes: (uint8 bytes, float64 values)."""
    import ml_dtypes
    x = (np.random.default_rng(seed).standard_normal(shape) * spread).astype(np.float32)
    q = x.astype(getattr(ml_dtypes, FP8[fmt]))
    return q.view(np.uint8), q.astype(np.float64)


def fp8_pair(cp, m, n, k, fa, fb, seed, batch=None):
    """a (M, K) row-major and b = bt.T (bt (N, K) row-major) as ml_dtypes fp8
    CuPy arrays (uint8 copies viewed as fp8), with their float64 values."""
    import ml_dtypes
    lead = (batch,) if batch else ()
    a8, a64 = fp8_host(lead + (m, k), fa, seed)
    b8, b64 = fp8_host(lead + (n, k), fb, seed + 1)
    a = cp.asarray(a8).view(getattr(ml_dtypes, FP8[fa]))
    bt = cp.asarray(b8).view(getattr(ml_dtypes, FP8[fb]))
    return a, bt.swapaxes(-1, -2), cp.asarray(a64), cp.asarray(b64).swapaxes(-1, -2)


def lowp_operands(cp, kind, m, n, k, seed, scales):
    """a (M, K) and b = bt.T for ``kind`` "tf32" (float32; seeds seed, seed + 1)
    or fp8 "FA" / "FAxFB" (ml_dtypes fp8; seed + 2), their float64 values (fp8:
    times the per-tensor ``scales``), gemm's keywords for the kind and its
    tolerance table."""
    if kind == "tf32":
        a = rand(cp, (m, k), cp.float32, seed)
        b = rand(cp, (n, k), cp.float32, seed + 1).T
        return a, b, a.astype(cp.float64), b.astype(cp.float64), dict(precision="tf32"), TF32_TOL
    fa, fb = (kind.split("x") * 2)[:2]
    a, b, a64, b64 = fp8_pair(cp, m, n, k, fa, fb, seed + 2)
    sa, sb = scales
    return a, b, a64 * sa, b64 * sb, dict(scale_a=sa, scale_b=sb), FP8_TOL
