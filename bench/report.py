"""The benchmark's output: the markdown tables and geomeans printed at the
end of a run, the results JSON, and the plot.

Every function here takes a results dict (``{"rows": [...], "env": ...}``,
what bench/gemm.py --json writes; older files too, through
rows.normalize_row) and works without a GPU.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from bench.baselines import NO_BASELINE
from bench.rows import (HOST_BOUND, PEAK_LABEL, PEAK_TFLOPS, geomean, geomeans, host_bound_sides, normalize_row,
                        peak_label, peak_of)


# ---------------------------------------------------------------- tables
def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def _table(head, body, left: int) -> list[str]:
    """A markdown table with aligned columns; the first ``left`` columns left-aligned, the others right."""
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) if i < left else str(c).rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 2) if i < left else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return [line(head), sep, *(line(b) for b in body)]


def format_table(rows, peak: float = PEAK_TFLOPS) -> str:
    """Side-by-side markdown table per suite: rawcoop and baseline TFLOP/s,
    ratio (baseline time / rawcoop time), min-max of the per-round ratios, and
    the fraction of the dense peak of the row's input type each reaches
    (``peak`` for 16-bit rows of files without per-row peaks; rows.PEAKS)."""
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
        blocks.append("\n".join([f"{suite}:", *_table(head, body, 1 if only_cublas else 2)]))
    return "\n\n".join(blocks)


def _cases(n: int) -> str:
    return f"{n} case{'s' if n != 1 else ''}"


def format_geomeans(rows) -> str:
    lines = []
    for g in geomeans(rows):
        what = " ".join(x for x in (g["suite"], g["dtype"], g["layout"], g["variant"] if g["variant"] != "auto"
                                    else None, f"beta={g['beta']:g}" if g["beta"] else None) if x)
        lines.append(f"  {what} vs {g['baseline']}: {g['geomean']:.3f} over {_cases(g['count'])}")
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
    lines = [f"  {suite} {dtype} {variant} vs {first} ({baseline} rows): {geomean(v):.3f} over {_cases(len(v))}, "
             f"faster on {sum(x > 1 for x in v)}"
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
    """The table(s), the geomeans, and the legend, for a results dict."""
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


# ---------------------------------------------------------------- results files
def write_json(path, results: dict | list) -> None:
    """Atomically (write then rename), so a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    os.replace(tmp, path)


def load_results(path) -> dict:
    """A results JSON (bench/gemm.py --json, any format version) as a dict with ``rows``."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ValueError(f"{path}: not a GEMM benchmark results file (expected an object with a 'rows' list)")
    return data


def gpu_name(results: dict) -> str | None:
    gpu = (results.get("env") or {}).get("gpu")
    if isinstance(gpu, dict) and gpu.get("name"):
        return gpu["name"]
    return results.get("gpu")


# ---------------------------------------------------------------- plot
def figure_class():
    """matplotlib's Figure (no pyplot: no display needed); RuntimeError saying how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise RuntimeError("plotting needs matplotlib, which is not installed here: "
                           "pip install matplotlib (or pip install -e '.[plot]')") from e
    return Figure


def plot_results(results: dict, path, *, suites=None, title: str | None = None) -> Path:
    """Grouped bars of rawcoop vs baseline TFLOP/s per case, one panel per
    input type (bf16, fp16, e4m3, tf32), the ratio written over each pair and
    that type's dense peak (rows.PEAKS; the file's ``peak_tflops`` for
    16-bit) as a dashed line; written to ``path`` (PNG).  Rows timed without
    a baseline get the rawcoop bar alone."""
    Figure = figure_class()
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
        _panel(ax, [r for r in rows if r["dtype"] == dt], dt, peak16)
    if title is None:
        gpu = gpu_name(results)
        when = str((results.get("env") or {}).get("date", ""))[:10]
        title = "rawcoop.gemm vs cuBLAS" + (f" on {gpu}" if gpu else "") + (f", {when}" if when else "")
    fig.suptitle(title, fontsize=11)
    path = Path(path)
    fig.savefig(path, dpi=130)
    return path


def _panel(ax, rs, dt, peak16):
    """One input type's bars, ratios and peak line."""
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
        if r.get("ratio") is not None:
            ax.annotate(f"{r['ratio']:.2f}×", (i, max(ours[i], theirs[i]) + 0.015 * top), ha="center",
                        va="bottom", fontsize=8)
    ax.axhline(peak, ls="--", lw=1.0, color="0.35", label=f"{peak:g} TFLOP/s ({peak_label(dt)})")
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, top * 1.3)
    ax.set_xlim(-0.6, len(rs) - 0.4)
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{dt}   (ratio = baseline time / rawcoop time)", fontsize=10)
    ax.legend(loc="upper center", ncol=3, fontsize=8, frameon=False)
    ax.grid(axis="y", alpha=0.3)
