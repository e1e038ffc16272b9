"""GPU, two devices: examples/tp_mlp.py, a tensor-parallel MLP on
rawcoop.torch layers under torch.distributed (NCCL, one process per GPU:
column-parallel up projection, row-parallel down projection, all-reduce),
agrees on both ranks and matches the unsharded MLP in float64 within bf16
noise (the example exits non-zero otherwise)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import helpers

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_tensor_parallel_mlp_on_two_gpus():
    torch = helpers.torch_or_skip()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
        pytest.skip("torch without NCCL")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "tp_mlp.py"), "--nproc", "2"], capture_output=True,
                       text=True, env=env, timeout=600)
    print(r.stdout, r.stderr[-4000:])
    assert r.returncode == 0, r.stderr[-4000:]
    assert "tp_mlp: world 2" in r.stdout and "ranks agree: True" in r.stdout
