"""Random shapes whose automatic plan a rule change moves: the cases for a bench/rule_ab.py run.

    PYTHONPATH=$PWD python bench/rule_cases.py --rule gemm_configs.STREAM_K_MODEL_OVERHEAD=0.25/0.5 \
        [--kinds bf16,fp16] [--layouts TN,NN,NT,TT] [--draws 20000] [--pick 16] [--seed 1] \
        [--lo 256 --hi 16384] [--step 64]

No GPU: plans come from gemm_configs.plan_config (the function rawcoop.gemm plans with) on the H200's 132
SMs, contiguous operands, no epilogue.  Each draw takes M, N, K log-uniform in [lo, hi], multiples of
``--step`` (default 64; 8 draws misaligned pitches too, K = 8 mod 16; 4, for tf32 alone, K = 4 mod 8), and
a kind and a layout from the lists; the draws whose plan (tile, ping-pong, stream-K, cluster, swap-AB, and
the decomposition) differs between the rule's value A and value B are counted, grouped by
transition, and ``--pick`` of them (sampled with ``--seed`` + 1, sorted by K) are printed as one
``--cases`` list for rule_ab.  A sample drawn here is out of sample for the rule only if the rule was not
fitted on it: use a new seed for every measurement.
"""
from __future__ import annotations

import argparse
import collections
import math
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rule_ab  # noqa: E402  (after the path insert: parse_rule, config_label)
from rawcoop import gemm_configs as gc, scheduler  # noqa: E402

KINDS = {"bf16": (gc.BF16, "bfloat16"), "fp16": (gc.FP16, "float16"), "e4m3": (gc.E4M3, "bfloat16"),
         "tf32": (gc.TF32, "float32")}
SM_COUNT = 132
CLUSTER_SLOTS = 66       # 2-CTA clusters resident at once on the H200 (every kernel of two CTAs per cluster)


def plan_key(kind: str, layout: str, m: int, n: int, k: int) -> tuple[str, str]:
    """(the configuration's label, its decomposition as rawcoop.gemm prints it) of the automatic plan;
    clusters of two run on CLUSTER_SLOTS resident clusters (the H200's cuOccupancyMaxActiveClusters)."""
    ik, out = KINDS[kind]
    cfg = gc.plan_config(m, n, k, 1, SM_COUNT, kinds=(ik, ik), kmajor=gc.LAYOUTS[layout], out_name=out,
                         use_c=False, c_rowmajor=True, bias_kind=0, activation=None, block=False)
    km, kn = (n, m) if cfg.d_colmajor else (m, n)
    slots = CLUSTER_SLOTS if cfg.cluster_size > 1 else SM_COUNT
    sched = scheduler.schedule(km, kn, cfg.block_m, cfg.block_n, slots, None, 1, k=k, block_k=cfg.block_k,
                               cluster=cfg.cluster, stream_k=cfg.stream_k, chain=cfg.pingpong)
    return rule_ab.config_label(cfg), str(sched.decomposition)


def splits_of(decomposition: str) -> str:
    """'splits N' of a decomposition's text (stream-K: its pieces)."""
    found = re.search(r"splits=(\d+)", decomposition)
    return f"splits {found.group(1) if found else '?'}"


def changed_cases(rules, kinds, layouts, draws: int, seed: int, lo: int, hi: int, step: int = 64):
    """(case text, plan under A, plan under B) for each draw whose plan the rules move."""
    rng = random.Random(seed)

    def draw():
        return max(step, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / step)) * step)
    out = []
    saved = [getattr(mod, name) for mod, name, _, _ in rules]
    try:
        for _ in range(draws):
            m, n, k = draw(), draw(), draw()
            kind, layout = rng.choice(kinds), rng.choice(layouts)
            if kind in ("e4m3", "tf32"):
                layout = "TN"
            plans = []
            for pick in (2, 3):
                for rule in rules:
                    setattr(rule[0], rule[1], rule[pick])
                plans.append(plan_key(kind, layout, m, n, k))
            if plans[0] != plans[1]:
                out.append((f"{kind}:{layout}:{m}x{n}x{k}", plans[0], plans[1]))
    finally:
        for (mod, name, _, _), v in zip(rules, saved):
            setattr(mod, name, v)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rule", action="append", required=True, metavar="module.NAME=A/B")
    ap.add_argument("--kinds", default="bf16,fp16")
    ap.add_argument("--layouts", default="TN,NN,NT,TT")
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--pick", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lo", type=int, default=256)
    ap.add_argument("--hi", type=int, default=16384)
    ap.add_argument("--step", type=int, default=64,
                    help="M, N, K are multiples of this (8: misaligned 16-bit/fp8 pitches too; 4, tf32 only: "
                         "misaligned tf32 pitches)")
    args = ap.parse_args(argv)
    try:
        rules = [rule_ab.parse_rule(r) for r in args.rule]
        kinds = [x.strip().lower() for x in args.kinds.split(",") if x.strip()]
        layouts = [x.strip().upper() for x in args.layouts.split(",") if x.strip()]
        for x in kinds:
            if x not in KINDS:
                raise ValueError(f"--kinds: {x!r} is not one of {', '.join(KINDS)}")
        for x in layouts:
            if x not in gc.LAYOUTS:
                raise ValueError(f"--layouts: {x!r} is not one of {', '.join(gc.LAYOUTS)}")
        if (not kinds or not layouts or args.draws < 1 or args.pick < 0 or not 64 <= args.lo <= args.hi
                or args.step not in (8, 16, 32, 64) and not (args.step == 4 and kinds == ["tf32"])):
            raise ValueError("need kinds, layouts, --draws >= 1, --pick >= 0, 64 <= --lo <= --hi "
                             "and --step 8, 16, 32 or 64 (4: tf32 alone, whose misaligned K is 4 mod 8)")
    except ValueError as e:
        print(f"rule_cases.py: {e}", file=sys.stderr)
        return 2
    ch = changed_cases(rules, kinds, layouts, args.draws, args.seed, args.lo, args.hi, args.step)
    print(f"{len(ch)} of {args.draws} draws change plan ({100 * len(ch) / args.draws:.2f}%)")
    moves = collections.Counter(f"{a[0]} {splits_of(a[1])}  ->  {b[0]} {splits_of(b[1])}" for _, a, b in ch)
    for move, count in moves.most_common(12):
        print(f"  {count:5d}  {move}")
    picks = random.Random(args.seed + 1).sample(ch, min(args.pick, len(ch)))
    picks.sort(key=lambda c: int(c[0].rsplit("x", 1)[1]))
    for case, a, b in picks:
        print(f"  {case:28s} {a[0]:16s} -> {b[0]}")
    print(",".join(c[0] for c in picks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
