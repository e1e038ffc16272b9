"""``rawcoop.gemm``: the public GEMM.

    D = act(alpha · (a @ b) + beta · c + bias)

:func:`gemm` takes the caller's arrays (CuPy arrays as they are; torch
tensors through rawcoop/torch/_tensors.py: torch tensors out, torch's stream
and allocator; other libraries' GPU arrays as zero-copy CuPy views:
operands.gemm_operands) and runs the call's plan: validated, configured and
bound once per set of inputs and options, then launched
(rawcoop/gemm_plan.py, whose docstring has the contract with the kernel).
Every argument error is a TypeError or ValueError naming the argument, raised
before anything is allocated or launched.
"""
from __future__ import annotations

import sys

from . import _cuda
# The plan machinery, also reachable from here (rawcoop.gemm._plan_for, ...).
from .gemm_plan import (_ARG_C, _ARG_D, _ARG_FLAGS, _ARG_WS, _DATA_PARALLEL, _OUT_MAPS_MAX, _PLANS,  # noqa: F401
                        _PLANS_MAX, _TYPES, _TYPES_BLOCK, _TYPES_FP8, FORCED_OPTIONS, LOWP_OPTIONS, _build_plan,
                        _cached_plan, _Empty, _gemm, _no_reduction, _Plan, _plan_for, _plan_key, _remember,
                        _run_plan, KernelNotReady)
from .operands import foreign_scale, gemm_operands


def gemm(a, b, *, c=None, alpha: float = 1.0, beta: float = 0.0, bias=None, activation: str | None = None,
         out=None, out_dtype=None, pdl: bool = False, scale_a=None, scale_b=None, a_format: str | None = None,
         b_format: str | None = None, precision: str | None = None, scale_mode: str | None = None,
         _block_n: int | None = None,
         _group: int | None = None, _swap: bool | None = None, _splits: int | None = None,
         _cluster: int | None = None, _pingpong: bool | None = None, _streamk: bool | None = None,
         _block_m: int | None = None):
    """``act(alpha · (a @ b) + beta · c + bias)`` with rawcoop's Hopper kernel.

    Arrays (a, b, c, bias, out, array scales): CuPy arrays, torch CUDA
    tensors, or other libraries' CUDA arrays (anything with
    ``__cuda_array_interface__`` or ``__dlpack__``), used in place, never
    copied; all on one GPU.  The result is a CuPy array, or ``out`` itself.
    Torch tensors (a or b one, then every array argument one; tensors that
    require grad too, read without grad): the result is a torch tensor from
    torch's caching allocator on a's device, the launch goes on torch's
    current stream of that device, and under ``torch.compile`` the call is
    the ``rawcoop::gemm`` custom op (rawcoop.torch).  Not differentiable:
    rawcoop.torch.matmul / linear are.
    a: (M, K) or (L, M, K); b: (K, N) or (L, K, N); float16 or bfloat16
    (``ml_dtypes.bfloat16``), each row- or column-major (all four layouts, no
    copies); batch dimensions broadcast like ``cupy.matmul`` (a 2-D operand or
    a batch of 1, or a stride-0 batch, is shared by every batch).
    c: (M, N) or (L, M, N), row- or column-major, dtype = the output dtype;
    read only when ``beta != 0``.  bias: (N,), float32 or the input dtype
    (float32, float16 or bfloat16 for tf32/fp8 inputs).
    activation: None, "relu", "gelu" (tanh form) or "silu".  out_dtype:
    float16, bfloat16 or float32 (default: the input dtype; float32 for tf32,
    bfloat16 for fp8).  out: array of the result's shape and dtype with unit
    stride along N (may be ``c``).

    TF32: rawcoop has no full-fp32 GEMM; float32
    a and b raise TypeError unless ``precision="tf32"``, which multiplies them
    on the tensor cores in TF32 (the tensor core reads the top 19 bits of each
    fp32 input: 10-bit mantissa) with fp32 accumulation.
    FP8: a and b as ``ml_dtypes.float8_e4m3fn``/
    ``float8_e5m2`` CuPy arrays, torch float8 tensors, or uint8 arrays with
    ``a_format``/``b_format`` = "e4m3"/"e5m2" (e4m3 and e5m2 may be mixed);
    ``D = act(alpha·scale_a·scale_b·(a @ b) + beta·c + bias)`` as
    ``torch._scaled_mm`` (default scales 1).  ``scale_a``/``scale_b``: Python
    floats (folded into alpha on the host: a new value is a new plan, no
    recompile; captured graphs keep the value) or 1-element float32 arrays on
    a's device, read by the kernel at every launch (change them in place: no
    new plan, no recompile, and CUDA graph replays read the current values).
    Per-tensor fp8 sums in the tensor core's fp8 accumulator, as cuBLASLt
    with ``use_fast_accum=True`` (bit-identical on the H200 at the shapes
    measured); ``scale_mode="block"`` promotes to fp32 every 128 of K.
    tf32 and fp8 operands must be K-major (wgmma cannot transpose them): a
    row-major, b column-major (``b = bt.T`` of a row-major (N, K) ``bt``);
    anything else raises ValueError, never a silent copy.
    Block-scaled FP8 (the DeepSeek-V3 recipe):
    ``scale_mode="block"`` with ``scale_a`` a float32 (M, ceil(K/128)) array
    (one scale per row of a and 128-wide k-block, M-major in memory: see
    ``rawcoop.mn_major_scales``) and ``scale_b`` a float32 (ceil(N/128),
    ceil(K/128)) array (one per 128x128 block of b); batched operands take
    (L, ...) scales.  ``D = act(alpha · Σ_kb scale_a[m, kb] · scale_b[n // 128,
    kb] · (a_kb @ b_kb) + beta · c + bias)``, each 128-deep k-block's product
    promoted into fp32 registers.  128x128 or 128x64 tiles, never swap-AB;
    device arrays read at every launch, as per-tensor device scales.
    fp32 accumulation; alpha, beta, bias and the activation are applied in
    fp32 registers before the single rounding to the output type.
    pdl: launch with programmatic stream serialization, so that this GEMM's
    prologue overlaps the tail of the previous kernel on the stream.
    ``_block_n``, ``_group``, ``_swap``, ``_splits``, ``_cluster``, ``_pingpong``
    force kernel choices (tests, benchmarks; ``_cluster=2`` or ``(2, 1)``
    launches CTA pairs on vertically adjacent tiles that multicast the shared
    B tile (128- or 256-wide tiles), ``_cluster=(1, 2)`` pairs on horizontally
    adjacent tiles that multicast the shared A tile (any tile width);
    ``_pingpong=True`` lets the two consumer warpgroups alternate tiles, 128x64
    or 128x128 only; ``_streamk=True`` shares the k-blocks of the partial last
    wave equally among all CTAs instead of splitting its tiles evenly
    (stream-K; no clusters, no ``_splits``; cooperative, or ping-pong with
    ``_pingpong=True``, never chosen automatically), ``_streamk=False``
    never (by default the planner's cost model decides); ``_block_m=192``: 192-row
    tiles (three consumer warpgroups; fp16/bf16, tf32 or per-tensor fp8,
    192 or 128 wide, cooperative, data-parallel or split-K, no clusters).  Results are deterministic:
    split-K and stream-K reduce partials in a fixed order.
    """
    forced = (_block_n, _group, _swap, _splits, _cluster, _pingpong, _streamk, _block_m)
    torch = sys.modules.get("torch")
    if torch is not None and (isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor)):
        return _torch_gemm()(a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, scale_a, scale_b,
                             a_format, b_format, precision, scale_mode, forced)
    cp = _cuda.cupy()
    nd = cp.ndarray
    # tf32/fp8 options (None for 16-bit calls: nothing more to key or check on the repeated-call path)
    lowp = (None if scale_a is None and scale_b is None and a_format is None and b_format is None
            and precision is None and scale_mode is None
            else (scale_a, scale_b, a_format, b_format, precision, scale_mode))
    if (type(a) is nd and type(b) is nd and (c is None or type(c) is nd) and (bias is None or type(bias) is nd)
            and (out is None or type(out) is nd) and (lowp is None or not (foreign_scale(scale_a, nd)
                                                                          or foreign_scale(scale_b, nd)))):
        return _gemm(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp)
    # Anything else: other libraries' GPU arrays become zero-copy CuPy views (DLPack or
    # __cuda_array_interface__); None, host arrays and other objects raise TypeError here.
    user_out = out
    a, b, c, bias, out, scale_a, scale_b = gemm_operands(cp, a, b, c, bias, out, scale_a, scale_b)
    if lowp is not None:
        lowp = (scale_a, scale_b) + lowp[2:]
    res = _gemm(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp)
    return user_out if user_out is not None else res


_TORCH_GEMM = []


def _torch_gemm():
    """rawcoop.torch's gemm on torch tensors (imported at the first torch call)."""
    if not _TORCH_GEMM:
        from .torch import _tensors
        _TORCH_GEMM.append(_tensors.gemm)
    return _TORCH_GEMM[0]
