"""Same-process A/B of a kernel ``#define`` experiment: rawcoop with the
default kernels (A) against rawcoop with ``--defines`` (B), alternating in
every round, on 16-bit GEMMs (cuBLAS timed in the same rounds), per-tensor fp8
and block-scaled fp8.

    PYTHONPATH=$PWD python bench/define_ab.py --defines UNIFORM_CONSUMER=1 \\
        --shapes 4096x4096x4096,4096x14336x4096 --fp8-shapes 4096x4096x4096 \\
        --block-shapes 4096x7168x16384 --rounds 7 --json ab.json

``--epilogue`` makes the 16-bit rows fuse C, a bias and gelu (no cuBLAS
column then) and ``--block-m 192`` forces the tall tiles (stop 22 measured the FUSED_EPI epilogue
experiment this way, since removed), e.g.:

    PYTHONPATH=$PWD python bench/define_ab.py --defines SPLIT_SPREAD=0 --epilogue --block-m 192 \\
        --shapes 1536x768x65536,1536x1536x16384 --rounds 7

bench/define_probe.py runs the whole bench with the defines, one process per
setting; clocks and power drift between processes by more than most kernel
experiments gain, hence this.  Method as the bench's: normal data (fp8 scaled
to max |x| = 448 and rounded to e4m3), inputs rotated to >= 3x L2 (bench.n_sets_for),
per call CUDA events, median of ``--iters`` calls per side and round.  Prints
one JSON line per case: TFLOP/s of A and B (medians over rounds), ``b_vs_a``
= median over rounds of A time / B time (> 1: the define is faster) with its
range, each side's ratio to cuBLAS for 16-bit, and the relative difference
of B's output from A's (a wrong experimental kernel shows there).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from define_probe import extra_defines, parse_defines   # noqa: E402

def _shapes(text: str) -> list[tuple[int, int, int]]:
    from rawcoop.bench import parse_shapes
    return [(s.m, s.n, s.k) for s in parse_shapes(text)] if text else []


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="bench/define_ab.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--defines", required=True, type=parse_defines, help="NAME=INT[,NAME=INT...] (side B)")
    ap.add_argument("--shapes", type=_shapes, default=[], help="16-bit MxNxK list (TN), vs cuBLAS too")
    ap.add_argument("--dtype", default="bfloat16", help="16-bit dtypes, comma-separated")
    ap.add_argument("--fp8-shapes", type=_shapes, default=[], help="per-tensor e4m3 MxNxK list (TN, bf16 out)")
    ap.add_argument("--block-shapes", type=_shapes, default=[], help="block-scaled e4m3 MxNxK list")
    ap.add_argument("--epilogue", action="store_true",
                    help="16-bit rows compute D = gelu(A@B + 0.5*C + bias) (C row-major in the output type, "
                         "fp32 bias along N), without the cuBLAS column")
    ap.add_argument("--block-m", type=int, choices=(128, 192), default=None,
                    help="16-bit rows: force the tile height (rawcoop.gemm's _block_m)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args(argv)
    args.dtype = [d.strip() for d in args.dtype.split(",") if d.strip()]
    if not (args.shapes or args.fp8_shapes or args.block_shapes):
        ap.error("nothing to run: give --shapes, --fp8-shapes or --block-shapes")
    if args.rounds < 1 or args.iters < 1:
        ap.error("--rounds and --iters must be >= 1")
    return args


def _summary(row, flops, times, a="A", b="B"):
    ta, tb = times[a], times[b]
    ab = [x / y for x, y in zip(ta, tb)]
    row.update(a_tflops=round(flops / statistics.median(ta) / 1e12, 1),
               b_tflops=round(flops / statistics.median(tb) / 1e12, 1),
               b_vs_a=round(statistics.median(ab), 4), b_vs_a_range=[round(min(ab), 4), round(max(ab), 4)])
    if "cuBLAS" in times:
        tc = times["cuBLAS"]
        row.update(cublas_tflops=round(flops / statistics.median(tc) / 1e12, 1),
                   a_vs_cublas=round(statistics.median(x / y for x, y in zip(tc, ta)), 4),
                   b_vs_cublas=round(statistics.median(x / y for x, y in zip(tc, tb)), 4))
    return row


def _ab(cp, sides, n_sets, rounds, iters, defines):
    """Alternate the sides (name -> fn(i), B under the defines) for ``rounds``."""
    from rawcoop.bench import time_calls
    times = {name: [] for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            if name == "B":
                with extra_defines(defines):
                    fn(0), fn(1 % n_sets)                  # plans again (the cache was emptied)
                    times[name].append(time_calls(cp, fn, n_sets, iters))
            else:
                fn(0), fn(1 % n_sets)
                times[name].append(time_calls(cp, fn, n_sets, iters))
    return times


def _rel(cp, x, y):
    x, y = x.astype(cp.float64), y.astype(cp.float64)
    return float(cp.linalg.norm(x - y) / max(float(cp.linalg.norm(y)), 1e-300))


def run(args) -> list[dict]:
    import cupy as cp
    import ml_dtypes
    import numpy as np

    import rawcoop
    from rawcoop import device
    from rawcoop.bench import E4M3_MAX, n_sets_for, quantize_e4m3
    rows = []
    rs = cp.random.RandomState(7)
    l2 = device.info(cp.cuda.Device().id).l2_bytes

    def sets_for(bytes_per_set):
        return max(2, n_sets_for(bytes_per_set, l2))          # >= 3x L2; two at least (warm-up uses sets 0, 1)

    for dname in args.dtype:
        dt = np.dtype(ml_dtypes.bfloat16) if dname == "bfloat16" else np.dtype(dname)
        for (m, n, k) in args.shapes:
            n_sets = sets_for((m * k + k * n + m * n * (2 if args.epilogue else 1)) * 2)
            A = [rs.standard_normal((m, k), dtype=cp.float32).astype(dt) for _ in range(n_sets)]
            B = [rs.standard_normal((n, k), dtype=cp.float32).astype(dt).T for _ in range(n_sets)]
            D = [cp.empty((m, n), dt) for _ in range(n_sets)]
            DC = [cp.empty((m, n), dt) for _ in range(n_sets)]
            kw = {} if args.block_m is None else {"_block_m": args.block_m}
            if args.epilogue:
                C = [rs.standard_normal((m, n), dtype=cp.float32).astype(dt) for _ in range(n_sets)]
                bias = rs.standard_normal((n,), dtype=cp.float32)
                ekw = lambda i: dict(c=C[i], beta=0.5, bias=bias, activation="gelu")    # noqa: E731
            else:
                ekw = lambda i: {}                                                        # noqa: E731
            ours = lambda i: rawcoop.gemm(A[i], B[i], out=D[i], **ekw(i), **kw)          # noqa: E731
            theirs = lambda i: cp.matmul(A[i], B[i], out=DC[i])            # noqa: E731
            ours(0)
            ref = D[0].copy()
            with extra_defines(args.defines):
                ours(0)
            row = {"kind": dname, "shape": [m, n, k], "defines": dict(args.defines),
                   "epilogue": args.epilogue, "block_m": args.block_m, "b_rel_diff": _rel(cp, D[0], ref)}
            sides = {"A": ours, "B": ours} if args.epilogue else {"cuBLAS": theirs, "A": ours, "B": ours}
            times = _ab(cp, sides, n_sets, args.rounds, args.iters, args.defines)
            rows.append(_summary(row, 2 * m * n * k, times))
            print(json.dumps(rows[-1]), flush=True)
            A = B = D = DC = ref = C = None                       # (the closures above are done with them)
            cp.get_default_memory_pool().free_all_blocks()

    def e4m3(r, c):
        x = rs.standard_normal((r, c), dtype=cp.float32).ravel()
        x *= cp.float32(E4M3_MAX) / cp.abs(x).max()
        out = cp.empty(x.size, cp.uint8)
        for lo in range(0, x.size, 1 << 24):                 # the quantiser's temporaries, in pieces
            out[lo:lo + (1 << 24)] = quantize_e4m3(cp, x[lo:lo + (1 << 24)])
        return out.reshape(r, c)

    bf = np.dtype(ml_dtypes.bfloat16)
    for block, shapes in ((False, args.fp8_shapes), (True, args.block_shapes)):
        for (m, n, k) in shapes:
            n_sets = sets_for(m * k + k * n + m * n * 2)
            A = [e4m3(m, k) for _ in range(n_sets)]
            B = [e4m3(n, k).T for _ in range(n_sets)]
            D = [cp.empty((m, n), bf) for _ in range(n_sets)]
            if block:
                kb = -(-k // 128)
                SA = [rawcoop.mn_major_scales(cp.exp2(rs.uniform(-6, 6, (m, kb)).astype(cp.float32)))
                      for _ in range(n_sets)]
                SB = [cp.exp2(rs.uniform(-6, 6, (-(-n // 128), kb)).astype(cp.float32)) for _ in range(n_sets)]
                kw = lambda i: dict(scale_a=SA[i], scale_b=SB[i], scale_mode="block")    # noqa: E731
            else:
                one = cp.full((1,), 1.0 / 64, cp.float32)
                kw = lambda i: dict(scale_a=one, scale_b=one)                            # noqa: E731
            ours = lambda i: rawcoop.gemm(A[i], B[i], a_format="e4m3", b_format="e4m3",   # noqa: E731
                                          out_dtype=bf, out=D[i], **kw(i))
            ours(0)
            ref = D[0].copy()
            with extra_defines(args.defines):
                ours(0)
            row = {"kind": "e4m3 block" if block else "e4m3", "shape": [m, n, k], "defines": dict(args.defines),
                   "b_rel_diff": _rel(cp, D[0], ref)}
            times = _ab(cp, {"A": ours, "B": ours}, n_sets, args.rounds, args.iters, args.defines)
            rows.append(_summary(row, 2 * m * n * k, times))
            print(json.dumps(rows[-1]), flush=True)
            A = B = D = ref = None
            cp.get_default_memory_pool().free_all_blocks()
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    print(f"define_ab: A = default kernels, B = with {dict(args.defines)}; b_vs_a > 1: B faster", flush=True)
    rows = run(args)
    if args.json:
        from rawcoop.bench import write_json
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
