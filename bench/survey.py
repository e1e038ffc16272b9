"""How rawcoop's automatic plans fare against cuBLAS over many shapes, not just the bench's eight.

    PYTHONPATH=$PWD python bench/survey.py [--set llm,random] [--random N] [--seed S] \
        [--dtype bfloat16] [--rounds 5] [--iters 10] [--timing batch] [--json out.json] [--worst 12]
    python bench/survey.py --list [--set ...]      # print the shapes only (no GPU)

The bench (``rawcoop.bench``, main suite, TN) times every shape in alternating rounds against
``cupy.matmul``; this script chooses the shapes and sums the ratios up: geometric mean, quantiles,
how many are under 0.97 and 1.0, and the worst ones with the plan rawcoop ran (tile, ping-pong,
cluster, decomposition), which is where the next rule or kernel change should look.

Shape sets:
  llm     the projections of common LLM layers, M = tokens in {1024, 2048, 4096, 8192}:
          (N, K) of Llama-3 8B (qkv 6144x4096, o 4096x4096, gate+up 28672x4096, down 4096x14336),
          Llama-3 70B (qkv 10240x8192, o 8192x8192, down 8192x28672) and Qwen2 7B
          (qkv 4608x3584, o 3584x3584, gate+up 37888x3584, down 3584x18944)
  random  ``--random`` shapes (default 24), M, N, K log-uniform in [384, 12288], each a multiple of
          8 (16-byte rows for TMA), so most are ragged against every tile; seeded (``--seed``)
"""
from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LLM_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
          (10240, 8192), (8192, 8192), (8192, 28672),
          (4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]
LLM_M = [1024, 2048, 4096, 8192]


def llm_shapes() -> list[tuple[int, int, int]]:
    return [(m, n, k) for (n, k) in LLM_NK for m in LLM_M]


def random_shapes(count: int, seed: int, lo: int = 384, hi: int = 12288) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)

    def draw():
        return max(8, int(round(math.exp(rng.uniform(math.log(lo), math.log(hi))) / 8)) * 8)
    return [(draw(), draw(), draw()) for _ in range(count)]


def shapes_for(sets: list[str], count: int, seed: int) -> list[tuple[int, int, int]]:
    out = []
    for s in sets:
        if s == "llm":
            out += llm_shapes()
        elif s == "random":
            out += random_shapes(count, seed)
        else:
            raise ValueError(f"--set: unknown set {s!r} (llm, random)")
    seen, unique = set(), []
    for sh in out:
        if sh not in seen:
            seen.add(sh)
            unique.append(sh)
    return unique


def plan_label(cp, dt, m: int, n: int, k: int) -> str:
    """The automatic plan of an (M, K) x (K, N) TN problem, as RAWCOOP_PRINT_CONFIG prints it."""
    import importlib
    g = importlib.import_module("rawcoop.gemm")      # the module (rawcoop.gemm the attribute is the function)
    a = cp.empty((m, k), dt)
    b = cp.empty((n, k), dt).T
    plan = g._plan_for(a, b)
    return f"{plan.cfg.spec.label} grid={plan.grid[0]} {plan.decomposition}"


def summarize(rows: list[dict], worst: int) -> dict:
    ratios = sorted(r["ratio"] for r in rows if r.get("ratio"))
    if not ratios:
        return {"count": 0}
    q = statistics.quantiles(ratios, n=10) if len(ratios) >= 2 else ratios * 9
    return {"count": len(ratios),
            "geomean": math.exp(sum(math.log(x) for x in ratios) / len(ratios)),
            "min": ratios[0], "p10": q[0], "median": statistics.median(ratios), "p90": q[-1], "max": ratios[-1],
            "under_0.97": sum(x < 0.97 for x in ratios), "under_1.0": sum(x < 1.0 for x in ratios),
            "worst": [{"shape": r["shape"], "ratio": r["ratio"], "tflops": r["rawcoop_tflops"],
                       "cublas_tflops": r["baseline_tflops"], "plan": r.get("plan")}
                      for r in sorted(rows, key=lambda r: r["ratio"])[:worst]]}


def format_summary(s: dict) -> str:
    if not s.get("count"):
        return "no rows"
    lines = [f"{s['count']} shapes: geomean {s['geomean']:.3f}, min {s['min']:.3f}, p10 {s['p10']:.3f}, "
             f"median {s['median']:.3f}, p90 {s['p90']:.3f}, max {s['max']:.3f}; "
             f"{s['under_0.97']} under 0.97, {s['under_1.0']} under 1.0", "worst:"]
    for w in s["worst"]:
        lines.append(f"  {w['shape']:>20s} {w['ratio']:.3f}  {w['tflops']:.0f} vs {w['cublas_tflops']:.0f} TFLOP/s  "
                     f"{w['plan']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="llm,random")
    ap.add_argument("--random", type=int, default=24)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timing", default="batch", choices=["batch", "calls"],
                    help="the bench's timing (default batch: kernels back to back, so small shapes time the GPU "
                         "and not each side's host path)")
    ap.add_argument("--worst", type=int, default=12)
    ap.add_argument("--json")
    ap.add_argument("--list", action="store_true", help="print the shapes and exit (no GPU)")
    args = ap.parse_args(argv)
    try:
        shapes = shapes_for([s.strip() for s in args.set.split(",") if s.strip()], args.random, args.seed)
    except ValueError as e:
        print(f"survey: {e}", file=sys.stderr)
        return 2
    if args.list:
        print(",".join(f"{m}x{n}x{k}" for m, n, k in shapes))
        return 0

    from rawcoop import bench
    bargs = bench.build_parser().parse_args(
        ["--suite", "main", "--dtype", args.dtype, "--layout", "TN", "--rounds", str(args.rounds),
         "--iters", str(args.iters), "--timing", args.timing, "--shapes", ",".join(f"{m}x{n}x{k}" for m, n, k in shapes)]
        + (["--json", args.json] if args.json else []))
    results = bench.run(bargs)
    import cupy as cp
    import ml_dtypes
    import numpy as np
    dt = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}[args.dtype]
    for r in results["rows"]:
        m, n, k = (int(x) for x in r["shape"].split("x")[:3])
        try:
            r["plan"] = plan_label(cp, dt, m, n, k)
        except Exception as e:  # noqa: BLE001 - a label is diagnostics only
            r["plan"] = f"? ({type(e).__name__}: {e})"
    results["survey"] = summarize(results["rows"], args.worst)
    if args.json:
        bench.write_json(args.json, results)
    print(format_summary(results["survey"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
