"""rawcoop.gemm against cuBLAS, side by side in one process: TFLOP/s of both,
their ratio (median over alternating rounds), % of the GPU's dense peak,
and a correctness check of every row.

    PYTHONPATH=$PWD python bench/gemm.py                              # main suite, bf16 and fp16
    PYTHONPATH=$PWD python bench/gemm.py --suite all --json gemm_h200.json --plot gemm_h200.png
    PYTHONPATH=$PWD python bench/gemm.py --suite main --shapes 4096x4096x4096 --variants auto,block_n=128
    PYTHONPATH=$PWD python bench/gemm.py --suite fp8,tf32 --fp8-block
    python bench/gemm.py --help                                       # suites, method, every option

Suites: main, layouts, batched, epilogue, small_m, pdl, fp8 (e4m3, vs
cuBLASLt through torch._scaled_mm), tf32 (vs cuBLAS and torch with TF32).
Needs a Hopper GPU with CuPy (torch for the fp8 and batched torch
baselines, matplotlib for --plot); without a GPU it exits 1 and measures
nothing.  bench/plot.py redraws a results file.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import main  # noqa: E402  (after the path insert)

if __name__ == "__main__":
    sys.exit(main(prog="bench/gemm.py"))
