"""Seeded, reproducible GEMM fuzzer (private; used by tests/test_fuzz_gpu.py
and bench/fuzz.py).

    p = draw(seed, index)          # a Problem: every choice, from (seed, index) alone
    rel_err, tol = run_case(p)     # GPU: fresh inputs, poisoned out, float64 reference
    print(reproducer(p))           # python bench/fuzz.py --seed S --case I  # description

**What is drawn.**  Every problem takes its kernel-shaping options (input
dtype, A/B layout, output dtype, C kind, bias kind, activation, forced
``_swap`` / ``_block_n`` / ``_cluster``) from a *recipe*: a pool of
:data:`POOL_SIZE` recipes built from the seed, each option's values dealt
evenly over the pool and shuffled (so every value of every option is in the
pool, in varied combinations), problem ``i`` using recipe ``i % POOL_SIZE``.
That keeps the number of distinct kernel configurations - each compiled once,
~0.1-1 s, in parallel by :func:`prewarm` - moderate (118 for the first 1000
problems of the default seed, ~140-150 for 3000-4000) while every epilogue
variant is covered.  The
rest is drawn per problem: the shape from a shape class (tiny, tile edges
127/128/129..., primes, random, small M (swap-AB), long K, very long K
65536+, big), the batch kind (2-D, batched, a or b 2-D and broadcast, b with
a stride-0 batch, a with a batch of 1), padding of each operand's contiguous
extent (sizes that are not multiples of 8 elements are always padded, since
TMA needs 16-byte pitches), alpha/beta, a C that is 2-D for a batched result,
``out`` (exact, padded view, none, in place over C), forced ``_splits`` and
``_group``, ``pdl``.  Only combinations ``rawcoop.gemm`` accepts are drawn.
The draw uses only ``random.Random(str).random()`` (stable across Python
versions), never ``hash()``.

**The check** (:func:`run_case`).  Inputs are standard normal (CuPy
RandomState seeded by (seed, index)), A and B scaled by K^-1/4 so that A·B,
C and bias are all O(1) (the epilogue terms then matter to the error and the
activations work in their curved range).  NaN is everywhere the kernel must
neither read nor leave: the padding of every operand and of C, all of C when
it is passed with beta = 0, all of ``out`` before the call, and the memory
around ``out`` (a guard tail after an exact ``out``, the padding of a padded
one).  The reference is float64 on the GPU: ``cupy.matmul`` of the up-cast
inputs, then alpha·AB + beta·C + bias and the activation with the kernel's
formulas (gelu tanh form, silu x·sigmoid(x)).  A case fails when the call
raises, when ``out`` keeps a NaN (or any non-finite value), when anything
outside ``out`` is written (the guard memory; for ``out`` = C in place, C's
padding), or when the relative Frobenius error reaches :data:`TOL` of the
output dtype: the numbers of tests/test_gemm_full_gpu.py (the error is set by
the final rounding, so the input dtype does not enter; float32 output only
up to :data:`FP32_MAX_K`; for an all-zero reference the absolute error is
used).
"""
from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from functools import lru_cache

from ._reference import activation as activation64

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}
"""Relative Frobenius error tolerance by output dtype (tests/test_gemm_full_gpu.py)."""

DEFAULT_SEED = 20240607
POOL_SIZE = 56
FP32_MAX_K = 8192
"""float32 output is drawn only up to this K.  The tensor cores' fp32
accumulation error grows about linearly in K (measured on an H200, 128x256
bf16, no split-K: 2.1e-6 at K = 2048, 9.1e-6 at 8192, 1.9e-5 at 16384, 7.6e-5
at 65536), so TOL["float32"] = 2e-5 of the tests holds with margin only up to
here; longer problems get a 16-bit output (their tolerance is set by the
final rounding, far above the accumulation error)."""

SHAPE_CLASSES = ("tiny", "edge", "prime", "random", "small_m", "long_k", "huge_k", "big")
_SHAPE_WEIGHTS = (10, 22, 17, 21, 14, 9, 5, 2)          # per 100 problems; big rarely because it is slow
BATCH_KINDS = ("none", "batched", "a2d", "b2d", "b_stride0", "a_batch1")
_BATCH_WEIGHTS = (62, 12, 7, 7, 6, 6)
C_KINDS = ("none", "row", "col", "ignored")              # ignored: c passed with beta == 0 (all NaN)
BIAS_KINDS = ("none", "float32", "input")
ACTIVATIONS = (None, "relu", "gelu", "silu")
OUT_KINDS = ("exact", "padded", "none", "inplace")
IN_DTYPES = ("float16", "bfloat16")
OUT_DTYPES = ("float16", "bfloat16", "float32")

_EDGES = (1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385, 511, 512, 513)
_K_EDGES = (1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025)
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 67, 97, 101, 127, 131, 193, 197, 251, 257, 263, 307, 383, 389, 409,
           499, 509, 521, 601, 641, 727, 769, 829, 997, 1009)
_HUGE_K = (65536, 65537, 65599, 70000, 81920, 98305)


@dataclass(frozen=True)
class Problem:
    """One fuzz case; every field is a choice of :func:`draw`."""
    seed: int
    index: int
    recipe: int                 # index into the seed's recipe pool
    shape_class: str
    m: int
    n: int
    k: int
    batch_kind: str             # BATCH_KINDS
    batch: int                  # L (1 when batch_kind == "none")
    in_dtype: str
    a_layout: str               # "row" (K contiguous) or "col" (M contiguous, a transposed view)
    b_layout: str               # "row" (N contiguous) or "col" (K contiguous, b = bt.T)
    a_pad: int                  # extra elements beyond the contiguous extent rounded up to 8
    b_pad: int
    out_dtype: str
    c_kind: str                 # C_KINDS
    c_2d: bool                  # C is (M, N) while the result is batched
    alpha: float
    beta: float
    bias: str                   # BIAS_KINDS ("input": the input dtype)
    activation: str | None
    out_kind: str               # OUT_KINDS
    splits: int | None          # forced _splits
    block_n: int | None         # forced _block_n
    swap: bool | None           # forced _swap
    cluster: int | tuple | None  # forced _cluster: 2 (= 2x1) or (1, 2)
    group: int | None           # forced _group
    pdl: bool
    pingpong: bool | None = None  # forced _pingpong (128x64 / 128x128 tiles only)

    @property
    def batched(self) -> bool:
        """Is the result 3-D?"""
        return self.batch_kind != "none"

    @property
    def out_shape(self) -> tuple:
        return (self.batch, self.m, self.n) if self.batched else (self.m, self.n)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    def gemm_kwargs(self) -> dict:
        """The forced private options exactly as passed to ``rawcoop.gemm``."""
        return dict(_splits=self.splits, _block_n=self.block_n, _swap=self.swap, _cluster=self.cluster,
                    _group=self.group, _pingpong=self.pingpong)


@dataclass(frozen=True)
class _Recipe:
    in_dtype: str
    a_layout: str
    b_layout: str
    out: str                    # "same", "float32", "other16"
    c_kind: str
    bias: str
    activation: str | None
    swap: bool | None
    block_n: int | None
    cluster: int | tuple | None
    pingpong: bool | None = None


class _Rng:
    """Draws from ``random.Random(text).random()`` only: the one generator
    output Python keeps identical across versions for a given seed."""

    def __init__(self, text: str):
        self._r = random.Random(text)

    def random(self) -> float:
        return self._r.random()

    def below(self, n: int) -> int:
        return min(n - 1, int(self._r.random() * n))

    def pick(self, seq):
        return seq[self.below(len(seq))]

    def weighted(self, seq, weights):
        x = self._r.random() * sum(weights)
        for v, w in zip(seq, weights):
            x -= w
            if x < 0:
                return v
        return seq[-1]

    def between(self, lo: int, hi: int) -> int:
        return lo + self.below(hi - lo + 1)

    def shuffle(self, xs: list) -> list:
        for i in range(len(xs) - 1, 0, -1):
            j = self.below(i + 1)
            xs[i], xs[j] = xs[j], xs[i]
        return xs


@lru_cache(maxsize=16)
def recipes(seed: int) -> tuple:
    """The seed's pool of kernel-shaping recipes: each option's values dealt
    evenly over the pool, each option's column shuffled independently."""
    r = _Rng(f"rawcoop-fuzz-pool:{seed}")

    def column(values):
        return r.shuffle([values[i % len(values)] for i in range(POOL_SIZE)])

    cols = dict(
        in_dtype=column(IN_DTYPES), a_layout=column(("row", "col")), b_layout=column(("row", "col")),
        out=column(("same", "float32", "other16")), c_kind=column(C_KINDS + ("row", "col")), bias=column(BIAS_KINDS),
        activation=column(ACTIVATIONS), swap=column((None, None, True, False)),
        block_n=column((None, None, 64, 128, 256, None)), cluster=column((None,) * 7 + (2,)),
        pingpong=column((None, None, None, True, False)),     # appended last: the other columns keep their deal
        cluster_n=column((False, True)))                      # a cluster of 2 along N (A multicast) instead
    pool = []
    for i in range(POOL_SIZE):
        d = {name: col[i] for name, col in cols.items()}
        if d["cluster"] == 2 and d["block_n"] not in (128, 256):
            d["block_n"] = 128 if i % 2 else 256        # clusters need 128- or 256-wide tiles
        if d.pop("cluster_n") and d["cluster"] == 2:
            d["cluster"] = (1, 2)
        if d["pingpong"] is not None and d["block_n"] not in (64, 128):
            d["pingpong"] = None                        # forced only where the tile allows both schedules
        pool.append(_Recipe(**d))
    return tuple(pool)


def _shape(r: _Rng, cls: str) -> tuple[int, int, int]:
    if cls == "tiny":
        return r.between(1, 24), r.between(1, 24), r.between(1, 40)
    if cls == "edge":
        return r.pick(_EDGES), r.pick(_EDGES), r.pick(_K_EDGES)
    if cls == "prime":
        return r.pick(_PRIMES), r.pick(_PRIMES), r.pick(_PRIMES)
    if cls == "random":
        return r.between(1, 700), r.between(1, 700), r.between(1, 1500)
    if cls == "small_m":
        m = r.pick((1, 1, 2, 8, 16, 17, 31, 32, 48, 63, 64, 64, r.between(1, 64)))
        return m, r.between(65, 1600), r.between(1, 2500)
    if cls == "long_k":             # split-K territory
        return r.between(1, 300), r.between(1, 300), r.between(2048, 16384)
    if cls == "huge_k":             # K >= 65536: 64x64, 1xN, a few small tiles
        m, n = r.pick(((64, 64), (1, r.between(65, 1024)), (1, r.between(1, 64)), (r.between(2, 200), 64),
                       (128, 129), (17, 257)))
        return m, n, r.pick(_HUGE_K)
    if cls == "big":
        return r.pick(((2048, 2048, 1024), (1024, 3000, 777), (3001, 1000, 512), (1536, 1536, 2048),
                       (r.between(1000, 2500), r.between(1000, 2500), r.between(256, 1500))))
    raise ValueError(cls)


def draw(seed: int, index: int) -> Problem:
    """Problem ``index`` of the fuzz run ``seed`` (deterministic; any case
    can be drawn alone)."""
    seed, index = int(seed), int(index)
    rec = recipes(seed)[index % POOL_SIZE]
    r = _Rng(f"rawcoop-fuzz:{seed}:{index}")
    cls = r.weighted(SHAPE_CLASSES, _SHAPE_WEIGHTS)
    m, n, k = _shape(r, cls)
    batch_kind = "none" if cls in ("huge_k", "big") else r.weighted(BATCH_KINDS, _BATCH_WEIGHTS)
    batch = 1
    if batch_kind != "none":
        batch = r.pick((2, 3, 4, 5, 7))
        m, n, k = min(m, 640), min(n, 640), min(k, 4096)

    in_dtype = rec.in_dtype
    out_dtype = {"same": in_dtype, "float32": "float32",
                 "other16": "bfloat16" if in_dtype == "float16" else "float16"}[rec.out]
    if out_dtype == "float32" and k > FP32_MAX_K:
        out_dtype = in_dtype
    c_kind = rec.c_kind
    if c_kind == "col" and out_dtype == "float32":
        c_kind = "row"                                   # a float32 c must be row-major
    beta = 0.0
    if c_kind in ("row", "col"):
        beta = r.pick((1.0, 1.0, -0.5, 2.0, 0.25))
    alpha = r.pick((1.0, 1.0, 1.0, 0.5, -1.0, 1.75))
    if c_kind in ("row", "col") and r.random() < 0.05:
        alpha = 0.0                                      # D = act(beta*c + bias)
    c_2d = c_kind != "none" and batch_kind != "none" and r.random() < 0.3
    out_kind = r.weighted(OUT_KINDS, (55, 25, 12, 8))
    if out_kind == "inplace" and not (c_kind == "row" and not c_2d):
        out_kind = "exact"                               # in place needs a row-major c of the result's shape
    a_pad = r.pick((0, 0, 0, 0, 8, 56))
    b_pad = r.pick((0, 0, 0, 0, 8, 56))
    splits = r.weighted((None, 1, 2, 3, 4, 5, 8), (60, 8, 10, 8, 6, 4, 4))
    group = r.weighted((None, 1, 2, 3, 16), (80, 5, 5, 5, 5))
    pdl = r.random() < 0.1
    return Problem(seed=seed, index=index, recipe=index % POOL_SIZE, shape_class=cls, m=m, n=n, k=k,
                   batch_kind=batch_kind, batch=batch, in_dtype=in_dtype, a_layout=rec.a_layout,
                   b_layout=rec.b_layout, a_pad=a_pad, b_pad=b_pad, out_dtype=out_dtype, c_kind=c_kind, c_2d=c_2d,
                   alpha=alpha, beta=beta, bias=rec.bias, activation=rec.activation, out_kind=out_kind,
                   splits=splits, block_n=rec.block_n, swap=rec.swap, cluster=rec.cluster, group=group, pdl=pdl,
                   pingpong=rec.pingpong)


def problems(seed: int, count: int, start: int = 0) -> list[Problem]:
    return [draw(seed, i) for i in range(start, start + count)]


# ---------------------------------------------------------------- description
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def describe(p: Problem) -> str:
    """A readable one-line summary of every choice of ``p``."""
    s = f"{p.m}x{p.n}x{p.k}"
    if p.batched:
        s += f" L={p.batch}({p.batch_kind})"
    s += f" {_SHORT[p.in_dtype]} A={p.a_layout}{f'+{p.a_pad}' if p.a_pad else ''}"
    s += f" B={p.b_layout}{f'+{p.b_pad}' if p.b_pad else ''} -> {_SHORT[p.out_dtype]}"
    if p.c_kind == "ignored":
        s += " c=NaN(beta=0)"
    elif p.c_kind != "none":
        s += f" c={p.c_kind}{'(2d)' if p.c_2d else ''} beta={p.beta:g}"
    if p.alpha != 1.0:
        s += f" alpha={p.alpha:g}"
    if p.bias != "none":
        s += f" bias={_SHORT[p.in_dtype] if p.bias == 'input' else 'f32'}"
    if p.activation:
        s += f" act={p.activation}"
    s += f" out={p.out_kind}"
    for name, v in (("splits", p.splits), ("block_n", p.block_n), ("swap", p.swap), ("cluster", p.cluster),
                    ("group", p.group), ("pingpong", p.pingpong)):
        if v is not None:
            s += f" {name}={v}"
    if p.pdl:
        s += " pdl"
    return s + f" [{p.shape_class}, recipe {p.recipe}]"


def reproducer(p: Problem) -> str:
    """One line: the command that re-runs this case alone, and what it is."""
    return f"python bench/fuzz.py --seed {p.seed} --case {p.index}  # {describe(p)}"


# ---------------------------------------------------------------- geometry
def _round8(x: int) -> int:
    return -(-x // 8) * 8


@dataclass(frozen=True)
class _Geom:
    """How a logical (rows, cols) matrix (or a batch of them) is stored: a
    row-major allocation ``alloc`` = (batch?, outer + row_pad, inner_alloc)
    viewed as [..., :outer, :inner], then transposed when ``colmajor``
    (outer = cols, inner = rows); ``broadcast``: a 2-D matrix broadcast to
    ``batch`` with a stride-0 batch."""
    rows: int
    cols: int
    colmajor: bool
    batch: int | None            # None: 2-D
    pad: int
    row_pad: int = 0
    broadcast: int = 0

    @property
    def outer(self) -> int:
        return self.cols if self.colmajor else self.rows

    @property
    def inner(self) -> int:
        return self.rows if self.colmajor else self.cols

    @property
    def alloc(self) -> tuple:
        base = (self.outer + self.row_pad, _round8(self.inner) + self.pad)
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
    g = {"a": _Geom(p.m, p.k, p.a_layout == "col", la, p.a_pad, 3 if la and p.a_pad else 0),
         "b": _Geom(p.k, p.n, p.b_layout == "col", lb, p.b_pad, 3 if lb and p.b_pad else 0,
                    broadcast=p.batch if p.batch_kind == "b_stride0" else 0)}
    lc = p.batch if p.batched and not p.c_2d else None
    if p.c_kind != "none":
        g["c"] = _Geom(p.m, p.n, p.c_kind == "col", lc, 0)
    if p.out_kind == "padded":
        g["out"] = _Geom(p.m, p.n, False, p.batch if p.batched else None, 8, 2 if p.batched else 0)
    return g


class _Stub:
    """Shape, strides and dtype only: enough for gemm's layout checks on the CPU."""

    def __init__(self, shape, strides, dtype):
        import numpy as np
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), np.dtype(dtype)
        self.ndim = len(self.shape)


def _np_dtype(name: str):
    import numpy as np
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def predicted_config(p: Problem, sm_count: int = 132):
    """The :class:`~rawcoop.gemm_configs.GemmConfig` ``rawcoop.gemm`` should
    pick for ``p`` (no tuned table), without a GPU: gemm's own layout
    classification on the drawn strides, then its swap / tile rules.  Also
    checks on the CPU what gemm validates about strides (raises ValueError
    like gemm would).  An estimate for the CPU tests; the GPU run reports the
    configurations of the real plans."""
    from . import gemm_configs as gc
    from . import operands
    geo = geometry(p)
    in_dt, out_dt = _np_dtype(p.in_dtype), _np_dtype(p.out_dtype)
    stubs = {name: _Stub(gm.shape, gm.strides((out_dt if name in ("c", "out") else in_dt).itemsize),
                         out_dt if name in ("c", "out") else in_dt) for name, gm in geo.items()}
    a_kmajor, _ = operands.matrix_layout("a", stubs["a"], "K", "M")
    b_rowmajor, _ = operands.matrix_layout("b", stubs["b"], "N", "K", prefer_inner=False)
    b_kmajor = not b_rowmajor
    for name in ("a", "b"):
        operands.batch_info(name, stubs[name], p.batch)
    use_c = p.beta != 0.0
    c_rowmajor = True
    if use_c:
        c_rowmajor, _ = operands.matrix_layout("c", stubs["c"], "N", "M")
        if not c_rowmajor and p.out_dtype == "float32":
            raise ValueError("c: a float32 c must be row-major")
        operands.batch_info("c", stubs["c"], p.batch)
    swap = (p.swap if p.swap is not None else p.m <= 64 < p.n) and p.out_dtype != "float32"
    km, kn = (p.n, p.m) if swap else (p.m, p.n)
    ak, bk = (b_kmajor, a_kmajor) if swap else (a_kmajor, b_kmajor)
    block_n = p.block_n or gc.choose_block_n(km, kn, p.batch, sm_count, p.k)
    cluster_m, cluster_n = gc.cluster_dims(p.cluster)
    if cluster_m == 2 and block_n < 128:
        raise ValueError("_cluster=2 needs a 128- or 256-wide tile")
    bias_kind = gc.BIAS_TYPES[p.in_dtype if p.bias == "input" else p.bias] if p.bias != "none" else 0
    pingpong = (p.pingpong if p.pingpong is not None else
                gc.choose_pingpong(block_n, gc.tile_count(km, kn, block_n, p.batch), sm_count))
    extra = {"pingpong": pingpong}
    return gc.GemmConfig(block_n, p.in_dtype == "bfloat16", ak, bk, gc.OUT_TYPES[p.out_dtype], use_c,
                         (not c_rowmajor) != swap if use_c else False, swap, bias_kind, swap,
                         gc.ACTIVATIONS[p.activation], cluster_m=cluster_m, cluster_n=cluster_n, **extra)


# ---------------------------------------------------------------- GPU side
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


def _materialize(cp, gm: _Geom, name: str, rs, scale: float, fill: bool):
    """(view, storage): the storage poisoned with NaN, the view's elements
    standard normal times ``scale`` (unless not ``fill``)."""
    dt = _np_dtype(name)
    store = cp.empty(gm.alloc, dtype=dt)
    view = store[..., :gm.outer, :gm.inner]
    if fill:
        if gm.alloc != view.shape:
            _poison(cp, store, name)
        vals = rs.standard_normal(view.shape, dtype=cp.float32)
        if scale != 1.0:
            vals *= scale
        view[...] = vals.astype(dt)
    if gm.colmajor:
        view = view.swapaxes(-1, -2)
    if gm.broadcast:
        view = cp.broadcast_to(view, (gm.broadcast,) + view.shape)
    return view, store


_GUARD = 64                     # NaN elements after an exact out, in its allocation


def case_seed(p: Problem) -> int:
    return (p.seed * 1_000_003 + p.index * 7919 + 12345) % (2 ** 31 - 1)


def build(p: Problem, fill: bool = True) -> dict:
    """The GPU arrays of case ``p``: a, b, c, bias, out (``None`` where not
    passed) and ``guards``: (storage, region, poison) for the memory around
    ``out`` that must still hold NaN after the call.  ``fill=False``
    allocates only (for planning)."""
    import cupy as cp
    rs = cp.random.RandomState(case_seed(p))
    geo = geometry(p)
    scale = p.k ** -0.25
    arrays = {}
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
        bdt = _np_dtype(p.in_dtype if p.bias == "input" else "float32")
        arrays["bias"] = rs.standard_normal((p.n,), dtype=cp.float32).astype(bdt) if fill else \
            cp.empty((p.n,), dtype=bdt)
    # out, and the memory around it that must stay NaN ("guards": storage, region out may change)
    arrays["out"], arrays["guards"] = None, []
    odt = _np_dtype(p.out_dtype)
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


def reference(p: Problem, arrays: dict):
    """float64 ``act(alpha · a @ b + beta · c + bias)`` on the GPU."""
    import cupy as cp
    r = cp.matmul(arrays["a"].astype(cp.float64), arrays["b"].astype(cp.float64))
    if p.alpha != 1.0:
        r *= p.alpha
    if p.beta != 0.0:
        r = r + p.beta * arrays["c"].astype(cp.float64)
    if arrays["bias"] is not None:
        r = r + arrays["bias"].astype(cp.float64)
    r = _act64(cp, r, p.activation)
    return r.reshape(p.out_shape)


class CaseFailure(AssertionError):
    """A case went wrong in a way other than its error size."""


def call(p: Problem, arrays: dict):
    """``rawcoop.gemm`` on the case's arrays, with every drawn option."""
    import importlib
    gemm = importlib.import_module(__package__ + ".gemm").gemm
    return gemm(arrays["a"], arrays["b"], c=arrays["c"], alpha=p.alpha, beta=p.beta, bias=arrays["bias"],
                activation=p.activation, out=arrays["out"], out_dtype=_np_dtype(p.out_dtype), pdl=p.pdl,
                **p.gemm_kwargs())


def run_case(p: Problem) -> tuple[float, float]:
    """Run case ``p`` on the GPU; returns (relative Frobenius error, tolerance).
    Raises :class:`CaseFailure` when ``out`` is not fully written (NaN left)
    or memory around it is written, and whatever ``rawcoop.gemm`` raises."""
    import cupy as cp
    arrays = build(p)
    ref = reference(p, arrays)          # before the call: in place overwrites c
    d = call(p, arrays)
    if arrays["out"] is not None and d is not arrays["out"]:
        raise CaseFailure("gemm did not return the out array it was given")
    if d.shape != p.out_shape:
        raise CaseFailure(f"result shape {d.shape}, expected {p.out_shape}")
    if d.dtype != _np_dtype(p.out_dtype):
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
    return err, TOL[p.out_dtype]


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


def plan_spec(p: Problem):
    """The KernelSpec of the plan ``rawcoop.gemm`` builds for ``p`` on this
    GPU (inputs allocated, not filled; cluster launches planned without
    their compile, which their plan would force)."""
    import dataclasses
    import importlib
    g_mod = importlib.import_module(__package__ + ".gemm")
    arrays = build(p, fill=False)
    forced = p.gemm_kwargs()
    cluster = forced.pop("_cluster")
    plan = g_mod._plan_for(arrays["a"], arrays["b"], c=arrays["c"], alpha=p.alpha, beta=p.beta,
                           bias=arrays["bias"], activation=p.activation, out_dtype=_np_dtype(p.out_dtype),
                           **forced)
    from . import gemm_configs as gc
    cm, cn = gc.cluster_dims(cluster)
    cfg = plan.cfg if (cm, cn) == (1, 1) else dataclasses.replace(plan.cfg, cluster_m=cm, cluster_n=cn)
    return cfg.spec


def prewarm(probs, jobs: int | None = None, show_progress: bool = False):
    """Compile every kernel configuration ``probs`` will use, in parallel
    worker processes (rawcoop.warmup) into the disk cache, so that the run
    itself only loads cubins.  Returns (distinct specs, warm-up report or
    None when the cache is memory-only or nothing had to be built).
    Planning failures are ignored here (the case itself reports them)."""
    import cupy as cp

    from . import config
    from .warmup import warmup
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
