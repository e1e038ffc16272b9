"""Choosing the kernel configuration of a problem: the legal candidates, priced by one model, the cheapest kept.

``rawcoop.gemm`` calls :func:`choose` once per new plan.  Forced ``_`` options (tests, benchmarks, a
``rawcoop.tune`` winner) narrow the candidates to those that match; nothing else steers the choice.  The
candidates are rawcoop/plan/candidates.py's, the prices rawcoop/plan/cost.py's with the stored coefficients
of the GPU (fitted by bench/fit_cost_model.py; docs/planner.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from . import cost
from .candidates import Candidate, Problem, enumerate_candidates, schedule_of
from .kernel_config import BLOCK_M, BUILT_BLOCK_NS, DEFAULT_OUT, OUT_TYPES, TALL_BLOCK_M, GemmConfig, cluster_dims


@dataclass(frozen=True)
class Forced:
    """Forced options (None: free): tile width and height, swap-AB, cluster (as ``_cluster`` takes it),
    splits along K for every tile, ping-pong, stream-K."""
    block_n: int | None = None
    block_m: int | None = None
    swap: bool | None = None
    cluster: object = None
    splits: int | None = None
    pingpong: bool | None = None
    streamk: bool | None = None

    def __post_init__(self):
        if isinstance(self.cluster, list):
            object.__setattr__(self, "cluster", tuple(self.cluster))
        cluster_dims(self.cluster)                 # ValueError for a malformed _cluster
        if self.block_n is not None and self.block_n not in BUILT_BLOCK_NS:
            raise ValueError(f"_block_n must be one of {BUILT_BLOCK_NS}, got {self.block_n!r}")
        if self.block_m is not None and self.block_m not in (BLOCK_M, TALL_BLOCK_M):
            raise ValueError(f"_block_m must be {BLOCK_M} or {TALL_BLOCK_M}, got {self.block_m!r}")
        if self.splits is not None and (type(self.splits) is not int or self.splits < 1):
            raise ValueError(f"_splits must be a positive int, got {self.splits!r}")
        if self.splits is not None and self.streamk:
            raise ValueError("_streamk=True takes no _splits: stream-K shares the last wave's k-blocks itself")

    def matches(self, cfg: GemmConfig) -> bool:
        return self.point_matches(point_of(cfg)) and (self.splits is None or not cfg.stream_k)

    def point_matches(self, point) -> bool:
        swap, block_m, block_n, cluster, pingpong, stream_k = point
        return ((self.block_n is None or block_n == self.block_n) and (self.block_m is None or block_m == self.block_m)
                and (self.swap is None or swap == bool(self.swap))
                and (self.cluster is None or cluster == cluster_dims(self.cluster))
                and (self.pingpong is None or pingpong == bool(self.pingpong))
                and (self.streamk is None or stream_k == bool(self.streamk)))

    def described(self) -> str:
        names = ("block_n", "block_m", "swap", "cluster", "splits", "pingpong", "streamk")
        return ", ".join(f"_{k}={getattr(self, k)!r}" for k in names if getattr(self, k) is not None) or "none"


FREE = Forced()


def point_of(cfg: GemmConfig) -> tuple:
    """A configuration's point of the candidate space (candidates.enumerate_candidates' order)."""
    return cfg.d_colmajor, cfg.block_m, cfg.block_n, cfg.cluster, cfg.pingpong, cfg.stream_k
RESOLUTION = 0.01
"""Candidates modelled within this share of the cheapest are ties (the model's error is larger: an RMS of
about 11% on the validation shapes, docs/planner.md); a tie goes to the candidate with the fewest departures
from a plain launch (:func:`departures`), which the measurements cover best."""


def departures(c: Candidate) -> int:
    """Swap-AB, a cluster, split-K or stream-K: each one more way a candidate departs from one whole-K tile per
    unit on the user's orientation."""
    return int(c.cfg.d_colmajor) + int(c.cfg.cluster_size > 1) + int(c.cfg.stream_k or c.dec.splits > 1)


def ranked(p: Problem, forced: Forced = FREE, co: cost.Coefficients | None = None) -> list[tuple[float, Candidate]]:
    """(modelled µs, candidate) for every legal candidate matching ``forced``, cheapest first.  ValueError
    naming the forced options and the rule that excludes them when none is left."""
    co = co or cost.load()[0]
    rejected = []
    cands = [c for c in enumerate_candidates(p, rejected) if forced.matches(c.cfg)]
    if forced.splits is not None:
        cands = list({c.cfg: schedule_of(p, c.cfg, forced.splits) for c in cands if not c.cfg.epi_ring}.values())
    if not cands:
        why = sorted((_departures_of_point(point), i, r) for i, (point, r) in enumerate(rejected)
                     if forced.point_matches(point))
        reason = why[0][2] if why else "no candidate matches them"
        raise ValueError(f"no kernel combines the forced options ({forced.described()}): {reason}")
    priced = sorted(((cost.time_us(cost.features(p, c), co), i, c) for i, c in enumerate(cands)),
                    key=lambda t: (t[0], t[1]))
    return [(t, c) for t, _, c in priced]


def _departures_of_point(point) -> int:
    """How far a point of the space is from a plain 128x128 cooperative tile (the closest illegal point
    that matches the forced options names the rule that excludes them)."""
    swap, block_m, block_n, cluster, pingpong, stream_k = point
    return int(swap) + int(block_m != 128) + int(block_n != 128) + int(cluster != (1, 1)) + int(pingpong) + int(
        stream_k)


@lru_cache(maxsize=4096)
def choose(p: Problem, forced: Forced = FREE) -> Candidate:
    """The cheapest legal candidate for ``p`` under ``forced``, ties (:data:`RESOLUTION`) to the fewest
    departures (memoised per problem)."""
    return pick(ranked(p, forced))


def pick(priced: list[tuple[float, Candidate]]) -> Candidate:
    """The choice from :func:`ranked`'s list: the cheapest, ties (:data:`RESOLUTION`) to the fewest
    departures."""
    ties = [(departures(c), i) for i, (t, c) in enumerate(priced) if t <= priced[0][0] * (1 + RESOLUTION)]
    return priced[min(ties)[1]][1]


def config_for_problem(m: int, n: int, k: int, in_kind: int, a_kmajor: bool, b_kmajor: bool,
                       sm_count: int = 132, batches: int = 1, b_kind: int = -1) -> GemmConfig:
    """The configuration rawcoop.gemm picks for a plain-epilogue problem with the default output type and no
    tuning table.  ``in_kind``/``b_kind``: a's and b's input kinds (True/False: bf16/fp16)."""
    in_kind = int(in_kind)
    b_kind = in_kind if b_kind == -1 else int(b_kind)
    out_name = {v: name for name, v in OUT_TYPES.items()}[DEFAULT_OUT[in_kind]]
    p = Problem(m, n, k, batches, (in_kind, b_kind), (bool(a_kmajor), bool(b_kmajor)), out_name,
                sm_count=sm_count)
    return choose(p).cfg


def tuning_candidates(p: Problem, count: int = 24) -> list[dict]:
    """What ``rawcoop.tune`` times: the model's choice (all None), then the ``count`` cheapest distinct
    candidates by the model, as forced options (rawcoop/tuning.py CHOICE_KEYS)."""
    out = [dict(block_n=None, group=None, swap=None, splits=None, pingpong=None, streamk=None, block_m=None,
                cluster=None)]
    for _, c in ranked(p)[:count]:
        cfg = c.cfg
        out.append(dict(block_n=cfg.block_n, group=None, swap=cfg.d_colmajor, splits=c.splits,
                        pingpong=cfg.pingpong, streamk=cfg.stream_k, block_m=cfg.block_m,
                        cluster=list(cfg.cluster)))
    return out
