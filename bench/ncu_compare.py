"""Nsight Compute metrics of rawcoop variants and cuBLAS on one problem, side by side.

    PYTHONPATH=$PWD python bench/ncu_compare.py --shape 128x8192x8192 --variants auto,cluster=1x2 --cublas

Runs itself again under ``ncu --profile-from-start off``: the child builds the
operands (normal data), warms every variant up, then launches each variant's
GEMM once between cudaProfilerStart/Stop (ncu flushes the caches before each
kernel: cold L2, as with the bench's rotating inputs), rawcoop variants first
(one kernel each), cupy.matmul last (``--cublas``; every kernel it launches is
labelled cuBLAS).  The parent parses ncu's text report and prints one row per
kernel with the metrics.  ``--variants`` takes the bench's syntax
(``auto``, ``key=value`` pairs of gemm's ``_`` options joined by ``:``).

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


def label_kernels(kernels: list[dict], order: list[str]) -> list[str]:
    """Labels for the profiled kernels: one per rawcoop variant in ``order``
    (each launches one gemm_kernel), then "cuBLAS" for whatever follows."""
    labels = []
    for i, _ in enumerate(kernels):
        labels.append(order[i] if i < len(order) and order[i] != "cuBLAS" else "cuBLAS")
    return labels


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
    from rawcoop.bench import parse_shape, parse_variants
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=parse_shape, required=True, help="MxNxK")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--layout", default="TN", choices=("TN", "NN", "NT", "TT"))
    ap.add_argument("--variants", type=parse_variants, default=[("auto", {})], help="as the bench's --variants")
    ap.add_argument("--cublas", action="store_true", help="profile cupy.matmul last")
    ap.add_argument("--metrics", default=",".join(DEFAULT_METRICS))
    ap.add_argument("--ncu", default=None, help="the ncu executable (default: from PATH)")
    ap.add_argument("--raw", action="store_true", help="print ncu's report as is, too")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def child(args) -> int:
    """Under ncu: warm up, then one launch per variant inside the profiled range."""
    import cupy as cp

    import rawcoop
    from rawcoop.operands import np_dtype
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
