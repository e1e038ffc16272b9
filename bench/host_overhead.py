"""Host time per call on the repeated-call path: what a call of rawcoop.gemm
costs the CPU when its GPU work is negligible, against cuBLAS's own host path.

Times (on one GPU, tiny problems, median over many calls):
  * tma.encode on a cached request, and on a fresh one (driver call)
  * Kernel.launch with prebuilt arguments (cuLaunchKernelEx + our config cache)
  * rawcoop.replicate end to end (validation, descriptors, launch)
  * cupy.matmul 256^3 fp16 (the yardstick: cuBLAS's host path)
  * rawcoop.gemm 256^3 fp16, and fp8 e4m3 with device scale arrays and with
    Python-float scales, against torch._scaled_mm on the same bytes when
    torch imports (small fp8 GEMMs of the benchmark are near host-bound at ~25 us)
  * with torch tensors (rawcoop/torch/_tensors.py: torch results, torch's
    stream): rawcoop.gemm 256^3 bf16 against torch.matmul, a weight that
    requires grad, fp8 e4m3 with tensor and float scales against
    torch._scaled_mm, and the ``rawcoop::gemm`` custom op through the
    dispatcher (what torch.compile graphs call)

    PYTHONPATH=$PWD python bench/host_overhead.py [--json host_overhead.json] [--profile N]

The yardstick comparisons (rawcoop.gemm vs cupy.matmul, fp8 vs
torch._scaled_mm) also run as alternating rounds: the host's speed drifts
between and within runs (cupy.matmul alone measured 15.5-24.2 us on
different H200 machines), so the verdict is the median of the per-round
ratios, as in the GPU bench.

``--profile N`` also runs cProfile over N calls of rawcoop.gemm 256^3 fp16
(out=), of fp8 e4m3 with device scales and a new output, and of bf16 torch
tensors, and prints the 25 functions with the most own time for each: where
the repeated-call path spends its host time.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, n=2000, rounds=5):
    fn()
    meds = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        meds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(meds)


def paired_rounds(fns: dict, n=2000, rounds=7) -> dict:
    """Time each of ``fns`` (name -> callable) for ``n`` calls per round,
    alternating which goes first, over ``rounds`` rounds; return name -> list
    of per-round us/call."""
    names = list(fns)
    for f in fns.values():
        f()
    out = {k: [] for k in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            f = fns[name]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            out[name].append((time.perf_counter() - t0) / n * 1e6)
    return out


def ratio_summary(times: dict, ours: str, theirs: str) -> tuple[float, float, float]:
    """(median ours/theirs per-round ratio, min, max): > 1 means rawcoop takes longer."""
    ratios = sorted(a / b for a, b in zip(times[ours], times[theirs]))
    return statistics.median(ratios), ratios[0], ratios[-1]


def report_pair(res: dict, what: str, times: dict, theirs: str) -> None:
    """Store the median per-round rawcoop / ``theirs`` host-time ratio of
    ``times`` (from :func:`paired_rounds`, with a "rawcoop.gemm" entry) in
    ``res`` under "paired {what}: ..." and print it with both medians."""
    med, lo, hi = ratio_summary(times, "rawcoop.gemm", theirs)
    res[f"paired {what}: rawcoop / {theirs} time, median of rounds"] = med
    print(f"paired rounds, {what}: rawcoop/{theirs} host time {med:.3f} (rounds {lo:.3f}-{hi:.3f}); rawcoop "
          f"{statistics.median(times['rawcoop.gemm']):.2f} us, {theirs} {statistics.median(times[theirs]):.2f} us")


def profile_calls(fn, n: int, top: int = 25) -> None:
    """cProfile ``n`` calls of ``fn`` (after one untimed call); print the
    ``top`` functions by own time, with the profiler's per-call overhead
    included (compare functions with each other, not with per_call_us)."""
    import cProfile
    import pstats
    fn()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    print(f"cProfile of {n} calls (own time, top {top}):")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(top)


def torch_rows(torch, rawcoop, res: dict, profile: int) -> None:
    """rawcoop.gemm on torch tensors (new torch results, torch's current
    stream), 256^3, beside torch.matmul / torch._scaled_mm on the same
    tensors, alternating rounds."""
    import rawcoop.torch  # noqa: F401  (the custom ops, registered as a torch user has them)
    g = torch.Generator(device="cuda").manual_seed(4)
    a = torch.randn(256, 256, device="cuda", generator=g).to(torch.bfloat16)
    bt = torch.randn(256, 256, device="cuda", generator=g).to(torch.bfloat16)
    b = bt.t()
    out = torch.empty(256, 256, device="cuda", dtype=torch.bfloat16)
    res["rawcoop.gemm 256^3 bf16 torch (new out)"] = per_call_us(lambda: rawcoop.gemm(a, b))
    res["rawcoop.gemm 256^3 bf16 torch (out=)"] = per_call_us(lambda: rawcoop.gemm(a, b, out=out))
    w = torch.nn.Parameter(bt.clone())
    res["rawcoop.gemm 256^3 bf16 torch, weight requires grad"] = per_call_us(lambda: rawcoop.gemm(a, w.t()))
    res["torch.matmul 256^3 bf16 (new out)"] = per_call_us(lambda: torch.matmul(a, b))
    res["torch.ops.rawcoop.gemm 256^3 bf16 (dispatcher)"] = per_call_us(lambda: torch.ops.rawcoop.gemm(a, b))
    t = paired_rounds({"torch.matmul": lambda: torch.matmul(a, b), "rawcoop.gemm": lambda: rawcoop.gemm(a, b)})
    res["paired 256^3 bf16 torch (new out): rawcoop us/call per round"] = t["rawcoop.gemm"]
    res["paired 256^3 bf16 torch (new out): torch.matmul us/call per round"] = t["torch.matmul"]
    report_pair(res, "256^3 bf16 torch tensors (new out)", t, "torch.matmul")
    if profile > 0:
        print("bf16 torch tensors, new output:")
        profile_calls(lambda: rawcoop.gemm(a, b), profile)
    a8, b8 = a.to(torch.float8_e4m3fn), bt.to(torch.float8_e4m3fn).t()
    sa, sb = torch.tensor([0.5], device="cuda"), torch.tensor([2.0], device="cuda")
    res["rawcoop.gemm 256^3 e4m3 torch tensor scales (new out)"] = per_call_us(
        lambda: rawcoop.gemm(a8, b8, scale_a=sa, scale_b=sb))
    res["rawcoop.gemm 256^3 e4m3 torch float scales (new out)"] = per_call_us(
        lambda: rawcoop.gemm(a8, b8, scale_a=0.5, scale_b=2.0))
    sa0, sb0 = sa.reshape(()), sb.reshape(())
    res["torch._scaled_mm 256^3 e4m3 torch (new out)"] = per_call_us(
        lambda: torch._scaled_mm(a8, b8, scale_a=sa0, scale_b=sb0, out_dtype=torch.bfloat16))
    t = paired_rounds({"torch._scaled_mm": lambda: torch._scaled_mm(a8, b8, scale_a=sa0, scale_b=sb0,
                                                                    out_dtype=torch.bfloat16),
                       "rawcoop.gemm": lambda: rawcoop.gemm(a8, b8, scale_a=sa, scale_b=sb)})
    res["paired 256^3 e4m3 torch (new out): rawcoop us/call per round"] = t["rawcoop.gemm"]
    res["paired 256^3 e4m3 torch (new out): torch._scaled_mm us/call per round"] = t["torch._scaled_mm"]
    report_pair(res, "256^3 e4m3 torch tensor scales (new out)", t, "torch._scaled_mm")
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/host_overhead.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="write every time (us per call) and ratio here")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="cProfile N calls of rawcoop.gemm 256^3 fp16 (out=) and fp8 (new output); print the top 25 "
                         "by own time")
    args = ap.parse_args(argv)
    from bench.environment import gpu_problem
    problem = gpu_problem(0)
    if problem:
        print(f"bench/host_overhead.py: {problem}; nothing was measured.", file=sys.stderr)
        return 1
    import cupy as cp
    import numpy as np

    import rawcoop
    from rawcoop import device, tile_copy, tma
    from rawcoop.launch import I32, TENSOR_MAP, get_kernel
    res = {}
    src = cp.asarray(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float16))
    out = cp.empty((2, 64, 64), dtype=cp.float16)
    rawcoop.replicate(src, 2, out=out)
    cp.cuda.Device().synchronize()

    req = tma.TensorMap(tma.DType.FLOAT16, src.data.ptr, (64, 64), (128,), (64, 32))
    tma.encode(req)
    res["tma.encode cached"] = per_call_us(lambda: tma.encode(req))
    counter = [0]

    def fresh():
        counter[0] += 1
        tma._ENCODED.clear()
        tma.encode(req)
    res["tma.encode uncached"] = per_call_us(fresh, n=500)

    k = get_kernel(tile_copy.spec(2, 2))
    m1 = tma.encode(tma.TensorMap(tma.DType.FLOAT16, src.data.ptr, (64, 64), (128,), (64, 32)))
    m2 = tma.encode(tma.TensorMap(tma.DType.FLOAT16, out.data.ptr, (64, 64, 2), (128, 128 * 64), (64, 64, 1)))
    stream = cp.cuda.get_current_stream().ptr
    smem = tile_copy.smem_bytes(2)

    def raw_launch():
        k.launch(0, (2, 1, 1), 64, smem, stream, (m1, m2, 1, 1), (TENSOR_MAP, TENSOR_MAP, I32, I32),
                 cluster=(2, 1, 1))
    res["Kernel.launch (cuLaunchKernelEx)"] = per_call_us(raw_launch)
    # The floor: the bare driver call through cuda-bindings with a prebuilt config and packed arguments
    # (on an H200 machine 4.0 us, against 4.5 for Kernel.launch with packed arguments).
    from rawcoop._cuda import check, driver
    from rawcoop.launch import KernelParams
    bcfg = k._config(0, (2, 1, 1), 64, smem, (2, 1, 1), False)
    fn0 = k.function(0)
    packed = KernelParams((m1, m2, 1, 1), (TENSOR_MAP, TENSOR_MAP, I32, I32))

    def bindings_launch():
        bcfg.hStream = driver.CUstream(stream)
        check(driver.cuLaunchKernelEx(bcfg, fn0, packed.address, 0), "cuLaunchKernelEx")
    res["bare cuLaunchKernelEx (cuda-bindings)"] = per_call_us(bindings_launch)
    res["Kernel.launch, packed args"] = per_call_us(
        lambda: k.launch(0, (2, 1, 1), 64, smem, stream, packed, cluster=(2, 1, 1)))
    bound = k.bind(0, (2, 1, 1), 64, smem, cluster=(2, 1, 1))
    res["Kernel.bind launch (gemm's repeated-call path)"] = per_call_us(lambda: bound(stream, packed))
    res["rawcoop.replicate 64x64 end to end"] = per_call_us(lambda: rawcoop.replicate(src, 2, out=out))
    a = cp.asarray(np.random.default_rng(1).standard_normal((256, 256)).astype(np.float16))
    b = cp.asarray(np.random.default_rng(2).standard_normal((256, 256)).astype(np.float16))
    c = cp.empty((256, 256), dtype=cp.float16)
    res["cupy.matmul 256^3 fp16 (out=)"] = per_call_us(lambda: cp.matmul(a, b, out=c))
    bt = cp.ascontiguousarray(b.T)
    res["rawcoop.gemm 256^3 fp16 (out=)"] = per_call_us(lambda: rawcoop.gemm(a, bt.T, out=c))
    res["rawcoop.gemm 256^3 fp16 (new out)"] = per_call_us(lambda: rawcoop.gemm(a, bt.T))
    t = paired_rounds({"cupy.matmul": lambda: cp.matmul(a, b, out=c),
                       "rawcoop.gemm": lambda: rawcoop.gemm(a, bt.T, out=c)})
    res["paired 256^3 fp16 (out=): rawcoop us/call per round"] = t["rawcoop.gemm"]
    res["paired 256^3 fp16 (out=): cupy.matmul us/call per round"] = t["cupy.matmul"]
    report_pair(res, "256^3 fp16 (out=)", t, "cupy.matmul")
    t = paired_rounds({"cupy.matmul": lambda: cp.matmul(a, b), "rawcoop.gemm": lambda: rawcoop.gemm(a, bt.T)})
    report_pair(res, "256^3 fp16 (new out)", t, "cupy.matmul")
    if args.profile > 0:
        profile_calls(lambda: rawcoop.gemm(a, bt.T, out=c), args.profile)
    # fp8 e4m3 (uint8 storage + a_format/b_format), bf16 out, 256^3
    import ml_dtypes
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(3)
    a8 = cp.asarray(rng.standard_normal((256, 256)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    b8t = cp.asarray(rng.standard_normal((256, 256)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8))
    sa, sb = cp.asarray([0.5], cp.float32), cp.asarray([2.0], cp.float32)
    d8 = cp.empty((256, 256), dtype=bf16)
    res["rawcoop.gemm 256^3 e4m3 device scales (out=)"] = per_call_us(
        lambda: rawcoop.gemm(a8, b8t.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb, out=d8))
    res["rawcoop.gemm 256^3 e4m3 device scales (new out)"] = per_call_us(
        lambda: rawcoop.gemm(a8, b8t.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb))
    if args.profile > 0:
        print("fp8 e4m3, device scales, new output:")
        profile_calls(lambda: rawcoop.gemm(a8, b8t.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb),
                      args.profile)
    res["rawcoop.gemm 256^3 e4m3 float scales (out=)"] = per_call_us(
        lambda: rawcoop.gemm(a8, b8t.T, a_format="e4m3", b_format="e4m3", scale_a=0.5, scale_b=2.0, out=d8))
    from bench.baselines import import_torch
    torch, why = import_torch()
    if torch is None:
        print(f"torch._scaled_mm row skipped: {why}")
    else:
        ta = torch.as_tensor(a8, device="cuda").view(torch.float8_e4m3fn)
        tb = torch.as_tensor(b8t, device="cuda").view(torch.float8_e4m3fn).t()
        tsa, tsb = torch.as_tensor(sa, device="cuda").reshape(()), torch.as_tensor(sb, device="cuda").reshape(())
        res["torch._scaled_mm 256^3 e4m3 (new out)"] = per_call_us(
            lambda: torch._scaled_mm(ta, tb, scale_a=tsa, scale_b=tsb, out_dtype=torch.bfloat16))
        t = paired_rounds({"torch._scaled_mm": lambda: torch._scaled_mm(ta, tb, scale_a=tsa, scale_b=tsb,
                                                                        out_dtype=torch.bfloat16),
                           "rawcoop.gemm": lambda: rawcoop.gemm(a8, b8t.T, a_format="e4m3", b_format="e4m3",
                                                                scale_a=sa, scale_b=sb)})
        report_pair(res, "256^3 e4m3 device scales (new out)", t, "torch._scaled_mm")
        torch_rows(torch, rawcoop, res, args.profile)
    cp.cuda.Device().synchronize()
    print(f"GPU: {device.info(0).name}")
    for name, us in res.items():
        if isinstance(us, float) and "paired" not in name:
            print(f"{name:56s} {us:8.2f} us/call")
    if args.json:
        from bench.report import write_json
        write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
