"""The host side of kernels/gemm.cu: a ``rawcoop.gemm`` call as a plan.

A plan is a call's arguments validated, its kernel configuration chosen, its
tensor maps encoded and its launch bound, once per set of inputs and options;
:class:`_Plan.run` launches it.  rawcoop/gemm.py is the public entry point.

    D = act(alpha · (a @ b) + beta · c + bias)

Contract with the kernel (see the header comment of kernels/gemm.cu); every
tensor is a rank-3 TMA map (batch outermost, size 1 when not batched):
  * A (M, K): K-major (row-major) → dims (K, M, L), box (BLOCK_K, BLOCK_M,
    1); M-major (column-major, 16-bit only) → dims (M, K, L), box (64, 64,
    1) loaded BLOCK_M / 64 times.  BLOCK_M is 128, or 192 for the tall tiles
    (not block-scaled fp8).
  * B (K, N): K-major (column-major, ``b = bt.T``) → dims (K, N, L), box
    (BLOCK_K, BLOCK_N, 1); N-major (row-major, 16-bit only) → dims (N, K, L),
    box (64, 64, 1).
  * Clusters (``_cluster``): 2x1 pairs share B, 1x2 pairs share A; the shared
    operand's K-major box has half the rows (each CTA of the pair loads one
    half and multicasts it), its MN-major boxes stay 64 wide (one atom each).
  * BLOCK_K = 128 bytes / element size: 64 (fp16/bf16), 32 (tf32: fp32 in
    memory, TMA type FLOAT32), 128 (fp8: TMA type UINT8).  wgmma cannot
    transpose tf32/fp8 operands, so those need K-major A and B (else
    ValueError naming the operand; no silent copy).  fp8 kernels take two
    more arguments, pointers to the 1-element fp32 scales (0: none); Python
    float scales are folded into alpha on the host instead.
  * D, C: row-major → dims (N, M, L), box (EPI_COLS, 64, 1); column-major (in
    the kernel's view) → dims (M, N, L), box (EPI_COLS, EPI_COLS, 1): 64 x 64
    16-bit, 32 x 32 fp32 (two boxes per 64-row chunk).  All 128B-swizzled.
  * Swap-AB: the planner (rawcoop/plan/select.py) may hand the kernel the
    transposed problem Dᵀ = Bᵀ·Aᵀ; D and C then appear column-major to the
    kernel and the bias runs along its rows.  With one tile per CTA and no C,
    the staging buffers may share the pipeline ring (EPI_RING: one stage
    more).
  * grid = min(#SMs, #work units) persistent CTAs of 384 threads (512 with
    192-row tiles: a third consumer warpgroup); the work
    decomposition (data-parallel, split-K or stream-K for the partial last
    wave, as the planner chose) and the workspace come from
    rawcoop/plan/scheduler.py and rawcoop/workspace.py.
  * Repeated calls with the same inputs reuse a cached plan (validation,
    configuration, operand maps, the launch configuration bound once:
    launch.BoundLaunch); only ``out`` is checked and D's map looked up (the
    plan remembers the map of each storable ``out`` by address and strides).
  * Devices, streams, graphs: everything runs on the operands' device (all on
    one, else ValueError), whatever the current device, which is restored; the
    launch goes on CuPy's current stream of that device (torch tensors: torch's
    current stream, results from torch's allocator; see _Plan.run's ``side``).
    Under CUDA graph capture no kernel is compiled or loaded (KernelNotReady:
    run the call once before capturing), and a call allocates nothing but
    its result (when no ``out``): the
    split-K/stream-K workspace of the stream must exist already (run the same
    GEMM once on that stream before capturing; else an automatic split-K or
    stream-K is captured as the data-parallel kernel, a forced one raises
    RuntimeError, see _run_plan), ``out`` must be
    TMA-storable, and a result whose rows need padding is returned as a view
    of the padded buffer instead of a contiguous copy.  fp8 scales add nothing
    to that: a device scale is only a pointer the kernel reads at launch (graph
    replays read its current value), a Python-float scale is folded into alpha
    (the graph keeps the captured value); no buffer is allocated or written.
  * Block-scaled fp8 (``scale_mode="block"``, kernel SCALE_MODE 1): SA, M-major
    (M, ceil(K/128)) fp32 → dims (M, KB, L), box (128, 1, 1), no swizzle, one
    512-byte box per stage; SB (ceil(N/128), ceil(K/128)) fp32 → pointer and
    element strides (n-block, k-block, batch).  128x128 cooperative or 128x64
    tiles, no swap-AB (operands.block_scale_args has the full contract).
"""
from __future__ import annotations

import os as _os
from dataclasses import replace

import numpy as np

from . import _cuda
from . import device as _device
from . import tma, tuning, workspace
from .plan import kernel_config as configs
from .plan import scheduler, select
from .plan.candidates import Problem
from .plan.kernel_config import ACTIVATIONS, BIAS_TYPES
from ._reference import activation as activation_reference
from .launch import F32, I32, PTR, TENSOR_MAP, KernelParams, get_kernel
from .operands import (batch_info, block_scale_args, check_activation, check_array, check_out, gemm_operands,
                       input_kinds, kind_label, matrix_layout, np_dtype, result_dtype, result_shape, round16, scale_arg,
                       scale_key, scale_mode_arg, tma_storable)


# The keyword options _build_plan takes as two tuples, in this order.
FORCED_OPTIONS = ("_block_n", "_group", "_swap", "_splits", "_cluster", "_pingpong", "_streamk", "_block_m")
LOWP_OPTIONS = ("scale_a", "scale_b", "a_format", "b_format", "precision", "scale_mode")

_TYPES = (TENSOR_MAP, TENSOR_MAP, TENSOR_MAP, TENSOR_MAP, I32, I32, I32, I32, I32, I32, I32, I32, F32, F32, PTR,
          I32, I32, PTR, PTR)
_ARG_C, _ARG_D, _ARG_WS, _ARG_FLAGS = 2, 3, 17, 18   # the arguments run() sets per call (indices into _TYPES)
_TYPES_FP8 = _TYPES + (PTR, PTR)                  # + scale_a, scale_b
_TYPES_BLOCK = _TYPES + (TENSOR_MAP, PTR, I32, I32, I32)   # + map_sa, sb, sb_n, sb_k, sb_l (block-scaled fp8)
_TMA_DTYPE = {"float16": tma.DType.FLOAT16, "bfloat16": tma.DType.BFLOAT16, "float32": tma.DType.FLOAT32}
_TMA_IN = {configs.FP16: tma.DType.FLOAT16, configs.BF16: tma.DType.BFLOAT16,
           configs.TF32: tma.DType.FLOAT32, configs.E4M3: tma.DType.UINT8,
           configs.E5M2: tma.DType.UINT8}


_DATA_PARALLEL = tuple(1 if name == "_splits" else None for name in FORCED_OPTIONS)
"""Forced options of the same GEMM without split-K/stream-K (``_splits=1``): no workspace."""


def _gemm(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp):
    """``rawcoop.gemm`` on CuPy arrays: the call's plan (cached), run.
    ``forced``: the values of FORCED_OPTIONS; ``lowp``: those of LOWP_OPTIONS,
    or None when every one is None."""
    plan = _cached_plan(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp)
    if isinstance(plan, _Empty):               # zero-size / K == 0: computed without a launch
        return plan.cupy_result(cp, c, bias, out)
    _print_config(plan)
    return _run_plan(cp, plan, out, forced, lambda: _cached_plan(cp, a, b, c, alpha, beta, bias, activation, out,
                                                                 out_dtype, pdl, _DATA_PARALLEL, lowp))


def _print_config(plan):
    if _os.environ.get("RAWCOOP_PRINT_CONFIG"):
        print(f"rawcoop.gemm: {plan.cfg.spec.label} group={plan.scalars[6]} grid={plan.grid[0]} "
              f"{plan.decomposition}{' (tuned)' if plan.tuned else ''}")


def _cached_plan(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp):
    """The plan for these arguments from the cache, built (and cached) on a
    miss; a zero-size / K == 0 call gets an :class:`_Empty` (never cached)."""
    try:
        key = _plan_key(a, b, c, alpha, beta, bias, activation, out_dtype, pdl, forced, lowp)
        plan = _PLANS.get(key)
    except (AttributeError, TypeError):        # not CuPy arrays, or unhashable options: full validation
        key = plan = None
    if plan is None:
        plan = _build_plan(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp)
        if key is not None:
            _remember(key, plan)
    return plan


def _remember(key, plan) -> None:
    """Cache ``plan`` (a _Plan; an _Empty is not kept) under ``key``."""
    if isinstance(plan, _Plan):
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = plan


def _run_plan(cp, plan, out, forced, data_parallel, side=None):
    """Run ``plan``.  Under CUDA graph capture a split-K/stream-K plan needs
    its stream's workspace to exist already; when it does not and the
    decomposition was rawcoop's own choice (no ``_`` option forced), the
    data-parallel plan from ``data_parallel()`` is captured instead (the
    graph then needs no workspace; slower on those shapes by what split-K or
    stream-K saved).  Forced split-K/stream-K still raises, saying to run the
    GEMM once on the stream before capturing.  ``side``: see _Plan.run."""
    try:
        return plan.run(cp, out) if side is None else plan.run(cp, out, side)
    except workspace.CaptureWorkspaceError:
        if any(x is not None for x in forced):
            raise
        plan = data_parallel()
        return plan.run(cp, out) if side is None else plan.run(cp, out, side)


def _plan_for(a, b, *, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, out_dtype=None, **forced_kw):
    """The plan ``gemm`` would run for these arguments (the same inputs,
    validated; for tune)."""
    cp = _cuda.cupy()
    a, b, c, bias, _, scale_a, scale_b = gemm_operands(cp, a, b, c, bias, None, forced_kw.get("scale_a"),
                                                       forced_kw.get("scale_b"))
    forced_kw.update(scale_a=scale_a, scale_b=scale_b)
    forced = tuple(forced_kw.get(k) for k in FORCED_OPTIONS)
    lowp = tuple(forced_kw.get(k) for k in LOWP_OPTIONS)
    plan = _build_plan(cp, a, b, c, alpha, beta, bias, activation, None, out_dtype, False, forced, lowp)
    if not isinstance(plan, _Plan):
        raise ValueError("nothing to tune: the problem is empty or has K == 0")
    return plan


def _build_plan(cp, a, b, c, alpha, beta, bias, activation, out, out_dtype, pdl, forced, lowp=None, side=None):
    """Validate everything (raising before any allocation or launch) and
    compute the kernel configuration, schedule and tensor maps.  ``lowp``:
    (scale_a, scale_b, a_format, b_format, precision[, scale_mode]), or None
    for none.  ``side``: the caller's arrays (see _Plan.run; it says which
    stream may be capturing).  A zero-size / K == 0 problem gives an _Empty."""
    _block_n, _group, _swap, _splits, _cluster, _pingpong, _streamk, _block_m = forced
    scale_a, scale_b, a_format, b_format, precision, scale_mode = (tuple(lowp or ()) + (None,) * 6)[:6]
    # ------------------------------------------------------------ validation
    check_array("a", a, cp, None)
    dev = a.device.id
    check_array("b", b, cp, dev)
    ka, kb = input_kinds(a.dtype.name, b.dtype.name, a_format, b_format, precision)
    lowbits = configs.ELEMENT_BYTES[ka] != 2          # tf32 / fp8: K-major operands only
    fp8 = configs.is_fp8(ka)
    m, n, k, batch, out_shape = result_shape(a.shape, b.shape)
    block = scale_mode_arg(scale_mode, fp8)            # block-scaled fp8: scales checked once shapes are known
    sa_factor, sa_ptr = scale_arg(cp, "scale_a", scale_a, dev, fp8) if not block else (1.0, 0)
    sb_factor, sb_ptr = scale_arg(cp, "scale_b", scale_b, dev, fp8) if not block else (1.0, 0)
    in_name = kind_label(ka, kb)
    batched_result = len(out_shape) == 3

    out_name = result_dtype(ka, out_dtype)
    check_activation(activation)
    try:
        alpha = float(alpha)
        beta = float(beta)
    except (TypeError, ValueError):
        raise TypeError("alpha and beta must be real numbers") from None

    use_c = beta != 0.0
    if c is not None:
        check_array("c", c, cp, dev)
        if c.dtype.name != out_name:
            raise TypeError(f"c has dtype {c.dtype.name}; it must have the output dtype {out_name}")
        if c.shape not in (out_shape, (m, n), (1, m, n)):
            raise ValueError(f"c has shape {c.shape}; expected {out_shape}" +
                             (f" or {(m, n)}" if batched_result else ""))
    elif use_c:
        raise ValueError("beta != 0 needs c")
    if bias is not None:
        check_array("bias", bias, cp, dev)
        if lowbits and bias.dtype.name not in ("float32", "float16", "bfloat16"):
            raise TypeError(f"bias has dtype {bias.dtype.name}; with {in_name} inputs it must be float32, "
                            "float16 or bfloat16")
        if not lowbits and bias.dtype.name not in ("float32", in_name):
            raise TypeError(f"bias has dtype {bias.dtype.name}; it must be float32 or the input dtype {in_name}")
        if bias.shape != (n,):
            raise ValueError(f"bias has shape {bias.shape}; expected ({n},)")
        if n > 1 and bias.strides[0] != bias.dtype.itemsize:
            raise ValueError("bias must be contiguous (unit stride); pass cupy.ascontiguousarray(bias)")
    if out is not None:
        check_out(cp, out, dev, out_shape, np_dtype(out_name))
    if block:
        bscales = block_scale_args(cp, a, b, scale_a, scale_b, dev, k, batch_info("a", a, batch)[1],
                                   batch_info("b", b, batch)[1])

    # Zero-size problems (cupy.matmul semantics; no launch, no TMA rules apply).
    if m == 0 or n == 0 or batch == 0 or k == 0:
        return _Empty(dev, out_shape, out_name, m == 0 or n == 0 or batch == 0, use_c, beta, activation)

    # Operand layouts (raise before anything is allocated or launched).
    what = "tf32" if ka == configs.TF32 else "fp8"
    a_kmajor, a_pitch = matrix_layout(
        "a", a, "K", "M", require=True if lowbits else None,
        why=f"a: wgmma cannot transpose 32-bit/8-bit operands: a must be row-major (K contiguous, unit stride "
            f"along K) for {what} inputs. Pass cupy.ascontiguousarray(a) (rawcoop makes no silent copy)")
    b_rowmajor, b_pitch = matrix_layout(
        "b", b, "N", "K", prefer_inner=False, require=False if lowbits else None,
        why=f"b: wgmma cannot transpose 32-bit/8-bit operands: b must be column-major (K contiguous, unit stride "
            f"along K) for {what} inputs, i.e. b = bt.T for a row-major bt of shape (N, K). Pass "
            "cupy.ascontiguousarray(b.T).T (rawcoop makes no silent copy)")
    b_kmajor = not b_rowmajor
    a_bs, a_batched = batch_info("a", a, batch)
    b_bs, b_batched = batch_info("b", b, batch)
    for name, x in (("a", a), ("b", b)):
        if x.size and x.data.ptr % 16:
            raise ValueError(f"{name}: base address 0x{x.data.ptr:x} is not 16-byte aligned, as TMA needs "
                             "(slicing at an element offset that is not a multiple of 16 bytes causes this)")
    if use_c:
        c_rowmajor, c_pitch = matrix_layout("c", c, "N", "M")
        c_bs, c_batched = batch_info("c", c, batch)
        if c.data.ptr % 16:
            raise ValueError(f"c: base address 0x{c.data.ptr:x} is not 16-byte aligned, as TMA needs")

    # ------------------------------------------------------------ the kernel's problem
    if fp8:
        alpha = alpha * sa_factor * sb_factor       # Python-float scales: folded into alpha here
    info = _device.info(dev)
    osz = np.dtype(np_dtype(out_name)).itemsize
    bias_kind = BIAS_TYPES[bias.dtype.name] if bias is not None else 0
    sig = tuning.signature(info.name, in_name + ("+block128" if block else ""), out_name, m, n, k, batch, a_kmajor,
                           b_kmajor, use_c, bias_kind, ACTIVATIONS[activation])
    problem = Problem(m, n, k, batch, (ka, kb), (a_kmajor, b_kmajor), out_name, use_c,
                      c_rowmajor if use_c else True, bias_kind, activation, block, (a_pitch, b_pitch), info.sm_count)
    tuned = tuning.lookup(sig) if forced == (None,) * len(forced) else None   # a rawcoop.tune winner
    choice = None
    if tuned is not None:
        _group = tuned["group"]
        try:
            choice = select.choose(problem, tuning.forced_of(tuned))
        except ValueError:
            tuned = None                    # (a hand-edited table) no kernel of this problem: ignored
    if choice is None:
        choice = select.choose(problem, select.Forced(_block_n, _block_m, _swap, _cluster, _splits, _pingpong,
                                                      _streamk))
    swap_ok = not block                     # tune may swap
    cfg = choice.cfg
    swap, stream_k = cfg.d_colmajor, cfg.stream_k
    # Kernel view: rows x cols = (M', N'), A' (M'xK), B' (KxN').
    # (Swapped tf32/fp8 operands stay K-major: bᵀ of a column-major b is row-major, aᵀ of a row-major
    # a is column-major; each keeps its own kind, so mixed fp8 kinds swap too.)
    if swap:
        km, kn = n, m
        A, B = (b, b_kmajor, b_pitch, b_bs, b_batched, kb), (a, a_kmajor, a_pitch, a_bs, a_batched, ka)
    else:
        km, kn = m, n
        A, B = (a, a_kmajor, a_pitch, a_bs, a_batched, ka), (b, b_kmajor, b_pitch, b_bs, b_batched, kb)
    cluster_m, cluster_n = cfg.cluster
    cluster = cfg.cluster_size

    def scheduled(cfg):
        # With clusters the schedule walks pairs of tile rows (2x1) or tile columns (1x2), over the
        # clusters that can be resident; either way the launch groups CTAs in clusters of (2, 1, 1).
        kernel = get_kernel(cfg.spec)
        slots = info.sm_count
        if cfg.cluster_size > 1:
            _require_loaded(kernel, dev, side if side is not None else _cupy_arrays(cp))
            kernel.function(dev)
            slots = max(1, kernel.max_active_clusters(dev, cfg.threads, cfg.smem_bytes, (cfg.cluster_size, 1, 1)))
        return kernel, scheduler.schedule(km, kn, cfg.block_m, cfg.block_n, slots, _group, batch, k=k,
                                          block_k=cfg.block_k, splits=choice.splits, cluster=cfg.cluster,
                                          stream_k=stream_k, chain=cfg.pingpong)

    kernel, sched = scheduled(cfg)
    if cfg.epi_ring and (sched.decomposition.units > sched.grid or sched.decomposition.splits > 1):
        # Staging in the ring holds only with one whole tile per CTA (kernels/gemm.cu); where fewer
        # clusters are resident than there are tiles, the kernel with its own staging buffers runs.
        cfg = replace(cfg, epi_ring=False, stages=0)
        kernel, sched = scheduled(cfg)
    dec = sched.decomposition

    dt_out = _TMA_DTYPE[out_name]
    sw = tma.Swizzle.B128

    def operand_map(x, kmajor, pitch, bs, batched, kind, rows, box_rows):
        dt_in = _TMA_IN[kind]       # tf32: FLOAT32 (the tensor core reads the top 19 bits); fp8: UINT8
        lx = x.shape[0] if batched else 1
        bstride = bs if batched else round16(pitch * max(rows, 1) if kmajor else pitch * k)
        if kmajor:              # lines are the operand's rows (M or N), K contiguous: one 128-byte row per box line
            return tma.tiled(dt_in, x.data.ptr, (k, rows, lx), (pitch, bstride), (cfg.block_k, box_rows, 1), sw)
        return tma.tiled(dt_in, x.data.ptr, (rows, k, lx), (pitch, bstride), (64, 64, 1), sw)   # 16-bit only

    plan = _Plan()
    plan.dev, plan.kernel, plan.pdl = dev, kernel, pdl
    plan.grid, plan.smem, plan.cluster = (sched.grid * cluster, 1, 1), cfg.smem_bytes, (cluster, 1, 1)
    plan.threads = cfg.threads
    plan.m, plan.n, plan.batch, plan.out_shape = m, n, batch, out_shape
    plan.out_dtype, plan.osz, plan.dt_out = np_dtype(out_name), osz, dt_out
    plan.colmajor_d, plan.km, plan.kn, plan.epi_cols, plan.box_cols = swap, km, kn, cfg.epi_cols, cfg.box_cols
    # The multicast operand's K-major box is half the tile: each CTA of the pair loads one half.
    plan.map_a = operand_map(*A, km, configs.trimmed_lines(A[1], km, cfg.block_m, cfg) // cluster_n)
    plan.map_b = operand_map(*B, kn, configs.trimmed_lines(B[1], kn, cfg.block_n, cfg) // cluster_m)
    plan.map_c = None
    if use_c:
        c_l = c.shape[0] if c_batched else 1
        plan.map_c = plan.epilogue_map(c.data.ptr, cfg.c_colmajor, c_pitch,
                                       c_bs if c_batched else round16(c_pitch * max(m, n)), c_l)
    # The kernel's split-K reduction: spread over the splits (cooperative kernels, every tile's splits
    # running at once: Decomposition.spread; one workspace slot per split) or a serial chain.
    spread = not cfg.pingpong and not cfg.stream_k and dec.spread(sched.grid)
    bmask = int(A[4]) | (int(B[4]) << 1) | ((int(c_batched) << 2) if use_c else 0) | (int(spread) << 3)
    plan.scalars = (km, kn, k, batch, sched.tiles_m, sched.tiles_n, sched.group, bmask, alpha, beta,
                    bias.data.ptr if bias is not None else 0, dec.tiles_dp, dec.splits)
    if block:
        # SA: M-major fp32, lines are k-blocks of M scales; one 128-row box (512 B) per stage, no swizzle.
        map_sa = tma.tiled(tma.DType.FLOAT32, bscales.sa_ptr, (m, bscales.k_blocks, bscales.sa_batches),
                           (bscales.sa_pitch, bscales.sa_bstride), (configs.BLOCK_M, 1, 1), tma.Swizzle.NONE)
        plan.extra = (map_sa, bscales.sb_ptr, bscales.sb_n, bscales.sb_k, bscales.sb_l)
        plan.types = _TYPES_BLOCK
    else:
        plan.extra = (sa_ptr, sb_ptr) if fp8 else ()      # fp8: scale_a, scale_b device pointers (0: none)
        plan.types = _TYPES_FP8 if fp8 else _TYPES
    # The argument block, packed once; run() rewrites only C/D's maps and the workspace pointers.
    plan.params = KernelParams((plan.map_a, plan.map_b, plan.map_c or plan.map_a, plan.map_a) + plan.scalars +
                               (0, 0) + plan.extra, plan.types)
    plan.ws_floats = dec.workspace_floats(cfg.block_n, spread, cfg.consumers) * cluster   # 0 without split tiles
    plan.ws_flags = dec.flag_count(cfg.consumers) * cluster
    plan.cfg = cfg
    plan.decomposition = dec
    plan.k, plan.signature, plan.swap_ok, plan.tuned = k, sig, swap_ok, tuned is not None
    plan.problem = problem
    return plan


class _Plan:
    """Everything about a call that does not depend on ``out``: the kernel,
    grid, operand/C tensor maps and scalar arguments.  Cached by the inputs'
    pointers, shapes, strides, dtypes and the options (see ``_plan_key``), so
    a repeated call only validates ``out``, builds D's map (itself cached by
    address) and launches."""

    __slots__ = ("dev", "kernel", "pdl", "grid", "smem", "m", "n", "batch", "out_shape", "out_dtype", "osz",
                 "dt_out", "colmajor_d", "km", "kn", "epi_cols", "box_cols", "map_a", "map_b", "map_c", "scalars",
                 "ws_floats", "ws_flags", "cfg", "decomposition", "k", "signature", "swap_ok", "tuned", "cluster", "problem", "extra",
                 "types", "params", "threads", "launch", "out_maps")

    def __init__(self):
        self.launch = None      # a launch.BoundLaunch, bound at the first run
        self.out_maps = {}      # (address, strides) -> D's tensor map: storable outs and new results

    def epilogue_map(self, ptr, colmajor_kernel, pitch, bstride, lx):
        sw = tma.Swizzle.B128
        if colmajor_kernel:     # lines are (parts of) the kernel's columns: memory (M', N') with M' contiguous
            box = (self.epi_cols, self.epi_cols, 1)    # 64 x 64 16-bit; fp32: 32 x 32, two boxes per chunk
            return tma.tiled(self.dt_out, ptr, (self.km, self.kn, lx), (pitch, bstride), box, sw)
        # a whole chunk per box, or narrow 32-byte boxes (tile widths between the multiples of the chunk)
        narrow = self.box_cols != self.epi_cols
        return tma.tiled(self.dt_out, ptr, (self.kn, self.km, lx), (pitch, bstride), (self.box_cols, 64, 1),
                         tma.Swizzle.B32 if narrow else sw)

    def run(self, cp, out, side=None):
        """Launch into ``out`` (None: a new result) and return it.  ``side``
        says how the caller's arrays are read, allocated and on which stream
        the launch goes: None for CuPy arrays (:class:`_CupyArrays`), the torch
        side for torch tensors (rawcoop/torch/_tensors.py)."""
        if side is None:
            side = _cupy_arrays(cp)
        dev, m, n, batch, osz = self.dev, self.m, self.n, self.batch, self.osz
        if out is not None:
            side.check_out(out, dev, self.out_shape, self.out_dtype)
        prev = side.enter(dev)
        try:
            stream = side.stream(dev)
            # D: the user's `out` when TMA can store into it, else a padded buffer.  Only then is the
            # stream asked whether it is being captured into a CUDA graph: a temporary freed back to
            # CuPy's pool would still be written by every replay, so under capture `out` must be
            # storable and a result without `out` is returned as the padded buffer's view (torch's
            # allocator keeps a capture's temporaries in the graph's private pool: no such rule).
            # A storable `out` seen before has its D map in out_maps (by address and strides: shape and
            # dtype are the plan's), which skips the checks and the map lookup; so has a new result at an
            # address seen before.
            out_key = None if out is None else side.out_key(out)
            map_d = None if out_key is None else self.out_maps.get(out_key)
            temp = out is None
            if map_d is None and out is not None:
                out_ptr, out_strides = side.layout(out)
                temp = not tma_storable(out_ptr, out.shape, out_strides, osz, batch)
            strided_result = False
            if temp:
                npad = -(-n // (16 // osz)) * (16 // osz)
                if ((out is not None or npad != n) and not side.capture_temporaries
                        and _device.stream_capturing(dev, stream)):
                    if out is not None:
                        raise ValueError(
                            f"out (strides {out_strides}, base 0x{out_ptr:x}): under CUDA graph capture "
                            "the kernel must store straight into out, which needs a 16-byte-aligned base, unit "
                            "stride along N and row (and batch) strides that are multiples of 16 bytes; any other "
                            "out would take a temporary buffer that the graph keeps writing after it is freed. "
                            "Pass such an out, or out=None")
                    strided_result = True
            ws_ptr = flags_ptr = 0
            if self.ws_flags:       # split-K: the (device, stream) workspace; never allocated under capture
                ws_ptr, flags_ptr = workspace.get(dev, stream, self.ws_floats, self.ws_flags)
            if not temp:
                d = out
            elif out is None and npad == n:
                d = side.empty(self.out_shape, self.out_dtype, dev)     # the result itself: no view, no copy
            else:
                d = side.empty((batch, m, npad), self.out_dtype, dev)[..., :n]
            if map_d is None and temp:      # a new result: pools hand back the same addresses, so look it up too
                out_key = side.out_key(d)
                map_d = self.out_maps.get(out_key)
            if map_d is None:
                ptr, st = side.layout(d)
                d_pitch = st[-2] if m > 1 else round16(n * osz)
                d_bs = st[0] if (batch > 1 and d.ndim == 3) else round16(m * max(d_pitch, 16))
                map_d = self.epilogue_map(ptr, self.colmajor_d, d_pitch, d_bs, batch)
                if len(self.out_maps) >= _OUT_MAPS_MAX:
                    self.out_maps.clear()
                self.out_maps[out_key] = map_d
            params = self.params
            with params.lock:
                launch = self.launch
                if launch is None:
                    _require_loaded(self.kernel, dev, side)
                    launch = self.launch = self.kernel.bind(dev, self.grid, self.threads, self.smem,
                                                            self.cluster, self.pdl)
                if self.map_c is None:
                    params.set(_ARG_C, map_d)
                params.set(_ARG_D, map_d)
                params.set(_ARG_WS, ws_ptr)
                params.set(_ARG_FLAGS, flags_ptr)
                launch(stream, params)
            if out is None:
                return side.result(d if d.ndim == len(self.out_shape) else d[0], strided_result)
            if d is not out:
                side.copy(out, d.reshape(self.out_shape))
            return out
        finally:
            side.exit(prev)


class _CupyArrays:
    """How a plan's run reads and allocates CuPy arrays: ``out`` checked with
    operands.check_out, the result from CuPy's pool on the plan's device
    (made current for the call, then restored), the launch on CuPy's current
    stream of that device.  The torch side (rawcoop/torch/_tensors.py) has the
    same methods for torch tensors."""

    __slots__ = ("cp",)
    capture_temporaries = False     # a temporary freed to CuPy's pool under capture is unsafe (see run)

    def __init__(self, cp):
        self.cp = cp

    def check_out(self, out, dev, shape, dtype):
        check_out(self.cp, out, dev, shape, dtype)

    def enter(self, dev):
        """Make ``dev`` current; returns what exit() restores (None: nothing)."""
        runtime = self.cp.cuda.runtime
        prev = runtime.getDevice()
        if prev == dev:
            return None
        runtime.setDevice(dev)
        return prev

    def exit(self, prev):
        if prev is not None:
            self.cp.cuda.runtime.setDevice(prev)

    def stream(self, dev) -> int:
        return self.cp.cuda.get_current_stream(dev).ptr

    def out_key(self, x):
        """What identifies ``out``'s D map within a plan: address and strides."""
        return x.data.ptr, x.strides

    def layout(self, x):
        """(address, strides in bytes)."""
        return x.data.ptr, x.strides

    def empty(self, shape, dtype, dev):
        return self.cp.empty(shape, dtype=dtype)

    def result(self, res, strided: bool):
        return res if res.flags.c_contiguous or strided else self.cp.ascontiguousarray(res)

    def copy(self, out, d):
        out[...] = d


_CUPY_ARRAYS = [None]


def _cupy_arrays(cp) -> _CupyArrays:
    side = _CUPY_ARRAYS[0]
    if side is None or side.cp is not cp:
        side = _CUPY_ARRAYS[0] = _CupyArrays(cp)
    return side


class KernelNotReady(RuntimeError):
    """A kernel would have to be compiled or loaded while the launch stream
    is being captured into a CUDA graph."""


def _require_loaded(kernel, dev: int, side) -> None:
    """Under CUDA graph capture, ``kernel`` must be loaded on ``dev`` already:
    neither an NVRTC compile nor a module load belongs inside a capture.  One
    driver query, made only when the kernel is not loaded yet."""
    if kernel.loaded(dev):
        return
    stream = side.stream(dev)
    if not _device.stream_capturing(dev, stream):
        return
    state = "compiled but not loaded" if kernel.cache.contains(kernel.spec, kernel.arch) else "not compiled"
    raise KernelNotReady(
        f"rawcoop.gemm: kernel {kernel.spec.label} is {state} on device {dev}, and stream 0x{stream:x} is being "
        "captured into a CUDA graph, where rawcoop neither compiles nor loads kernels. Run the same call once "
        "before the capture (a warm-up step loads its kernels); `python -m rawcoop warmup --shapes MxNxK` "
        "compiles ahead of time, and the first call still loads the kernel")


class _Empty:
    """A call without a launch (cupy.matmul semantics): an empty result (M,
    N or the batch is 0), or K == 0, where D = act(beta·c + bias)."""

    __slots__ = ("dev", "out_shape", "out_name", "empty", "use_c", "beta", "activation")

    def __init__(self, dev, out_shape, out_name, empty, use_c, beta, activation):
        self.dev, self.out_shape, self.out_name, self.empty = dev, out_shape, out_name, empty
        self.use_c, self.beta, self.activation = use_c, beta, activation

    def cupy_result(self, cp, c, bias, out):
        if self.empty:
            with cp.cuda.Device(self.dev):
                return out if out is not None else cp.empty(self.out_shape, dtype=np_dtype(self.out_name))
        return _no_reduction(cp, self.dev, self.out_shape, self.out_name, c if self.use_c else None, self.beta,
                             bias, self.activation, out)


_OUT_MAPS_MAX = 16
"""Storable outputs whose D maps a plan remembers (then it starts over): enough
for rotating output buffers, and at most ~8 KB per plan (up to _PLANS_MAX plans)."""

_PLANS: dict = {}
_PLANS_MAX = 4096


def _plan_key(a, b, c, alpha, beta, bias, activation, out_dtype, pdl, forced, lowp=None):
    """Everything validation and planning read from the arguments; raises
    AttributeError for non-CuPy inputs (the slow path then reports them)."""
    ad, bd = a.data, b.data
    return (ad.ptr, ad.device_id, a.shape, a.strides, a.dtype, bd.ptr, bd.device_id, b.shape, b.strides, b.dtype,
            None if c is None else (c.data.ptr, c.data.device_id, c.shape, c.strides, c.dtype),
            alpha, beta,
            None if bias is None else (bias.data.ptr, bias.data.device_id, bias.shape, bias.strides, bias.dtype),
            activation, out_dtype, pdl, forced,
            None if lowp is None else (scale_key(lowp[0]), scale_key(lowp[1])) + tuple(lowp[2:]))


def _no_reduction(cp, dev, out_shape, out_name, c, beta, bias, activation, out):
    """K == 0: a @ b is all zeros, so D = act(beta·c + bias); computed with
    CuPy element-wise ops (no rawcoop launch), like cupy.matmul's zeros."""
    with cp.cuda.Device(dev):
        v = cp.zeros(out_shape, dtype=cp.float32)
        if c is not None:
            v = v + beta * c.astype(cp.float32)
        if bias is not None:
            v = v + bias.astype(cp.float32)
        v = activation_reference(cp, v, activation)
        res = v.astype(np_dtype(out_name))
        if out is None:
            return res
        out[...] = res
        return out
