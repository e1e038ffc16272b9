"""CPU tests of bench/power.py (clock and power per GEMM; NVML is only touched on a GPU machine)."""
import time

import pytest
from gpu_helpers import bench_script


def _power():
    return bench_script("power")


def test_arguments():
    p = _power()
    args = p.parse_args(["--shapes", "4096x4096x4096,1024x1024x65536", "--variants", "auto,block_n=128:splits=2"])
    assert args.shapes == [(4096, 4096, 4096), (1024, 1024, 65536)]
    assert args.variants == [("auto", {}), ("block_n=128:splits=2", {"_block_n": 128, "_splits": 2})]
    assert args.rounds == 3 and args.seconds == 0.8 and not args.no_cublas and args.dtype == "bfloat16"
    for bad in (["--shapes", "4096x4096"], ["--shapes", "64x64x64", "--variants", "bogus"],
                ["--shapes", "64x64x64", "--seconds", "0"], ["--shapes", "64x64x64", "--rounds", "0"], []):
        with pytest.raises(SystemExit):
            p.parse_args(bad)


def test_window_stats_drop_the_ramp():
    p = _power()
    samples = [(1000, 100.0, 30)] * 2 + [(1500, 690.0, 40)] * 8     # the first fifth is the ramp
    st = p.window_stats(samples)
    assert st == {"mhz": 1500, "w": 690.0, "temp": 40}
    assert p.window_stats([(1200, 500.0, 35)]) == {"mhz": 1200, "w": 500.0, "temp": 35}


def test_summarise_work_and_power_per_clock():
    p = _power()
    rounds = [{"s_per_call": 2e-4, "mhz": 1500.0, "w": 690.0}, {"s_per_call": 1e-4, "mhz": 1400.0, "w": 700.0},
              {"s_per_call": 3e-4, "mhz": 1600.0, "w": 680.0}]
    row = p.summarise((1, 2, 3), "auto", 2e11, rounds)
    assert row["us"] == 200.0 and row["tflops"] == 1000.0 and row["mhz"] == 1500 and row["w"] == 690
    assert row["tflops_per_ghz"] == round(1000.0 / 1500 * 1000, 1) and row["w_per_ghz"] == 460.0
    assert row["shape"] == [1, 2, 3] and row["side"] == "auto" and row["rounds"] is rounds


def test_sampler_collects_until_stopped():
    p = _power()

    class FakeNvml:
        n = 0

        def sample(self):
            FakeNvml.n += 1
            return (1500, 690.0, 40)
    s = p.Sampler(FakeNvml(), period=0.001)
    s.start()
    time.sleep(0.05)
    got = s.stop()
    assert len(got) >= 3 and all(x == (1500, 690.0, 40) for x in got)
    n = FakeNvml.n
    time.sleep(0.01)
    assert FakeNvml.n == n                      # stopped
