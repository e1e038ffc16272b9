"""Stub-CuPy planning: ``rawcoop.gemm``'s validation and planning take the CuPy
module as an argument, so a stub module whose ``ndarray`` carries only shape,
strides, dtype and an address drives them on the CPU.  With the device query,
kernel lookup and tensor-map encoding replaced by recorders (``stub_planning``),
the whole plan is built without a GPU.  Also the plain ``plan_config`` calls
the CPU planning tests share."""
import importlib
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from rawcoop import tma

G = importlib.import_module("rawcoop.gemm_plan")     # the plan machinery behind rawcoop.gemm

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
BASE = 0x7F00_0000_0000


class StubArray:
    """Shape, strides (bytes), dtype, address and device: all that gemm's
    validation and planning read from a CuPy array."""

    def __init__(self, shape, dtype, order="C", strides=None, dev=0, ptr=None):
        global BASE
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape)) if self.shape else 1
        isz = self.dtype.itemsize
        if strides is None:
            if order == "C":
                st, acc = [], isz
                for d in reversed(self.shape):
                    st.append(acc)
                    acc *= max(d, 1)
                strides = tuple(reversed(st))
            else:                                   # column-major in the last two axes
                r, c = self.shape[-2:]
                strides = (r * c * isz,) * (self.ndim - 2) + (isz, r * isz)
        self.strides = tuple(strides)
        if ptr is None:
            ptr = BASE
            BASE += 1 << 30
        self.data = SimpleNamespace(ptr=ptr, device_id=dev)
        self.device = SimpleNamespace(id=dev)

    @property
    def T(self):
        s = StubArray(self.shape[::-1], self.dtype, strides=self.strides[::-1], dev=self.device.id,
                      ptr=self.data.ptr)
        return s


CP = SimpleNamespace(ndarray=StubArray)


def build(a, b, **kw):
    """gemm's _build_plan with the stub CuPy (keyword options as gemm takes them)."""
    lowp = tuple(kw.pop(k, None) for k in G.LOWP_OPTIONS)
    forced = tuple(kw.pop(k, None) for k in G.FORCED_OPTIONS)
    args = dict(c=None, alpha=1.0, beta=0.0, bias=None, activation=None, out=None, out_dtype=None, pdl=False)
    args.update(kw)
    return G._build_plan(CP, a, b, args["c"], args["alpha"], args["beta"], args["bias"], args["activation"],
                         args["out"], args["out_dtype"], args["pdl"], forced, lowp)


def stub_planning(monkeypatch, resident_clusters: int = 66):
    """Replace the GPU-facing calls of planning: device info, kernel lookup
    (a stub that answers the cluster occupancy query), tensor-map encoding
    (validated, then recorded).  Returns the records: ``maps``, ``queries``."""
    maps, queries = [], []
    monkeypatch.setattr(G._device, "info", lambda dev: SimpleNamespace(name="Stub H200", sm_count=132))

    def kernel(spec):
        def max_active_clusters(dev, block, smem, cluster):
            queries.append((block, smem, tuple(cluster)))
            return resident_clusters
        return SimpleNamespace(spec=spec, function=lambda dev: None, loaded=lambda dev: True,
                               max_active_clusters=max_active_clusters)

    monkeypatch.setattr(G, "get_kernel", kernel)

    def tiled(dtype, address, dims, strides, box, swizzle=tma.Swizzle.NONE):
        tm = tma.TensorMap(dtype, address, dims, strides, box, swizzle=swizzle).validate()
        maps.append(tm)
        return tm

    monkeypatch.setattr(G.tma, "tiled", tiled)
    # the maps above are not encoded (no driver), so the packed argument block records the values instead
    monkeypatch.setattr(G, "KernelParams", lambda values, types: SimpleNamespace(values=tuple(values),
                                                                                   types=tuple(types)))
    monkeypatch.setattr(G.tuning, "lookup", lambda sig: None)
    return SimpleNamespace(maps=maps, queries=queries)


def tn(m, n, k, dt_a, dt_b=None, batch=None):
    """a row-major (M, K), b = bt.T of a row-major (N, K): both K-major."""
    lead = (batch,) if batch else ()
    a = StubArray(lead + (m, k), dt_a)
    bt = StubArray(lead + (n, k), dt_b if dt_b is not None else dt_a)
    b = StubArray(lead + (k, n), bt.dtype, strides=bt.strides[:-2] + (bt.strides[-1], bt.strides[-2]),
                  ptr=bt.data.ptr)
    return a, b


