"""GPU: clusters of 2 CTAs along M that multicast the shared B tile (opt-in
via the private ``_cluster=2`` while it is being measured)."""
import numpy as np  # noqa: F401
import pytest

import gpu_helpers

pytestmark = pytest.mark.gpu


_dt = gpu_helpers.dtype
_rand = gpu_helpers.rand


def _check(cp, d, ref, tol):
    gpu_helpers.assert_rel_err(cp, d, ref, tol)


@pytest.mark.parametrize("block_n", [128, 256])
@pytest.mark.parametrize("layout", ["TN", "NN", "NT", "TT"])
@pytest.mark.parametrize("shape", [(1000, 1304, 520), (384, 256, 64), (130, 2000, 1000), (4096, 4096, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_cluster_multicast_layouts(block_n, layout, shape):
    import cupy as cp
    import rawcoop
    m, n, k = shape          # 1000 rows -> 8 tiles (4 pairs); 130 rows -> 2 tiles; 384 -> 3 tiles (a ghost)
    dt = _dt("bfloat16")
    a = _rand(cp, (m, k), dt, 1) if layout[0] == "T" else _rand(cp, (k, m + (-m) % 8), dt, 1)[:, :m].T
    b = _rand(cp, (n, k), dt, 2).T if layout[1] == "N" else _rand(cp, (k, n), dt, 2)
    out = cp.full((m, n), cp.nan, dtype=cp.float32).astype(dt)
    rawcoop.gemm(a, b, out=out, _cluster=2, _block_n=block_n)
    _check(cp, out, a.astype(cp.float64) @ b.astype(cp.float64), 5e-3)


def test_cluster_with_split_k_epilogue_and_batch():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    a, b = _rand(cp, (2, 600, 4096), dt, 3), _rand(cp, (2, 4096, 520), dt, 4)
    c = _rand(cp, (2, 600, 520), dt, 5)
    bias = _rand(cp, (520,), cp.float32, 6)
    ref = a.astype(cp.float64) @ b.astype(cp.float64) + 0.5 * c.astype(cp.float64) + bias
    ref = cp.maximum(ref, 0)
    for splits in (None, 2, 3):
        d = rawcoop.gemm(a, b, c=c, beta=0.5, bias=bias, activation="relu", _cluster=2, _splits=splits)
        _check(cp, d, ref, 7e-4)
        again = rawcoop.gemm(a, b, c=c, beta=0.5, bias=bias, activation="relu", _cluster=2, _splits=splits)
        assert cp.array_equal(d.view(cp.uint16), again.view(cp.uint16))


def test_cluster_rejects_narrow_tiles():
    import cupy as cp
    import rawcoop
    dt = _dt("float16")
    with pytest.raises(ValueError, match="_cluster"):
        rawcoop.gemm(_rand(cp, (256, 64), dt, 1), _rand(cp, (64, 64), dt, 2), _cluster=2, _block_n=64)
