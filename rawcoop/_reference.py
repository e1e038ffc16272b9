"""float64 references of the kernel's epilogue, shared by the tests, the
fuzzer and the sanitizer driver (one definition of what each activation
means)."""
from __future__ import annotations


def activation(xp, v, act):
    """``act(v)`` in the precision of ``v`` with array module ``xp`` (numpy or
    cupy): relu, gelu in its tanh form (the kernel's), silu = v·sigmoid(v)."""
    if act == "relu":
        return xp.maximum(v, 0)
    if act == "gelu":
        return 0.5 * v * (1 + xp.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
    if act == "silu":
        return v / (1 + xp.exp(-v))
    if act is None:
        return v
    raise ValueError(f"unknown activation {act!r}")
