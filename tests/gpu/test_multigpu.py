"""GPU, two devices: rawcoop.gemm runs on the device of its operands whatever
the current device (modules, tensor maps, workspaces and the result on that
device, the launch on that device's current CuPy stream), leaves the caller's
current device, context and stream as they were, rejects operands spread over
devices before launching anything, and runs on both devices at once."""

import pytest

import helpers


def _two_hoppers() -> bool:
    try:
        from rawcoop import device
        return device.gpu_count() >= 2 and all(device.info(i).cc == (9, 0) for i in (0, 1))
    except Exception:  # noqa: BLE001 - no driver, no GPU
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _two_hoppers(), reason="needs 2 GPUs")]

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}
_dt = helpers.dtype


def _rand(cp, dev, shape, dt, seed):
    with cp.cuda.Device(dev):
        return helpers.rand(cp, shape, dt, seed)


def _check(cp, d, ref, name):
    with cp.cuda.Device(d.device.id):
        helpers.assert_rel_err(cp, d, ref, TOL[name])


def _reference(cp, a, b, beta=0.0, c=None, bias=None, activation=None, **_):
    with cp.cuda.Device(a.device.id):
        r = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
        if c is not None and beta != 0:
            r = r + beta * c.astype(cp.float64)
        if bias is not None:
            r = r + bias.astype(cp.float64)
        if activation == "relu":
            r = cp.maximum(r, 0)
        return r


def _current_state(cp):
    from rawcoop._cuda import check, driver
    ctx = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    return cp.cuda.runtime.getDevice(), int(ctx), cp.cuda.get_current_stream().ptr


CASES = {
    # name: (m, n, k, dtype, options: forced kernel choices, epilogue operands, out given)
    "plain": (520, 776, 1000, "bfloat16", {}),
    "split_k": (256, 256, 8192, "float16", {"_splits": 2}),
    "cluster2": (1024, 512, 512, "bfloat16", {"_cluster": 2}),
    "ragged_n_returned": (300, 203, 96, "float16", {}),
    "swap_ab_epilogue_out": (40, 520, 512, "float16", {"_swap": True, "epilogue": True, "out": True}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_device1_operands_while_device0_is_current(case):
    import cupy as cp
    import rawcoop
    import sys
    gemm_mod = sys.modules["rawcoop.gemm"]       # rawcoop.gemm the attribute is the function
    m, n, k, name, opts = CASES[case]
    dt = _dt(name)
    opts = dict(opts)
    a, bt = _rand(cp, 1, (m, k), dt, 1), _rand(cp, 1, (n, k), dt, 2)
    kw = {key: v for key, v in opts.items() if key.startswith("_")}
    if opts.get("epilogue"):
        kw.update(c=_rand(cp, 1, (m, n), dt, 3), beta=0.5, bias=_rand(cp, 1, (n,), cp.float32, 4),
                  activation="relu")
    out = None
    if opts.get("out"):
        with cp.cuda.Device(1):
            out = cp.full((m, n), cp.nan, dtype=cp.float32).astype(dt)
    with cp.cuda.Device(0):
        before = _current_state(cp)
        d = rawcoop.gemm(a, bt.T, out=out, **kw)
        assert _current_state(cp) == before, "the caller's device, context or stream changed"
    if out is not None:
        assert d is out
    assert d.device.id == 1 and d.shape == (m, n) and d.dtype == dt
    with cp.cuda.Device(1):
        cp.cuda.get_current_stream().synchronize()
    _check(cp, d, _reference(cp, a, bt.T, **kw), name)
    plans = [p for p in gemm_mod._PLANS.values() if p.dev == 1]
    assert plans and all(1 in p.kernel._functions for p in plans)


def test_same_problem_on_both_devices_has_a_module_per_device():
    import cupy as cp
    import rawcoop
    import sys
    gemm_mod = sys.modules["rawcoop.gemm"]       # rawcoop.gemm the attribute is the function
    dt = _dt("bfloat16")
    res = {}
    for dev in (1, 0):
        a, bt = _rand(cp, dev, (384, 640), dt, 10 + dev), _rand(cp, dev, (512, 640), dt, 20 + dev)
        with cp.cuda.Device(1 - dev):          # the other device current
            res[dev] = (a, bt, rawcoop.gemm(a, bt.T, _splits=2))
    for dev, (a, bt, d) in res.items():
        assert d.device.id == dev
        with cp.cuda.Device(dev):
            cp.cuda.Device().synchronize()
        _check(cp, d, _reference(cp, a, bt.T), "bfloat16")
    kernels = {id(p.kernel): p.kernel for p in gemm_mod._PLANS.values() if p.m == 384 and p.n == 512}
    assert any({0, 1} <= set(kern._functions) for kern in kernels.values())
    for kern in kernels.values():
        if {0, 1} <= set(kern._functions):
            assert int(kern._functions[0]) != int(kern._functions[1])


def test_launch_goes_to_the_current_stream_of_the_operands_device():
    """Device 1's current stream is s1 while device 0 is current: the split-K
    workspace (and so the launch) belongs to s1, and s1 alone orders it."""
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    dt = _dt("float16")
    with cp.cuda.Device(1):
        s1 = cp.cuda.Stream(non_blocking=True)
        cp.cuda.Device().synchronize()
        workspace._buffers.pop((1, s1.ptr), None)
        s1.use()
    try:
        a, bt = _rand(cp, 1, (256, 8192), dt, 1), _rand(cp, 1, (256, 8192), dt, 2)    # produced on s1
        with cp.cuda.Device(0):
            d = rawcoop.gemm(a, bt.T, _splits=2)
        assert (1, s1.ptr) in workspace._buffers
        s1.synchronize()
        _check(cp, d, _reference(cp, a, bt.T), "float16")
    finally:
        with cp.cuda.Device(1):
            cp.cuda.Stream.null.use()


def test_operands_on_different_devices_raise_before_launch(monkeypatch):
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a0, b0 = _rand(cp, 0, (128, 256), dt, 1), _rand(cp, 0, (256, 192), dt, 2)
    a1, b1 = _rand(cp, 1, (128, 256), dt, 3), _rand(cp, 1, (256, 192), dt, 4)
    c1 = _rand(cp, 1, (128, 192), dt, 5)
    bias1 = _rand(cp, 1, (192,), cp.float32, 6)
    with cp.cuda.Device(1):
        out1 = cp.zeros((128, 192), dtype=dt)
    with cp.cuda.Device(0):
        out0 = cp.zeros((128, 192), dtype=dt)
    rawcoop.gemm(a0, b0, out=out0)                  # a cached plan: `out` is then checked on the fast path
    with cp.cuda.Device(0):
        cp.cuda.Device().synchronize()

    helpers.spy_launches(monkeypatch, fail="a kernel was launched for operands on different devices")
    cases = [
        ((a0, b1), {}, "b is on device 1, but a is on device 0"),
        ((a1, b0), {}, "b is on device 0, but a is on device 1"),
        ((a0, b0), dict(c=c1, beta=1.0), "c is on device 1"),
        ((a0, b0), dict(bias=bias1), "bias is on device 1"),
        ((a0, b0), dict(out=out1), "out is on device 1"),          # the cached plan's fast path
        ((a0, b0), dict(out=out1, activation="relu"), "out is on device 1"),   # full validation
    ]
    for args, kw, match in cases:
        with pytest.raises(ValueError, match=match):
            rawcoop.gemm(*args, **kw)
    with cp.cuda.Device(1):
        assert not bool(out1.any()), "out was written"


def test_both_devices_at_once():
    """One host thread per device, each on its own stream, plus one thread
    interleaving launches on both devices without synchronizing in between."""
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    def per_device(dev, barrier):
        with cp.cuda.Device(dev):
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                a = helpers.rand(cp, (256, 8192), dt, 30 + dev)
                bt = helpers.rand(cp, (264, 8192), dt, 40 + dev)
                barrier.wait()
                ds = [rawcoop.gemm(a, bt.T, _splits=2 if i % 2 else None) for i in range(8)]
            s.synchronize()
        ref = _reference(cp, a, bt.T)
        for d in ds:
            assert d.device.id == dev
            _check(cp, d, ref, "bfloat16")

    helpers.run_in_threads(per_device, (0, 1))

    ops = {dev: (_rand(cp, dev, (520, 1000), dt, 50 + dev), _rand(cp, dev, (776, 1000), dt, 60 + dev))
           for dev in (0, 1)}
    outs = []
    for i in range(6):
        dev = i % 2
        a, bt = ops[dev]
        outs.append((dev, rawcoop.gemm(a, bt.T, _splits=2 if i % 3 == 0 else None)))
    for dev in (0, 1):
        with cp.cuda.Device(dev):
            cp.cuda.Device().synchronize()
    for dev, d in outs:
        a, bt = ops[dev]
        assert d.device.id == dev
        _check(cp, d, _reference(cp, a, bt.T), "bfloat16")


def test_graph_capture_on_device1_while_device0_is_current():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a, bt = _rand(cp, 1, (256, 8192), dt, 1), _rand(cp, 1, (256, 8192), dt, 2)
    with cp.cuda.Device(1):
        s1 = cp.cuda.Stream(non_blocking=True)
        with s1:
            rawcoop.gemm(a, bt.T, _splits=2)              # the workspace of (1, s1)
        s1.synchronize()
        s1.use()
    try:
        with cp.cuda.Device(1):
            s1.begin_capture()
        try:
            with cp.cuda.Device(0):
                d = rawcoop.gemm(a, bt.T, _splits=2)      # goes to device 1's current stream: s1
        finally:
            with cp.cuda.Device(1):
                graph = s1.end_capture()
        assert d.device.id == 1
        for rep in range(2):
            with cp.cuda.Device(1):
                with s1:
                    a[...] = helpers.rand(cp, a.shape, dt, 10 + rep)
                graph.launch(s1)
                s1.synchronize()
            _check(cp, d, _reference(cp, a, bt.T), "float16")
    finally:
        with cp.cuda.Device(1):
            cp.cuda.Stream.null.use()
