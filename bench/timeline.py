"""Per-unit timeline of one GEMM launch (diagnostics, Hopper GPU): where a schedule's time goes.

    PYTHONPATH=$PWD python bench/timeline.py --shape 2048x2624x2048 [--dtype bfloat16] \
        --opts _pingpong=True,_block_n=128 --opts _pingpong=True,_streamk=True,_block_n=128 [--json out.json]

Each --opts is a set of rawcoop.gemm's forced options (empty: the automatic plan).  The plan's
kernel is rebuilt with RC_TIMELINE defined (kernels/gemm.cu): thread 0 of every consumer
warpgroup stamps %globaltimer at each unit's start (after the ping-pong hand-over), mainloop end,
fix-up end and epilogue end into the module global ``rc_timeline``.  The launch runs a few times
(warm), the buffer is zeroed, one more launch is recorded.  Printed per variant: the span (first
start to last end), mean and max per consumer of its units' mainloop, fix-up and epilogue time,
its idle time between units and after its last one, and the units of the consumer that finished
last.  The stamps cost a few global stores per unit; compare variants with each other, not with
bench/gemm.py's times.  --json keeps every unit: [CTA, consumer, unit, start, mainloop end, fix-up
end, epilogue end] in ns from the first start.
"""
from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

UNITS, FIELDS = 16, 5          # RC_TL_UNITS and the record size in kernels/gemm.cu


def parse_opts(text: str) -> dict:
    """``_name=value,...`` (values: Python literals; a tuple as ``(1;2)``) -> keyword dict."""
    out = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = item.partition("=")
        if not key.startswith("_") or not value:
            raise ValueError(f"--opts {text!r}: use _name=value pairs (rawcoop.gemm's forced options)")
        try:
            out[key] = ast.literal_eval(value.replace(";", ","))
        except (ValueError, SyntaxError):
            raise ValueError(f"--opts {text!r}: {value!r} is not a literal") from None
    return out


def parse_shape(text: str) -> tuple[int, int, int]:
    """``MxNxK`` -> (M, N, K), positive integers."""
    from bench.options import parse_shape as parse_bench_shape
    try:
        s = parse_bench_shape(text)
    except ValueError:
        s = None
    if s is None or s.batch != 1:
        raise ValueError(f"--shape {text!r}: use MxNxK with positive integers")
    return s.m, s.n, s.k


def record(cp, plan, out):
    """One recorded launch of ``plan`` with the timeline kernel: (CTAs x consumers x UNITS x 5) u64."""
    from rawcoop import launch
    from rawcoop._cuda import check, driver
    from rawcoop.compiler import KernelSpec
    spec = plan.kernel.spec
    plan.kernel = launch.get_kernel(KernelSpec(spec.source, spec.name,
                                               tuple(sorted(spec.defines + (("RC_TIMELINE", 1),)))))
    plan.launch = None
    for _ in range(3):
        plan.run(cp, out)
    cp.cuda.Device().synchronize()
    dev = cp.cuda.Device().id
    ptr, size = check(driver.cuModuleGetGlobal(plan.kernel._modules[dev], b"rc_timeline"), "cuModuleGetGlobal")
    mem = cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(int(ptr), size, plan), 0)
    buf = cp.ndarray((size // 8,), cp.uint64, mem)
    buf.fill(0)
    plan.run(cp, out)
    cp.cuda.Device().synchronize()
    consumers = plan.cfg.consumers
    ctas = plan.grid[0]
    return cp.asnumpy(buf[:ctas * consumers * UNITS * FIELDS]).reshape(ctas, consumers, UNITS, FIELDS)


def summarize(t) -> dict:
    recs = [(cta, c, [int(x) for x in t[cta, c, i]]) for cta in range(t.shape[0]) for c in range(t.shape[1])
            for i in range(UNITS) if t[cta, c, i, 1]]
    t0 = min(r[2][1] for r in recs)
    end = max(r[2][4] for r in recs)
    per = {}
    for cta, c, (u, s, ml, fx, ep) in recs:
        per.setdefault((cta, c), []).append((u, s - t0, ml - t0, fx - t0, ep - t0))
    stats = {"main": [], "fixup": [], "epilogue": [], "gaps": [], "tail_idle": []}
    for units in per.values():
        units.sort(key=lambda x: x[1])
        stats["main"].append(sum(x[2] - x[1] for x in units))
        stats["fixup"].append(sum(x[3] - x[2] for x in units))
        stats["epilogue"].append(sum(x[4] - x[3] for x in units))
        stats["gaps"].append(sum(b[1] - a[4] for a, b in zip(units, units[1:])) + units[0][1])
        stats["tail_idle"].append(end - t0 - units[-1][4])
    last = max(per, key=lambda k: per[k][-1][4])
    return {"span_us": (end - t0) / 1e3,
            "units": [[cta, c, u, s, ml, fx, ep] for (cta, c), us in sorted(per.items()) for u, s, ml, fx, ep in us],
            **{f"{k}_us_mean": statistics.mean(v) / 1e3 for k, v in stats.items()},
            **{f"{k}_us_max": max(v) / 1e3 for k, v in stats.items()},
            "last_consumer": {"cta": last[0], "consumer": last[1],
                              "units_us": [[u, s / 1e3, m / 1e3, f / 1e3, e / 1e3] for u, s, m, f, e in per[last]]}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/timeline.py", description=__doc__.split("\n")[0])
    ap.add_argument("--shape", required=True, help="MxNxK")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--opts", action="append", default=None, help="forced options, e.g. _pingpong=True,_block_n=128")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    try:
        m, n, k = parse_shape(args.shape)
        variants = [parse_opts(o) for o in (args.opts or [""])]
    except ValueError as e:
        print(f"bench/timeline.py: {e}", file=sys.stderr)
        return 2
    from bench.environment import gpu_problem
    problem = gpu_problem(0)
    if problem:
        print(f"bench/timeline.py: {problem}", file=sys.stderr)
        return 1
    import cupy as cp
    import ml_dtypes  # noqa: F401  (bfloat16 arrays)
    from rawcoop.gemm import _plan_for
    dt = cp.dtype(ml_dtypes.bfloat16) if args.dtype == "bfloat16" else cp.float16
    rs = cp.random.RandomState(1)
    a = rs.standard_normal((m, k), dtype=cp.float32).astype(dt)
    b = rs.standard_normal((n, k), dtype=cp.float32).astype(dt).T
    out = cp.empty((m, n), dt)
    results = []
    for opts in variants:
        plan = _plan_for(a, b, **opts)
        s = summarize(record(cp, plan, out))
        s.update(opts={k2: repr(v) for k2, v in opts.items()}, config=plan.cfg.spec.label,
                 decomposition=str(plan.decomposition))
        results.append(s)
        print(f"{args.dtype} {args.shape} {opts or 'auto'}: {plan.decomposition}")
        print(f"  span {s['span_us']:.2f} us; per consumer mean / max: mainloop {s['main_us_mean']:.2f} / "
              f"{s['main_us_max']:.2f}, fix-up {s['fixup_us_mean']:.2f} / {s['fixup_us_max']:.2f}, epilogue "
              f"{s['epilogue_us_mean']:.2f} / {s['epilogue_us_max']:.2f}, waiting between units "
              f"{s['gaps_us_mean']:.2f} / {s['gaps_us_max']:.2f}, idle at the end {s['tail_idle_us_mean']:.2f}")
        lc = s["last_consumer"]
        print(f"  last to finish: CTA {lc['cta']} consumer {lc['consumer']}: " + "; ".join(
            f"unit {u}: {st:.1f}-{ml:.1f} main, -{fx:.1f} fix-up, -{ep:.1f} epi" for u, st, ml, fx, ep in
            lc["units_us"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
