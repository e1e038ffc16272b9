"""GPU: stream-K (opt-in ``_streamk=True``; kernels/scheduler.cuh): the
partial last wave's k-blocks shared equally by all CTAs, pieces reduced by
the serial fix-up.  Correct against float64 on shapes with a partial last
wave, with fewer tiles than SMs, ragged M/N/K, every layout, the epilogue
(C, bias, activation, fp32 out), batches; deterministic (bit-identical
reruns)."""
import pytest

import helpers

pytestmark = pytest.mark.gpu

TOL = {"float16": 7e-4, "bfloat16": 5e-3, "float32": 2e-5}


def _operands(cp, m, n, k, dt, layout, seed, batch=None):
    lead = (batch,) if batch else ()
    if layout[0] == "T":
        a = helpers.rand(cp, lead + (m, k), dt, seed)
    else:
        a = helpers.rand(cp, lead + (k, m), dt, seed).swapaxes(-1, -2)
    if layout[1] == "N":
        b = helpers.rand(cp, lead + (n, k), dt, seed + 1).swapaxes(-1, -2)
    else:
        b = helpers.rand(cp, lead + (k, n), dt, seed + 1)
    return a, b


def _decomposition(m, n, k, block_n, batch=1):
    from rawcoop import device
    from rawcoop.plan import scheduler
    return scheduler.schedule(m, n, 128, block_n, device.info(0).sm_count, None, batch, k=k,
                              stream_k=True).decomposition


@pytest.mark.parametrize("m,n,k,block_n", [
    (4096, 4096, 4096, 256),        # 512 tiles: 3 full waves, 116 tiles in stream-K pieces
    (4096, 4096, 4096, 128),        # 1024 tiles: 7 full waves + 100
    (1000, 3000, 2000, 256),        # ragged, fewer tiles than SMs: every tile in pieces
    (520, 776, 1000, 128),          # ragged K (not a multiple of 64), pieces of a few k-blocks
    (2048, 2048, 8192, 256),        # long K: CTAs' ranges inside a single tile (middle pieces)
], ids=str)
@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
def test_stream_k_vs_float64(m, n, k, block_n, dt_name):
    import cupy as cp
    import rawcoop
    dec = _decomposition(m, n, k, block_n)
    assert dec.sk_ctas, f"expected stream-K pieces for {m}x{n}x{k}: {dec}"
    dt = helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, "TN", 3)
    d = cp.full((m, n), cp.nan, dtype=cp.float32).astype(dt)      # poisoned: unwritten tiles show
    rawcoop.gemm(a, b, out=d, _streamk=True, _block_n=block_n, _block_m=128, _swap=False)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


@pytest.mark.parametrize("kw", [{}, dict(_pingpong=True, _block_n=128)], ids=["cooperative", "pingpong"])
@pytest.mark.parametrize("layout", ["NN", "NT", "TT"])
def test_stream_k_layouts(layout, kw):
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("float16")
    # M and N ragged to every tile but multiples of 8, since a non-K-major operand's leading
    # dimension is M or N and TMA needs its stride in 16-byte units.
    a, b = _operands(cp, 1496, 2104, 1800, dt, layout, 23 if kw else 5)
    d = rawcoop.gemm(a, b, _streamk=True, **kw)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL["float16"])


def test_stream_k_epilogue_batched_fp32_out():
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a, b = _operands(cp, 700, 900, 3000, dt, "TN", 7, batch=3)
    c = helpers.rand(cp, (3, 700, 900), cp.float32, 9)
    bias = helpers.rand(cp, (900,), cp.float32, 10)
    d = rawcoop.gemm(a, b, c=c, alpha=0.5, beta=2.0, bias=bias, activation="relu", out_dtype=cp.float32,
                     _streamk=True, _block_n=128)
    ref = cp.maximum(0.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) + 2.0 * c + bias, 0)
    helpers.assert_rel_err(cp, d, ref, TOL["float32"])


def test_stream_k_bit_identical_reruns_and_close_to_data_parallel():
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a, b = _operands(cp, 4096, 4096, 4096, dt, "TN", 11)
    first = rawcoop.gemm(a, b, _streamk=True)
    for _ in range(10):
        again = rawcoop.gemm(a, b, _streamk=True)
        assert cp.array_equal(again.view(cp.uint16), first.view(cp.uint16)), "stream-K result changed between runs"
    dp = rawcoop.gemm(a, b, _splits=1)
    helpers.assert_rel_err(cp, first, dp.astype(cp.float64), 5e-3)


@pytest.mark.parametrize("m,n,k,dt_name", [(4096, 8192, 8192, "bfloat16"), (1792, 3840, 8192, "float16")])
def test_stream_k_wide_tiles_and_the_automatic_plan_bit_identical(m, n, k, dt_name):
    """7 or 1 full waves of 128x256 tiles, the last 59-76% full: stream-K
    128x256 tiles, not swapped (forced), and the automatic plan (the
    planner's choice); each matches float64 and 10 reruns are bit-identical."""
    import cupy as cp
    import rawcoop
    from rawcoop.gemm import _plan_for
    dt = helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, "TN", 13)
    ref = a.astype(cp.float64) @ b.astype(cp.float64)
    streamk = dict(_streamk=True, _block_m=128, _block_n=256, _swap=False)
    plan = _plan_for(a, b, **streamk)
    assert plan.cfg.stream_k and plan.cfg.block_n == 256 and plan.decomposition.sk_ctas, plan.decomposition
    helpers.assert_planner_choice(_plan_for(a, b))
    for kw in (streamk, {}):
        first = rawcoop.gemm(a, b, **kw)
        helpers.assert_rel_err(cp, first, ref, TOL[dt_name])
        for _ in range(10):
            again = rawcoop.gemm(a, b, **kw)
            assert cp.array_equal(again.view(cp.uint16), first.view(cp.uint16)), f"result changed between runs {kw}"


# ---------------------------------------------------------------- ping-pong stream-K
@pytest.mark.parametrize("m,n,k", [
    (2048, 2624, 2048),             # 336 tiles: 2 full waves, 72 tiles in stream-K pieces
    (1000, 3000, 2000),             # ragged, 192 tiles: 1 full wave + 60; K not a multiple of 64
    (520, 776, 1000),               # 35 tiles, fewer than SMs: every tile in pieces of a few k-blocks
    (2048, 2048, 8192),             # 256 tiles, long K: CTAs' ranges inside one tile (middle pieces)
    (4096, 4096, 4096),             # 1024 tiles: 7 full waves + 100
], ids=str)
@pytest.mark.parametrize("dt_name", ["bfloat16", "float16"])
def test_pingpong_stream_k_vs_float64(m, n, k, dt_name):
    """Ping-pong 128x128 with stream-K (``_pingpong=True, _streamk=True``):
    the consumers alternate units, stream-K pieces included, and the pieces
    meet in the serial chain fix-up; NaN-poisoned output, float64 reference."""
    import cupy as cp
    import rawcoop
    dec = _decomposition(m, n, k, 128)          # (the same stream-K walk as the cooperative 128x128 kernel)
    assert dec.sk_ctas, f"expected stream-K pieces for {m}x{n}x{k}: {dec}"
    dt = helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, "TN", 21)
    d = cp.full((m, n), cp.nan, dtype=cp.float32).astype(dt)
    rawcoop.gemm(a, b, out=d, _pingpong=True, _streamk=True, _block_n=128, _swap=False)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])


def test_pingpong_stream_k_swapped_epilogue_batched():
    """Swap-AB (D column-major in the kernel's view, bias along its rows),
    C + bias + gelu, fp32 out, three batches, ping-pong stream-K."""
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("bfloat16")
    a, b = _operands(cp, 900, 1400, 1504, dt, "TN", 25, batch=3)
    c = helpers.rand(cp, (3, 900, 1400), cp.float32, 26)
    bias = helpers.rand(cp, (1400,), cp.float32, 27)
    for swap in (False, True):
        d = cp.full((3, 900, 1400), cp.nan, dtype=cp.float32)
        rawcoop.gemm(a, b, c=c, alpha=0.5, beta=2.0, bias=bias, activation="gelu", out=d, out_dtype=cp.float32,
                     _swap=swap, _pingpong=True, _streamk=True, _block_n=128)
        v = 0.5 * (a.astype(cp.float64) @ b.astype(cp.float64)) + 2.0 * c + bias
        ref = 0.5 * v * (1 + cp.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
        helpers.assert_rel_err(cp, d, ref, 1e-4)


@pytest.mark.parametrize("m,n,k,dt_name", [(2048, 2624, 2048, "bfloat16"), (1872, 2576, 1536, "float16")])
def test_pingpong_stream_k_bit_identical_reruns_and_close_to_data_parallel(m, n, k, dt_name):
    """10 reruns bit-identical (the chain's fixed order); close to the
    data-parallel ping-pong result (same products, another summation)."""
    import cupy as cp
    import rawcoop
    dt = helpers.dtype(dt_name)
    a, b = _operands(cp, m, n, k, dt, "TN", 29)
    first = rawcoop.gemm(a, b, _pingpong=True, _streamk=True, _block_n=128)
    for _ in range(10):
        again = rawcoop.gemm(a, b, _pingpong=True, _streamk=True, _block_n=128)
        assert cp.array_equal(again.view(cp.uint16), first.view(cp.uint16)), "result changed between runs"
    dp = rawcoop.gemm(a, b, _pingpong=True, _streamk=False, _splits=1, _block_n=128)
    helpers.assert_rel_err(cp, first, dp.astype(cp.float64), TOL[dt_name])
    helpers.assert_rel_err(cp, first, a.astype(cp.float64) @ b.astype(cp.float64), TOL[dt_name])
