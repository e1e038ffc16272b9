"""GPU: watchdog mode (RAWCOOP_WATCHDOG makes every barrier wait bounded): a
kernel that would hang instead traps after printing which barrier it waited on."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


HANG = textwrap.dedent("""
    #include "ptx.cuh"
    extern "C" __global__ void hang(int* out) {
        __shared__ __align__(8) unsigned long long bar;
        const u32 b = smem_u32(&bar);
        if (threadIdx.x == 0) { mbar_init(b, 1); fence_mbar_init(); }
        __syncthreads();
        mbar_wait(b, 0, "the test barrier nobody arrives on");   // never completes
        out[threadIdx.x] = 1;
    }
""")


def test_watchdog_turns_a_hang_into_a_named_trap(tmp_path):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "ptx.cuh").write_text((ROOT / "kernels" / "ptx.cuh").read_text())
    (kdir / "hang.cu").write_text(HANG)
    script = textwrap.dedent(f"""
        import cupy as cp
        from rawcoop import device, sources
        from rawcoop.compiler import KernelSpec
        from rawcoop.launch import PTR, get_kernel
        sources.kernels_dir = lambda: __import__("pathlib").Path({str(kdir)!r})
        k = get_kernel(KernelSpec.make("hang.cu", "hang"))
        out = cp.zeros(32, dtype=cp.int32)
        with device.on_device(0):
            k.function(0)
            k.launch(0, (1, 1, 1), 32, 0, cp.cuda.get_current_stream().ptr, (out.data.ptr,), (PTR,))
        try:
            cp.cuda.get_current_stream().synchronize()
            print("NO TRAP")
        except Exception as e:
            print("TRAPPED", type(e).__name__)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAWCOOP_WATCHDOG="20000000",
               RAWCOOP_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert "TRAPPED" in r.stdout, r.stdout + r.stderr
    assert "rawcoop watchdog: waited too long on the test barrier nobody arrives on" in r.stdout
