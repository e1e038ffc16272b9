"""How far rawcoop's automatic plan is from the best plan its kernels can run, shape by shape.

    PYTHONPATH=$PWD python bench/oracle.py --random 32 --seed 33 [--shapes MxNxK,...] \
        [--dtype bfloat16] [--layout TN] [--rounds 5] [--iters 10] [--widths 144,176,...] [--jsonl oracle.jsonl]
    python bench/oracle.py --summary bench/results/oracle-h200.jsonl     # the summary of measured rows (no GPU)

For each shape the automatic plan and every distinct plan of a fixed set of forced options (CANDIDATES: tile
128x256 / 128x192 / 128x128 / 192x192 / 192x128, ping-pong, stream-K on and off, 2x1 and 1x2 clusters,
swap-AB; ``--widths``: 128xW tiles between the multiples of 64 too, kernel_config.NARROW_BOX_NS, each alone,
with stream-K and in 2x1 clusters) are built with ``rawcoop.gemm._plan_for``; options no kernel combines
(ValueError) are skipped, and candidates that give the automatic plan or an earlier candidate's (same
configuration, decomposition and kernel) are timed once. All plans and cuBLAS (``cupy.matmul``) run on the
benchmark's operands (normal data, rotated to >= 3x the L2) in the same alternating rounds
(bench/timing.py compare_variants, batch timing: calls back to back, not host-bound), after a NaN-poisoned
correctness run of each plan against float64 (a plan over 1e-2 relative error is reported and never counted
best). Printed per shape: the automatic plan's ratio to cuBLAS, the best plan's label and ratio, best /
auto. The summary: geomeans of auto and best against cuBLAS (the first is what users get, the second what a
perfect heuristic over these kernels would give), how many shapes leave >= 3% on the table, and which
candidates win. What this measures is the heuristic's gap; the gap between the best plan and cuBLAS is the
kernels'.  ``--jsonl`` appends one line per shape with every plan's times: the data a cost model for the
planner is fitted to (bench/results/oracle-h200.jsonl is such a file; its README describes the fields).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import survey  # noqa: E402  (after the path insert)
from bench.options import LAYOUTS, Shape, parse_gemm_shapes  # noqa: E402
from bench.rows import geomean  # noqa: E402
from bench.timing import compare_variants  # noqa: E402

CANDIDATES = [
    ("256", dict(_block_n=256, _streamk=False)),
    ("256 sk", dict(_block_n=256, _streamk=True)),
    ("256 2x1", dict(_block_n=256, _cluster=(2, 1))),
    ("256 1x2", dict(_block_n=256, _cluster=(1, 2))),
    ("192", dict(_block_n=192, _streamk=False)),
    ("192 sk", dict(_block_n=192, _streamk=True)),
    ("192 2x1", dict(_block_n=192, _cluster=(2, 1))),
    ("128 pp", dict(_block_n=128, _pingpong=True)),
    ("128", dict(_block_n=128, _pingpong=False, _streamk=False)),
    ("128 sk", dict(_block_n=128, _streamk=True)),
    ("128 2x1", dict(_block_n=128, _cluster=(2, 1))),
    ("tall 192x192", dict(_block_m=192, _block_n=192)),
    ("tall 192x128", dict(_block_m=192, _block_n=128)),
    ("swap", dict(_swap=True)),
    ("swap 256", dict(_swap=True, _block_n=256)),
]
KIND = {"bfloat16": "bf16", "float16": "fp16"}
BAD_ERR = 1e-2
LEAVES = 1.03
"""A shape "leaves something on the table" when its best plan is at least this much faster than auto."""


def plan_id(plan):
    return (plan.cfg, str(plan.decomposition), plan.kernel.spec)


def config_label(cfg) -> str:
    """A configuration in a few characters: tile, ping-pong, stream-K, swap-AB, cluster."""
    return (f"{cfg.block_m}x{cfg.block_n}" + (" pp" if cfg.pingpong else "") + (" sk" if cfg.stream_k else "")
            + (" swap" if cfg.d_colmajor else "") + (f" cl{cfg.cluster_size}" if cfg.cluster_size > 1 else ""))


def width_candidates(widths) -> list:
    """The forced options ``--widths`` adds per width: alone, with stream-K, in 2x1 clusters."""
    return [c for w in widths for c in ((f"{w}", dict(_block_n=w, _streamk=False)),
                                        (f"{w} sk", dict(_block_n=w, _streamk=True)),
                                        (f"{w} 2x1", dict(_block_n=w, _cluster=(2, 1))))]


def parse_widths(text: str) -> list[int]:
    """``--widths``: a comma list of kernel_config.NARROW_BOX_NS (ValueError otherwise)."""
    from rawcoop.plan import kernel_config
    try:
        widths = [int(w) for w in text.split(",") if w.strip()] if text else []
    except ValueError:
        raise ValueError(f"--widths {text!r}: a comma list of integers") from None
    bad = [w for w in widths if w not in kernel_config.NARROW_BOX_NS]
    if bad:
        raise ValueError(f"--widths: {bad} not in {kernel_config.NARROW_BOX_NS}")
    return widths


def _variant(label, kw, aliases, plan, err, rounds, flops) -> dict:
    """One plan's entry of a row (the schema of bench/results/oracle-h200.jsonl)."""
    ratios = [tt / to for to, tt in rounds]
    return {"label": label, "options": kw, "same_plan_as": aliases, "cfg": config_label(plan.cfg),
            "decomposition": dataclasses.asdict(plan.decomposition),
            "tflops": round(flops / statistics.median(to for to, _ in rounds) / 1e12, 2),
            "ratio": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
            "ratio_max": round(max(ratios), 4), "err": float(f"{err:.3g}")}


def run_shape(b, kind, layout, m, n, k, rounds, iters, extra=()):
    """One shape on ``b`` (a bench.suites.Bench): its row, the automatic plan and the distinct candidates
    against cuBLAS in the same rounds (``variants``, auto first)."""
    from rawcoop.gemm import _plan_for
    cp = b.cp
    sets = b.n_sets((m * k + n * k) * 2 + m * n * 4)
    ops = [b.data.operands(kind, layout, Shape(m, n, k), 100 + 10 * i) for i in range(sets)]
    outs = [cp.empty((m, n), ops[0][3]) for _ in range(sets)]
    theirs_out = [cp.empty((m, n), ops[0][3]) for _ in range(sets)]
    entries = []                                     # (label, options, plans per set)
    seen = {}
    aliases = collections.defaultdict(list)
    for label, kw in [("auto", {})] + CANDIDATES + list(extra):
        try:
            plans = [_plan_for(x, y, **kw) for x, y, *_ in ops]
        except ValueError:
            continue
        key = plan_id(plans[0])
        if key in seen:
            aliases[seen[key]].append(label)
            continue
        seen[key] = label
        entries.append((label, kw, plans))
    ref = ops[0][4] @ ops[0][5]
    errs = {}
    for label, _, plans in entries:
        outs[0].fill(float("nan"))
        plans[0].run(cp, outs[0])
        errs[label] = b.rel_err64(outs[0], ref)
    del ref

    def runner(plans):
        def run(i):
            plans[i].run(cp, outs[i])
        return run

    def theirs(i):
        cp.matmul(ops[i][0], ops[i][1], out=theirs_out[i])
    per = compare_variants(cp, [runner(p) for _, _, p in entries], theirs, sets, rounds, iters, None, "batch")
    flops = 2.0 * m * n * k
    return {"dtype": kind, "layout": layout, "m": m, "n": n, "k": k, "rounds": rounds, "iters": iters,
            "operand_sets": sets, "cublas_tflops": round(flops / statistics.median(tt for _, tt in per[0]) / 1e12, 2),
            "variants": [_variant(label, kw, aliases.get(label, []), plans[0], errs[label], rs, flops)
                         for (label, kw, plans), rs in zip(entries, per)]}


def best(row) -> dict:
    """The row's fastest plan within BAD_ERR (the automatic one when none is)."""
    good = [v for v in row["variants"] if v["err"] <= BAD_ERR]
    return max(good, key=lambda v: v["ratio"]) if good else row["variants"][0]


def format_row(row) -> str:
    a, b = row["variants"][0], best(row)
    bad = [v["label"] for v in row["variants"] if v["err"] > BAD_ERR]
    case = f"{row['dtype']}:{row['layout']}:{row['m']}x{row['n']}x{row['k']}"
    return (f"{case:24s} auto {a['cfg']:16s} {a['ratio']:.3f}  best {b['label']:13s} {b['cfg']:16s} "
            f"{b['ratio']:.3f}  best/auto {b['ratio'] / a['ratio']:.3f}  ({len(row['variants'])} plans)"
            + (f"  ERROR > {BAD_ERR:g}: {', '.join(bad)}" if bad else ""))


def summary(rows) -> list[str]:
    if not rows:
        return ["no shapes"]
    auto = [r["variants"][0]["ratio"] for r in rows]
    top = [best(r) for r in rows]
    gain = [b["ratio"] / a for b, a in zip(top, auto)]
    lines = [f"{len(rows)} shapes: auto vs cuBLAS geomean {geomean(auto):.3f}, "
             f"best vs cuBLAS {geomean(b['ratio'] for b in top):.3f}, best/auto {geomean(gain):.3f}; "
             f"{sum(g >= LEAVES for g in gain)} shapes leave >= 3% (best/auto), "
             f"{sum(b['ratio'] < 0.97 for b in top)} under 0.97 of cuBLAS even at best"]
    wins = collections.Counter(b["label"] for b, g in zip(top, gain) if g >= LEAVES)
    lines.append("winners where auto leaves >= 3%: " + (", ".join(f"{k} {v}" for k, v in wins.most_common())
                                                         or "none"))
    return lines


def shape_set(args) -> str:
    """What the rows' shapes are, for their ``set`` field."""
    parts = (["given shapes"] if args.shapes else []) + ([f"random seed {args.seed}"] if args.random else [])
    return " + ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench/oracle.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="", help="comma list of MxNxK (added to the random ones)")
    ap.add_argument("--random", type=int, default=0, help="random shapes as bench/survey.py draws them")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(KIND))
    ap.add_argument("--layout", default="TN", choices=sorted(LAYOUTS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--widths", default="", help="comma list of tile widths between the multiples of 64 "
                                                   "(kernel_config.NARROW_BOX_NS) to add as candidates")
    ap.add_argument("--summary", metavar="JSONL", help="print the summary of rows written by --jsonl and exit "
                                                    "(no GPU)")
    ap.add_argument("--jsonl", metavar="PATH", help="append one line per shape: its row, every plan included "
                                                   "(the format of bench/results/oracle-h200.jsonl)")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.summary:
        try:
            rows = [json.loads(line) for line in Path(args.summary).read_text().splitlines() if line.strip()]
            lines = summary(rows)
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as e:
            print(f"bench/oracle.py --summary: {args.summary}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        return 0
    try:
        extra = width_candidates(parse_widths(args.widths))
        shapes = [(s.m, s.n, s.k) for s in parse_gemm_shapes(args.shapes, 8, "16-bit")] if args.shapes else []
        shapes += survey.random_shapes(args.random, args.seed)
        if not shapes or args.rounds < 1 or args.iters < 1:
            raise ValueError("need shapes (--shapes or --random), --rounds >= 1 and --iters >= 1")
    except ValueError as e:
        print(f"bench/oracle.py: {e}", file=sys.stderr)
        return 2
    from bench.suites import open_bench
    b = open_bench(args, "bench/oracle.py")
    if b is None:
        return 1
    print(f"oracle on {b.info.name} ({b.info.sm_count} SMs), {args.dtype} {args.layout}, {len(shapes)} shapes",
          flush=True)
    head = {"gpu": b.info.name, "date": datetime.now(timezone.utc).date().isoformat(), "set": shape_set(args)}
    rows = []
    for m, n, k in shapes:
        row = dict(head, **run_shape(b, KIND[args.dtype], args.layout, m, n, k, args.rounds, args.iters, extra))
        rows.append(row)
        print(format_row(row), flush=True)
        b.free()
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
    for line in summary(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
