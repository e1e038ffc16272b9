"""GPU: arrays from other libraries (DLPack, __cuda_array_interface__) go in
without copies; results come back as CuPy arrays (torch tensors for torch
inputs: tests/gpu/test_torch_gemm.py), or in the caller's out."""
import numpy as np
import pytest

import helpers

pytestmark = pytest.mark.gpu


class _CAIOnly:
    """Exposes only __cuda_array_interface__ (like Numba device arrays)."""

    def __init__(self, arr):
        self._arr = arr
        self.__cuda_array_interface__ = arr.__cuda_array_interface__


def test_cuda_array_interface_inputs():
    import cupy as cp
    import rawcoop
    dt = helpers.dtype("float16")
    a = helpers.rand(cp, (300, 136), dt, 1)
    bt = helpers.rand(cp, (200, 136), dt, 2)
    d = rawcoop.gemm(_CAIOnly(a), _CAIOnly(bt.T))
    assert isinstance(d, cp.ndarray)
    helpers.assert_rel_err(cp, d, a.astype(cp.float64) @ bt.T.astype(cp.float64), 7e-4)


@pytest.mark.parametrize("tdtype", ["float16", "bfloat16"])
def test_torch_tensors_in_and_out(tdtype):
    torch = helpers.torch_or_skip()
    import rawcoop
    tdt = getattr(torch, tdtype)
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(257, 520, device="cuda", dtype=tdt, generator=g)
    bt = torch.randn(300, 520, device="cuda", dtype=tdt, generator=g)
    bias = torch.randn(300, device="cuda", dtype=torch.float32, generator=g)
    out = torch.full((257, 300), float("nan"), device="cuda", dtype=tdt)
    res = rawcoop.gemm(a, bt.T, bias=bias, out=out)
    assert res is out
    ref = a.double() @ bt.T.double() + bias.double()
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert np.isfinite(err) and err < (5e-3 if tdtype == "bfloat16" else 7e-4)
    d = rawcoop.gemm(a, bt.T)
    assert isinstance(d, torch.Tensor) and d.device == a.device and d.dtype == tdt and d.shape == (257, 300)


def test_host_arrays_are_rejected_before_launch():
    import rawcoop
    with pytest.raises(TypeError, match="cupy.ndarray"):
        rawcoop.gemm(np.zeros((8, 8), np.float16), np.zeros((8, 8), np.float16))
