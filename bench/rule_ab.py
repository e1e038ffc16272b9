"""A/B of a host rule: rawcoop.gemm's automatic plans with a rule constant at
value A against value B, on the same operands, timed in alternating rounds.

    PYTHONPATH=$PWD python bench/rule_ab.py \
        --rule gemm_configs.PINGPONG_ONE_WAVE_K_BLOCKS=0/32 \
        --cases bf16:1024x5760x2048,fp16:NN:2752x2304x1024,e4m3:1856x3200x2048,tf32:3136x1024x6144 \
        [--rule scheduler.TAIL_MAX_SPLITS=4/16 ...] [--rounds 7] [--iters 10] [--json out.json]

A rule is a module constant of rawcoop (``module.NAME=A/B``, values parsed as
the constant's type; tuples as ``(0.2,0.8)``); several --rule options change
together.  For each case the plan is built twice (``rawcoop.gemm._plan_for``
with the constants set to A, then to B; plans are not cached there) and the
two plans run their kernels directly (``plan.run``) on operand sets rotated
to >= 3x the L2, in ``--rounds`` rounds of ``--iters`` calls between two CUDA
events (one pair per round and side, A first in even rounds), so clock and
power drift falls on both sides alike.  Printed per case: each side's
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
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ("bf16", "fp16", "e4m3", "tf32")
LAYOUTS = ("TN", "NN", "NT", "TT")      # as rawcoop.bench.LAYOUTS: A T = row-major (M, K); B N = bt.T


def parse_case(text: str) -> tuple[str, str, int, int, int]:
    """``KIND[:LAYOUT]:MxNxK`` -> (kind, layout, m, n, k); ValueError naming the rule broken."""
    parts = text.strip().split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"case {text!r}: use KIND:MxNxK or KIND:LAYOUT:MxNxK")
    kind, layout = parts[0].lower(), (parts[1].upper() if len(parts) == 3 else "TN")
    if kind not in KINDS:
        raise ValueError(f"case {text!r}: kind must be one of {', '.join(KINDS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"case {text!r}: layout must be one of {', '.join(LAYOUTS)}")
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
    constant's type (int, float, bool, tuple); ValueError when the module or
    the constant does not exist or a value does not parse."""
    try:
        target, values = text.split("=", 1)
        modname, name = target.strip().rsplit(".", 1)
        va, vb = values.split("/")
    except ValueError:
        raise ValueError(f"rule {text!r}: use module.NAME=A/B (e.g. gemm_configs.PINGPONG_ONE_WAVE_K_BLOCKS=0/32)"
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


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def operands(cp, kind, layout, m, n, k, seed):
    """(a, b, gemm keywords, output dtype, a64, b64): normal data; e4m3
    quantised per tensor (rawcoop.bench.quantize_e4m3) with its dequantisation
    scales as gemm's scale_a / scale_b, so a64 @ b64 is the exact product."""
    import ml_dtypes
    import numpy as np

    from rawcoop import bench
    rs = cp.random.RandomState(seed)

    def normal(shape):
        return rs.standard_normal(shape, dtype=cp.float32)
    if kind in ("bf16", "fp16"):
        dt = np.dtype(ml_dtypes.bfloat16) if kind == "bf16" else np.dtype(np.float16)
        a = normal((m, k)).astype(dt) if layout[0] == "T" else normal((k, m)).astype(dt).T
        b = normal((n, k)).astype(dt).T if layout[1] == "N" else normal((k, n)).astype(dt)
        return a, b, {}, dt, a.astype(cp.float64), b.astype(cp.float64)
    if kind == "tf32":
        a, bt = normal((m, k)), normal((n, k))
        return a, bt.T, {"precision": "tf32"}, np.dtype(np.float32), a.astype(cp.float64), bt.T.astype(cp.float64)
    vals, codes = bench.e4m3_table()
    table = (cp.asarray(vals), cp.asarray(codes))
    value_of = cp.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64))
    out = []
    for rows in (m, n):
        x = normal((rows, k))
        scale = float(np.float32(float(cp.abs(x).max()) / bench.E4M3_MAX))
        q = bench.quantize_e4m3(cp, x / cp.float32(scale), table)
        out.append((q, scale, value_of[q.astype(cp.int32)] * scale))     # (int32 indices, as the bench's fp8 suite)
    (qa, sa, a64), (qb, sb, bt64) = out
    kw = {"a_format": "e4m3", "b_format": "e4m3", "scale_a": sa, "scale_b": sb,
          "out_dtype": np.dtype(ml_dtypes.bfloat16)}
    return qa, qb.T, kw, np.dtype(ml_dtypes.bfloat16), a64, bt64.T


def run_case(cp, case, rules, rounds, iters, l2_bytes):
    from rawcoop.bench import n_sets_for
    from rawcoop.gemm import _plan_for
    kind, layout, m, n, k = case
    in_bytes = {"bf16": 2, "fp16": 2, "e4m3": 1, "tf32": 4}[kind]
    sets = n_sets_for((m * k + n * k) * in_bytes + m * n * 4, l2_bytes)
    ops = [operands(cp, kind, layout, m, n, k, 100 + 10 * i) for i in range(sets)]
    outs = [cp.empty((m, n), ops[0][3]) for _ in range(sets)]
    plans = {}
    saved = [getattr(mod, name) for mod, name, _, _ in rules]
    try:
        for side, pick in (("A", 2), ("B", 3)):
            for rule in rules:
                setattr(rule[0], rule[1], rule[pick])
            plans[side] = [_plan_for(a, b, **kw) for a, b, kw, *_ in ops]
    finally:
        for (mod, name, _, _), v in zip(rules, saved):
            setattr(mod, name, v)
    row = {"case": f"{kind}:{layout}:{m}x{n}x{k}", "sets": sets,
           "cfg_a": config_label(plans["A"][0].cfg), "cfg_b": config_label(plans["B"][0].cfg),
           "dec_a": str(plans["A"][0].decomposition), "dec_b": str(plans["B"][0].decomposition)}
    if plans["A"][0].cfg == plans["B"][0].cfg and row["dec_a"] == row["dec_b"]:
        row["same_plan"] = True
        return row
    ref = ops[0][4] @ ops[0][5]
    den = float(cp.linalg.norm(ref)) or 1.0
    for side in ("A", "B"):
        outs[0].fill(float("nan"))
        plans[side][0].run(cp, outs[0])
        row[f"err_{side.lower()}"] = float(cp.linalg.norm(outs[0].astype(cp.float64) - ref)) / den
    for side in ("A", "B"):                       # warm-up: every set's plan once
        for i in range(sets):
            plans[side][i].run(cp, outs[i])
    cp.cuda.Device().synchronize()
    times = {"A": [], "B": []}
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    for r in range(rounds):
        for side in (("A", "B") if r % 2 == 0 else ("B", "A")):
            ps = plans[side]
            e0.record()
            for it in range(iters):
                ps[it % sets].run(cp, outs[it % sets])
            e1.record()
            e1.synchronize()
            times[side].append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3 / iters)
    ratios = [ta / tb for ta, tb in zip(times["A"], times["B"])]
    flops = 2.0 * m * n * k
    row.update(a_tflops=flops / statistics.median(times["A"]) / 1e12,
               b_tflops=flops / statistics.median(times["B"]) / 1e12,
               b_vs_a=statistics.median(ratios), b_vs_a_min=min(ratios), b_vs_a_max=max(ratios),
               rounds=[{"a_ms": ta * 1e3, "b_ms": tb * 1e3} for ta, tb in zip(times["A"], times["B"])])
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
    return (f"B/A geomean {geomean(timed):.4f} over {len(timed)} changed case{'s' if len(timed) != 1 else ''}, "
            f"B faster on {sum(x > 1 for x in timed)}; {len(rows) - len(timed)} unchanged")


def build_parser():
    ap = argparse.ArgumentParser(prog="bench/rule_ab.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rule", action="append", required=True, metavar="module.NAME=A/B",
                    help="a rawcoop module constant and its two values (repeatable: all change together)")
    ap.add_argument("--cases", required=True, metavar="LIST", help="comma list of KIND[:LAYOUT]:MxNxK")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=10)
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
    try:
        import cupy as cp
        from rawcoop import device
        info = device.info(cp.cuda.Device().id)
    except Exception as e:  # noqa: BLE001 - no CuPy, no GPU, no driver: one line, not a traceback
        print(f"rule_ab: no usable GPU ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    print(f"rule_ab on {info.name} ({info.sm_count} SMs): "
          + "; ".join(f"{m.__name__.split('.')[-1]}.{n} A={a!r} B={b!r}" for m, n, a, b in rules), flush=True)
    rows = []
    for case in cases:
        row = run_case(cp, case, rules, args.rounds, args.iters, info.l2_bytes)
        rows.append(row)
        print(format_row(row), flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    print(summary(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rules": args.rule, "rounds": args.rounds, "iters": args.iters,
                                               "gpu": info.name, "sm_count": info.sm_count, "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
