"""The benchmark's input data: normal-distributed operands in any layout, and
fp8 (e4m3) operands quantised on the GPU.

Both sides of a comparison get the same arrays.  Normal data because power,
and so the clock, depends on the data (zeros or constants run faster than
anything an application feeds).  fp8 data: normal samples scaled so that
max |x| = 448 (per-tensor amax scaling), rounded to e4m3 on the GPU by
nearest value, ties to even, from ml_dtypes' table of float8_e4m3fn values
(bit-identical to ml_dtypes' cast: :func:`quantize_e4m3`); the
dequantisation scale amax/448 goes to both sides.
"""
from __future__ import annotations

E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value: the fp8 data are scaled so that max |x| is this."""

KINDS = ("bf16", "fp16", "e4m3", "tf32")
"""Input kinds of :meth:`Data.operands`: 16-bit (any layout), fp8 e4m3 per-tensor scaled and tf32 (TN)."""
IN_BYTES = {"bf16": 2, "fp16": 2, "e4m3": 1, "tf32": 4}


def e4m3_table():
    """(values, codes): the finite float8_e4m3fn values as float32 in
    ascending order and their uint8 codes, from ml_dtypes (-0 left out)."""
    import ml_dtypes
    import numpy as np
    codes = np.arange(256, dtype=np.uint8)
    vals = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    keep = np.isfinite(vals) & ~((vals == 0) & np.signbit(vals))
    order = np.argsort(vals[keep], kind="stable")
    return vals[keep][order], codes[keep][order]


def quantize_e4m3(xp, x, table=None):
    """uint8 e4m3 codes of float32 ``x`` (clipped to +-448): the nearest
    e4m3 value, ties to the even code (round to nearest even, as ml_dtypes'
    ``astype(float8_e4m3fn)``), -0 for negative values that round to zero.
    ``xp`` is numpy or cupy, so the GPU quantises with the host's table and
    the CPU tests check it bit for bit against ml_dtypes."""
    vals, codes = table if table is not None else e4m3_table()
    vals, codes = xp.asarray(vals), xp.asarray(codes)
    x = xp.clip(xp.asarray(x, dtype=xp.float32), -E4M3_MAX, E4M3_MAX)
    mids = (vals[1:] + vals[:-1]) * xp.float32(0.5)          # exact: e4m3 has 3 mantissa bits
    n = mids.shape[0]
    idx = xp.searchsorted(mids, x, side="left")              # mids[idx-1] < x <= mids[idx]
    tie = (idx < n) & (x == mids[xp.minimum(idx, n - 1)])
    up = xp.minimum(idx + 1, n)
    pick_up = tie & ((codes[idx] & 1) == 1)
    fi = xp.where(pick_up, up, idx)
    out = codes[fi]
    return xp.where((vals[fi] == 0) & xp.signbit(x), xp.uint8(0x80), out).astype(xp.uint8)


class Data:
    """Operands on the GPU of ``cp`` (CuPy), seeded: the same seed gives the same array."""

    def __init__(self, cp):
        import ml_dtypes
        import numpy as np
        self.cp, self.np = cp, np
        self.dtypes = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
        self._e4m3 = None

    def rand(self, shape, dt, seed):
        """Standard normal samples of ``shape``, drawn in float32, cast to ``dt``."""
        rs = self.cp.random.RandomState(seed)
        return rs.standard_normal(shape, dtype=self.cp.float32).astype(dt)

    def operand_a(self, shape, layout, dt, seed):
        """A (L, M, K) or (M, K): row-major for T, a transposed view of (K, M) for N."""
        m, k, L = shape.m, shape.k, shape.batch
        lead = (L,) if L > 1 else ()
        if layout[0] == "T":
            return self.rand(lead + (m, k), dt, seed)
        return self.cp.swapaxes(self.rand(lead + (k, m), dt, seed), -1, -2)

    def operand_b(self, shape, layout, dt, seed):
        """B (L, K, N) or (K, N): a transposed view of (N, K) for N, row-major for T."""
        n, k, L = shape.n, shape.k, shape.batch
        lead = (L,) if L > 1 else ()
        if layout[1] == "N":
            return self.cp.swapaxes(self.rand(lead + (n, k), dt, seed), -1, -2)
        return self.rand(lead + (k, n), dt, seed)

    def fp8_operand(self, rows: int, cols: int, seed: int):
        """(uint8 e4m3 codes, row-major (rows, cols); dequantisation scale as
        a float32-representable float): normal samples x, scaled by
        448 / max|x| and rounded to e4m3 on the GPU (quantize_e4m3), so that
        scale * value ~ x."""
        cp, np = self.cp, self.np
        if self._e4m3 is None:
            vals, codes = e4m3_table()
            self._e4m3 = (cp.asarray(vals), cp.asarray(codes))
        x = cp.random.RandomState(seed).standard_normal((rows, cols), dtype=cp.float32)
        amax = float(cp.abs(x).max())
        mul = cp.float32(E4M3_MAX / amax)
        q = cp.empty((rows, cols), dtype=cp.uint8)
        xf, qf = x.ravel(), q.ravel()
        step = 1 << 24                                   # bounded temporaries (searchsorted's int64 indices)
        for lo in range(0, xf.size, step):
            qf[lo:lo + step] = quantize_e4m3(cp, xf[lo:lo + step] * mul, self._e4m3)
        del x, xf
        return q, float(np.float32(amax / E4M3_MAX))

    def e4m3_values(self):
        """The float32 value of every e4m3 code (index with int32 codes): ml_dtypes' table on the GPU."""
        import ml_dtypes
        np = self.np
        return self.cp.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32))

    def operands(self, kind: str, layout: str, shape, seed: int):
        """(a, b, gemm keywords, output dtype, a64, b64) of one problem of
        input ``kind`` (:data:`KINDS`): normal data, or e4m3 quantised per
        tensor with its dequantisation scales as gemm's scale_a / scale_b,
        so that a64 @ b64 (float64) is the exact product."""
        cp = self.cp
        if kind in ("bf16", "fp16"):
            dt = self.dtypes[kind]
            x, y = self.operand_a(shape, layout, dt, seed), self.operand_b(shape, layout, dt, seed + 1)
            return x, y, {}, dt, x.astype(cp.float64), y.astype(cp.float64)
        if kind == "tf32":
            x, y = self.operand_a(shape, "TN", cp.float32, seed), self.operand_b(shape, "TN", cp.float32, seed + 1)
            return x, y, {"precision": "tf32"}, self.np.dtype(self.np.float32), x.astype(cp.float64), \
                y.astype(cp.float64)
        if kind != "e4m3":
            raise ValueError(f"input kind {kind!r}: use one of {', '.join(KINDS)}")
        values = self.e4m3_values()
        (qa, sa), (qb, sb) = self.fp8_operand(shape.m, shape.k, seed), self.fp8_operand(shape.n, shape.k, seed + 1)
        a64 = values[qa.astype(cp.int32)].astype(cp.float64) * sa
        bt64 = values[qb.astype(cp.int32)].astype(cp.float64) * sb
        bf16 = self.dtypes["bf16"]
        kw = {"a_format": "e4m3", "b_format": "e4m3", "scale_a": sa, "scale_b": sb, "out_dtype": bf16}
        return qa, qb.T, kw, bf16, a64, bt64.T
