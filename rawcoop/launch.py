"""Loading compiled kernels per device and launching them with
``cuLaunchKernelEx`` (grid, 1-D block, dynamic shared memory, cluster
dimensions, optional programmatic stream serialization).

A :class:`Kernel` is one :class:`~rawcoop.compiler.KernelSpec`.  Its module is
loaded once per device, in that device's primary context, and cached by
(device, cache key): a function loaded on one GPU is never launched on
another.  Launch configurations are built once per (device, grid, block,
smem, cluster) and reused, so the repeated-call path only sets the stream:
:meth:`Kernel.launch` keeps one per thread and combination, and
:meth:`Kernel.bind` hands a caller that launches one configuration again and
again (a GEMM plan) a :class:`BoundLaunch` of its own.
"""
from __future__ import annotations

import ctypes
import threading

from . import device as _device
from ._cuda import check, driver
from .cache import KernelCache, cache_key, default_cache
from .compiler import DEFAULT_ARCH, KernelSpec

# Kernel-parameter helpers: cuda-bindings' (values, types) form.  A type of
# None passes an object with getPtr() (CUtensorMap) by its bytes.
TENSOR_MAP = None
I32 = ctypes.c_int32
U32 = ctypes.c_uint32
I64 = ctypes.c_int64
F32 = ctypes.c_float
PTR = ctypes.c_void_p


class KernelParams:
    """A kernel's arguments packed once, for the repeated-call path: one
    ctypes slot per scalar parameter, tensor maps referenced in place (their
    128-byte storage, kept alive here), and the ``void*`` array that
    ``cuLaunchKernelEx`` reads, passed by address.  Packing the (values,
    types) tuples anew took about half of a small GEMM's host time on the
    H200 (cProfile: ~13 of ~26 us per call in ``Kernel.launch``).

    :meth:`set` rewrites one parameter (a new tensor map is one pointer
    write).  The driver copies the arguments when the launch is enqueued, so
    a pack may be rewritten right after :meth:`Kernel.launch` returns; callers
    that share a pack between threads hold :attr:`lock` from the first
    :meth:`set` to the launch."""

    __slots__ = ("types", "_slots", "_ptrs", "_maps", "address", "lock")

    def __init__(self, values, types):
        values, types = tuple(values), tuple(types)
        if len(values) != len(types):
            raise ValueError(f"{len(values)} kernel arguments for {len(types)} parameter types")
        n = len(types)
        self.types = types
        self._slots = [None if t is TENSOR_MAP else t() for t in types]
        self._maps = [None] * n
        self._ptrs = (ctypes.c_void_p * max(n, 1))()
        for i, slot in enumerate(self._slots):
            if slot is not None:
                self._ptrs[i] = ctypes.addressof(slot)
        self.address = ctypes.addressof(self._ptrs)
        self.lock = threading.Lock()
        for i, v in enumerate(values):
            self.set(i, v)

    def set(self, i: int, value) -> None:
        slot = self._slots[i]
        if slot is None:                      # a CUtensorMap: point at its bytes
            if value is not self._maps[i]:
                self._ptrs[i] = int(value.getPtr())
                self._maps[i] = value
        else:
            slot.value = value

    def values(self) -> tuple:
        """The packed arguments (tensor maps as objects, scalars as Python numbers)."""
        return tuple(m if s is None else s.value for s, m in zip(self._slots, self._maps))


class Kernel:
    def __init__(self, spec: KernelSpec, cache: KernelCache | None = None, arch: str = DEFAULT_ARCH):
        self.spec = spec
        self.arch = arch
        self._cache = cache
        self._lock = threading.Lock()
        self._functions: dict[int, object] = {}     # device -> CUfunction
        self._modules: dict[int, object] = {}
        self._smem_set: dict[int, int] = {}
        self._occupancy: dict[tuple, int] = {}
        self._tls = threading.local()

    @property
    def cache(self) -> KernelCache:
        return self._cache if self._cache is not None else default_cache()

    def cubin(self) -> bytes:
        return self.cache.get(self.spec, self.arch)

    def log(self) -> str:
        return self.cache.log(self.spec, self.arch)

    # ------------------------------------------------------------ per device
    def loaded(self, dev: int) -> bool:
        """Whether the module is loaded on ``dev`` (function() then neither compiles nor loads)."""
        return dev in self._functions

    def function(self, dev: int):
        fn = self._functions.get(dev)
        if fn is not None:
            return fn
        with self._lock:
            fn = self._functions.get(dev)
            if fn is None:
                info = _device.info(dev)
                if info.cc != (9, 0):
                    raise RuntimeError(f"{self.spec.name} needs an sm_90 (Hopper) GPU; device {dev} "
                                       f"is {info.name} (sm_{info.cc[0]}{info.cc[1]})")
                data = self.cubin()
                with _device.on_device(dev):
                    mod = check(driver.cuModuleLoadData(data), "cuModuleLoadData")
                    fn = check(driver.cuModuleGetFunction(mod, self.spec.name.encode()),
                               "cuModuleGetFunction")
                self._modules[dev] = mod
                self._functions[dev] = fn
        return fn

    def _ensure_smem(self, dev: int, fn, smem: int) -> None:
        if self._smem_set.get(dev, 0) >= smem:
            return
        limit = _device.info(dev).max_smem_per_block_optin
        if smem > limit:
            raise ValueError(f"{self.spec.label} needs {smem} B of shared memory; device {dev} allows {limit}")
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver.cuFuncSetAttribute(fn, attr, smem), "cuFuncSetAttribute")
        self._smem_set[dev] = smem

    def attribute(self, dev: int, attr) -> int:
        with _device.on_device(dev):
            return int(check(driver.cuFuncGetAttribute(attr, self.function(dev)), "cuFuncGetAttribute"))

    def registers(self, dev: int) -> int:
        return self.attribute(dev, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NUM_REGS)

    # ------------------------------------------------------------ launch
    def _new_config(self, dev: int, grid, block: int, smem: int, cluster, pdl: bool):
        """A fresh ``CUlaunchConfig`` (its stream unset) for this kernel on
        ``dev``; raises the dynamic shared memory limit first if needed."""
        fn = self.function(dev)
        self._ensure_smem(dev, fn, smem)
        cfg = driver.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
        cfg.sharedMemBytes = smem
        attrs = []
        if cluster != (1, 1, 1):
            for g, c in zip(grid, cluster):
                if g % c:
                    raise ValueError(f"grid {grid} is not a multiple of the cluster {cluster}")
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cluster
            attrs.append(a)
        if pdl:
            a = driver.CUlaunchAttribute()
            a.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            a.value.programmaticStreamSerializationAllowed = 1
            attrs.append(a)
        cfg.attrs = attrs
        cfg.numAttrs = len(attrs)
        return cfg

    def _config(self, dev: int, grid, block: int, smem: int, cluster, pdl: bool):
        """This thread's cached ``CUlaunchConfig`` for the combination (its
        stream is rewritten per launch, hence one per thread)."""
        cache = getattr(self._tls, "configs", None)
        if cache is None:
            cache = self._tls.configs = {}
        key = (dev, grid, block, smem, cluster, pdl)
        cfg = cache.get(key)
        if cfg is None:
            cfg = cache[key] = self._new_config(dev, grid, block, smem, cluster, pdl)
        return cfg

    def launch(self, dev: int, grid, block: int, smem: int, stream: int, args, types=None,
               cluster=(1, 1, 1), pdl: bool = False) -> None:
        """Launch on device ``dev`` (whose primary context must be current:
        use :func:`rawcoop.device.on_device`) on the raw stream handle ``stream``.
        ``args``: a :class:`KernelParams` (packed once, its own types) or a
        sequence of values with their ``types``."""
        if types is None and not isinstance(args, KernelParams):
            raise TypeError("Kernel.launch: plain argument values need their types")
        grid = tuple(grid) + (1,) * (3 - len(grid))
        cluster = tuple(cluster) + (1,) * (3 - len(cluster))
        cfg = self._config(dev, grid, block, smem, cluster, pdl)
        cfg.hStream = driver.CUstream(stream)
        params = args.address if isinstance(args, KernelParams) else (tuple(args), tuple(types))
        check(driver.cuLaunchKernelEx(cfg, self._functions[dev], params, 0), "cuLaunchKernelEx")

    def bind(self, dev: int, grid, block: int, smem: int, cluster=(1, 1, 1), pdl: bool = False) -> "BoundLaunch":
        """This kernel with one launch configuration on ``dev``, for a caller
        that launches it again and again (a GEMM plan): see :class:`BoundLaunch`."""
        grid = tuple(grid) + (1,) * (3 - len(grid))
        cluster = tuple(cluster) + (1,) * (3 - len(cluster))
        with _device.on_device(dev):
            cfg = self._new_config(dev, grid, block, smem, cluster, pdl)
        return BoundLaunch(dev, cfg, self._functions[dev])

    def max_active_clusters(self, dev: int, block: int, smem: int, cluster) -> int:
        """``cuOccupancyMaxActiveClusters`` for this kernel, block, smem,
        cluster (queried once per combination)."""
        cluster = tuple(cluster) + (1,) * (3 - len(cluster))
        key = (dev, block, smem, cluster)
        n = self._occupancy.get(key)
        if n is None:
            with _device.on_device(dev):
                cfg = self._config(dev, cluster, block, smem, cluster, False)
                cfg.hStream = driver.CUstream(0)
                n = int(check(driver.cuOccupancyMaxActiveClusters(self._functions[dev], cfg),
                              "cuOccupancyMaxActiveClusters"))
            self._occupancy[key] = n
        return n


class BoundLaunch:
    """A kernel, its launch configuration and device, fixed: calling it with a
    stream and a :class:`KernelParams` makes the device's primary context
    current if it is not (:func:`rawcoop.device.on_device`), sets the stream
    and calls ``cuLaunchKernelEx``.  Nothing is looked up per call (the
    config cache of :meth:`Kernel.launch` cost ~0.7 us per call on the H200's
    host).  The config's stream is written per call, so callers that share
    one bound launch between threads serialise the calls (gemm holds its
    plan's ``params.lock``)."""

    __slots__ = ("dev", "cfg", "fn")

    def __init__(self, dev: int, cfg, fn):
        self.dev, self.cfg, self.fn = dev, cfg, fn

    def __call__(self, stream: int, params: KernelParams) -> None:
        cfg = self.cfg
        cfg.hStream = driver.CUstream(stream)
        with _device.on_device(self.dev):
            check(driver.cuLaunchKernelEx(cfg, self.fn, params.address, 0), "cuLaunchKernelEx")


_kernels: dict[tuple, Kernel] = {}
_kernels_lock = threading.Lock()


def get_kernel(spec: KernelSpec, arch: str = DEFAULT_ARCH) -> Kernel:
    """The process-wide :class:`Kernel` for ``spec`` (one per spec)."""
    k = _kernels.get((spec, arch))
    if k is None:
        with _kernels_lock:
            k = _kernels.setdefault((spec, arch), Kernel(spec, arch=arch))
    return k


__all__ = ["Kernel", "BoundLaunch", "get_kernel", "cache_key", "TENSOR_MAP", "I32", "U32", "I64", "F32", "PTR"]
