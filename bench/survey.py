"""How rawcoop's automatic plans fare against cuBLAS over many shapes, not just the benchmark's eight.

    PYTHONPATH=$PWD python bench/survey.py [--set llm,random] [--random N] [--seed S] \
        [--dtype bfloat16] [--rounds 5] [--iters 10] [--timing batch] [--json survey_bf16.json] [--worst 12]
    python bench/survey.py --list [--set ...]      # print the shapes only (no GPU)
    python bench/survey.py --compare before.json after.json   # two runs: drift from the unchanged plans (no GPU)

The benchmark (bench/gemm.py's main suite, TN) times every shape in alternating rounds against
``cupy.matmul``; this script chooses the shapes and sums the ratios up: geometric mean, quantiles,
how many are under 0.97 and 1.0, and the worst ones with the plan rawcoop ran (tile, ping-pong,
cluster, decomposition): where a planner rule or a kernel falls short of cuBLAS.

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

from bench.rows import geomean  # noqa: E402  (after the path insert)

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


def pitch_class(shape: str) -> str:
    """The survey's problems are 16-bit TN: a's and b's rows are K x 2 bytes apart, D's N x 2.  "operand":
    K = 8 mod 16 (a pitch that is an odd multiple of 16 bytes: rawcoop.plan.candidates.Problem.misaligned),
    "d": only D's pitch is, "aligned": neither."""
    from rawcoop.plan.candidates import PITCH_SECTOR
    m, n, k = (int(x) for x in shape.split("x")[:3])

    def odd(pitch):
        return pitch % PITCH_SECTOR == PITCH_SECTOR // 2
    return "operand" if odd(2 * k) else "d" if odd(2 * n) else "aligned"


HOST_MARGIN = 1.25
"""gpu_bound: a row times the GPU when each side's time is at least this multiple of its host time per call."""


def gpu_bound(row: dict) -> bool:
    """Whether both sides of a row are GPU-bound (their time >= HOST_MARGIN x their host time per call; rows
    without host times count as GPU-bound).  Batch timing still measures the host where a call's host path
    is longer than its kernel: on an H200 machine with a slower host every ~15 us row ran 1.4-1.7x slower
    on both sides (rawcoop 14.3 -> 24.7 us per call)."""
    for side in ("rawcoop", "baseline"):
        host = row.get(f"{side}_host_us")
        if host and row[f"{side}_ms"] * 1e3 < HOST_MARGIN * host:
            return False
    return True


def summarize(rows: list[dict], worst: int) -> dict:
    ratios = sorted(r["ratio"] for r in rows if r.get("ratio"))
    if not ratios:
        return {"count": 0}
    q = statistics.quantiles(ratios, n=10) if len(ratios) >= 2 else ratios * 9
    gpu_rows = [r for r in rows if r.get("ratio") and gpu_bound(r)]
    gpu = [r["ratio"] for r in gpu_rows]
    classes = {}
    for name in ("aligned", "operand", "d"):
        xs = [r["ratio"] for r in gpu_rows if pitch_class(r["shape"]) == name]
        if xs:
            classes[name] = {"count": len(xs), "geomean": geomean(xs), "under_0.97": sum(x < 0.97 for x in xs)}
    return {"count": len(ratios),
            "geomean": geomean(ratios),
            "gpu_bound": {"count": len(gpu), "geomean": geomean(gpu) if gpu else None},
            "min": ratios[0], "p10": q[0], "median": statistics.median(ratios), "p90": q[-1], "max": ratios[-1],
            "under_0.97": sum(x < 0.97 for x in ratios), "under_1.0": sum(x < 1.0 for x in ratios),
            "pitch_classes": classes,
            "worst": [{"shape": r["shape"], "ratio": r["ratio"], "tflops": r["rawcoop_tflops"],
                       "cublas_tflops": r["baseline_tflops"], "plan": r.get("plan")}
                      for r in sorted(rows, key=lambda r: r["ratio"])[:worst]]}


CLASS_NAMES = {"aligned": "aligned pitches", "operand": "a/b pitch misaligned (K = 8 mod 16)",
               "d": "only D's pitch misaligned (N = 8 mod 16)"}


def format_summary(s: dict) -> str:
    if not s.get("count"):
        return "no rows"
    lines = [f"{s['count']} shapes: geomean {s['geomean']:.3f}, min {s['min']:.3f}, p10 {s['p10']:.3f}, "
             f"median {s['median']:.3f}, p90 {s['p90']:.3f}, max {s['max']:.3f}; "
             f"{s['under_0.97']} under 0.97, {s['under_1.0']} under 1.0"]
    gb = s.get("gpu_bound")
    if gb and gb["count"] < s["count"]:
        lines.append(f"  GPU-bound rows (both sides >= {HOST_MARGIN}x their host time): {gb['count']}, geomean "
                     + (f"{gb['geomean']:.3f}" if gb["count"] else "-"))
    for name, c in s.get("pitch_classes", {}).items():
        lines.append(f"  GPU-bound, {CLASS_NAMES[name]}: {c['count']} shapes, geomean {c['geomean']:.3f}, "
                     f"{c['under_0.97']} under 0.97")
    lines.append("worst:")
    for w in s["worst"]:
        lines.append(f"  {w['shape']:>20s} {w['ratio']:.3f}  {w['tflops']:.0f} vs {w['cublas_tflops']:.0f} TFLOP/s  "
                     f"{w['plan']}")
    return "\n".join(lines)


def _plan_key(plan) -> str:
    """A plan label without its grid and decomposition (the kernel configuration)."""
    return (plan or "").split(" grid=")[0]


def compare(old: dict, new: dict) -> dict:
    """Two survey results (results JSON with plans) on the same shapes, e.g. before and after a rule change,
    measured in two runs.  Clocks and power drift between runs, so the shapes whose plan did not change
    measure the drift (their geomean of new / old ratio, and cuBLAS's own time ratio); each changed shape's
    new / old ratio is then given as is and divided by that drift."""
    a = {r["shape"]: r for r in old["rows"] if r.get("ratio")}
    b = {r["shape"]: r for r in new["rows"] if r.get("ratio")}
    shared = [s for s in a if s in b]
    if not shared:
        raise ValueError("the two surveys have no shape in common")
    same = [s for s in shared if _plan_key(a[s].get("plan")) == _plan_key(b[s].get("plan"))]
    steady = [s for s in same if gpu_bound(a[s]) and gpu_bound(b[s])]      # host-bound rows measure the host
    drift = geomean(b[s]["ratio"] / a[s]["ratio"] for s in steady) if steady else 1.0
    changed = [{"shape": s, "old": a[s]["ratio"], "new": b[s]["ratio"], "change": b[s]["ratio"] / a[s]["ratio"],
                "change_vs_drift": b[s]["ratio"] / a[s]["ratio"] / drift,
                "old_plan": _plan_key(a[s].get("plan")), "new_plan": _plan_key(b[s].get("plan")),
                "gpu_bound": gpu_bound(a[s]) and gpu_bound(b[s])}
               for s in shared if s not in same]
    return {"shared": len(shared), "same_plan": len(same), "steady": len(steady), "drift": drift,
            "cublas_time_drift": geomean(b[s]["baseline_ms"] / a[s]["baseline_ms"] for s in steady or shared),
            "changed": changed,
            "changed_geomean_vs_drift": geomean(c["change_vs_drift"] for c in changed) if changed else None}


def format_compare(c: dict) -> str:
    lines = [f"{c['shared']} shapes in both, {c['same_plan']} with the same plan, {c['steady']} of those GPU-bound in "
             f"both runs: their ratio moved {c['drift']:.3f}x (drift; cuBLAS time {c['cublas_time_drift']:.3f}x)",
             f"{len(c['changed'])} changed plan" + (f", geomean change against the drift "
                                                   f"{c['changed_geomean_vs_drift']:.3f}" if c["changed"] else "")]
    for x in sorted(c["changed"], key=lambda x: x["change_vs_drift"]):
        lines.append(f"  {x['shape']:>20s} {x['old']:.3f} -> {x['new']:.3f}  ({x['change_vs_drift']:.3f} against "
                     f"the drift{'' if x['gpu_bound'] else '; host-bound'})  {x['old_plan']} -> {x['new_plan']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/survey.py", description=__doc__.split("\n\n")[0])
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
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"),
                    help="compare two survey JSON files (no GPU): the shapes whose plan stayed give the drift "
                         "between the runs, the changed ones are shown against it")
    args = ap.parse_args(argv)
    if args.compare:
        try:
            docs = [json.loads(Path(p).read_text()) for p in args.compare]
            print(format_compare(compare(*docs)))
        except (OSError, ValueError, KeyError) as e:
            print(f"bench/survey.py --compare: {e}", file=sys.stderr)
            return 2
        return 0
    try:
        shapes = shapes_for([s.strip() for s in args.set.split(",") if s.strip()], args.random, args.seed)
    except ValueError as e:
        print(f"bench/survey.py: {e}", file=sys.stderr)
        return 2
    if args.list:
        print(",".join(f"{m}x{n}x{k}" for m, n, k in shapes))
        return 0

    from bench import harness, options
    from bench.environment import gpu_problem
    from bench.report import write_json
    problem = gpu_problem(0)
    if problem:
        print(f"bench/survey.py: {problem}; nothing was measured.", file=sys.stderr)
        return 1
    bargs = options.build_parser().parse_args(
        ["--suite", "main", "--dtype", args.dtype, "--layout", "TN", "--rounds", str(args.rounds),
         "--iters", str(args.iters), "--timing", args.timing,
         "--shapes", ",".join(f"{m}x{n}x{k}" for m, n, k in shapes)] + (["--json", args.json] if args.json else []))
    results = harness.run(bargs, "bench/survey.py")
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
        write_json(args.json, results)
    print(format_summary(results["survey"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
