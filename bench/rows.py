"""Result rows of the benchmark: what one row holds, the dense peaks its
"% peak" refers to, and the geometric means over rows.

A row is a dict (it goes into the results JSON as is): ``suite``, ``case``,
``baseline``, the median times and TFLOP/s of both sides, ``ratio`` =
median over rounds of baseline time / rawcoop time (> 1: rawcoop faster)
with its min-max, ``rounds`` (every round's times), and per-suite extras
(dtype, shape, layout, variant, rel_err ...).  :func:`normalize_row` reads
the rows of every results file format the benchmark has written.
"""
from __future__ import annotations

import math
import statistics

from bench.options import ROW_DTYPES

PEAK_TFLOPS = 989.0
"""Dense (no sparsity) fp16/bf16 tensor-core peak of an H100/H200 SXM in
TFLOP/s (NVIDIA datasheet: 989.4 TFLOP/s; the 1979 figure assumes 2:4
sparsity).  The "% peak" columns and the dashed line of the plot use it."""
PEAK_LABEL = "H100/H200 SXM dense fp16/bf16 peak"
PEAK_FP8_TFLOPS = 1979.0
"""Dense (no sparsity) FP8 tensor-core peak of an H100/H200 SXM in TFLOP/s
(NVIDIA datasheet: 1,979 TFLOP/s; the 3,958 figure assumes 2:4 sparsity)."""
PEAK_FP8_LABEL = "H100/H200 SXM dense FP8 peak"
PEAK_TF32_TFLOPS = 494.5
"""Dense (no sparsity) TF32 tensor-core peak of an H100/H200 SXM in TFLOP/s
(NVIDIA datasheet: 494.7; the 989 figure assumes 2:4 sparsity)."""
PEAK_TF32_LABEL = "H100/H200 SXM dense TF32 peak"
PEAKS = {"bf16": (PEAK_TFLOPS, PEAK_LABEL), "fp16": (PEAK_TFLOPS, PEAK_LABEL),
         "e4m3": (PEAK_FP8_TFLOPS, PEAK_FP8_LABEL), "tf32": (PEAK_TF32_TFLOPS, PEAK_TF32_LABEL)}
"""Row dtype -> (dense peak TFLOP/s, what it is)."""

RESULTS_FORMAT = "rawcoop-bench/1"

HOST_BOUND = 0.8
"""A side whose host time per call is at least this share of its measured
time per call is marked host-bound: its GPU waited for Python between calls,
so the row times the host (per-call events include it), not the kernel."""


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


def normalize_row(row: dict) -> dict:
    """A row of any results JSON in the current vocabulary (older files name
    the baseline ``cublas_*`` and lack ``suite``/``case``/``baseline``),
    with a short ``label`` for tables and plots."""
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
    """Geometric mean; NaN when empty or when a value is not positive."""
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
    return [{"suite": suite, "dtype": dtype, "baseline": baseline, "layout": layout or None,
             "variant": variant or None, "beta": beta, "geomean": geomean(ratios), "count": len(ratios)}
            for (suite, dtype, baseline, layout, variant, beta), ratios in groups.items()]
