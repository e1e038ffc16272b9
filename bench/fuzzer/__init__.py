"""Seeded, reproducible GEMM fuzzer: rawcoop.gemm on many random problems,
each checked against a float64 reference (bench/fuzz.py runs it,
tests/cpu/test_fuzz_cpu.py checks the draw, tests/gpu/test_regressions.py
keeps the cases it found).

    p = draw(seed, index)          # a Problem: every choice, from (seed, index) alone
    outcome = check(p)             # GPU: fresh inputs, poisoned out, float64 reference
    print(reproducer(p))           # python bench/fuzz.py --seed S --case I  # description

Modules: pool.py (the kernel-shaping options each seed deals over a pool of
recipes), cases.py (one problem per (seed, index): shape, batching,
padding, epilogue, forced options), layout.py (the arrays' storage and the
call's keywords; the configuration gemm should pick, without a GPU),
verify.py (inputs on the GPU, the reference, the tolerances, the check; the
parallel pre-compilation of a run's kernels).
"""
from .cases import (BATCH_KINDS, DEFAULT_OUT, DEFAULT_SEED, FP8_MAX_K, FP8_STORAGES, FP32_MAX_K, KINDS, OUT_DTYPES,
                    OUT_KINDS, SCALE_KINDS, SHAPE_CLASSES, Problem, describe, draw, problems, reproducer)
from .layout import call_kwargs, geometry, layouts, lowp_kwargs, np_dtype, predicted_config
from .pool import ACTIVATIONS, BIAS_KINDS, C_KINDS, FP8_FORMATS, IN_DTYPES, INPUT_KINDS, POOL_SIZE, recipes
from .verify import (BLOCK_ELEM_TOL, BLOCK_TOL, FP8_TOL, TF32_TOL, TOL, CaseFailure, Outcome, build, check,
                     device_ok, plan, plan_spec, prewarm, reference, run_case, summary_of, tolerance)

__all__ = ["ACTIVATIONS", "BATCH_KINDS", "BIAS_KINDS", "BLOCK_ELEM_TOL", "BLOCK_TOL", "C_KINDS", "DEFAULT_OUT",
           "DEFAULT_SEED", "FP32_MAX_K", "FP8_FORMATS", "FP8_MAX_K", "FP8_STORAGES", "FP8_TOL", "INPUT_KINDS",
           "IN_DTYPES", "KINDS", "OUT_DTYPES", "OUT_KINDS", "POOL_SIZE", "SCALE_KINDS", "SHAPE_CLASSES",
           "TF32_TOL", "TOL", "CaseFailure", "Outcome", "Problem", "build", "call_kwargs", "check", "describe",
           "device_ok", "draw", "geometry", "layouts", "lowp_kwargs", "np_dtype", "plan", "plan_spec",
           "predicted_config", "prewarm", "problems", "recipes", "reference", "reproducer", "run_case",
           "summary_of", "tolerance"]
