"""rawcoop.gemm against cuBLAS (``cupy.matmul``; cuBLASLt through torch for fp8),
side by side in one process.

The one implementation behind ``python -m rawcoop bench`` and
``bench/gemm.py`` (and, for the plot, ``bench/plot.py``).

Method (bench/NOTES.md): normal-distributed inputs for both sides (power, and
so the clock, depends on the data); inputs rotated across several sets when
one set would fit in L2 (3x L2 in total, at most 8 sets); warm-up (3 calls
per side on every set, so no plan is built inside a timed call); in each of
R rounds rawcoop and the baseline alternate, each timed per call with CUDA
events (median of ``iters`` calls; ``--timing batch``: one event pair around
the ``iters`` calls instead, for short kernels whose per-call timing would
measure the host); the reported ratio is the median over
rounds of baseline_time / rawcoop_time (> 1: rawcoop faster), because clocks
and power drift by up to ~10% within a run.  The table also gives the min-max
of the per-round ratios and each side's fraction of the dense peak of an
H100/H200 SXM for the input type: 989 TFLOP/s fp16/bf16 (PEAK_TFLOPS), 1979
FP8 (PEAK_FP8_TFLOPS), 494.5 TF32 (PEAK_TF32_TFLOPS).

Suites:
  main      --shapes x --dtype x --layout (x --variants), vs cupy.matmul (cuBLAS);
            with --beta != 0 rawcoop fuses beta*C, the baseline is cuBLAS + one
            CuPy element-wise kernel ("cuBLAS+ew"); batched shapes (MxNxKxL,
            L > 1) are compared with L 2-D cupy.matmul calls ("cuBLASxL"),
            since CuPy's 3-D matmul is not cuBLAS's batched GEMM
  layouts   8192^3 bf16 in TN/NN/NT/TT (cuBLAS gets the same strided views)
  batched   L=16 x 2048^3 fp16, vs cupy.matmul 3-D, 16 2-D calls, torch.bmm
  epilogue  alpha/beta with C, and bias+gelu, vs cuBLAS + one CuPy element-wise kernel
  small_m   M in {1, 16, 64}, N = K = 8192: forced swap-AB and forced no-swap (the default here:
            one row of 128x64 whole-K tiles, configs.choose_swap)
  pdl       a chain of 8 dependent GEMMs with and without programmatic dependent launch
  fp8       (issue 6) e4m3 x e4m3 per-tensor scaled GEMM, bf16 out (--fp8-shapes), vs
            cuBLASLt through torch._scaled_mm on the same bytes and scales, with
            use_fast_accum=False ("cuBLASLt _scaled_mm") and =True ("... fast-accum");
            % of the 1979 TFLOP/s dense FP8 peak; rel err = rawcoop vs that baseline's
            output (each row also gives both sides' error vs an fp32 GEMM of the
            dequantised inputs).  Without a working torch: rawcoop alone, said so.
            --fp8-block adds block-scaled rows (scale_mode="block": fp32 scales per 1x128
            of A and per 128x128 of B, DeepSeek-V3) on --fp8-block-shapes (default the
            DeepGEMM-published shapes), rawcoop alone (no baseline), TFLOP/s, % of the
            FP8 peak, rel err vs an fp32 GEMM of the dequantised inputs
  tf32      (issue 6) float32 in/out with precision="tf32" (--tf32-shapes), vs
            cupy.matmul with CuPy's float32 compute type set to TF32 (cublasGemmEx with
            CUBLAS_COMPUTE_32F_FAST_TF32: "cuBLAS tf32") and torch.matmul with TF32
            allowed ("torch tf32"); % of the 494.5 TFLOP/s dense TF32 peak; each row
            also gives both sides' error vs float64, which shows TF32 really ran

fp8 data: normal samples scaled so that max |x| = 448 (per-tensor amax
scaling), rounded to e4m3 on the GPU by nearest value, ties to even, from
ml_dtypes' table of float8_e4m3fn values (bit-identical to ml_dtypes' cast;
see quantize_e4m3); the dequantisation scale amax/448 goes to both sides as a
device float32.  A row-major (M, K), B = bt.T of a row-major (N, K) (TN).

Nothing here imports CuPy or touches the GPU at import time: the argument
parsing, the table and the plot work on a machine without one.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

PEAK_TFLOPS = 989.0
"""Dense (no sparsity) fp16/bf16 tensor-core peak of an H100/H200 SXM in
TFLOP/s (NVIDIA datasheet: 989.4 TFLOP/s; the 1979 figure assumes 2:4
sparsity).  The "% peak" columns and the dashed line of the plot use it."""
PEAK_LABEL = "H100/H200 SXM dense fp16/bf16 peak"
PEAK_FP8_TFLOPS = 1979.0
"""Dense (no sparsity) FP8 tensor-core peak of an H100/H200 SXM in TFLOP/s
(NVIDIA datasheet: 1,979 TFLOP/s; the 3,958 figure assumes 2:4 sparsity).
The fp8 suite's "% peak" columns and its plot line use it."""
PEAK_FP8_LABEL = "H100/H200 SXM dense FP8 peak"
PEAK_TF32_TFLOPS = 494.5
"""Dense (no sparsity) TF32 tensor-core peak of an H100/H200 SXM in TFLOP/s
(NVIDIA datasheet: 494.7; the 989 figure assumes 2:4 sparsity).  The tf32
suite's "% peak" columns and its plot line use it."""
PEAK_TF32_LABEL = "H100/H200 SXM dense TF32 peak"
PEAKS = {"bf16": (PEAK_TFLOPS, PEAK_LABEL), "fp16": (PEAK_TFLOPS, PEAK_LABEL),
         "e4m3": (PEAK_FP8_TFLOPS, PEAK_FP8_LABEL), "tf32": (PEAK_TF32_TFLOPS, PEAK_TF32_LABEL)}
"""Row dtype -> (dense peak TFLOP/s, what it is)."""

RESULTS_FORMAT = "rawcoop-bench/1"

DEFAULT_SHAPES = ("4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "4096x14336x4096",
                  "8192x8192x28672", "256x16384x4096", "128x8192x8192", "1024x1024x65536")
"""The issue-3/issue-5 main shape set (TN)."""

FP8_SHAPES = ("4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "128x8192x8192", "4096x7168x16384")
"""The issue-6 fp8 shape set (TN, e4m3 x e4m3, bf16 out)."""
FP8_BLOCK_SHAPES = ("4096x7168x16384", "4096x4096x7168", "128x7168x16384")
"""--fp8-block: block-scaled e4m3 shapes (DeepGEMM's published set; TN, bf16 out)."""
TF32_SHAPES = ("4096x4096x4096", "8192x8192x8192", "4096x14336x4096")
"""The issue-6 tf32 shape set (TN, float32 in and out)."""

SUITES = ("main", "layouts", "batched", "epilogue", "small_m", "pdl", "fp8", "tf32")
LAYOUTS = ("TN", "NN", "NT", "TT")
"""BLAS-style names as in rawcoop.plan.configs.LAYOUTS: first letter A
(T: row-major (M, K), N: column-major), second letter B (N: column-major
(K, N), i.e. ``bt.T``; T: row-major)."""
DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16"}
"""Accepted spellings -> the short name used in rows and tables."""
ROW_DTYPES = dict(DTYPES, e4m3="e4m3", tf32="tf32")
"""Spellings understood in result rows (the main suite's --dtype takes only DTYPES)."""
BASE_SCALED_MM = "cuBLASLt _scaled_mm"
BASE_SCALED_MM_FAST = "cuBLASLt _scaled_mm fast-accum"
BASE_CUBLAS_TF32 = "cuBLAS tf32"
BASE_TORCH_TF32 = "torch tf32"
NO_BASELINE = "none"
"""Baseline name of a row timed without one (rawcoop alone: torch missing or refusing)."""
E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value: the fp8 data are scaled so that max |x| is this."""
MAX_REL_ERR = 1e-2
"""A row whose rawcoop output differs from the baseline's by more than this
(relative Frobenius norm) is reported as a mismatch and fails the run."""


# ---------------------------------------------------------------- parsing
class Shape(NamedTuple):
    m: int
    n: int
    k: int
    batch: int = 1

    def __str__(self) -> str:
        s = f"{self.m}x{self.n}x{self.k}"
        return s if self.batch == 1 else f"{s}x{self.batch}"

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def parse_shape(text: str) -> Shape:
    """``MxNxK`` or ``MxNxKxL`` (L: batch) with positive integers."""
    t = str(text).strip().lower()
    parts = t.split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) not in (3, 4) or any(d <= 0 for d in dims):
        raise ValueError(f"bad shape {text!r}: expected MxNxK or MxNxKxL with positive integers "
                         "(e.g. 4096x4096x4096, or 2048x2048x2048x16 for a batch of 16)")
    return Shape(*dims)


def _split(text: str) -> list[str]:
    return [t.strip() for t in str(text).split(",") if t.strip()]


def parse_shapes(text: str) -> list[Shape]:
    items = _split(text)
    if not items:
        raise ValueError("no shapes given (expected a comma list of MxNxK[xL])")
    return [parse_shape(s) for s in items]


def parse_dtypes(text: str) -> list[str]:
    out = []
    for d in _split(text):
        name = DTYPES.get(d.lower())
        if name is None:
            raise ValueError(f"unknown dtype {d!r}: use float16 (fp16) or bfloat16 (bf16)")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("no dtype given (float16, bfloat16)")
    return out


def parse_layouts(text: str) -> list[str]:
    out = []
    for x in _split(text):
        if x.upper() not in LAYOUTS:
            raise ValueError(f"unknown layout {x!r}: use TN, NN, NT or TT")
        if x.upper() not in out:
            out.append(x.upper())
    if not out:
        raise ValueError("no layout given (TN, NN, NT, TT)")
    return out


def parse_suites(text: str) -> list[str]:
    items = _split(text)
    if [s.lower() for s in items] == ["all"]:
        return list(SUITES)
    for s in items:
        if s not in SUITES:
            raise ValueError(f"unknown suite {s!r}: choose from {', '.join(SUITES)} (or all)")
    if not items:
        raise ValueError(f"no suite given ({', '.join(SUITES)})")
    return items


def parse_gemm_shapes(text: str, k_multiple: int, what: str) -> list[Shape]:
    """A comma list of 2-D ``MxNxK`` shapes whose K is a multiple of
    ``k_multiple`` (rows of 16 bytes: 16 for fp8, 4 for tf32)."""
    shapes = parse_shapes(text)
    for s in shapes:
        if s.batch != 1:
            raise ValueError(f"bad shape {str(s)!r}: the {what} suite takes MxNxK (no batch)")
        if s.k % k_multiple:
            raise ValueError(f"bad shape {str(s)!r}: {what} needs K a multiple of {k_multiple} "
                             "(rows of 16 bytes)")
    return shapes


def parse_fp8_shapes(text: str) -> list[Shape]:
    return parse_gemm_shapes(text, 16, "fp8")


def parse_tf32_shapes(text: str) -> list[Shape]:
    return parse_gemm_shapes(text, 4, "tf32")


_VARIANT_KEYS = ("block_n", "group", "splits", "cluster")


def _cluster_value(text: str):
    """A variant's cluster: ``2`` (= 2x1, as ``_cluster=2``), ``2x1`` or ``1x2``."""
    text = text.strip().lower()
    if "x" in text:
        cm, cn = text.split("x", 1)
        return int(cm), int(cn)
    return int(text)


def parse_variants(text: str) -> list[tuple[str, dict]]:
    """``auto`` or ``BLOCK_N:GROUP[:SPLITS[:CLUSTER]]`` (SPLITS 0 = automatic;
    CLUSTER 1, 2 = 2x1, or ``2x1``/``1x2``), or colon-separated ``key=value``
    pairs naming any of rawcoop.gemm's private ``_key`` arguments (e.g.
    ``block_n=128:pingpong=1``, ``cluster=1x2``)."""
    out = []
    for v in _split(text):
        if v == "auto":
            out.append(("auto", {}))
            continue
        kw = {}
        try:
            for i, part in enumerate(v.split(":")):
                if "=" in part:
                    key, val = part.split("=", 1)
                else:
                    if i >= len(_VARIANT_KEYS):
                        raise ValueError
                    key, val = _VARIANT_KEYS[i], part
                key = key.strip().lstrip("_")
                kw["_" + key] = _cluster_value(val) if key == "cluster" else int(val)
        except ValueError:
            raise ValueError(f"bad variant {v!r}: expected auto, BLOCK_N:GROUP[:SPLITS[:CLUSTER]] "
                             "or key=value pairs such as block_n=128:group=8") from None
        if kw.get("_splits") == 0:
            del kw["_splits"]
        out.append((v, kw))
    if not out:
        raise ValueError("no variant given (auto, or BLOCK_N:GROUP[:SPLITS[:CLUSTER]])")
    return out


def _variant_label(label: str, variant: str) -> str:
    """A row's case label with its --variants entry (none for "auto")."""
    return label if variant == "auto" else f"{label} {variant}"


def _argtype(fn, what):
    def conv(text):
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    conv.__name__ = what
    return conv


def _positive_int(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return v


def add_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The benchmark's options (shared by ``python -m rawcoop bench`` and bench/gemm.py)."""
    ap.add_argument("--suite", default=["main"], metavar="LIST", type=_argtype(parse_suites, "suites"),
                    help=f"comma list of {', '.join(SUITES)}, or all (default main)")
    ap.add_argument("--dtype", "--dtypes", dest="dtypes", default=["bf16", "fp16"], metavar="LIST",
                    type=_argtype(parse_dtypes, "dtypes"),
                    help="main suite: comma list of bfloat16 (bf16), float16 (fp16) (default both)")
    ap.add_argument("--shapes", default=[parse_shape(s) for s in DEFAULT_SHAPES], metavar="LIST",
                    type=_argtype(parse_shapes, "shapes"),
                    help="main suite: comma list of MxNxK or MxNxKxL (batch L) (default: the issue-5 set "
                         + ",".join(DEFAULT_SHAPES) + ")")
    ap.add_argument("--layout", "--layouts", dest="layouts", default=["TN"], metavar="LIST", type=_argtype(parse_layouts, "layouts"),
                    help="main suite: comma list of TN, NN, NT, TT (default TN: A row-major, B = bt.T)")
    ap.add_argument("--beta", type=float, default=0.0,
                    help="main suite: nonzero -> D = A@B + beta*C with a normal C; the baseline is then "
                         "cuBLAS + one CuPy element-wise kernel (default 0)")
    ap.add_argument("--out-dtype", dest="out_dtype", choices=("float32",), default=None,
                    help="main suite: rawcoop writes float32 D (fp16/bf16 in, fp32 out); the baseline keeps "
                         "cupy.matmul's output in the input type, so compare variants within a row set "
                         "(default: the input type)")
    ap.add_argument("--variants", default=[("auto", {})], metavar="LIST", type=_argtype(parse_variants, "variants"),
                    help="main, fp8, --fp8-block and tf32 rows: comma list of auto or BLOCK_N:GROUP[:SPLITS[:CLUSTER]] "
                         "(SPLITS 0 = auto) "
                         "or key=value pairs of gemm's private _key options (default auto); with several, all "
                         "of a problem's variants and its baseline are timed in the same rounds and each "
                         "later variant's row also gives its time against the first's (vs_first)")
    ap.add_argument("--fp8-shapes", dest="fp8_shapes", default=[parse_shape(s) for s in FP8_SHAPES], metavar="LIST",
                    type=_argtype(parse_fp8_shapes, "fp8 shapes"),
                    help="fp8 suite: comma list of MxNxK, K a multiple of 16 (default: the issue-6 set "
                         + ",".join(FP8_SHAPES) + ")")
    ap.add_argument("--fp8-block", dest="fp8_block", action="store_true",
                    help="fp8 suite: also time block-scaled fp8 (scale_mode='block') on --fp8-block-shapes, "
                         "rawcoop alone")
    ap.add_argument("--fp8-block-shapes", dest="fp8_block_shapes", default=[parse_shape(s) for s in FP8_BLOCK_SHAPES],
                    metavar="LIST", type=_argtype(parse_fp8_shapes, "fp8 shapes"),
                    help="--fp8-block: comma list of MxNxK, K a multiple of 16 (default "
                         + ",".join(FP8_BLOCK_SHAPES) + ")")
    ap.add_argument("--tf32-shapes", dest="tf32_shapes", default=[parse_shape(s) for s in TF32_SHAPES],
                    metavar="LIST", type=_argtype(parse_tf32_shapes, "tf32 shapes"),
                    help="tf32 suite: comma list of MxNxK, K a multiple of 4 (default: the issue-6 set "
                         + ",".join(TF32_SHAPES) + ")")
    ap.add_argument("--rounds", type=_positive_int, default=5, metavar="R", help="rounds of alternating timing (default 5)")
    ap.add_argument("--iters", type=_positive_int, default=20, metavar="N", help="timed calls per side and round (default 20)")
    ap.add_argument("--timing", choices=TIMINGS, default="calls",
                    help="calls: median of per-call CUDA event pairs (default); batch: one event pair around "
                         "the round's calls, per call (back to back: kernel time for short kernels whose "
                         "per-call timing is host-bound)")
    ap.add_argument("--json", metavar="PATH", help="write every row, every round and the environment here")
    ap.add_argument("--plot", metavar="PNG", help="draw rawcoop vs cuBLAS TFLOP/s per shape into this PNG "
                                                  "(needs matplotlib)")
    return ap


def build_parser(prog: str = "python -m rawcoop bench") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_arguments(ap)


# ---------------------------------------------------------------- timing
TIMINGS = ("calls", "batch")


def time_calls(cp, fn, n_sets: int, iters: int, host: list | None = None, timing: str = "calls") -> float:
    """Seconds per call of ``fn(i % n_sets)`` over ``iters`` calls.

    ``timing`` "calls" (default): the median of the calls, each between two
    CUDA events.  "batch": one event pair around all ``iters`` calls, divided
    by ``iters``: no event records between calls, so while the host needs less
    time per call than the GPU, the GPU never waits for it and the time is
    the kernels' (back to back) rather than the host's; for kernels of a few
    tens of microseconds, where per-call events make both sides host-bound.
    ``host``: a list that gets this batch's host seconds per call (the
    Python loop, before waiting for the GPU).  When that is about the
    measured time, the GPU waited for the host between calls and the row
    measures host time, not the kernel (see HOST_BOUND)."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    if timing == "batch":
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        for i in range(iters):
            fn(i % n_sets)
        end.record()
        if host is not None:
            host.append((time.perf_counter() - t0) / iters)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) * 1e-3 / iters
    starts = [cp.cuda.Event() for _ in range(iters)]
    ends = [cp.cuda.Event() for _ in range(iters)]
    t0 = time.perf_counter()
    for i in range(iters):
        starts[i].record()
        fn(i % n_sets)
        ends[i].record()
    if host is not None:
        host.append((time.perf_counter() - t0) / iters)
    ends[-1].synchronize()
    return statistics.median(cp.cuda.get_elapsed_time(s, e) for s, e in zip(starts, ends)) * 1e-3


def _warm_up(cp, fns, n_sets: int) -> None:
    """Three passes of every ``fns`` entry over every input set, then a sync:
    rawcoop builds (and caches) a plan per set of pointers, and that host
    work must not land inside a timed call."""
    for _ in range(3):
        for i in range(n_sets):
            for fn in fns:
                fn(i)
    cp.cuda.Device().synchronize()


def compare(cp, ours, theirs, n_sets: int, rounds: int, iters: int,
            host: dict | None = None, timing: str = "calls") -> list[tuple[float, float | None]]:
    """Warm-up, then ``rounds`` rounds of (ours, theirs) timings in seconds.

    The warm-up calls both sides on every input set: rawcoop builds (and
    caches) a plan per set of pointers, and that host work must not land
    inside a timed call.  ``theirs`` None: rawcoop alone (theirs' time None).
    ``host``: a dict that gets "ours"/"theirs" lists of host seconds per
    call, one per round.  ``timing``: see time_calls."""
    _warm_up(cp, [ours] if theirs is None else [ours, theirs], n_sets)
    out = []
    for _ in range(rounds):
        to = time_calls(cp, ours, n_sets, iters, None if host is None else host.setdefault("ours", []), timing)
        tt = (time_calls(cp, theirs, n_sets, iters, None if host is None else host.setdefault("theirs", []),
                         timing) if theirs is not None else None)
        out.append((to, tt))
    return out


def compare_variants(cp, ours_list, theirs, n_sets: int, rounds: int, iters: int,
                     hosts: list | None = None, timing: str = "calls") -> list[list[tuple[float, float | None]]]:
    """:func:`compare` for several rawcoop variants of one problem in the
    SAME rounds: each round times the baseline (first in even rounds, last in
    odd ones) and every variant, their order rotated by one each round, so
    the clock and power drift of a run falls on all of them alike and a
    variant's per-round time can be set against another's of that round.
    Returns, per variant, its (ours, theirs) seconds per round (theirs: the
    round's one baseline time, None without a baseline).  ``hosts``: one
    dict per variant, as compare's ``host`` (the baseline's list is shared)."""
    nv = len(ours_list)
    host_theirs: list = []
    _warm_up(cp, list(ours_list) if theirs is None else [*ours_list, theirs], n_sets)
    out: list[list[tuple[float, float | None]]] = [[] for _ in range(nv)]

    def timed(fn, host_list):
        return time_calls(cp, fn, n_sets, iters, host_list, timing)
    for r in range(rounds):
        tt = timed(theirs, host_theirs) if theirs is not None and r % 2 == 0 else None
        times = {}
        for j in [(r + x) % nv for x in range(nv)]:
            times[j] = timed(ours_list[j], None if hosts is None else hosts[j].setdefault("ours", []))
        if theirs is not None and r % 2 == 1:
            tt = timed(theirs, host_theirs)
        for j in range(nv):
            out[j].append((times[j], tt))
    if hosts is not None and theirs is not None:
        for h in hosts:
            h["theirs"] = host_theirs
    return out


def vs_first_fields(rounds_first, rounds_this, first_name: str) -> dict:
    """A variant row's time against the first variant's in the same rounds
    (compare_variants): per-round first time / this time, median and range
    (> 1: this variant is faster)."""
    rs = [a / b for (a, _), (b, _) in zip(rounds_first, rounds_this)]
    return {"vs_variant": first_name, "vs_first": statistics.median(rs), "vs_first_min": min(rs),
            "vs_first_max": max(rs)}


def cublas_strided_batched(cp, a, b, d):
    """A callable computing ``d = a @ b`` for 3-D a (L, M, K), b (L, K, N)
    (each batch row- or column-major, as the strides say) into a C-contiguous
    d (L, M, N) with one ``cublasGemmStridedBatchedEx`` (fp32 compute, default
    algorithm): cuBLAS's batched GEMM, which ``cupy.matmul`` on 3-D arrays does
    not reach for fp16 and rejects for bfloat16."""
    import numpy as np
    from cupy_backends.cuda.libs import cublas

    types = {"float16": 2, "bfloat16": 14}            # CUDA_R_16F, CUDA_R_16BF
    if a.ndim != 3 or b.ndim != 3 or d.ndim != 3 or not d.flags.c_contiguous:
        raise ValueError("3-D a, b and a C-contiguous 3-D d expected")
    if a.dtype != b.dtype or a.dtype != d.dtype or a.dtype.name not in types:
        raise ValueError(f"float16/bfloat16 operands of one dtype expected, got {a.dtype}, {b.dtype}, {d.dtype}")
    L, m, k = a.shape
    n = b.shape[2]
    isz = a.dtype.itemsize

    def op_ld(x):
        # cuBLAS is column-major: d^T (N x M) = b^T (N x K) . a^T (K x M); return op and leading
        # dimension that turn x's memory into x^T, and x's batch stride (elements).
        sb, sr, sc = (s // isz for s in x.strides)
        if sc == 1:
            return cublas.CUBLAS_OP_N, sr, sb
        if sr == 1:
            return cublas.CUBLAS_OP_T, sc, sb
        raise ValueError(f"operand with strides {x.strides} is neither row- nor column-major")

    opx, ldx, sx = op_ld(b)
    opy, ldy, sy = op_ld(a)
    ctype = types[a.dtype.name]
    alpha = np.ones((), np.float32)
    beta = np.zeros((), np.float32)

    def run():
        h = cp.cuda.device.get_cublas_handle()
        cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)
        cublas.gemmStridedBatchedEx(h, opx, opy, n, m, k, alpha.ctypes.data, b.data.ptr, ctype, ldx, sx,
                                    a.data.ptr, ctype, ldy, sy, beta.ctypes.data, d.data.ptr, ctype, n, m * n, L,
                                    cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
    return run


def n_sets_for(nbytes: int, l2: int) -> int:
    """Input sets to rotate so that together they are >= 3x the L2 (1..8)."""
    return max(1, min(8, math.ceil(3 * l2 / max(1, nbytes))))


def make_row(suite: str, case: str, flops: float, rounds: list[tuple[float, float | None]], n_sets: int,
             baseline: str = "cuBLAS", extra: dict | None = None, peak: float = PEAK_TFLOPS) -> dict:
    """One result row from per-round (rawcoop s, baseline s) pairs; a
    baseline time of None (rawcoop timed alone) leaves the baseline's
    columns and the ratio None.  ``peak``: the dense peak (TFLOP/s) of the
    row's input type, kept in the row."""
    alone = any(tt is None for _, tt in rounds)
    to = statistics.median(t for t, _ in rounds)
    row = {"suite": suite, "case": case, "sets": n_sets, "flops": flops, "rawcoop_ms": to * 1e3,
           "baseline_ms": None, "baseline": baseline, "rawcoop_tflops": flops / to / 1e12, "baseline_tflops": None,
           "ratio": None, "ratio_min": None, "ratio_max": None, "peak_tflops": peak}
    if not alone:
        ratios = [tt / to for to, tt in rounds]
        tt = statistics.median(t for _, t in rounds)
        row.update(baseline_ms=tt * 1e3, baseline_tflops=flops / tt / 1e12, ratio=statistics.median(ratios),
                   ratio_min=min(ratios), ratio_max=max(ratios))
    row["rawcoop_peak_frac"] = row["rawcoop_tflops"] / peak
    row["baseline_peak_frac"] = None if alone else row["baseline_tflops"] / peak
    row["rounds"] = [{"rawcoop_ms": a * 1e3, "baseline_ms": None if b is None else b * 1e3,
                      "ratio": None if b is None else b / a} for a, b in rounds]
    row.update(extra or {})
    return row


HOST_BOUND = 0.8
"""A side whose host time per call is at least this share of its measured
time per call is marked host-bound: its GPU waited for Python between calls,
so the row times the host (per-call events include it), not the kernel."""


def host_fields(row: dict, host: dict) -> dict:
    """The row's host time per call (median over rounds, microseconds) for
    each side and whether that side is host-bound (HOST_BOUND)."""
    out = {}
    for side, key in (("ours", "rawcoop"), ("theirs", "baseline")):
        times = host.get(side)
        ms = row.get(f"{key}_ms")
        if times and ms:
            us = statistics.median(times) * 1e6
            out[f"{key}_host_us"] = us
            out[f"{key}_host_bound"] = us >= HOST_BOUND * ms * 1e3
    return out


def host_bound_sides(row: dict) -> list[str]:
    """The row's host-bound sides, "rawcoop" and/or "baseline" (host_fields)."""
    return [side for side in ("rawcoop", "baseline") if row.get(side + "_host_bound")]


def peak_of(row: dict, default: float = PEAK_TFLOPS) -> float:
    """The dense peak a row's "% peak" refers to: its own ``peak_tflops``,
    else its dtype's (PEAKS) for fp8/tf32, else ``default`` (the results
    file's 16-bit peak: older files have no per-row peak)."""
    p = row.get("peak_tflops")
    if p:
        return float(p)
    dt = ROW_DTYPES.get(str(row.get("dtype")).lower())
    if dt in ("e4m3", "tf32"):
        return PEAKS[dt][0]
    return float(default)


def peak_label(dtype: str) -> str:
    return PEAKS.get(ROW_DTYPES.get(str(dtype).lower(), dtype), (None, PEAK_LABEL))[1]


# ---------------------------------------------------------------- fp8 data and compute-type switches
def e4m3_table():
    """(values, codes): the finite float8_e4m3fn values as float32 in
    ascending order and their uint8 codes, from ml_dtypes (-0 left out)."""
    import ml_dtypes
    import numpy as np
    codes = np.arange(256, dtype=np.uint8)
    vals = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    keep = np.isfinite(vals) & ~((vals == 0) & np.signbit(vals))
    order = np.argsort(vals[keep], kind="stable")
    return vals[keep][order], codes[keep][order]


def quantize_e4m3(xp, x, table=None):
    """uint8 e4m3 codes of float32 ``x`` (clipped to +-448): the nearest
    e4m3 value, ties to the even code (round to nearest even, as ml_dtypes'
    ``astype(float8_e4m3fn)``), -0 for negative values that round to zero.
    ``xp`` is numpy or cupy, so the GPU quantises with the host's table and
    the CPU tests check it bit for bit against ml_dtypes."""
    vals, codes = table if table is not None else e4m3_table()
    vals, codes = xp.asarray(vals), xp.asarray(codes)
    x = xp.clip(xp.asarray(x, dtype=xp.float32), -E4M3_MAX, E4M3_MAX)
    mids = (vals[1:] + vals[:-1]) * xp.float32(0.5)          # exact: e4m3 has 3 mantissa bits
    n = mids.shape[0]
    idx = xp.searchsorted(mids, x, side="left")              # mids[idx-1] < x <= mids[idx]
    tie = (idx < n) & (x == mids[xp.minimum(idx, n - 1)])
    up = xp.minimum(idx + 1, n)
    pick_up = tie & ((codes[idx] & 1) == 1)
    fi = xp.where(pick_up, up, idx)
    out = codes[fi]
    return xp.where((vals[fi] == 0) & xp.signbit(x), xp.uint8(0x80), out).astype(xp.uint8)


def _cupy_linalg():
    """CuPy's GEMM module when it has the compute-type switch (CuPy >= 8), else None."""
    try:
        from cupy._core import _routines_linalg as L
        L.get_compute_type, L.set_compute_type, L.COMPUTE_TYPE_TF32, L.compute_type_to_str  # noqa: B018
        return L
    except Exception:  # noqa: BLE001
        return None


_CUBLAS_COMPUTE = {"COMPUTE_TYPE_TF32": "CUBLAS_COMPUTE_32F_FAST_TF32", "COMPUTE_TYPE_DEFAULT": "CUBLAS_COMPUTE_32F",
                   "COMPUTE_TYPE_FP32": "CUBLAS_COMPUTE_32F", "COMPUTE_TYPE_PEDANTIC": "CUBLAS_COMPUTE_32F_PEDANTIC"}
"""CuPy float32 compute type -> what cupy.matmul passes to cublasGemmEx (tensordot_core_v11)."""


@contextlib.contextmanager
def cupy_f32_compute_type(cp, name: str):
    """Within the block, cupy.matmul on float32 uses CuPy compute type
    ``name`` ("TF32" or "DEFAULT"); yields what CuPy then reports, e.g.
    "COMPUTE_TYPE_TF32".  CuPy reads CUPY_TF32 once, lazily, at the first
    float32 GEMM of the process (not at import); ``set_compute_type`` is the
    switch behind it.  Without that switch: CUPY_TF32 is set (effective only
    if no float32 GEMM ran yet) and "unknown (CUPY_TF32=1 set)" is yielded."""
    L = _cupy_linalg()
    if L is None:
        old_env = os.environ.get("CUPY_TF32")
        if name == "TF32":
            os.environ["CUPY_TF32"] = "1"
        try:
            yield "unknown (CUPY_TF32=1 set)" if name == "TF32" else "unknown"
        finally:
            if old_env is None:
                os.environ.pop("CUPY_TF32", None)
            else:
                os.environ["CUPY_TF32"] = old_env
        return
    old = L.get_compute_type(cp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        L.set_compute_type(cp.float32, getattr(L, "COMPUTE_TYPE_" + name))
    try:
        yield str(L.compute_type_to_str(L.get_compute_type(cp.float32)))
    finally:
        L.set_compute_type(cp.float32, old)


@contextlib.contextmanager
def torch_tf32(torch):
    """Within the block torch's float32 matmuls may use TF32; yields the
    setting used.  torch >= 2.9 has ``torch.backends.cuda.matmul.fp32_precision``
    and raises RuntimeError when it is mixed with the legacy ``allow_tf32``,
    so the legacy flag is touched only where the new one does not exist."""
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        old = m.fp32_precision
        m.fp32_precision = "tf32"
        try:
            yield 'torch.backends.cuda.matmul.fp32_precision = "tf32"'
        finally:
            m.fp32_precision = old
    else:
        old = m.allow_tf32
        m.allow_tf32 = True
        try:
            yield "torch.backends.cuda.matmul.allow_tf32 = True"
        finally:
            m.allow_tf32 = old


def import_torch():
    """(torch, None) when torch imports and sees a GPU, else (None, why).
    Any exception counts: a previous session saw ``import torch`` raise
    RuntimeError on the H200 machine."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return None, f"import torch failed: {type(e).__name__}: {msg}"
    try:
        if not torch.cuda.is_available():
            return None, f"torch {torch.__version__} sees no CUDA GPU"
    except Exception as e:  # noqa: BLE001
        return None, f"torch.cuda.is_available() failed: {type(e).__name__}: {e}"
    return torch, None


# ---------------------------------------------------------------- summary
def normalize_row(row: dict) -> dict:
    """A row of any bench/results JSON in the current vocabulary: older files
    name the baseline ``cublas_*`` and lack ``suite``/``case``/``baseline``."""
    r = dict(row)
    r.setdefault("suite", "main")
    for new, old in (("baseline_tflops", "cublas_tflops"), ("baseline_ms", "cublas_ms")):
        if new not in r and old in r:
            r[new] = r[old]
    r.setdefault("baseline", "cuBLAS")
    if "rel_err" not in r and "rel_err_vs_cublas" in r:
        r["rel_err"] = r["rel_err_vs_cublas"]
    case = r.get("case")
    tokens = str(case).split() if case else []
    dtype = r.get("dtype") or (tokens[0] if tokens and tokens[0].lower() in ROW_DTYPES else None)
    r["dtype"] = ROW_DTYPES.get(str(dtype).lower(), dtype) if dtype else "?"
    if not case:
        case = " ".join(str(x) for x in (r["dtype"], r.get("shape", "?"), r.get("variant") or "") if x)
        r["case"] = case
    if r.get("shape"):
        label = str(r["shape"])
        if r.get("layout") and r["layout"] != "TN":
            label += f" {r['layout']}"
        if r.get("scale_mode") and r["scale_mode"] != "tensor":
            label += f" {r['scale_mode']}-scaled"
        if r.get("variant") and r["variant"] != "auto":
            label += f" {r['variant']}"
        if r.get("beta"):
            label += f" beta={r['beta']:g}"
    else:
        toks = str(case).split()
        if toks and toks[0].lower() in ROW_DTYPES:
            toks = toks[1:]
        label = " ".join(toks) or str(case)
    r["label"] = label
    return r


def geomean(values) -> float:
    vals = [float(v) for v in values]
    if not vals or any(not v > 0 for v in vals):
        return float("nan")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def geomeans(rows) -> list[dict]:
    """Geometric mean of the ratios per suite and dtype (and per baseline,
    layout, variant and beta, so that only like is averaged with like)."""
    groups: dict[tuple, list[float]] = {}
    for r in map(normalize_row, rows):
        if r.get("ratio") is None:
            continue
        variant = r.get("variant") or {True: "swap", False: "no-swap"}.get(r.get("swap"), "")
        key = (r["suite"], r["dtype"], r["baseline"], r.get("layout") or "", variant, float(r.get("beta") or 0.0))
        groups.setdefault(key, []).append(r["ratio"])
    out = []
    for (suite, dtype, baseline, layout, variant, beta), ratios in groups.items():
        out.append({"suite": suite, "dtype": dtype, "baseline": baseline, "layout": layout or None,
                    "variant": variant or None, "beta": beta, "geomean": geomean(ratios), "count": len(ratios)})
    return out


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def format_table(rows, peak: float = PEAK_TFLOPS) -> str:
    """Side-by-side markdown table per suite: rawcoop and baseline TFLOP/s,
    ratio (baseline time / rawcoop time), min-max of the per-round ratios, and
    the fraction of the dense peak of the row's input type each reaches
    (``peak`` for 16-bit rows of files without per-row peaks; PEAKS)."""
    rows = [normalize_row(r) for r in rows]
    blocks = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        rs = [r for r in rows if r["suite"] == suite]
        only_cublas = all(r["baseline"] == "cuBLAS" for r in rs)
        base = "cuBLAS" if only_cublas else "baseline"
        head = ["case", "rawcoop TFLOP/s", f"{base} TFLOP/s", "ratio", "round min-max",
                "rawcoop % peak", f"{base} % peak"]
        if not only_cublas:
            head.insert(1, "baseline")
        has_err = any(r.get("rel_err") is not None for r in rs)
        if has_err:
            head.append("rel err")
        has_vs = any(r.get("vs_first") is not None for r in rs)
        if has_vs:
            head.append("vs first variant (same rounds)")
        body = []
        for r in rs:
            rt, bt = r.get("rawcoop_tflops"), r.get("baseline_tflops")
            lo, hi = r.get("ratio_min"), r.get("ratio_max")
            pk = peak_of(r, peak)
            line = [r["case"], _fmt(rt, ".1f"), _fmt(bt, ".1f"), _fmt(r.get("ratio"), ".3f"),
                    f"{lo:.3f}-{hi:.3f}" if lo is not None and hi is not None else "-",
                    _fmt(None if rt is None else rt / pk, ".1%"), _fmt(None if bt is None else bt / pk, ".1%")]
            if not only_cublas:
                line.insert(1, r["baseline"])
            if has_err:
                line.append(_fmt(r.get("rel_err"), ".1e"))
            if has_vs:
                line.append("-" if r.get("vs_first") is None else
                            f"{r['vs_first']:.3f} [{r['vs_first_min']:.3f}-{r['vs_first_max']:.3f}]")
            body.append(line)
        widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

        def fmt_line(cells):
            return "| " + " | ".join(str(c).ljust(w) if i == 0 or (not only_cublas and i == 1) else str(c).rjust(w)
                                     for i, (c, w) in enumerate(zip(cells, widths))) + " |"
        sep = "|" + "|".join("-" * (w + 2) if i == 0 or (not only_cublas and i == 1) else "-" * (w + 1) + ":"
                             for i, w in enumerate(widths)) + "|"
        blocks.append("\n".join([f"{suite}:", fmt_line(head), sep, *(fmt_line(b) for b in body)]))
    return "\n\n".join(blocks)


def format_geomeans(rows) -> str:
    lines = []
    for g in geomeans(rows):
        what = " ".join(x for x in (g["suite"], g["dtype"], g["layout"], g["variant"] if g["variant"] != "auto"
                                    else None, f"beta={g['beta']:g}" if g["beta"] else None) if x)
        lines.append(f"  {what} vs {g['baseline']}: {g['geomean']:.3f} over {g['count']} "
                     f"case{'s' if g['count'] != 1 else ''}")
    return "geomean of ratios (baseline time / rawcoop time):\n" + "\n".join(lines) if lines else ""


def format_vs_first(rows) -> str:
    """Per suite, dtype, baseline and variant: the geomean of the rows'
    ``vs_first`` (a variant against the first variant in the same rounds)
    and on how many rows it was faster."""
    groups: dict[tuple, list[float]] = {}
    for r in map(normalize_row, rows):
        if r.get("vs_first") is not None:
            key = (r["suite"], r["dtype"], r["baseline"], r.get("variant") or "", r.get("vs_variant") or "")
            groups.setdefault(key, []).append(r["vs_first"])
    lines = [f"  {suite} {dtype} {variant} vs {first} ({baseline} rows): {geomean(v):.3f} over {len(v)} "
             f"case{'s' if len(v) != 1 else ''}, faster on {sum(x > 1 for x in v)}"
             for (suite, dtype, baseline, variant, first), v in groups.items()]
    return ("variants against the first variant, same rounds (first time / variant time, > 1: the variant is "
            "faster):\n" + "\n".join(lines)) if lines else ""


def format_peaks(rows, peak: float = PEAK_TFLOPS) -> str:
    """What the "% peak" columns refer to, for the input types in ``rows``."""
    seen: dict = {}
    for r in map(normalize_row, rows):
        dt = r["dtype"] if r["dtype"] in ("e4m3", "tf32") else "16-bit"
        seen.setdefault(dt, (peak_of(r, peak), peak_label(r["dtype"]) if dt != "16-bit" else PEAK_LABEL))
    if not seen:
        seen["16-bit"] = (peak, PEAK_LABEL)
    order = {"16-bit": 0, "e4m3": 1, "tf32": 2}
    parts = [f"{p:g} TFLOP/s ({label})" + ("" if dt == "16-bit" or len(seen) == 1 else f" for {dt}")
             for dt, (p, label) in sorted(seen.items(), key=lambda kv: order.get(kv[0], 3))]
    return "% peak of " + ", ".join(parts)


def format_report(results: dict) -> str:
    """The table(s), the geomeans, and the legend line, for a results dict."""
    peak = float(results.get("peak_tflops") or PEAK_TFLOPS)
    rows = results.get("rows") or []
    legend = ("ratio = baseline time / rawcoop time (> 1: rawcoop faster), median over rounds; "
              + format_peaks(rows, peak))
    if any(normalize_row(r)["suite"] == "fp8" for r in rows):
        legend += ("\nfp8 rel err: rawcoop's bf16 output vs the row's baseline output (cuBLASLt through "
                   "torch._scaled_mm, same bytes and scales), relative Frobenius norm")
    if any(r.get("baseline") == NO_BASELINE for r in rows):
        legend += (f"\nbaseline {NO_BASELINE}: rawcoop timed alone (the row's baseline_skipped says why); its rel err "
                   "is vs an fp32 GEMM of the same (dequantised) inputs")
    bound = [f"{normalize_row(r)['case']} ({', '.join(host_bound_sides(r))})" for r in rows if host_bound_sides(r)]
    if bound:
        legend += ("\nhost-bound (host time per call >= {:.0%} of the measured time; the row times Python, not the "
                   "kernel): ".format(HOST_BOUND) + "; ".join(bound))
    parts = [format_table(rows, peak), format_geomeans(rows), format_vs_first(rows), legend]
    return "\n\n".join(p for p in parts if p)


# ---------------------------------------------------------------- environment
def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


_SMI_FIELDS = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "power.draw", "power.limit", "temperature.gpu")


def nvidia_smi(gpu_id: str | None = None, timeout: float = 10.0) -> dict | None:
    """Driver version, clocks (MHz), power (W) and temperature of one GPU
    from ``nvidia-smi`` (None when it is not installed; {"error": ...} when it fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    cmd = [exe, f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader,nounits", "-i", gpu_id or "0"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    if p.returncode != 0 or not p.stdout.strip():
        return {"error": (p.stderr or p.stdout).strip()[:300] or f"exit {p.returncode}"}
    values = [v.strip() for v in p.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(_SMI_FIELDS, values))


def _git_revision() -> str | None:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("+dirty" if dirty else "")) or None


def environment(ordinal: int = 0) -> dict:
    """What the numbers depend on: GPU, driver, CUDA/CuPy/NVRTC versions, clocks."""
    import platform

    env: dict = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "python": platform.python_version(), "platform": platform.platform(), "argv": sys.argv[:]}

    def attempt(key, fn):
        try:
            env[key] = fn()
        except Exception as e:  # noqa: BLE001 - the environment report never stops a run
            env[key] = f"unavailable ({type(e).__name__}: {e})"

    import rawcoop
    env["rawcoop"] = rawcoop.__version__
    env["git"] = _git_revision()

    def bindings():
        from rawcoop._cuda import bindings_version
        return bindings_version()

    def nvrtc():
        from rawcoop.compiler import nvrtc_version
        return ".".join(map(str, nvrtc_version()))

    def cupy_version():
        import cupy
        return cupy.__version__

    def cuda_runtime():
        import cupy
        return _cuda_version(cupy.cuda.runtime.runtimeGetVersion())

    def cuda_driver():
        import cupy
        return _cuda_version(cupy.cuda.runtime.driverGetVersion())

    def numpy_version():
        import numpy
        return numpy.__version__

    def gpu():
        from rawcoop import device
        i = device.info(ordinal)
        return {"ordinal": ordinal, "name": i.name, "cc": f"{i.cc[0]}.{i.cc[1]}", "sm_count": i.sm_count,
                "l2_bytes": i.l2_bytes}

    attempt("cuda_bindings", bindings)
    attempt("nvrtc", nvrtc)
    attempt("cupy", cupy_version)
    attempt("cuda_runtime", cuda_runtime)
    attempt("driver_cuda_version", cuda_driver)
    attempt("numpy", numpy_version)
    attempt("gpu", gpu)
    env["nvidia_smi_start"] = smi = nvidia_smi(_bus_id(ordinal))
    env["driver"] = (smi or {}).get("driver_version")
    return env


def _bus_id(ordinal: int) -> str | None:
    try:
        import cupy
        return cupy.cuda.Device(ordinal).pci_bus_id
    except Exception:  # noqa: BLE001
        return None


def gpu_problem(ordinal: int = 0) -> str | None:
    """None when device ``ordinal`` is a Hopper GPU CuPy can use; else why not."""
    try:
        from rawcoop import device
    except Exception as e:  # noqa: BLE001
        return f"the CUDA Python bindings could not be loaded ({type(e).__name__}: {e})"
    try:
        n = device.gpu_count()
    except Exception as e:  # noqa: BLE001
        return f"the CUDA driver could not be queried ({type(e).__name__}: {e})"
    if n == 0:
        return ("no NVIDIA GPU is visible (no CUDA driver, no device, or CUDA_VISIBLE_DEVICES hides them); "
                "the benchmark needs a Hopper (sm_90) GPU such as an H100 or H200")
    if n <= ordinal:
        return f"GPU {ordinal} does not exist ({n} visible)"
    i = device.info(ordinal)
    if i.cc != (9, 0):
        return (f"GPU {ordinal} is {i.name} (sm_{i.cc[0]}{i.cc[1]}); rawcoop's kernels need a Hopper (sm_90) GPU "
                "(select one with CUDA_VISIBLE_DEVICES)")
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001
        return f"CuPy cannot use the GPU ({type(e).__name__}: {e})"
    return None


# ---------------------------------------------------------------- the suites
class Bench:
    """Runs the suites on GPU 0 (CuPy's current device) and collects rows."""

    def __init__(self, args, on_row=None):
        import cupy as cp
        import ml_dtypes
        import numpy as np

        from rawcoop import device
        self.cp, self.np = cp, np
        self.args = args
        self.info = device.info(cp.cuda.Device().id)
        self.dtypes = {"bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16)}
        self.rows: list[dict] = []
        self.on_row = on_row
        self._axpby = None
        self._torch = None
        self._e4m3 = None

    def rand(self, shape, dt, seed):
        rs = self.cp.random.RandomState(seed)
        return rs.standard_normal(shape, dtype=self.cp.float32).astype(dt)

    def record(self, suite, label, flops, ours, theirs, n_sets, baseline="cuBLAS", extra=None, peak=PEAK_TFLOPS):
        """Time ``ours`` against ``theirs`` (None: ours alone) and keep the row."""
        host: dict = {}
        rounds = compare(self.cp, ours, theirs, n_sets, self.args.rounds, self.args.iters, host,
                         getattr(self.args, "timing", "calls"))
        return self._keep(make_row(suite, label, flops, rounds, n_sets, baseline, extra, peak=peak), host, baseline)

    def record_variants(self, suite, variants, flops, theirs, n_sets, baseline="cuBLAS", peak=PEAK_TFLOPS):
        """``variants``: (name, label, ours, extra) per --variants entry.  One
        entry: :meth:`record`.  Several: all timed in the same rounds
        (:func:`compare_variants`), each row also carrying its time against
        the first variant's of the same rounds (``vs_first``)."""
        if len(variants) == 1:
            _, label, ours, extra = variants[0]
            return [self.record(suite, label, flops, ours, theirs, n_sets, baseline=baseline, extra=extra,
                                peak=peak)]
        hosts = [{} for _ in variants]
        per = compare_variants(self.cp, [v[2] for v in variants], theirs, n_sets, self.args.rounds,
                               self.args.iters, hosts, getattr(self.args, "timing", "calls"))
        rows = []
        for j, ((name, label, _, extra), rounds, host) in enumerate(zip(variants, per, hosts)):
            row = make_row(suite, label, flops, rounds, n_sets, baseline, extra, peak=peak)
            if j:
                row.update(vs_first_fields(per[0], rounds, variants[0][0]))
            rows.append(self._keep(row, host, baseline))
        return rows

    def _keep(self, row, host, baseline):
        row.update(host_fields(row, host))
        self.rows.append(row)
        if row["ratio"] is None:
            vs = f"  (no baseline: {row.get('baseline_skipped', 'none')})"
            times = [r["rawcoop_ms"] for r in row.get("rounds", []) if r.get("rawcoop_ms")]
            if len(times) > 1:     # the spread shows clock modes the median hides (fp8 block-scaled: bimodal)
                vs += f"  rounds {row['flops'] / max(times) / 1e9:.1f}-{row['flops'] / min(times) / 1e9:.1f} TF/s"
        else:
            vs = (f"  {baseline} {row['baseline_tflops']:6.1f}  ratio {row['ratio']:.3f} "
                  f"[{row['ratio_min']:.3f}-{row['ratio_max']:.3f}]")
        if row.get("vs_first") is not None:
            vs += f"  vs {row['vs_variant']} {row['vs_first']:.3f} [{row['vs_first_min']:.3f}-{row['vs_first_max']:.3f}]"
        print(f"{row['suite']:8s} {row['case']:38s} rawcoop {row['rawcoop_tflops']:6.1f} TF/s "
              f"({row['rawcoop_peak_frac']:5.1%})"
              + vs + (f"  err {row['rel_err']:.1e}" if row.get("rel_err") is not None else "")
              + "".join(f"  HOST-BOUND {side} ({row[side + '_host_us']:.1f} us/call on the host)"
                        for side in host_bound_sides(row)), flush=True)
        if self.on_row is not None:
            self.on_row(row)
        return row

    def rel_err(self, d, ref):
        cp = self.cp
        d, ref = d.astype(cp.float32), ref.astype(cp.float32)
        den = float(cp.linalg.norm(ref))
        return float(cp.linalg.norm(d - ref)) / (den or 1.0)

    def free(self):
        self.cp.get_default_memory_pool().free_all_blocks()

    def variant_rows(self, variants, out, label, ref, extra):
        """record_variants' entries for the fp8 and tf32 suites' ``variants``
        ((name, gemm keywords, fn(i))): each runs once on set 0 into ``out``
        (its set-0 output), NaN-filled first so that it is that variant's own
        output, never the previous one's; ``extra`` plus the variant's name and
        its rel_err against ``ref``."""
        rows = []
        for v, _, ours in variants:
            out.fill(float("nan"))
            ours(0)
            rows.append((v, _variant_label(label, v), ours, dict(extra, variant=v, rel_err=self.rel_err(out, ref))))
        return rows

    def axpby(self):
        if self._axpby is None:
            self._axpby = self.cp.ElementwiseKernel("T x, T c, float32 alpha, float32 beta", "T d",
                                                    "d = (T)(alpha * (float)x + beta * (float)c)", "rc_axpby")
        return self._axpby

    def operand_a(self, shape, layout, dt, seed):
        """A (L, M, K) or (M, K): row-major for T, a transposed view of (K, M) for N."""
        m, k, L = shape.m, shape.k, shape.batch
        lead = (L,) if L > 1 else ()
        if layout[0] == "T":
            return self.rand(lead + (m, k), dt, seed)
        return self.cp.swapaxes(self.rand(lead + (k, m), dt, seed), -1, -2)

    def operand_b(self, shape, layout, dt, seed):
        """B (L, K, N) or (K, N): a transposed view of (N, K) for N, row-major for T."""
        n, k, L = shape.n, shape.k, shape.batch
        lead = (L,) if L > 1 else ()
        if layout[1] == "N":
            return self.cp.swapaxes(self.rand(lead + (n, k), dt, seed), -1, -2)
        return self.rand(lead + (k, n), dt, seed)

    # ------------------------------------------------------------ suites
    def main(self):
        import rawcoop
        cp = self.cp
        beta = float(getattr(self.args, "beta", 0.0) or 0.0)
        for dname in self.args.dtypes:
            dt = self.dtypes[dname]
            for shape in self.args.shapes:
                m, n, k, L = shape
                for layout in self.args.layouts:
                    per_set = L * (m * k + n * k + m * n * (2 if beta else 1)) * 2
                    sets = n_sets_for(per_set, self.info.l2_bytes)
                    A = [self.operand_a(shape, layout, dt, 10 * i) for i in range(sets)]
                    B = [self.operand_b(shape, layout, dt, 10 * i + 1) for i in range(sets)]
                    out_shape = (L, m, n) if L > 1 else (m, n)
                    D = [cp.empty(out_shape, dt) for _ in range(sets)]
                    out32 = getattr(self.args, "out_dtype", None) == "float32"
                    # --out-dtype float32: rawcoop writes its own fp32 outputs (without C: see run_bench)
                    D_ours = [cp.empty(out_shape, cp.float32) for _ in range(sets)] if out32 else D
                    C = [self.rand(out_shape, dt, 10 * i + 2) for i in range(sets)] if beta else None
                    T = cp.empty(out_shape, dt) if beta else None

                    batched = base_batched = None
                    if L > 1:
                        try:
                            batched = [cublas_strided_batched(cp, a, b, d) for a, b, d in
                                       zip(A, B, D if T is None else [T] * sets)]
                            base_batched = "cuBLAS batched"
                        except Exception as e:  # noqa: BLE001 - fall back to one 2-D call per batch
                            print(f"main     (cublasGemmStridedBatchedEx unavailable: {type(e).__name__}: {e}; "
                                  f"baseline = {L} cupy.matmul 2-D calls)", flush=True)
                            base_batched = f"cuBLASx{L}"

                    def matmul(i, out):
                        if batched is not None:     # one cublasGemmStridedBatchedEx
                            batched[i]()
                        elif L > 1:                 # L cuBLAS GEMMs through CuPy's 2-D path
                            for j in range(L):
                                cp.matmul(A[i][j], B[i][j], out=out[j])
                        else:
                            cp.matmul(A[i], B[i], out=out)

                    if beta:
                        axpby = self.axpby()

                        def theirs(i):
                            matmul(i, T)
                            axpby(T, C[i], cp.float32(1.0), cp.float32(beta), D[i])
                        base = "cuBLAS+ew"
                    else:
                        def theirs(i):
                            matmul(i, D[i])
                        base = "cuBLAS"
                    if L > 1:
                        base = base.replace("cuBLAS", base_batched)
                    theirs(0)
                    ref = D[0].copy()
                    variants = []
                    for vname, kw in self.args.variants:
                        if out32:   # gemm's out= must carry the out_dtype asked for
                            kw = dict(kw, out_dtype="float32")
                        ckw = dict(c=C[0], beta=beta) if beta else {}
                        D_ours[0].fill(float("nan"))     # each variant's own output, never the previous one's
                        err = self.rel_err(rawcoop.gemm(A[0], B[0], out=D_ours[0], **ckw, **kw), ref)
                        label = (_variant_label(f"{dname} {shape} {layout}", vname) + (f" beta={beta:g}" if beta else "")
                                 + (" out=fp32" if out32 else ""))

                        def ours(i, kw=kw):
                            if beta:
                                return rawcoop.gemm(A[i], B[i], c=C[i], beta=beta, out=D_ours[i], **kw)
                            return rawcoop.gemm(A[i], B[i], out=D_ours[i], **kw)
                        variants.append((vname, label, ours,
                                         {"dtype": dname, "shape": str(shape), "layout": layout, "batch": L,
                                          "beta": beta, "variant": vname, "rel_err": err,
                                          "out_dtype": "float32" if out32 else dname}))
                    self.record_variants("main", variants, shape.flops, theirs, sets, baseline=base)
                    del A, B, C, D, D_ours, T, ref, batched
                    self.free()

    def layouts(self):
        import rawcoop
        cp = self.cp
        dt = self.dtypes["bf16"]
        shape = Shape(8192, 8192, 8192)
        sets = n_sets_for(3 * shape.m * shape.n * 2, self.info.l2_bytes)
        for layout in LAYOUTS:
            A = [self.operand_a(shape, layout, dt, i) for i in range(sets)]
            B = [self.operand_b(shape, layout, dt, 7 + i) for i in range(sets)]
            D = [cp.empty((shape.m, shape.n), dt) for _ in range(sets)]
            err = self.rel_err(rawcoop.gemm(A[0], B[0]), cp.matmul(A[0], B[0]))
            self.record("layouts", f"bf16 8192^3 {layout}", shape.flops,
                        lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), lambda i: cp.matmul(A[i], B[i], out=D[i]),
                        sets, extra={"dtype": "bf16", "layout": layout, "rel_err": err})
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
        extra = {"dtype": "fp16", "batch": L}
        self.record("batched", "fp16 16 x 2048^3 vs cupy.matmul 3-D", flops,
                    lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), lambda i: cp.matmul(A[i], B[i], out=D[i]),
                    sets, extra=dict(extra, rel_err=err))

        def loop(i):                          # cuBLAS through CuPy's 2-D path, one GEMM per batch
            for j in range(L):
                cp.matmul(A[i][j], B[i][j], out=D[i][j])
        self.record("batched", "fp16 16 x 2048^3 vs 16 cupy 2-D calls", flops,
                    lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), loop, sets, baseline="cuBLASx16", extra=extra)
        try:
            import torch
        except Exception as e:  # noqa: BLE001 - a missing or broken torch only drops this baseline
            torch = None
            print(f"batched  (no torch.bmm baseline: import torch failed: {type(e).__name__})", flush=True)
        if torch is not None and torch.cuda.is_available():
            TA = [torch.as_tensor(a, device="cuda") for a in A]
            TB = [torch.as_tensor(b, device="cuda") for b in B]
            TD = [torch.as_tensor(d, device="cuda") for d in D]
            self.record("batched", "fp16 16 x 2048^3 vs torch.bmm", flops,
                        lambda i: rawcoop.gemm(A[i], B[i], out=D[i]),
                        lambda i: torch.bmm(TA[i], TB[i], out=TD[i]), sets, baseline="torch.bmm", extra=extra)
        self.free()

    def epilogue(self):
        import rawcoop
        cp = self.cp
        axpby = self.axpby()
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
                        sets, baseline="cuBLAS+ew", extra={"dtype": "fp16", "rel_err": err})

            def theirs_bg(i):
                cp.matmul(A[i], BT[i].T, out=T)
                bias_gelu(T, bias, n, D[i])

            theirs_bg(0)
            ref[...] = D[0]
            err = self.rel_err(rawcoop.gemm(A[0], BT[0].T, bias=bias, activation="gelu"), ref)
            self.record("epilogue", f"fp16 {m}x{n}x{k} gelu(AB+bias)", 2.0 * m * n * k,
                        lambda i: rawcoop.gemm(A[i], BT[i].T, bias=bias, activation="gelu", out=D[i]), theirs_bg,
                        sets, baseline="cuBLAS+ew", extra={"dtype": "fp16", "rel_err": err})
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
                        baseline="no-pdl", extra={"dtype": "bf16"})
            self.record("pdl", f"bf16 8x{size}^3 chain pdl vs cuBLAS", flops, chain(True), chain_cublas, 1,
                        extra={"dtype": "bf16"})
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
                            extra={"dtype": "bf16", "m": m, "swap": swap, "rel_err": err})
            del A, BT, D
            self.free()


    # ------------------------------------------------------------ issue 6: fp8 and tf32
    def torch(self):
        """(torch, None) or (None, why), imported once."""
        if self._torch is None:
            self._torch = import_torch()
        return self._torch

    def rel_err64(self, d, ref64):
        """Relative Frobenius error of ``d`` against a float64 reference."""
        cp = self.cp
        den = float(cp.linalg.norm(ref64))
        return float(cp.linalg.norm(d.astype(cp.float64) - ref64)) / (den or 1.0)

    def fp8_operand(self, rows: int, cols: int, seed: int):
        """(uint8 e4m3 codes, row-major (rows, cols); dequantisation scale as
        a float32-representable float): normal samples x, scaled by
        448 / max|x| and rounded to e4m3 on the GPU (quantize_e4m3, ml_dtypes'
        table), so that scale * value ~ x."""
        cp, np = self.cp, self.np
        if self._e4m3 is None:
            vals, codes = e4m3_table()
            self._e4m3 = (cp.asarray(vals), cp.asarray(codes))
        x = cp.random.RandomState(seed).standard_normal((rows, cols), dtype=cp.float32)
        amax = float(cp.abs(x).max())
        mul = cp.float32(E4M3_MAX / amax)
        q = cp.empty((rows, cols), dtype=cp.uint8)
        xf, qf = x.ravel(), q.ravel()
        step = 1 << 24                                   # bounded temporaries (searchsorted's int64 indices)
        for lo in range(0, xf.size, step):
            qf[lo:lo + step] = quantize_e4m3(cp, xf[lo:lo + step] * mul, self._e4m3)
        del x, xf
        return q, float(np.float32(amax / E4M3_MAX))

    def e4m3_values(self):
        """The float32 value of every e4m3 code (index with int32 codes): ml_dtypes' table on the GPU."""
        import ml_dtypes
        np = self.np
        return self.cp.asarray(np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32))

    def _scaled_mm(self, torch, TA, TB, TSA, TSB, TD, fast: bool):
        """(fn(i), call text, writes_out, None) timing cuBLASLt through
        torch._scaled_mm on set i, or (None, None, False, why) when torch
        refuses.  fn writes into TD[i] (bf16 views of CuPy memory) when
        ``out=`` is accepted (writes_out), else returns torch's output."""
        kw = dict(out_dtype=torch.bfloat16, use_fast_accum=fast)
        text = (f"torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, "
                f"use_fast_accum={fast}")
        try:
            torch._scaled_mm(TA[0], TB[0], scale_a=TSA[0], scale_b=TSB[0], out=TD[0], **kw)

            def with_out(i):
                return torch._scaled_mm(TA[i], TB[i], scale_a=TSA[i], scale_b=TSB[i], out=TD[i], **kw)
            return with_out, text + ", out=d)", True, None
        except (TypeError, RuntimeError, ValueError):
            pass
        try:
            torch._scaled_mm(TA[0], TB[0], scale_a=TSA[0], scale_b=TSB[0], **kw)
        except (TypeError, RuntimeError, ValueError) as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return None, None, False, f"torch._scaled_mm refused: {type(e).__name__}: {msg}"

        def no_out(i):
            r = torch._scaled_mm(TA[i], TB[i], scale_a=TSA[i], scale_b=TSB[i], **kw)
            return r[0] if isinstance(r, tuple) else r       # torch < 2.4: (out, amax)
        return no_out, text + ")  [out= refused: torch allocates the output]", False, None

    def fp8(self):
        """issue 6: e4m3 x e4m3 with per-tensor device scales, bf16 out, TN,
        vs cuBLASLt through torch._scaled_mm on the same bytes and scales."""
        import rawcoop
        cp = self.cp
        bf16 = self.dtypes["bf16"]
        torch, why = self.torch()
        if torch is not None and not (hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")):
            torch, why = None, f"torch {torch.__version__} has no _scaled_mm or float8_e4m3fn"
        if torch is None:
            print(f"fp8      SKIP the cuBLASLt baseline ({why}): timing rawcoop alone", flush=True)
        else:
            print(f"fp8      baseline: cuBLASLt through torch._scaled_mm (torch {torch.__version__}), "
                  "use_fast_accum False and True", flush=True)
        lut = self.e4m3_values()
        call = ('rawcoop.gemm(a, bt.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb, '
                'out_dtype=bfloat16, out=d)')
        for shape in self.args.fp8_shapes:
            m, n, k = shape.m, shape.n, shape.k
            sets = n_sets_for(m * k + n * k + 2 * m * n, self.info.l2_bytes)
            A, BT, sa, sb = [], [], [], []
            for i in range(sets):
                a, x = self.fp8_operand(m, k, 100 + 10 * i)
                bt, y = self.fp8_operand(n, k, 101 + 10 * i)
                A.append(a)
                BT.append(bt)
                sa.append(x)
                sb.append(y)
            SA = [cp.asarray([v], dtype=cp.float32) for v in sa]
            SB = [cp.asarray([v], dtype=cp.float32) for v in sb]
            D = [cp.empty((m, n), dtype=bf16) for _ in range(sets)]

            def make_ours(kw):
                def ours(i):
                    return rawcoop.gemm(A[i], BT[i].T, a_format="e4m3", b_format="e4m3", scale_a=SA[i],
                                        scale_b=SB[i], out_dtype=bf16, out=D[i], **kw)
                return ours
            variants = [(v, kw, make_ours(kw)) for v, kw in self.args.variants]
            ours = variants[0][2]
            ours(0)
            with cupy_f32_compute_type(cp, "DEFAULT"):       # full fp32 (no TF32) for the reference
                ref32 = cp.matmul(lut[A[0].astype(cp.int32)], lut[BT[0].astype(cp.int32)].T)
            ref32 *= cp.float32(sa[0] * sb[0])
            label = f"e4m3 {shape} TN"
            common = {"dtype": "e4m3", "shape": str(shape), "layout": "TN", "batch": 1, "out_dtype": "bf16",
                      "scale_a": sa[0], "scale_b": sb[0], "rawcoop_call": call,
                      "rawcoop_err_fp32": self.rel_err(D[0], ref32)}
            timed = False
            skipped = why
            if torch is not None:
                try:
                    TA = [torch.as_tensor(a, device="cuda").view(torch.float8_e4m3fn) for a in A]
                    TB = [torch.as_tensor(bt, device="cuda").view(torch.float8_e4m3fn).t() for bt in BT]
                    TSA = [torch.tensor(v, dtype=torch.float32, device="cuda") for v in sa]
                    TSB = [torch.tensor(v, dtype=torch.float32, device="cuda") for v in sb]
                    OUT = [cp.empty((m, n), dtype=bf16) for _ in range(sets)]
                    TD = [torch.as_tensor(o.view(cp.int16), device="cuda").view(torch.bfloat16) for o in OUT]
                    for fast, bname in ((False, BASE_SCALED_MM), (True, BASE_SCALED_MM_FAST)):
                        fn, text, writes_out, refused = self._scaled_mm(torch, TA, TB, TSA, TSB, TD, fast)
                        if fn is None:
                            skipped = refused
                            print(f"fp8      {label}: {refused}", flush=True)
                            continue
                        r0 = fn(0)
                        ref = OUT[0] if writes_out else cp.asarray(r0.view(torch.int16)).view(bf16)
                        extra = dict(common, rel_err=self.rel_err(D[0], ref), err_vs=bname, baseline_call=text,
                                     use_fast_accum=fast, baseline_err_fp32=self.rel_err(ref, ref32),
                                     torch=torch.__version__)
                        rows = self.variant_rows(variants, D[0], label, ref, extra)
                        self.record_variants("fp8", rows, shape.flops, fn, sets, baseline=bname, peak=PEAK_FP8_TFLOPS)
                        timed = True
                    del TA, TB, TSA, TSB, TD, OUT
                except Exception as e:  # noqa: BLE001 - a broken torch drops the baseline, not the suite
                    skipped = f"torch baseline failed: {type(e).__name__}: {e}"
                    print(f"fp8      {label}: {skipped}", flush=True)
            if not timed:
                rows = self.variant_rows(variants, D[0], label, ref32,
                                         dict(common, err_vs="fp32 GEMM of the dequantised inputs",
                                              baseline_skipped=skipped))
                self.record_variants("fp8", rows, shape.flops, None, sets, baseline=NO_BASELINE,
                                     peak=PEAK_FP8_TFLOPS)
            del A, BT, SA, SB, D, ref32
            self.free()
            if torch is not None:
                with contextlib.suppress(Exception):
                    torch.cuda.empty_cache()
        if getattr(self.args, "fp8_block", False):
            self.fp8_block(lut)

    def fp8_block(self, lut):
        """--fp8-block: e4m3 x e4m3 with block scales (scale_mode="block"),
        bf16 out, TN, rawcoop alone; the data are fp8_operand's codes, the
        block scales 2^U(-2, 2)."""
        import rawcoop
        cp = self.cp
        bf16 = self.dtypes["bf16"]
        call = ('rawcoop.gemm(a, bt.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb, '
                'scale_mode="block", out_dtype=bfloat16, out=d)  [sa = rawcoop.mn_major_scales(...)]')
        for shape in self.args.fp8_block_shapes:
            m, n, k = shape.m, shape.n, shape.k
            kb, nb = -(-k // 128), -(-n // 128)
            sets = n_sets_for(m * k + n * k + 2 * m * n, self.info.l2_bytes)
            A, BT, SA, SB = [], [], [], []
            for i in range(sets):
                A.append(self.fp8_operand(m, k, 200 + 10 * i)[0])
                BT.append(self.fp8_operand(n, k, 201 + 10 * i)[0])
                rs = cp.random.RandomState(300 + i)
                SA.append(rawcoop.mn_major_scales(cp.exp2(rs.uniform(-2, 2, (m, kb))).astype(cp.float32)))
                SB.append(cp.exp2(rs.uniform(-2, 2, (nb, kb))).astype(cp.float32))
            D = [cp.empty((m, n), dtype=bf16) for _ in range(sets)]

            def make_ours(kw):
                def ours(i):
                    return rawcoop.gemm(A[i], BT[i].T, a_format="e4m3", b_format="e4m3", scale_a=SA[i],
                                        scale_b=SB[i], scale_mode="block", out_dtype=bf16, out=D[i], **kw)
                return ours
            variants = [(v, kw, make_ours(kw)) for v, kw in self.args.variants]
            variants[0][2](0)
            ad = lut[A[0].astype(cp.int32)] * cp.repeat(SA[0], 128, axis=1)[:, :k]
            bd = lut[BT[0].astype(cp.int32)] * cp.repeat(cp.repeat(SB[0], 128, axis=0)[:n], 128, axis=1)[:, :k]
            with cupy_f32_compute_type(cp, "DEFAULT"):       # full fp32 (no TF32) for the reference
                ref32 = cp.matmul(ad, bd.T)
            del ad, bd
            rows = self.variant_rows(variants, D[0], f"e4m3 block {shape} TN", ref32,
                                     {"dtype": "e4m3", "shape": str(shape), "layout": "TN", "batch": 1,
                                      "out_dtype": "bf16", "scale_mode": "block", "rawcoop_call": call,
                                      "err_vs": "fp32 GEMM of the dequantised inputs",
                                      "baseline_skipped": "no block-scaled baseline in this benchmark (rawcoop alone)"})
            for row in rows:
                row[3]["rawcoop_err_fp32"] = row[3]["rel_err"]    # (the reference is that fp32 GEMM)
            self.record_variants("fp8", rows, shape.flops, None, sets, baseline=NO_BASELINE, peak=PEAK_FP8_TFLOPS)
            del A, BT, SA, SB, D, ref32
            self.free()

    def tf32(self):
        """issue 6: float32 in/out with precision="tf32", TN, vs cupy.matmul
        with CuPy's float32 compute type TF32 and torch.matmul with TF32 on."""
        import rawcoop
        cp = self.cp
        torch, why = self.torch()
        if torch is None:
            print(f"tf32     SKIP the torch baseline ({why})", flush=True)
        told = False
        for shape in self.args.tf32_shapes:
            m, n, k = shape.m, shape.n, shape.k
            sets = n_sets_for(4 * (m * k + n * k + m * n), self.info.l2_bytes)
            A = [self.rand((m, k), cp.float32, 200 + 10 * i) for i in range(sets)]
            BT = [self.rand((n, k), cp.float32, 201 + 10 * i) for i in range(sets)]
            D = [cp.empty((m, n), dtype=cp.float32) for _ in range(sets)]

            def make_ours(kw):
                def ours(i):
                    return rawcoop.gemm(A[i], BT[i].T, precision="tf32", out=D[i], **kw)
                return ours
            variants = [(v, kw, make_ours(kw)) for v, kw in self.args.variants]
            d0 = rawcoop.gemm(A[0], BT[0].T, precision="tf32", **variants[0][1])
            ref64 = cp.matmul(A[0].astype(cp.float64), BT[0].astype(cp.float64).T)
            label = f"tf32 {shape} TN"
            common = {"dtype": "tf32", "shape": str(shape), "layout": "TN", "batch": 1, "out_dtype": "float32",
                      "rawcoop_err_fp64": self.rel_err64(d0, ref64)}
            with cupy_f32_compute_type(cp, "TF32") as ctype:
                cublas_ct = _CUBLAS_COMPUTE.get(ctype, "?")
                if not told:
                    print(f"tf32     cupy.matmul on float32: CuPy compute type {ctype} -> cublasGemmEx compute "
                          f"{cublas_ct}", flush=True)
                ref = cp.matmul(A[0], BT[0].T)
                e64 = self.rel_err64(ref, ref64)
                if e64 < 5e-5:
                    print(f"tf32     WARNING {label}: cupy.matmul's error vs float64 is {e64:.1e}, as full fp32 "
                          "would give; TF32 gives ~1e-4..1e-3.  The cuBLAS baseline did NOT run in TF32.",
                          file=sys.stderr, flush=True)
                rows = self.variant_rows(variants, D[0], label, ref,
                                         dict(common, err_vs="cupy.matmul", cupy_compute_type=ctype,
                                              cublas_compute_type=cublas_ct, baseline_err_fp64=e64,
                                              baseline_tf32_evident=e64 >= 5e-5))
                self.record_variants("tf32", rows, shape.flops, lambda i: cp.matmul(A[i], BT[i].T, out=D[i]), sets,
                                     baseline=BASE_CUBLAS_TF32 if ctype == "COMPUTE_TYPE_TF32" else f"cuBLAS {ctype}",
                                     peak=PEAK_TF32_TFLOPS)
                del ref
            if torch is not None:
                try:
                    TA = [torch.as_tensor(a, device="cuda") for a in A]
                    TB = [torch.as_tensor(bt, device="cuda").t() for bt in BT]
                    TD = [torch.as_tensor(d, device="cuda") for d in D]
                    with torch_tf32(torch) as setting:
                        if not told:
                            print(f"tf32     torch.matmul on float32 (torch {torch.__version__}) with {setting}",
                                  flush=True)
                        ref = cp.asarray(torch.matmul(TA[0], TB[0]))
                        e64 = self.rel_err64(ref, ref64)
                        if e64 < 5e-5:
                            print(f"tf32     WARNING {label}: torch.matmul's error vs float64 is {e64:.1e}: not TF32",
                                  file=sys.stderr, flush=True)
                        rows = self.variant_rows(variants, D[0], label, ref,
                                                 dict(common, err_vs="torch.matmul", torch_setting=setting,
                                                      torch=torch.__version__, baseline_err_fp64=e64,
                                                      baseline_tf32_evident=e64 >= 5e-5))
                        self.record_variants("tf32", rows, shape.flops, lambda i: torch.matmul(TA[i], TB[i], out=TD[i]),
                                             sets, baseline=BASE_TORCH_TF32, peak=PEAK_TF32_TFLOPS)
                    del TA, TB, TD, ref
                except Exception as e:  # noqa: BLE001 - a broken torch drops this baseline only
                    print(f"tf32     torch baseline failed on {label}: {type(e).__name__}: {e}", flush=True)
            told = True
            del A, BT, D, d0, ref64
            self.free()

# ---------------------------------------------------------------- results files
def settings_of(args) -> dict:
    return {"suites": list(args.suite), "dtypes": list(args.dtypes), "shapes": [str(s) for s in args.shapes],
            "layouts": list(args.layouts), "beta": args.beta, "variants": [v for v, _ in args.variants],
            "fp8_shapes": [str(s) for s in getattr(args, "fp8_shapes", None) or []],
            "fp8_block_shapes": ([str(s) for s in getattr(args, "fp8_block_shapes", None) or []]
                                 if getattr(args, "fp8_block", False) else []),
            "tf32_shapes": [str(s) for s in getattr(args, "tf32_shapes", None) or []],
            "rounds": args.rounds, "iters": args.iters, "timing": getattr(args, "timing", "calls"),
            "out_dtype": getattr(args, "out_dtype", None)}


def write_json(path, results: dict | list) -> None:
    """Atomically (write then rename), so a reader never sees half a file
    (the bench's results, and the rows of the scripts in bench/)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    os.replace(tmp, path)


def load_results(path) -> dict:
    """A results JSON of any vintage (bench/results/*.json) as a dict with ``rows``."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path}: not a GEMM benchmark results file (expected an object with a 'rows' list)")
    return data


def _gpu_name(results: dict) -> str | None:
    gpu = (results.get("env") or {}).get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return gpu["name"]
    return results.get("gpu")


# ---------------------------------------------------------------- plot
def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise RuntimeError("plotting needs matplotlib, which is not installed here: "
                           "pip install matplotlib (or pip install -e '.[plot]')") from e
    return Figure


def plot_results(results: dict, path, *, suites=None, title: str | None = None) -> Path:
    """Grouped bars of rawcoop vs baseline TFLOP/s per case, one panel per
    input type (bf16, fp16, e4m3, tf32), the ratio written over each pair and
    that type's dense peak (PEAKS; the file's ``peak_tflops`` for 16-bit) as
    a dashed line; written to ``path`` (PNG).  Rows timed without a baseline
    get the rawcoop bar alone.  Reads every results format in bench/results/."""
    Figure = _figure_class()
    peak16 = float(results.get("peak_tflops") or PEAK_TFLOPS)
    rows = [normalize_row(r) for r in results.get("rows") or []]
    if suites:
        rows = [r for r in rows if r["suite"] in suites]
    rows = [r for r in rows if r.get("rawcoop_tflops") is not None and
            (r.get("baseline_tflops") is not None or r.get("baseline") == NO_BASELINE)]
    if not rows:
        raise ValueError("nothing to plot: no rows with rawcoop and baseline TFLOP/s" +
                         (f" in suites {', '.join(suites)}" if suites else ""))
    order = {"bf16": 0, "fp16": 1, "e4m3": 2, "tf32": 3}
    dtypes = sorted(dict.fromkeys(r["dtype"] for r in rows), key=lambda d: (order.get(d, 4), d))
    widest = max(sum(r["dtype"] == d for r in rows) for d in dtypes)
    fig = Figure(figsize=(max(7.0, 1.0 * widest + 2.5), 4.6 * len(dtypes)), constrained_layout=True)
    axes = fig.subplots(len(dtypes), 1, squeeze=False)[:, 0]
    for ax, dt in zip(axes, dtypes):
        rs = [r for r in rows if r["dtype"] == dt]
        peak = peak_of(rs[0], peak16)
        multi_suite = len({r["suite"] for r in rs}) > 1
        only_cublas = all(r["baseline"] == "cuBLAS" for r in rs)
        labels = []
        for r in rs:
            lab = (f"{r['suite']}: " if multi_suite else "") + r["label"]
            if r["baseline"] != "cuBLAS" and " vs " not in lab:
                lab += f"\nvs {r['baseline']}"
            labels.append(lab)
        x = list(range(len(rs)))
        w = 0.38
        ours = [r["rawcoop_tflops"] for r in rs]
        theirs = [r.get("baseline_tflops") for r in rs]
        ax.bar([i - w / 2 for i in x], ours, w, label="rawcoop", color="#2f6db5")
        have = [(i, t) for i, t in zip(x, theirs) if t is not None]
        if have:
            ax.bar([i + w / 2 for i, _ in have], [t for _, t in have], w,
                   label="cuBLAS" if only_cublas else "baseline (cuBLAS unless named)", color="#e08a2c")
        top = max([peak, *ours, *(t for _, t in have)])
        for i, r in enumerate(rs):
            ratio = r.get("ratio")
            if ratio is None:
                continue
            ax.annotate(f"{ratio:.2f}×", (i, max(ours[i], theirs[i]) + 0.015 * top), ha="center", va="bottom",
                        fontsize=8)
        ax.axhline(peak, ls="--", lw=1.0, color="0.35", label=f"{peak:g} TFLOP/s ({peak_label(dt)})")
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, top * 1.3)
        ax.set_xlim(-0.6, len(rs) - 0.4)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{dt}   (ratio = baseline time / rawcoop time)", fontsize=10)
        ax.legend(loc="upper center", ncol=3, fontsize=8, frameon=False)
        ax.grid(axis="y", alpha=0.3)
    if title is None:
        gpu = _gpu_name(results)
        when = str((results.get("env") or {}).get("date", ""))[:10]
        title = "rawcoop.gemm vs cuBLAS" + (f" on {gpu}" if gpu else "") + (f", {when}" if when else "")
    fig.suptitle(title, fontsize=11)
    path = Path(path)
    fig.savefig(path, dpi=130)
    return path


# ---------------------------------------------------------------- entry points
def run(args) -> dict:
    """Run the selected suites; returns the results dict (rows, env, settings)."""
    env = environment(0)
    results = {"format": RESULTS_FORMAT, "gpu": None, "peak_tflops": PEAK_TFLOPS, "peak": PEAK_LABEL,
               "peaks": {dt: {"tflops": p, "what": label} for dt, (p, label) in PEAKS.items()}, "env": env,
               "settings": settings_of(args), "rows": []}
    results["gpu"] = _gpu_name(results)

    def save(_row=None):
        if args.json:
            write_json(args.json, results)

    b = Bench(args, on_row=lambda row: (results["rows"].append(row), save()))
    print(f"GPU {b.info.name}, {b.info.sm_count} SMs, L2 {b.info.l2_bytes / 2**20:.0f} MiB; "
          f"rounds={args.rounds} iters={args.iters} timing={getattr(args, 'timing', 'calls')}; ratio = baseline time / rawcoop time", flush=True)
    for suite in args.suite:
        try:
            getattr(b, suite)()
        except Exception as e:  # noqa: BLE001 - one broken suite must not lose the others' rows
            import traceback
            traceback.print_exc()
            print(f"rawcoop bench: suite {suite} FAILED ({type(e).__name__}: {e}); going on with the next",
                  file=sys.stderr, flush=True)
            results.setdefault("failed_suites", []).append({"suite": suite, "error": f"{type(e).__name__}: {e}"})
            try:
                b.cp.cuda.Device().synchronize()
                b.free()
            except Exception:  # noqa: BLE001 - a sticky CUDA error: the next suites will say so
                pass
    env["nvidia_smi_end"] = nvidia_smi(_bus_id(0))
    results["geomean"] = geomeans(results["rows"])
    save()
    return results


def _check_output(path, what) -> str | None:
    if path and not Path(path).resolve().parent.is_dir():
        return f"{what}: the directory of {path} does not exist"
    return None


def execute(args) -> int:
    """Run the benchmark for parsed ``args``; 0 on success, 1 when there is no
    usable GPU (nothing measured), when a result mismatched, when a suite
    failed (the others still ran), or when the plot failed."""
    for problem in (_check_output(args.json, "--json"), _check_output(args.plot, "--plot")):
        if problem:
            print(f"rawcoop bench: {problem}", file=sys.stderr)
            return 2
    if getattr(args, "out_dtype", None) and args.beta:
        print("rawcoop bench: --out-dtype float32 takes no --beta (C would need rawcoop's output type while "
              "the baseline's is the input type)", file=sys.stderr)
        return 2
    if "tf32" in args.suite and _cupy_linalg() is None and os.environ.get("CUPY_TF32") != "1":
        # CuPy reads CUPY_TF32 once, at the process's first float32 GEMM; without the
        # set_compute_type switch this is the only way to its TF32 path (the fp32 reference
        # of the fp8 suite is then TF32 too, which the tf32 rows' float64 check would not see).
        os.environ["CUPY_TF32"] = "1"
        print("rawcoop bench: this CuPy has no set_compute_type; CUPY_TF32=1 set for the tf32 suite", flush=True)
    problem = gpu_problem(0)
    if problem:
        print(f"rawcoop bench: {problem}; nothing was measured.", file=sys.stderr)
        return 1
    if args.plot:
        try:
            _figure_class()
        except RuntimeError as e:
            print(f"rawcoop bench: --plot: {e}", file=sys.stderr)
            return 1
    results = run(args)
    print()
    print(format_report(results))
    rc = 0
    for f in results.get("failed_suites") or []:
        print(f"FAILED suite {f['suite']}: {f['error']}", file=sys.stderr)
        rc = 1
    bad = [r for r in results["rows"] if r.get("rel_err") is not None and not r["rel_err"] <= MAX_REL_ERR]
    for r in bad:
        print(f"MISMATCH {r['suite']} {r['case']}: rawcoop differs from {r.get('err_vs') or 'the baseline'} "
              f"by {r['rel_err']:.2e} "
              f"(relative Frobenius norm > {MAX_REL_ERR:g})", file=sys.stderr)
        rc = 1
    if args.json:
        print(f"results: {args.json}")
    if args.plot:
        try:
            plot_results(results, args.plot)
            print(f"plot: {args.plot}")
        except (RuntimeError, ValueError) as e:
            print(f"rawcoop bench: --plot: {e}", file=sys.stderr)
            rc = 1
    return rc


def main(argv=None, prog: str = "python -m rawcoop bench") -> int:
    return execute(build_parser(prog).parse_args(argv))
