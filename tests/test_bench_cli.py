"""CPU: the benchmark's command line, shape parsing, table/geomean formatting,
the plot, and ``python -m rawcoop bench`` without a GPU."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rawcoop import cli
from bench import harness

ROOT = Path(__file__).resolve().parents[1]


def _run(args, env_extra=None, module=True, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "rawcoop", *args] if module else [sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=str(ROOT))


def _bench_args(argv):
    """Parse through the real CLI parser (python -m rawcoop bench ...)."""
    captured = {}

    def fake(args):
        captured["args"] = args
        return 0

    orig = cli.cmd_bench
    cli.cmd_bench = fake
    try:
        assert cli.main(["bench", *argv]) == 0
    finally:
        cli.cmd_bench = orig
    return captured["args"]


# ------------------------------------------------------------------ parsing
def test_parse_shape():
    assert bench.parse_shape("4096x2048x1024") == (4096, 2048, 1024, 1)
    s = bench.parse_shape(" 64X128x256x16 ")
    assert s == (64, 128, 256, 16) and s.batch == 16
    assert str(s) == "64x128x256x16" and str(bench.parse_shape("1x2x3")) == "1x2x3"
    assert bench.parse_shape("2x3x4x5").flops == 2.0 * 2 * 3 * 4 * 5


@pytest.mark.parametrize("bad", ["4096x4096", "4096", "axbxc", "0x8x8", "8x-8x8", "8x8x8x8x8", "", "8x8x8.5"])
def test_parse_shape_rejects_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="MxNxK"):
        bench.parse_shape(bad)


def test_parse_lists():
    assert bench.parse_shapes("1x2x3, 4x5x6x7") == [(1, 2, 3, 1), (4, 5, 6, 7)]
    assert bench.parse_dtypes("float16,bfloat16") == ["fp16", "bf16"]
    assert bench.parse_dtypes("bf16,bfloat16") == ["bf16"]
    assert bench.parse_layouts("tn,NT") == ["TN", "NT"]
    assert bench.parse_suites("all") == list(bench.SUITES)
    assert bench.parse_suites("main,pdl") == ["main", "pdl"]
    assert bench.parse_variants("auto,256:8,128:8:0,256:8:4:2,block_n=128:pingpong=1") == [
        ("auto", {}), ("256:8", {"_block_n": 256, "_group": 8}), ("128:8:0", {"_block_n": 128, "_group": 8}),
        ("256:8:4:2", {"_block_n": 256, "_group": 8, "_splits": 4, "_cluster": 2}),
        ("block_n=128:pingpong=1", {"_block_n": 128, "_pingpong": 1})]
    assert bench.parse_variants("256:8:0:1x2,cluster=2x1:block_n=128") == [
        ("256:8:0:1x2", {"_block_n": 256, "_group": 8, "_cluster": (1, 2)}),
        ("cluster=2x1:block_n=128", {"_cluster": (2, 1), "_block_n": 128})]
    for fn, bad, msg in ((bench.parse_dtypes, "float32", "dtype"), (bench.parse_layouts, "TX", "layout"),
                         (bench.parse_suites, "main,fast", "suite"), (bench.parse_variants, "256:x", "variant"),
                         (bench.parse_variants, "cluster=1y2", "variant"),
                         (bench.parse_shapes, ",", "shape")):
        with pytest.raises(ValueError, match=msg):
            fn(bad)


def test_cli_defaults():
    a = _bench_args([])
    assert a.cmd == "bench"
    assert a.suite == ["main"] and a.dtypes == ["bf16", "fp16"] and a.layouts == ["TN"]
    assert [str(s) for s in a.shapes] == list(bench.DEFAULT_SHAPES)
    assert a.rounds == 5 and a.iters == 20 and a.beta == 0.0 and a.variants == [("auto", {})]
    assert a.json is None and a.plot is None


def test_cli_options():
    a = _bench_args(["--dtype", "float16,bfloat16", "--shapes", "128x256x64,64x64x64x4", "--layout", "NT,TT",
                     "--beta", "0.5", "--suite", "main,layouts", "--rounds", "3", "--iters", "7",
                     "--json", "r.json", "--plot", "r.png", "--variants", "auto,128:8"])
    assert a.dtypes == ["fp16", "bf16"]
    assert a.shapes == [(128, 256, 64, 1), (64, 64, 64, 4)]
    assert a.layouts == ["NT", "TT"] and a.beta == 0.5 and a.suite == ["main", "layouts"]
    assert (a.rounds, a.iters, a.json, a.plot) == (3, 7, "r.json", "r.png")
    assert bench.settings_of(a)["shapes"] == ["128x256x64", "64x64x64x4"]
    # bench/gemm.py's spelling of the same options
    b = bench.build_parser("bench/gemm.py").parse_args(["--dtypes", "bf16", "--layouts", "TN"])
    assert b.dtypes == ["bf16"] and b.layouts == ["TN"]


@pytest.mark.parametrize("argv,needle", [
    (["--shapes", "4096x4096"], "bad shape '4096x4096'"),
    (["--shapes", "8x8x8,oops"], "bad shape 'oops'"),
    (["--dtype", "float32"], "unknown dtype 'float32'"),
    (["--layout", "XY"], "unknown layout 'XY'"),
    (["--suite", "nope"], "unknown suite 'nope'"),
    (["--rounds", "0"], "not a positive integer"),
    (["--fp8-block-shapes", "128x128x100"], "fp8 needs K a multiple of 16"),
    (["--fp8-shapes", "128x128x100"], "fp8 needs K a multiple of 16"),
    (["--fp8-shapes", "128x128x128x2"], "no batch"),
    (["--tf32-shapes", "64x64x30"], "tf32 needs K a multiple of 4"),
    (["--tf32-shapes", "64x64"], "bad shape '64x64'"),
    (["--suite", "fp8,int8"], "unknown suite 'int8'"),
    (["--dtype", "e4m3"], "unknown dtype 'e4m3'"),          # --dtype is the main suite's; fp8/tf32 have theirs
])
def test_cli_rejects_bad_arguments(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", *argv])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


# ------------------------------------------------------------------ table and geomean
def _synthetic_results():
    rounds = [(1.0e-3, 1.1e-3), (1.0e-3, 0.9e-3), (1.0e-3, 1.0e-3)]
    rows = [
        bench.make_row("main", "bf16 4096x4096x4096 TN", 2.0 * 4096 ** 3, rounds, 2,
                       extra={"dtype": "bf16", "shape": "4096x4096x4096", "layout": "TN", "variant": "auto",
                              "beta": 0.0, "batch": 1, "rel_err": 0.0}),
        bench.make_row("main", "bf16 8192x8192x8192 TN", 2.0 * 8192 ** 3, [(2e-3, 4e-3)], 1,
                       extra={"dtype": "bf16", "shape": "8192x8192x8192", "layout": "TN", "variant": "auto",
                              "beta": 0.0, "batch": 1, "rel_err": 1e-5}),
        bench.make_row("main", "bf16 1024x1024x1024 TN", 2.0 * 1024 ** 3, [(2e-3, 1e-3)], 8,
                       extra={"dtype": "bf16", "shape": "1024x1024x1024", "layout": "TN", "variant": "auto",
                              "beta": 0.0, "batch": 1}),
        bench.make_row("main", "fp16 4096x4096x4096 TN", 2.0 * 4096 ** 3, [(1e-3, 1.25e-3)], 2,
                       extra={"dtype": "fp16", "shape": "4096x4096x4096", "layout": "TN", "variant": "auto",
                              "beta": 0.0, "batch": 1}),
        bench.make_row("epilogue", "fp16 4096x4096x4096 0.5*AB+1.5*C", 2.0 * 4096 ** 3, [(1e-3, 1.4e-3)], 2,
                       baseline="cuBLAS+ew", extra={"dtype": "fp16"}),
    ]
    return {"format": bench.RESULTS_FORMAT, "gpu": "NVIDIA H200", "peak_tflops": bench.PEAK_TFLOPS,
            "env": {"date": "2026-11-30T00:00:00+00:00", "gpu": {"name": "NVIDIA H200"}}, "rows": rows}


def test_make_row_keeps_every_round_and_the_median_ratio():
    r = _synthetic_results()["rows"][0]
    assert [round(x["ratio"], 6) for x in r["rounds"]] == [1.1, 0.9, 1.0]
    assert r["ratio"] == pytest.approx(1.0) and r["ratio_min"] == pytest.approx(0.9)
    assert r["ratio_max"] == pytest.approx(1.1)
    assert r["rawcoop_ms"] == pytest.approx(1.0) and r["baseline_ms"] == pytest.approx(1.0)
    tf = 2.0 * 4096 ** 3 / 1e-3 / 1e12
    assert r["rawcoop_tflops"] == pytest.approx(tf)
    assert r["rawcoop_peak_frac"] == pytest.approx(tf / 989.0)
    assert bench.PEAK_TFLOPS == 989.0


def test_host_time_per_call_marks_host_bound_rows():
    """A side whose Python time per call is >= 80% of its measured time per
    call timed the host, not the kernel: the row says so and the report
    lists it (stop 12: small fp8 rows ran 0.64-0.99 of cuBLASLt between
    runs for one kernel that ncu put at 0.91)."""
    row = bench.make_row("fp8", "e4m3 16x8192x8192 TN", 2.0 * 16 * 8192 ** 2, [(36e-6, 25e-6)] * 3, 3,
                         baseline="cuBLASLt _scaled_mm")
    row.update(bench.host_fields(row, {"ours": [30e-6, 34e-6, 35e-6], "theirs": [12e-6, 11e-6, 13e-6]}))
    assert row["rawcoop_host_us"] == pytest.approx(34.0) and row["rawcoop_host_bound"] is True
    assert row["baseline_host_us"] == pytest.approx(12.0) and row["baseline_host_bound"] is False
    quick = bench.make_row("main", "bf16 4096x4096x4096 TN", 2.0 * 4096 ** 3, [(1e-3, 1e-3)], 2)
    quick.update(bench.host_fields(quick, {"ours": [20e-6], "theirs": [15e-6]}))
    assert not quick["rawcoop_host_bound"] and not quick["baseline_host_bound"]
    alone = bench.make_row("fp8", "e4m3 block 4096x7168x16384 TN", 1.0, [(1e-3, None)], 1, baseline="none")
    assert bench.host_fields(alone, {"ours": [1e-5]}) == {"rawcoop_host_us": pytest.approx(10.0),
                                                          "rawcoop_host_bound": False}
    text = bench.format_report({"rows": [row, quick]})
    assert "host-bound" in text and "16x8192x8192" in text.split("host-bound")[1]
    assert "4096x4096x4096" not in text.split("host-bound")[1]
    assert "host-bound" not in bench.format_report({"rows": [quick]})


def test_geomean_per_dtype():
    res = _synthetic_results()
    g = {(x["suite"], x["dtype"], x["baseline"]): x for x in bench.geomeans(res["rows"])}
    assert g[("main", "bf16", "cuBLAS")]["geomean"] == pytest.approx(1.0)          # 1.0 * 2.0 * 0.5
    assert g[("main", "bf16", "cuBLAS")]["count"] == 3
    assert g[("main", "fp16", "cuBLAS")]["geomean"] == pytest.approx(1.25)
    assert g[("epilogue", "fp16", "cuBLAS+ew")]["geomean"] == pytest.approx(1.4)
    assert bench.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(bench.geomean([]))


def test_table_formatting():
    text = bench.format_report(_synthetic_results())
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
    r0, r1 = (bench.normalize_row(r) for r in old["rows"])
    assert r0["suite"] == "main" and r0["baseline_tflops"] == 789.2 and r0["label"] == "4096x4096x4096"
    assert r1["dtype"] == "bf16" and r1["label"] == "1x8192x8192 swap=True"
    text = bench.format_report(old)
    assert "789.2" in text and "small_m bf16 swap vs cuBLAS: 0.800" in text


@pytest.mark.parametrize("name", ["gemm_h200_issue5_final.json", "gemm_h200_issue5_splitk.json",
                                  "gemm_h200_issue3.json"])
def test_checked_in_results_load_and_format(name):
    path = ROOT / "bench" / "results" / name
    if not path.exists():
        pytest.skip(f"{name} not in this checkout")
    res = bench.load_results(path)
    text = bench.format_report(res)
    assert "geomean of ratios" in text
    if name == "gemm_h200_issue5_splitk.json":       # the numbers bench/NOTES.md quotes
        assert "main bf16 vs cuBLAS: 0.976 over 8 cases" in text
        assert "main fp16 vs cuBLAS: 0.973 over 8 cases" in text


def test_load_results_rejects_other_json(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps([{"kernel": "k"}]))
    with pytest.raises(ValueError, match="not a GEMM benchmark results file"):
        bench.load_results(p)


# ------------------------------------------------------------------ plot
def _png(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_from_synthetic_results(tmp_path):
    pytest.importorskip("matplotlib")
    out = bench.plot_results(_synthetic_results(), tmp_path / "p.png")
    _png(out)
    out2 = bench.plot_results(_synthetic_results(), tmp_path / "main.png", suites=["main"], title="t")
    _png(out2)
    with pytest.raises(ValueError, match="nothing to plot"):
        bench.plot_results(_synthetic_results(), tmp_path / "none.png", suites=["pdl"])


def test_plot_script_reads_the_checked_in_results(tmp_path):
    pytest.importorskip("matplotlib")
    path = ROOT / "bench" / "results" / "gemm_h200_issue5_final.json"
    if not path.exists():
        pytest.skip("gemm_h200_issue5_final.json not in this checkout")
    r = _run([str(ROOT / "bench" / "plot.py"), str(path), "-o", str(tmp_path / "f.png")], module=False)
    assert r.returncode == 0, r.stderr
    assert "layouts:" in r.stdout and "plot:" in r.stdout
    _png(tmp_path / "f.png")


def test_plot_without_matplotlib_says_so(tmp_path, monkeypatch):
    for mod in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "matplotlib", None)         # import matplotlib -> ImportError
    with pytest.raises(RuntimeError, match="pip install matplotlib"):
        bench.plot_results(_synthetic_results(), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()


# ------------------------------------------------------------------ no GPU
def test_bench_without_a_gpu_fails_cleanly(tmp_path):
    # CUDA_VISIBLE_DEVICES="" hides every GPU, so this runs the same on GPU machines.
    r = _run(["bench", "--shapes", "256x256x256", "--rounds", "1", "--iters", "1",
              "--json", str(tmp_path / "r.json")], {"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode != 0
    assert "rawcoop bench:" in r.stderr and "GPU" in r.stderr and "nothing was measured" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "r.json").exists()


def test_bench_bad_shape_exits_2_without_traceback():
    r = _run(["bench", "--shapes", "4096x4096"], {"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2
    assert "bad shape '4096x4096'" in r.stderr and "Traceback" not in r.stderr


def test_help_of_both_front_ends():
    r = _run(["bench", "--help"])
    assert r.returncode == 0 and "--shapes" in r.stdout and "--plot" in r.stdout and "--beta" in r.stdout
    r = _run([str(ROOT / "bench" / "gemm.py"), "--help"], module=False)
    assert r.returncode == 0 and "--suite" in r.stdout and "--variants" in r.stdout


# ------------------------------------------------------------------ issue 6: fp8 and tf32 suites
def test_fp8_tf32_suites_parse():
    assert "fp8" in bench.SUITES and "tf32" in bench.SUITES
    assert bench.parse_suites("fp8,tf32") == ["fp8", "tf32"]
    assert {"fp8", "tf32"} <= set(bench.parse_suites("all"))
    a = _bench_args(["--suite", "fp8,tf32"])
    assert a.suite == ["fp8", "tf32"]
    assert [str(s) for s in a.fp8_shapes] == list(bench.FP8_SHAPES)
    assert [str(s) for s in a.tf32_shapes] == list(bench.TF32_SHAPES)
    assert bench.FP8_SHAPES == ("4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "128x8192x8192",
                                "4096x7168x16384")
    assert bench.TF32_SHAPES == ("4096x4096x4096", "8192x8192x8192", "4096x14336x4096")
    a = _bench_args(["--suite", "main,fp8,tf32", "--dtype", "bfloat16,float16", "--fp8-shapes", "256x512x1024",
                     "--tf32-shapes", "64x64x36"])
    assert a.suite == ["main", "fp8", "tf32"] and a.dtypes == ["bf16", "fp16"]
    assert a.fp8_shapes == [(256, 512, 1024, 1)] and a.tf32_shapes == [(64, 64, 36, 1)]
    st = bench.settings_of(a)
    assert st["fp8_shapes"] == ["256x512x1024"] and st["tf32_shapes"] == ["64x64x36"]
    b = bench.build_parser("bench/gemm.py").parse_args(["--suite", "fp8"])      # bench/gemm.py --suite fp8
    assert b.suite == ["fp8"]


def test_fp8_block_option_parses():
    a = _bench_args(["--suite", "fp8"])
    assert not a.fp8_block and bench.settings_of(a)["fp8_block_shapes"] == []
    assert bench.FP8_BLOCK_SHAPES == ("4096x7168x16384", "4096x4096x7168", "128x7168x16384")
    a = _bench_args(["--suite", "fp8", "--fp8-block"])
    assert a.fp8_block and [str(s) for s in a.fp8_block_shapes] == list(bench.FP8_BLOCK_SHAPES)
    a = _bench_args(["--suite", "fp8", "--fp8-block", "--fp8-block-shapes", "256x512x1040"])
    assert a.fp8_block_shapes == [(256, 512, 1040, 1)]
    assert bench.settings_of(a)["fp8_block_shapes"] == ["256x512x1040"]


def test_peak_constants():
    assert bench.PEAK_FP8_TFLOPS == 1979.0 and bench.PEAK_TF32_TFLOPS == 494.5 and bench.PEAK_TFLOPS == 989.0
    assert "dense FP8" in bench.PEAK_FP8_LABEL and "H100/H200 SXM" in bench.PEAK_FP8_LABEL
    assert "dense TF32" in bench.PEAK_TF32_LABEL
    assert bench.PEAKS["e4m3"][0] == 1979.0 and bench.PEAKS["tf32"][0] == 494.5
    assert bench.PEAKS["bf16"][0] == bench.PEAKS["fp16"][0] == 989.0


def _fp8_tf32_results():
    fl8 = 2.0 * 8192 ** 3
    fp8 = [
        bench.make_row("fp8", "e4m3 8192x8192x8192 TN", fl8, [(1.0e-3, 1.1e-3), (1.0e-3, 1.3e-3), (1.0e-3, 1.2e-3)],
                       1, baseline=bench.BASE_SCALED_MM, peak=bench.PEAK_FP8_TFLOPS,
                       extra={"dtype": "e4m3", "shape": "8192x8192x8192", "layout": "TN", "batch": 1,
                              "rel_err": 3.1e-3, "err_vs": bench.BASE_SCALED_MM}),
        bench.make_row("fp8", "e4m3 8192x8192x8192 TN", fl8, [(1.0e-3, 0.9e-3)], 1,
                       baseline=bench.BASE_SCALED_MM_FAST, peak=bench.PEAK_FP8_TFLOPS,
                       extra={"dtype": "e4m3", "shape": "8192x8192x8192", "layout": "TN", "batch": 1,
                              "rel_err": 2.5e-3}),
        bench.make_row("fp8", "e4m3 128x8192x8192 TN", 2.0 * 128 * 8192 ** 2, [(1.0e-4, None), (1.1e-4, None)], 3,
                       baseline=bench.NO_BASELINE, peak=bench.PEAK_FP8_TFLOPS,
                       extra={"dtype": "e4m3", "shape": "128x8192x8192", "layout": "TN", "batch": 1,
                              "rel_err": 2.0e-3, "baseline_skipped": "import torch failed: RuntimeError: x"}),
    ]
    fl = 2.0 * 4096 ** 3
    tf32 = [
        bench.make_row("tf32", "tf32 4096x4096x4096 TN", fl, [(1.0e-3, 1.0e-3)], 3, baseline=bench.BASE_CUBLAS_TF32,
                       peak=bench.PEAK_TF32_TFLOPS,
                       extra={"dtype": "tf32", "shape": "4096x4096x4096", "layout": "TN", "batch": 1,
                              "rel_err": 4e-4}),
        bench.make_row("tf32", "tf32 4096x4096x4096 TN", fl, [(1.0e-3, 1.5e-3)], 3, baseline=bench.BASE_TORCH_TF32,
                       peak=bench.PEAK_TF32_TFLOPS,
                       extra={"dtype": "tf32", "shape": "4096x4096x4096", "layout": "TN", "batch": 1,
                              "rel_err": 5e-4}),
    ]
    res = _synthetic_results()
    res["rows"] = res["rows"] + fp8 + tf32
    return res


def test_fp8_peak_in_rows_and_percent_columns():
    res = _fp8_tf32_results()
    r = next(x for x in res["rows"] if x["baseline"] == bench.BASE_SCALED_MM)
    tf = 2.0 * 8192 ** 3 / 1e-3 / 1e12
    assert r["peak_tflops"] == 1979.0
    assert r["rawcoop_peak_frac"] == pytest.approx(tf / 1979.0)
    assert r["baseline_peak_frac"] == pytest.approx(2.0 * 8192 ** 3 / 1.2e-3 / 1e12 / 1979.0)
    assert r["ratio"] == pytest.approx(1.2) and r["ratio_min"] == pytest.approx(1.1)
    text = bench.format_report(res)
    row = next(line for line in text.splitlines() if "e4m3 8192x8192x8192 TN" in line and "fast" not in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == bench.BASE_SCALED_MM
    assert cells[6] == f"{tf / 1979:.1%}" and cells[6] != f"{tf / 989:.1%}"
    # a row without its own peak (an older file) takes its dtype's
    old = {k: v for k, v in r.items() if k != "peak_tflops"}
    assert bench.peak_of(old) == 1979.0
    assert bench.peak_of({"dtype": "tf32"}) == 494.5 and bench.peak_of({"dtype": "bf16"}, 900.0) == 900.0


def test_fp8_tf32_table_formatting():
    res = _fp8_tf32_results()
    text = bench.format_report(res)
    assert "fp8:" in text and "tf32:" in text and "main:" in text
    lines = text.splitlines()
    for name in (bench.BASE_SCALED_MM, bench.BASE_SCALED_MM_FAST, bench.BASE_CUBLAS_TF32, bench.BASE_TORCH_TF32):
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
    g = {(x["suite"], x["baseline"]): x for x in bench.geomeans(res["rows"])}
    assert g[("fp8", bench.BASE_SCALED_MM)]["count"] == 1 and ("fp8", "none") not in g
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
    assert bench.format_report(again) == text


def test_plot_with_fp8_and_tf32_suites(tmp_path):
    pytest.importorskip("matplotlib")
    res = _fp8_tf32_results()
    _png(bench.plot_results(res, tmp_path / "all.png"))
    _png(bench.plot_results(res, tmp_path / "fp8.png", suites=["fp8"]))
    _png(bench.plot_results(res, tmp_path / "tf32.png", suites=["fp8", "tf32"]))
    p = tmp_path / "r.json"
    p.write_text(json.dumps(res))
    r = _run([str(ROOT / "bench" / "plot.py"), str(p), "-o", str(tmp_path / "s.png"), "--suite", "fp8,tf32"],
             module=False)
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
    bench.plot_results(_fp8_tf32_results(), tmp_path / "p.png")
    peaks = {y for _, y, _ in lines}
    assert peaks == {989.0, 1979.0, 494.5}
    assert any("dense FP8" in lab and y == 1979.0 for _, y, lab in lines)
    assert any("dense TF32" in lab and y == 494.5 for _, y, lab in lines)


def test_e4m3_quantiser_matches_ml_dtypes():
    """The GPU quantises fp8 bench data with quantize_e4m3 (cupy); the same
    code on numpy must give ml_dtypes' bytes, ties and -0 included."""
    np = pytest.importorskip("numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    vals, codes = bench.e4m3_table()
    assert len(vals) == 253 and vals[0] == -448 and vals[-1] == 448 and np.all(np.diff(vals) > 0)
    x = np.random.default_rng(3).standard_normal(200_000).astype(np.float32)
    x *= np.float32(bench.E4M3_MAX / np.abs(x).max())
    mids = (vals[1:] + vals[:-1]) / 2                            # exact ties: round to even
    special = np.float32([0.0, -0.0, 1e-30, -1e-30, 448.0, -448.0, 2 ** -10, -2 ** -10, 2 ** -11, -2 ** -11])
    t = np.concatenate([x, mids, -mids, vals, special]).astype(np.float32)
    q = bench.quantize_e4m3(np, t)
    assert q.dtype == np.uint8
    ref = t.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(q, ref)
    assert np.array_equal(bench.quantize_e4m3(np, np.float32([1000.0, -1e9])), np.uint8([0x7E, 0xFE]))   # clipped
    # normal data scaled into range: no NaN codes, hardly any zeros, max |value| 448
    deq = q[:200_000].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.isfinite(deq).all() and np.abs(deq).max() == 448 and (deq == 0).mean() < 1e-3


# ------------------------------------------------------------------ the new suites on a numpy "GPU"
def _tf32_round(x):
    import numpy as np
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


class _FakeEvent:
    def record(self):
        import time
        self.t = time.perf_counter()

    def synchronize(self):
        pass


def _fake_cupy():
    """Just enough of CuPy, on numpy, for the fp8/tf32 suites' host logic,
    with the float32 compute-type switch of cupy._core._routines_linalg."""
    import types

    import numpy as np
    cp = types.ModuleType("cupy")
    for name in ("float16", "float32", "float64", "uint8", "uint16", "int16", "int32", "int64", "intp", "abs",
                 "empty", "clip", "searchsorted", "minimum", "where", "signbit", "ndarray", "asarray", "linalg",
                 "exp2", "repeat", "swapaxes"):
        setattr(cp, name, getattr(np, name))
    L = types.ModuleType("cupy._core._routines_linalg")
    for i, n in enumerate(("TBD", "DEFAULT", "PEDANTIC", "FP16", "FP32", "FP64", "BF16", "TF32")):
        setattr(L, "COMPUTE_TYPE_" + n, i)
    L.state = {"f": 0}
    L.get_compute_type = lambda dt: L.state["f"] or 1
    L.set_compute_type = lambda dt, ct: L.state.__setitem__("f", ct)
    L.compute_type_to_str = lambda ct: {1: "COMPUTE_TYPE_DEFAULT", 7: "COMPUTE_TYPE_TF32"}.get(ct, str(ct))
    core = types.ModuleType("cupy._core")
    core._routines_linalg = L
    cp._core = core

    def matmul(a, b, out=None):
        if a.dtype == np.float32 and L.state["f"] == 7:
            a, b = _tf32_round(a), _tf32_round(b)
        r = np.matmul(a, b)
        if out is None:
            return r
        out[...] = r
        return out
    cp.matmul = matmul

    class RandomState:
        def __init__(self, seed):
            self.g = np.random.default_rng(seed)

        def standard_normal(self, shape, dtype=np.float64):
            return self.g.standard_normal(shape, dtype=np.float32).astype(dtype)

        def uniform(self, low, high, shape):
            return self.g.uniform(low, high, shape)
    cp.random = types.SimpleNamespace(RandomState=RandomState)
    cp.cuda = types.SimpleNamespace(
        Event=_FakeEvent, get_elapsed_time=lambda s, e: (e.t - s.t) * 1e3,
        Device=lambda *a: types.SimpleNamespace(id=0, synchronize=lambda: None))
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    return cp, {"cupy": cp, "cupy._core": core, "cupy._core._routines_linalg": L}


def _fake_gemm(calls):
    import ml_dtypes
    import numpy as np
    lut = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)

    def gemm(a, b, *, out=None, out_dtype=None, a_format=None, b_format=None, scale_a=None, scale_b=None,
             precision=None, scale_mode=None, **kw):
        assert a.flags.c_contiguous and b.flags.f_contiguous, "TN: a row-major, b = bt.T"
        if scale_mode == "block":
            (m, k), n = a.shape, b.shape[1]
            assert scale_a.shape == (m, -(-k // 128)) and scale_a.strides[0] == 4, "SA (M, KB), M-major"
            assert scale_b.shape == (-(-n // 128), -(-k // 128)) and scale_b.dtype == np.float32
            sa = np.repeat(scale_a, 128, axis=1)[:, :k]
            sb = np.repeat(np.repeat(scale_b, 128, axis=0)[:n], 128, axis=1)[:, :k].T
            r = (lut[a] * sa) @ (lut[b] * sb)
            calls.append("fp8 block")
            out[...] = r.astype(out_dtype)
            return out
        if a.dtype == np.float16:                       # the main suite (fp16 in; out's type out)
            r = a.astype(np.float32) @ b.astype(np.float32)
            dt = np.dtype(out_dtype or np.float16)      # gemm's rule: out= must have out_dtype's type
            calls.append(("fp16", str(dt)))
        elif precision == "tf32":
            assert a.dtype == b.dtype == np.float32 and scale_a is None
            r = _tf32_round(a) @ _tf32_round(b)
            dt = np.float32
        else:
            assert a.dtype == b.dtype == np.uint8 and a_format == b_format == "e4m3"
            assert scale_a.dtype == scale_b.dtype == np.float32 and scale_a.size == scale_b.size == 1
            r = (lut[a] @ lut[b]) * (float(scale_a[0]) * float(scale_b[0]))
            dt = out_dtype
        if a.dtype != np.float16:
            calls.append(precision or "fp8")
        r = r.astype(dt)
        if out is None:
            return r
        assert out.dtype == r.dtype
        out[...] = r
        return out
    return gemm


class _T:
    """A fake torch tensor over a numpy array (views share memory)."""

    def __init__(self, x):
        self.x = x

    def view(self, dt):
        return _T(self.x.view(dt))

    def t(self):
        return _T(self.x.T)

    def __array__(self, dtype=None, copy=None):
        return self.x if dtype is None else self.x.astype(dtype)


def _fake_torch(refuse_out=False, refuse=False):
    import types

    import ml_dtypes
    import numpy as np
    t = types.ModuleType("torch")
    t.__version__ = "2.11.0+fake"
    t.float8_e4m3fn, t.bfloat16 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.bfloat16)
    t.int16, t.float32 = np.dtype(np.int16), np.dtype(np.float32)
    t.cuda = types.SimpleNamespace(is_available=lambda: True, empty_cache=lambda: None)
    t.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(fp32_precision="ieee")))
    t.as_tensor = lambda x, device=None: _T(np.asarray(x))
    t.tensor = lambda v, dtype=None, device=None: _T(np.array(v, dtype=dtype))
    t.calls = []

    def _scaled_mm(a, b, *, scale_a, scale_b, out_dtype, use_fast_accum=False, out=None):
        if refuse:
            raise RuntimeError("Multiplication of two Float8_e5m2 matrices is not supported")
        if out is not None and refuse_out:
            raise TypeError("_scaled_mm() got an unexpected keyword argument 'out'")
        assert a.x.dtype == b.x.dtype == t.float8_e4m3fn and b.x.flags.f_contiguous and a.x.flags.c_contiguous
        assert scale_a.x.shape == () and scale_a.x.dtype == np.float32
        t.calls.append(("_scaled_mm", use_fast_accum, out is not None))
        r = ((a.x.astype(np.float32) @ b.x.astype(np.float32)) * (float(scale_a.x) * float(scale_b.x)))
        r = r.astype(out_dtype)
        if out is None:
            return _T(r)
        out.x[...] = r
        return out
    t._scaled_mm = _scaled_mm

    def matmul(a, b, out=None):
        tf32 = t.backends.cuda.matmul.fp32_precision == "tf32"
        t.calls.append(("matmul", tf32))
        r = (_tf32_round(a.x) @ _tf32_round(b.x)) if tf32 else a.x @ b.x
        if out is None:
            return _T(r)
        out.x[...] = r
        return out
    t.matmul = matmul
    return t


@pytest.fixture
def fake_gpu(monkeypatch):
    """The fp8/tf32 suites' host code on numpy: fake cupy, rawcoop.gemm, torch, device info."""
    pytest.importorskip("ml_dtypes")
    import types

    import rawcoop
    from rawcoop import device
    cp, mods = _fake_cupy()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    calls = []
    monkeypatch.setattr(rawcoop, "gemm", _fake_gemm(calls))
    monkeypatch.setattr(device, "info", lambda i=0: types.SimpleNamespace(
        name="Fake H200", sm_count=132, l2_bytes=50 * 2 ** 20, cc=(9, 0)))

    def make(argv, torch=None):
        monkeypatch.setitem(sys.modules, "torch", torch)       # None: import torch raises ImportError
        args = bench.build_parser().parse_args(argv)
        return bench.Bench(args), calls
    return make


_FAKE_ARGS = ["--suite", "fp8,tf32", "--fp8-shapes", "64x48x32,16x32x64", "--tf32-shapes", "48x40x24",
              "--rounds", "2", "--iters", "2"]


def test_fp8_and_tf32_suites_on_a_fake_gpu(fake_gpu, capsys):
    torch = _fake_torch()
    b, calls = fake_gpu(_FAKE_ARGS, torch)
    b.fp8()
    b.tf32()
    out = capsys.readouterr().out
    rows = b.rows
    fp8 = [r for r in rows if r["suite"] == "fp8"]
    assert [(r["shape"], r["baseline"]) for r in fp8] == [
        ("64x48x32", bench.BASE_SCALED_MM), ("64x48x32", bench.BASE_SCALED_MM_FAST),
        ("16x32x64", bench.BASE_SCALED_MM), ("16x32x64", bench.BASE_SCALED_MM_FAST)]
    for r in fp8:
        assert r["dtype"] == "e4m3" and r["layout"] == "TN" and r["peak_tflops"] == 1979.0
        assert r["flops"] == 2.0 * int(r["shape"].split("x")[0]) * int(r["shape"].split("x")[1]) * \
            int(r["shape"].split("x")[2])
        assert r["ratio"] is not None and len(r["rounds"]) == 2 and r["sets"] == 8
        assert r["err_vs"] == r["baseline"] and r["rel_err"] < 1e-2     # both sides: the same bytes and scales
        assert r["rawcoop_err_fp32"] < 1e-2 and r["baseline_err_fp32"] < 1e-2
        assert 0.005 < r["scale_a"] < 0.05 and 0.005 < r["scale_b"] < 0.05   # amax/448 of normal data
        assert r["baseline_call"].startswith("torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype="
                                             "torch.bfloat16, use_fast_accum=") and r["baseline_call"].endswith(
                                                 "out=d)")
        assert r["use_fast_accum"] == (r["baseline"] == bench.BASE_SCALED_MM_FAST)
    assert ("_scaled_mm", True, True) in torch.calls and ("_scaled_mm", False, True) in torch.calls
    tf = [r for r in rows if r["suite"] == "tf32"]
    assert [r["baseline"] for r in tf] == [bench.BASE_CUBLAS_TF32, bench.BASE_TORCH_TF32]
    for r in tf:
        assert r["dtype"] == "tf32" and r["peak_tflops"] == 494.5 and r["rel_err"] < 1e-6
        assert r["baseline_tf32_evident"] and 5e-5 < r["baseline_err_fp64"] < 1e-2 and r["rawcoop_err_fp64"] < 1e-2
    assert tf[0]["cupy_compute_type"] == "COMPUTE_TYPE_TF32"
    assert tf[0]["cublas_compute_type"] == "CUBLAS_COMPUTE_32F_FAST_TF32"
    assert tf[1]["torch_setting"] == 'torch.backends.cuda.matmul.fp32_precision = "tf32"'
    assert ("matmul", True) in torch.calls and ("matmul", False) not in torch.calls
    # the switches are restored afterwards
    assert sys.modules["cupy._core._routines_linalg"].state["f"] in (0, 1)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert "CUBLAS_COMPUTE_32F_FAST_TF32" in out and "WARNING" not in out
    text = bench.format_report({"rows": rows})
    assert "fp8 e4m3 TN vs cuBLASLt _scaled_mm:" in text and "tf32 tf32 TN vs torch tf32:" in text
    assert calls.count("fp8") > 0 and calls.count("tf32") > 0


def test_fp8_suite_without_torch_times_rawcoop_alone(fake_gpu, capsys):
    b, _ = fake_gpu(_FAKE_ARGS, None)
    b.fp8()
    b.tf32()
    out = capsys.readouterr().out
    assert "SKIP the cuBLASLt baseline (import torch failed: " in out
    assert "SKIP the torch baseline" in out and "Traceback" not in out
    fp8 = [r for r in b.rows if r["suite"] == "fp8"]
    assert len(fp8) == 2 and all(r["baseline"] == bench.NO_BASELINE and r["ratio"] is None for r in fp8)
    assert all(r["baseline_skipped"].startswith("import torch failed") for r in fp8)
    assert all(r["err_vs"] == "fp32 GEMM of the dequantised inputs" and r["rel_err"] < 1e-2 for r in fp8)
    assert [r["baseline"] for r in b.rows if r["suite"] == "tf32"] == [bench.BASE_CUBLAS_TF32]
    assert "| none" in bench.format_report({"rows": b.rows})


def test_fp8_suite_when_scaled_mm_refuses_out_or_everything(fake_gpu, capsys):
    torch = _fake_torch(refuse_out=True)
    b, _ = fake_gpu(_FAKE_ARGS[:2] + ["--fp8-shapes", "32x16x32", "--rounds", "1", "--iters", "1"], torch)
    b.fp8()
    rows = [r for r in b.rows if r["suite"] == "fp8"]
    assert [r["baseline"] for r in rows] == [bench.BASE_SCALED_MM, bench.BASE_SCALED_MM_FAST]
    assert all("[out= refused" in r["baseline_call"] and r["rel_err"] < 1e-2 for r in rows)
    torch = _fake_torch(refuse=True)
    b, _ = fake_gpu(_FAKE_ARGS[:2] + ["--fp8-shapes", "32x16x32", "--rounds", "1", "--iters", "1"], torch)
    b.fp8()
    rows = [r for r in b.rows if r["suite"] == "fp8"]
    assert len(rows) == 1 and rows[0]["baseline"] == bench.NO_BASELINE
    assert rows[0]["baseline_skipped"].startswith("torch._scaled_mm refused: RuntimeError")


def test_fp8_block_rows_on_a_fake_gpu(fake_gpu, monkeypatch):
    import numpy as np

    import rawcoop
    monkeypatch.setattr(rawcoop, "mn_major_scales", lambda x: np.asfortranarray(x))
    b, calls = fake_gpu(["--suite", "fp8", "--fp8-shapes", "32x16x32", "--fp8-block", "--fp8-block-shapes",
                         "48x200x272", "--rounds", "1", "--iters", "1"], None)
    b.fp8()
    rows = [r for r in b.rows if r.get("scale_mode") == "block"]
    assert len(rows) == 1 and "fp8 block" in calls
    r = rows[0]
    assert r["suite"] == "fp8" and r["case"] == "e4m3 block 48x200x272 TN" and r["baseline"] == bench.NO_BASELINE
    assert r["peak_tflops"] == 1979.0 and r["flops"] == 2.0 * 48 * 200 * 272 and r["ratio"] is None
    assert r["rel_err"] < 1e-2 and r["err_vs"] == "fp32 GEMM of the dequantised inputs"
    assert 'scale_mode="block"' in r["rawcoop_call"]


def test_run_goes_on_after_a_failing_suite(fake_gpu, monkeypatch, capsys, tmp_path):
    b, _ = fake_gpu(_FAKE_ARGS, None)

    def broken(self):
        raise RuntimeError("boom")
    monkeypatch.setattr(bench.Bench, "fp8", broken)
    args = bench.build_parser().parse_args(_FAKE_ARGS + ["--json", str(tmp_path / "r.json")])
    res = bench.run(args)
    assert res["failed_suites"] == [{"suite": "fp8", "error": "RuntimeError: boom"}]
    assert [r["suite"] for r in res["rows"]] == ["tf32"]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["failed_suites"] and saved["peaks"]["e4m3"]["tflops"] == 1979.0
    assert saved["settings"]["fp8_shapes"] == ["64x48x32", "16x32x64"]
    assert "suite fp8 FAILED (RuntimeError: boom)" in capsys.readouterr().err


def test_cupy_compute_type_switch_and_torch_tf32_restore(monkeypatch):
    import types
    cp, mods = _fake_cupy()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    L = mods["cupy._core._routines_linalg"]
    with bench.cupy_f32_compute_type(cp, "TF32") as ct:
        assert ct == "COMPUTE_TYPE_TF32" and L.state["f"] == 7
    assert L.state["f"] in (0, 1)
    # legacy torch (no fp32_precision): the old flag, restored
    m = types.SimpleNamespace(allow_tf32=False)
    legacy = types.SimpleNamespace(backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=m)))
    with bench.torch_tf32(legacy) as how:
        assert how == "torch.backends.cuda.matmul.allow_tf32 = True" and m.allow_tf32 is True
    assert m.allow_tf32 is False


# ------------------------------------------------------------------ bench/next_session.sh
SCRIPT = ROOT / "bench" / "next_session.sh"


def test_next_session_script_is_executable_and_parses():
    assert SCRIPT.exists() and os.access(SCRIPT, os.X_OK)
    r = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


def _next_session_dry_run(tmp_path, *args):
    out = tmp_path / "out"
    env = dict(os.environ, OUT=str(out), PYTHON="python")
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, timeout=60,
                       env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert not out.exists(), "--dry-run must not create anything"
    text = r.stdout
    assert f"PYTHONPATH={ROOT}" in text and "PYTHONUNBUFFERED=1" in text
    # the time caps: the last step may end at the budget, no later
    caps = [int(c) for c in text.split("(caps ")[1].split(" s,")[0].split("+")]
    assert sum(caps) + 3 * len(caps) <= 590        # the device tool allows 600 s per command
    last = text.rsplit("at most ", 1)[1].split("s)")[0]
    assert int(last) + 3 <= 590
    return text, out


def _in_order(text, expected):
    pos = [text.find(e) for e in expected]
    assert all(p >= 0 for p in pos), [e for e, p in zip(expected, pos) if p < 0]
    assert pos == sorted(pos), "steps out of order"


def test_next_session_dry_run_prints_every_step(tmp_path):
    """Part 1 (the default): the focus files, then the two big end-to-end files; part 2: the rest of the
    GPU suite (parts 1 and 2 ignore nothing twice and leave nothing out), fuzz, sanitizer; part 3: bench,
    experiment."""
    focus = ("tests/test_narrow_box_gpu.py tests/test_misaligned_pitch_gpu.py tests/test_streamk_gpu.py "
             "tests/test_one_row_gpu.py "
             "tests/test_tune_gpu.py tests/test_regressions_gpu.py tests/test_fp8_tf32_gpu.py "
             "tests/test_fp8_block_gpu.py tests/test_pingpong_gpu.py tests/test_cluster_gpu.py")
    suite_a = "tests/test_gemm_full_gpu.py tests/test_gemm_gpu.py"
    text, out = _next_session_dry_run(tmp_path)
    _in_order(text, [
        "python -m rawcoop warmup --all --quiet",
        f"python -m pytest {focus} -q -ra --timeout 150 -p no:cacheprovider --durations=15",
        f"python -m pytest -m gpu {suite_a} -q -ra --timeout 150 -p no:cacheprovider --durations=15",
        f"python -m rawcoop cache export {out}/gpu_kernels.json",
    ])
    assert "if [ -f tests/gpu_kernels.json ]; then python -m rawcoop warmup --from tests/gpu_kernels.json" in text
    for name in ("env", "warmup", "focus", "suite-a", "kernels"):
        assert f"] {name} (cap " in text
    assert "bench/fuzz.py" not in text and "rawcoop bench" not in text and "--ignore" not in text
    assert text == _next_session_dry_run(tmp_path, "--part", "1")[0]

    text, out = _next_session_dry_run(tmp_path, "--part", "2")
    ignores = " ".join(f"--ignore={f}" for f in (focus + " " + suite_a).split())
    _in_order(text, [
        "python -m rawcoop warmup --all --quiet",
        f"python -m pytest -m gpu -q -ra --timeout 150 -p no:cacheprovider --durations=15 {ignores}",
        f"python bench/fuzz.py --count 1500 --seed 7 --log {out}/fuzz_cases.jsonl",
        f"python -m rawcoop cache export {out}/gpu_kernels.json",
        f"python bench/sanitize.py --quick --tools memcheck,racecheck,synccheck --timeout 150 --json {out}/san.json",
    ])
    for name in ("env", "warmup", "suite-b", "fuzz", "kernels", "sanitize"):
        assert f"] {name} (cap " in text
    assert "rawcoop bench" not in text and "] focus (cap " not in text
    # every GPU test file runs in exactly one of the two parts
    gpu_files = sorted(p.name for p in (ROOT / "tests").glob("test_*_gpu.py"))
    named = [f.split("/")[-1] for f in (focus + " " + suite_a).split()]
    assert len(named) == len(set(named)) and set(named) <= set(gpu_files)

    text, out = _next_session_dry_run(tmp_path, "--part", "3")
    _in_order(text, [
        "python -m rawcoop warmup --all --quiet",
        f"python -m rawcoop bench --suite main,fp8,tf32,small_m --fp8-block --dtype bfloat16,float16 --rounds 5 --iters 20 "
        f"--json {out}/bench.json --plot {out}/bench.png",
        f"python bench/host_overhead.py --json {out}/host.json --profile 2000",
        f"python bench/survey.py --dtype bfloat16 --seed 46 --json {out}/survey_bf16_s46.json",
        f"python bench/survey.py --dtype float16 --seed 46 --json {out}/survey_fp16_s46.json",
        "python bench/oracle.py --dtype bfloat16 --layout NT --random 24 --seed 55",
        "python bench/oracle.py --dtype float16 --layout TN --random 24 --seed 56",
        "python bench/rule_ab.py --rule configs.MISALIGNED_PAIR_1X2_RATIO=0.9/0.8",
    ])
    # every oracle command parses its --widths (a typo would cost the device call)
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import oracle
    for cmd in text.split("bench/oracle.py ")[1:]:
        words = cmd.split(";")[0].split()
        if "--widths" in words:
            assert oracle.parse_widths(words[words.index("--widths") + 1])
    # every rule_ab command's rule and cases parse (a typo would cost the device call)
    import rule_ab
    for cmd in text.split("bench/rule_ab.py ")[1:]:
        words = cmd.split(";")[0].split()
        rule_ab.parse_rule(words[words.index("--rule") + 1])
        cases = words[words.index("--cases") + 1].split(",")
        assert len(cases) >= 12 and all(rule_ab.parse_case(c) for c in cases)
    assert "tests/gpu_kernels.json" not in text           # part 3 warms --all only
    # every bench command of the part parses (a typo would cost the device call)
    for cmd in text.split("python -m rawcoop bench ")[1:]:
        argv = cmd.split(";")[0].split("\n")[0].split()
        bench.build_parser().parse_args(argv)
    # and every rule_ab command: its rules and cases parse
    import shlex

    from test_rule_ab import rule_ab
    for cmd in text.split("bench/rule_ab.py ")[1:]:
        args = rule_ab.build_parser().parse_args(shlex.split(cmd.split(";")[0].split("\n")[0]))
        assert all(rule_ab.parse_rule(r) for r in args.rule)
        assert all(rule_ab.parse_case(c) for c in args.cases.split(","))
    for name in ("env", "warmup", "bench", "experiment"):
        assert f"] {name} (cap " in text
    assert "-m pytest" not in text and "bench/fuzz.py" not in text     # the suite and fuzz are parts 1-2


def test_next_session_refuses_a_budget_below_its_caps(tmp_path):
    """A budget below the steps' caps would skip the first steps (stop 17: env and warm-up skipped, the
    tests then built every kernel themselves): refused before anything runs."""
    out = tmp_path / "out"
    for part in ("1", "2", "3"):
        env = dict(os.environ, OUT=str(out), PYTHON="python", NEXT_SESSION_BUDGET="300")
        r = subprocess.run(["bash", str(SCRIPT), "--part", part], capture_output=True, text=True, timeout=60,
                           env=env, cwd=str(tmp_path))
        assert r.returncode == 2 and "below the steps' caps" in r.stderr, (r.stdout, r.stderr)
        assert not out.exists() and "==========" not in r.stdout


def test_next_session_default_output_dir_and_bad_argument(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=60, env=env,
                       cwd=str(tmp_path))
    assert r.returncode == 0 and f"output under {tmp_path}/next_session_out" in r.stdout
    assert not (tmp_path / "next_session_out").exists()
    r = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "unknown argument" in r.stderr
    r = subprocess.run(["bash", str(SCRIPT), "--part", "4"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "--part takes 1, 2 or 3" in r.stderr


def test_fp8_suite_when_torch_breaks_on_the_gpu(fake_gpu, capsys):
    torch = _fake_torch()

    def broken(*a, **k):
        raise RuntimeError("CUDA error: initialization error")
    torch.as_tensor = broken
    b, _ = fake_gpu(_FAKE_ARGS[:2] + ["--fp8-shapes", "32x16x32", "--rounds", "1", "--iters", "1"], torch)
    b.fp8()
    rows = [r for r in b.rows if r["suite"] == "fp8"]
    assert len(rows) == 1 and rows[0]["baseline"] == bench.NO_BASELINE
    assert rows[0]["baseline_skipped"] == "torch baseline failed: RuntimeError: CUDA error: initialization error"
    assert "Traceback" not in capsys.readouterr().out


def test_time_calls_batch_and_per_call():
    """--timing batch: one event pair around the round's calls, per call;
    calls: the median of per-call pairs.  On a clock-event fake, a call that
    sleeps 2 ms measures ~2 ms either way, and both report host time per call."""
    import time
    import types
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Event=_FakeEvent, get_elapsed_time=lambda s, e: (e.t - s.t) * 1e3))
    seen = []

    def fn(i):
        seen.append(i)
        time.sleep(0.002)
    for timing in ("batch", "calls"):
        host = []
        t = bench.time_calls(cp, fn, 3, 5, host, timing)
        assert 0.0018 < t < 0.01 and len(host) == 1 and host[0] >= 0.0018
    assert seen == [0, 1, 2, 0, 1] * 2
    with pytest.raises(ValueError, match="timing must be one of"):
        bench.time_calls(cp, fn, 1, 1, None, "graph")
    args = bench.build_parser().parse_args(["--timing", "batch"])
    assert args.timing == "batch" and bench.settings_of(args)["timing"] == "batch"
    assert bench.build_parser().parse_args([]).timing == "calls"


def test_main_suite_out_dtype_float32(fake_gpu):
    """--out-dtype float32: rawcoop writes fp32 D (fp16 in), cupy.matmul keeps
    fp16; rows and settings say so; with --beta the option is refused."""
    b, calls = fake_gpu(["--suite", "main", "--dtype", "fp16", "--shapes", "64x48x32", "--out-dtype", "float32",
                         "--variants", "auto,swap=1", "--rounds", "2", "--iters", "2"])
    b.main()
    assert [r["case"] for r in b.rows] == ["fp16 64x48x32 TN out=fp32", "fp16 64x48x32 TN swap=1 out=fp32"]
    assert all(r["out_dtype"] == "float32" and r["rel_err"] < 1e-2 for r in b.rows)
    assert "vs_first" not in b.rows[0] and b.rows[1]["vs_variant"] == "auto"    # timed in the same rounds
    assert b.rows[0]["rounds"][0]["baseline_ms"] == b.rows[1]["rounds"][0]["baseline_ms"]
    assert set(calls) == {("fp16", "float32")}
    assert bench.settings_of(b.args)["out_dtype"] == "float32"
    calls.clear()
    b, calls = fake_gpu(["--suite", "main", "--dtype", "fp16", "--shapes", "64x48x32", "--rounds", "1",
                         "--iters", "1"])
    b.main()
    assert b.rows[0]["out_dtype"] == "fp16" and set(calls) == {("fp16", "float16")}
    assert bench.main(["--out-dtype", "float32", "--beta", "0.5"]) == 2


def test_variants_share_rounds():
    """More than one --variants entry: every variant and the baseline are
    timed in the same rounds (compare_variants), the variants' order rotated
    each round and the baseline first / last in turn; each later variant's
    row carries its time against the first's of the same rounds, and the
    report shows the column and a per-variant summary."""
    import time
    import types
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Event=_FakeEvent, get_elapsed_time=lambda s, e: (e.t - s.t) * 1e3,
        Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None)))
    order = []

    def sleeper(name, seconds):
        def fn(i):
            order.append(name)
            time.sleep(seconds)
        return fn
    fns = [sleeper("a", 0.004), sleeper("b", 0.002), sleeper("c", 0.008)]
    hosts = [{}, {}, {}]
    per = bench.compare_variants(cp, fns, sleeper("t", 0.004), 1, 4, 1, hosts, "batch")
    timed = order[3 * 4:]                           # after the warm-up's 3 x (a, b, c, t)
    assert timed == ["t", "a", "b", "c", "b", "c", "a", "t", "t", "c", "a", "b", "a", "b", "c", "t"]
    assert [len(p) for p in per] == [4, 4, 4]
    for r in range(4):                              # one baseline time per round, shared by every variant
        assert per[0][r][1] == per[1][r][1] == per[2][r][1] is not None
    assert hosts[0]["theirs"] is hosts[1]["theirs"] and len(hosts[2]["ours"]) == 4
    vs = bench.vs_first_fields(per[0], per[1], "auto")
    assert vs["vs_variant"] == "auto" and 1.5 < vs["vs_first"] < 2.5 and vs["vs_first_min"] <= vs["vs_first_max"]
    assert 0.3 < bench.vs_first_fields(per[0], per[2], "auto")["vs_first"] < 0.7
    alone = bench.compare_variants(cp, fns[:2], None, 1, 2, 1, None, "batch")
    assert all(tt is None for p in alone for _, tt in p)

    b = bench.Bench.__new__(bench.Bench)
    b.cp, b.rows, b.on_row = cp, [], None
    b.args = types.SimpleNamespace(rounds=3, iters=1, timing="batch")
    extra = {"dtype": "bf16", "shape": "64x64x64", "layout": "TN", "batch": 1, "beta": 0.0}
    rows = b.record_variants("main", [("auto", "bf16 64x64x64 TN", fns[0], dict(extra, variant="auto")),
                                      ("block_n=128", "bf16 64x64x64 TN block_n=128", fns[1],
                                       dict(extra, variant="block_n=128"))],
                             2.0 * 64 ** 3, sleeper("t", 0.004), 1)
    assert "vs_first" not in rows[0] and rows[1]["vs_variant"] == "auto" and rows[1]["vs_first"] > 1.2
    assert len(rows[1]["rounds"]) == 3 and rows[0]["ratio"] is not None
    text = bench.format_report({"rows": rows})
    assert "vs first variant (same rounds)" in text
    assert "main bf16 block_n=128 vs auto (cuBLAS rows): " in text and "over 1 case, faster on 1" in text
    one = b.record_variants("main", [("auto", "bf16 64x64x64 TN", fns[0], dict(extra, variant="auto"))],
                            2.0 * 64 ** 3, None, 1)
    assert "vs_first" not in one[0] and "vs first variant" not in bench.format_report({"rows": one})


def test_variants_in_the_fp8_tf32_and_block_suites(fake_gpu, monkeypatch):
    """fp8 (with and without its torch baseline), --fp8-block and tf32 rows
    of two variants: both timed in the same rounds, the second's row with
    vs_first, each with its own output's error."""
    import numpy as np

    import rawcoop
    monkeypatch.setattr(rawcoop, "mn_major_scales", lambda x: np.asfortranarray(x))
    argv = ["--suite", "fp8,tf32", "--fp8-shapes", "64x48x32", "--tf32-shapes", "48x40x24", "--fp8-block",
            "--fp8-block-shapes", "48x200x272", "--variants", "auto,block_n=128", "--rounds", "2", "--iters", "1"]
    for torch in (_fake_torch(), None):
        b, _ = fake_gpu(argv, torch)
        b.fp8()
        b.tf32()
        pairs = list(zip(b.rows[::2], b.rows[1::2]))
        # fp8: one pair per baseline (default, fast-accum; none without torch), one block-scaled pair,
        # tf32: cuBLAS and torch (cuBLAS alone without torch)
        assert len(b.rows) % 2 == 0 and len(pairs) == (2 + 1 + 2 if torch else 1 + 1 + 1)
        for first, second in pairs:
            assert first["variant"] == "auto" and second["variant"] == "block_n=128"
            assert second["case"] == first["case"] + " block_n=128" and second["vs_variant"] == "auto"
            assert "vs_first" not in first and second["vs_first"] > 0 and second["rel_err"] < 1e-2
            assert len(first["rounds"]) == len(second["rounds"]) == 2
            if first["ratio"] is not None:       # the same baseline time each round
                assert [r["baseline_ms"] for r in first["rounds"]] == [r["baseline_ms"] for r in second["rounds"]]
        assert "vs first variant (same rounds)" in bench.format_report({"rows": b.rows})


def test_row_without_baseline_prints_the_spread_of_its_rounds(capsys):
    """A row timed alone (block-scaled fp8) prints its rounds' TFLOP/s range next to the median: stop 32's
    rounds were bimodal (0.808 and 0.95 ms), which the median alone hides."""
    from bench import harness
    b = bench.Bench.__new__(bench.Bench)
    b.rows, b.on_row = [], None
    flops = 2.0 * 4096 * 7168 * 16384
    row = bench.make_row("fp8", "e4m3 block 4096x7168x16384 TN", flops, [(0.808e-3, None), (0.95e-3, None),
                                                                        (0.85e-3, None)], 1, baseline="none")
    b._keep(row, {}, "none")
    out = capsys.readouterr().out
    assert "(no baseline: " in out and "rounds 1012.7-1190.7 TF/s" in out
    assert row["ratio"] is None and b.rows == [row]
