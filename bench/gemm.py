"""rawcoop.gemm against cuBLAS (cupy.matmul), side by side in one process.

A thin front end: the suites, the method and the report live in
rawcoop/bench.py, shared with ``python -m rawcoop bench`` (same options).

Method (bench/NOTES.md): normal-distributed inputs for both sides; inputs
rotated across several sets when one set would fit in L2 (3x L2 in total);
warm-up; in each of R rounds rawcoop and the baseline alternate, each timed
per call with CUDA events (median of `iters` calls); the reported ratio is
the median over rounds of baseline_time / rawcoop_time (> 1: rawcoop
faster), because clocks and power drift by up to ~10% within a run.

Suites: main, layouts, batched, epilogue, small_m, pdl, and (issue 6) fp8
(e4m3 per-tensor scaled, vs cuBLASLt through torch._scaled_mm) and tf32
(precision="tf32", vs cupy.matmul with CuPy's TF32 compute type and
torch.matmul with TF32 on); see --help.  "% peak" is of the dense peak of the
input type: 989 (fp16/bf16), 1979 (FP8), 494.5 (TF32) TFLOP/s.

    PYTHONPATH=$PWD python bench/gemm.py [--suite main,layouts,...,fp8,tf32] [--dtypes bf16,fp16]
        [--shapes 4096x4096x4096,...] [--layout TN] [--beta 0] [--variants auto,256:8]
        [--fp8-shapes MxNxK,...] [--tf32-shapes MxNxK,...]
        [--rounds 5] [--iters 20] [--json out.json] [--plot out.png]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (DEFAULT_SHAPES, FP8_SHAPES, PEAK_FP8_TFLOPS, PEAK_TF32_TFLOPS,  # noqa: E402,F401
                           PEAK_TFLOPS, TF32_SHAPES, main)  # (re-exported for scripts)

if __name__ == "__main__":
    sys.exit(main(prog="bench/gemm.py"))
