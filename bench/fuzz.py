"""GEMM fuzzer: rawcoop.gemm on seeded, reproducible problems across shapes,
layouts, input types (float16, bfloat16, tf32, fp8 with per-tensor or block
scales), batching, epilogues, output types and forced decompositions, each
checked against a float64 reference: that the result is within tolerance,
that no NaN is left in it and that nothing around it is written (the
package bench/fuzzer/ has the details).  Needs a Hopper GPU, except --list.

    PYTHONPATH=$PWD python bench/fuzz.py                      # 5000 problems, default seed
    PYTHONPATH=$PWD python bench/fuzz.py --seed 7 --count 20000 --stop-on-fail
    PYTHONPATH=$PWD python bench/fuzz.py --seed 7 --case 1234  # one case, verbose
    PYTHONPATH=$PWD python bench/fuzz.py --list --count 20     # print the draw, no GPU

A failing case prints one line with its reproducer (``--seed S --case I``).
Exit status 1 when any case failed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv=None):
    from bench import fuzzer
    ap = argparse.ArgumentParser(prog="bench/fuzz.py",
                                 description="rawcoop GEMM fuzzer against a float64 reference",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("RAWCOOP_FUZZ_SEED", fuzzer.DEFAULT_SEED)),
                    help="run seed (default: $RAWCOOP_FUZZ_SEED or %(default)s)")
    ap.add_argument("--count", type=int, default=5000, help="number of problems (default %(default)s)")
    ap.add_argument("--start", type=int, default=0, help="first case index (default 0)")
    ap.add_argument("--case", type=int, default=None, metavar="I", help="run case I alone, with details")
    ap.add_argument("--stop-on-fail", action="store_true", help="stop at the first failing case")
    ap.add_argument("--no-prewarm", action="store_true",
                    help="do not compile the run's kernel configurations in parallel first")
    ap.add_argument("--jobs", type=int, default=None, help="compile processes for the pre-warm (default: CPUs)")
    ap.add_argument("--list", action="store_true", help="print the problems' reproducers and exit (no GPU)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--log", metavar="FILE", help="write one JSON line per case (problem, error, tolerance, seconds)")
    return ap.parse_args(argv)


def run_one(args) -> int:
    from bench import fuzzer
    p = fuzzer.draw(args.seed, args.case)
    print(fuzzer.reproducer(p))
    try:
        print("kernel:", fuzzer.plan_spec(p).label)
        arrays = fuzzer.build(p, fill=False)
        plan = fuzzer.plan(p, arrays, with_cluster=False)        # with the tf32/fp8 options and scales
        print("decomposition:", plan.decomposition, "grid:", plan.grid[0], "(without cluster)" if p.cluster else "")
        del arrays
    except Exception as e:  # noqa: BLE001 - the case itself reports it below
        print(f"planning: {type(e).__name__}: {e}")
    t0 = time.perf_counter()
    o = fuzzer.check(p)
    dt = time.perf_counter() - t0
    if o.ok:
        print(f"ok: relative error {o.rel_err:.3e} < tolerance {o.tol:.1e} (ratio {o.ratio:.3f}), {dt:.2f} s")
        return 0
    print(o.line())
    return 1


def main(argv=None) -> int:
    args = parse_args(argv)
    from bench import fuzzer
    if args.list:
        for i in range(args.start, args.start + args.count):
            print(fuzzer.reproducer(fuzzer.draw(args.seed, i)))
        return 0
    from rawcoop import device
    if not device.has_hopper():
        print("bench/fuzz.py: no NVIDIA Hopper (sm_90) GPU on this machine", file=sys.stderr)
        return 2
    if args.case is not None:
        return run_one(args)

    t0 = time.perf_counter()
    probs = fuzzer.problems(args.seed, args.count, args.start)
    print(f"rawcoop fuzz: seed {args.seed}, cases {args.start}..{args.start + args.count - 1}")
    n_configs = None
    if not args.no_prewarm:
        specs, report = fuzzer.prewarm(probs, jobs=args.jobs)
        n_configs = len(specs)
        print(f"pre-warm: {n_configs} kernel configurations"
              + (f"; {report.summary()}" if report is not None else "")
              + f" ({time.perf_counter() - t0:.1f} s)")
        if report is not None and report.failed:
            for o in report.failed:
                print(f"  compile FAILED: {o.spec.label}: {o.error.splitlines()[0] if o.error else ''}")
    failures = []
    worst = None
    done = 0
    last = time.perf_counter()
    aborted = ""
    log = open(args.log, "w") if args.log else None
    for p in probs:
        tc = time.perf_counter()
        o = fuzzer.check(p)
        done += 1
        if log is not None:
            log.write(json.dumps(dict(fuzzer.summary_of(p), ok=o.ok, rel_err=o.rel_err, tol=o.tol, ratio=o.ratio,
                                      message=o.message, seconds=round(time.perf_counter() - tc, 4))) + "\n")
        if o.ok:
            if worst is None or o.ratio > worst.ratio:
                worst = o
        else:
            failures.append(o)
            print(o.line(), flush=True)
            if not fuzzer.device_ok():
                aborted = "the CUDA context is broken (a kernel fault); later cases cannot run"
            elif args.stop_on_fail:
                aborted = "--stop-on-fail"
            if aborted:
                break
        now = time.perf_counter()
        if not args.quiet and (now - last > 5 or done == len(probs)):
            last = now
            print(f"[{done:6d}/{len(probs)}] {now - t0:6.1f} s, {len(failures)} failures, "
                  f"max err/tol {worst.ratio if worst else float('nan'):.3f}", flush=True)
    secs = time.perf_counter() - t0
    if log is not None:
        log.close()
    print("-" * 79)
    if aborted:
        print(f"stopped after {done} of {len(probs)} cases: {aborted}")
    print(f"problems {done}, configs {n_configs if n_configs is not None else 'n/a (no pre-warm)'}, "
          f"failures {len(failures)}, max error/tol {worst.ratio if worst else float('nan'):.3f}"
          + (f" (case {worst.problem.index})" if worst else "") + f", {secs:.1f} s")
    if failures:
        print("reproducers:")
        for o in failures:
            print("  " + fuzzer.reproducer(o.problem))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
