"""GPU machine: tests/test_sass.py's SASS checks on this machine's NVRTC
(CUDA 13 on the H200 machines; CI compiles with CUDA 12's), and every
configuration launches with its 384 threads (registers at launch <= 168,
setmaxnreg then moves them 40/232)."""
import pytest

from test_sass import _configs, test_gemm_sass, test_mainloop_keeps_uniform_datapath, test_tile_copy_sass  # noqa: F401

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cfg", _configs(), ids=lambda c: c.spec.label)
def test_registers_at_launch(cfg):
    from rawcoop import gemm_configs
    from rawcoop.launch import get_kernel
    regs = get_kernel(cfg.spec).registers(0)
    assert 0 < regs and regs * gemm_configs.THREADS <= 65536, (cfg.spec.label, regs)


def _every_spec():
    from rawcoop import gemm_configs
    return gemm_configs.all_specs(everything=True)


@pytest.mark.parametrize("spec", _every_spec(), ids=lambda s: s.label)
def test_no_spills_in_any_warmup_kernel(spec):
    """ptxas's resource report from this machine's NVRTC: no spills in any
    kernel `warmup --all` builds (CI checks the same families with CUDA 12's
    NVRTC in test_compile.py and test_cluster_cpu.py; the SASS tests above
    cover the default 16-bit configurations only, and stop 16's batched
    split-K reduction spilled in fp8/tf32/block-scaled/epilogue/cluster
    kernels alone: block-scaled fp8 then ran 6x slower)."""
    from rawcoop.cache import default_cache
    from rawcoop.compiler import compile_spec, resource_usage
    usage = resource_usage(default_cache().log(spec))
    if "spill_stores" not in usage:
        # The cached entry's log had no report (seen once, stop 17, when pytest rather than warm-up
        # had built six of these kernels; not understood): compile here and read this build's log.
        usage = resource_usage(compile_spec(spec).log)
    assert "spill_stores" in usage, f"no ptxas resource report in the build log of {spec.label}"
    assert usage["spill_stores"] == 0 and usage["spill_loads"] == 0, (spec.label, usage)
