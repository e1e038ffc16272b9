"""rawcoop.gemm against cuBLAS (cupy.matmul), side by side in one process.

Method (bench/NOTES.md): normal-distributed inputs for both sides; inputs
rotated across several sets when one set would fit in L2; warm-up; in each of
R rounds, rawcoop and cuBLAS alternate, each timed per call with CUDA events
(median of `iters` calls); the reported ratio is the median of the per-round
ratios cuBLAS_time / rawcoop_time (> 1: rawcoop faster), since clocks and
power drift by up to ~10% within a run.

    PYTHONPATH=$PWD python bench/gemm.py [--dtypes bf16,fp16] [--shapes 4096x4096x4096,...]
        [--variants 256:8,128:8] [--rounds 5] [--iters 20] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = ["4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "4096x14336x4096",
          "8192x8192x28672", "256x16384x4096", "128x8192x8192", "1024x1024x65536"]
PEAK_TFLOPS = 989.0


def parse_shape(s):
    m, n, k = (int(x) for x in s.lower().split("x"))
    return m, n, k


def make_inputs(cp, dt, m, n, k, sets, seed):
    out = []
    rs = cp.random.RandomState(seed)
    for _ in range(sets):
        a = rs.standard_normal((m, k), dtype=cp.float32).astype(dt)
        bt = rs.standard_normal((n, k), dtype=cp.float32).astype(dt)
        out.append((a, bt))
    return out


def time_calls(cp, fn, inputs, iters):
    starts = [cp.cuda.Event() for _ in range(iters)]
    ends = [cp.cuda.Event() for _ in range(iters)]
    for i in range(iters):
        a, bt, c = inputs[i % len(inputs)]
        starts[i].record()
        fn(a, bt, c)
        ends[i].record()
    ends[-1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)) * 1e-3


def main() -> None:
    import cupy as cp
    import ml_dtypes
    import numpy as np

    import rawcoop
    from rawcoop import device

    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="auto", help="comma list of auto or BLOCK_N:GROUP")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()

    info = device.info(0)
    l2 = info.l2_bytes
    dtypes = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
    variants = []
    for v in args.variants.split(","):
        if v == "auto":
            variants.append(("auto", {}))
        else:
            bn, grp = v.split(":")
            variants.append((v, {"_block_n": int(bn), "_group": int(grp)}))
    print(f"GPU {info.name}, {info.sm_count} SMs, L2 {l2 / 2**20:.0f} MiB; rounds={args.rounds} iters={args.iters}")
    rows = []
    for dname in args.dtypes.split(","):
        dt = dtypes[dname]
        for shape in args.shapes.split(","):
            m, n, k = parse_shape(shape)
            flops = 2.0 * m * n * k
            set_bytes = (m * k + n * k + m * n) * 2
            sets = max(1, min(8, math.ceil(3 * l2 / set_bytes)))
            base = make_inputs(cp, dt, m, n, k, sets, seed=m + n + k)
            inputs = [(a, bt, cp.empty((m, n), dtype=dt)) for a, bt in base]
            a0, bt0, _ = inputs[0]
            ref = cp.matmul(a0, bt0.T)
            cublas = lambda a, bt, c: cp.matmul(a, bt.T, out=c)  # noqa: E731
            for vname, kw in variants:
                ours = lambda a, bt, c, kw=kw: rawcoop.gemm(a, bt.T, out=c, **kw)  # noqa: E731
                d = rawcoop.gemm(a0, bt0.T, **kw)
                err = float(cp.linalg.norm(d.astype(cp.float32) - ref.astype(cp.float32))
                            / cp.linalg.norm(ref.astype(cp.float32)))
                for _ in range(3):
                    ours(*inputs[0])
                    cublas(*inputs[0])
                cp.cuda.Device().synchronize()
                ratios, t_ours, t_cublas = [], [], []
                for _ in range(args.rounds):
                    to = time_calls(cp, ours, inputs, args.iters)
                    tc = time_calls(cp, cublas, inputs, args.iters)
                    t_ours.append(to)
                    t_cublas.append(tc)
                    ratios.append(tc / to)
                row = {"dtype": dname, "shape": shape, "variant": vname, "sets": sets,
                       "rawcoop_ms": statistics.median(t_ours) * 1e3,
                       "cublas_ms": statistics.median(t_cublas) * 1e3,
                       "rawcoop_tflops": flops / statistics.median(t_ours) / 1e12,
                       "cublas_tflops": flops / statistics.median(t_cublas) / 1e12,
                       "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                       "rel_err_vs_cublas": err}
                rows.append(row)
                print(f"{dname} {shape:>18s} {vname:>7s}  rawcoop {row['rawcoop_tflops']:6.1f} TF/s "
                      f"({row['rawcoop_tflops'] / PEAK_TFLOPS:5.1%} of peak)  cuBLAS {row['cublas_tflops']:6.1f}"
                      f"  ratio {row['ratio']:.3f} [{row['ratio_min']:.3f}-{row['ratio_max']:.3f}]  err {err:.1e}",
                      flush=True)
            del inputs, base, ref
            cp.get_default_memory_pool().free_all_blocks()
    print("\nsummary (ratio = cuBLAS time / rawcoop time, median of rounds)")
    for vname, _ in variants:
        for dname in args.dtypes.split(","):
            rs = [r for r in rows if r["variant"] == vname and r["dtype"] == dname]
            if rs:
                gm = math.exp(sum(math.log(r["ratio"]) for r in rs) / len(rs))
                print(f"  {dname} {vname}: geomean {gm:.3f} over {len(rs)} shapes; "
                      + ", ".join(f"{r['shape']} {r['ratio']:.2f}" for r in rs))
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": info.name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
