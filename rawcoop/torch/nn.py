"""``rawcoop.torch.Linear``, an ``nn.Linear`` whose forward and backward are
rawcoop GEMMs, and :func:`swap_linear`, which turns a model's ``nn.Linear``
layers into it in place."""
from __future__ import annotations

from torch import nn

from .autograd import linear


class Linear(nn.Linear):
    """``torch.nn.Linear`` with rawcoop's GEMMs (:func:`rawcoop.torch.linear`):
    the same constructor, parameters (``weight`` (out, in), ``bias`` (out,)),
    ``state_dict`` keys and initialisation; ``isinstance(m, nn.Linear)``
    holds.  ``precision="tf32"`` for float32 weights (rawcoop has no full
    fp32 GEMM).  ``in_features`` and ``out_features`` must be multiples of 8
    for 16-bit weights (4 for tf32): rawcoop's 16-byte row pitch rule."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None,
                 precision: str | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.precision = precision

    def forward(self, x):
        return linear(x, self.weight, self.bias, precision=self.precision)

    def extra_repr(self) -> str:
        return super().extra_repr() + ("" if self.precision is None else f", precision={self.precision!r}")


def fits(layer: nn.Linear) -> bool:
    """Whether rawcoop's pitch rule admits the layer's shapes (its input,
    weight and gradients: rows of a multiple of 16 bytes)."""
    per16 = 16 // layer.weight.element_size()
    return layer.in_features % per16 == 0 and layer.out_features % per16 == 0


def swap_linear(model: nn.Module, *, precision: str | None = None, include=None) -> list[str]:
    """Make every ``nn.Linear`` of ``model`` (exactly that type; subclasses
    are left alone) a :class:`Linear`, in place: the same module objects and
    parameters (optimizers, hooks and tied weights keep working), only the
    forward changes.  ``include(name, module)`` -> bool picks layers; layers
    rawcoop's pitch rule does not admit (:func:`fits`) are left as they are.
    Returns the qualified names of the layers swapped."""
    swapped = []
    for name, m in model.named_modules():
        if type(m) is nn.Linear and fits(m) and (include is None or include(name, m)):
            m.__class__ = Linear
            m.precision = precision
            swapped.append(name)
    return swapped
