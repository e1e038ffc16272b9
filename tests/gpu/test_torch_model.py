"""GPU: a transformers Llama built from a config (random weights, bf16, 2
layers, examples/llama_rawcoop.py) with its nn.Linear layers swapped to
rawcoop.torch.Linear: logits within bf16 noise of torch's (judged against an
fp32 copy of the same model), a training step whose gradients are as close
to fp32 as torch's own bf16 ones, and torch.compile with no graph break
caused by rawcoop.  Skips without transformers."""
import copy
import importlib.util
from pathlib import Path

import pytest

import helpers

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ex():
    helpers.torch_or_skip()
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("llama_rawcoop", ROOT / "examples" / "llama_rawcoop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def models(ex):
    import rawcoop.torch as rt
    plain = ex.llama(hidden=512, layers=2, vocab=8192)
    ours = copy.deepcopy(plain)
    swapped = rt.swap_linear(ours)
    assert len(swapped) == 2 * 7 + 1, swapped          # q, k, v, o, gate, up, down per layer; lm_head
    return plain, ours


def _ids(torch, batch=2, seq=96, vocab=8192, seed=0):
    return torch.randint(vocab, (batch, seq), device="cuda", generator=torch.Generator("cuda").manual_seed(seed))


def test_logits_within_bf16_noise(ex, models):
    import torch
    plain, ours = models
    ids = _ids(torch)
    ref32 = ex.logits(copy.deepcopy(plain).float(), ids)
    mine, theirs = ex.logits(ours, ids), ex.logits(plain, ids)
    e_mine, e_theirs, e_between = ex.rel_err(mine, ref32), ex.rel_err(theirs, ref32), ex.rel_err(mine, theirs)
    print(f"\n  logits vs fp32: rawcoop {e_mine:.2e}, torch bf16 {e_theirs:.2e}; between them {e_between:.2e}")
    assert e_between < 3e-2
    assert e_mine < 2 * e_theirs + 1e-3


def _grads(model):
    import torch
    return torch.cat([p.grad.double().flatten() for p in model.parameters() if p.grad is not None])


def test_training_step(ex, models):
    import torch
    plain, ours = models
    ids = _ids(torch, seed=1)
    fp32 = copy.deepcopy(plain).float()
    for m in (plain, ours, fp32):
        m.zero_grad(set_to_none=True)
        m.train()
        m(ids, labels=ids, use_cache=False).loss.backward()
        m.eval()
    g32 = _grads(fp32)
    e_mine, e_theirs = [float((_grads(m) - g32).norm() / g32.norm()) for m in (ours, plain)]
    print(f"\n  gradients vs fp32: rawcoop {e_mine:.2e}, torch bf16 {e_theirs:.2e}")
    assert all(p.grad is not None for p in ours.parameters())
    assert e_mine < 2 * e_theirs + 1e-3
    before = ours.lm_head.weight.detach().clone()
    loss = ex.train_step(ours, ids)
    assert torch.isfinite(torch.tensor(loss)) and not torch.equal(ours.lm_head.weight, before)
    for m in (plain, ours):
        m.zero_grad(set_to_none=True)


def test_compile_without_rawcoop_graph_breaks(ex, models):
    import torch
    _, ours = models
    ids = _ids(torch, seed=2)
    with torch.no_grad():
        explained = torch._dynamo.explain(ours)(ids, use_cache=False)
        assert not [str(r) for r in explained.break_reasons if "rawcoop" in str(r)]
        torch._dynamo.reset()
        compiled = torch.compile(ours)(ids, use_cache=False).logits
    assert ex.rel_err(compiled, ex.logits(ours, ids)) < 1e-2
