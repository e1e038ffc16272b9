"""CPU: the benchmark's command line, shape parsing, table/geomean formatting,
the plot, and ``python -m rawcoop bench`` without a GPU."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rawcoop import bench, cli

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
    for fn, bad, msg in ((bench.parse_dtypes, "float32", "dtype"), (bench.parse_layouts, "TX", "layout"),
                         (bench.parse_suites, "main,fast", "suite"), (bench.parse_variants, "256:x", "variant"),
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
