"""The fuzzer's recipes: the kernel-shaping options of its problems.

Every problem takes its kernel-shaping options (input kind and dtype, A/B
layout, output dtype, C kind, bias kind, activation, forced ``_swap`` /
``_block_n`` / ``_cluster`` / ``_pingpong``) from a *recipe*: a pool of
:data:`POOL_SIZE` recipes built from the seed, each option's values dealt
evenly over the pool and shuffled (so every value of every option is in the
pool, in varied combinations), problem ``i`` using recipe ``i % POOL_SIZE``.
That keeps the number of distinct kernel configurations - each compiled
once, ~0.1-1 s, in parallel by verify.prewarm - moderate (about 200 for the
first 1000 problems of a seed) while every epilogue variant is covered.
The draw uses only ``random.Random(str).random()`` (stable across Python
versions), never ``hash()``.

**Input kinds** (:data:`INPUT_KINDS`, one recipe column dealt
6:1:1:1:1:1, drawn after the others).  It turns about 45 % of the recipes
into tf32 / fp8 ones *by re-interpretation*: the other columns keep their
deal, so the 16-bit recipes (and every problem drawn from them) do not
depend on it.  The re-interpreted recipes form three groups of a handful
each - tf32 (float32 inputs, ``precision="tf32"``), fp8 with per-tensor
scales (``e4m3``, ``e5m2``, ``e4m3xe5m2``: mixed, either way round) and
``block`` (``scale_mode="block"``, e4m3 or mixed) - whose options are dealt
evenly *within the group* (:data:`_GROUP_COLUMNS`; in the 15-recipe fp8
group every (activation, output dtype) pair), so each group has every
output dtype (its default, float32 for tf32 and bfloat16 for fp8, passed as
``out_dtype=None``), every bias dtype (float32, float16, bfloat16: never the
fp8/tf32 input type), every activation and both cluster shapes.  They get
K-major A (row-major) and B (column-major, ``bt.T``), the only layouts wgmma
takes for 32-/8-bit operands.  Block-scaled recipes keep to 128x64 or
128x128 tiles (a forced 256 becomes 128, a forced ping-pong on 128 a 128x64
ping-pong or, with a 2x1 cluster, none) and never swap (a forced swap
becomes ``_swap=False``; small M runs unswapped).  Fix-ups
(:func:`_cover_lowp`): a tf32 and a per-tensor fp8 recipe force swap-AB
with a 16-bit output, a block-scaled one the 128x64 ping-pong tile.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from functools import lru_cache

POOL_SIZE = 56
"""Recipes per seed; problem ``i`` uses recipe ``i % POOL_SIZE``."""

C_KINDS = ("none", "row", "col", "ignored")              # ignored: c passed with beta == 0 (all NaN)
BIAS_KINDS = ("none", "float32", "input")
ACTIVATIONS = (None, "relu", "gelu", "silu")
IN_DTYPES = ("float16", "bfloat16")
INPUT_KINDS = ("16bit", "tf32", "e4m3", "e5m2", "e4m3xe5m2", "block")
"""The recipe column of input kinds: 16-bit (float16/bfloat16 from the in_dtype column), tf32, fp8 with
per-tensor scales (e4m3, e5m2, mixed e4m3 x e5m2 either way round), block-scaled fp8."""
_KIND_DEAL = ("16bit",) * 6 + INPUT_KINDS[1:]
FP8_FORMATS = ("e4m3", "e5m2")
FP8_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
"""fp8 format -> its ml_dtypes (and numpy) dtype name."""


@dataclass(frozen=True)
class Recipe:
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


class Rng:
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
    is drawn after the pool's columns, so the 16-bit recipes do not depend
    on it."""
    r = Rng(f"rawcoop-fuzz-pool:{seed}")

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
    pool = [Recipe(**d) for d in pool]
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
