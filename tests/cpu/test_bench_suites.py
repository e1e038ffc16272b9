"""CPU: the benchmark's timing (bench/timing.py), data (bench/data.py) and
suites (bench/suites.py, bench/suites_lowp.py) on a numpy stand-in for the
GPU: fake CuPy, rawcoop.gemm, torch and device info, so that the suites'
host logic, baselines, error checks and rows run without one."""
import json
import sys

import pytest

from bench import baselines, data, harness, options, report, rows, suites, timing

def test_e4m3_quantiser_matches_ml_dtypes():
    """The GPU quantises fp8 bench data with quantize_e4m3 (cupy); the same
    code on numpy must give ml_dtypes' bytes, ties and -0 included."""
    np = pytest.importorskip("numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    vals, codes = data.e4m3_table()
    assert len(vals) == 253 and vals[0] == -448 and vals[-1] == 448 and np.all(np.diff(vals) > 0)
    x = np.random.default_rng(3).standard_normal(200_000).astype(np.float32)
    x *= np.float32(data.E4M3_MAX / np.abs(x).max())
    mids = (vals[1:] + vals[:-1]) / 2                            # exact ties: round to even
    special = np.float32([0.0, -0.0, 1e-30, -1e-30, 448.0, -448.0, 2 ** -10, -2 ** -10, 2 ** -11, -2 ** -11])
    t = np.concatenate([x, mids, -mids, vals, special]).astype(np.float32)
    q = data.quantize_e4m3(np, t)
    assert q.dtype == np.uint8
    ref = t.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(q, ref)
    assert np.array_equal(data.quantize_e4m3(np, np.float32([1000.0, -1e9])), np.uint8([0x7E, 0xFE]))   # clipped
    # normal data scaled into range: no NaN codes, hardly any zeros, max |value| 448
    deq = q[:200_000].view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.isfinite(deq).all() and np.abs(deq).max() == 448 and (deq == 0).mean() < 1e-3


# ------------------------------------------------------------------ the suites on a numpy "GPU"
def _tf32_round(x):
    import numpy as np
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


class _FakeEvent:
    def record(self):
        import time
        self.t = time.perf_counter()

    def synchronize(self):
        pass


def _fake_cupy():
    """Just enough of CuPy, on numpy, for the fp8/tf32 suites' host logic,
    with the float32 compute-type switch of cupy._core._routines_linalg."""
    import types

    import numpy as np
    cp = types.ModuleType("cupy")
    for name in ("float16", "float32", "float64", "uint8", "uint16", "int16", "int32", "int64", "intp", "abs",
                 "empty", "clip", "searchsorted", "minimum", "where", "signbit", "ndarray", "asarray", "linalg",
                 "exp2", "repeat", "swapaxes"):
        setattr(cp, name, getattr(np, name))
    L = types.ModuleType("cupy._core._routines_linalg")
    for i, n in enumerate(("TBD", "DEFAULT", "PEDANTIC", "FP16", "FP32", "FP64", "BF16", "TF32")):
        setattr(L, "COMPUTE_TYPE_" + n, i)
    L.state = {"f": 0}
    L.get_compute_type = lambda dt: L.state["f"] or 1
    L.set_compute_type = lambda dt, ct: L.state.__setitem__("f", ct)
    L.compute_type_to_str = lambda ct: {1: "COMPUTE_TYPE_DEFAULT", 7: "COMPUTE_TYPE_TF32"}.get(ct, str(ct))
    core = types.ModuleType("cupy._core")
    core._routines_linalg = L
    cp._core = core

    def matmul(a, b, out=None):
        if a.dtype == np.float32 and L.state["f"] == 7:
            a, b = _tf32_round(a), _tf32_round(b)
        r = np.matmul(a, b)
        if out is None:
            return r
        out[...] = r
        return out
    cp.matmul = matmul

    class RandomState:
        def __init__(self, seed):
            self.g = np.random.default_rng(seed)

        def standard_normal(self, shape, dtype=np.float64):
            return self.g.standard_normal(shape, dtype=np.float32).astype(dtype)

        def uniform(self, low, high, shape):
            return self.g.uniform(low, high, shape)
    cp.random = types.SimpleNamespace(RandomState=RandomState)
    cp.cuda = types.SimpleNamespace(
        Event=_FakeEvent, get_elapsed_time=lambda s, e: (e.t - s.t) * 1e3,
        Device=lambda *a: types.SimpleNamespace(id=0, synchronize=lambda: None))
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    return cp, {"cupy": cp, "cupy._core": core, "cupy._core._routines_linalg": L}


def _fake_gemm(calls):
    import ml_dtypes
    import numpy as np
    lut = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)

    def gemm(a, b, *, out=None, out_dtype=None, a_format=None, b_format=None, scale_a=None, scale_b=None,
             precision=None, scale_mode=None, **kw):
        assert a.flags.c_contiguous and b.flags.f_contiguous, "TN: a row-major, b = bt.T"
        if scale_mode == "block":
            (m, k), n = a.shape, b.shape[1]
            assert scale_a.shape == (m, -(-k // 128)) and scale_a.strides[0] == 4, "SA (M, KB), M-major"
            assert scale_b.shape == (-(-n // 128), -(-k // 128)) and scale_b.dtype == np.float32
            sa = np.repeat(scale_a, 128, axis=1)[:, :k]
            sb = np.repeat(np.repeat(scale_b, 128, axis=0)[:n], 128, axis=1)[:, :k].T
            r = (lut[a] * sa) @ (lut[b] * sb)
            calls.append("fp8 block")
            out[...] = r.astype(out_dtype)
            return out
        if a.dtype == np.float16:                       # the main suite (fp16 in; out's type out)
            r = a.astype(np.float32) @ b.astype(np.float32)
            dt = np.dtype(out_dtype or np.float16)      # gemm's rule: out= must have out_dtype's type
            calls.append(("fp16", str(dt)))
        elif precision == "tf32":
            assert a.dtype == b.dtype == np.float32 and scale_a is None
            r = _tf32_round(a) @ _tf32_round(b)
            dt = np.float32
        else:
            assert a.dtype == b.dtype == np.uint8 and a_format == b_format == "e4m3"
            assert scale_a.dtype == scale_b.dtype == np.float32 and scale_a.size == scale_b.size == 1
            r = (lut[a] @ lut[b]) * (float(scale_a[0]) * float(scale_b[0]))
            dt = out_dtype
        if a.dtype != np.float16:
            calls.append(precision or "fp8")
        r = r.astype(dt)
        if out is None:
            return r
        assert out.dtype == r.dtype
        out[...] = r
        return out
    return gemm


class _T:
    """A fake torch tensor over a numpy array (views share memory)."""

    def __init__(self, x):
        self.x = x

    def view(self, dt):
        return _T(self.x.view(dt))

    def t(self):
        return _T(self.x.T)

    def __array__(self, dtype=None, copy=None):
        return self.x if dtype is None else self.x.astype(dtype)


def _fake_torch(refuse_out=False, refuse=False):
    import types

    import ml_dtypes
    import numpy as np
    t = types.ModuleType("torch")
    t.__version__ = "2.11.0+fake"
    t.float8_e4m3fn, t.bfloat16 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.bfloat16)
    t.int16, t.float32 = np.dtype(np.int16), np.dtype(np.float32)
    t.cuda = types.SimpleNamespace(is_available=lambda: True, empty_cache=lambda: None)
    t.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(fp32_precision="ieee")))
    t.as_tensor = lambda x, device=None: _T(np.asarray(x))
    t.tensor = lambda v, dtype=None, device=None: _T(np.array(v, dtype=dtype))
    t.calls = []

    def _scaled_mm(a, b, *, scale_a, scale_b, out_dtype, use_fast_accum=False, out=None):
        if refuse:
            raise RuntimeError("Multiplication of two Float8_e5m2 matrices is not supported")
        if out is not None and refuse_out:
            raise TypeError("_scaled_mm() got an unexpected keyword argument 'out'")
        assert a.x.dtype == b.x.dtype == t.float8_e4m3fn and b.x.flags.f_contiguous and a.x.flags.c_contiguous
        assert scale_a.x.shape == () and scale_a.x.dtype == np.float32
        t.calls.append(("_scaled_mm", use_fast_accum, out is not None))
        r = ((a.x.astype(np.float32) @ b.x.astype(np.float32)) * (float(scale_a.x) * float(scale_b.x)))
        r = r.astype(out_dtype)
        if out is None:
            return _T(r)
        out.x[...] = r
        return out
    t._scaled_mm = _scaled_mm

    def matmul(a, b, out=None):
        tf32 = t.backends.cuda.matmul.fp32_precision == "tf32"
        t.calls.append(("matmul", tf32))
        r = (_tf32_round(a.x) @ _tf32_round(b.x)) if tf32 else a.x @ b.x
        if out is None:
            return _T(r)
        out.x[...] = r
        return out
    t.matmul = matmul
    return t


@pytest.fixture
def fake_gpu(monkeypatch):
    """The fp8/tf32 suites' host code on numpy: fake cupy, rawcoop.gemm, torch, device info."""
    pytest.importorskip("ml_dtypes")
    import types

    import rawcoop
    from rawcoop import device
    cp, mods = _fake_cupy()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    calls = []
    monkeypatch.setattr(rawcoop, "gemm", _fake_gemm(calls))
    monkeypatch.setattr(device, "info", lambda i=0: types.SimpleNamespace(
        name="Fake H200", sm_count=132, l2_bytes=50 * 2 ** 20, cc=(9, 0)))

    def make(argv, torch=None):
        monkeypatch.setitem(sys.modules, "torch", torch)       # None: import torch raises ImportError
        args = options.build_parser().parse_args(argv)
        return suites.Bench(args), calls
    return make


_FAKE_ARGS = ["--suite", "fp8,tf32", "--fp8-shapes", "64x48x32,16x32x64", "--tf32-shapes", "48x40x24",
              "--rounds", "2", "--iters", "2"]


def test_fp8_and_tf32_suites_on_a_fake_gpu(fake_gpu, capsys):
    torch = _fake_torch()
    b, calls = fake_gpu(_FAKE_ARGS, torch)
    b.fp8()
    b.tf32()
    out = capsys.readouterr().out
    rows = b.rows
    fp8 = [r for r in rows if r["suite"] == "fp8"]
    assert [(r["shape"], r["baseline"]) for r in fp8] == [
        ("64x48x32", baselines.BASE_SCALED_MM), ("64x48x32", baselines.BASE_SCALED_MM_FAST),
        ("16x32x64", baselines.BASE_SCALED_MM), ("16x32x64", baselines.BASE_SCALED_MM_FAST)]
    for r in fp8:
        assert r["dtype"] == "e4m3" and r["layout"] == "TN" and r["peak_tflops"] == 1979.0
        assert r["flops"] == 2.0 * int(r["shape"].split("x")[0]) * int(r["shape"].split("x")[1]) * \
            int(r["shape"].split("x")[2])
        assert r["ratio"] is not None and len(r["rounds"]) == 2 and r["sets"] == 8
        assert r["err_vs"] == r["baseline"] and r["rel_err"] < 1e-2     # both sides: the same bytes and scales
        assert r["rawcoop_err_fp32"] < 1e-2 and r["baseline_err_fp32"] < 1e-2
        assert 0.005 < r["scale_a"] < 0.05 and 0.005 < r["scale_b"] < 0.05   # amax/448 of normal data
        assert r["baseline_call"].startswith("torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype="
                                             "torch.bfloat16, use_fast_accum=") and r["baseline_call"].endswith(
                                                 "out=d)")
        assert r["use_fast_accum"] == (r["baseline"] == baselines.BASE_SCALED_MM_FAST)
    assert ("_scaled_mm", True, True) in torch.calls and ("_scaled_mm", False, True) in torch.calls
    tf = [r for r in rows if r["suite"] == "tf32"]
    assert [r["baseline"] for r in tf] == [baselines.BASE_CUBLAS_TF32, baselines.BASE_TORCH_TF32]
    for r in tf:
        assert r["dtype"] == "tf32" and r["peak_tflops"] == 494.5 and r["rel_err"] < 1e-6
        assert r["baseline_tf32_evident"] and 5e-5 < r["baseline_err_fp64"] < 1e-2 and r["rawcoop_err_fp64"] < 1e-2
    assert tf[0]["cupy_compute_type"] == "COMPUTE_TYPE_TF32"
    assert tf[0]["cublas_compute_type"] == "CUBLAS_COMPUTE_32F_FAST_TF32"
    assert tf[1]["torch_setting"] == 'torch.backends.cuda.matmul.fp32_precision = "tf32"'
    assert ("matmul", True) in torch.calls and ("matmul", False) not in torch.calls
    # the switches are restored afterwards
    assert sys.modules["cupy._core._routines_linalg"].state["f"] in (0, 1)
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert "CUBLAS_COMPUTE_32F_FAST_TF32" in out and "WARNING" not in out
    text = report.format_report({"rows": rows})
    assert "fp8 e4m3 TN vs cuBLASLt _scaled_mm:" in text and "tf32 tf32 TN vs torch tf32:" in text
    assert calls.count("fp8") > 0 and calls.count("tf32") > 0


def test_fp8_suite_without_torch_times_rawcoop_alone(fake_gpu, capsys):
    b, _ = fake_gpu(_FAKE_ARGS, None)
    b.fp8()
    b.tf32()
    out = capsys.readouterr().out
    assert "SKIP the cuBLASLt baseline (import torch failed: " in out
    assert "SKIP the torch baseline" in out and "Traceback" not in out
    fp8 = [r for r in b.rows if r["suite"] == "fp8"]
    assert len(fp8) == 2 and all(r["baseline"] == baselines.NO_BASELINE and r["ratio"] is None for r in fp8)
    assert all(r["baseline_skipped"].startswith("import torch failed") for r in fp8)
    assert all(r["err_vs"] == "fp32 GEMM of the dequantised inputs" and r["rel_err"] < 1e-2 for r in fp8)
    assert [r["baseline"] for r in b.rows if r["suite"] == "tf32"] == [baselines.BASE_CUBLAS_TF32]
    assert "| none" in report.format_report({"rows": b.rows})


def test_fp8_suite_when_scaled_mm_refuses_out_or_everything(fake_gpu, capsys):
    torch = _fake_torch(refuse_out=True)
    b, _ = fake_gpu(_FAKE_ARGS[:2] + ["--fp8-shapes", "32x16x32", "--rounds", "1", "--iters", "1"], torch)
    b.fp8()
    rows = [r for r in b.rows if r["suite"] == "fp8"]
    assert [r["baseline"] for r in rows] == [baselines.BASE_SCALED_MM, baselines.BASE_SCALED_MM_FAST]
    assert all("[out= refused" in r["baseline_call"] and r["rel_err"] < 1e-2 for r in rows)
    torch = _fake_torch(refuse=True)
    b, _ = fake_gpu(_FAKE_ARGS[:2] + ["--fp8-shapes", "32x16x32", "--rounds", "1", "--iters", "1"], torch)
    b.fp8()
    rows = [r for r in b.rows if r["suite"] == "fp8"]
    assert len(rows) == 1 and rows[0]["baseline"] == baselines.NO_BASELINE
    assert rows[0]["baseline_skipped"].startswith("torch._scaled_mm refused: RuntimeError")


def test_fp8_block_rows_on_a_fake_gpu(fake_gpu, monkeypatch):
    import numpy as np

    import rawcoop
    monkeypatch.setattr(rawcoop, "mn_major_scales", lambda x: np.asfortranarray(x))
    b, calls = fake_gpu(["--suite", "fp8", "--fp8-shapes", "32x16x32", "--fp8-block", "--fp8-block-shapes",
                         "48x200x272", "--rounds", "1", "--iters", "1"], None)
    b.fp8()
    rows = [r for r in b.rows if r.get("scale_mode") == "block"]
    assert len(rows) == 1 and "fp8 block" in calls
    r = rows[0]
    assert r["suite"] == "fp8" and r["case"] == "e4m3 block 48x200x272 TN" and r["baseline"] == baselines.NO_BASELINE
    assert r["peak_tflops"] == 1979.0 and r["flops"] == 2.0 * 48 * 200 * 272 and r["ratio"] is None
    assert r["rel_err"] < 1e-2 and r["err_vs"] == "fp32 GEMM of the dequantised inputs"
    assert 'scale_mode="block"' in r["rawcoop_call"]


def test_run_goes_on_after_a_failing_suite(fake_gpu, monkeypatch, capsys, tmp_path):
    b, _ = fake_gpu(_FAKE_ARGS, None)

    def broken(self):
        raise RuntimeError("boom")
    monkeypatch.setattr(suites.Bench, "fp8", broken)
    args = options.build_parser().parse_args(_FAKE_ARGS + ["--json", str(tmp_path / "r.json")])
    res = harness.run(args)
    assert res["failed_suites"] == [{"suite": "fp8", "error": "RuntimeError: boom"}]
    assert [r["suite"] for r in res["rows"]] == ["tf32"]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["failed_suites"] and saved["peaks"]["e4m3"]["tflops"] == 1979.0
    assert saved["settings"]["fp8_shapes"] == ["64x48x32", "16x32x64"]
    assert "suite fp8 FAILED (RuntimeError: boom)" in capsys.readouterr().err


def test_cupy_compute_type_switch_and_torch_tf32_restore(monkeypatch):
    import types
    cp, mods = _fake_cupy()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    L = mods["cupy._core._routines_linalg"]
    with baselines.cupy_f32_compute_type(cp, "TF32") as ct:
        assert ct == "COMPUTE_TYPE_TF32" and L.state["f"] == 7
    assert L.state["f"] in (0, 1)
    # legacy torch (no fp32_precision): the old flag, restored
    m = types.SimpleNamespace(allow_tf32=False)
    legacy = types.SimpleNamespace(backends=types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=m)))
    with baselines.torch_tf32(legacy) as how:
        assert how == "torch.backends.cuda.matmul.allow_tf32 = True" and m.allow_tf32 is True
    assert m.allow_tf32 is False


def test_fp8_suite_when_torch_breaks_on_the_gpu(fake_gpu, capsys):
    torch = _fake_torch()

    def broken(*a, **k):
        raise RuntimeError("CUDA error: initialization error")
    torch.as_tensor = broken
    b, _ = fake_gpu(_FAKE_ARGS[:2] + ["--fp8-shapes", "32x16x32", "--rounds", "1", "--iters", "1"], torch)
    b.fp8()
    rows = [r for r in b.rows if r["suite"] == "fp8"]
    assert len(rows) == 1 and rows[0]["baseline"] == baselines.NO_BASELINE
    assert rows[0]["baseline_skipped"] == "torch baseline failed: RuntimeError: CUDA error: initialization error"
    assert "Traceback" not in capsys.readouterr().out


def test_time_calls_batch_and_per_call():
    """--timing batch: one event pair around the round's calls, per call;
    calls: the median of per-call pairs.  On a clock-event fake, a call that
    sleeps 2 ms measures ~2 ms either way, and both report host time per call."""
    import time
    import types
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Event=_FakeEvent, get_elapsed_time=lambda s, e: (e.t - s.t) * 1e3))
    seen = []

    def fn(i):
        seen.append(i)
        time.sleep(0.002)
    for how in ("batch", "calls"):
        host = []
        t = timing.time_calls(cp, fn, 3, 5, host, how)
        assert 0.0018 < t < 0.01 and len(host) == 1 and host[0] >= 0.0018
    assert seen == [0, 1, 2, 0, 1] * 2
    with pytest.raises(ValueError, match="timing must be one of"):
        timing.time_calls(cp, fn, 1, 1, None, "graph")
    args = options.build_parser().parse_args(["--timing", "batch"])
    assert args.timing == "batch" and options.settings_of(args)["timing"] == "batch"
    assert options.build_parser().parse_args([]).timing == "calls"


def test_main_suite_out_dtype_float32(fake_gpu):
    """--out-dtype float32: rawcoop writes fp32 D (fp16 in), cupy.matmul keeps
    fp16; rows and settings say so."""
    b, calls = fake_gpu(["--suite", "main", "--dtype", "fp16", "--shapes", "64x48x32", "--out-dtype", "float32",
                         "--variants", "auto,swap=1", "--rounds", "2", "--iters", "2"])
    b.main()
    assert [r["case"] for r in b.rows] == ["fp16 64x48x32 TN out=fp32", "fp16 64x48x32 TN swap=1 out=fp32"]
    assert all(r["out_dtype"] == "float32" and r["rel_err"] < 1e-2 for r in b.rows)
    assert "vs_first" not in b.rows[0] and b.rows[1]["vs_variant"] == "auto"    # timed in the same rounds
    assert b.rows[0]["rounds"][0]["baseline_ms"] == b.rows[1]["rounds"][0]["baseline_ms"]
    assert set(calls) == {("fp16", "float32")}
    assert options.settings_of(b.args)["out_dtype"] == "float32"
    calls.clear()
    b, calls = fake_gpu(["--suite", "main", "--dtype", "fp16", "--shapes", "64x48x32", "--rounds", "1",
                         "--iters", "1"])
    b.main()
    assert b.rows[0]["out_dtype"] == "fp16" and set(calls) == {("fp16", "float16")}


def test_variants_share_rounds():
    """More than one --variants entry: every variant and the baseline are
    timed in the same rounds (compare_variants), the variants' order rotated
    each round and the baseline first / last in turn; each later variant's
    row carries its time against the first's of the same rounds, and the
    report shows the column and a per-variant summary."""
    import time
    import types
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        Event=_FakeEvent, get_elapsed_time=lambda s, e: (e.t - s.t) * 1e3,
        Device=lambda *a: types.SimpleNamespace(synchronize=lambda: None)))
    order = []

    def sleeper(name, seconds):
        def fn(i):
            order.append(name)
            time.sleep(seconds)
        return fn
    fns = [sleeper("a", 0.004), sleeper("b", 0.002), sleeper("c", 0.008)]
    hosts = [{}, {}, {}]
    per = timing.compare_variants(cp, fns, sleeper("t", 0.004), 1, 4, 1, hosts, "batch")
    timed = order[3 * 4:]                           # after the warm-up's 3 x (a, b, c, t)
    assert timed == ["t", "a", "b", "c", "b", "c", "a", "t", "t", "c", "a", "b", "a", "b", "c", "t"]
    assert [len(p) for p in per] == [4, 4, 4]
    for r in range(4):                              # one baseline time per round, shared by every variant
        assert per[0][r][1] == per[1][r][1] == per[2][r][1] is not None
    assert hosts[0]["theirs"] is hosts[1]["theirs"] and len(hosts[2]["ours"]) == 4
    vs = timing.vs_first_fields(per[0], per[1], "auto")
    assert vs["vs_variant"] == "auto" and 1.5 < vs["vs_first"] < 2.5 and vs["vs_first_min"] <= vs["vs_first_max"]
    assert 0.3 < timing.vs_first_fields(per[0], per[2], "auto")["vs_first"] < 0.7
    alone = timing.compare_variants(cp, fns[:2], None, 1, 2, 1, None, "batch")
    assert all(tt is None for p in alone for _, tt in p)

    b = suites.Bench.__new__(suites.Bench)
    b.cp, b.rows, b.on_row = cp, [], None
    b.args = types.SimpleNamespace(rounds=3, iters=1, timing="batch")
    extra = {"dtype": "bf16", "shape": "64x64x64", "layout": "TN", "batch": 1, "beta": 0.0}
    rows = b.record_variants("main", [("auto", "bf16 64x64x64 TN", fns[0], dict(extra, variant="auto")),
                                      ("block_n=128", "bf16 64x64x64 TN block_n=128", fns[1],
                                       dict(extra, variant="block_n=128"))],
                             2.0 * 64 ** 3, sleeper("t", 0.004), 1)
    assert "vs_first" not in rows[0] and rows[1]["vs_variant"] == "auto" and rows[1]["vs_first"] > 1.2
    assert len(rows[1]["rounds"]) == 3 and rows[0]["ratio"] is not None
    text = report.format_report({"rows": rows})
    assert "vs first variant (same rounds)" in text
    assert "main bf16 block_n=128 vs auto (cuBLAS rows): " in text and "over 1 case, faster on 1" in text
    one = b.record_variants("main", [("auto", "bf16 64x64x64 TN", fns[0], dict(extra, variant="auto"))],
                            2.0 * 64 ** 3, None, 1)
    assert "vs_first" not in one[0] and "vs first variant" not in report.format_report({"rows": one})


def test_variants_in_the_fp8_tf32_and_block_suites(fake_gpu, monkeypatch):
    """fp8 (with and without its torch baseline), --fp8-block and tf32 rows
    of two variants: both timed in the same rounds, the second's row with
    vs_first, each with its own output's error."""
    import numpy as np

    import rawcoop
    monkeypatch.setattr(rawcoop, "mn_major_scales", lambda x: np.asfortranarray(x))
    argv = ["--suite", "fp8,tf32", "--fp8-shapes", "64x48x32", "--tf32-shapes", "48x40x24", "--fp8-block",
            "--fp8-block-shapes", "48x200x272", "--variants", "auto,block_n=128", "--rounds", "2", "--iters", "1"]
    for torch in (_fake_torch(), None):
        b, _ = fake_gpu(argv, torch)
        b.fp8()
        b.tf32()
        pairs = list(zip(b.rows[::2], b.rows[1::2]))
        # fp8: one pair per baseline (default, fast-accum; none without torch), one block-scaled pair,
        # tf32: cuBLAS and torch (cuBLAS alone without torch)
        assert len(b.rows) % 2 == 0 and len(pairs) == (2 + 1 + 2 if torch else 1 + 1 + 1)
        for first, second in pairs:
            assert first["variant"] == "auto" and second["variant"] == "block_n=128"
            assert second["case"] == first["case"] + " block_n=128" and second["vs_variant"] == "auto"
            assert "vs_first" not in first and second["vs_first"] > 0 and second["rel_err"] < 1e-2
            assert len(first["rounds"]) == len(second["rounds"]) == 2
            if first["ratio"] is not None:       # the same baseline time each round
                assert [r["baseline_ms"] for r in first["rounds"]] == [r["baseline_ms"] for r in second["rounds"]]
        assert "vs first variant (same rounds)" in report.format_report({"rows": b.rows})


def test_row_without_baseline_prints_the_spread_of_its_rounds(capsys):
    """A row timed alone (block-scaled fp8) prints its rounds' TFLOP/s range next to the median: such
    rounds were seen bimodal (0.808 and 0.95 ms), which the median alone hides."""
    b = suites.Bench.__new__(suites.Bench)
    b.rows, b.on_row = [], None
    flops = 2.0 * 4096 * 7168 * 16384
    row = rows.make_row("fp8", "e4m3 block 4096x7168x16384 TN", flops, [(0.808e-3, None), (0.95e-3, None),
                                                                        (0.85e-3, None)], 1, baseline="none")
    b.keep(row, {}, "none")
    out = capsys.readouterr().out
    assert "(no baseline: " in out and "rounds 1012.7-1190.7 TF/s" in out
    assert row["ratio"] is None and b.rows == [row]
