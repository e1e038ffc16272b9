"""CPU: bench/gemm.py's command line (options, shape lists, variants, defaults),
its runs on a machine without a GPU, and every bench script's --help."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import options

ROOT = Path(__file__).resolve().parents[2]
GEMM = ROOT / "bench" / "gemm.py"


def _run(script, args, env_extra=None, timeout=120):
    """``python <script> <args>`` from the repository root."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=str(ROOT))


def _args(argv):
    """bench/gemm.py's options for ``argv``, through its parser."""
    return options.build_parser().parse_args(argv)


# ------------------------------------------------------------------ parsing
def test_parse_shape():
    assert options.parse_shape("4096x2048x1024") == (4096, 2048, 1024, 1)
    s = options.parse_shape(" 64X128x256x16 ")
    assert s == (64, 128, 256, 16) and s.batch == 16
    assert str(s) == "64x128x256x16" and str(options.parse_shape("1x2x3")) == "1x2x3"
    assert options.parse_shape("2x3x4x5").flops == 2.0 * 2 * 3 * 4 * 5


@pytest.mark.parametrize("bad", ["4096x4096", "4096", "axbxc", "0x8x8", "8x-8x8", "8x8x8x8x8", "", "8x8x8.5"])
def test_parse_shape_rejects_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="MxNxK"):
        options.parse_shape(bad)


def test_parse_lists():
    assert options.parse_shapes("1x2x3, 4x5x6x7") == [(1, 2, 3, 1), (4, 5, 6, 7)]
    assert options.parse_dtypes("float16,bfloat16") == ["fp16", "bf16"]
    assert options.parse_dtypes("bf16,bfloat16") == ["bf16"]
    assert options.parse_layouts("tn,NT") == ["TN", "NT"]
    assert options.parse_suites("all") == list(options.SUITES)
    assert options.parse_suites("main,pdl") == ["main", "pdl"]
    assert options.parse_variants("auto,256:8,128:8:0,256:8:4:2,block_n=128:pingpong=1") == [
        ("auto", {}), ("256:8", {"_block_n": 256, "_group": 8}), ("128:8:0", {"_block_n": 128, "_group": 8}),
        ("256:8:4:2", {"_block_n": 256, "_group": 8, "_splits": 4, "_cluster": 2}),
        ("block_n=128:pingpong=1", {"_block_n": 128, "_pingpong": 1})]
    assert options.parse_variants("256:8:0:1x2,cluster=2x1:block_n=128") == [
        ("256:8:0:1x2", {"_block_n": 256, "_group": 8, "_cluster": (1, 2)}),
        ("cluster=2x1:block_n=128", {"_cluster": (2, 1), "_block_n": 128})]
    for fn, bad, msg in ((options.parse_dtypes, "float32", "dtype"), (options.parse_layouts, "TX", "layout"),
                         (options.parse_suites, "main,fast", "suite"), (options.parse_variants, "256:x", "variant"),
                         (options.parse_variants, "cluster=1y2", "variant"),
                         (options.parse_shapes, ",", "shape")):
        with pytest.raises(ValueError, match=msg):
            fn(bad)


def test_defaults():
    a = _args([])
    assert a.suite == ["main"] and a.dtypes == ["bf16", "fp16"] and a.layouts == ["TN"]
    assert [str(s) for s in a.shapes] == list(options.DEFAULT_SHAPES)
    assert a.rounds == 5 and a.iters == 20 and a.beta == 0.0 and a.variants == [("auto", {})]
    assert a.json is None and a.plot is None and a.timing == "calls"


def test_options():
    a = _args(["--dtype", "float16,bfloat16", "--shapes", "128x256x64,64x64x64x4", "--layout", "NT,TT",
               "--beta", "0.5", "--suite", "main,layouts", "--rounds", "3", "--iters", "7",
               "--json", "r.json", "--plot", "r.png", "--variants", "auto,128:8"])
    assert a.dtypes == ["fp16", "bf16"]
    assert a.shapes == [(128, 256, 64, 1), (64, 64, 64, 4)]
    assert a.layouts == ["NT", "TT"] and a.beta == 0.5 and a.suite == ["main", "layouts"]
    assert (a.rounds, a.iters, a.json, a.plot) == (3, 7, "r.json", "r.png")
    assert options.settings_of(a)["shapes"] == ["128x256x64", "64x64x64x4"]
    b = _args(["--dtypes", "bf16", "--layouts", "TN"])         # the plural spellings
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
def test_rejects_bad_arguments(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        _args(argv)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err




# ------------------------------------------------------------------ no GPU
def test_without_a_gpu_it_fails_cleanly(tmp_path):
    # CUDA_VISIBLE_DEVICES="" hides every GPU, so this runs the same on GPU machines.
    r = _run(GEMM, ["--shapes", "256x256x256", "--rounds", "1", "--iters", "1", "--json", str(tmp_path / "r.json")],
             {"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 1
    assert "bench/gemm.py:" in r.stderr and "GPU" in r.stderr and "nothing was measured" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "r.json").exists()


def test_bad_shape_exits_2_without_traceback():
    r = _run(GEMM, ["--shapes", "4096x4096"], {"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2
    assert "bad shape '4096x4096'" in r.stderr and "Traceback" not in r.stderr


def test_options_that_cannot_run_together_exit_2(tmp_path):
    from bench import harness
    assert harness.main(["--out-dtype", "float32", "--beta", "0.5"]) == 2
    assert harness.main(["--json", str(tmp_path / "no" / "r.json")]) == 2


def test_help():
    r = _run(GEMM, ["--help"])
    assert r.returncode == 0
    for flag in ("--suite", "--shapes", "--variants", "--plot", "--beta", "--fp8-block", "--timing"):
        assert flag in r.stdout
    assert r.stdout.startswith("usage: bench/gemm.py")


SCRIPTS = ("gemm", "plot", "survey", "oracle", "host_overhead", "timeline", "ncu_compare", "sanitize", "fuzz")


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_bench_script_has_help(name):
    r = _run(ROOT / "bench" / f"{name}.py", ["--help"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: bench/{name}.py") and "Traceback" not in r.stderr


@pytest.mark.parametrize("name,argv", [
    ("host_overhead", []), ("oracle", ["--random", "1"]), ("survey", ["--set", "random", "--random", "1"]),
    ("timeline", ["--shape", "64x64x64"]), ("sanitize", ["--driver", "--quick"])])
def test_gpu_scripts_without_a_gpu_say_so(name, argv):
    r = _run(ROOT / "bench" / f"{name}.py", argv, {"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"bench/{name}.py: " in r.stderr and "GPU" in r.stderr and "Traceback" not in r.stderr + r.stdout


# ------------------------------------------------------------------ fp8 and tf32 suites
def test_fp8_tf32_suites_parse():
    assert "fp8" in options.SUITES and "tf32" in options.SUITES
    assert options.parse_suites("fp8,tf32") == ["fp8", "tf32"]
    assert {"fp8", "tf32"} <= set(options.parse_suites("all"))
    a = _args(["--suite", "fp8,tf32"])
    assert a.suite == ["fp8", "tf32"]
    assert [str(s) for s in a.fp8_shapes] == list(options.FP8_SHAPES)
    assert [str(s) for s in a.tf32_shapes] == list(options.TF32_SHAPES)
    assert options.FP8_SHAPES == ("4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "128x8192x8192",
                                  "4096x7168x16384")
    assert options.TF32_SHAPES == ("4096x4096x4096", "8192x8192x8192", "4096x14336x4096")
    a = _args(["--suite", "main,fp8,tf32", "--dtype", "bfloat16,float16", "--fp8-shapes", "256x512x1024",
               "--tf32-shapes", "64x64x36"])
    assert a.suite == ["main", "fp8", "tf32"] and a.dtypes == ["bf16", "fp16"]
    assert a.fp8_shapes == [(256, 512, 1024, 1)] and a.tf32_shapes == [(64, 64, 36, 1)]
    st = options.settings_of(a)
    assert st["fp8_shapes"] == ["256x512x1024"] and st["tf32_shapes"] == ["64x64x36"]


def test_fp8_block_option_parses():
    a = _args(["--suite", "fp8"])
    assert not a.fp8_block and options.settings_of(a)["fp8_block_shapes"] == []
    assert options.FP8_BLOCK_SHAPES == ("4096x7168x16384", "4096x4096x7168", "128x7168x16384")
    a = _args(["--suite", "fp8", "--fp8-block"])
    assert a.fp8_block and [str(s) for s in a.fp8_block_shapes] == list(options.FP8_BLOCK_SHAPES)
    a = _args(["--suite", "fp8", "--fp8-block", "--fp8-block-shapes", "256x512x1040"])
    assert a.fp8_block_shapes == [(256, 512, 1040, 1)]
    assert options.settings_of(a)["fp8_block_shapes"] == ["256x512x1040"]
