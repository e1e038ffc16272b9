"""The fuzzer's problems: case ``index`` of run ``seed``, every choice drawn
from (seed, index) alone, so any case can be drawn, described and re-run by
itself (:func:`draw`, :func:`reproducer`).

A problem takes its kernel-shaping options from its recipe (pool.py);
the rest is drawn per problem: the shape from a shape class (tiny, tile
edges 127/128/129..., primes, random, small M (swap-AB), long K, very long K
65536+, big), the batch kind (2-D, batched, a or b 2-D and broadcast, b with
a stride-0 batch, a with a batch of 1), padding of each operand's
contiguous extent (extents that are not a multiple of 16 bytes are always
padded, since TMA needs 16-byte pitches), alpha/beta, a C that is 2-D for a
batched result, ``out`` (exact, padded view, none, in place over C), forced
``_splits``, ``_group``, ``_streamk``, ``_block_m``, ``pdl``.  Only
combinations ``rawcoop.gemm`` accepts are drawn.

tf32/fp8 problems also draw the fp8 storage (ml_dtypes
``float8_e4m3fn``/``float8_e5m2`` arrays, or uint8 + ``a_format``/
``b_format``), the per-tensor scales (none, Python floats, 1-element/0-d
float32 device arrays, or a float for a and an array for b), the data range
of each fp8 operand (2^e, e in :data:`FP8_EXP`), and for block scales
whether ``scale_b`` is column-major.  Per-tensor fp8 K is capped at
:data:`FP8_MAX_K`; fp8 pads are doubled (16 and 112 bytes); the 16-bit
float32-output rule (:data:`FP32_MAX_K`) does not apply to tf32/fp8, whose
tolerances are far above the fp32 accumulation error.  Each later option
(stream-K, 192-row tiles, 128x192 tiles, widths between the multiples of
64) comes from a generator of its own, so that it leaves every other choice
of every case as it is.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass

from rawcoop.plan import kernel_config as configs

from .pool import FP8_FORMATS, FP8_NAMES, IN_DTYPES, POOL_SIZE, Recipe, Rng, recipes

DEFAULT_SEED = 20240607
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
sqrt(K); FP8_TOL of tests/helpers/lowp.py is derived for K <= 8192.
Block-scaled fp8 promotes every 128-deep k-block into fp32, so any K."""

SHAPE_CLASSES = ("tiny", "edge", "prime", "random", "small_m", "long_k", "huge_k", "big")
_SHAPE_WEIGHTS = (10, 22, 17, 21, 14, 9, 5, 2)          # per 100 problems; big rarely because it is slow
BATCH_KINDS = ("none", "batched", "a2d", "b2d", "b_stride0", "a_batch1")
_BATCH_WEIGHTS = (62, 12, 7, 7, 6, 6)
OUT_KINDS = ("exact", "padded", "none", "inplace")
OUT_DTYPES = ("float16", "bfloat16", "float32")

KINDS = ("16bit", "tf32", "fp8", "block")
""":attr:`Problem.kind` values."""
FP8_STORAGES = ("ml_dtypes", "uint8")
SCALE_KINDS = ("none", "float", "device", "mixed")
"""Per-tensor fp8 scales: none; Python floats (folded into alpha on the host); 1-element (a) and 0-d (b)
float32 device arrays (read by the kernel); a Python float for a and a device array for b."""
_SCALE_WEIGHTS = (15, 30, 40, 15)
FP8_EXP = {"e4m3": (-2, 4), "e5m2": (-6, 10)}
"""fp8 data: standard normal x 2^e (x K^-1/4 per-tensor), e drawn per operand from this range: up to
|x| ~ 5.5 * 16 = 88 for e4m3 (max 448), ~5600 for e5m2 (max 57344); down to where e4m3 values are
partly subnormal."""
DEFAULT_OUT = {"16bit": None, "tf32": "float32", "fp8": "bfloat16", "block": "bfloat16"}
"""Output dtype of each input kind when gemm is given ``out_dtype=None``."""

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
"""Share of 16-bit cases that force 128x192 tiles (``_block_n=192``) where they are allowed."""
NARROW_SHARE = 0.10
"""Share of 16-bit cases that force a width between the multiples of 64 (configs.NARROW_BOX_NS) where
it is allowed: K-major b, not swapped, no 1x2 cluster or ping-pong."""


@dataclass(frozen=True)
class Problem:
    """One fuzz case; every field is a choice of :func:`draw`.  The fields
    after ``pingpong`` describe tf32/fp8 inputs; their defaults are a 16-bit
    problem's (so a 16-bit problem can be written out without them)."""
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
    streamk: bool = False       # forced _streamk (no forced splits/clusters, not block-scaled ping-pong)
    block_m: int | None = None  # forced _block_m (192: not block-scaled, cooperative, 128- or default-wide,
                                # no cluster or stream-K)

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
            return FP8_NAMES[dt] if self.fp8_storage == "ml_dtypes" else "uint8"
        return dt

    def gemm_kwargs(self) -> dict:
        """The forced private options exactly as passed to ``rawcoop.gemm``."""
        return dict(_splits=self.splits, _block_n=self.block_n, _swap=self.swap, _cluster=self.cluster,
                    _group=self.group, _pingpong=self.pingpong, _streamk=True if self.streamk else None,
                    _block_m=self.block_m)


def _shape(r: Rng, cls: str) -> tuple[int, int, int]:
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
    r = Rng(f"rawcoop-fuzz:{seed}:{index}")
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
    # Stream-K from a generator of its own, so that it changes no other choice of any case (a
    # reproducer's case stays the same problem); only where it is allowed.
    streamk = (random.Random(f"rawcoop-fuzz-streamk:{seed}:{index}").random() < STREAMK_SHARE
               and splits is None and rec.cluster is None
               and not (rec.pingpong and rec.scale_mode == "block"))
    # 192-row tiles likewise from a generator of their own, where a tall kernel exists.
    tall = (random.Random(f"rawcoop-fuzz-tall:{seed}:{index}").random() < TALL_SHARE and rec.scale_mode != "block"
            and not streamk and rec.cluster is None and not rec.pingpong and rec.block_n in (None, 128))
    # 128x192 tiles (16-bit only) likewise, where the recipe leaves the width open or 128/256 and forces
    # no 2x1 cluster (whose halves of a 192-wide N-major B would not be whole atoms) and no ping-pong.
    wide192 = (random.Random(f"rawcoop-fuzz-wide192:{seed}:{index}").random() < WIDE192_SHARE and not lowp
               and not tall and rec.cluster != 2 and not rec.pingpong and rec.block_n in (None, 128, 256))
    # Tiles between the multiples of 64 likewise: 16-bit, K-major b ("col"), never swapped (a
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


def _lowp_draw(r: Rng, rec: Recipe, k: int) -> tuple[int, dict]:
    """The per-problem tf32/fp8 choices: (K, Problem fields)."""
    if rec.scale_mode is None:                           # tf32: nothing more to draw
        return k, {}
    fa, fb = rec.in_dtype, rec.b_dtype or rec.in_dtype
    extra = dict(fp8_storage=r.pick(FP8_STORAGES), a_exp=r.between(*FP8_EXP[fa]), b_exp=r.between(*FP8_EXP[fb]))
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
