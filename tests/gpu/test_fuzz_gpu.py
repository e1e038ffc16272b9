"""GPU: the GEMM fuzzer (bench/fuzzer/; longer runs: bench/fuzz.py).

>= 1000 seeded problems across shapes, layouts, input kinds (float16,
bfloat16, tf32, fp8 e4m3/e5m2/mixed with per-tensor scales, block-scaled
fp8), batching, epilogues, output types and forced decompositions, each
within the tolerance of tests/gpu/test_gemm_full.py (16-bit inputs),
tests/gpu/test_fp8_tf32.py (tf32, per-tensor fp8) or
tests/gpu/test_fp8_block.py (block-scaled, also element-wise) against a
float64 reference; all failures are collected and reported with one-line
reproducers.  RAWCOOP_FUZZ_SEED overrides the seed, RAWCOOP_FUZZ_COUNT the
count.  With -s it prints the largest error/tolerance ratio per input kind.
The fuzzer's own checks on the CPU: tests/cpu/test_fuzz_cpu.py.
"""
import os

import pytest

from bench import fuzzer

pytestmark = pytest.mark.gpu

SEED = int(os.environ.get("RAWCOOP_FUZZ_SEED", fuzzer.DEFAULT_SEED))
COUNT = max(1000, int(os.environ.get("RAWCOOP_FUZZ_COUNT", "1000")))


def test_fuzz_against_float64_reference():
    probs = fuzzer.problems(SEED, COUNT)
    specs, report = fuzzer.prewarm(probs)
    assert report is None or not report.failed, [o.spec.label for o in report.failed]
    failures = []
    worst = {}
    for p in probs:
        o = fuzzer.check(p)
        if o.ok and o.ratio > worst.get(p.kind, (-1.0, None))[0]:
            worst[p.kind] = (o.ratio, p.index)
        if not o.ok:
            failures.append(o.line())
            if not fuzzer.device_ok():
                failures.append(f"(stopped after case {p.index}: the CUDA context is broken)")
                break
    print("\n  largest error/tolerance per input kind: " +
          ", ".join(f"{k} {r:.3f} (case {i})" for k, (r, i) in sorted(worst.items())))
    assert not failures, (f"{len(failures)} of {COUNT} fuzz cases failed (seed {SEED}, {len(specs)} "
                          "kernel configurations):\n" + "\n".join(failures))
