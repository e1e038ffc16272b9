"""Measured candidates for the cost model: oracle rows (bench/oracle.py --jsonl) as (problem, candidate, µs).

Each oracle row timed many distinct plans of one shape in the same rounds.  A plan is recorded by its tile
label (``cfg``: ``128x256 pp sk cl2 swap``), the options that forced it and its decomposition; this module
rebuilds the :class:`~rawcoop.plan.candidates.Candidate` from those (the decomposition as measured, whatever the
scheduler would choose today) and the time per call from the TFLOP/s.  Plans over the error bound and plans
whose cluster orientation cannot be told apart are left out.

The split into fit and validation shapes is by a seeded hash of the shape, so it is the same on every machine
and a new row falls on one side for good.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from rawcoop.plan import scheduler
from rawcoop.plan.candidates import Candidate, Problem, cluster_slots
from rawcoop.plan.kernel_config import BF16, FP16, LAYOUTS, kernel_config

KINDS = {"bf16": BF16, "fp16": FP16}
BAD_ERR = 1e-2
VALIDATION_SHARE = 0.3


@dataclass(frozen=True)
class Measured:
    row: int            # index of the oracle row (one shape)
    label: str
    auto: bool          # the automatic plan of the planner of the measurement's date
    problem: Problem
    candidate: Candidate
    us: float


def read_rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def shape_key(row: dict) -> str:
    return f"{row['dtype']} {row['layout']} {row['m']}x{row['n']}x{row['k']}"


def is_validation(row: dict, seed: int = 0) -> bool:
    """Whether a row's shape is in the validation set (VALIDATION_SHARE of the shapes, by hash)."""
    h = hashlib.sha256(f"{seed}:{shape_key(row)}".encode()).digest()
    return int.from_bytes(h[:4], "little") / 2 ** 32 < VALIDATION_SHARE


def problem_of(row: dict, sm_count: int = 132) -> Problem:
    kind = KINDS[row["dtype"]]
    return Problem(row["m"], row["n"], row["k"], 1, (kind, kind), LAYOUTS[row["layout"]], sm_count=sm_count)


def _cluster(p: Problem, bm: int, bn: int, swap: bool, tiles: int, options: dict):
    if "_cluster" in options and options["_cluster"] not in (None, 1):
        c = options["_cluster"]
        return (2, 1) if c == 2 else tuple(c)
    km, kn = p.kernel_view(swap)
    rows, cols = -(-km // bm), -(-kn // bn)
    fits = [c for c in ((2, 1), (1, 2)) if -(-rows // c[0]) * -(-cols // c[1]) == tiles]
    return fits[0] if len(fits) == 1 else None


def candidate_of(p: Problem, variant: dict) -> Candidate | None:
    """The candidate an oracle variant ran, or None when it cannot be rebuilt."""
    words = variant["cfg"].split()
    bm, bn = (int(x) for x in words[0].split("x"))
    swap, pp, sk, paired = "swap" in words, "pp" in words, "sk" in words, "cl2" in words
    d = variant["decomposition"]
    cluster = (1, 1)
    if paired:
        cluster = _cluster(p, bm, bn, swap, d["tiles"], variant["options"])
        if cluster is None:
            return None
    try:
        cfg = kernel_config(bn, swap, p.kinds, p.kmajor, p.out_name, False, True, 0, None, cluster_m=cluster[0],
                            cluster_n=cluster[1], pingpong=pp, stream_k=sk, block_m=bm)
    except ValueError:
        return None
    dec = scheduler.Decomposition(d["tiles"], d["k_blocks"], d["tiles_dp"], d["splits"], d["sk_ctas"])
    slots = cluster_slots(cfg, p.sm_count)
    return Candidate(cfg, None, dec, min(slots, dec.units), slots)


def measured(rows: list[dict]) -> list[Measured]:
    out = []
    for i, row in enumerate(rows):
        p = problem_of(row)
        flops = 2.0 * row["m"] * row["n"] * row["k"]
        for v in row["variants"]:
            if v.get("err") is None or v["err"] > BAD_ERR or not v.get("tflops"):
                continue
            c = candidate_of(p, v)
            if c is not None:
                out.append(Measured(i, v["label"], v["label"] == "auto", p, c, flops / (v["tflops"] * 1e6)))
    return out
