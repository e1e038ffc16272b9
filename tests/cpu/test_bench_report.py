"""CPU: the benchmark's result rows, tables, geomeans, results files and plots
(bench/rows.py, bench/report.py, bench/plot.py), on synthetic rows and on
the measured results in bench/results/."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import baselines, report, rows

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))


def _plot_script(args):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(ROOT / "bench" / "plot.py"), *args], capture_output=True,
                          text=True, env=env, timeout=120, cwd=str(ROOT))


# ------------------------------------------------------------------ table and geomean
def _synthetic_results():
    rounds = [(1.0e-3, 1.1e-3), (1.0e-3, 0.9e-3), (1.0e-3, 1.0e-3)]
    made = [
        rows.make_row("main", "bf16 4096x4096x4096 TN", 2.0 * 4096 ** 3, rounds, 2,
                      extra={"dtype": "bf16", "shape": "4096x4096x4096", "layout": "TN", "variant": "auto",
                             "beta": 0.0, "batch": 1, "rel_err": 0.0}),
        rows.make_row("main", "bf16 8192x8192x8192 TN", 2.0 * 8192 ** 3, [(2e-3, 4e-3)], 1,
                      extra={"dtype": "bf16", "shape": "8192x8192x8192", "layout": "TN", "variant": "auto",
                             "beta": 0.0, "batch": 1, "rel_err": 1e-5}),
        rows.make_row("main", "bf16 1024x1024x1024 TN", 2.0 * 1024 ** 3, [(2e-3, 1e-3)], 8,
                      extra={"dtype": "bf16", "shape": "1024x1024x1024", "layout": "TN", "variant": "auto",
                             "beta": 0.0, "batch": 1}),
        rows.make_row("main", "fp16 4096x4096x4096 TN", 2.0 * 4096 ** 3, [(1e-3, 1.25e-3)], 2,
                      extra={"dtype": "fp16", "shape": "4096x4096x4096", "layout": "TN", "variant": "auto",
                             "beta": 0.0, "batch": 1}),
        rows.make_row("epilogue", "fp16 4096x4096x4096 0.5*AB+1.5*C", 2.0 * 4096 ** 3, [(1e-3, 1.4e-3)], 2,
                      baseline="cuBLAS+ew", extra={"dtype": "fp16"}),
    ]
    return {"format": rows.RESULTS_FORMAT, "gpu": "NVIDIA H200", "peak_tflops": rows.PEAK_TFLOPS,
            "env": {"date": "2026-11-30T00:00:00+00:00", "gpu": {"name": "NVIDIA H200"}}, "rows": made}


def test_make_row_keeps_every_round_and_the_median_ratio():
    r = _synthetic_results()["rows"][0]
    assert [round(x["ratio"], 6) for x in r["rounds"]] == [1.1, 0.9, 1.0]
    assert r["ratio"] == pytest.approx(1.0) and r["ratio_min"] == pytest.approx(0.9)
    assert r["ratio_max"] == pytest.approx(1.1)
    assert r["rawcoop_ms"] == pytest.approx(1.0) and r["baseline_ms"] == pytest.approx(1.0)
    tf = 2.0 * 4096 ** 3 / 1e-3 / 1e12
    assert r["rawcoop_tflops"] == pytest.approx(tf)
    assert r["rawcoop_peak_frac"] == pytest.approx(tf / 989.0)
    assert rows.PEAK_TFLOPS == 989.0


def test_host_time_per_call_marks_host_bound_rows():
    """A side whose Python time per call is >= 80% of its measured time per
    call timed the host, not the kernel: the row says so and the report
    lists it (small fp8 rows ran 0.64-0.99 of cuBLASLt between
    runs for one kernel that ncu put at 0.91)."""
    row = rows.make_row("fp8", "e4m3 16x8192x8192 TN", 2.0 * 16 * 8192 ** 2, [(36e-6, 25e-6)] * 3, 3,
                        baseline="cuBLASLt _scaled_mm")
    row.update(rows.host_fields(row, {"ours": [30e-6, 34e-6, 35e-6], "theirs": [12e-6, 11e-6, 13e-6]}))
    assert row["rawcoop_host_us"] == pytest.approx(34.0) and row["rawcoop_host_bound"] is True
    assert row["baseline_host_us"] == pytest.approx(12.0) and row["baseline_host_bound"] is False
    quick = rows.make_row("main", "bf16 4096x4096x4096 TN", 2.0 * 4096 ** 3, [(1e-3, 1e-3)], 2)
    quick.update(rows.host_fields(quick, {"ours": [20e-6], "theirs": [15e-6]}))
    assert not quick["rawcoop_host_bound"] and not quick["baseline_host_bound"]
    alone = rows.make_row("fp8", "e4m3 block 4096x7168x16384 TN", 1.0, [(1e-3, None)], 1, baseline="none")
    assert rows.host_fields(alone, {"ours": [1e-5]}) == {"rawcoop_host_us": pytest.approx(10.0),
                                                         "rawcoop_host_bound": False}
    text = report.format_report({"rows": [row, quick]})
    assert "host-bound" in text and "16x8192x8192" in text.split("host-bound")[1]
    assert "4096x4096x4096" not in text.split("host-bound")[1]
    assert "host-bound" not in report.format_report({"rows": [quick]})


def test_geomean_per_dtype():
    res = _synthetic_results()
    g = {(x["suite"], x["dtype"], x["baseline"]): x for x in rows.geomeans(res["rows"])}
    assert g[("main", "bf16", "cuBLAS")]["geomean"] == pytest.approx(1.0)          # 1.0 * 2.0 * 0.5
    assert g[("main", "bf16", "cuBLAS")]["count"] == 3
    assert g[("main", "fp16", "cuBLAS")]["geomean"] == pytest.approx(1.25)
    assert g[("epilogue", "fp16", "cuBLAS+ew")]["geomean"] == pytest.approx(1.4)
    assert rows.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(rows.geomean([]))


def test_table_formatting():
    text = report.format_report(_synthetic_results())
    assert "main:" in text and "epilogue:" in text
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("| case") and "cuBLAS TFLOP/s" in line)
    for col in ("rawcoop TFLOP/s", "cuBLAS TFLOP/s", "ratio", "round min-max", "rawcoop % peak"):
        assert col in head
    row = next(line for line in lines if "bf16 4096x4096x4096 TN" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    tf = 2.0 * 4096 ** 3 / 1e-3 / 1e12
    assert cells[1] == f"{tf:.1f}" and cells[2] == f"{tf:.1f}"
    assert cells[3] == "1.000" and cells[4] == "0.900-1.100"
    assert cells[5] == f"{tf / 989:.1%}"
    assert "| cuBLAS+ew |" in text and "baseline TFLOP/s" in text    # another baseline is named
    assert "main bf16 TN vs cuBLAS: 1.000 over 3 cases" in text
    assert "main fp16 TN vs cuBLAS: 1.250 over 1 case" in text
    assert "989" in text
    # all table lines of one block have the same width (aligned columns)
    block = text.split("\n\n")[0].splitlines()[1:]
    assert len({len(line) for line in block}) == 1


def test_old_results_files_are_understood():
    old = {"gpu": "NVIDIA H200", "rows": [
        {"dtype": "bf16", "shape": "4096x4096x4096", "variant": "auto", "rawcoop_tflops": 785.1,
         "cublas_tflops": 789.2, "ratio": 0.999, "ratio_min": 0.995, "ratio_max": 1.036},
        {"suite": "small_m", "case": "bf16 1x8192x8192 swap=True", "baseline": "cuBLAS", "rawcoop_tflops": 2.9,
         "baseline_tflops": 3.7, "ratio": 0.8, "ratio_min": 0.79, "ratio_max": 0.9, "swap": True}]}
    r0, r1 = (rows.normalize_row(r) for r in old["rows"])
    assert r0["suite"] == "main" and r0["baseline_tflops"] == 789.2 and r0["label"] == "4096x4096x4096"
    assert r1["dtype"] == "bf16" and r1["label"] == "1x8192x8192 swap=True"
    text = report.format_report(old)
    assert "789.2" in text and "small_m bf16 swap vs cuBLAS: 0.800" in text


def _results_files():
    """The benchmark results files in bench/results/ (other JSON there is not bench/gemm.py's)."""
    return [p for p in RESULTS if json.loads(p.read_text()).get("format") == rows.RESULTS_FORMAT]


def test_measured_results_load_and_format():
    files = _results_files()
    if not files:
        pytest.skip("no benchmark results in bench/results/")
    for path in files:
        text = report.format_report(report.load_results(path))
        assert "geomean of ratios" in text and "| case" in text, path.name
    base = ROOT / "bench" / "results" / "baseline-h200.json"
    if base.exists():                                # the numbers the documentation quotes
        text = report.format_report(report.load_results(base))
        assert "main bf16 TN vs cuBLAS: 0.997 over 8 cases" in text
        assert "fp8 e4m3 TN vs cuBLASLt _scaled_mm: 1.055 over 5 cases" in text
        assert "tf32 tf32 TN vs torch tf32: 1.028 over 3 cases" in text


def test_load_results_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"kernel": "k"}]))
    with pytest.raises(ValueError, match="not a GEMM benchmark results file"):
        report.load_results(p)


# ------------------------------------------------------------------ plot
def _png(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_from_synthetic_results(tmp_path):
    pytest.importorskip("matplotlib")
    out = report.plot_results(_synthetic_results(), tmp_path / "p.png")
    _png(out)
    out2 = report.plot_results(_synthetic_results(), tmp_path / "main.png", suites=["main"], title="t")
    _png(out2)
    with pytest.raises(ValueError, match="nothing to plot"):
        report.plot_results(_synthetic_results(), tmp_path / "none.png", suites=["pdl"])


def test_plot_script_reads_the_measured_results(tmp_path):
    pytest.importorskip("matplotlib")
    files = _results_files()
    if not files:
        pytest.skip("no benchmark results in bench/results/")
    r = _plot_script([str(files[0]), "-o", str(tmp_path / "f.png")])
    assert r.returncode == 0, r.stderr
    assert "main:" in r.stdout or "fp8:" in r.stdout
    assert "plot:" in r.stdout
    _png(tmp_path / "f.png")


def test_plot_script_bad_input_exits_2(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("[]")
    r = _plot_script([str(p)])
    assert r.returncode == 2 and "bench/plot.py: " in r.stderr and "Traceback" not in r.stderr
    r = _plot_script([str(ROOT / "bench" / "results"), "--suite", "nope"])
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_plot_without_matplotlib_says_so(tmp_path, monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)         # import matplotlib -> ImportError
    with pytest.raises(RuntimeError, match="pip install matplotlib"):
        report.plot_results(_synthetic_results(), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


def test_peak_constants():
    assert rows.PEAK_FP8_TFLOPS == 1979.0 and rows.PEAK_TF32_TFLOPS == 494.5 and rows.PEAK_TFLOPS == 989.0
    assert "dense FP8" in rows.PEAK_FP8_LABEL and "H100/H200 SXM" in rows.PEAK_FP8_LABEL
    assert "dense TF32" in rows.PEAK_TF32_LABEL
    assert rows.PEAKS["e4m3"][0] == 1979.0 and rows.PEAKS["tf32"][0] == 494.5
    assert rows.PEAKS["bf16"][0] == rows.PEAKS["fp16"][0] == 989.0


def _fp8_tf32_results():
    fl8 = 2.0 * 8192 ** 3
    fp8 = [
        rows.make_row("fp8", "e4m3 8192x8192x8192 TN", fl8, [(1.0e-3, 1.1e-3), (1.0e-3, 1.3e-3), (1.0e-3, 1.2e-3)],
                      1, baseline=baselines.BASE_SCALED_MM, peak=rows.PEAK_FP8_TFLOPS,
                      extra={"dtype": "e4m3", "shape": "8192x8192x8192", "layout": "TN", "batch": 1,
                             "rel_err": 3.1e-3, "err_vs": baselines.BASE_SCALED_MM}),
        rows.make_row("fp8", "e4m3 8192x8192x8192 TN", fl8, [(1.0e-3, 0.9e-3)], 1,
                      baseline=baselines.BASE_SCALED_MM_FAST, peak=rows.PEAK_FP8_TFLOPS,
                      extra={"dtype": "e4m3", "shape": "8192x8192x8192", "layout": "TN", "batch": 1,
                             "rel_err": 2.5e-3}),
        rows.make_row("fp8", "e4m3 128x8192x8192 TN", 2.0 * 128 * 8192 ** 2, [(1.0e-4, None), (1.1e-4, None)], 3,
                      baseline=baselines.NO_BASELINE, peak=rows.PEAK_FP8_TFLOPS,
                      extra={"dtype": "e4m3", "shape": "128x8192x8192", "layout": "TN", "batch": 1,
                             "rel_err": 2.0e-3, "baseline_skipped": "import torch failed: RuntimeError: x"}),
    ]
    fl = 2.0 * 4096 ** 3
    tf32 = [
        rows.make_row("tf32", "tf32 4096x4096x4096 TN", fl, [(1.0e-3, 1.0e-3)], 3, baseline=baselines.BASE_CUBLAS_TF32,
                      peak=rows.PEAK_TF32_TFLOPS,
                      extra={"dtype": "tf32", "shape": "4096x4096x4096", "layout": "TN", "batch": 1,
                             "rel_err": 4e-4}),
        rows.make_row("tf32", "tf32 4096x4096x4096 TN", fl, [(1.0e-3, 1.5e-3)], 3, baseline=baselines.BASE_TORCH_TF32,
                      peak=rows.PEAK_TF32_TFLOPS,
                      extra={"dtype": "tf32", "shape": "4096x4096x4096", "layout": "TN", "batch": 1,
                             "rel_err": 5e-4}),
    ]
    res = _synthetic_results()
    res["rows"] = res["rows"] + fp8 + tf32
    return res


def test_fp8_peak_in_rows_and_percent_columns():
    res = _fp8_tf32_results()
    r = next(x for x in res["rows"] if x["baseline"] == baselines.BASE_SCALED_MM)
    tf = 2.0 * 8192 ** 3 / 1e-3 / 1e12
    assert r["peak_tflops"] == 1979.0
    assert r["rawcoop_peak_frac"] == pytest.approx(tf / 1979.0)
    assert r["baseline_peak_frac"] == pytest.approx(2.0 * 8192 ** 3 / 1.2e-3 / 1e12 / 1979.0)
    assert r["ratio"] == pytest.approx(1.2) and r["ratio_min"] == pytest.approx(1.1)
    text = report.format_report(res)
    row = next(line for line in text.splitlines() if "e4m3 8192x8192x8192 TN" in line and "fast" not in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == baselines.BASE_SCALED_MM
    assert cells[6] == f"{tf / 1979:.1%}" and cells[6] != f"{tf / 989:.1%}"
    # a row without its own peak (an older file) takes its dtype's
    old = {k: v for k, v in r.items() if k != "peak_tflops"}
    assert rows.peak_of(old) == 1979.0
    assert rows.peak_of({"dtype": "tf32"}) == 494.5 and rows.peak_of({"dtype": "bf16"}, 900.0) == 900.0


def test_fp8_tf32_table_formatting():
    res = _fp8_tf32_results()
    text = report.format_report(res)
    assert "fp8:" in text and "tf32:" in text and "main:" in text
    lines = text.splitlines()
    for name in (baselines.BASE_SCALED_MM, baselines.BASE_SCALED_MM_FAST, baselines.BASE_CUBLAS_TF32,
                 baselines.BASE_TORCH_TF32):
        assert f"| {name}" in text
    alone = next(line for line in lines if "e4m3 128x8192x8192 TN" in line)
    cells = [c.strip() for c in alone.strip("|").split("|")]
    assert cells[1] == "none" and cells[3] == "-" and cells[4] == "-" and cells[5] == "-" and cells[7] == "-"
    assert cells[6] == f"{2.0 * 128 * 8192 ** 2 / 1.05e-4 / 1e12 / 1979:.1%}"
    tf32_row = next(line for line in lines if "tf32 4096x4096x4096 TN" in line and "torch" in line)
    cells = [c.strip() for c in tf32_row.strip("|").split("|")]
    tf = 2.0 * 4096 ** 3 / 1e-3 / 1e12
    assert cells[6] == f"{tf / 494.5:.1%}" and cells[4] == "1.500" and cells[8] == "5.0e-04"
    # geomean per suite and baseline; the row without a baseline is left out
    assert "fp8 e4m3 TN vs cuBLASLt _scaled_mm: 1.200 over 1 case" in text
    assert "fp8 e4m3 TN vs cuBLASLt _scaled_mm fast-accum: 0.900 over 1 case" in text
    assert "tf32 tf32 TN vs cuBLAS tf32: 1.000 over 1 case" in text
    assert "tf32 tf32 TN vs torch tf32: 1.500 over 1 case" in text
    assert "vs none" not in text
    g = {(x["suite"], x["baseline"]): x for x in rows.geomeans(res["rows"])}
    assert g[("fp8", baselines.BASE_SCALED_MM)]["count"] == 1 and ("fp8", "none") not in g
    # the legend names every peak used and what fp8's rel err compares
    assert "989 TFLOP/s (H100/H200 SXM dense fp16/bf16 peak)" in text
    assert "1979 TFLOP/s (H100/H200 SXM dense FP8 peak) for e4m3" in text
    assert "494.5 TFLOP/s (H100/H200 SXM dense TF32 peak) for tf32" in text
    assert "fp8 rel err: rawcoop's bf16 output vs the row's baseline output" in text
    assert "rawcoop timed alone" in text
    for block in text.split("\n\n")[:3]:                      # main, fp8, tf32 tables: aligned columns
        tbl = block.splitlines()[1:]
        assert len({len(line) for line in tbl}) == 1
    # the JSON round trip keeps all of it
    again = json.loads(json.dumps(res))
    assert report.format_report(again) == text


def test_plot_with_fp8_and_tf32_suites(tmp_path):
    pytest.importorskip("matplotlib")
    res = _fp8_tf32_results()
    _png(report.plot_results(res, tmp_path / "all.png"))
    _png(report.plot_results(res, tmp_path / "fp8.png", suites=["fp8"]))
    _png(report.plot_results(res, tmp_path / "tf32.png", suites=["fp8", "tf32"]))
    p = tmp_path / "r.json"
    p.write_text(json.dumps(res))
    r = _plot_script([str(p), "-o", str(tmp_path / "s.png"), "--suite", "fp8,tf32"])
    assert r.returncode == 0, r.stderr
    assert "fp8:" in r.stdout and "1979" in r.stdout and "plot:" in r.stdout
    _png(tmp_path / "s.png")


def test_plot_draws_one_peak_line_per_dtype(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.axes import Axes
    lines = []
    orig = Axes.axhline

    def spy(self, y=0, *args, **kwargs):
        lines.append((self.get_title().split()[0] if self.get_title() else "?", y, kwargs.get("label", "")))
        return orig(self, y, *args, **kwargs)
    monkeypatch.setattr(Axes, "axhline", spy)
    report.plot_results(_fp8_tf32_results(), tmp_path / "p.png")
    peaks = {y for _, y, _ in lines}
    assert peaks == {989.0, 1979.0, 494.5}
    assert any("dense FP8" in lab and y == 1979.0 for _, y, lab in lines)
    assert any("dense TF32" in lab and y == 494.5 for _, y, lab in lines)
