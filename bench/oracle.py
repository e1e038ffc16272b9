"""How far rawcoop's automatic plan is from the best plan its kernels can run, shape by shape.

    PYTHONPATH=$PWD python bench/oracle.py [--shapes MxNxK,...] [--random 32 --seed 33] \
        [--dtype bfloat16] [--layout TN] [--rounds 5] [--iters 10] [--widths 144,176,...] [--json out.json]

For each shape the automatic plan and every distinct plan of a fixed set of forced options (CANDIDATES: tile
128x256 / 128x192 / 128x128 / 192x192 / 192x128, ping-pong, stream-K on and off, 2x1 and 1x2 clusters,
swap-AB; ``--widths``: 128xW tiles between the multiples of 64 too, configs.NARROW_BOX_NS, each alone,
with stream-K and in 2x1 clusters) are built with ``rawcoop.gemm._plan_for``; options no kernel combines
(ValueError) are skipped, and candidates that give the automatic plan or an earlier candidate's (same
configuration, decomposition and kernel) are timed once. All plans and cuBLAS (``cupy.matmul``) run on the
bench's operands (normal data, rotated to >= 3x the L2) in the same alternating rounds
(``bench.harness.compare_variants``, batch timing: calls back to back, not host-bound), after a NaN-poisoned
correctness run of each plan against float64 (a plan over 1e-2 relative error is reported and never counted
best). Printed per shape: the automatic plan's ratio to cuBLAS, the best plan's label and ratio, best /
auto. The summary: geomeans of auto and best against cuBLAS (the first is what users get, the second what a
perfect heuristic over these kernels would give), how many shapes leave >= 3% on the table, and which
candidates win. What this measures is the heuristic's gap; the gap between the best plan and cuBLAS is the
kernels'.
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rule_ab  # noqa: E402  (after the path insert: operands, config_label)
import survey  # noqa: E402
from bench import harness  # noqa: E402

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


def plan_id(plan):
    return (plan.cfg, str(plan.decomposition), plan.kernel.spec)


def width_candidates(widths) -> list:
    """The forced options ``--widths`` adds per width: alone, with stream-K, in 2x1 clusters."""
    return [c for w in widths for c in ((f"{w}", dict(_block_n=w, _streamk=False)),
                                        (f"{w} sk", dict(_block_n=w, _streamk=True)),
                                        (f"{w} 2x1", dict(_block_n=w, _cluster=(2, 1))))]


def parse_widths(text: str) -> list[int]:
    """``--widths``: a comma list of configs.NARROW_BOX_NS (ValueError otherwise)."""
    from rawcoop.plan import configs
    widths = [int(w) for w in text.split(",") if w.strip()] if text else []
    bad = [w for w in widths if w not in configs.NARROW_BOX_NS]
    if bad:
        raise ValueError(f"--widths: {bad} not in {configs.NARROW_BOX_NS}")
    return widths


def run_shape(b, kind, layout, m, n, k, rounds, iters, extra=()):
    """One shape: its row (auto, the distinct candidates, cuBLAS, in the same rounds)."""
    from rawcoop.gemm import _plan_for
    cp = b.cp
    sets = bench.n_sets_for((m * k + n * k) * 2 + m * n * 4, b.info.l2_bytes)
    ops = [rule_ab.operands(b, kind, layout, m, n, k, 100 + 10 * i) for i in range(sets)]
    outs = [cp.empty((m, n), ops[0][3]) for _ in range(sets)]
    theirs_out = [cp.empty((m, n), ops[0][3]) for _ in range(sets)]
    entries = []                                     # (label, plans per set)
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
        entries.append((label, plans))
    ref = ops[0][4] @ ops[0][5]
    errs = {}
    for label, plans in entries:
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
    per = bench.compare_variants(cp, [runner(p) for _, p in entries], theirs, sets, rounds, iters, None, "batch")
    flops = 2.0 * m * n * k
    variants = []
    for (label, plans), rs in zip(entries, per):
        ratios = [tt / to for to, tt in rs]
        variants.append({"label": label, "aliases": aliases.get(label, []), "cfg": rule_ab.config_label(plans[0].cfg),
                         "decomposition": str(plans[0].decomposition), "err": errs[label],
                         "tflops": flops / statistics.median(to for to, _ in rs) / 1e12,
                         "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                         "vs_auto": statistics.median(a / t for (a, _), (t, _) in zip(per[0], rs))})
    good = [v for v in variants if v["err"] <= BAD_ERR]
    best = max(good, key=lambda v: v["vs_auto"]) if good else variants[0]
    return {"case": f"{kind}:{layout}:{m}x{n}x{k}", "sets": sets,
            "cublas_tflops": flops / statistics.median(tt for _, tt in per[0]) / 1e12,
            "auto": variants[0], "best": best, "variants": variants}


def format_row(row) -> str:
    a, b = row["auto"], row["best"]
    bad = [v["label"] for v in row["variants"] if v["err"] > BAD_ERR]
    return (f"{row['case']:24s} auto {a['cfg']:16s} {a['ratio']:.3f}  best {b['label']:13s} {b['cfg']:16s} "
            f"{b['ratio']:.3f}  best/auto {b['vs_auto']:.3f}  ({len(row['variants'])} plans)"
            + (f"  ERROR > {BAD_ERR:g}: {', '.join(bad)}" if bad else ""))


def summary(rows) -> list[str]:
    if not rows:
        return ["no shapes"]
    gm = bench.geomean
    lines = [f"{len(rows)} shapes: auto vs cuBLAS geomean {gm(r['auto']['ratio'] for r in rows):.3f}, "
             f"best vs cuBLAS {gm(r['best']['ratio'] for r in rows):.3f}, "
             f"best/auto {gm(r['best']['vs_auto'] for r in rows):.3f}; "
             f"{sum(r['best']['vs_auto'] >= 1.03 for r in rows)} shapes leave >= 3% (best/auto), "
             f"{sum(r['best']['ratio'] < 0.97 for r in rows)} under 0.97 of cuBLAS even at best"]
    wins = collections.Counter(r["best"]["label"] for r in rows if r["best"]["vs_auto"] >= 1.03)
    lines.append("winners where auto leaves >= 3%: " + ", ".join(f"{k} {v}" for k, v in wins.most_common()))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/oracle.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="", help="comma list of MxNxK (added to the random ones)")
    ap.add_argument("--random", type=int, default=0, help="random shapes as bench/survey.py draws them")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(KIND))
    ap.add_argument("--layout", default="TN", choices=sorted(bench.LAYOUTS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--widths", default="", help="comma list of tile widths between the multiples of 64 "
                                                   "(configs.NARROW_BOX_NS) to add as candidates")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    try:
        extra = width_candidates(parse_widths(args.widths))
        shapes = [(s.m, s.n, s.k) for s in bench.parse_gemm_shapes(args.shapes, 8, "16-bit")] if args.shapes else []
        shapes += survey.random_shapes(args.random, args.seed)
        if not shapes or args.rounds < 1 or args.iters < 1:
            raise ValueError("need shapes (--shapes or --random), --rounds >= 1 and --iters >= 1")
    except ValueError as e:
        print(f"oracle: {e}", file=sys.stderr)
        return 2
    b = rule_ab.open_bench(args, "oracle")
    if b is None:
        return 1
    print(f"oracle on {b.info.name} ({b.info.sm_count} SMs), {args.dtype} {args.layout}, {len(shapes)} shapes",
          flush=True)
    rows = []
    for m, n, k in shapes:
        row = run_shape(b, KIND[args.dtype], args.layout, m, n, k, args.rounds, args.iters, extra)
        rows.append(row)
        print(format_row(row), flush=True)
        b.free()
    for line in summary(rows):
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"dtype": args.dtype, "layout": args.layout, "rounds": args.rounds,
                                               "iters": args.iters, "gpu": b.info.name, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
