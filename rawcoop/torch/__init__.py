"""rawcoop for PyTorch: ``import rawcoop.torch`` (``import rawcoop`` never
imports torch).

* :func:`gemm`: ``rawcoop.gemm`` itself, which takes torch CUDA tensors
  (also ones that require grad) and returns torch tensors, allocated by
  torch's caching allocator on the input's device and computed on torch's
  current stream there; under ``torch.compile`` it is the ``rawcoop::gemm``
  / ``rawcoop::gemm_out`` custom op (:mod:`rawcoop.torch.ops`).
* :func:`matmul`, :func:`linear`: differentiable (autograd.Function; the
  backward runs rawcoop GEMMs).
* :class:`Linear`, :func:`swap_linear`: an ``nn.Linear`` drop-in, and the
  in-place swap of a model's ``nn.Linear`` layers.
* CUDA graphs: run every GEMM once before ``torch.cuda.graph`` capture;
  under capture rawcoop compiles and loads nothing
  (``rawcoop.gemm.KernelNotReady``, a RuntimeError, says so).
"""
from __future__ import annotations

from ..gemm import KernelNotReady, gemm
from . import _tensors, ops  # noqa: F401  (registers rawcoop::gemm and rawcoop::gemm_out)
from .autograd import linear, matmul
from .nn import Linear, swap_linear

__all__ = ["gemm", "matmul", "linear", "Linear", "swap_linear", "KernelNotReady", "ops"]
