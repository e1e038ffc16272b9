"""Replay a rule change on measured oracle rows, without a GPU: which of the timed plans it would pick.

    PYTHONPATH=$PWD python bench/oracle_replay.py ORACLE.json [...] \
        [--rule gemm_configs.MISALIGNED_TALL_RATIO=1.0 ...] [--base module.NAME=VALUE ...] [--verbose]

bench/oracle.py times, per shape, the automatic plan and every distinct forced plan in the same rounds
and stores each plan's label ("128x256 cl2", "192x192", ...), its decomposition and its time relative to
the automatic plan of that run (``vs_auto``).  This script plans each row again on the CPU
(rule_cases.plan_key: gemm_configs.plan_config on 132 SMs, contiguous operands, no epilogue) with the
rules set (``module.NAME=VALUE``, the value a literal of the constant's type; without --rule: the code as
it is; --base sets the baseline column's rules the same way) and looks the plan up among the row's timed
ones (same label and decomposition).  Printed: per changed row the recorded and the replayed plan and the
replayed plan's time relative to the recorded automatic one; then the geomean over the rows whose plan
was timed, and the rows whose replayed plan was not among the timed ones (those need a device run:
rule_ab).

bench/rule_ab.py --json files replay too: each of their rows is read as two timed plans, A (``vs_auto`` 1.0,
the row's automatic plan) and B (``b_vs_a``); rows whose A and B plans were the same are skipped.

This is in-sample for any rule fitted on these rows: a rule chosen here is only a candidate until
bench/rule_ab.py has measured it on shapes drawn afresh (bench/rule_cases.py with a new seed).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import rule_ab  # noqa: E402  (after the path insert: parse_case)
import rule_cases  # noqa: E402


def parse_setting(text: str):
    """``module.NAME=VALUE`` -> (module, NAME, value), through rule_ab.parse_rule's checks (VALUE/VALUE)."""
    if "=" not in text or "/" in text.split("=", 1)[1]:
        raise ValueError(f"rule {text!r}: use module.NAME=VALUE (one value)")
    mod, name, value, _ = rule_ab.parse_rule(text + "/" + text.split("=", 1)[1])
    return mod, name, value


def oracle_rows(doc) -> list:
    """The rows of a bench/oracle.py JSON document, or of a bench/rule_ab.py one as two-plan oracle rows."""
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError("not a bench/oracle.py or bench/rule_ab.py JSON document (no 'rows' list)")
    rows = []
    for row in doc["rows"]:
        if "variants" in row:
            rows.append(row)
        elif not row.get("same_plan") and "b_vs_a" in row:
            a = {"label": "A", "cfg": row["cfg_a"], "decomposition": row["dec_a"], "vs_auto": 1.0}
            b = {"label": "B", "cfg": row["cfg_b"], "decomposition": row["dec_b"], "vs_auto": row["b_vs_a"]}
            rows.append({"case": row["case"], "auto": a, "variants": [a, b]})
    return rows


def find_variant(row, label: str, decomposition: str):
    """The row's timed plan with this label and decomposition, or None."""
    for v in row["variants"]:
        if v["cfg"] == label and v["decomposition"] == decomposition:
            return v
    return None


def replay(rows, settings):
    """[(case, recorded auto label, replayed label, replayed vs_auto or None)] with ``settings`` applied."""
    saved = [getattr(mod, name) for mod, name, _ in settings]
    out = []
    try:
        for mod, name, value in settings:
            setattr(mod, name, value)
        for row in rows:
            kind, layout, m, n, k = rule_ab.parse_case(row["case"])
            label, decomposition = rule_cases.plan_key(kind, layout, m, n, k)
            v = find_variant(row, label, decomposition)
            out.append((row["case"], row["auto"]["cfg"], label, v["vs_auto"] if v else None))
    finally:
        for (mod, name, _), old in zip(settings, saved):
            setattr(mod, name, old)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/oracle_replay.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("oracle", nargs="+", help="bench/oracle.py (or bench/rule_ab.py) --json files")
    ap.add_argument("--rule", action="append", default=[], metavar="module.NAME=VALUE")
    ap.add_argument("--base", action="append", default=[], metavar="module.NAME=VALUE",
                    help="settings of the baseline column (default: the code as it is)")
    ap.add_argument("--verbose", "-v", action="store_true", help="print every row, not only the changed ones")
    args = ap.parse_args(argv)
    try:
        settings = [parse_setting(r) for r in args.rule]
        base_settings = [parse_setting(r) for r in args.base]
        rows = []
        for path in args.oracle:
            try:
                rows += oracle_rows(json.loads(Path(path).read_text()))
            except ValueError as e:
                raise ValueError(f"{path}: {e}") from None
    except (ValueError, OSError, KeyError, json.JSONDecodeError) as e:
        print(f"oracle_replay.py: {e}", file=sys.stderr)
        return 2
    base = replay(rows, base_settings)
    new = replay(rows, settings)
    timed = []
    missing = []
    for (case, rec, lb, vb), (_, _, ln, vn) in zip(base, new):
        if vn is None:
            missing.append((case, ln))
            continue
        if vb is not None:
            timed.append((vb, vn))
        if args.verbose or ln != lb:
            print(f"{case:26s} recorded {rec:16s} now {lb:16s} ({'-' if vb is None else f'{vb:.3f}'})  "
                  f"-> {ln:16s} {vn:.3f}")
    if timed:
        gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
        moved = [(a, b) for a, b in timed if a != b]
        print(f"{len(rows)} rows, {len(timed)} with both plans timed: vs recorded auto geomean "
              f"{gm([a for a, _ in timed]):.4f} (base) -> {gm([b for _, b in timed]):.4f} (rules); "
              f"{len(moved)} moved, {sum(b > a for a, b in moved)} of them faster, best possible "
              f"{gm([max(v['vs_auto'] for v in r['variants']) for r in rows]):.4f}")
    for case, label in missing:
        print(f"  not timed: {case} -> {label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
