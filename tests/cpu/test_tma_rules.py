"""CPU: every documented rule of ``cuTensorMapEncodeTiled`` is enforced by
``TensorMap.validate`` in pure Python, naming the rule; ``encode`` validates
before any driver call; ``dtype_of`` and ``matrix`` build the right requests.

Each rule test pairs a minimally bad request (one field off, everything else
valid) with the nearest good one, so a rule that is too strict fails as well
as one that is too lax.
"""
import re
import types
from collections import OrderedDict
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from rawcoop import tma
from rawcoop.tma import DType, Interleave, L2Promotion, OOBFill, Swizzle, TensorMap, TensorMapError

ADDR = 0x7F00_0000_0000  # 256-byte aligned, like a real allocation


def good2d(**kw) -> TensorMap:
    """A valid rank-2 fp16 map: 128 cols x 64 rows, 256-byte rows, 64x32 box."""
    base = dict(dtype=DType.FLOAT16, address=ADDR, dims=(128, 64), strides=(256,), box=(64, 32))
    base.update(kw)
    return TensorMap(**base)


def good3d(**kw) -> TensorMap:
    """A valid rank-3 fp16 map (interleave-capable)."""
    base = dict(dtype=DType.FLOAT16, address=ADDR, dims=(64, 32, 4), strides=(128, 128 * 32),
                box=(16, 8, 1))
    base.update(kw)
    return TensorMap(**base)


def bad(tm: TensorMap, fragment: str):
    with pytest.raises(TensorMapError, match=re.escape(fragment)) as info:
        tm.validate()
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("tensor map: ")
    return info.value


def ok(tm: TensorMap):
    assert tm.validate() is tm


def test_error_is_a_value_error():
    assert issubclass(TensorMapError, ValueError)
    import rawcoop
    assert rawcoop.TensorMapError is TensorMapError


def test_baselines_are_valid():
    ok(good2d())
    ok(good3d())


def test_tensor_data_type_must_be_known():
    bad(good2d(dtype=13), "tensorDataType")
    bad(good2d(dtype=-1), "tensorDataType")
    ok(good2d(dtype=12))  # TFLOAT32_FTZ, the last one (4-byte: box 64 * 4 = 256 B)


# ---------------------------------------------------------------- rank
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_rank_1_to_5_ok(rank):
    dims = (64,) + (3,) * (rank - 1)
    strides = tuple(128 * 3 ** i for i in range(rank - 1))
    ok(TensorMap(DType.FLOAT16, ADDR, dims, strides, (8,) + (1,) * (rank - 1)))


def test_rank_0_rejected():
    bad(TensorMap(DType.FLOAT16, ADDR, (), (), ()), "tensorRank must be 1..5")


def test_rank_6_rejected():
    dims = (64,) + (3,) * 5
    strides = tuple(128 * 3 ** i for i in range(5))
    bad(TensorMap(DType.FLOAT16, ADDR, dims, strides, (8,) + (1,) * 5), "tensorRank must be 1..5")


@pytest.mark.parametrize("il", [Interleave.B16, Interleave.B32])
def test_interleave_needs_rank_3(il):
    sw = Swizzle.B32 if il == Interleave.B32 else Swizzle.NONE
    bad(good2d(interleave=il, swizzle=sw), "tensorRank must be >= 3 with interleave")
    ok(good3d(interleave=il, swizzle=sw))
    # rank 2 is fine without interleave
    ok(good2d())


# ---------------------------------------------------------------- counts
def test_global_strides_count_is_rank_minus_1():
    bad(good2d(strides=()), "globalStrides has rank-1 entries")
    bad(good2d(strides=(256, 256 * 64)), "globalStrides has rank-1 entries")
    bad(good3d(strides=(128,)), "globalStrides has rank-1 entries")
    ok(good2d(strides=(256,)))
    ok(TensorMap(DType.FLOAT16, ADDR, (64,), (), (8,)))  # rank 1: no strides


def test_box_count_is_rank():
    bad(good2d(box=(64,)), "boxDim has rank entries")
    bad(good2d(box=(64, 32, 1)), "boxDim has rank entries")
    ok(good2d(box=(64, 32)))


def test_element_strides_count_is_rank():
    bad(good2d(element_strides=(1,)), "elementStrides has rank entries")
    bad(good2d(element_strides=(1, 1, 1)), "elementStrides has rank entries")
    ok(good2d(element_strides=(1, 1)))
    ok(good2d(element_strides=None))


# ---------------------------------------------------------------- address
@pytest.mark.parametrize("off", [1, 2, 8, 15])
def test_address_16_byte_aligned(off):
    bad(good2d(address=ADDR + off), "globalAddress must be 16-byte aligned")
    ok(good2d(address=ADDR + 16))


@pytest.mark.parametrize("il", [Interleave.NONE, Interleave.B16])
def test_address_16_aligned_suffices_without_interleave_32b(il):
    ok(good3d(address=ADDR + 16, interleave=il))


def test_address_32_byte_aligned_with_interleave_32b():
    tm = good3d(interleave=Interleave.B32, swizzle=Swizzle.B32)
    bad(replace(tm, address=ADDR + 16), "globalAddress must be 32-byte aligned")
    bad(replace(tm, address=ADDR + 8), "globalAddress must be 32-byte aligned")
    ok(replace(tm, address=ADDR + 32))


# ---------------------------------------------------------------- globalDim
@pytest.mark.parametrize("i", [0, 1])
@pytest.mark.parametrize("d", [0, -1, 2 ** 32 + 1])
def test_global_dim_1_to_2_pow_32(i, d):
    dims = list(good2d().dims)
    dims[i] = d
    bad(good2d(dims=tuple(dims)), "globalDim must be 1..2^32")


@pytest.mark.parametrize("i", [0, 1])
@pytest.mark.parametrize("d", [1, 2 ** 32])
def test_global_dim_bounds_inclusive(i, d):
    dims = list(good2d().dims)
    dims[i] = d
    ok(good2d(dims=tuple(dims)))


# ---------------------------------------------------------------- globalStrides
@pytest.mark.parametrize("s", [8, 200, 264, 2 ** 39 + 8])
def test_strides_multiple_of_16(s):
    bad(good2d(strides=(s,)), "globalStrides must be multiples of 16 bytes")


@pytest.mark.parametrize("s", [16, 272, 2 ** 39 + 16])
def test_strides_multiple_of_16_ok(s):
    ok(good2d(strides=(s,)))


def test_strides_multiple_of_32_with_interleave_32b():
    tm = good3d(interleave=Interleave.B32, swizzle=Swizzle.B32)
    bad(replace(tm, strides=(144, 4096)), "globalStrides must be multiples of 32 bytes")
    bad(replace(tm, strides=(128, 4112)), "globalStrides must be multiples of 32 bytes")
    ok(replace(tm, strides=(160, 4096)))
    # 16-byte multiples stay fine with 16B interleave
    ok(good3d(interleave=Interleave.B16, strides=(144, 4112)))


def test_strides_below_2_pow_40():
    bad(good2d(strides=(2 ** 40,)), "globalStrides must be < 2^40")
    bad(good2d(strides=(2 ** 41,)), "globalStrides must be < 2^40")
    bad(good3d(strides=(128, 2 ** 40)), "globalStrides must be < 2^40")
    ok(good2d(strides=(2 ** 40 - 16,)))


@pytest.mark.parametrize("s", [0, -16, -256])
def test_strides_positive(s):
    bad(good2d(strides=(s,)), "globalStrides must be < 2^40 (and positive)")


# ---------------------------------------------------------------- boxDim
@pytest.mark.parametrize("i", [0, 1])
@pytest.mark.parametrize("b", [0, -8, 257, 264])
def test_box_dim_1_to_256(i, b):
    box = list(good2d().box)
    box[i] = b  # b * 2 bytes stays a multiple of 16: only this rule breaks
    bad(good2d(box=tuple(box)), "boxDim must be 1..256")


def test_box_dim_bounds_inclusive():
    ok(good2d(box=(8, 1)))
    ok(good2d(box=(256, 256)))
    ok(TensorMap(DType.UINT8, ADDR, (4096, 4), (4096,), (256, 256)))


@pytest.mark.parametrize("dtype,box0", [(DType.FLOAT16, 4), (DType.FLOAT16, 12), (DType.UINT8, 8),
                                        (DType.UINT8, 24), (DType.FLOAT32, 2), (DType.FLOAT32, 6),
                                        (DType.FLOAT64, 1), (DType.FLOAT64, 3)])
def test_inner_box_bytes_multiple_of_16_without_interleave(dtype, box0):
    bad(good2d(dtype=dtype, box=(box0, 32)), "boxDim[0] * element size must be a multiple of 16 bytes")


@pytest.mark.parametrize("dtype,box0", [(DType.FLOAT16, 8), (DType.UINT8, 16), (DType.FLOAT32, 4),
                                        (DType.FLOAT64, 2), (DType.UINT8, 48)])
def test_inner_box_bytes_multiple_of_16_ok(dtype, box0):
    ok(good2d(dtype=dtype, box=(box0, 32)))


def test_inner_box_bytes_unconstrained_with_interleave():
    ok(good3d(interleave=Interleave.B16, box=(4, 8, 1)))   # 8 bytes
    ok(good3d(interleave=Interleave.B32, swizzle=Swizzle.B32, box=(4, 8, 1)))
    bad(good3d(box=(4, 8, 1)), "boxDim[0] * element size must be a multiple of 16 bytes")


# ---------------------------------------------------------------- elementStrides
@pytest.mark.parametrize("es", [(0, 1), (1, 0), (9, 1), (1, 9), (-1, 1)])
def test_element_strides_1_to_8(es):
    bad(good2d(element_strides=es), "elementStrides must be 1..8")


@pytest.mark.parametrize("es", [(1, 1), (8, 8), (2, 3), (1, 8)])
def test_element_strides_1_to_8_ok(es):
    ok(good2d(element_strides=es))


# ---------------------------------------------------------------- swizzle span
@pytest.mark.parametrize("sw,span", [(Swizzle.B32, 32), (Swizzle.B64, 64), (Swizzle.B128, 128)])
def test_inner_box_bytes_at_most_swizzle_span(sw, span):
    assert sw.span == span
    # fp16: span bytes = span / 2 elements; 8 more elements = 16 more bytes (still a multiple of 16)
    ok(good2d(swizzle=sw, box=(span // 2, 32)))
    ok(good2d(swizzle=sw, box=(8, 32)))
    e = bad(good2d(swizzle=sw, box=(span // 2 + 8, 32)),
            f"inner box bytes must be <= the swizzle span ({span} B for {sw.name})")
    assert str(span + 16) in str(e)
    # same bytes in another element type
    ok(good2d(dtype=DType.UINT8, dims=(256, 64), swizzle=sw, box=(span, 32)))
    bad(good2d(dtype=DType.UINT8, dims=(256, 64), swizzle=sw, box=(span + 16, 32)),
        f"swizzle span ({span} B")
    ok(good2d(dtype=DType.FLOAT32, swizzle=sw, box=(span // 4, 32)))
    bad(good2d(dtype=DType.FLOAT32, swizzle=sw, box=(span // 4 + 4, 32)), f"swizzle span ({span} B")


def test_no_swizzle_no_span_limit():
    ok(good2d(swizzle=Swizzle.NONE, box=(256, 32)))  # 512-byte rows


# ---------------------------------------------------------------- interleave 32B
@pytest.mark.parametrize("sw", [Swizzle.NONE, Swizzle.B64, Swizzle.B128])
def test_interleave_32b_requires_swizzle_32b(sw):
    bad(good3d(interleave=Interleave.B32, swizzle=sw), "interleave 32B requires swizzle 32B")


def test_interleave_32b_with_swizzle_32b_ok():
    ok(good3d(interleave=Interleave.B32, swizzle=Swizzle.B32))


@pytest.mark.parametrize("sw", list(Swizzle))
def test_interleave_16b_any_swizzle(sw):
    ok(good3d(interleave=Interleave.B16, swizzle=sw))


# ---------------------------------------------------------------- OOB fill
INTEGER_TYPES = [DType.UINT8, DType.UINT16, DType.UINT32, DType.INT32, DType.UINT64, DType.INT64]
FLOAT_TYPES = [DType.FLOAT16, DType.FLOAT32, DType.FLOAT64, DType.BFLOAT16, DType.FLOAT32_FTZ,
               DType.TFLOAT32, DType.TFLOAT32_FTZ]


def _box0_for(dt):
    return 128 // tma.ELEMENT_BYTES[dt]


@pytest.mark.parametrize("dt", INTEGER_TYPES)
def test_nan_oob_fill_rejected_for_integer_types(dt):
    tm = good2d(dtype=dt, dims=(512, 64), strides=(4096,), box=(_box0_for(dt), 8))
    ok(tm)
    ok(replace(tm, oob_fill=OOBFill.ZEROS))
    bad(replace(tm, oob_fill=OOBFill.NAN_REQUEST_ZERO_FMA), "NaN OOB fill needs a floating-point type")


@pytest.mark.parametrize("dt", FLOAT_TYPES)
def test_nan_oob_fill_ok_for_floating_types(dt):
    tm = good2d(dtype=dt, dims=(512, 64), strides=(4096,), box=(_box0_for(dt), 8))
    ok(replace(tm, oob_fill=OOBFill.NAN_REQUEST_ZERO_FMA))


def test_every_dtype_classified():
    assert set(INTEGER_TYPES) | set(FLOAT_TYPES) == set(DType)
    assert set(tma.ELEMENT_BYTES) == set(DType)


@pytest.mark.parametrize("l2", list(L2Promotion))
def test_l2_promotion_values_ok(l2):
    ok(good2d(l2_promotion=l2))


# ---------------------------------------------------------------- box_bytes
def test_box_bytes():
    assert good2d().box_bytes == 64 * 32 * 2
    assert good2d(element_strides=(2, 3)).box_bytes == 32 * 11 * 2  # ceil(32 / 3) = 11
    assert good3d().box_bytes == 16 * 8 * 1 * 2


# ---------------------------------------------------------------- dtype_of
@pytest.mark.parametrize("np_dtype,expected", [
    (np.float16, DType.FLOAT16),
    (ml_dtypes.bfloat16, DType.BFLOAT16),
    (np.float32, DType.FLOAT32),
    (np.float64, DType.FLOAT64),
    (np.uint8, DType.UINT8),
    (np.int8, DType.UINT8),
    (np.int32, DType.INT32),
    (np.uint32, DType.UINT32),
    (np.int64, DType.INT64),
    (ml_dtypes.float8_e4m3fn, DType.UINT8),
    (ml_dtypes.float8_e5m2, DType.UINT8),
    ("float16", DType.FLOAT16),
    (np.dtype("float32"), DType.FLOAT32),
])
def test_dtype_of(np_dtype, expected):
    assert tma.dtype_of(np_dtype) == expected
    assert tma.ELEMENT_BYTES[tma.dtype_of(np_dtype)] == np.dtype(np_dtype).itemsize


@pytest.mark.parametrize("np_dtype", [np.complex64, np.complex128, np.bool_, "U4", object])
def test_dtype_of_unsupported(np_dtype):
    with pytest.raises(TensorMapError, match="has no TMA element type"):
        tma.dtype_of(np_dtype)


# ---------------------------------------------------------------- matrix
def test_matrix_rank2_dims_innermost_first():
    tm = tma.matrix(np.float16, ADDR, rows=100, cols=200, row_stride_elems=256, box_rows=64,
                    box_cols=64, swizzle=Swizzle.B128)
    assert tm.dtype == DType.FLOAT16
    assert tm.address == ADDR
    assert tm.dims == (200, 100)
    assert tm.strides == (512,)
    assert tm.box == (64, 64)
    assert tm.swizzle == Swizzle.B128
    assert tm.interleave == Interleave.NONE
    assert tm.rank == 2
    ok(tm)


def test_matrix_element_size_scales_strides():
    tm = tma.matrix(np.float32, ADDR, rows=10, cols=20, row_stride_elems=32, box_rows=8, box_cols=16)
    assert tm.strides == (128,)
    tm = tma.matrix(ml_dtypes.float8_e4m3fn, ADDR, rows=10, cols=20, row_stride_elems=32, box_rows=8,
                    box_cols=16)
    assert tm.dtype == DType.UINT8 and tm.strides == (32,)
    tm = tma.matrix(DType.BFLOAT16, ADDR, rows=10, cols=20, row_stride_elems=32, box_rows=8, box_cols=16)
    assert tm.dtype == DType.BFLOAT16 and tm.strides == (64,)


def test_matrix_batched_rank3():
    tm = tma.matrix(ml_dtypes.bfloat16, ADDR, rows=100, cols=200, row_stride_elems=256, box_rows=64,
                    box_cols=64, batch=3, batch_stride_elems=100 * 256)
    assert tm.dtype == DType.BFLOAT16
    assert tm.dims == (200, 100, 3)
    assert tm.strides == (512, 100 * 256 * 2)
    assert tm.box == (64, 64, 1)
    ok(tm)


def test_matrix_force_rank3():
    tm = tma.matrix(np.float16, ADDR, rows=100, cols=200, row_stride_elems=256, box_rows=64,
                    box_cols=64, batch_stride_elems=100 * 256, force_rank3=True)
    assert tm.dims == (200, 100, 1)
    assert tm.strides == (512, 100 * 256 * 2)
    assert tm.box == (64, 64, 1)
    ok(tm)
    # force_rank3 is an option of matrix(), never a TensorMap field, whatever the batch
    for force in (True, False):
        tm = tma.matrix(np.float16, ADDR, rows=100, cols=200, row_stride_elems=256, box_rows=64,
                        box_cols=64, batch=2, batch_stride_elems=100 * 256, force_rank3=force)
        assert tm.dims == (200, 100, 2)
        ok(tm)
    tm = tma.matrix(np.float16, ADDR, rows=100, cols=200, row_stride_elems=256, box_rows=64,
                    box_cols=64, force_rank3=False)
    assert tm.dims == (200, 100)


def test_matrix_passes_other_fields_through():
    tm = tma.matrix(np.float16, ADDR, rows=10, cols=64, row_stride_elems=64, box_rows=8, box_cols=64,
                    oob_fill=OOBFill.NAN_REQUEST_ZERO_FMA, l2_promotion=L2Promotion.B256)
    assert tm.oob_fill == OOBFill.NAN_REQUEST_ZERO_FMA and tm.l2_promotion == L2Promotion.B256
    ok(tm)


def test_matrix_bad_request_caught_by_validate():
    # 100-element fp16 rows: 200-byte stride, not a multiple of 16
    tm = tma.matrix(np.float16, ADDR, rows=10, cols=100, row_stride_elems=100, box_rows=8, box_cols=64)
    bad(tm, "globalStrides must be multiples of 16 bytes")
    tm = tma.matrix(np.float16, ADDR, rows=10, cols=64, row_stride_elems=64, box_rows=8, box_cols=128,
                    swizzle=Swizzle.B128)
    bad(tm, "swizzle span (128 B")


# ---------------------------------------------------------------- encode
class _NoDriver(types.ModuleType):
    """Stands in for cuda.bindings.driver; any use is recorded and fails."""

    def __init__(self):
        super().__init__("no_driver")
        self.touched = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self.touched.append(name)
        raise AssertionError(f"driver.{name} used for a request that should not reach the driver")


def _fake_driver():
    calls = []
    ident = lambda x: x  # noqa: E731

    def encode_tiled(*args):
        calls.append(args)
        return (0, ("cmap", len(calls)))

    drv = types.SimpleNamespace(
        CUresult=types.SimpleNamespace(CUDA_SUCCESS=0), cuTensorMapEncodeTiled=encode_tiled,
        CUtensorMapDataType=ident, cuuint64_t=ident, cuuint32_t=ident, CUtensorMapInterleave=ident,
        CUtensorMapSwizzle=ident, CUtensorMapL2promotion=ident, CUtensorMapFloatOOBfill=ident)
    return drv, calls


@pytest.fixture
def fresh_lru(monkeypatch):
    monkeypatch.setattr(tma, "_ENCODED", OrderedDict())
    return tma._ENCODED


BAD_REQUESTS = [
    (good2d(address=ADDR + 8), "globalAddress must be 16-byte aligned"),
    (good2d(strides=(200,)), "globalStrides must be multiples of 16"),
    (good2d(box=(300, 32)), "boxDim must be 1..256"),
    (good2d(swizzle=Swizzle.B64, box=(64, 32)), "swizzle span (64 B"),
    (good2d(dtype=DType.UINT8, oob_fill=OOBFill.NAN_REQUEST_ZERO_FMA, box=(64, 32)), "NaN OOB fill"),
    (good2d(interleave=Interleave.B16), "tensorRank must be >= 3 with interleave"),
]


@pytest.mark.parametrize("tm,fragment", BAD_REQUESTS)
def test_encode_validates_before_any_driver_call(monkeypatch, fresh_lru, tm, fragment):
    import rawcoop._cuda as rc_cuda
    nd = _NoDriver()
    monkeypatch.setattr(rc_cuda, "driver", nd)
    with pytest.raises(TensorMapError, match=re.escape(fragment)):
        tma.encode(tm)
    assert nd.touched == []
    assert len(fresh_lru) == 0


@pytest.mark.parametrize("tm,fragment", BAD_REQUESTS)
def test_encode_bad_request_is_tensor_map_error_with_real_bindings(fresh_lru, tm, fragment):
    # On this GPU-less machine a driver call would raise a CUDA error (or fail to
    # load libcuda); a TensorMapError proves the request never got that far.
    with pytest.raises(TensorMapError, match=re.escape(fragment)):
        tma.encode(tm)


def test_encode_calls_driver_once_per_request(monkeypatch, fresh_lru):
    import rawcoop._cuda as rc_cuda
    drv, calls = _fake_driver()
    monkeypatch.setattr(rc_cuda, "driver", drv)
    tm = good2d(swizzle=Swizzle.B128, element_strides=(1, 1))
    cmap = tma.encode(tm)
    assert cmap == ("cmap", 1)
    assert len(calls) == 1
    args = calls[0]
    assert args[0] == int(DType.FLOAT16)
    assert args[1] == 2 and args[2] == ADDR
    assert list(args[3]) == [128, 64]
    assert list(args[4]) == [256]
    assert list(args[5]) == [64, 32]
    assert list(args[6]) == [1, 1]
    assert args[7:] == (int(Interleave.NONE), int(Swizzle.B128), int(L2Promotion.B128), int(OOBFill.ZEROS))
    # identical request: served from the LRU, no driver call
    assert tma.encode(good2d(swizzle=Swizzle.B128, element_strides=(1, 1))) is cmap
    assert len(calls) == 1
    # a different request is a different descriptor
    assert tma.encode(good2d(swizzle=Swizzle.B128, address=ADDR + 256)) == ("cmap", 2)
    assert len(calls) == 2


def test_encode_default_element_strides_are_ones(monkeypatch, fresh_lru):
    import rawcoop._cuda as rc_cuda
    drv, calls = _fake_driver()
    monkeypatch.setattr(rc_cuda, "driver", drv)
    tma.encode(good3d())
    assert list(calls[0][6]) == [1, 1, 1]


def test_encode_lru_evicts_oldest(monkeypatch, fresh_lru):
    import rawcoop._cuda as rc_cuda
    drv, calls = _fake_driver()
    monkeypatch.setattr(rc_cuda, "driver", drv)
    monkeypatch.setattr(tma, "_ENCODED_MAX", 2)
    a, b, c = (good2d(address=ADDR + 256 * i) for i in range(3))
    tma.encode(a)
    tma.encode(b)
    tma.encode(a)          # a is now the most recent
    tma.encode(c)          # evicts b
    assert len(calls) == 3 and len(fresh_lru) == 2
    tma.encode(a)
    assert len(calls) == 3
    tma.encode(b)
    assert len(calls) == 4
