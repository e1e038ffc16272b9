"""CPU: the fp32 column-major epilogue (kernels/gemm.cu
``colmajor_f32``): a 64-row fp32 chunk of a column-major C or D is two
32 x 32 TMA boxes.  The PTX has two store (D) or load (C) sites where the
row-major and 16-bit kernels have one, the host encodes 32 x 32 boxes for
it (64 x 64 for 16-bit), and planning accepts what it now can: a
column-major fp32 ``c`` and a forced swap-AB with fp32 output."""
from dataclasses import replace

import pytest

from rawcoop import compiler
from helpers.plan import gc as gc

from helpers.stub import BF16, StubArray, build, stub_planning, tn

STORE = "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"
LOAD = "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes ["


def _counts(cfg):
    ptx = compiler.compile_spec(cfg.spec, want_ptx=True).ptx
    return ptx.count(STORE), ptx.count(LOAD)


def test_two_boxes_per_fp32_column_major_chunk():
    """Same tile and epilogue: a column-major fp32 D doubles the unrolled
    epilogue's TMA stores, a column-major fp32 C adds the C loader's second
    load; 16-bit column-major keeps one box per chunk."""
    base = gc.GemmConfig(256, gc.BF16, True, True, 2, True, False, False, 1, True, 2)
    stores, loads = _counts(base)
    assert _counts(replace(base, d_colmajor=True)) == (2 * stores, loads)
    assert _counts(replace(base, c_colmajor=True)) == (stores, loads + 1)
    assert _counts(replace(base, c_colmajor=True, d_colmajor=True)) == (2 * stores, loads + 1)
    b16 = replace(base, out_type=1)
    assert _counts(replace(b16, c_colmajor=True, d_colmajor=True)) == _counts(b16)


@pytest.fixture
def planning(monkeypatch):
    return stub_planning(monkeypatch).maps


@pytest.mark.parametrize("out_name, box", [("float32", (32, 32, 1)), ("bfloat16", (64, 64, 1))])
def test_column_major_epilogue_maps(planning, out_name, box):
    """Forced swap-AB: C (row-major for the user) and D are column-major in
    the kernel's view, dims (N, M, 1), 128-byte box lines."""
    m, n, k = 48, 1000, 512
    a, b = tn(m, n, k, BF16)
    c = StubArray((m, n), BF16 if out_name == "bfloat16" else out_name)
    plan = build(a, b, c=c, beta=1.0, out_dtype=out_name, _swap=True)
    assert plan.cfg.d_colmajor and plan.cfg.c_colmajor and plan.cfg.out_type == gc.OUT_TYPES[out_name]
    map_c = planning[2]
    assert map_c.address == c.data.ptr and map_c.dims == (n, m, 1) and map_c.box == box
    isz = c.dtype.itemsize
    map_d = plan.epilogue_map(c.data.ptr, True, n * isz, m * n * isz, 1)
    assert map_d.box == box and map_d.dims == (n, m, 1)


def test_column_major_fp32_c_is_accepted(planning):
    """A column-major fp32 c is accepted: the un-swapped kernel reads it
    column-major."""
    m, n, k = 1000, 300, 640
    a, b = tn(m, n, k, "float16")
    c = StubArray((m, n), "float32", order="F")
    plan = build(a, b, c=c, beta=2.0, out_dtype="float32", _swap=False)
    assert plan.cfg.c_colmajor and not plan.cfg.d_colmajor
    assert planning[2].box == (32, 32, 1) and planning[2].dims == (m, n, 1)


