"""CPU: rawcoop.torch.Linear is an nn.Linear drop-in (constructor,
parameters, state_dict keys, initialisation, isinstance), and swap_linear
turns a model's nn.Linear layers into it in place (the same module and
parameter objects, tied weights kept, subclasses and layers whose rows break
rawcoop's 16-byte pitch rule left alone).  The forward reaches
rawcoop.torch.linear; its GEMM is a recording test double here."""
import pytest

torch = pytest.importorskip("torch")

import rawcoop.torch as rt  # noqa: E402
from rawcoop.torch import autograd as ag  # noqa: E402
from torch import nn  # noqa: E402


@pytest.fixture
def gemms(monkeypatch):
    seen = []

    def gemm(a, b, *, bias=None, out_dtype=None, precision=None):
        seen.append((tuple(a.shape), tuple(b.shape), precision))
        d = a.double() @ b.double() + (0 if bias is None else bias.double())
        return d.to(out_dtype or a.dtype)
    monkeypatch.setattr(ag, "gemm", gemm)
    return seen


def test_linear_is_an_nn_linear_with_the_same_state():
    torch.manual_seed(3)
    ref = nn.Linear(32, 24)
    torch.manual_seed(3)
    lin = rt.Linear(32, 24)
    assert isinstance(lin, nn.Linear)
    assert list(lin.state_dict()) == list(ref.state_dict()) == ["weight", "bias"]
    assert all(torch.equal(p, q) for p, q in zip(lin.parameters(), ref.parameters()))    # same initialisation
    no_bias = rt.Linear(32, 24, bias=False, dtype=torch.bfloat16, precision=None)
    assert no_bias.bias is None and no_bias.weight.dtype == torch.bfloat16
    other = rt.Linear(32, 24)
    other.load_state_dict(ref.state_dict())
    assert torch.equal(other.weight, ref.weight)
    assert repr(rt.Linear(8, 16, precision="tf32")) == "Linear(in_features=8, out_features=16, bias=True, precision='tf32')"


def test_linear_forward_is_rawcoops(gemms):
    lin = rt.Linear(32, 24, precision="tf32")
    x = torch.randn(3, 5, 32)
    y = lin(x)
    assert gemms == [((15, 32), (32, 24), "tf32")]
    assert torch.allclose(y, nn.functional.linear(x, lin.weight, lin.bias), atol=1e-5)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(16, 64)
        self.down = nn.Linear(64, 16, bias=False)
        self.head = nn.Linear(16, 10)              # 10 outputs: rows of 20 bytes, not a multiple of 16
        self.custom = _MyLinear(16, 16)


class _MyLinear(nn.Linear):
    pass


def test_swap_linear_in_place(gemms):
    torch.manual_seed(0)
    model = nn.Sequential(_Block(), nn.Linear(16, 32))
    modules = dict(model.named_modules())
    params = {n: p for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    keys = list(model.state_dict())
    swapped = rt.swap_linear(model)
    assert swapped == ["0.up", "0.down", "1"]
    assert type(model[0].up) is rt.Linear and type(model[0].head) is nn.Linear and type(model[0].custom) is _MyLinear
    assert dict(model.named_modules()) == modules and all(p is params[n] for n, p in model.named_parameters())
    assert list(model.state_dict()) == keys
    assert opt.param_groups[0]["params"][0] is model[0].up.weight
    x = torch.randn(4, 16)
    model[0].down(model[0].up(x)).sum().backward()
    assert len(gemms) == 2 + 3                     # forward of up and down; dW of both, dX of down
    assert model[0].up.weight.grad is not None


def _tied(vocab):
    emb = nn.Embedding(vocab, 32, dtype=torch.bfloat16)
    head = nn.Linear(32, vocab, bias=False, dtype=torch.bfloat16)
    head.weight = emb.weight                       # tied, as language models do
    return nn.ModuleDict(dict(emb=emb, head=head, proj=nn.Linear(32, 32, dtype=torch.bfloat16)))


def test_swap_linear_include_and_tied_weights():
    skip_proj = lambda name, m: name != "proj"     # noqa: E731
    assert rt.swap_linear(_tied(100), include=skip_proj) == []          # 100 bf16 rows: 200 bytes, not 16k
    model = _tied(96)
    assert rt.swap_linear(model, precision="tf32", include=skip_proj) == ["head"]
    assert model["head"].weight is model["emb"].weight and model["head"].precision == "tf32"
    assert type(model["proj"]) is nn.Linear


def test_fits_follows_the_element_size():
    assert rt.nn.fits(nn.Linear(12, 8)) is True           # fp32: 4 per 16 bytes
    assert rt.nn.fits(nn.Linear(12, 8, dtype=torch.bfloat16)) is False
    assert rt.nn.fits(nn.Linear(16, 8, dtype=torch.bfloat16)) is True
