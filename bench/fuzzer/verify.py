"""Running a fuzz problem on the GPU and checking it against float64.

Inputs are standard normal (CuPy RandomState seeded by (seed, index)), A
and B scaled by K^-1/4 so that A·B, C and bias are all O(1) (the epilogue
terms then matter to the error and the activations work in their curved
range).  fp8 inputs: standard normal times K^-1/4 (per-tensor) and 2^e,
clipped to the format's range, cast with ml_dtypes on the host and copied
as bytes; per-tensor scales u·2^-e with u in [0.25, 4], so the product
stays O(1); block scales 2^U(-6, 6) per (row, 128-K block) of A and per
128x128 block of B, then those of A multiplied by one common factor that
makes the typical |A·B| about 1 (the 12 binades between blocks stay).  ``scale_a`` is made M-major by
``rawcoop.mn_major_scales`` (its padding set to NaN: never read).  NaN is
everywhere the kernel must neither read nor leave: the padding of every
operand and of C, all of C when it is passed with beta = 0, all of ``out``
before the call, and the memory around ``out`` (a guard tail after an exact
``out``, the padding of a padded one).  The reference is float64 on the
GPU: ``cupy.matmul`` of the up-cast inputs (fp8: the dequantised values,
exactly as bench/sanitize.py builds them: the fp8 bytes through a float64
table, times the scales), then alpha·AB + beta·C + bias and the activation
with the kernel's formulas (gelu tanh form, silu x·sigmoid(x)).  A case
fails when the call raises, when ``out`` keeps a NaN (or any non-finite
value), when anything outside ``out`` is written (the guard memory; for
``out`` = C in place, C's padding), or when the relative Frobenius error
reaches the tolerance (:func:`tolerance`): for 16-bit inputs :data:`TOL` of
the output dtype, the numbers of tests/gpu/test_gemm_full.py (the error is
set by the final rounding, so the input dtype does not enter; float32
output only up to problems.FP32_MAX_K; for an all-zero reference the
absolute error is used); for tf32 and fp8 those of
tests/gpu/test_fp8_tf32.py and tests/gpu/test_fp8_block.py.  Block-scaled
cases are also checked element by element as in tests/gpu/test_fp8_block.py
(|d - ref| against :data:`BLOCK_ELEM_TOL` times the sum of the absolute
values of the terms), which sees a wrong scale on one block even where other
blocks' scales are 2^12 times larger.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rawcoop._reference import activation as activation64

from .layout import Geom, call_kwargs, cdiv, geometry, np_dtype
from .cases import Problem, reproducer
from .pool import FP8_NAMES

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}
"""Relative Frobenius error tolerance by output dtype (tests/gpu/test_gemm_full.py)."""

# tf32 / fp8 tolerances: copies of the numbers in tests/helpers/lowp.py (TF32_TOL, FP8_TOL) and
# tests/gpu/test_fp8_block.py (FROB_TOL, ELEM_TOL = U_OUT + 2^-9), which derive them: change them there
# and here together.
TF32_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""tf32 inputs: relative Frobenius error by output dtype (tests/helpers/lowp.py TF32_TOL)."""
FP8_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""fp8 per-tensor, K <= problems.FP8_MAX_K (tests/helpers/lowp.py FP8_TOL)."""
BLOCK_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""Block-scaled fp8, relative Frobenius (tests/gpu/test_fp8_block.py FROB_TOL)."""
BLOCK_ELEM_TOL = {"bfloat16": 2.0 ** -8 + 2.0 ** -9, "float16": 2.0 ** -11 + 2.0 ** -9,
                  "float32": 2.0 ** -24 + 2.0 ** -9}
"""Block-scaled fp8, element-wise: max |d - ref| / (sum of |terms|) (tests/gpu/test_fp8_block.py
ELEM_TOL: the output rounding + 2^-9, 4x the 14-bit accumulator bound); here times
:data:`_ACT_LIPSCHITZ` for gelu/silu (their slope reaches ~1.13), and with the output type's smallest
subnormal as an absolute floor (block scales 2^12 apart put float16 results there)."""
_ACT_LIPSCHITZ = {"gelu": 1.13, "silu": 1.1}
_TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
"""Largest finite value of each fp8 format: the data are clipped to it."""
FP8_NAN = 0x7F                  # a NaN in both e4m3fn and e5m2
BLOCK_SCALE_SPREAD = 6          # block scales 2^U(-6, 6)


_POISON16 = {"float16": 0x7E00, "bfloat16": 0x7FC0}


def _poison(cp, x, name: str):
    """Fill ``x`` (a whole allocation) with NaN."""
    if name in _POISON16:
        x.view(cp.uint16)[...] = _POISON16[name]
    else:
        x[...] = cp.nan


def _is_poison(cp, x, name: str):
    if name in _POISON16:
        return x.view(cp.uint16) == _POISON16[name]
    return cp.isnan(x)


def _orient(cp, gm: Geom, view):
    """The stored [..., :outer, :inner] view as the logical matrix: transposed
    when column-major, broadcast with a stride-0 batch."""
    if gm.colmajor:
        view = view.swapaxes(-1, -2)
    if gm.broadcast:
        view = cp.broadcast_to(view, (gm.broadcast,) + view.shape)
    return view


def _materialize(cp, gm: Geom, name: str, rs, scale: float, fill: bool):
    """(view, storage): the storage poisoned with NaN, the view's elements
    standard normal times ``scale`` (unless not ``fill``)."""
    dt = np_dtype(name)
    store = cp.empty(gm.alloc, dtype=dt)
    view = store[..., :gm.outer, :gm.inner]
    if fill:
        if gm.alloc != view.shape:
            _poison(cp, store, name)
        vals = rs.standard_normal(view.shape, dtype=cp.float32)
        if scale != 1.0:
            vals *= scale
        view[...] = vals.astype(dt)
    return _orient(cp, gm, view), store


_GUARD = 64                     # NaN elements after an exact out, in its allocation


def case_seed(p: Problem) -> int:
    return (p.seed * 1_000_003 + p.index * 7919 + 12345) % (2 ** 31 - 1)


def _fp8_inputs(cp, p: Problem, geo: dict, arrays: dict, fill: bool):
    """fp8 a and b (and their scales) into ``arrays``: standard normal x
    K^-1/4 (per-tensor) x 2^exp, clipped to the format, cast with ml_dtypes
    on the host and copied as bytes into uint8 storage whose padding holds
    NaN bytes; passed as ml_dtypes fp8 views of it or as the uint8 view
    itself (with a_format/b_format).  ``a_bytes``/``b_bytes``: the uint8
    views, oriented like a and b, for the reference."""
    import ml_dtypes
    import numpy as np
    rng = np.random.default_rng(case_seed(p))
    sigma = p.k ** -0.25 if p.scale_mode == "tensor" else 1.0
    for name, fmt, e in (("a", p.in_dtype, p.a_exp), ("b", p.b_in_dtype, p.b_exp)):
        gm = geo[name]
        fp8 = getattr(ml_dtypes, FP8_NAMES[fmt])
        store = cp.empty(gm.alloc, dtype=cp.uint8)
        raw = store[..., :gm.outer, :gm.inner]
        if fill:
            if gm.alloc != raw.shape:
                store.fill(FP8_NAN)
            x = rng.standard_normal(raw.shape, dtype=np.float32)
            x *= np.float32(sigma * 2.0 ** e)
            np.clip(x, -FP8_MAX[fmt], FP8_MAX[fmt], out=x)          # ml_dtypes turns overflow into NaN
            raw[...] = cp.asarray(x.astype(fp8).view(np.uint8))
        op = store.view(fp8)[..., :gm.outer, :gm.inner] if p.fp8_storage == "ml_dtypes" else raw
        arrays[name], arrays[name + "_bytes"] = _orient(cp, gm, op), _orient(cp, gm, raw)
    if p.scales == "block":
        _block_scales(cp, p, arrays, rng, fill)
    elif p.scales in ("device", "mixed"):
        if p.scales == "device":
            arrays["scale_a"] = cp.asarray([p.scale_a], dtype=cp.float32)          # 1-element
        arrays["scale_b"] = cp.asarray(np.float32(p.scale_b))                     # 0-d


def _block_scales(cp, p: Problem, arrays: dict, rng, fill: bool):
    """Block scales 2^U(-6, 6): ``sa_rows`` (…, M, KB) and ``sb_full``
    (…, NB, KB) (b's batch; broadcast for a stride-0 b) for the reference;
    ``scale_a`` the M-major copy rawcoop.mn_major_scales makes (its padding
    set to NaN), ``scale_b`` sb_full (column-major storage when drawn so).
    Those of A share one factor that makes the typical |A·B| about 1."""
    import numpy as np

    from rawcoop.operands import mn_major_scales
    kb, nb = cdiv(p.k, 128), cdiv(p.n, 128)
    lead_a = tuple(arrays["a"].shape[:-2])
    lead_b = tuple(arrays["b"].shape[:-2]) if p.batch_kind != "b_stride0" else ()
    if fill:
        s = BLOCK_SCALE_SPREAD
        sa = np.exp2(rng.uniform(-s, s, lead_a + (p.m, kb))).astype(np.float32)
        sb = np.exp2(rng.uniform(-s, s, lead_b + (nb, kb))).astype(np.float32)
        # mean square of an output element: sigma_a^2 sigma_b^2 sum_kb sa^2 sb^2 (k-block size)
        kcnt = np.minimum(128, p.k - 128 * np.arange(kb)).astype(np.float64)
        ncnt = np.minimum(128, p.n - 128 * np.arange(nb)).astype(np.float64)
        w = (sb.astype(np.float64) ** 2 * ncnt[:, None]).sum(-2) / p.n            # mean over N: (lead_b, KB)
        v = float((sa.astype(np.float64) ** 2 * (w * kcnt)[..., None, :]).sum(-1).mean())
        v *= 4.0 ** (p.a_exp + p.b_exp)
        sa *= np.float32(1.0 / math.sqrt(v))
    else:
        sa = np.ones(lead_a + (p.m, kb), np.float32)
        sb = np.ones(lead_b + (nb, kb), np.float32)
    arrays["sa_rows"] = cp.asarray(sa)
    arrays["scale_a"] = mn_major_scales(arrays["sa_rows"])
    base, mp = arrays["scale_a"].base, max(4, cdiv(p.m, 4) * 4)
    if fill and mp > p.m and base is not None and tuple(base.shape) == lead_a + (kb, mp):
        base[..., p.m:] = cp.nan                       # past M in each k-block line: never read
    sbd = cp.asarray(sb)
    if p.sb_colmajor:
        sbd = cp.ascontiguousarray(sbd.swapaxes(-1, -2)).swapaxes(-1, -2)
    if p.batch_kind == "b_stride0":
        sbd = cp.broadcast_to(sbd, (p.batch, nb, kb))
    arrays["scale_b"] = arrays["sb_full"] = sbd


def build(p: Problem, fill: bool = True) -> dict:
    """The GPU arrays of case ``p``: a, b, c, bias, out (``None`` where not
    passed), scale_a/scale_b where passed as arrays, and ``guards``:
    (storage, region, poison) for the memory around ``out`` that must still
    hold NaN after the call.  ``fill=False`` allocates only (for planning)."""
    import cupy as cp
    rs = cp.random.RandomState(case_seed(p))
    geo = geometry(p)
    arrays = {}
    if p.kind in ("fp8", "block"):
        _fp8_inputs(cp, p, geo, arrays, fill)
    else:
        scale = p.k ** -0.25
        arrays["a"], _ = _materialize(cp, geo["a"], p.in_dtype, rs, scale, fill)
        arrays["b"], _ = _materialize(cp, geo["b"], p.in_dtype, rs, scale, fill)
    arrays["c"] = None
    c_store = None
    if p.c_kind != "none":
        arrays["c"], c_store = _materialize(cp, geo["c"], p.out_dtype, rs, 1.0, fill and p.c_kind != "ignored")
        if p.c_kind == "ignored" and fill:
            _poison(cp, c_store, p.out_dtype)
    arrays["bias"] = None
    if p.bias != "none":
        bdt = np_dtype(p.bias_dtype)
        arrays["bias"] = rs.standard_normal((p.n,), dtype=cp.float32).astype(bdt) if fill else \
            cp.empty((p.n,), dtype=bdt)
    # out, and the memory around it that must stay NaN ("guards": storage, region out may change)
    arrays["out"], arrays["guards"] = None, []
    odt = np_dtype(p.out_dtype)
    size = math.prod(p.out_shape)
    if p.out_kind == "exact":           # C-contiguous, followed by a guard tail in the same allocation
        flat = cp.empty(size + _GUARD, dtype=odt)
        arrays["out"] = flat[:size].reshape(p.out_shape)
        arrays["guards"].append((flat, (slice(0, size),), True))
    elif p.out_kind == "padded":        # a view of a wider (and, batched, taller) allocation
        gm = geo["out"]
        store = cp.empty(gm.alloc, dtype=odt)
        arrays["out"] = store[..., :gm.outer, :gm.inner]
        arrays["guards"].append((store, (Ellipsis, slice(0, p.m), slice(0, p.n)), True))
    elif p.out_kind == "inplace":       # out is c (its padding, if any, holds NaN already)
        arrays["out"] = arrays["c"]
        arrays["guards"].append((c_store, (Ellipsis, slice(0, p.m), slice(0, p.n)), False))
    if fill:
        for store, _, poison in arrays["guards"]:
            if poison:
                _poison(cp, store, p.out_dtype)
    return arrays


def _act64(cp, v, act):
    return activation64(cp, v, act)


def _fp8_values(cp, fmt: str, raw):
    """float64 values of fp8 bytes ``raw`` (any view): a 256-entry table from ml_dtypes."""
    import ml_dtypes
    import numpy as np
    table = cp.asarray(np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, FP8_NAMES[fmt])).astype(np.float64))
    return table[raw.astype(cp.int32)]


def _operands64(cp, p: Problem, arrays: dict):
    """float64 a and b as the kernel is asked to multiply them: fp8 dequantised
    (block scales applied per (row, k-block) and (128-column block, k-block);
    per-tensor scales are applied to the product by :func:`reference`)."""
    if p.kind not in ("fp8", "block"):
        return arrays["a"].astype(cp.float64), arrays["b"].astype(cp.float64)
    a = _fp8_values(cp, p.in_dtype, arrays["a_bytes"])
    b = _fp8_values(cp, p.b_in_dtype, arrays["b_bytes"])
    if p.kind == "block":
        kidx = cp.arange(p.k) // 128
        a = a * arrays["sa_rows"].astype(cp.float64)[..., kidx]                       # (…, M, K)
        sbe = arrays["sb_full"].astype(cp.float64)[..., cp.arange(p.n) // 128, :][..., kidx]   # (…, N, K)
        b = b * cp.swapaxes(sbe, -1, -2)
    return a, b


def reference(p: Problem, arrays: dict, with_bound: bool = False):
    """float64 ``act(alpha · scale_a · scale_b · a @ b + beta · c + bias)``
    on the GPU (fp8: of the dequantised inputs).  With ``with_bound``, also
    the sum of the absolute values of the terms, |alpha|·|a|@|b| + |beta·c| +
    |bias| (an error bound's scale; else None)."""
    import cupy as cp
    a, b = _operands64(cp, p, arrays)
    r = cp.matmul(a, b)
    f = p.alpha * p.scale_a * p.scale_b                  # the per-tensor scales (1 unless fp8 "tensor")
    if f != 1.0:
        r *= f
    bound = cp.matmul(cp.abs(a), cp.abs(b)) * abs(f) if with_bound else None
    if p.beta != 0.0:
        r = r + p.beta * arrays["c"].astype(cp.float64)
        if with_bound:
            bound = bound + abs(p.beta) * cp.abs(arrays["c"].astype(cp.float64))
    if arrays["bias"] is not None:
        r = r + arrays["bias"].astype(cp.float64)
        if with_bound:
            bound = bound + cp.abs(arrays["bias"].astype(cp.float64))
    r = _act64(cp, r, p.activation)
    if with_bound:
        bound = cp.broadcast_to(bound, r.shape).reshape(p.out_shape)
    return r.reshape(p.out_shape), bound


def tolerance(p: Problem) -> float:
    """The relative Frobenius error tolerance of ``p`` (module docstring)."""
    table = {"16bit": TOL, "tf32": TF32_TOL, "fp8": FP8_TOL, "block": BLOCK_TOL}[p.kind]
    return table[p.out_dtype]


def element_tolerance(p: Problem) -> float:
    """Block-scaled only: max |d - ref| / (sum of |terms|) (:data:`BLOCK_ELEM_TOL`)."""
    return BLOCK_ELEM_TOL[p.out_dtype] * _ACT_LIPSCHITZ.get(p.activation, 1.0)


class CaseFailure(AssertionError):
    """A case went wrong in a way other than its error size."""


def call(p: Problem, arrays: dict):
    """``rawcoop.gemm`` on the case's arrays, with every drawn option."""
    import rawcoop
    return rawcoop.gemm(arrays["a"], arrays["b"], **call_kwargs(p, arrays))


def run_case(p: Problem) -> tuple[float, float]:
    """Run case ``p`` on the GPU; returns (relative Frobenius error, tolerance).
    Raises :class:`CaseFailure` when ``out`` is not fully written (NaN left)
    or memory around it is written, or (block-scaled) an element's error
    reaches :func:`element_tolerance`, and whatever ``rawcoop.gemm`` raises."""
    import cupy as cp
    arrays = build(p)
    ref, bound = reference(p, arrays, with_bound=p.kind == "block")    # before the call: in place overwrites c
    d = call(p, arrays)
    if arrays["out"] is not None and d is not arrays["out"]:
        raise CaseFailure("gemm did not return the out array it was given")
    if d.shape != p.out_shape:
        raise CaseFailure(f"result shape {d.shape}, expected {p.out_shape}")
    if d.dtype != np_dtype(p.out_dtype):
        raise CaseFailure(f"result dtype {d.dtype}, expected {p.out_dtype}")
    d64 = d.astype(cp.float64)
    bad = int((~cp.isfinite(d64)).sum())
    if bad:
        raise CaseFailure(f"{bad} of {d.size} output values are NaN/inf (unwritten or corrupted; "
                          "the reference is finite)")
    for store, region, _ in arrays["guards"]:
        keep = _is_poison(cp, store, p.out_dtype)
        keep[region] = True
        if not bool(keep.all()):
            raise CaseFailure(f"{int((~keep).sum())} elements written outside out (in the padding or after "
                              "the end of its allocation)")
    num = float(cp.linalg.norm((d64 - ref).ravel()))
    den = float(cp.linalg.norm(ref.ravel()))
    err = num / den if den > 0 else num
    if bound is not None:
        worst = float(cp.max((cp.abs(d64 - ref) - _TINY[p.out_dtype]) / cp.maximum(bound, 1e-300)))
        etol = element_tolerance(p)
        if not worst < etol:
            raise CaseFailure(f"element-wise error {worst:.3e} of the sum of |terms| >= {etol:.2e} (a wrong "
                              f"block scale?); relative Frobenius error {err:.3e} (tolerance {tolerance(p):.1e})")
    return err, tolerance(p)


@dataclass
class Outcome:
    problem: Problem
    ok: bool
    rel_err: float = math.nan
    tol: float = math.nan
    message: str = ""

    @property
    def ratio(self) -> float:
        return self.rel_err / self.tol if self.tol == self.tol and self.tol > 0 else math.nan

    def line(self) -> str:
        """One line: what went wrong and the reproducer."""
        what = self.message or f"relative error {self.rel_err:.3e} >= tolerance {self.tol:.1e}"
        return f"FAIL case {self.problem.index}: {what} | {reproducer(self.problem)}"


def check(p: Problem) -> Outcome:
    """:func:`run_case`, with every exception turned into a failed outcome."""
    try:
        err, tol = run_case(p)
    except Exception as e:  # noqa: BLE001 - each failure is reported, the run goes on
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")
        return Outcome(p, False, message=msg[:400])
    if not (err < tol):
        return Outcome(p, False, err, tol)
    return Outcome(p, True, err, tol)


def device_ok() -> bool:
    """False once the CUDA context is broken (a kernel fault is sticky)."""
    import cupy as cp
    try:
        cp.cuda.Device().synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


def plan(p: Problem, arrays: dict, with_cluster: bool = True):
    """The plan ``rawcoop.gemm`` builds for ``p`` on ``arrays`` (validated,
    not launched).  ``with_cluster=False`` plans a cluster launch without
    its cluster: a cluster plan compiles its kernel (occupancy query)."""
    from rawcoop.gemm import _plan_for
    kw = call_kwargs(p, arrays)
    kw.pop("out")
    kw.pop("pdl")
    if not with_cluster:
        kw["_cluster"] = None
    return _plan_for(arrays["a"], arrays["b"], **kw)


def plan_spec(p: Problem):
    """The KernelSpec of the plan ``rawcoop.gemm`` builds for ``p`` on this
    GPU (inputs allocated, not filled; cluster launches planned without
    their compile, which their plan would force)."""
    import dataclasses

    from rawcoop.plan import kernel_config as gc
    arrays = build(p, fill=False)
    pl = plan(p, arrays, with_cluster=False)
    cm, cn = gc.cluster_dims(p.cluster)
    cfg = pl.cfg if (cm, cn) == (1, 1) else dataclasses.replace(pl.cfg, cluster_m=cm, cluster_n=cn)
    return cfg.spec


def prewarm(probs, jobs: int | None = None, show_progress: bool = False):
    """Compile every kernel configuration ``probs`` will use, in parallel
    worker processes (rawcoop.warmup) into the disk cache, so that the run
    itself only loads cubins.  Returns (distinct specs, warm-up report or
    None when the cache is memory-only or nothing had to be built).
    Planning failures are ignored here (the case itself reports them)."""
    import cupy as cp

    from rawcoop import config
    from rawcoop.warmup import warmup
    specs = {}
    for p in probs:
        try:
            s = plan_spec(p)
        except Exception:  # noqa: BLE001
            continue
        specs.setdefault(s, None)
    cp.get_default_memory_pool().free_all_blocks()
    report = None
    if specs and not config.cache_in_memory():
        report = warmup(list(specs), jobs=jobs, show_progress=show_progress)
    return list(specs), report


def summary_of(p: Problem) -> dict:
    return asdict(p)
