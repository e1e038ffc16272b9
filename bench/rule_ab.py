"""A/B of a host rule: rawcoop.gemm's automatic plans with a rule constant at
value A against value B, on the same operands, timed in alternating rounds.

    PYTHONPATH=$PWD python bench/rule_ab.py \
        --rule 'gemm_configs.PINGPONG_ONE_WAVE_K_BLOCKS={}/{0:32,1:32}' \
        --cases bf16:1024x5760x2048,fp16:NN:2752x2304x1024,e4m3:1856x3200x2048,tf32:3136x1024x6144 \
        [--rule scheduler.TAIL_MAX_SPLITS=4/16 ...] [--rounds 7] [--iters 10] [--json out.json]

A rule is a module constant of rawcoop (``module.NAME=A/B``, values parsed as
the constant's type; tuples as ``(0.2,0.8)``, dicts as ``{0:32,3:48}``); several --rule options change
together.  For each case the plan is built twice (``rawcoop.gemm._plan_for``
with the constants set to A, then to B; plans are not cached there) and the
two plans run their kernels directly (``plan.run``) on the bench's operand
sets (rawcoop.bench.Bench), rotated to >= 3x the L2, in ``--rounds`` rounds
of ``--iters`` calls between two CUDA events (one pair per round and side, A
first in even rounds: rawcoop.bench.compare_variants; ``--timing calls``: the
median of per-call event pairs instead, as the main bench times), so clock and power
drift falls on both sides alike.  Printed per case: each side's
configuration and decomposition, TFLOP/s (median over rounds), B/A = A's
time / B's time per round (median and range; > 1: B is faster), and each
side's relative Frobenius error against float64 of the exact inputs
(NaN-poisoned output first).  Cases whose two plans are the same are
reported and not timed.  The summary: geomean of B/A and on how many cases
B was faster.  This is how stops 24-25 measured their scheduler and tile
rules (bench/NOTES.md); the bench's --variants compare *forced* options
instead (rawcoop.gemm's plan cache keys the options, not rule constants).

Kinds: bf16, fp16 (16-bit output, any layout), e4m3 (per-tensor scales,
bf16 output, TN), tf32 (float32 output, TN).  Cases: ``KIND[:LAYOUT]:MxNxK``.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rawcoop import bench  # noqa: E402  (after the path insert)

KINDS = ("bf16", "fp16", "e4m3", "tf32")


def parse_case(text: str) -> tuple[str, str, int, int, int]:
    """``KIND[:LAYOUT]:MxNxK`` -> (kind, layout, m, n, k); ValueError naming the rule broken."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"case {text!r}: use KIND:MxNxK or KIND:LAYOUT:MxNxK")
    kind, layout = parts[0].lower(), (parts[1].upper() if len(parts) == 3 else "TN")
    if kind not in KINDS:
        raise ValueError(f"case {text!r}: kind must be one of {', '.join(KINDS)}")
    if layout not in bench.LAYOUTS:
        raise ValueError(f"case {text!r}: layout must be one of {', '.join(bench.LAYOUTS)}")
    if kind in ("e4m3", "tf32") and layout != "TN":
        raise ValueError(f"case {text!r}: {kind} runs TN only (K-major A and B)")
    try:
        m, n, k = (int(x) for x in parts[-1].lower().split("x"))
    except ValueError:
        raise ValueError(f"case {text!r}: the shape must be MxNxK with integers") from None
    if min(m, n, k) < 1:
        raise ValueError(f"case {text!r}: M, N and K must be positive")
    if kind == "e4m3" and k % 16:
        raise ValueError(f"case {text!r}: fp8 K must be a multiple of 16 (TMA's 16-byte rows)")
    if kind != "e4m3" and k % (4 if kind == "tf32" else 8):
        raise ValueError(f"case {text!r}: K must keep the K-major rows 16-byte aligned "
                         f"(a multiple of {4 if kind == 'tf32' else 8})")
    return kind, layout, m, n, k


def parse_rule(text: str):
    """``module.NAME=A/B`` -> (module object, NAME, A, B), the values of the
    constant's type (int, float, bool, tuple, dict); ValueError when the module or
    the constant does not exist or a value does not parse."""
    try:
        target, values = text.split("=", 1)
        modname, name = target.strip().rsplit(".", 1)
        va, vb = values.split("/")
    except ValueError:
        raise ValueError(f"rule {text!r}: use module.NAME=A/B (e.g. gemm_configs.WIDE_TILES_FILL=0.9/0.78)"
                         ) from None
    try:
        mod = importlib.import_module("rawcoop." + modname)
    except ImportError:
        raise ValueError(f"rule {text!r}: no module rawcoop.{modname}") from None
    if not hasattr(mod, name):
        raise ValueError(f"rule {text!r}: rawcoop.{modname} has no constant {name}")
    current = getattr(mod, name)

    def conv(v):
        try:
            x = ast.literal_eval(v.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"rule {text!r}: {v!r} is not a literal value") from None
        if isinstance(current, bool) or not isinstance(current, (int, float, tuple)):
            ok = isinstance(x, type(current))
        elif isinstance(current, tuple):
            ok = isinstance(x, tuple)
        else:
            ok = isinstance(x, (int, float)) and not isinstance(x, bool)
        if not ok:
            raise ValueError(f"rule {text!r}: {v!r} does not match {name}'s current value {current!r}")
        return type(current)(x) if isinstance(current, (int, float)) and not isinstance(current, bool) else x
    return mod, name, conv(va), conv(vb)


def config_label(cfg) -> str:
    return (f"{cfg.block_m}x{cfg.block_n}" + (" pp" if cfg.pingpong else "") + (" sk" if cfg.stream_k else "")
            + (" swap" if cfg.d_colmajor else "") + (f" cl{cfg.cluster_size}" if cfg.cluster_size > 1 else ""))


def operands(b, kind, layout, m, n, k, seed):
    """(a, b, gemm keywords, output dtype, a64, b64) from ``b``'s (a
    rawcoop.bench.Bench) operand helpers, the bench's data: normal, e4m3
    quantised per tensor (Bench.fp8_operand) with its dequantisation scales
    as gemm's scale_a / scale_b, so a64 @ b64 is the exact product."""
    cp = b.cp
    shape = bench.Shape(m, n, k)
    if kind in ("bf16", "fp16"):
        dt = b.dtypes[kind]
        x, y = b.operand_a(shape, layout, dt, seed), b.operand_b(shape, layout, dt, seed + 1)
        return x, y, {}, dt, x.astype(cp.float64), y.astype(cp.float64)
    if kind == "tf32":
        x, y = b.operand_a(shape, "TN", cp.float32, seed), b.operand_b(shape, "TN", cp.float32, seed + 1)
        return x, y, {"precision": "tf32"}, b.np.dtype(b.np.float32), x.astype(cp.float64), y.astype(cp.float64)
    values = b.e4m3_values()
    (qa, sa), (qb, sb) = b.fp8_operand(m, k, seed), b.fp8_operand(n, k, seed + 1)
    a64 = values[qa.astype(cp.int32)].astype(cp.float64) * sa
    bt64 = values[qb.astype(cp.int32)].astype(cp.float64) * sb
    bf16 = b.dtypes["bf16"]
    kw = {"a_format": "e4m3", "b_format": "e4m3", "scale_a": sa, "scale_b": sb, "out_dtype": bf16}
    return qa, qb.T, kw, bf16, a64, bt64.T


def run_case(b, case, rules, rounds, iters, timing="batch"):
    """One case on ``b`` (a rawcoop.bench.Bench: its CuPy, GPU info and operands): the row.  ``timing``:
    rawcoop.bench.time_calls's (batch: one event pair per round and side; calls: the median call)."""
    from rawcoop.gemm import _plan_for
    cp = b.cp
    kind, layout, m, n, k = case
    in_bytes = {"bf16": 2, "fp16": 2, "e4m3": 1, "tf32": 4}[kind]
    sets = bench.n_sets_for((m * k + n * k) * in_bytes + m * n * 4, b.info.l2_bytes)
    ops = [operands(b, kind, layout, m, n, k, 100 + 10 * i) for i in range(sets)]
    outs = [cp.empty((m, n), ops[0][3]) for _ in range(sets)]
    plans = {}
    saved = [getattr(mod, name) for mod, name, _, _ in rules]
    try:
        for side, pick in (("A", 2), ("B", 3)):
            for rule in rules:
                setattr(rule[0], rule[1], rule[pick])
            plans[side] = [_plan_for(x, y, **kw) for x, y, kw, *_ in ops]
    finally:
        for (mod, name, _, _), v in zip(rules, saved):
            setattr(mod, name, v)
    row = {"case": f"{kind}:{layout}:{m}x{n}x{k}", "sets": sets,
           "cfg_a": config_label(plans["A"][0].cfg), "cfg_b": config_label(plans["B"][0].cfg),
           "dec_a": str(plans["A"][0].decomposition), "dec_b": str(plans["B"][0].decomposition)}
    # (the kernels compared too: a rule may change only a kernel define, as stop 27's SPLIT_CHAIN did)
    if (plans["A"][0].cfg == plans["B"][0].cfg and row["dec_a"] == row["dec_b"]
            and plans["A"][0].kernel.spec == plans["B"][0].kernel.spec):
        row["same_plan"] = True
        return row
    ref = ops[0][4] @ ops[0][5]
    for side in ("A", "B"):
        outs[0].fill(float("nan"))
        plans[side][0].run(cp, outs[0])
        row[f"err_{side.lower()}"] = b.rel_err64(outs[0], ref)

    def runner(side):
        def run(i):
            plans[side][i].run(cp, outs[i])
        return run
    # the bench's same-round timing: warm-up, then rounds with A and B in turn first
    per = bench.compare_variants(cp, [runner("A"), runner("B")], None, sets, rounds, iters, None, timing)
    vs = bench.vs_first_fields(per[0], per[1], "A")           # per round A's time / B's
    flops = 2.0 * m * n * k
    row.update(a_tflops=flops / statistics.median(t for t, _ in per[0]) / 1e12,
               b_tflops=flops / statistics.median(t for t, _ in per[1]) / 1e12,
               b_vs_a=vs["vs_first"], b_vs_a_min=vs["vs_first_min"], b_vs_a_max=vs["vs_first_max"],
               rounds=[{"a_ms": ta * 1e3, "b_ms": tb * 1e3} for (ta, _), (tb, _) in zip(*per)])
    return row


def format_row(row) -> str:
    head = f"{row['case']:28s} A {row['cfg_a']:14s} B {row['cfg_b']:14s}"
    if row.get("same_plan"):
        return head + " same plan: not timed"
    return (head + f" {row['a_tflops']:7.1f} -> {row['b_tflops']:7.1f} TF/s  B/A {row['b_vs_a']:.3f} "
            f"[{row['b_vs_a_min']:.3f}-{row['b_vs_a_max']:.3f}]  err {row['err_a']:.1e} / {row['err_b']:.1e}")


def summary(rows) -> str:
    timed = [r["b_vs_a"] for r in rows if not r.get("same_plan")]
    if not timed:
        return "no case changed its plan"
    return (f"B/A geomean {bench.geomean(timed):.4f} over {len(timed)} changed case{'s' if len(timed) != 1 else ''}, "
            f"B faster on {sum(x > 1 for x in timed)}; {len(rows) - len(timed)} unchanged")


def open_bench(args, prog: str):
    """``rawcoop.bench.Bench(args)``, or None after one line on stderr (no CuPy, no GPU, no driver)."""
    try:
        return bench.Bench(args)
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        print(f"{prog}: no usable GPU ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def build_parser():
    ap = argparse.ArgumentParser(prog="bench/rule_ab.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rule", action="append", required=True, metavar="module.NAME=A/B",
                    help="a rawcoop module constant and its two values (repeatable: all change together)")
    ap.add_argument("--cases", required=True, metavar="LIST", help="comma list of KIND[:LAYOUT]:MxNxK")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timing", choices=bench.TIMINGS, default="batch",
                    help="batch (default): one event pair around each round's calls; calls: the median of "
                         "per-call event pairs (the main bench's timing)")
    ap.add_argument("--json", metavar="PATH", help="write the rows and the settings")
    return ap


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        rules = [parse_rule(r) for r in args.rule]
        cases = [parse_case(c) for c in args.cases.split(",") if c.strip()]
    except ValueError as e:
        print(f"rule_ab: {e}", file=sys.stderr)
        return 2
    if not cases or args.rounds < 1 or args.iters < 1:
        print("rule_ab: need at least one case, --rounds >= 1 and --iters >= 1", file=sys.stderr)
        return 2
    b = open_bench(args, "rule_ab")
    if b is None:
        return 1
    info = b.info
    print(f"rule_ab on {info.name} ({info.sm_count} SMs): "
          + "; ".join(f"{m.__name__.split('.')[-1]}.{n} A={va!r} B={vb!r}" for m, n, va, vb in rules), flush=True)
    rows = []
    for case in cases:
        row = run_case(b, case, rules, args.rounds, args.iters, args.timing)
        rows.append(row)
        print(format_row(row), flush=True)
        b.free()
    print(summary(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rules": args.rule, "rounds": args.rounds, "iters": args.iters,
                                               "timing": args.timing, "gpu": info.name, "sm_count": info.sm_count,
                                               "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
