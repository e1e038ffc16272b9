"""Benchmarks and checking tools for rawcoop, run from a checkout (not installed with the package).

Commands (each ``PYTHONPATH=$PWD python bench/<name>.py --help`` says more):
  gemm.py           rawcoop.gemm against cuBLAS / cuBLASLt / torch: TFLOP/s, ratio, % peak, JSON, plot
  plot.py           redraw a gemm.py results file and print its table
  survey.py         automatic plans against cuBLAS over many shapes (LLM layers, random shapes)
  oracle.py         a shape's automatic plan against every distinct forced plan and cuBLAS
  host_overhead.py  host time per call of the repeated-call path
  timeline.py       per-unit timeline of one launch (where a schedule's time goes)
  ncu_compare.py    Nsight Compute metrics of rawcoop variants and cuBLAS side by side
  sanitize.py       compute-sanitizer over every kernel variant on small problems
  fuzz.py           seeded GEMM fuzzer against a float64 reference

The benchmark behind gemm.py: options.py (command line, problem sets), timing.py (CUDA-event
timing, rotating input sets, alternating rounds), data.py (inputs), baselines.py (cuBLAS,
cuBLASLt, torch), suites.py and suites_lowp.py (the suites), rows.py (result rows, peaks,
geomeans), report.py (tables, JSON, plot), environment.py (GPU, versions, clocks),
harness.py (runs it all).  The fuzzer: the package fuzzer/.
"""
