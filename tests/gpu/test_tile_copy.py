"""GPU: the TMA + mbarrier ring + cluster-multicast exercise kernel, bit-exact."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu


def _random(cp, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt.name == "bfloat16":
        host = rng.standard_normal(shape).astype(dt)
    else:
        host = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, size=shape, dtype=dt, endpoint=True)
    return cp.asarray(host)


def _poisoned_out(cp, shape, dtype):
    out = cp.empty(shape, dtype=dtype)
    out.view(cp.uint8)[...] = 0xA5
    return out


SHAPES = [(1, 8), (63, 64), (64, 64), (65, 72), (127, 200), (300, 1000), (1000, 24), (4097, 136),
          (2048, 2048), (7, 4104)]


@pytest.mark.parametrize("copies", [1, 2, 4])
@pytest.mark.parametrize("shape", SHAPES)
def test_replicate_bit_exact_fp16(copies, shape):
    import cupy as cp
    import rawcoop
    src = _random(cp, shape, np.float16, seed=hash((copies, shape)) % 2**32)
    out = _poisoned_out(cp, (copies,) + shape, np.float16)
    rawcoop.replicate(src, copies, out=out)
    cp.cuda.get_current_stream().synchronize()
    for r in range(copies):
        assert cp.array_equal(out[r].view(cp.uint16), src.view(cp.uint16)), f"copy {r} differs"


@pytest.mark.parametrize("dtype", ["uint8", "bfloat16", "float32", "int64"])
@pytest.mark.parametrize("copies", [2, 4])
def test_replicate_dtypes(dtype, copies):
    import cupy as cp
    import ml_dtypes  # noqa: F401
    import rawcoop
    dt = np.dtype(getattr(ml_dtypes, dtype)) if dtype == "bfloat16" else np.dtype(dtype)
    shape = (333, 160)
    src = _random(cp, shape, dt, seed=7)
    out = _poisoned_out(cp, (copies,) + shape, dt)
    rawcoop.replicate(src, copies, out=out)
    view = {1: cp.uint8, 2: cp.uint16, 4: cp.uint32, 8: cp.uint64}[dt.itemsize]
    for r in range(copies):
        assert cp.array_equal(out[r].view(view), src.view(view))


def test_replicate_many_tiles_wraps_ring_phases():
    """Far more tiles than CTAs x stages: every ring slot is reused many times."""
    import cupy as cp
    import rawcoop
    src = _random(cp, (8192 + 5, 4096 + 8), np.float16, seed=3)
    out = rawcoop.replicate(src, 2)
    assert cp.array_equal(out[0].view(cp.uint16), src.view(cp.uint16))
    assert cp.array_equal(out[1].view(cp.uint16), src.view(cp.uint16))


def test_replicate_strided_rows_and_non_default_stream():
    import cupy as cp
    import rawcoop
    big = _random(cp, (500, 256), np.float16, seed=11)
    src = big[:, :200]                        # row stride 512 B, rows of 400 B
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        out = rawcoop.replicate(src, 2)
    s.synchronize()
    assert cp.array_equal(out[1].view(cp.uint16), cp.ascontiguousarray(src).view(cp.uint16))


def test_replicate_rejects_bad_input():
    import cupy as cp
    import rawcoop
    a = cp.zeros((64, 64), dtype=cp.float16)
    with pytest.raises(ValueError, match="copies"):
        rawcoop.replicate(a, 3)
    with pytest.raises(ValueError, match="unit stride"):
        rawcoop.replicate(a.T, 2)
    with pytest.raises(ValueError, match="2-D"):
        rawcoop.replicate(a[0], 2)
    with pytest.raises(TypeError, match="cupy.ndarray"):
        rawcoop.replicate(np.zeros((4, 8), np.float16), 2)
    with pytest.raises(ValueError, match="16 bytes"):
        rawcoop.replicate(cp.zeros((8, 3), dtype=cp.float16), 2)
