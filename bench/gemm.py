"""rawcoop.gemm against cuBLAS (cupy.matmul), side by side in one process.

Method (bench/NOTES.md): normal-distributed inputs for both sides; inputs
rotated across several sets when one set would fit in L2 (3x L2 in total);
warm-up; in each of R rounds rawcoop and the baseline alternate, each timed
per call with CUDA events (median of `iters` calls); the reported ratio is
the median over rounds of baseline_time / rawcoop_time (> 1: rawcoop
faster), because clocks and power drift by up to ~10% within a run.

Suites:
  main      the issue-3 shape set, TN layout, bf16 and fp16
  layouts   8192^3 bf16 in TN/NN/NT/TT (cuBLAS gets the same strided views)
  batched   L=16 x 2048^3 fp16, rawcoop vs cupy.matmul on the 3-D arrays
  epilogue  alpha/beta with C, and bias+gelu, vs cuBLAS + one CuPy element-wise kernel
  small_m   M in {1, 16, 64}, N = K = 8192: swap-AB (default) and forced no-swap
  pdl       a chain of 8 dependent GEMMs with and without programmatic dependent launch

    PYTHONPATH=$PWD python bench/gemm.py [--suite main,layouts,...] [--dtypes bf16,fp16]
        [--shapes 4096x4096x4096,...] [--variants auto,256:8] [--rounds 5] [--iters 20] [--json out.json]
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
    return tuple(int(x) for x in s.lower().split("x"))


def time_calls(cp, fn, n_sets, iters):
    starts = [cp.cuda.Event() for _ in range(iters)]
    ends = [cp.cuda.Event() for _ in range(iters)]
    for i in range(iters):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    ends[-1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)) * 1e-3


def compare(cp, ours, theirs, n_sets, rounds, iters):
    for _ in range(3):
        ours(0)
        theirs(0)
    cp.cuda.Device().synchronize()
    t_o, t_t, ratios = [], [], []
    for _ in range(rounds):
        to = time_calls(cp, ours, n_sets, iters)
        tt = time_calls(cp, theirs, n_sets, iters)
        t_o.append(to)
        t_t.append(tt)
        ratios.append(tt / to)
    return statistics.median(t_o), statistics.median(t_t), ratios


def n_sets_for(nbytes, l2):
    return max(1, min(8, math.ceil(3 * l2 / nbytes)))


class Bench:
    def __init__(self, args):
        import cupy as cp
        import ml_dtypes
        import numpy as np

        from rawcoop import device
        self.cp, self.np = cp, np
        self.args = args
        self.info = device.info(0)
        self.dtypes = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
        self.rows = []

    def rand(self, shape, dt, seed):
        rs = self.cp.random.RandomState(seed)
        return rs.standard_normal(shape, dtype=self.cp.float32).astype(dt)

    def record(self, suite, label, flops, ours, theirs, n_sets, baseline="cuBLAS", extra=None):
        cp = self.cp
        to, tt, ratios = compare(cp, ours, theirs, n_sets, self.args.rounds, self.args.iters)
        row = {"suite": suite, "case": label, "sets": n_sets, "rawcoop_ms": to * 1e3, "baseline_ms": tt * 1e3,
               "baseline": baseline, "rawcoop_tflops": flops / to / 1e12, "baseline_tflops": flops / tt / 1e12,
               "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
        row.update(extra or {})
        self.rows.append(row)
        print(f"{suite:8s} {label:34s} rawcoop {row['rawcoop_tflops']:6.1f} TF/s ({row['rawcoop_tflops'] / PEAK_TFLOPS:5.1%})"
              f"  {baseline} {row['baseline_tflops']:6.1f}  ratio {row['ratio']:.3f} "
              f"[{row['ratio_min']:.3f}-{row['ratio_max']:.3f}]" +
              (f"  err {row['rel_err']:.1e}" if "rel_err" in row else ""), flush=True)
        return row

    def rel_err(self, d, ref):
        cp = self.cp
        d, ref = d.astype(cp.float32), ref.astype(cp.float32)
        return float(cp.linalg.norm(d - ref) / cp.linalg.norm(ref))

    def free(self):
        self.cp.get_default_memory_pool().free_all_blocks()

    # ------------------------------------------------------------ suites
    def main(self):
        import rawcoop
        cp = self.cp
        variants = []
        for v in self.args.variants.split(","):
            if v == "auto":
                variants.append(("auto", {}))
            else:
                parts = [int(x) for x in v.split(":")]
                kw = {"_block_n": parts[0], "_group": parts[1]}
                if len(parts) > 2 and parts[2]:
                    kw["_splits"] = parts[2]
                if len(parts) > 3:
                    kw["_cluster"] = parts[3]
                variants.append((v, kw))
        for dname in self.args.dtypes.split(","):
            dt = self.dtypes[dname]
            for shape in self.args.shapes.split(","):
                m, n, k = parse_shape(shape)
                sets = n_sets_for((m * k + n * k + m * n) * 2, self.info.l2_bytes)
                A = [self.rand((m, k), dt, 10 * i) for i in range(sets)]
                BT = [self.rand((n, k), dt, 10 * i + 1) for i in range(sets)]
                D = [cp.empty((m, n), dt) for _ in range(sets)]
                ref = cp.matmul(A[0], BT[0].T)
                for vname, kw in variants:
                    err = self.rel_err(rawcoop.gemm(A[0], BT[0].T, **kw), ref)
                    self.record("main", f"{dname} {shape} {vname}", 2.0 * m * n * k,
                                lambda i, kw=kw: rawcoop.gemm(A[i], BT[i].T, out=D[i], **kw),
                                lambda i: cp.matmul(A[i], BT[i].T, out=D[i]), sets,
                                extra={"dtype": dname, "shape": shape, "variant": vname, "rel_err": err})
                del A, BT, D, ref
                self.free()

    def layouts(self):
        import rawcoop
        cp = self.cp
        dt = self.dtypes["bf16"]
        m = n = k = 8192
        sets = n_sets_for(3 * m * n * 2, self.info.l2_bytes)
        for layout in ("TN", "NN", "NT", "TT"):
            A = [self.rand((m, k), dt, i) if layout[0] == "T" else self.rand((k, m), dt, i).T for i in range(sets)]
            B = [self.rand((n, k), dt, 7 + i).T if layout[1] == "N" else self.rand((k, n), dt, 7 + i)
                 for i in range(sets)]
            D = [cp.empty((m, n), dt) for _ in range(sets)]
            err = self.rel_err(rawcoop.gemm(A[0], B[0]), cp.matmul(A[0], B[0]))
            self.record("layouts", f"bf16 8192^3 {layout}", 2.0 * m * n * k,
                        lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), lambda i: cp.matmul(A[i], B[i], out=D[i]),
                        sets, extra={"layout": layout, "rel_err": err})
            del A, B, D
            self.free()

    def batched(self):
        # fp16: CuPy 14's batched matmul rejects bfloat16 ("data type 'E' not
        # understood" in its integer tensordot path), so bf16 has no cuBLAS
        # baseline through CuPy for 3-D inputs.
        import rawcoop
        cp = self.cp
        dt = self.dtypes["fp16"]
        L, m, n, k = 16, 2048, 2048, 2048
        sets = n_sets_for(L * 3 * m * n * 2, self.info.l2_bytes)
        A = [self.rand((L, m, k), dt, i) for i in range(sets)]
        B = [self.rand((L, k, n), dt, 5 + i) for i in range(sets)]
        D = [cp.empty((L, m, n), dt) for _ in range(sets)]
        err = self.rel_err(rawcoop.gemm(A[0], B[0]), cp.matmul(A[0], B[0]))
        flops = 2.0 * L * m * n * k
        self.record("batched", "fp16 16 x 2048^3 vs cupy.matmul 3-D", flops,
                    lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), lambda i: cp.matmul(A[i], B[i], out=D[i]),
                    sets, extra={"rel_err": err})

        def loop(i):                          # cuBLAS through CuPy's 2-D path, one GEMM per batch
            for j in range(L):
                cp.matmul(A[i][j], B[i][j], out=D[i][j])
        self.record("batched", "fp16 16 x 2048^3 vs 16 cupy 2-D calls", flops,
                    lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), loop, sets, baseline="cuBLASx16")
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            TA = [torch.as_tensor(a, device="cuda") for a in A]
            TB = [torch.as_tensor(b, device="cuda") for b in B]
            TD = [torch.as_tensor(d, device="cuda") for d in D]
            self.record("batched", "fp16 16 x 2048^3 vs torch.bmm", flops,
                        lambda i: rawcoop.gemm(A[i], B[i], out=D[i]),
                        lambda i: torch.bmm(TA[i], TB[i], out=TD[i]), sets, baseline="torch.bmm")
        self.free()

    def epilogue(self):
        import rawcoop
        cp = self.cp
        axpby = cp.ElementwiseKernel("T x, T c, float32 alpha, float32 beta", "T d",
                                     "d = (T)(alpha * (float)x + beta * (float)c)", "rc_axpby")
        bias_gelu = cp.ElementwiseKernel(
            "T x, raw float32 bias, int32 n", "T d",
            "float v = (float)x + bias[i % n];"
            "d = (T)(0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))))", "rc_bias_gelu")
        dt = self.dtypes["fp16"]
        for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
            sets = n_sets_for(4 * m * n * 2, self.info.l2_bytes)
            A = [self.rand((m, k), dt, i) for i in range(sets)]
            BT = [self.rand((n, k), dt, 3 + i) for i in range(sets)]
            C = [self.rand((m, n), dt, 6 + i) for i in range(sets)]
            D = [cp.empty((m, n), dt) for _ in range(sets)]
            T = cp.empty((m, n), dt)
            bias = self.rand((n,), cp.float32, 9)

            def theirs_ab(i):
                cp.matmul(A[i], BT[i].T, out=T)
                axpby(T, C[i], cp.float32(0.5), cp.float32(1.5), D[i])

            ref = cp.empty((m, n), dt)
            theirs_ab(0)
            ref[...] = D[0]
            err = self.rel_err(rawcoop.gemm(A[0], BT[0].T, c=C[0], alpha=0.5, beta=1.5), ref)
            self.record("epilogue", f"fp16 {m}x{n}x{k} 0.5*AB+1.5*C", 2.0 * m * n * k,
                        lambda i: rawcoop.gemm(A[i], BT[i].T, c=C[i], alpha=0.5, beta=1.5, out=D[i]), theirs_ab,
                        sets, baseline="cuBLAS+ew", extra={"rel_err": err})

            def theirs_bg(i):
                cp.matmul(A[i], BT[i].T, out=T)
                bias_gelu(T, bias, n, D[i])

            theirs_bg(0)
            ref[...] = D[0]
            err = self.rel_err(rawcoop.gemm(A[0], BT[0].T, bias=bias, activation="gelu"), ref)
            self.record("epilogue", f"fp16 {m}x{n}x{k} gelu(AB+bias)", 2.0 * m * n * k,
                        lambda i: rawcoop.gemm(A[i], BT[i].T, bias=bias, activation="gelu", out=D[i]), theirs_bg,
                        sets, baseline="cuBLAS+ew", extra={"rel_err": err})
            del A, BT, C, D, T
            self.free()

    def pdl(self):
        """A chain of 8 dependent GEMMs (each consumes the previous output),
        launched with and without programmatic dependent launch."""
        import rawcoop
        cp = self.cp
        dt = self.dtypes["bf16"]
        for size in (1024, 2048):
            x0 = self.rand((size, size), dt, 1)
            W = [(self.rand((size, size), dt, 2 + i).astype(cp.float32) / 32).astype(dt) for i in range(8)]
            X = [cp.empty((size, size), dt) for _ in range(8)]

            def chain(pdl):
                def run(_):
                    x = x0
                    for i in range(8):
                        x = rawcoop.gemm(x, W[i], out=X[i], pdl=pdl)
                return run

            def chain_cublas(_):
                x = x0
                for i in range(8):
                    x = cp.matmul(x, W[i], out=X[i])
            flops = 8 * 2.0 * size ** 3
            self.record("pdl", f"bf16 8x{size}^3 chain pdl vs no-pdl", flops, chain(True), chain(False), 1,
                        baseline="no-pdl")
            self.record("pdl", f"bf16 8x{size}^3 chain pdl vs cuBLAS", flops, chain(True), chain_cublas, 1)
            self.free()

    def small_m(self):
        import rawcoop
        cp = self.cp
        dt = self.dtypes["bf16"]
        n = k = 8192
        for m in (1, 16, 64):
            sets = n_sets_for((m * k + n * k) * 2, self.info.l2_bytes)
            A = [self.rand((m, k), dt, i) for i in range(sets)]
            BT = [self.rand((n, k), dt, 4 + i) for i in range(sets)]
            D = [cp.empty((m, n), dt) for _ in range(sets)]
            ref = cp.matmul(A[0], BT[0].T)
            for swap in (True, False):
                err = self.rel_err(rawcoop.gemm(A[0], BT[0].T, _swap=swap), ref)
                self.record("small_m", f"bf16 {m}x{n}x{k} swap={swap}", 2.0 * m * n * k,
                            lambda i, s=swap: rawcoop.gemm(A[i], BT[i].T, out=D[i], _swap=s),
                            lambda i: cp.matmul(A[i], BT[i].T, out=D[i]), sets,
                            extra={"m": m, "swap": swap, "rel_err": err})
            del A, BT, D
            self.free()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default="main")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="auto",
                    help="comma list of auto or BLOCK_N:GROUP[:SPLITS[:CLUSTER]] (main suite; SPLITS 0 = auto)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    b = Bench(args)
    print(f"GPU {b.info.name}, {b.info.sm_count} SMs, L2 {b.info.l2_bytes / 2**20:.0f} MiB; "
          f"rounds={args.rounds} iters={args.iters}; ratio = baseline time / rawcoop time")
    for suite in args.suite.split(","):
        getattr(b, suite)()
    main_rows = [r for r in b.rows if r["suite"] == "main"]
    if main_rows:
        print("\nsummary (main suite)")
        for key in sorted({(r["dtype"], r["variant"]) for r in main_rows}):
            rs = [r for r in main_rows if (r["dtype"], r["variant"]) == key]
            gm = math.exp(sum(math.log(r["ratio"]) for r in rs) / len(rs))
            print(f"  {key[0]} {key[1]}: geomean {gm:.3f} over {len(rs)} shapes")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": b.info.name, "rows": b.rows}, indent=1))


if __name__ == "__main__":
    main()
