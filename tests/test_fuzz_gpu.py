"""The GEMM fuzzer (rawcoop/_fuzz.py; longer runs: bench/fuzz.py).

GPU (marker gpu): >= 1000 seeded problems across shapes, layouts, dtypes,
batching, epilogues, output types and forced decompositions, each within the
tolerance of tests/test_gemm_full_gpu.py against a float64 reference; all
failures are collected and reported with one-line reproducers.
RAWCOOP_FUZZ_SEED overrides the seed, RAWCOOP_FUZZ_COUNT the count.

CPU: the draw is deterministic (also across processes and hash seeds), only
legal combinations are drawn, and 1000 draws cover every category and every
epilogue variant with a moderate number of kernel configurations.
"""
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rawcoop import _fuzz

SEED = int(os.environ.get("RAWCOOP_FUZZ_SEED", _fuzz.DEFAULT_SEED))
COUNT = max(1000, int(os.environ.get("RAWCOOP_FUZZ_COUNT", "1000")))
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.gpu
def test_fuzz_against_float64_reference():
    probs = _fuzz.problems(SEED, COUNT)
    specs, report = _fuzz.prewarm(probs)
    assert report is None or not report.failed, [o.spec.label for o in report.failed]
    failures = []
    for p in probs:
        o = _fuzz.check(p)
        if not o.ok:
            failures.append(o.line())
            if not _fuzz.device_ok():
                failures.append(f"(stopped after case {p.index}: the CUDA context is broken)")
                break
    assert not failures, (f"{len(failures)} of {COUNT} fuzz cases failed (seed {SEED}, {len(specs)} "
                          "kernel configurations):\n" + "\n".join(failures))


# ---------------------------------------------------------------- CPU
def _digest(seed, count):
    import hashlib
    h = hashlib.sha256()
    for i in range(count):
        h.update(repr(_fuzz.draw(seed, i)).encode())
    return h.hexdigest()


def test_draw_is_deterministic_and_index_addressable():
    a = _fuzz.problems(SEED, 300)
    _fuzz.recipes.cache_clear()
    b = [_fuzz.draw(SEED, i) for i in reversed(range(300))][::-1]
    assert a == b
    assert _fuzz.problems(SEED, 50, start=250) == a[250:]
    assert _fuzz.draw(SEED + 1, 7) != _fuzz.draw(SEED, 7)


def test_draw_is_the_same_in_another_process():
    code = ("import hashlib, sys; sys.path.insert(0, sys.argv[1]); from rawcoop import _fuzz; h = hashlib.sha256()\n"
            f"for i in range(400): h.update(repr(_fuzz.draw({SEED}, i)).encode())\n"
            "print(h.hexdigest())")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], env=env, capture_output=True, text=True,
                         check=True, cwd=str(ROOT)).stdout.strip()
    assert out == _digest(SEED, 400)


def test_reproducer_is_one_line_naming_seed_and_case():
    p = _fuzz.draw(SEED, 123)
    line = _fuzz.reproducer(p)
    assert "\n" not in line
    assert line.startswith(f"python bench/fuzz.py --seed {SEED} --case 123  # ")
    assert f"{p.m}x{p.n}x{p.k}" in line


@pytest.fixture(scope="module")
def draws():
    return _fuzz.problems(SEED, 1000)


def test_draws_are_legal_for_gemm(draws):
    """gemm's own stride/layout checks pass on every drawn geometry and the
    kernel configuration exists (no ValueError/TypeError by construction)."""
    from rawcoop import gemm_configs
    for p in draws:
        cfg = _fuzz.predicted_config(p)            # raises ValueError like gemm's validation would
        assert cfg.block_n in gemm_configs.BLOCK_NS
        assert cfg.smem_bytes <= gemm_configs.SMEM_LIMIT
        assert p.cluster in (None, 2, (1, 2)) and (p.cluster != 2 or p.block_n in (128, 256))
        assert not (p.out_dtype == "float32" and p.c_kind == "col")
        assert p.m >= 1 and p.n >= 1 and p.k >= 1
        if p.out_kind == "inplace":
            assert p.c_kind == "row" and not p.c_2d
        if p.c_kind in ("none", "ignored"):
            assert p.beta == 0.0
        else:
            assert p.beta != 0.0


def test_draws_cover_every_category(draws):
    seen = {f: Counter(getattr(p, f) for p in draws) for f in
            ("shape_class", "batch_kind", "in_dtype", "a_layout", "b_layout", "out_dtype", "c_kind", "bias",
             "activation", "out_kind", "splits", "block_n", "swap", "cluster", "group", "pdl", "c_2d")}
    assert set(seen["shape_class"]) == set(_fuzz.SHAPE_CLASSES)
    assert set(seen["batch_kind"]) == set(_fuzz.BATCH_KINDS)
    assert set(seen["in_dtype"]) == set(_fuzz.IN_DTYPES)
    assert set(seen["out_dtype"]) == set(_fuzz.OUT_DTYPES)
    assert {(p.in_dtype, p.out_dtype) for p in draws} == {(i, o) for i in _fuzz.IN_DTYPES for o in _fuzz.OUT_DTYPES}
    assert {(p.a_layout, p.b_layout) for p in draws} == {(a, b) for a in ("row", "col") for b in ("row", "col")}
    assert set(seen["c_kind"]) == set(_fuzz.C_KINDS)
    assert set(seen["bias"]) == set(_fuzz.BIAS_KINDS)
    assert set(seen["activation"]) == set(_fuzz.ACTIVATIONS)
    assert set(seen["out_kind"]) == set(_fuzz.OUT_KINDS)
    assert {None, 1, 2, 3, 4} <= set(seen["splits"])
    assert set(seen["block_n"]) == {None, 64, 128, 256}
    assert set(seen["swap"]) == {None, True, False}
    assert seen["cluster"][2] >= 10
    assert seen["pdl"][True] >= 20 and seen["c_2d"][True] >= 20 and seen["group"][None] < 1000
    assert any(p.alpha == 0.0 for p in draws) and any(p.alpha < 0 for p in draws)
    assert any(p.a_pad for p in draws) and any(p.b_pad for p in draws)
    # odd sizes: 1, tile edges, primes, very long K, something big
    dims = [(p.m, p.n, p.k) for p in draws]
    for axis in range(3):
        vals = {d[axis] for d in dims}
        assert 1 in vals, axis
        assert {127, 128, 129, 255, 256, 257} <= vals, axis
        assert {v for v in vals if v > 100 and all(v % q for q in range(2, int(v ** 0.5) + 1))}, axis
    assert sum(p.k >= 65536 for p in draws) >= 10
    assert any(p.m == 1 and p.k >= 65536 for p in draws)
    assert any(p.m >= 1024 and p.n >= 1024 for p in draws)
    assert sum(p.m <= 64 < p.n for p in draws) >= 100            # swap-AB territory
    # with every batch kind and each operand layout
    assert {(p.batch_kind, p.a_layout, p.b_layout) for p in draws} >= {
        (k, a, b) for k in _fuzz.BATCH_KINDS if k != "none" for a in ("row", "col") for b in ("row", "col")}


def test_kernel_configurations_moderate_and_cover_every_epilogue_variant(draws):
    cfgs = Counter(_fuzz.predicted_config(p) for p in draws)
    assert 60 <= len(cfgs) <= 150, len(cfgs)
    cover = {f: {getattr(c, f) for c in cfgs} for f in
             ("block_n", "in_bf16", "a_kmajor", "b_kmajor", "out_type", "has_c", "c_colmajor", "d_colmajor",
              "bias", "bias_on_rows", "act", "cluster_m", "cluster_n", "pingpong")}
    assert cover["block_n"] == {64, 128, 256}
    assert cover["out_type"] == {0, 1, 2}
    assert cover["bias"] == {0, 1, 2, 3}
    assert cover["act"] == {0, 1, 2, 3}
    assert cover["cluster_m"] == {1, 2} and cover["cluster_n"] == {1, 2}
    assert cover["pingpong"] == {False, True}
    for f in ("in_bf16", "a_kmajor", "b_kmajor", "has_c", "c_colmajor", "d_colmajor", "bias_on_rows"):
        assert cover[f] == {False, True}, f
    # the epilogue variants in combination: C orientation in the kernel's view x D orientation,
    # each activation with each output type, bias kinds on rows (swap-AB) and on columns
    assert {(c.c_colmajor, c.d_colmajor) for c in cfgs if c.has_c} == {(a, b) for a in (0, 1) for b in (0, 1)}
    assert {(c.act, c.out_type) for c in cfgs} == {(a, o) for a in range(4) for o in range(3)}
    assert {(c.bias, c.bias_on_rows) for c in cfgs if c.bias} == {(b, r) for b in (1, 2, 3) for r in (0, 1)}


def test_bench_fuzz_cli_help_and_list():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz.py"), "--help"], capture_output=True, text=True,
                       check=True)
    for flag in ("--seed", "--count", "--case", "--stop-on-fail"):
        assert flag in r.stdout
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz.py"), "--list", "--count", "3", "--seed", "5"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.splitlines() == [_fuzz.reproducer(_fuzz.draw(5, i)) for i in range(3)]
