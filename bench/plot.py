"""Redraw a GEMM results file: rawcoop vs baseline TFLOP/s per case (grouped
bars, one panel per input type, the ratio over each pair, that type's dense
peak as a dashed line: 989 TFLOP/s for fp16/bf16, 1979 for FP8 (e4m3, the
fp8 suite), 494.5 for TF32 (the tf32 suite)), and print its table.

Reads what ``bench/gemm.py --json`` writes (every format version of it).
Needs matplotlib; no GPU.

    python bench/plot.py gemm_h200.json [-o gemm_h200.png] [--suite main]
    python bench/plot.py gemm_h200.json --suite fp8,tf32 -o fp8_tf32.png
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.options import parse_suites  # noqa: E402  (after the path insert)
from bench.report import format_report, load_results, plot_results  # noqa: E402

PROG = "bench/plot.py"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="results JSON")
    ap.add_argument("-o", "--out", help="PNG to write (default: the JSON's path with .png)")
    ap.add_argument("--suite", help="comma list of suites to plot (default: every row)")
    ap.add_argument("--title", help="figure title (default: GPU and date from the file)")
    ap.add_argument("--no-table", action="store_true", help="do not print the table")
    args = ap.parse_args(argv)
    try:
        results = load_results(args.results)
        suites = parse_suites(args.suite) if args.suite else None
    except (OSError, ValueError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    if not args.no_table:
        print(format_report(results))
    out = args.out or str(Path(args.results).with_suffix(".png"))
    try:
        plot_results(results, out, suites=suites, title=args.title)
    except (RuntimeError, ValueError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    print(f"plot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
