"""GPU: torch tensors go into rawcoop.gemm, rawcoop.tune and
rawcoop.replicate alike (one operand helper, operands.as_cupy), results land
in the caller's tensors; and a kernel's resource usage is the same in this
process (where torch was imported first) as in a fresh one."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import helpers

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _bf16_pair(torch, m, n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    bt = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    return a, bt


def test_tune_takes_torch_tensors(tmp_path, monkeypatch):
    torch = helpers.torch_or_skip()
    import cupy as cp
    import rawcoop
    from rawcoop import gemm_plan, tuning
    monkeypatch.setenv("RAWCOOP_CACHE_DIR", str(tmp_path / "cache"))
    tuning.reset()
    gemm_plan._PLANS.clear()
    a, bt = _bf16_pair(torch, 200, 520, 1024)
    bias = torch.randn(520, device="cuda", dtype=torch.float32)
    res = rawcoop.tune(a, bt.T, bias=bias, iters=2, persist=False)
    assert res["choice"] and any(r["us"] is not None for r in res["results"])
    d = rawcoop.gemm(a, bt.T, bias=bias)
    ref = a.float() @ bt.T.float() + bias
    helpers.assert_rel_err(cp, cp.from_dlpack(d), cp.asarray(ref), 1e-2)
    gemm_plan._PLANS.clear()
    tuning.reset()


def test_replicate_takes_torch_tensors_and_fills_their_out():
    torch = helpers.torch_or_skip()
    import rawcoop
    src = torch.randn(300, 264, device="cuda", dtype=torch.float16)
    out = torch.empty(2, 300, 264, device="cuda", dtype=torch.float16)
    assert rawcoop.replicate(src, 2, out=out) is out
    torch.cuda.synchronize()
    assert torch.equal(out[0].view(torch.int16), src.view(torch.int16))
    assert torch.equal(out[1].view(torch.int16), src.view(torch.int16))
    fresh = rawcoop.replicate(src, 4)                         # a CuPy result when no out is given
    assert fresh.shape == (4, 300, 264)


def test_gemm_rejects_host_tensors_and_mixed_devices():
    torch = helpers.torch_or_skip()
    import rawcoop
    a, bt = _bf16_pair(torch, 64, 64, 64)
    with pytest.raises(TypeError, match=r"a is a torch\.Tensor in host \(CPU\) memory"):
        rawcoop.gemm(a.cpu(), bt.T)
    with pytest.raises(TypeError, match=r"src is a torch\.Tensor in host \(CPU\) memory"):
        rawcoop.replicate(a.cpu())
    if torch.cuda.device_count() > 1:
        with pytest.raises(ValueError, match="b is on device 1, but a is on device 0"):
            rawcoop.gemm(a, bt.T.to("cuda:1"))


def test_resource_usage_does_not_depend_on_the_process():
    """This process imported torch first (tests/conftest.py), where NVRTC's
    logs have come back without ptxas's report; the usage recorded for a
    kernel compiled here must equal a fresh process's.  (The child inherits
    this process's environment, and its NVRTC log has come back without the
    report too on the H200: then both read the cubin.)  A compile whose log
    lacked the report says so in its log_note."""
    from rawcoop import compiler
    from helpers.plan import gc as configs
    specs = configs.all_specs()[:3]
    here = {s.label: compiler.compile_spec(s) for s in specs}
    code = ("import json, sys; from rawcoop import compiler; from helpers.plan import gc as configs; "
            "print(json.dumps({s.label: compiler.compile_spec(s).resources for s in configs.all_specs()[:3]}))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    fresh = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                      check=True, timeout=600).stdout)
    for label, r in here.items():
        mine = {k: r.resources[k] for k in compiler.USAGE_KEYS}
        assert mine == {k: fresh[label][k] for k in compiler.USAGE_KEYS}, (label, r.resources, fresh[label],
                                                                           r.log_note)
        assert (r.resources["source"] == "ptxas") == (r.log_note == ""), r.log_note
