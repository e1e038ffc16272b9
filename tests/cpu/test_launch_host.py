"""CPU tests of the repeated-call launch path (no GPU: the driver calls are
replaced by recorders): ``device.on_device`` switches to the device's
primary context only when another one is current and always restores it;
``Kernel.bind`` builds one launch configuration; a ``BoundLaunch`` sets the
stream and launches inside on_device, every call."""
from types import SimpleNamespace

import pytest

from rawcoop import device, launch
from rawcoop._cuda import CudaError, driver
from rawcoop.compiler import KernelSpec
from rawcoop.launch import I32, BoundLaunch, Kernel, KernelParams

OK = driver.CUresult.CUDA_SUCCESS


class _Ctx:
    """A stand-in CUcontext: only int() is used."""

    def __init__(self, handle: int):
        self.handle = handle

    def __int__(self):
        return self.handle


@pytest.fixture
def contexts(monkeypatch):
    """Device 0's primary context is 0x50; ``state.current`` is the thread's
    current context; ``state.sets`` records cuCtxSetCurrent calls."""
    primary = _Ctx(0x50)
    state = SimpleNamespace(current=primary, sets=[], primary=primary)
    monkeypatch.setattr(device, "primary_context", lambda ordinal: primary)

    def get_current():
        return OK, state.current

    def set_current(ctx):
        state.sets.append(int(ctx))
        state.current = ctx
        return (OK,)
    monkeypatch.setattr(driver, "cuCtxGetCurrent", get_current)
    monkeypatch.setattr(driver, "cuCtxSetCurrent", set_current)
    return state


def test_on_device_does_nothing_when_the_primary_context_is_current(contexts):
    with device.on_device(0):
        assert int(contexts.current) == 0x50
    assert contexts.sets == []


def test_on_device_switches_and_restores_another_context(contexts):
    contexts.current = _Ctx(0x77)
    with device.on_device(0):
        assert int(contexts.current) == 0x50
    assert contexts.sets == [0x50, 0x77] and int(contexts.current) == 0x77


def test_on_device_restores_after_an_exception(contexts):
    contexts.current = _Ctx(0)                       # no context current at all
    with pytest.raises(ValueError, match="inside"):
        with device.on_device(0):
            raise ValueError("inside")
    assert contexts.sets == [0x50, 0] and int(contexts.current) == 0


def test_bound_launch_sets_the_stream_and_launches_in_the_primary_context(contexts, monkeypatch):
    calls = []

    def launch_ex(cfg, fn, params, extra):
        calls.append((int(cfg.hStream), fn, params, extra, int(contexts.current)))
        return (OK,)
    monkeypatch.setattr(driver, "cuLaunchKernelEx", launch_ex)
    cfg = driver.CUlaunchConfig()
    params = KernelParams((1, 2), (I32, I32))
    bound = BoundLaunch(0, cfg, "fn")
    contexts.current = _Ctx(0x77)                   # someone else's context is current
    bound(0x1234, params)
    bound(0x5678, params)
    assert calls == [(0x1234, "fn", params.address, 0, 0x50), (0x5678, "fn", params.address, 0, 0x50)]
    assert int(contexts.current) == 0x77            # restored after each launch


def test_bound_launch_raises_the_driver_error(contexts, monkeypatch):
    monkeypatch.setattr(driver, "cuLaunchKernelEx",
                        lambda *a: (driver.CUresult.CUDA_ERROR_INVALID_VALUE,))
    with pytest.raises(CudaError, match="cuLaunchKernelEx"):
        BoundLaunch(0, driver.CUlaunchConfig(), "fn")(0, KernelParams((1,), (I32,)))


def _kernel(monkeypatch, smem_calls):
    k = Kernel(KernelSpec.make("gemm.cu", "gemm_kernel"))
    monkeypatch.setattr(k, "function", lambda dev: "fn")
    monkeypatch.setattr(k, "_ensure_smem", lambda dev, fn, smem: smem_calls.append((dev, fn, smem)))
    k._functions[0] = "fn"
    return k


def test_bind_builds_one_config_with_cluster_and_pdl(contexts, monkeypatch):
    smem = []
    k = _kernel(monkeypatch, smem)
    b = k.bind(0, (66 * 2,), 384, 200000, cluster=(2,), pdl=True)
    assert isinstance(b, launch.BoundLaunch) and b.dev == 0 and b.fn == "fn"
    cfg = b.cfg
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == (132, 1, 1)
    assert (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ) == (384, 1, 1)
    assert cfg.sharedMemBytes == 200000 and cfg.numAttrs == 2 and smem == [(0, "fn", 200000)]
    ids = [a.id for a in cfg.attrs]
    assert ids == [driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                   driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    dim = cfg.attrs[0].value.clusterDim
    assert (dim.x, dim.y, dim.z) == (2, 1, 1)
    # each bind is its own config (its stream is written per call): two plans never share one
    assert k.bind(0, (132,), 384, 200000, cluster=(2,), pdl=True).cfg is not cfg


def test_bind_refuses_a_grid_that_is_not_a_multiple_of_the_cluster(contexts, monkeypatch):
    k = _kernel(monkeypatch, [])
    with pytest.raises(ValueError, match="not a multiple of the cluster"):
        k.bind(0, (131,), 384, 1024, cluster=(2,))
    plain = k.bind(0, (131,), 384, 1024)
    assert plain.cfg.numAttrs == 0
