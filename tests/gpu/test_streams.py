"""GPU: streams and CUDA graphs.

rawcoop.gemm launches on CuPy's current stream of the operands' device and
keeps split-K workspaces per (device, stream).  Under CUDA graph capture
(cupy ``Stream.begin_capture`` / ``end_capture``) it allocates nothing but its
result: the captured kernel goes into the graph (nothing runs at capture), and
every replay with new data written into the captured input buffers is checked
against a float64 reference.  What cannot work under capture (a first-ever
split-K workspace, an ``out`` TMA cannot store into) raises a clear error and
leaves the stream usable.
"""

import numpy as np  # noqa: F401
import pytest

import helpers
from rawcoop._reference import activation as activation64

pytestmark = pytest.mark.gpu

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}
_dt = helpers.dtype
_rand = helpers.rand


def _act64(cp, v, act):
    return activation64(cp, v, act)


def _reference(cp, a, b, beta=0.0, c=None, bias=None, activation=None, **_):
    r = cp.matmul(a.astype(cp.float64), b.astype(cp.float64))
    if c is not None and beta != 0:
        r = r + beta * c.astype(cp.float64)
    if bias is not None:
        r = r + bias.astype(cp.float64)
    return _act64(cp, r, activation)


def _check(cp, d, ref, name):
    helpers.assert_rel_err(cp, d, ref, TOL[name])


def _fill_nan(cp, out):
    out.view(cp.uint16)[...] = 0x7E00 if out.dtype.name == "float16" else 0x7FC0


def _poison(cp, shape, dt):
    out = cp.empty(shape, dtype=dt)
    _fill_nan(cp, out)
    return out


def _workspaces():
    from rawcoop import workspace
    return {k: (v[0].data.ptr, v[1].data.ptr) for k, v in workspace._buffers.items()}


def _stream(cp):
    return cp.cuda.Stream(non_blocking=True)


def _capture(s, fn):
    """Run ``fn`` while ``s`` captures; returns (graph, fn's result).  The
    capture is ended whatever happens, so a raising ``fn`` leaves ``s`` usable."""
    with s:
        s.begin_capture()
        try:
            res = fn()
        except BaseException:
            try:
                s.end_capture()
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
            raise
        graph = s.end_capture()
    return graph, res


def _malloc_counter(cp):
    """A CuPy memory hook recording every pool allocation request (bytes)."""
    class Count(cp.cuda.MemoryHook):
        name = "rawcoop_test_malloc_counter"

        def __init__(self):
            self.sizes = []

        def malloc_preprocess(self, **kw):
            self.sizes.append(kw.get("mem_size", kw.get("size")))

    return Count()


def _fresh_stream_key(cp, workspace, s):
    """``s``'s workspace key, with any stale entry of a destroyed stream that had
    the same handle dropped (so that ``s`` really has no workspace yet)."""
    cp.cuda.Device().synchronize()
    key = (cp.cuda.Device().id, s.ptr)
    workspace._buffers.pop(key, None)
    return key


# ------------------------------------------------------------------ plain streams
def test_non_default_stream_and_its_workspace():
    """Inputs produced on a non-blocking stream, gemm on it, only that stream
    synchronized: correct only if the launches are ordered on it; the split-K
    call's workspace belongs to that stream."""
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    s = _stream(cp)
    key = _fresh_stream_key(cp, workspace, s)
    dt = _dt("bfloat16")
    with s:
        a, bt = _rand(cp, (520, 1000), dt, 1), _rand(cp, (776, 1000), dt, 2)
        a2, bt2 = _rand(cp, (256, 8192), dt, 3), _rand(cp, (256, 8192), dt, 4)
        d = rawcoop.gemm(a, bt.T)
        d2 = rawcoop.gemm(a2, bt2.T, _splits=2)
    assert key in workspace._buffers
    s.synchronize()
    _check(cp, d, _reference(cp, a, bt.T), "bfloat16")
    _check(cp, d2, _reference(cp, a2, bt2.T), "bfloat16")


def test_two_streams_alternating_use_their_own_workspaces():
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    s1, s2 = _stream(cp), _stream(cp)
    k1, k2 = _fresh_stream_key(cp, workspace, s1), _fresh_stream_key(cp, workspace, s2)
    dt = _dt("float16")
    runs = []
    for i in range(8):
        s = (s1, s2)[i % 2]
        with s:
            a, bt = _rand(cp, (256, 8192), dt, 10 + i), _rand(cp, (256, 8192), dt, 20 + i)
            runs.append((a, bt, rawcoop.gemm(a, bt.T, _splits=2)))
    s1.synchronize()
    s2.synchronize()
    for a, bt, d in runs:
        _check(cp, d, _reference(cp, a, bt.T), "float16")
    w1, w2 = workspace._buffers[k1], workspace._buffers[k2]
    assert w1[0].data.ptr != w2[0].data.ptr and w1[1].data.ptr != w2[1].data.ptr


def test_threads_with_their_own_streams():
    import cupy as cp
    import rawcoop
    dt = _dt("bfloat16")
    def work(t, barrier):
        s = _stream(cp)
        with s:
            a, bt = _rand(cp, (256, 8192), dt, 100 + t), _rand(cp, (264, 8192), dt, 200 + t)
            barrier.wait()
            ds = [rawcoop.gemm(a, bt.T, _splits=2 if i % 2 else None) for i in range(6)]
        s.synchronize()
        ref = _reference(cp, a, bt.T)
        for d in ds:
            _check(cp, d, ref, "bfloat16")

    helpers.run_in_threads(work, range(3))


# ------------------------------------------------------------------ CUDA graphs
CAPTURE_CASES = {
    # name: (m, n, k, dtype, gemm kwargs, epilogue operands, out given)
    "data_parallel": (520, 776, 1000, "bfloat16", {"_splits": 1}, False, False),
    "automatic": (520, 776, 1000, "float16", {}, False, False),       # the planner's choice
    "split_k": (256, 256, 8192, "float16", {"_splits": 2}, False, False),
    "split_k_out_epilogue": (256, 256, 8192, "bfloat16", {"_splits": 2}, True, True),
    "swap_ab_out": (48, 520, 1024, "float16", {}, True, True),
    "pdl_out": (300, 512, 640, "float16", {"pdl": True}, False, True),
}


@pytest.mark.parametrize("case", list(CAPTURE_CASES))
def test_graph_capture_and_replay_with_new_data(case):
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    m, n, k, name, kw, epilogue, given_out = CAPTURE_CASES[case]
    dt = _dt(name)
    s = _stream(cp)
    _fresh_stream_key(cp, workspace, s)
    with s:
        a, bt = _rand(cp, (m, k), dt, 1), _rand(cp, (n, k), dt, 2)
        b = bt.T
        kw = dict(kw)
        if epilogue:
            kw.update(c=_rand(cp, (m, n), dt, 3), beta=0.5, bias=_rand(cp, (n,), cp.float32, 4), activation="gelu")
        out = _poison(cp, (m, n), dt) if given_out else None
        warm = rawcoop.gemm(a, b, out=out, **kw)       # once on the stream before capturing
    s.synchronize()
    _check(cp, warm, _reference(cp, a, b, **kw), name)
    ws_before = _workspaces()
    if given_out:
        with s:
            _fill_nan(cp, out)
        s.synchronize()

    counter = _malloc_counter(cp)
    with counter:
        graph, d = _capture(s, lambda: rawcoop.gemm(a, b, out=out, **kw))
    assert len(counter.sizes) == (0 if given_out else 1), f"allocations under capture: {counter.sizes}"
    assert _workspaces() == ws_before, "a workspace was created or replaced under capture"
    if given_out:
        assert d is out
        s.synchronize()
        assert bool(cp.isnan(out.astype(cp.float32)).all()), "the kernel ran at capture instead of in the graph"

    for rep in range(4):
        with s:                                      # new data into the captured buffers, ordered on s
            a[...] = _rand(cp, a.shape, dt, 50 + rep)
            bt[...] = _rand(cp, bt.shape, dt, 60 + rep)
            if epilogue:
                kw["c"][...] = _rand(cp, (m, n), dt, 70 + rep)
        graph.launch(s)
        s.synchronize()
        _check(cp, d, _reference(cp, a, b, **kw), name)


def test_graph_with_a_chain_of_gemms():
    """Two dependent GEMMs (the second one split-K) in one graph."""
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    s = _stream(cp)
    with s:
        x, w1t, w2t = _rand(cp, (256, 512), dt, 1), _rand(cp, (1024, 512), dt, 2), _rand(cp, (256, 1024), dt, 3)
        w1t *= 0.05

    def step():
        hh = rawcoop.gemm(x, w1t.T, activation="relu")
        return hh, rawcoop.gemm(hh, w2t.T, _splits=2)
    with s:               # once outside capture (the second plan is rebuilt under capture: new h pointer)
        step()
    s.synchronize()
    graph, (h, y) = _capture(s, step)
    for rep in range(3):
        with s:
            x[...] = _rand(cp, x.shape, dt, 10 + rep)
        graph.launch(s)
        s.synchronize()
        h64 = cp.maximum(_reference(cp, x, w1t.T), 0)
        _check(cp, h, h64, "float16")
        _check(cp, y, _reference(cp, h, w2t.T), "float16")


def test_capture_of_a_result_that_needs_row_padding():
    """N = 203 fp16 rows are not 16-byte multiples: outside capture the result
    is a contiguous copy of a padded buffer; under capture (no temporaries) it
    is the padded buffer's view, written by every replay."""
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    s = _stream(cp)
    with s:
        a, bt = _rand(cp, (300, 96), dt, 1), _rand(cp, (203, 96), dt, 2)
        warm = rawcoop.gemm(a, bt.T)
    s.synchronize()
    assert warm.flags.c_contiguous
    counter = _malloc_counter(cp)
    with counter:
        graph, d = _capture(s, lambda: rawcoop.gemm(a, bt.T))
    assert len(counter.sizes) == 1
    assert d.shape == (300, 203) and d.dtype == dt and not d.flags.c_contiguous
    for rep in range(3):
        with s:
            a[...] = _rand(cp, a.shape, dt, 10 + rep)
        graph.launch(s)
        s.synchronize()
        _check(cp, d, _reference(cp, a, bt.T), "float16")


def test_capture_with_an_out_tma_cannot_store_into_raises(monkeypatch):
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    s = _stream(cp)
    with s:
        a, bt = _rand(cp, (256, 512), dt, 1), _rand(cp, (320, 512), dt, 2)
        out = cp.empty((320, 256), dtype=dt).T           # column-major out: stored through a temporary
        rawcoop.gemm(a, bt.T, out=out)
    s.synchronize()
    _check(cp, out, _reference(cp, a, bt.T), "float16")
    launches = helpers.spy_launches(monkeypatch)
    with pytest.raises(ValueError, match="out.*graph capture"):
        _capture(s, lambda: rawcoop.gemm(a, bt.T, out=out))
    assert not launches
    with s:                                               # the stream is usable afterwards
        d = rawcoop.gemm(a, bt.T)
    s.synchronize()
    _check(cp, d, _reference(cp, a, bt.T), "float16")


def test_first_split_k_on_a_stream_inside_capture_raises_then_works_after_one_run():
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    dt = _dt("bfloat16")
    warm_s, s = _stream(cp), _stream(cp)
    with warm_s:                      # plan, module and another stream's workspace exist already
        a, bt = _rand(cp, (256, 8192), dt, 1), _rand(cp, (256, 8192), dt, 2)
        rawcoop.gemm(a, bt.T, _splits=2)
    warm_s.synchronize()
    key = _fresh_stream_key(cp, workspace, s)
    with pytest.raises(RuntimeError, match="before begin_capture"):
        _capture(s, lambda: rawcoop.gemm(a, bt.T, _splits=2))
    assert key not in workspace._buffers
    with s:
        rawcoop.gemm(a, bt.T, _splits=2)          # once on this stream, outside capture
    s.synchronize()
    graph, d = _capture(s, lambda: rawcoop.gemm(a, bt.T, _splits=2))
    graph.launch(s)
    s.synchronize()
    _check(cp, d, _reference(cp, a, bt.T), "bfloat16")


# Shapes whose automatic plan may split K or run stream-K (the first one where the planner chooses it runs).
AUTOMATIC_WORKSPACE = {"split-k": [(256, 4096, 8192), (512, 2048, 8192), (256, 2048, 4096), (1024, 1024, 8192)],
                       "stream-k": [(3136, 4176, 8192), (480, 10896, 8192), (3904, 1320, 16384)]}


def _automatic_workspace_shape(cp, kind):
    """(M, N, K, a, bt) of the first AUTOMATIC_WORKSPACE[kind] shape whose automatic plan (the planner's
    choice) is split-K or stream-K as ``kind`` says; the test skips where the planner chooses neither."""
    from rawcoop.gemm import _plan_for
    dt = _dt("bfloat16")
    for m, n, k in AUTOMATIC_WORKSPACE[kind]:
        a, bt = _rand(cp, (m, k), dt, 3), _rand(cp, (n, k), dt, 4)
        plan = _plan_for(a, bt.T)
        dec = plan.decomposition
        if plan.ws_flags and (dec.sk_ctas > 0) == (kind == "stream-k"):
            return m, n, k, a, bt
    pytest.skip(f"the planner chooses no {kind} plan for {AUTOMATIC_WORKSPACE[kind]}")


@pytest.mark.parametrize("kind", list(AUTOMATIC_WORKSPACE))
def test_automatic_split_or_stream_k_inside_capture_falls_back_to_data_parallel(kind):
    """Split-K / stream-K chosen by rawcoop itself, first call on a stream
    inside capture (no workspace there yet): the data-parallel kernel is
    captured instead, no workspace is created, and the replay is correct."""
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    m, n, k, a, bt = _automatic_workspace_shape(cp, kind)
    dt = a.dtype
    warm_s, s = _stream(cp), _stream(cp)
    with warm_s:                      # the data-parallel kernel's module is loaded outside the capture
        rawcoop.gemm(a, bt.T, _splits=1)
    warm_s.synchronize()
    key = _fresh_stream_key(cp, workspace, s)
    out = _poison(cp, (m, n), dt)
    graph, d = _capture(s, lambda: rawcoop.gemm(a, bt.T, out=out))
    assert d is out and key not in workspace._buffers
    graph.launch(s)
    s.synchronize()
    _check(cp, out, _reference(cp, a, bt.T), "bfloat16")


def test_workspace_growth_keeps_a_captured_graphs_workspace_alive():
    """A graph captured with a stream's workspace keeps working after a larger
    split-K problem on the same stream replaced that workspace."""
    import cupy as cp
    import rawcoop
    from rawcoop import workspace
    dt = _dt("float16")
    s = _stream(cp)
    key = _fresh_stream_key(cp, workspace, s)
    with s:
        a, bt = _rand(cp, (256, 4096), dt, 1), _rand(cp, (256, 4096), dt, 2)
        rawcoop.gemm(a, bt.T, _splits=2)
    s.synchronize()
    graph, d = _capture(s, lambda: rawcoop.gemm(a, bt.T, _splits=2))
    first = workspace._buffers[key][0]
    floats = first.size
    # Forced splits on every tile of a large problem need more than the first workspace.
    rows = 128 * (floats // (4 * 2 * 64 * 256) + 1)     # 4 tiles of 256 columns per 128 rows
    with s:
        big_a, big_bt = _rand(cp, (rows, 1024), dt, 3), _rand(cp, (1024, 1024), dt, 4)
        big = rawcoop.gemm(big_a, big_bt.T, _splits=2, _block_n=256)
    s.synchronize()
    assert workspace._buffers[key][0].size > floats, "the large problem did not grow the workspace"
    _check(cp, big, _reference(cp, big_a, big_bt.T), "float16")
    for rep in range(2):
        with s:
            a[...] = _rand(cp, a.shape, dt, 10 + rep)
            scratch = cp.full((floats,), 7.0, dtype=cp.float32)   # would get a freed workspace's memory
        graph.launch(s)
        s.synchronize()
        _check(cp, d, _reference(cp, a, bt.T), "float16")
        assert bool((scratch == 7.0).all()), "the graph wrote into memory it no longer owns"
        del scratch
