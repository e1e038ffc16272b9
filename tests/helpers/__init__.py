"""Shared helpers for the tests: dtypes, fresh normal data, error checks, bench/ scripts,
kernels built with extra defines.

Submodules: ``helpers.stub`` (stub-CuPy planning on the CPU), ``helpers.lowp``
(tf32 / fp8 GPU operands and tolerances), ``helpers.sass`` (the kernels' SASS
and the checks the CPU and GPU SASS tests share)."""
import contextlib
import importlib
import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def bench_script(name: str):
    """A fresh module object of ``bench/<name>.py`` (the bench scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@contextlib.contextmanager
def extra_defines(defines):
    """Within the block every GEMM kernel is built with the extra preprocessor ``defines`` ((name, int)
    pairs: a kernel switch behind a ``#define`` with no Python option), as kernels of their own in the
    cache; rawcoop.gemm's plan cache starts empty before and after (plans hold their kernel)."""
    from rawcoop.compiler import KernelSpec
    from helpers.plan import gc as configs
    gemm = importlib.import_module("rawcoop.gemm")        # the module (rawcoop.gemm is the function)
    extra = tuple(defines)
    clash = {k for k, _ in extra} & {"BLOCK_N", "STAGES", "IN_KIND", "IN_KIND_B", "SCALE_MODE", "PINGPONG"}
    if clash:
        raise ValueError(f"extra defines must not override configuration defines: {sorted(clash)}")
    prop = configs.GemmConfig.spec

    def spec(self):
        sp = prop.fget(self)
        return KernelSpec(sp.source, sp.name, tuple(sorted(sp.defines + extra)))
    gemm._PLANS.clear()
    configs.GemmConfig.spec = property(spec)
    try:
        yield
    finally:
        configs.GemmConfig.spec = prop
        gemm._PLANS.clear()


def case_831():
    """The fuzzer's seed 7 case 831 written out (tests/gpu/test_regressions.py), so that later changes to
    the fuzzer's draw cannot change what the regression test runs."""
    from bench import fuzzer
    return fuzzer.Problem(seed=7, index=831, recipe=47, shape_class="big", m=3001, n=1000, k=512,
                          batch_kind="none", batch=1, in_dtype="bfloat16", a_layout="col", b_layout="row",
                          a_pad=56, b_pad=56, out_dtype="float32", c_kind="row", c_2d=False, alpha=-1.0,
                          beta=0.25, bias="none", activation="relu", out_kind="exact", splits=None, block_n=None,
                          swap=None, cluster=None, group=None, pdl=False)


def dtype(name):
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def rand(cp, shape, dt, seed):
    """Fresh standard-normal data (never zeros or small integers)."""
    return cp.random.RandomState(seed).standard_normal(shape, dtype=cp.float32).astype(dt)


def layout_operands(cp, m, n, k, dt, layout, seed):
    """a (M, K) and b (K, N) of fresh normal data in a BLAS-style layout (rawcoop.plan.kernel_config.LAYOUTS):
    a row-major for "T" (else a transposed view of (K, M)), b = bt.T of a row-major (N, K) for "N" (else
    row-major (K, N))."""
    a = rand(cp, (m, k), dt, seed) if layout[0] == "T" else rand(cp, (k, m), dt, seed).T
    b = rand(cp, (k, n), dt, seed + 1) if layout[1] == "T" else rand(cp, (n, k), dt, seed + 1).T
    return a, b


def assert_rel_err(cp, d, ref, tol):
    """Relative Frobenius error of ``d`` against a float64 ``ref``."""
    e = float(cp.linalg.norm((d.astype(cp.float64) - ref).ravel()) / cp.linalg.norm(ref.ravel()))
    assert np.isfinite(e) and e < tol, f"relative error {e:.3e} (tolerance {tol:.1e})"


def run_twice(cp, rawcoop, a, b, shape, dt, **kw):
    """``rawcoop.gemm(a, b, out=d, **kw)`` twice, each into a fresh output
    of ``dt`` poisoned with NaN (unwritten tiles show); the two results
    must be bit-identical (determinism).  Returns the first."""
    outs = []
    for _ in range(2):
        d = cp.full(shape, float("nan"), dtype=cp.float32).astype(dt)
        rawcoop.gemm(a, b, out=d, **kw)
        outs.append(d)
    view = cp.uint32 if outs[0].dtype.itemsize == 4 else cp.uint16
    assert cp.array_equal(outs[0].view(view), outs[1].view(view)), "not deterministic"
    return outs[0]


def full_epilogue(cp, a, b, c_order, activation, seed):
    """(keyword arguments, float64 reference) of ``a @ b`` with the whole epilogue: C of a's dtype in
    ``c_order`` ("C" or "F"), alpha 0.75, beta -0.5, an fp32 bias along N and ``activation``."""
    from rawcoop._reference import activation as act64
    m, n = a.shape[0], b.shape[1]
    c = cp.asarray(rand(cp, (m, n), a.dtype, seed), order=c_order)
    bias = rand(cp, (n,), cp.float32, seed + 1)
    ref = act64(cp, 0.75 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64)
                + bias.astype(cp.float64), activation)
    return dict(c=c, alpha=0.75, beta=-0.5, bias=bias, activation=activation), ref


def check_epilogue_variants(cp, rawcoop, layout, out_name, c_order, **forced):
    """A 1000x904x4000 bf16 GEMM with C (``c_order`` "row" or "col"), alpha 1.5, beta -0.5, an fp32 bias
    along N and gelu / silu (split-K 3) / relu (stream-K), ``out_name`` output, the ``forced`` options (a
    tile), against float64 (NaN-poisoned, deterministic: run_twice)."""
    from rawcoop._reference import activation as act64
    dt, odt = dtype("bfloat16"), dtype(out_name)
    m, n, k = 1000, 904, 4000
    a, b = layout_operands(cp, m, n, k, dt, layout, 21)
    c = (rand(cp, (m, n + (-n) % 8), odt, 23)[:, :n] if c_order == "row"
         else rand(cp, (n, m + (-m) % 8), odt, 23)[:, :m].T)
    bias = rand(cp, (n,), cp.float32, 24)
    for act, kw in (("gelu", {}), ("silu", dict(_splits=3)), ("relu", dict(_streamk=True))):
        ref = act64(cp, 1.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) - 0.5 * c.astype(cp.float64) + bias,
                    act)
        d = run_twice(cp, rawcoop, a, b, (m, n), odt, c=c, alpha=1.5, beta=-0.5, bias=bias, activation=act,
                      out_dtype=odt, **forced, **kw)
        assert_rel_err(cp, d, ref, 1e-2 if out_name == "bfloat16" else 2e-5)


def check_shared_b_batch(cp, rawcoop, **forced):
    """A batch of 3 fp16 700x500x1504 GEMMs sharing a 2-D K-major b, with the ``forced`` options, against
    float64 (NaN-poisoned, deterministic: run_twice)."""
    dt = dtype("float16")
    a = rand(cp, (3, 700, 1504), dt, 31)
    b = rand(cp, (500, 1504), dt, 32).T
    d = run_twice(cp, rawcoop, a, b, (3, 700, 500), dt, **forced)
    assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), 2e-3)


def run_in_threads(work, args):
    """Run ``work(arg, barrier)`` in one thread per ``arg``, all sharing a
    ``threading.Barrier`` (for a synchronised start); the first exception of
    any thread aborts the barrier and is re-raised here after all joined."""
    import threading
    errors, barrier = [], threading.Barrier(len(args), timeout=120)

    def run(arg):
        try:
            work(arg, barrier)
        except BaseException as e:  # noqa: BLE001 - reported by the calling thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(arg,)) for arg in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def torch_or_skip():
    """torch, or pytest.skip naming why it is unusable (bench.baselines.import_torch:
    not installed, its import raised (any exception: see conftest.py), or it
    sees no CUDA GPU)."""
    import pytest

    from bench.baselines import import_torch
    torch, why = import_torch()
    if torch is None:
        pytest.skip(why)
    return torch


def spy_launches(monkeypatch, fail: str | None = None) -> list:
    """Record every kernel launch rawcoop makes (the spec names), through
    both entry points: ``Kernel.launch`` and a plan's bound launch
    (``BoundLaunch.__call__``, gemm's repeated-call path).  With ``fail`` a
    launch raises AssertionError(fail) instead of running."""
    from rawcoop import launch
    seen = []
    real_launch, real_call = launch.Kernel.launch, launch.BoundLaunch.__call__

    def kernel_launch(self, *args, **kwargs):
        seen.append(self.spec.name)
        if fail:
            raise AssertionError(fail)
        return real_launch(self, *args, **kwargs)

    def bound_call(self, *args, **kwargs):
        seen.append(int(self.fn))
        if fail:
            raise AssertionError(fail)
        return real_call(self, *args, **kwargs)
    monkeypatch.setattr(launch.Kernel, "launch", kernel_launch)
    monkeypatch.setattr(launch.BoundLaunch, "__call__", bound_call)
    return seen


def assert_planner_choice(plan):
    """A GPU plan runs the planner's choice for its problem (tile, cluster, orientation): the GPU tests of
    automatic plans check correctness of whatever the cost model picks, not a particular tile."""
    from rawcoop.plan.select import choose, point_of
    assert point_of(plan.cfg) == point_of(choose(plan.problem).cfg), plan.cfg.spec.label
