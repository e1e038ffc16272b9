"""Seeded, reproducible GEMM fuzzer (private; used by tests/test_fuzz_gpu.py
and bench/fuzz.py).

    p = draw(seed, index)          # a Problem: every choice, from (seed, index) alone
    rel_err, tol = run_case(p)     # GPU: fresh inputs, poisoned out, float64 reference
    print(reproducer(p))           # python bench/fuzz.py --seed S --case I  # description

**What is drawn.**  Every problem takes its kernel-shaping options (input
kind and dtype, A/B layout, output dtype, C kind, bias kind, activation,
forced ``_swap`` / ``_block_n`` / ``_cluster`` / ``_pingpong``) from a
*recipe*: a pool of :data:`POOL_SIZE` recipes built from the seed, each
option's values dealt evenly over the pool and shuffled (so every value of
every option is in the pool, in varied combinations), problem ``i`` using
recipe ``i % POOL_SIZE``.  That keeps the number of distinct kernel
configurations - each compiled once, ~0.1-1 s, in parallel by
:func:`prewarm` - moderate (105 for the first 1000 problems of the default
seed, 100-115 for others) while every epilogue variant is covered.  The rest is drawn per
problem: the shape from a shape class (tiny, tile edges 127/128/129...,
primes, random, small M (swap-AB), long K, very long K 65536+, big), the
batch kind (2-D, batched, a or b 2-D and broadcast, b with a stride-0 batch,
a with a batch of 1), padding of each operand's contiguous extent (extents
that are not a multiple of 16 bytes are always padded, since TMA needs
16-byte pitches), alpha/beta, a C that is 2-D for a batched result, ``out``
(exact, padded view, none, in place over C), forced ``_splits`` and
``_group``, ``pdl``.  Only combinations ``rawcoop.gemm`` accepts are drawn.
The draw uses only ``random.Random(str).random()`` (stable across Python
versions), never ``hash()``.

**Input kinds** (:data:`INPUT_KINDS`, one recipe column dealt
6:1:1:1:1:1, appended after the others).  It turns about 45 % of the
recipes into tf32 / fp8 ones *by re-interpretation*: the other columns keep
their deal, so the 16-bit recipes (and every problem drawn from them) are
what they were before tf32/fp8 existed.  The re-interpreted recipes form
three groups of a handful each - tf32 (float32 inputs,
``precision="tf32"``), fp8 with per-tensor scales (``e4m3``, ``e5m2``,
``e4m3xe5m2``: mixed, either way round) and ``block`` (``scale_mode="block"``,
e4m3 or mixed) - whose options are dealt evenly *within the group*
(:data:`_GROUP_COLUMNS`; in the 15-recipe fp8 group every (activation,
output dtype) pair), so each group has every output dtype (its default,
float32 for tf32 and bfloat16 for fp8, passed as ``out_dtype=None``), every
bias dtype (float32, float16, bfloat16: never the fp8/tf32 input type),
every activation and both cluster shapes.  They get K-major A (row-major)
and B (column-major, ``bt.T``), the only layouts wgmma takes for 32-/8-bit
operands.  Block-scaled recipes keep to 128x64 or 128x128 tiles (a forced
256 becomes 128, a forced ping-pong on 128 a 128x64 ping-pong or, with a 2x1
cluster, none) and never swap (a forced swap becomes ``_swap=False``; small
M runs unswapped).  Fix-ups (:func:`_cover_lowp`): a tf32 and a per-tensor
fp8 recipe force swap-AB with a 16-bit output, a block-scaled one the
128x64 ping-pong tile.  Per problem: the fp8 storage (ml_dtypes
``float8_e4m3fn``/``float8_e5m2`` arrays, or uint8 + ``a_format``/
``b_format``), the per-tensor scales (none, Python floats, 1-element/0-d
float32 device arrays, or a float for a and an array for b), the data range
of each fp8 operand (2^e, e in :data:`_FP8_EXP`), and for block scales
whether ``scale_b`` is column-major.  Per-tensor fp8 K is capped at
:data:`FP8_MAX_K` (its limited-precision accumulator; see the tolerances
below); fp8 pads are doubled (16 and 112 bytes); the 16-bit float32-output
rule (:data:`FP32_MAX_K`) does not apply to tf32/fp8, whose tolerances are
far above the fp32 accumulation error.

**The check** (:func:`run_case`).  Inputs are standard normal (CuPy
RandomState seeded by (seed, index)), A and B scaled by K^-1/4 so that A·B,
C and bias are all O(1) (the epilogue terms then matter to the error and the
activations work in their curved range).  fp8 inputs: standard normal times
K^-1/4 (per-tensor) and 2^e, clipped to the format's range, cast with
ml_dtypes on the host and copied as bytes; per-tensor scales u·2^-e with u
in [0.25, 4], so the product stays O(1); block scales 2^U(-6, 6) per
(row, 128-K block) of A and per 128x128 block of B, then those of A
multiplied by one common factor that makes the typical |A·B| about 1 (the
12 binades between blocks stay).  ``scale_a`` is made M-major by
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
the output dtype, the numbers of tests/test_gemm_full_gpu.py (the error is
set by the final rounding, so the input dtype does not enter; float32
output only up to :data:`FP32_MAX_K`; for an all-zero reference the
absolute error is used); for tf32 and fp8 those of
tests/test_fp8_tf32_gpu.py and tests/test_fp8_block_gpu.py.  Block-scaled
cases are also checked element by element as in tests/test_fp8_block_gpu.py
(|d - ref| against :data:`BLOCK_ELEM_TOL` times the sum of the absolute
values of the terms), which sees a wrong scale on one block even where other
blocks' scales are 2^12 times larger.
"""
from __future__ import annotations

import math
import random
import struct
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

from rawcoop.plan import configs
from rawcoop._reference import activation as activation64

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}
"""Relative Frobenius error tolerance by output dtype (tests/test_gemm_full_gpu.py)."""

# tf32 / fp8 tolerances: copies of the numbers in tests/test_fp8_tf32_gpu.py (TF32_TOL, FP8_TOL) and
# tests/test_fp8_block_gpu.py (FROB_TOL, ELEM_TOL = U_OUT + 2^-9), which derive them (first guesses until
# the first GPU run confirms them: change them there and here together).
TF32_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""tf32 inputs: relative Frobenius error by output dtype (tests/test_fp8_tf32_gpu.py TF32_TOL)."""
FP8_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""fp8 per-tensor, K <= :data:`FP8_MAX_K` (tests/test_fp8_tf32_gpu.py FP8_TOL)."""
BLOCK_TOL = {"float32": 3e-3, "bfloat16": 6e-3, "float16": 3e-3}
"""Block-scaled fp8, relative Frobenius (tests/test_fp8_block_gpu.py FROB_TOL)."""
BLOCK_ELEM_TOL = {"bfloat16": 2.0 ** -8 + 2.0 ** -9, "float16": 2.0 ** -11 + 2.0 ** -9,
                  "float32": 2.0 ** -24 + 2.0 ** -9}
"""Block-scaled fp8, element-wise: max |d - ref| / (sum of |terms|) (tests/test_fp8_block_gpu.py
ELEM_TOL: the output rounding + 2^-9, 4x the 14-bit accumulator bound); here times
:data:`_ACT_LIPSCHITZ` for gelu/silu (their slope reaches ~1.13), and with the output type's smallest
subnormal as an absolute floor (block scales 2^12 apart put float16 results there)."""
_ACT_LIPSCHITZ = {"gelu": 1.13, "silu": 1.1}
_TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133, "float32": 2.0 ** -149}

DEFAULT_SEED = 20240607
POOL_SIZE = 56
FP32_MAX_K = 8192
"""float32 output is drawn only up to this K.  The tensor cores' fp32
accumulation error grows about linearly in K (measured on an H200, 128x256
bf16, no split-K: 2.1e-6 at K = 2048, 9.1e-6 at 8192, 1.9e-5 at 16384, 7.6e-5
at 65536), so TOL["float32"] = 2e-5 of the tests holds with margin only up to
here; longer problems get a 16-bit output (their tolerance is set by the
final rounding, far above the accumulation error).  16-bit inputs only."""
FP8_MAX_K = 8192
"""Per-tensor fp8 K is capped here: the fp8 wgmma accumulates in a
limited-precision accumulator (~14 bits assumed), whose error grows like
sqrt(K); FP8_TOL of tests/test_fp8_tf32_gpu.py is derived for K <= 8192.
Block-scaled fp8 promotes every 128-deep k-block into fp32, so any K."""

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

INPUT_KINDS = ("16bit", "tf32", "e4m3", "e5m2", "e4m3xe5m2", "block")
"""The recipe column of input kinds: 16-bit (float16/bfloat16 from the in_dtype column), tf32, fp8 with
per-tensor scales (e4m3, e5m2, mixed e4m3 x e5m2 either way round), block-scaled fp8."""
_KIND_DEAL = ("16bit",) * 6 + INPUT_KINDS[1:]
KINDS = ("16bit", "tf32", "fp8", "block")
""":attr:`Problem.kind` values."""
FP8_FORMATS = ("e4m3", "e5m2")
FP8_STORAGES = ("ml_dtypes", "uint8")
SCALE_KINDS = ("none", "float", "device", "mixed")
"""Per-tensor fp8 scales: none; Python floats (folded into alpha on the host); 1-element (a) and 0-d (b)
float32 device arrays (read by the kernel); a Python float for a and a device array for b."""
_SCALE_WEIGHTS = (15, 30, 40, 15)
_FP8_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
_FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
_FP8_EXP = {"e4m3": (-2, 4), "e5m2": (-6, 10)}
"""fp8 data: standard normal x 2^e (x K^-1/4 per-tensor), e drawn per operand from this range: up to
|x| ~ 5.5 * 16 = 88 for e4m3 (max 448), ~5600 for e5m2 (max 57344); down to where e4m3 values are
partly subnormal."""
_FP8_NAN = 0x7F                 # a NaN in both e4m3fn and e5m2
BLOCK_SCALE_SPREAD = 6          # block scales 2^U(-6, 6)
_DEFAULT_OUT = {"16bit": None, "tf32": "float32", "fp8": "bfloat16", "block": "bfloat16"}

_EDGES = (1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 384, 385, 511, 512, 513)
_K_EDGES = (1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025)
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 31, 61, 67, 97, 101, 127, 131, 193, 197, 251, 257, 263, 307, 383, 389, 409,
           499, 509, 521, 601, 641, 727, 769, 829, 997, 1009)
_HUGE_K = (65536, 65537, 65599, 70000, 81920, 98305)


STREAMK_SHARE = 0.12
"""Share of cases that force stream-K (``_streamk=True``) where it is allowed."""
TALL_SHARE = 0.12
"""Share of cases that force 192-row tiles (``_block_m=192``) where they are allowed."""
WIDE192_SHARE = 0.10
"""Share of 16-bit cases that force 128x192 tiles (``_block_n=192``, since stop 31) where they are allowed."""
NARROW_SHARE = 0.10
"""Share of 16-bit cases that force a width between the multiples of 64 (configs.NARROW_BOX_NS, since
stop 33) where it is allowed: K-major b, not swapped, no 1x2 cluster or ping-pong."""


@dataclass(frozen=True)
class Problem:
    """One fuzz case; every field is a choice of :func:`draw`.  The fields
    after ``pingpong`` describe tf32/fp8 inputs; their defaults are a 16-bit
    problem's (so a 16-bit problem written out before they existed is the
    same object)."""
    seed: int
    index: int
    recipe: int                 # index into the seed's recipe pool
    shape_class: str
    m: int
    n: int
    k: int
    batch_kind: str             # BATCH_KINDS
    batch: int                  # L (1 when batch_kind == "none")
    in_dtype: str               # A's: float16, bfloat16, float32 (tf32), e4m3, e5m2
    a_layout: str               # "row" (K contiguous) or "col" (M contiguous, a transposed view)
    b_layout: str               # "row" (N contiguous) or "col" (K contiguous, b = bt.T)
    a_pad: int                  # extra elements beyond the contiguous extent rounded up to 16 bytes
    b_pad: int
    out_dtype: str
    c_kind: str                 # C_KINDS
    c_2d: bool                  # C is (M, N) while the result is batched
    alpha: float
    beta: float
    bias: str                   # BIAS_KINDS ("input": the input dtype); tf32/fp8: none, float32, float16, bfloat16
    activation: str | None
    out_kind: str               # OUT_KINDS
    splits: int | None          # forced _splits
    block_n: int | None         # forced _block_n
    swap: bool | None           # forced _swap
    cluster: int | tuple | None  # forced _cluster: 2 (= 2x1) or (1, 2)
    group: int | None           # forced _group
    pdl: bool
    pingpong: bool | None = None  # forced _pingpong (128x64 / 128x128 tiles only)
    b_dtype: str | None = None  # B's dtype when it differs from A's (mixed fp8)
    scale_mode: str | None = None   # fp8: "tensor" (per-tensor scales) or "block"; None: 16-bit, tf32
    scales: str = "none"        # per-tensor fp8: SCALE_KINDS; block-scaled: "block"
    scale_a: float = 1.0        # per-tensor scale values (float32-exact)
    scale_b: float = 1.0
    fp8_storage: str | None = None  # "ml_dtypes" (float8 arrays) or "uint8" (+ a_format/b_format)
    a_exp: int = 0              # fp8 data range: standard normal x 2^a_exp (x K^-1/4 per-tensor)
    b_exp: int = 0
    sb_colmajor: bool = False   # block-scaled: scale_b stored column-major
    streamk: bool = False       # forced _streamk (stream-K; only without forced splits/clusters, not block-scaled ping-pong)
    block_m: int | None = None  # forced _block_m (192: not block-scaled, cooperative, 128- or default-wide, no cluster/stream-K)

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

    @property
    def kind(self) -> str:
        """The input kind: "16bit", "tf32", "fp8" (per-tensor scales) or "block" (block-scaled fp8)."""
        if self.scale_mode == "block":
            return "block"
        if self.scale_mode is not None:
            return "fp8"
        return "tf32" if self.in_dtype == "float32" else "16bit"

    @property
    def b_in_dtype(self) -> str:
        return self.b_dtype or self.in_dtype

    @property
    def bias_dtype(self) -> str | None:
        return None if self.bias == "none" else self.in_dtype if self.bias == "input" else self.bias

    def operand_dtype(self, name: str) -> str:
        """The dtype name of the array passed as ``a`` or ``b``."""
        dt = self.in_dtype if name == "a" else self.b_in_dtype
        if dt in FP8_FORMATS:
            return _FP8_NAMES[dt] if self.fp8_storage == "ml_dtypes" else "uint8"
        return dt

    def gemm_kwargs(self) -> dict:
        """The forced private options exactly as passed to ``rawcoop.gemm``."""
        return dict(_splits=self.splits, _block_n=self.block_n, _swap=self.swap, _cluster=self.cluster,
                    _group=self.group, _pingpong=self.pingpong, _streamk=True if self.streamk else None,
                    _block_m=self.block_m)


@dataclass(frozen=True)
class _Recipe:
    in_dtype: str
    a_layout: str
    b_layout: str
    out: str                    # 16-bit: "same", "float32", "other16"; tf32/fp8: the output dtype
    c_kind: str
    bias: str
    activation: str | None
    swap: bool | None
    block_n: int | None
    cluster: int | tuple | None
    pingpong: bool | None = None
    b_dtype: str | None = None
    scale_mode: str | None = None


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


_LOWP_GROUPS = {"tf32": "tf32", "e4m3": "fp8", "e5m2": "fp8", "e4m3xe5m2": "fp8", "block": "block"}
_GROUP_COLUMNS = dict(
    out=("float32", "bfloat16", "float16"), c_kind=C_KINDS + ("row", "col"),
    bias=("none", "float32", "float16", "bfloat16"), activation=ACTIVATIONS, swap=(None, None, True, False),
    block_n=(None, None, 64, 128, 256, None), cluster=(None, None, None, 2, (1, 2)),
    pingpong=(None, None, None, True, False))
"""The options a tf32 / fp8 / block-scaled recipe gets from the deal within its group."""
_ACT_OUT = tuple((a, o) for a in ACTIVATIONS for o in _GROUP_COLUMNS["out"])


@lru_cache(maxsize=16)
def recipes(seed: int) -> tuple:
    """The seed's pool of kernel-shaping recipes: each option's values dealt
    evenly over the pool, each option's column shuffled independently.  The
    ``kind`` column (dealt last) turns some recipes into tf32, per-tensor fp8
    or block-scaled fp8 ones; each of those three groups (a handful of
    recipes each) then gets its options dealt evenly within the group
    (:data:`_GROUP_COLUMNS`: so each has every output dtype, bias kind,
    activation and both cluster shapes), adapted to what the kind allows
    (:func:`_lowp_recipe`), and :func:`_cover_lowp`'s two fix-ups.  All of it
    is drawn after the pool's columns, so the 16-bit recipes are what they
    were before tf32/fp8 existed."""
    r = _Rng(f"rawcoop-fuzz-pool:{seed}")

    def deal(values, count):
        return r.shuffle([values[i % len(values)] for i in range(count)])

    def column(values):
        return deal(values, POOL_SIZE)

    cols = dict(
        in_dtype=column(IN_DTYPES), a_layout=column(("row", "col")), b_layout=column(("row", "col")),
        out=column(("same", "float32", "other16")), c_kind=column(C_KINDS + ("row", "col")), bias=column(BIAS_KINDS),
        activation=column(ACTIVATIONS), swap=column((None, None, True, False)),
        block_n=column((None, None, 64, 128, 256, None)), cluster=column((None,) * 7 + (2,)),
        pingpong=column((None, None, None, True, False)),     # appended last: the other columns keep their deal
        cluster_n=column((False, True)),                      # a cluster of 2 along N (A multicast) instead
        kind=column(_KIND_DEAL))                              # appended last too: re-interprets some recipes
    pool, kinds = [], []
    for i in range(POOL_SIZE):
        d = {name: col[i] for name, col in cols.items()}
        if d["cluster"] == 2 and d["block_n"] not in (128, 256):
            d["block_n"] = 128 if i % 2 else 256        # clusters need 128- or 256-wide tiles
        if d.pop("cluster_n") and d["cluster"] == 2:
            d["cluster"] = (1, 2)
        if d["pingpong"] is not None and d["block_n"] not in (64, 128):
            d["pingpong"] = None                        # forced only where the tile allows both schedules
        kinds.append(d.pop("kind"))
        pool.append(d)
    for group in ("tf32", "fp8", "block"):
        idx = [i for i, k in enumerate(kinds) if _LOWP_GROUPS.get(k) == group]
        gcols = {name: deal(values, len(idx)) for name, values in _GROUP_COLUMNS.items()}
        if len(idx) >= len(_ACT_OUT):       # big enough for every (activation, output) pair: deal those jointly
            gcols["activation"], gcols["out"] = zip(*deal(_ACT_OUT, len(idx)))
        for j, i in enumerate(idx):
            pool[i] = _lowp_recipe(kinds[i], pool[i], {name: col[j] for name, col in gcols.items()})
    pool = [_Recipe(**d) for d in pool]
    _cover_lowp(pool)
    return tuple(pool)


def _lowp_recipe(kind: str, d: dict, dealt: dict) -> dict:
    """A recipe re-interpreted as a tf32 / fp8 one (see the module
    docstring): the options ``dealt`` in its group, K-major A and B, and the
    tile rules; the 16-bit dtype and the A layout it had serve as coins."""
    coin, was_row = d["in_dtype"] == "bfloat16", d["a_layout"] == "row"
    d = dict(d, a_layout="row", b_layout="col", **dealt)    # K-major A and B only (wgmma cannot transpose them)
    if d["cluster"] == 2 and d["block_n"] not in (128, 256):
        d["block_n"] = 128 if was_row or kind == "block" else 256     # 2x1 clusters: 128- or 256-wide tiles
    if d["pingpong"] is not None and d["block_n"] not in (64, 128):
        d["pingpong"] = None
    if kind == "tf32":
        return dict(d, in_dtype="float32")
    if kind in FP8_FORMATS:
        return dict(d, in_dtype=kind, scale_mode="tensor")
    if kind == "e4m3xe5m2":
        fa, fb = ("e5m2", "e4m3") if coin else ("e4m3", "e5m2")
        return dict(d, in_dtype=fa, b_dtype=fb, scale_mode="tensor")
    # block-scaled: 128x128 cooperative or 128x64 (also ping-pong) tiles, never swap-AB
    fa, fb = (("e4m3", "e5m2") if was_row else ("e5m2", "e4m3")) if coin else ("e4m3", "e4m3")
    d.update(in_dtype=fa, b_dtype=fb if fb != fa else None, scale_mode="block")
    if d["swap"]:
        d["swap"] = False
    if d["block_n"] == 256:
        d["block_n"] = 128
    if d["pingpong"] and d["block_n"] != 64:
        if d["cluster"] == 2:
            d["pingpong"] = None                    # 2x1 clusters need 128-wide tiles: no block-scaled ping-pong
        else:
            d["block_n"] = 64
    return d


def _cover_lowp(pool: list) -> None:
    """Two guarantees the deal alone may miss (the groups are small): a
    tf32 and a per-tensor fp8 recipe with a forced swap-AB and a 16-bit
    output (swap-AB needs one), and a block-scaled recipe with a 128x64
    ping-pong tile.  Each is made from the group's first recipe that can
    take it without losing its cluster."""
    def group(rc):
        return "block" if rc.scale_mode == "block" else "fp8" if rc.scale_mode else \
            "tf32" if rc.in_dtype == "float32" else None

    for g in ("tf32", "fp8"):
        idx = [i for i, rc in enumerate(pool) if group(rc) == g]
        if idx and not any(pool[i].swap and pool[i].out != "float32" for i in idx):
            j = next((i for i in idx if pool[i].out != "float32"), idx[0])
            pool[j] = replace(pool[j], swap=True, out=pool[j].out if pool[j].out != "float32" else "bfloat16")
    idx = [i for i, rc in enumerate(pool) if group(rc) == "block"]
    if idx and not any(pool[i].pingpong for i in idx):
        j = next((i for i in idx if pool[i].cluster != 2), None)
        if j is not None:
            pool[j] = replace(pool[j], block_n=64, pingpong=True)


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


def _f32(x: float) -> float:
    """``x`` rounded to float32 (so a Python-float scale and a float32 array hold the same value)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def draw(seed: int, index: int) -> Problem:
    """Problem ``index`` of the fuzz run ``seed`` (deterministic; any case
    can be drawn alone)."""
    seed, index = int(seed), int(index)
    rec = recipes(seed)[index % POOL_SIZE]
    lowp = rec.in_dtype not in IN_DTYPES
    r = _Rng(f"rawcoop-fuzz:{seed}:{index}")
    cls = r.weighted(SHAPE_CLASSES, _SHAPE_WEIGHTS)
    m, n, k = _shape(r, cls)
    batch_kind = "none" if cls in ("huge_k", "big") else r.weighted(BATCH_KINDS, _BATCH_WEIGHTS)
    batch = 1
    if batch_kind != "none":
        batch = r.pick((2, 3, 4, 5, 7))
        m, n, k = min(m, 640), min(n, 640), min(k, 4096)

    in_dtype = rec.in_dtype
    if lowp:
        out_dtype = rec.out                              # resolved by _lowp_recipe; no FP32_MAX_K rule
    else:
        out_dtype = {"same": in_dtype, "float32": "float32",
                     "other16": "bfloat16" if in_dtype == "float16" else "float16"}[rec.out]
        if out_dtype == "float32" and k > FP32_MAX_K:
            out_dtype = in_dtype
    c_kind = rec.c_kind
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
    extra = {}
    if lowp:                                             # drawn last: the 16-bit problems keep their draws
        k, extra = _lowp_draw(r, rec, k)
        if rec.scale_mode is not None:
            a_pad, b_pad = 2 * a_pad, 2 * b_pad          # fp8: 16 and 112 bytes (pitches stay 16-byte multiples)
    # Stream-K from a generator of its own, so that every other choice of every case stays as it was
    # drawn before stream-K existed (reproducers in notes keep working); only where it is allowed.
    streamk = (random.Random(f"rawcoop-fuzz-streamk:{seed}:{index}").random() < STREAMK_SHARE
               and splits is None and rec.cluster is None
               and not (rec.pingpong and rec.scale_mode == "block"))   # ping-pong too since stop 27
    # 192-row tiles likewise from a generator of their own, where a tall kernel exists.
    tall = (random.Random(f"rawcoop-fuzz-tall:{seed}:{index}").random() < TALL_SHARE and rec.scale_mode != "block"
            and not streamk and rec.cluster is None and not rec.pingpong and rec.block_n in (None, 128))
    # 128x192 tiles (16-bit only) likewise, where the recipe leaves the width open or 128/256 and forces
    # no 2x1 cluster (whose halves of a 192-wide N-major B would not be whole atoms) and no ping-pong.
    wide192 = (random.Random(f"rawcoop-fuzz-wide192:{seed}:{index}").random() < WIDE192_SHARE and not lowp
               and not tall and rec.cluster != 2 and not rec.pingpong and rec.block_n in (None, 128, 256))
    # Tiles between the multiples of 64 (stop 33) likewise: 16-bit, K-major b ("col"), never swapped (a
    # forced or, for M <= 64, an automatic swap would make b the kernel's A), no 1x2 cluster or ping-pong.
    nr = random.Random(f"rawcoop-fuzz-narrow:{seed}:{index}")
    narrow = (nr.random() < NARROW_SHARE and not lowp and not tall and not wide192 and rec.b_layout == "col"
              and rec.swap is not True and (rec.swap is False or m > 64) and rec.cluster in (None, 2)
              and not rec.pingpong)
    block_n = nr.choice(configs.NARROW_BOX_NS) if narrow else 192 if wide192 else rec.block_n
    return Problem(seed=seed, index=index, recipe=index % POOL_SIZE, shape_class=cls, m=m, n=n, k=k,
                   batch_kind=batch_kind, batch=batch, in_dtype=in_dtype, a_layout=rec.a_layout,
                   b_layout=rec.b_layout, a_pad=a_pad, b_pad=b_pad, out_dtype=out_dtype, c_kind=c_kind, c_2d=c_2d,
                   alpha=alpha, beta=beta, bias=rec.bias, activation=rec.activation, out_kind=out_kind,
                   splits=splits, block_n=block_n, swap=rec.swap, cluster=rec.cluster,
                   group=group, pdl=pdl,
                   pingpong=rec.pingpong, b_dtype=rec.b_dtype, scale_mode=rec.scale_mode, streamk=streamk,
                   block_m=192 if tall else None, **extra)


def _lowp_draw(r: _Rng, rec: _Recipe, k: int) -> tuple[int, dict]:
    """The per-problem tf32/fp8 choices: (K, Problem fields)."""
    if rec.scale_mode is None:                           # tf32: nothing more to draw
        return k, {}
    fa, fb = rec.in_dtype, rec.b_dtype or rec.in_dtype
    extra = dict(fp8_storage=r.pick(FP8_STORAGES), a_exp=r.between(*_FP8_EXP[fa]), b_exp=r.between(*_FP8_EXP[fb]))
    if rec.scale_mode == "block":
        extra.update(scales="block", sb_colmajor=r.random() < 0.3)
        return k, extra
    scales = r.weighted(SCALE_KINDS, _SCALE_WEIGHTS)
    ua, ub = 2.0 ** (4 * r.random() - 2), 2.0 ** (4 * r.random() - 2)      # [0.25, 4]
    if scales == "none":                                 # no scale to undo the data range: 2^0
        extra.update(a_exp=0, b_exp=0)
    else:
        extra.update(scale_a=_f32(ua * 2.0 ** -extra["a_exp"]), scale_b=_f32(ub * 2.0 ** -extra["b_exp"]))
    extra["scales"] = scales
    return min(k, FP8_MAX_K), extra


def problems(seed: int, count: int, start: int = 0) -> list[Problem]:
    return [draw(seed, i) for i in range(start, start + count)]


# ---------------------------------------------------------------- description
_SHORT = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def _inputs_label(p: Problem) -> str:
    if p.kind == "16bit":
        return _SHORT[p.in_dtype]
    if p.kind == "tf32":
        return "tf32"
    s = p.in_dtype if p.b_dtype is None else f"{p.in_dtype}x{p.b_dtype}"
    if p.fp8_storage == "uint8":
        s += "(u8)"
    if p.kind == "block":
        s += " block-scaled" + (" sb=col" if p.sb_colmajor else "")
    elif p.scales != "none":
        s += f" scales={p.scales}({p.scale_a:.4g},{p.scale_b:.4g})"
    if p.a_exp or p.b_exp:
        s += f" range=2^{p.a_exp}/2^{p.b_exp}"
    return s


def describe(p: Problem) -> str:
    """A readable one-line summary of every choice of ``p``."""
    s = f"{p.m}x{p.n}x{p.k}"
    if p.batched:
        s += f" L={p.batch}({p.batch_kind})"
    s += f" {_inputs_label(p)} A={p.a_layout}{f'+{p.a_pad}' if p.a_pad else ''}"
    s += f" B={p.b_layout}{f'+{p.b_pad}' if p.b_pad else ''} -> {_SHORT[p.out_dtype]}"
    if p.c_kind == "ignored":
        s += " c=NaN(beta=0)"
    elif p.c_kind != "none":
        s += f" c={p.c_kind}{'(2d)' if p.c_2d else ''} beta={p.beta:g}"
    if p.alpha != 1.0:
        s += f" alpha={p.alpha:g}"
    if p.bias != "none":
        s += f" bias={_SHORT[p.bias_dtype]}"
    if p.activation:
        s += f" act={p.activation}"
    s += f" out={p.out_kind}"
    for name, v in (("splits", p.splits), ("block_n", p.block_n), ("swap", p.swap), ("cluster", p.cluster),
                    ("group", p.group), ("pingpong", p.pingpong)):
        if v is not None:
            s += f" {name}={v}"
    if p.streamk:
        s += " streamk"
    if p.block_m is not None:
        s += f" block_m={p.block_m}"
    if p.pdl:
        s += " pdl"
    return s + f" [{p.shape_class}, recipe {p.recipe}]"


def reproducer(p: Problem) -> str:
    """One line: the command that re-runs this case alone, and what it is."""
    return f"python bench/fuzz.py --seed {p.seed} --case {p.index}  # {describe(p)}"


# ---------------------------------------------------------------- geometry
def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class _Geom:
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
        base = (self.outer + self.row_pad, _cdiv(self.inner, self.unit) * self.unit + self.pad)
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
    unit = 8 if p.kind == "16bit" else 16 // _np_dtype(p.in_dtype).itemsize
    g = {"a": _Geom(p.m, p.k, p.a_layout == "col", la, p.a_pad, 3 if la and p.a_pad else 0, unit=unit),
         "b": _Geom(p.k, p.n, p.b_layout == "col", lb, p.b_pad, 3 if lb and p.b_pad else 0,
                    broadcast=p.batch if p.batch_kind == "b_stride0" else 0, unit=unit)}
    lc = p.batch if p.batched and not p.c_2d else None
    if p.c_kind != "none":
        g["c"] = _Geom(p.m, p.n, p.c_kind == "col", lc, 0)
    if p.out_kind == "padded":
        g["out"] = _Geom(p.m, p.n, False, p.batch if p.batched else None, 8, 2 if p.batched else 0)
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
        out[name] = (geo[name].shape, geo[name].strides(_np_dtype(dt).itemsize), dt)
    osz = _np_dtype(p.out_dtype).itemsize
    if "c" in geo:
        out["c"] = (geo["c"].shape, geo["c"].strides(osz), p.out_dtype)
    if p.bias != "none":
        bsz = _np_dtype(p.bias_dtype).itemsize
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
        kb, nb, mp = _cdiv(p.k, 128), _cdiv(p.n, 128), max(4, _cdiv(p.m, 4) * 4)
        lead_a = geo["a"].shape[:-2]
        out["scale_a"] = (lead_a + (p.m, kb), ((kb * mp * 4,) if lead_a else ()) + (4, mp * 4), "float32")
        base = (4, nb * 4) if p.sb_colmajor else (kb * 4, 4)
        lead_b = geo["b"].shape[:-2]
        lead_st = () if not lead_b else (0,) if p.batch_kind == "b_stride0" else (nb * kb * 4,)
        out["scale_b"] = (lead_b + (nb, kb), lead_st + base, "float32")
    return out


class _Stub:
    """Shape, strides and dtype only: enough for gemm's layout checks on the CPU."""

    def __init__(self, shape, strides, dtype):
        import numpy as np
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), np.dtype(dtype)
        self.ndim = len(self.shape)


def _np_dtype(name: str):
    """numpy dtype of a dtype name (also "e4m3"/"e5m2" and the ml_dtypes names)."""
    from rawcoop.operands import np_dtype
    return np_dtype(_FP8_NAMES.get(name, name))


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
    default = _DEFAULT_OUT[p.kind]
    kw = dict(c=arrays.get("c"), alpha=p.alpha, beta=p.beta, bias=arrays.get("bias"), activation=p.activation,
              out=arrays.get("out"), out_dtype=None if p.out_dtype == default else _np_dtype(p.out_dtype),
              pdl=p.pdl)
    kw.update(p.gemm_kwargs())
    kw.update(lowp_kwargs(p, arrays.get("scale_a"), arrays.get("scale_b")))
    return kw


def predicted_config(p: Problem, sm_count: int = 132):
    """The :class:`~rawcoop.plan.configs.GemmConfig` ``rawcoop.gemm`` should
    pick for ``p`` (no tuned table), without a GPU: gemm's own input-kind
    and layout classification on the drawn dtypes and strides, then the
    configuration function gemm itself calls (configs.plan_config).  Also
    checks on the CPU what gemm validates about kinds, strides and forced
    options (raises TypeError/ValueError like gemm would).  The CPU tests
    compare it with the configuration of gemm's real plan on stub arrays."""
    from rawcoop.plan import configs as gc
    from rawcoop import operands
    stubs = {name: _Stub(*v) for name, v in layouts(p).items()}
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
    return gc.plan_config(p.m, p.n, p.k, p.batch, sm_count, kinds=(ka, kb), kmajor=(a_kmajor, b_kmajor),
                          out_name=p.out_dtype, use_c=use_c, c_rowmajor=c_rowmajor, bias_kind=bias_kind,
                          activation=p.activation, block=block, block_n=p.block_n, swap=p.swap,
                          cluster=p.cluster, splits=p.splits, pingpong=p.pingpong,
                          streamk=True if p.streamk else None, block_m=p.block_m, pitches=(a_pitch, b_pitch))


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


def _orient(cp, gm: _Geom, view):
    """The stored [..., :outer, :inner] view as the logical matrix: transposed
    when column-major, broadcast with a stride-0 batch."""
    if gm.colmajor:
        view = view.swapaxes(-1, -2)
    if gm.broadcast:
        view = cp.broadcast_to(view, (gm.broadcast,) + view.shape)
    return view


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
        fp8 = getattr(ml_dtypes, _FP8_NAMES[fmt])
        store = cp.empty(gm.alloc, dtype=cp.uint8)
        raw = store[..., :gm.outer, :gm.inner]
        if fill:
            if gm.alloc != raw.shape:
                store.fill(_FP8_NAN)
            x = rng.standard_normal(raw.shape, dtype=np.float32)
            x *= np.float32(sigma * 2.0 ** e)
            np.clip(x, -_FP8_MAX[fmt], _FP8_MAX[fmt], out=x)          # ml_dtypes turns overflow into NaN
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
    kb, nb = _cdiv(p.k, 128), _cdiv(p.n, 128)
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
    base, mp = arrays["scale_a"].base, max(4, _cdiv(p.m, 4) * 4)
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
        bdt = _np_dtype(p.bias_dtype)
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


def _fp8_values(cp, fmt: str, raw):
    """float64 values of fp8 bytes ``raw`` (any view): a 256-entry table from ml_dtypes."""
    import ml_dtypes
    import numpy as np
    table = cp.asarray(np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, _FP8_NAMES[fmt])).astype(np.float64))
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
    import importlib
    gemm = importlib.import_module(__package__ + ".gemm").gemm
    return gemm(arrays["a"], arrays["b"], **call_kwargs(p, arrays))


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
    import importlib
    g_mod = importlib.import_module(__package__ + ".gemm")
    kw = call_kwargs(p, arrays)
    kw.pop("out")
    kw.pop("pdl")
    if not with_cluster:
        kw["_cluster"] = None
    return g_mod._plan_for(arrays["a"], arrays["b"], **kw)


def plan_spec(p: Problem):
    """The KernelSpec of the plan ``rawcoop.gemm`` builds for ``p`` on this
    GPU (inputs allocated, not filled; cluster launches planned without
    their compile, which their plan would force)."""
    import dataclasses

    from rawcoop.plan import configs as gc
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
