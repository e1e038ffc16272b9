"""How a fuzz problem's arrays are laid out and what rawcoop.gemm is passed,
without a GPU: storage geometry (padding, column-major views, stride-0
batches), the call's keywords, and the kernel configuration gemm should
pick (:func:`predicted_config`, which the CPU tests compare with gemm's own
plan on stub arrays).
"""
from __future__ import annotations

from dataclasses import dataclass

from .cases import DEFAULT_OUT, Problem
from .pool import FP8_NAMES

def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Geom:
    """How a logical (rows, cols) matrix (or a batch of them) is stored: a
    row-major allocation ``alloc`` = (batch?, outer + row_pad, inner_alloc)
    viewed as [..., :outer, :inner], then transposed when ``colmajor``
    (outer = cols, inner = rows); ``broadcast``: a 2-D matrix broadcast to
    ``batch`` with a stride-0 batch.  ``unit``: the inner extent is rounded
    up to a multiple of this many elements (8: 16 bytes of 16-bit data, and
    what C and out have always used; 16 for fp8, 4 for tf32) before ``pad``."""
    rows: int
    cols: int
    colmajor: bool
    batch: int | None            # None: 2-D
    pad: int
    row_pad: int = 0
    broadcast: int = 0
    unit: int = 8

    @property
    def outer(self) -> int:
        return self.cols if self.colmajor else self.rows

    @property
    def inner(self) -> int:
        return self.rows if self.colmajor else self.cols

    @property
    def alloc(self) -> tuple:
        base = (self.outer + self.row_pad, cdiv(self.inner, self.unit) * self.unit + self.pad)
        return base if self.batch is None else (self.batch,) + base

    @property
    def shape(self) -> tuple:
        lead = () if self.batch is None else (self.batch,)
        lead = (self.broadcast,) if self.broadcast else lead
        return lead + (self.rows, self.cols)

    def strides(self, itemsize: int) -> tuple:
        inner_alloc = self.alloc[-1]
        s = (inner_alloc * itemsize, itemsize)
        if self.colmajor:
            s = s[::-1]
        if self.broadcast:
            return (0,) + s
        if self.batch is not None:
            return ((self.outer + self.row_pad) * inner_alloc * itemsize,) + s
        return s


def geometry(p: Problem) -> dict:
    """The storage of a, b and (when passed) c and a padded out."""
    la = {"none": None, "batched": p.batch, "a2d": None, "b2d": p.batch, "b_stride0": p.batch,
          "a_batch1": 1}[p.batch_kind]
    lb = {"none": None, "batched": p.batch, "a2d": p.batch, "b2d": None, "b_stride0": None,
          "a_batch1": p.batch}[p.batch_kind]
    unit = 8 if p.kind == "16bit" else 16 // np_dtype(p.in_dtype).itemsize
    g = {"a": Geom(p.m, p.k, p.a_layout == "col", la, p.a_pad, 3 if la and p.a_pad else 0, unit=unit),
         "b": Geom(p.k, p.n, p.b_layout == "col", lb, p.b_pad, 3 if lb and p.b_pad else 0,
                    broadcast=p.batch if p.batch_kind == "b_stride0" else 0, unit=unit)}
    lc = p.batch if p.batched and not p.c_2d else None
    if p.c_kind != "none":
        g["c"] = Geom(p.m, p.n, p.c_kind == "col", lc, 0)
    if p.out_kind == "padded":
        g["out"] = Geom(p.m, p.n, False, p.batch if p.batched else None, 8, 2 if p.batched else 0)
    return g


def _c_strides(shape: tuple, itemsize: int) -> tuple:
    st, acc = [], itemsize
    for d in reversed(shape):
        st.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(st))


def layouts(p: Problem) -> dict:
    """(shape, strides in bytes, dtype name) of every array ``rawcoop.gemm``
    gets for ``p`` (as :func:`build` makes them): a, b, c, bias, out (exact
    or padded; absent for "none", and for "inplace" it is c), scale_a and
    scale_b (device per-tensor scales: 1-element / 0-d; block scales:
    scale_a M-major as rawcoop.mn_major_scales makes it, scale_b row- or
    column-major, stride-0 for a stride-0 b).  For the CPU tests' stub
    arrays and :func:`predicted_config`."""
    geo = geometry(p)
    out = {}
    for name in ("a", "b"):
        dt = p.operand_dtype(name)
        out[name] = (geo[name].shape, geo[name].strides(np_dtype(dt).itemsize), dt)
    osz = np_dtype(p.out_dtype).itemsize
    if "c" in geo:
        out["c"] = (geo["c"].shape, geo["c"].strides(osz), p.out_dtype)
    if p.bias != "none":
        bsz = np_dtype(p.bias_dtype).itemsize
        out["bias"] = ((p.n,), (bsz,), p.bias_dtype)
    if p.out_kind == "exact":
        out["out"] = (p.out_shape, _c_strides(p.out_shape, osz), p.out_dtype)
    elif p.out_kind == "padded":
        out["out"] = (geo["out"].shape, geo["out"].strides(osz), p.out_dtype)
    if p.scales in ("device",):
        out["scale_a"] = ((1,), (4,), "float32")
    if p.scales in ("device", "mixed"):
        out["scale_b"] = ((), (), "float32")
    if p.scales == "block":
        kb, nb, mp = cdiv(p.k, 128), cdiv(p.n, 128), max(4, cdiv(p.m, 4) * 4)
        lead_a = geo["a"].shape[:-2]
        out["scale_a"] = (lead_a + (p.m, kb), ((kb * mp * 4,) if lead_a else ()) + (4, mp * 4), "float32")
        base = (4, nb * 4) if p.sb_colmajor else (kb * 4, 4)
        lead_b = geo["b"].shape[:-2]
        lead_st = () if not lead_b else (0,) if p.batch_kind == "b_stride0" else (nb * kb * 4,)
        out["scale_b"] = (lead_b + (nb, kb), lead_st + base, "float32")
    return out


class Stub:
    """Shape, strides and dtype only: enough for gemm's layout checks on the CPU."""

    def __init__(self, shape, strides, dtype):
        import numpy as np
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), np.dtype(dtype)
        self.ndim = len(self.shape)


def np_dtype(name: str):
    """numpy dtype of a dtype name (also "e4m3"/"e5m2" and the ml_dtypes names)."""
    from rawcoop.operands import np_dtype as rawcoop_np_dtype
    return rawcoop_np_dtype(FP8_NAMES.get(name, name))


def lowp_kwargs(p: Problem, scale_a=None, scale_b=None) -> dict:
    """The tf32/fp8 options of ``p`` as passed to ``rawcoop.gemm``
    (``precision``, ``a_format``/``b_format``, ``scale_a``/``scale_b``,
    ``scale_mode``); ``scale_a``/``scale_b``: the arrays of device or block
    scales (GPU arrays, or the CPU tests' stubs)."""
    kw = {}
    if p.kind == "tf32":
        kw["precision"] = "tf32"
    if p.fp8_storage == "uint8":
        kw["a_format"], kw["b_format"] = p.in_dtype, p.b_in_dtype
    if p.scales == "block":
        kw.update(scale_a=scale_a, scale_b=scale_b, scale_mode="block")
    elif p.scales == "float":
        kw.update(scale_a=p.scale_a, scale_b=p.scale_b)
    elif p.scales == "device":
        kw.update(scale_a=scale_a, scale_b=scale_b)
    elif p.scales == "mixed":
        kw.update(scale_a=p.scale_a, scale_b=scale_b)
    return kw


def call_kwargs(p: Problem, arrays: dict) -> dict:
    """Everything but a and b that ``rawcoop.gemm`` gets for ``p``, from
    ``arrays`` (:func:`build`'s, or stubs of :func:`layouts`).  tf32/fp8
    outputs of the kind's default dtype are asked for with ``out_dtype=None``."""
    default = DEFAULT_OUT[p.kind]
    kw = dict(c=arrays.get("c"), alpha=p.alpha, beta=p.beta, bias=arrays.get("bias"), activation=p.activation,
              out=arrays.get("out"), out_dtype=None if p.out_dtype == default else np_dtype(p.out_dtype),
              pdl=p.pdl)
    kw.update(p.gemm_kwargs())
    kw.update(lowp_kwargs(p, arrays.get("scale_a"), arrays.get("scale_b")))
    return kw


def predicted_config(p: Problem, sm_count: int = 132):
    """The :class:`~rawcoop.plan.kernel_config.GemmConfig` ``rawcoop.gemm`` should
    pick for ``p`` (no tuned table), without a GPU: gemm's own input-kind
    and layout classification on the drawn dtypes and strides, then the
    planner gemm itself calls (rawcoop.plan.select.choose).  Also
    checks on the CPU what gemm validates about kinds, strides and forced
    options (raises TypeError/ValueError like gemm would).  The CPU tests
    compare it with the configuration of gemm's real plan on stub arrays."""
    from rawcoop import operands
    from rawcoop.plan import kernel_config as gc
    from rawcoop.plan.candidates import Problem
    from rawcoop.plan.select import Forced, choose
    stubs = {name: Stub(*v) for name, v in layouts(p).items()}
    lk = lowp_kwargs(p)
    ka, kb = operands.input_kinds(stubs["a"].dtype.name, stubs["b"].dtype.name, lk.get("a_format"),
                                  lk.get("b_format"), lk.get("precision"))
    lowbits = gc.ELEMENT_BYTES[ka] != 2
    block = p.scale_mode == "block"
    a_kmajor, a_pitch = operands.matrix_layout("a", stubs["a"], "K", "M", require=True if lowbits else None,
                                               why="a: tf32/fp8 need a row-major a")
    b_rowmajor, b_pitch = operands.matrix_layout("b", stubs["b"], "N", "K", prefer_inner=False,
                                           require=False if lowbits else None, why="b: tf32/fp8 need b = bt.T")
    b_kmajor = not b_rowmajor
    for name in ("a", "b"):
        operands.batch_info(name, stubs[name], p.batch)
    use_c = p.beta != 0.0
    c_rowmajor = True
    if use_c:
        c_rowmajor, _ = operands.matrix_layout("c", stubs["c"], "N", "M")
        operands.batch_info("c", stubs["c"], p.batch)
    bias_kind = 0
    if p.bias != "none":
        allowed = ("float32", "float16", "bfloat16") if lowbits else ("float32", p.in_dtype)
        if p.bias_dtype not in allowed:
            raise TypeError(f"bias {p.bias_dtype} with {p.in_dtype} inputs")
        bias_kind = gc.BIAS_TYPES[p.bias_dtype]
    problem = Problem(p.m, p.n, p.k, p.batch, (ka, kb), (a_kmajor, b_kmajor), p.out_dtype, use_c, c_rowmajor,
                      bias_kind, p.activation, block, (a_pitch, b_pitch), sm_count)
    forced = Forced(p.block_n, p.block_m, p.swap, p.cluster, p.splits, p.pingpong, True if p.streamk else None)
    return choose(problem, forced).cfg
