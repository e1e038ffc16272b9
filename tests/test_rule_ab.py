"""CPU: bench/rule_ab.py (A/B of a host rule constant on automatic plans):
argument parsing with clear errors, the rule's constants set for each side's
plans and restored, alternating timed rounds, errors against float64, the
summary, and a clean exit without a GPU.  The GPU side is a numpy fake."""
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import gpu_helpers
from rawcoop import gemm_configs as gc
from rawcoop import scheduler

ROOT = Path(__file__).resolve().parents[1]


rule_ab = gpu_helpers.bench_script("rule_ab")


def test_parse_case():
    assert rule_ab.parse_case("bf16:1024x5760x2048") == ("bf16", "TN", 1024, 5760, 2048)
    assert rule_ab.parse_case(" fp16:nn:8x16x24 ") == ("fp16", "NN", 8, 16, 24)
    assert rule_ab.parse_case("e4m3:TN:64x64x128") == ("e4m3", "TN", 64, 64, 128)
    for bad, needle in [("bf16", "KIND:MxNxK"), ("int8:8x8x8", "kind must be one of"),
                        ("bf16:XY:8x8x8", "layout must be one of"), ("tf32:NN:8x8x8", "runs TN only"),
                        ("bf16:8x8", "MxNxK with integers"), ("bf16:0x8x8", "positive"),
                        ("e4m3:8x8x24", "multiple of 16"), ("bf16:8x8x12", "multiple of 8"),
                        ("tf32:8x8x6", "multiple of 4")]:
        with pytest.raises(ValueError, match=needle):
            rule_ab.parse_case(bad)


def test_parse_rule():
    saved = dict(gc.PINGPONG_ONE_WAVE_K_BLOCKS)
    mod, name, a, b = rule_ab.parse_rule("gemm_configs.WIDE_FILL_MIN_N=2048/4096")
    assert mod is gc and name == "WIDE_FILL_MIN_N" and (a, b) == (2048, 4096) and type(a) is int
    assert rule_ab.parse_rule("gemm_configs.PINGPONG_ONE_WAVE_TAIL=(0.1,0.9)/(0.2, 0.8)")[2:] == ((0.1, 0.9),
                                                                                                  (0.2, 0.8))
    assert rule_ab.parse_rule("gemm_configs.PINGPONG_ONE_WAVE_K_BLOCKS={0: 32}/{0: 32, 3: 48}")[2:] == (
        {0: 32}, {0: 32, 3: 48})
    mod, name, a, b = rule_ab.parse_rule("gemm_configs.SWAP_WAVES_RATIO=0.91/1")
    assert (a, b) == (0.91, 1.0) and type(b) is float
    assert rule_ab.parse_rule("scheduler.TAIL_MAX_SPLITS=4/16")[0] is scheduler
    for bad, needle in [("gemm_configs.X", "module.NAME=A/B"), ("nomod.X=1/2", "no module rawcoop.nomod"),
                        ("gemm_configs.NOPE=1/2", "has no constant NOPE"),
                        ("gemm_configs.SWAP_WAVES_RATIO=abc/1", "not a literal"),
                        ("gemm_configs.PINGPONG_ONE_WAVE_TAIL=(0.1,0.9)/0.5", "does not match"),
                        ("gemm_configs.PINGPONG_ONE_WAVE_K_BLOCKS=0/{}", "does not match"),
                        ("gemm_configs.WIDE_FILL_MIN_N=0/'x'", "does not match")]:
        with pytest.raises(ValueError, match=needle):
            rule_ab.parse_rule(bad)
    assert gc.PINGPONG_ONE_WAVE_K_BLOCKS == saved        # parsing changes nothing


def _fake_plans(monkeypatch, slow_when):
    """rawcoop.gemm._plan_for on numpy: a plan whose configuration follows
    the rule constant at build time; the 128x256 plan's calls sleep 2 ms, the
    ping-pong plan's 1 ms, and both compute a @ b (the B side rounded to
    float32 first, so its error is larger)."""
    import importlib

    import numpy as np
    gemm = importlib.import_module("rawcoop.gemm")      # the module (rawcoop.gemm is also the function)

    import ml_dtypes
    value_of = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)

    class Plan:
        def __init__(self, a, b, wide, kw):
            if kw.get("a_format") == "e4m3":        # the kernel's view: codes x per-tensor scales
                a, b = value_of[a] * kw["scale_a"], value_of[b] * kw["scale_b"]
            self.a, self.b, self.wide = a, b, wide
            self.cfg = gc.GemmConfig(256 if wide else 128, gc.BF16, pingpong=not wide)
            self.kernel = types.SimpleNamespace(spec=self.cfg.spec)   # (rule_ab compares the kernels too)
            self.decomposition = scheduler.Decomposition(tiles=184 if wide else 360, k_blocks=32,
                                                         tiles_dp=132 if wide else 360, splits=2 if wide else 1)

        def run(self, cp, out):
            time.sleep(0.002 if self.wide else 0.001)
            r = self.a.astype(np.float64) @ self.b.astype(np.float64)
            out[...] = r if self.wide else r.astype(np.float32)
    built = []

    def plan_for(a, b, **kw):
        built.append((gc.WIDE_FILL_MIN_N, kw))
        return Plan(a, b, gc.WIDE_FILL_MIN_N == slow_when, kw)
    monkeypatch.setattr(gemm, "_plan_for", plan_for)
    return built


def _fake_bench(monkeypatch):
    """A rawcoop.bench.Bench on test_bench_cli's numpy CuPy (1 MiB of L2: 8 operand sets)."""
    from test_bench_cli import _fake_cupy

    from rawcoop import bench, device
    _, mods = _fake_cupy()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(device, "info", lambda i=0: types.SimpleNamespace(
        name="Fake H200", sm_count=132, l2_bytes=1 << 20, cc=(9, 0)))
    return bench.Bench(types.SimpleNamespace())


def test_run_case_on_a_numpy_gpu(monkeypatch):
    b = _fake_bench(monkeypatch)
    built = _fake_plans(monkeypatch, slow_when=0)
    saved = gc.WIDE_FILL_MIN_N
    rules = [rule_ab.parse_rule("gemm_configs.WIDE_FILL_MIN_N=0/2048")]
    row = rule_ab.run_case(b, ("bf16", "NT", 48, 40, 32), rules, 3, 2)
    assert gc.WIDE_FILL_MIN_N == saved                            # restored
    sets = row["sets"]
    assert sets == 8 and [v for v, _ in built] == [0] * sets + [2048] * sets
    assert row["cfg_a"] == "128x256" and row["cfg_b"] == "128x128 pp" and "splits=2" in row["dec_a"]
    assert 0 < row["err_a"] < 5e-3 and 0 < row["err_b"] < 5e-3    # the bf16 output's rounding
    assert len(row["rounds"]) == 3 and 1.4 < row["b_vs_a"] < 2.6 and row["b_vs_a_min"] <= row["b_vs_a_max"]
    assert row["a_tflops"] < row["b_tflops"]
    line = rule_ab.format_row(row)
    assert line.startswith("bf16:NT:48x40x32") and "B/A" in line
    same = dict(row, same_plan=True)
    assert "same plan: not timed" in rule_ab.format_row(same)
    text = rule_ab.summary([row, same])
    assert "over 1 changed case, B faster on 1; 1 unchanged" in text
    assert rule_ab.summary([same]) == "no case changed its plan"
    # fp8 and tf32 operands: gemm's keywords, exact float64 products
    for kind in ("e4m3", "tf32"):
        built.clear()
        row = rule_ab.run_case(b, (kind, "TN", 32, 16, 32), rules, 1, 1)
        kw = built[0][1]
        assert (kw.get("precision") == "tf32") if kind == "tf32" else (kw["a_format"] == "e4m3" and
                                                                        kw["scale_a"] > 0 and kw["scale_b"] > 0)
        assert row["err_a"] < (1e-6 if kind == "tf32" else 5e-3)     # the output's rounding (float32 / bf16)


def test_same_plan_is_not_timed(monkeypatch):
    b = _fake_bench(monkeypatch)
    _fake_plans(monkeypatch, slow_when=12345)     # both sides build the same ping-pong plan
    row = rule_ab.run_case(b, ("fp16", "TN", 16, 16, 16), [rule_ab.parse_rule(
        "gemm_configs.WIDE_FILL_MIN_N=0/2048")], 2, 2)
    assert row["same_plan"] and "b_vs_a" not in row


def test_command_line_without_a_gpu_and_with_bad_arguments():
    def run(*args):
        return subprocess.run([sys.executable, str(ROOT / "bench" / "rule_ab.py"), *args], capture_output=True,
                              text=True, timeout=120, cwd=str(ROOT))
    p = run("--rule", "gemm_configs.NOPE=1/2", "--cases", "bf16:8x8x8")
    assert p.returncode == 2 and "has no constant NOPE" in p.stderr and "Traceback" not in p.stderr
    p = run("--rule", "gemm_configs.WIDE_FILL_MIN_N=0/2048", "--cases", "bf16:8x8x7")
    assert p.returncode == 2 and "multiple of 8" in p.stderr
    p = run("--rule", "gemm_configs.WIDE_FILL_MIN_N=0/2048", "--cases", "bf16:8x8x8", "--rounds", "0")
    assert p.returncode == 2
    p = run("--help")
    assert p.returncode == 0 and "module.NAME=A/B" in p.stdout
    p = run("--rule", "gemm_configs.WIDE_FILL_MIN_N=0/2048", "--cases", "bf16:8x8x8")
    if p.returncode == 1:          # no GPU here (CI): one line, no traceback
        assert p.stderr.startswith("rule_ab: no usable GPU") and "Traceback" not in p.stderr
