"""The planner on shapes it never saw: regret against the best measured candidate, and the ratio to cuBLAS.

    PYTHONPATH=$PWD python bench/validate_planner.py [--count 48] [--seed 1000] [--dtypes bfloat16,float16]
        [--top 8] [--rounds 5] [--iters 10] [--jsonl validation.jsonl]

Draws ``--count`` seeded LLM-like shapes (M log-uniform in 64..16384, N and K in 1024..57344, a third of each
ragged: not a multiple of 8 elements where the layout allows it), each with a random layout and dtype.  For every
shape the automatic plan, bench/oracle.py's fixed candidates and the ``--top`` candidates the cost model ranks
cheapest (forced through ``_`` options) run against cuBLAS (``cupy.matmul``) in the same alternating rounds, on
normal data rotated past the L2.  Printed: per shape the automatic plan against the best measured (regret) and
against cuBLAS; the summary gives both as geomeans with the worst shape, against the targets (regret <= 2%
geomean and <= 5% everywhere; cuBLAS ratio >= 1.03 geomean and >= 0.97 everywhere).  ``--jsonl`` appends the
rows in bench/results/oracle-h200.jsonl's format (new cost-model data; its shapes hash into the fit or the
validation side like the others, bench/costdata.py).
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import oracle  # noqa: E402
from rawcoop.plan.kernel_config import LAYOUTS  # noqa: E402
from bench.rows import geomean  # noqa: E402


def draw_shapes(count: int, seed: int, dtypes: list[str]) -> list[tuple[str, str, int, int, int]]:
    rng = random.Random(seed)

    def size(lo, hi, layout_allows_ragged):
        x = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        return x if layout_allows_ragged and rng.random() < 1 / 3 else max(8, x // 8 * 8)
    out = []
    for _ in range(count):
        layout = rng.choice(sorted(LAYOUTS))
        a_kmajor, b_kmajor = layout[0] == "T", layout[1] == "N"
        # TMA needs 16-byte pitches: the pitch axis of each operand stays a multiple of 8 elements
        m = size(64, 16384, a_kmajor)
        n = size(1024, 57344, b_kmajor)
        k = size(1024, 57344, False)
        out.append((rng.choice(dtypes), layout, m, n, k))
    return out


def model_candidates(dtype: str, layout: str, m: int, n: int, k: int, top: int) -> list:
    """The ``top`` cheapest candidates of the cost model, as labelled forced options."""
    from rawcoop.plan.candidates import Problem
    from rawcoop.plan.kernel_config import IN_KINDS
    from rawcoop.plan.select import ranked
    kind = IN_KINDS[dtype]
    out = []
    for _, c in ranked(Problem(m, n, k, 1, (kind, kind), LAYOUTS[layout]))[:top]:
        cfg = c.cfg
        kw = dict(_block_n=cfg.block_n, _block_m=cfg.block_m, _swap=cfg.d_colmajor, _cluster=cfg.cluster,
                  _pingpong=cfg.pingpong, _streamk=cfg.stream_k)
        if c.splits is not None:
            kw["_splits"] = c.splits
        out.append((f"model {c.label}", kw))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/validate_planner.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--jsonl", metavar="PATH")
    args = ap.parse_args(argv)
    dtypes = [d for d in args.dtypes.split(",") if d]
    if any(d not in oracle.KIND for d in dtypes) or args.count < 1:
        print(f"bench/validate_planner.py: --dtypes from {sorted(oracle.KIND)}, --count >= 1", file=sys.stderr)
        return 2
    from bench.suites import open_bench
    b = open_bench(args, "bench/validate_planner.py")
    if b is None:
        return 1
    head = {"gpu": b.info.name, "date": datetime.now(timezone.utc).date().isoformat(),
            "set": f"validation seed {args.seed}"}
    regrets, ratios = [], []
    for dtype, layout, m, n, k in draw_shapes(args.count, args.seed, dtypes):
        extra = model_candidates(dtype, layout, m, n, k, args.top)
        row = dict(head, **oracle.run_shape(b, oracle.KIND[dtype], layout, m, n, k, args.rounds, args.iters, extra))
        auto, top = row["variants"][0], oracle.best(row)
        regrets.append(top["ratio"] / auto["ratio"])
        ratios.append(auto["ratio"])
        print(f"{oracle.format_row(row)}  vs cuBLAS {auto['ratio']:.3f}", flush=True)
        b.free()
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
    print(f"{len(regrets)} shapes: planner regret geomean {geomean(regrets):.4f} (target <= 1.02), worst "
          f"{max(regrets):.3f} (<= 1.05), {sum(r > 1.05 for r in regrets)} over 5%; vs cuBLAS geomean "
          f"{geomean(ratios):.3f} (>= 1.03), worst {min(ratios):.3f} (>= 0.97)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
