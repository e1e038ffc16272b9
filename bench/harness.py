"""Runs the benchmark behind bench/gemm.py: checks the machine and the
options, runs the selected suites (bench/suites.py), saves the results JSON
after every row, prints the report and draws the plot.

    from bench import harness
    harness.main(["--suite", "main,fp8", "--json", "out.json"])    # = python bench/gemm.py ...
"""
from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from bench.baselines import cupy_linalg
from bench.environment import bus_id, environment, gpu_problem, nvidia_smi
from bench.options import build_parser, settings_of
from bench.report import figure_class, format_report, gpu_name, plot_results, write_json
from bench.rows import PEAK_LABEL, PEAK_TFLOPS, PEAKS, RESULTS_FORMAT, geomeans
from bench.suites import Bench

PROG = "bench/gemm.py"

MAX_REL_ERR = 1e-2
"""A row whose rawcoop output differs from the baseline's by more than this
(relative Frobenius norm) is reported as a mismatch and fails the run."""


def run(args, prog: str = PROG) -> dict:
    """Run the selected suites; returns the results dict (rows, env, settings).
    A suite that raises is recorded in ``failed_suites`` and the next one runs."""
    env = environment(0)
    results = {"format": RESULTS_FORMAT, "gpu": None, "peak_tflops": PEAK_TFLOPS, "peak": PEAK_LABEL,
               "peaks": {dt: {"tflops": p, "what": label} for dt, (p, label) in PEAKS.items()}, "env": env,
               "settings": settings_of(args), "rows": []}
    results["gpu"] = gpu_name(results)

    def save(_row=None):
        if args.json:
            write_json(args.json, results)

    b = Bench(args, on_row=lambda row: (results["rows"].append(row), save()))
    print(f"GPU {b.info.name}, {b.info.sm_count} SMs, L2 {b.info.l2_bytes / 2**20:.0f} MiB; "
          f"rounds={args.rounds} iters={args.iters} timing={getattr(args, 'timing', 'calls')}; "
          "ratio = baseline time / rawcoop time", flush=True)
    for suite in args.suite:
        try:
            getattr(b, suite)()
        except Exception as e:  # noqa: BLE001 - one broken suite must not lose the others' rows
            traceback.print_exc()
            print(f"{prog}: suite {suite} FAILED ({type(e).__name__}: {e}); going on with the next",
                  file=sys.stderr, flush=True)
            results.setdefault("failed_suites", []).append({"suite": suite, "error": f"{type(e).__name__}: {e}"})
            try:
                b.cp.cuda.Device().synchronize()
                b.free()
            except Exception:  # noqa: BLE001 - a sticky CUDA error: the next suites will say so
                pass
    env["nvidia_smi_end"] = nvidia_smi(bus_id(0))
    results["geomean"] = geomeans(results["rows"])
    save()
    return results


def _option_problem(args) -> str | None:
    """Why the options cannot run together, or None."""
    for path, flag in ((args.json, "--json"), (args.plot, "--plot")):
        if path and not Path(path).resolve().parent.is_dir():
            return f"{flag}: the directory of {path} does not exist"
    if getattr(args, "out_dtype", None) and args.beta:
        return ("--out-dtype float32 takes no --beta (C would need rawcoop's output type while the baseline's "
                "is the input type)")
    return None


def execute(args, prog: str = PROG) -> int:
    """Run the benchmark for parsed ``args``.  Exit status: 0 on success; 2
    for options that cannot run; 1 when there is no usable GPU (nothing
    measured), when a result mismatched, when a suite failed (the others
    still ran), or when the plot failed."""
    problem = _option_problem(args)
    if problem:
        print(f"{prog}: {problem}", file=sys.stderr)
        return 2
    if "tf32" in args.suite and cupy_linalg() is None and os.environ.get("CUPY_TF32") != "1":
        # CuPy reads CUPY_TF32 once, at the process's first float32 GEMM; without the
        # set_compute_type switch this is the only way to its TF32 path (the fp32 reference
        # of the fp8 suite is then TF32 too, which the tf32 rows' float64 check would not see).
        os.environ["CUPY_TF32"] = "1"
        print(f"{prog}: this CuPy has no set_compute_type; CUPY_TF32=1 set for the tf32 suite", flush=True)
    problem = gpu_problem(0)
    if problem:
        print(f"{prog}: {problem}; nothing was measured.", file=sys.stderr)
        return 1
    if args.plot:
        try:
            figure_class()
        except RuntimeError as e:
            print(f"{prog}: --plot: {e}", file=sys.stderr)
            return 1
    results = run(args, prog)
    print()
    print(format_report(results))
    rc = 0
    for f in results.get("failed_suites") or []:
        print(f"FAILED suite {f['suite']}: {f['error']}", file=sys.stderr)
        rc = 1
    for r in results["rows"]:
        if r.get("rel_err") is not None and not r["rel_err"] <= MAX_REL_ERR:
            print(f"MISMATCH {r['suite']} {r['case']}: rawcoop differs from {r.get('err_vs') or 'the baseline'} "
                  f"by {r['rel_err']:.2e} (relative Frobenius norm > {MAX_REL_ERR:g})", file=sys.stderr)
            rc = 1
    if args.json:
        print(f"results: {args.json}")
    if args.plot:
        try:
            plot_results(results, args.plot)
            print(f"plot: {args.plot}")
        except (RuntimeError, ValueError) as e:
            print(f"{prog}: --plot: {e}", file=sys.stderr)
            rc = 1
    return rc


def main(argv=None, prog: str = PROG) -> int:
    return execute(build_parser(prog).parse_args(argv), prog)
