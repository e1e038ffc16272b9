"""Nsight Compute metrics of rawcoop variants and cuBLAS on one problem, side by side.

    PYTHONPATH=$PWD python bench/ncu_compare.py --shape 128x8192x8192 --variants auto,cluster=1x2 --cublas

Runs itself again under ``ncu --profile-from-start off``: the child builds the
operands (normal data), warms every variant up, then launches each variant's
GEMM once between cudaProfilerStart/Stop (ncu flushes the caches before each
kernel: cold L2, as with the benchmark's rotating inputs), rawcoop variants first
(one kernel each), cupy.matmul last (``--cublas``; every kernel it launches is
labelled cuBLAS).  The parent parses ncu's text report and prints one row per
kernel with the metrics.  ``--variants`` takes bench/gemm.py's syntax
(``auto``, ``key=value`` pairs of gemm's ``_`` options joined by ``:``).

``--dtype e4m3``: per-tensor fp8 (normal samples rounded to e4m3, uint8
storage with ``a_format``/``b_format``, 1-element device scales, bf16 out;
TN only), and ``--cublas`` profiles cuBLASLt through ``torch._scaled_mm``
(``use_fast_accum=True``, the accumulation rawcoop matches; labelled
"cuBLASLt").  For short fp8 problems whose benchmark timing is paced by the
host (fp8 128x8192x8192: per-call and batch timing both flagged host-bound),
ncu's kernel time is the comparison that is left.

Default metrics: kernel time, DRAM and L2 throughput (% of peak) and bytes,
SM throughput; ``--metrics`` replaces them.  ``--raw`` prints ncu's report as
is (when a metric name is rejected, ncu says so there).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_bytes.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
ORDER_TAG = "NCU-COMPARE-ORDER "

# "  gemm_kernel (128, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0"
_KERNEL = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context")
# "    dram__bytes_read.sum                                     Mbyte        67.26"  (unit may be absent)
_METRIC = re.compile(r"^    ([A-Za-z0-9_.]+__[A-Za-z0-9_.]+)\s+(?:(\S+)\s+)?([-+0-9.,]+|n/a)\s*$")


def parse_report(text: str) -> list[dict]:
    """ncu's default text report -> [{"kernel", "grid", "block", "metrics":
    {name: (value, unit)}}] in launch order."""
    out: list[dict] = []
    for line in text.splitlines():
        k = _KERNEL.match(line)
        if k:
            g = tuple(int(x) for x in k.groups()[1:])
            out.append({"kernel": k.group(1), "grid": g[:3], "block": g[3:], "metrics": {}})
            continue
        m = _METRIC.match(line)
        if m and out:
            name, unit, value = m.groups()
            out[-1]["metrics"][name] = (None if value == "n/a" else float(value.replace(",", "")), unit or "")
    return out


BASELINES = ("cuBLAS", "cuBLASLt")


def label_kernels(kernels: list[dict], order: list[str]) -> list[str]:
    """Labels for the profiled kernels: one per rawcoop variant in ``order``
    (each launches one gemm_kernel), then the baseline's name ("cuBLAS" or
    "cuBLASLt", the entry after the variants) for whatever follows."""
    ours = next((i for i, name in enumerate(order) if name in BASELINES), len(order))
    base = order[ours] if ours < len(order) else "cuBLAS"
    return [order[i] if i < ours else base for i in range(len(kernels))]


def format_rows(kernels: list[dict], labels: list[str], metrics) -> str:
    head = ["variant", "kernel", "grid"] + list(metrics)
    rows = [head]
    for k, lab in zip(kernels, labels):
        cells = [lab, k["kernel"][:48], "x".join(str(x) for x in k["grid"])]
        for name in metrics:
            v = k["metrics"].get(name)
            cells.append("-" if v is None or v[0] is None else f"{v[0]:g} {v[1]}".strip())
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def ncu_command(ncu: str, metrics, child_args: list[str]) -> list[str]:
    return [ncu, "--profile-from-start", "off", "--metrics", ",".join(metrics),
            sys.executable, str(Path(__file__).resolve()), "--child", *child_args]


def parse_args(argv=None):
    from bench.options import parse_shape, parse_variants
    ap = argparse.ArgumentParser(prog="bench/ncu_compare.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=parse_shape, required=True, help="MxNxK")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "e4m3"))
    ap.add_argument("--layout", default="TN", choices=("TN", "NN", "NT", "TT"))
    ap.add_argument("--variants", type=parse_variants, default=[("auto", {})], help="as bench/gemm.py's --variants")
    ap.add_argument("--cublas", action="store_true",
                    help="profile cupy.matmul last (e4m3: cuBLASLt through torch._scaled_mm)")
    ap.add_argument("--metrics", default=",".join(DEFAULT_METRICS))
    ap.add_argument("--ncu", default=None, help="the ncu executable (default: from PATH)")
    ap.add_argument("--raw", action="store_true", help="print ncu's report as is, too")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.dtype == "e4m3" and args.layout != "TN":
        ap.error(f"--dtype e4m3 takes --layout TN only (fp8 operands must be K-major), got {args.layout}")
    return args


def fp8_calls(cp, args):
    """(name, call) pairs for --dtype e4m3: rawcoop's variants, then cuBLASLt."""
    import ml_dtypes
    import numpy as np

    import rawcoop
    from rawcoop.operands import np_dtype
    m, n, k = args.shape.m, args.shape.n, args.shape.k
    rng = np.random.default_rng(0)

    def codes(rows):
        x = rng.standard_normal((rows, k), dtype=np.float32)
        return cp.asarray(x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    a8, b8t = codes(m), codes(n)
    sa, sb = cp.asarray([0.5], dtype=cp.float32), cp.asarray([2.0], dtype=cp.float32)
    bf16 = np_dtype("bfloat16")
    d = cp.empty((m, n), dtype=bf16)
    calls = [(name, (lambda kw=kw: rawcoop.gemm(a8, b8t.T, a_format="e4m3", b_format="e4m3", scale_a=sa,
                                                scale_b=sb, out_dtype=bf16, out=d, **kw)))
             for name, kw in args.variants]
    if args.cublas:
        import torch
        ta = torch.as_tensor(a8, device="cuda").view(torch.float8_e4m3fn)
        tb = torch.as_tensor(b8t, device="cuda").view(torch.float8_e4m3fn).t()
        tsa, tsb = torch.as_tensor(sa, device="cuda"), torch.as_tensor(sb, device="cuda")
        td = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        calls.append(("cuBLASLt", lambda: torch._scaled_mm(ta, tb, scale_a=tsa, scale_b=tsb, out_dtype=torch.bfloat16,
                                                           use_fast_accum=True, out=td)))
    return calls


def child(args) -> int:
    """Under ncu: warm up, then one launch per variant inside the profiled range."""
    import cupy as cp

    import rawcoop
    from rawcoop.operands import np_dtype
    if args.dtype == "e4m3":
        calls = fp8_calls(cp, args)
    else:
        dt = np_dtype(args.dtype)
        m, n, k = args.shape.m, args.shape.n, args.shape.k
        rs = cp.random.RandomState(0)

        def rand(shape):
            return rs.standard_normal(shape, dtype=cp.float32).astype(dt)
        a = rand((m, k)) if args.layout[0] == "T" else rand((k, m)).T
        b = rand((k, n)) if args.layout[1] == "T" else rand((n, k)).T
        d = cp.empty((m, n), dtype=dt)
        calls = [(name, (lambda kw=kw: rawcoop.gemm(a, b, out=d, **kw))) for name, kw in args.variants]
        if args.cublas:
            calls.append(("cuBLAS", lambda: cp.matmul(a, b, out=d)))
    for _ in range(3):
        for _, f in calls:
            f()
    cp.cuda.Device().synchronize()
    print(ORDER_TAG + json.dumps([name for name, _ in calls]), flush=True)
    cp.cuda.profiler.start()
    for _, f in calls:
        f()
        cp.cuda.Device().synchronize()
    cp.cuda.profiler.stop()
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    ncu = shutil.which(args.ncu) if args.ncu else shutil.which("ncu")
    if not ncu:
        print("bench/ncu_compare.py: ncu (Nsight Compute) not found; pass --ncu", file=sys.stderr)
        return 2
    metrics = [x.strip() for x in args.metrics.split(",") if x.strip()]
    passthrough = ["--shape", f"{args.shape.m}x{args.shape.n}x{args.shape.k}", "--dtype", args.dtype,
                   "--layout", args.layout, "--variants", ",".join(name for name, _ in args.variants)]
    if args.cublas:
        passthrough.append("--cublas")
    r = subprocess.run(ncu_command(ncu, metrics, passthrough), capture_output=True, text=True, cwd=str(ROOT))
    text = r.stdout + r.stderr
    order = next((json.loads(line[len(ORDER_TAG):]) for line in text.splitlines() if line.startswith(ORDER_TAG)),
                 [])
    kernels = parse_report(text)
    if args.raw or not kernels or r.returncode:
        print(text[-20000:])
    if not kernels:
        print(f"bench/ncu_compare.py: no kernel in ncu's report (ncu exit {r.returncode})", file=sys.stderr)
        return 1
    print(format_rows(kernels, label_kernels(kernels, order), metrics))
    return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
