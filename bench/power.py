"""Clock and power while each GEMM runs back to back: rawcoop variants and
cupy.matmul (cuBLAS), bf16/fp16, with NVML sampled every 10 ms.

    PYTHONPATH=$PWD python bench/power.py --shapes 4096x4096x4096,1024x1024x65536 \\
        --variants auto,block_n=128 --seconds 0.8 --rounds 3 --json power.json

Why (bench/NOTES.md, stop 14): on the H200 every large GEMM, cuBLAS's too,
runs at the 700 W board limit with the SM clock well under its maximum, so a
kernel's speed is (work per clock) x (the clock its power draw allows).  Two
kernels can tie in time for opposite reasons; this separates them.  Per
(shape, side, round): ``--seconds`` of back-to-back calls on inputs rotated
to >= 3x L2; the first fifth of the samples is dropped (clock ramp).  One
JSON line per (shape, side) with the medians over rounds: us per call,
TFLOP/s, SM MHz, W, TFLOP/s per GHz (work per clock) and W per GHz (power per
clock).  NVML comes from libnvidia-ml.so.1 through ctypes (no Python package
needed).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0


def parse_args(argv=None):
    from rawcoop.bench import parse_shapes, parse_variants
    ap = argparse.ArgumentParser(prog="bench/power.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", required=True, help="MxNxK list")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    ap.add_argument("--variants", default="auto", help="rawcoop variants, the bench's syntax (auto, block_n=128, ...)")
    ap.add_argument("--no-cublas", action="store_true", help="rawcoop only")
    ap.add_argument("--seconds", type=float, default=0.8, help="per side and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", type=int, default=0, help="NVML index of the GPU (CuPy's current device)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    try:
        args.shapes = [(s.m, s.n, s.k) for s in parse_shapes(args.shapes)]
        args.variants = parse_variants(args.variants)
    except ValueError as e:
        ap.error(str(e))
    if args.seconds <= 0 or args.rounds < 1:
        ap.error("--seconds must be > 0 and --rounds >= 1")
    return args


class Nvml:
    """SM clock (MHz), board power (W) and temperature (C) of one GPU."""

    def __init__(self, index: int = 0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)) != 0:
            raise RuntimeError(f"no NVML device {index}")

    def sample(self) -> tuple[int, float, int]:
        clk, mw, temp = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(clk))
        self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw))
        self.lib.nvmlDeviceGetTemperature(self.handle, NVML_TEMPERATURE_GPU, ctypes.byref(temp))
        return clk.value, mw.value / 1000.0, temp.value


class Sampler:
    """Samples ``nvml`` every ``period`` seconds in a thread between start() and stop()."""

    def __init__(self, nvml, period: float = 0.01):
        self.nvml, self.period, self.samples, self._on, self._thread = nvml, period, [], False, None

    def start(self):
        self.samples, self._on = [], True

        def loop():
            while self._on:
                self.samples.append(self.nvml.sample())
                time.sleep(self.period)
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> list:
        self._on = False
        self._thread.join()
        return self.samples


def window_stats(samples) -> dict:
    """Mean SM MHz, W and the last temperature of one window, its first fifth dropped."""
    kept = samples[len(samples) // 5:] or samples
    return {"mhz": statistics.mean(s[0] for s in kept), "w": statistics.mean(s[1] for s in kept),
            "temp": kept[-1][2]}


def summarise(shape, side, flops, rounds) -> dict:
    """Medians over rounds of one side's windows ({"s_per_call", "mhz", "w"})."""
    t = statistics.median(r["s_per_call"] for r in rounds)
    mhz = statistics.median(r["mhz"] for r in rounds)
    w = statistics.median(r["w"] for r in rounds)
    tflops = flops / t / 1e12
    return {"shape": list(shape), "side": side, "us": round(t * 1e6, 2), "tflops": round(tflops, 1),
            "mhz": round(mhz), "w": round(w), "tflops_per_ghz": round(tflops / mhz * 1000, 1),
            "w_per_ghz": round(w / mhz * 1000, 1), "rounds": rounds}


def run(args) -> list[dict]:
    import cupy as cp
    import ml_dtypes
    import numpy as np

    import rawcoop
    from rawcoop import device
    from rawcoop.bench import n_sets_for, time_calls
    nvml = Nvml(args.device)
    l2 = device.info(cp.cuda.Device().id).l2_bytes
    dt = np.dtype(ml_dtypes.bfloat16) if args.dtype == "bfloat16" else np.dtype(args.dtype)
    rs = cp.random.RandomState(0)
    out = []
    for shape in args.shapes:
        m, n, k = shape
        n_sets = max(2, n_sets_for((m * k + k * n) * 2, l2))
        A = [rs.standard_normal((m, k), dtype=cp.float32).astype(dt) for _ in range(n_sets)]
        B = [rs.standard_normal((n, k), dtype=cp.float32).astype(dt).T for _ in range(n_sets)]
        D = [cp.empty((m, n), dt) for _ in range(n_sets)]
        sides = {} if args.no_cublas else {"cuBLAS": lambda i: cp.matmul(A[i], B[i], out=D[i])}
        for name, kw in args.variants:
            sides[name] = (lambda kw: lambda i: rawcoop.gemm(A[i], B[i], out=D[i], **kw))(kw)
        windows = {name: [] for name in sides}
        for _ in range(args.rounds):
            for name, fn in sides.items():
                for i in range(3):
                    fn(i % n_sets)
                calls = max(20, int(args.seconds / max(time_calls(cp, fn, n_sets, 1, timing="batch"), 1e-6)))
                sampler = Sampler(nvml)
                sampler.start()
                time.sleep(0.03)
                s_per_call = time_calls(cp, fn, n_sets, calls, timing="batch")     # back to back
                stats = window_stats(sampler.stop())
                stats["s_per_call"] = s_per_call
                windows[name].append(stats)
        for name, rounds in windows.items():
            row = summarise(shape, name, 2 * m * n * k, rounds)
            print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
            out.append(row)
        A = B = D = sides = None                    # (the closures above are done with them)
        cp.get_default_memory_pool().free_all_blocks()
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    rows = run(args)
    if args.json:
        from rawcoop.bench import write_json
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
