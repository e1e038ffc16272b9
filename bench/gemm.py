"""rawcoop.gemm against cuBLAS (cupy.matmul), side by side in one process.

A thin front end: the suites, the method and the report live in
rawcoop/bench.py, shared with ``python -m rawcoop bench`` (same options).

Method (bench/NOTES.md): normal-distributed inputs for both sides; inputs
rotated across several sets when one set would fit in L2 (3x L2 in total);
warm-up; in each of R rounds rawcoop and the baseline alternate, each timed
per call with CUDA events (median of `iters` calls); the reported ratio is
the median over rounds of baseline_time / rawcoop_time (> 1: rawcoop
faster), because clocks and power drift by up to ~10% within a run.

Suites: main, layouts, batched, epilogue, small_m, pdl (see --help).

    PYTHONPATH=$PWD python bench/gemm.py [--suite main,layouts,...] [--dtypes bf16,fp16]
        [--shapes 4096x4096x4096,...] [--layout TN] [--beta 0] [--variants auto,256:8]
        [--rounds 5] [--iters 20] [--json out.json] [--plot out.png]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rawcoop.bench import DEFAULT_SHAPES, PEAK_TFLOPS, main  # noqa: E402,F401  (re-exported for old scripts)

if __name__ == "__main__":
    sys.exit(main(prog="bench/gemm.py"))
