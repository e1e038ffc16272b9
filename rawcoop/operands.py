"""The operands of ``rawcoop.gemm`` as the kernel needs them: input kinds
(fp16/bf16, tf32, fp8 formats, per-tensor and block scales), each matrix's
orientation and pitch (the TMA rules: a unit-stride axis, 16-byte pitches and
batch strides), zero-copy views of other libraries' GPU arrays, and the checks
on ``out``.  Everything here raises TypeError/ValueError naming the argument
before anything is allocated or launched; nothing here touches the GPU."""
from __future__ import annotations

import numpy as np

from .plan import kernel_config as configs

INPUTS_16BIT = ("float16", "bfloat16")
FP8_DTYPES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}     # ml_dtypes names -> format
FP8_FORMATS = ("e4m3", "e5m2")
FP8_NUMPY_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
DEFAULT_OUT = {configs.FP16: "float16", configs.BF16: "bfloat16", configs.TF32: "float32",
                configs.E4M3: "bfloat16", configs.E5M2: "bfloat16"}


def input_kinds(a_dtype: str, b_dtype: str, a_format, b_format, precision) -> tuple[int, int]:
    """(A kind, B kind) (see configs.IN_KINDS) from the operands' dtype
    names and the ``a_format``/``b_format``/``precision`` options; raises
    TypeError/ValueError naming the argument.  Pure: no GPU needed.

    * float16, bfloat16: the 16-bit kernels (no format, no precision).
    * float32: only with ``precision="tf32"`` (rawcoop has no full-fp32 GEMM).
    * fp8: ``ml_dtypes.float8_e4m3fn``/``float8_e5m2`` arrays (the format is
      the dtype's; a format given too must agree), or uint8 storage with
      ``a_format``/``b_format`` = "e4m3" or "e5m2".  A and B may mix e4m3 and
      e5m2."""
    if precision not in (None, "tf32"):
        raise ValueError(f"precision must be None or 'tf32', got {precision!r}")
    kinds = []
    for name, dt, fmt in (("a", a_dtype, a_format), ("b", b_dtype, b_format)):
        if fmt is not None and fmt not in FP8_FORMATS:
            raise ValueError(f"{name}_format must be None, 'e4m3' or 'e5m2', got {fmt!r}")
        if dt in FP8_DTYPES:
            if fmt is not None and fmt != FP8_DTYPES[dt]:
                raise ValueError(f"{name} has dtype {dt} but {name}_format={fmt!r}; leave {name}_format out for "
                                 "ml_dtypes fp8 arrays, or pass uint8 storage with the format")
            kinds.append(configs.IN_KINDS[FP8_DTYPES[dt]])
        elif dt == "uint8":
            if fmt is None:
                raise TypeError(f"{name} is uint8: pass {name}_format='e4m3' or 'e5m2' to read its bytes as fp8 "
                                "(rawcoop has no integer GEMM)")
            kinds.append(configs.IN_KINDS[fmt])
        elif fmt is not None:
            raise ValueError(f"{name}_format applies to fp8 operands (uint8 storage, or ml_dtypes float8_e4m3fn/"
                             f"float8_e5m2 arrays); {name} has dtype {dt}")
        elif dt in INPUTS_16BIT:
            kinds.append(configs.IN_KINDS[dt])
        elif dt == "float32":
            if precision != "tf32":
                raise TypeError(f"{name} has dtype float32, and rawcoop has no full-fp32 GEMM: pass "
                                "precision='tf32' to multiply float32 inputs on the tensor cores in TF32 (each "
                                "input keeps a 10-bit mantissa; fp32 accumulation), or convert the inputs to "
                                "bfloat16/float16")
            kinds.append(configs.TF32)
        else:
            raise TypeError(f"{name} has dtype {dt}; rawcoop.gemm takes float16 or bfloat16 (ml_dtypes.bfloat16), "
                            "float32 with precision='tf32', or fp8 (ml_dtypes float8_e4m3fn/float8_e5m2, or uint8 "
                            "with a_format/b_format)")
    ka, kb = kinds
    if precision == "tf32" and (ka, kb) != (configs.TF32, configs.TF32):
        raise TypeError(f"precision='tf32' needs float32 a and b; got {a_dtype} and {b_dtype}")
    if ka != kb and not (configs.is_fp8(ka) and configs.is_fp8(kb)):
        raise TypeError(f"a and b must have the same dtype (only fp8 e4m3 and e5m2 may be mixed), got {a_dtype} "
                        f"and {b_dtype}")
    return ka, kb


def kind_label(ka: int, kb: int) -> str:
    """The input part of a tuning signature: the dtype name for 16-bit inputs
    (as before), 'tf32', 'e4m3', 'e5m2', or 'e4m3*e5m2' for mixed fp8."""
    na, nb = configs.KIND_NAMES[ka], configs.KIND_NAMES[kb]
    return na if na == nb else f"{na}*{nb}"


def scale_arg(cp, name: str, s, dev: int, fp8: bool) -> tuple[float, int]:
    """(host factor, device pointer) of one per-tensor scale: None → (1, 0);
    a Python/NumPy real → (value, 0), folded into alpha on the host; a
    1-element float32 CuPy array on ``dev`` → (1, its address), read by the
    kernel on every launch."""
    if s is None:
        return 1.0, 0
    if not fp8:
        raise ValueError(f"{name} applies to fp8 inputs only (per-tensor dequantisation scales); scale other "
                         "inputs with alpha")
    if isinstance(s, cp.ndarray):
        if s.dtype != np.float32:
            raise TypeError(f"{name} must be a float32 array (or a Python float), got dtype {s.dtype.name}")
        if s.size != 1:
            raise ValueError(f"{name} must hold exactly one value (0-d or 1-element), got shape {s.shape}" +
                             (" (block scales: pass scale_mode='block')" if s.ndim >= 2 else ""))
        if s.data.device_id != dev:
            raise ValueError(f"{name} is on device {s.data.device_id}, but a is on device {dev}")
        return 1.0, s.data.ptr
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a Python float or a 1-element float32 GPU array on a's device, got "
                        f"{type(s).__module__}.{type(s).__name__}")
    return float(s), 0


SCALE_MODES = ("tensor", "block")


def scale_mode_arg(mode, fp8: bool) -> bool:
    """True for block-scaled fp8 (``scale_mode="block"``), False for
    per-tensor scales (None or "tensor", the default)."""
    if mode is not None and not (isinstance(mode, str) and mode in SCALE_MODES):
        raise ValueError(f"scale_mode must be None, 'tensor' (per-tensor scales) or 'block' (1x128 / 128x128 "
                         f"block scales), got {mode!r}")
    if mode == "block" and not fp8:
        raise ValueError("scale_mode='block' applies to fp8 inputs only (block dequantisation scales)")
    return mode == "block"


class BlockScales:
    """The validated block scales of one call (see :func:`block_scale_args`):
    SA's TMA geometry (bytes) and SB's element strides."""

    __slots__ = ("sa_ptr", "sa_pitch", "sa_bstride", "sa_batches", "sb_ptr", "sb_n", "sb_k", "sb_l", "k_blocks")


def _block_scale_array(cp, name: str, s, dev: int, shape: tuple, what: str):
    if s is None:
        raise ValueError(f"scale_mode='block' needs {name}: a float32 GPU array of shape {shape} ({what})")
    if not isinstance(s, cp.ndarray):
        raise TypeError(f"{name} must be a float32 GPU array of shape {shape} with scale_mode='block' ({what}), "
                        f"got {type(s).__module__}.{type(s).__name__} (a Python float is a per-tensor scale: "
                        "fold it into alpha)")
    if s.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 array, got dtype {s.dtype.name}")
    if s.data.device_id != dev:
        raise ValueError(f"{name} is on device {s.data.device_id}, but a is on device {dev}")
    if tuple(s.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(s.shape)}; scale_mode='block' needs {shape} ({what})")
    if any(st < 0 for st in s.strides):
        raise ValueError(f"{name} has a negative stride {s.strides}; pass cupy.ascontiguousarray({name})")


def block_scale_args(cp, a, b, sa, sb, dev: int, k: int, a_batched: bool, b_batched: bool) -> BlockScales:
    """Validate the block scales of fp8 ``a`` (…, M, K) and ``b`` (…, K, N)
    (raising TypeError/ValueError naming the argument; nothing touches the
    GPU) and return their geometry.

    * ``scale_a`` (SA): float32, shape a.shape[:-1] with K replaced by
      ceil(K/128): ``(M, KB)`` or ``(L, M, KB)``; SA[m, kb] scales row m of
      k-block kb.  **M-major** (M contiguous: stride 4 bytes along M), the
      stride between k-blocks (and batches) a positive multiple of 16 bytes,
      base 16-byte aligned: the kernel TMA-loads 128 consecutive rows of one
      k-block as one 512-byte box.  This is the transpose of the natural
      row-major (M, KB) array; :func:`mn_major_scales` makes such a copy (once,
      explicitly: rawcoop never copies silently per call).
    * ``scale_b`` (SB): float32, shape b.shape[:-2] + (ceil(N/128), ceil(K/128)):
      ``(NB, KB)`` or ``(L, NB, KB)``; SB[nb, kb] scales the 128x128 block
      (columns 128·nb.., k-block kb) of b.  Any non-negative strides (the
      kernel reads one float per k-block with ld.global).
    * Batches follow the operand: the kernel reads SA's batch l where it
      reads a's (batch 0 when a is 2-D or broadcast), SB's where it reads b's.
    The last k-block (and for SB the last column block) may be partial:
    K and N need not be multiples of 128; A, B and SA are zero-filled past
    their ends, so padded k-blocks contribute 0 whatever their scale."""
    kb_count = -(-k // 128)
    m, n = a.shape[-2], b.shape[-1]
    sa_shape = tuple(a.shape[:-2]) + (m, kb_count)
    sb_shape = tuple(b.shape[:-2]) + (-(-n // 128), kb_count)
    _block_scale_array(cp, "scale_a", sa, dev, sa_shape,
                       "one fp32 scale per row of a and 128-wide k-block: (M, ceil(K/128)), M-major")
    _block_scale_array(cp, "scale_b", sb, dev, sb_shape,
                       "one fp32 scale per 128x128 block of b: (ceil(N/128), ceil(K/128))")
    bs = BlockScales()
    bs.k_blocks = kb_count
    if sa.size == 0 or sb.size == 0:
        return bs                           # an empty problem: nothing is loaded
    fix = ("; pass rawcoop.mn_major_scales(scale_a), an M-major copy (make it once, where the scales are "
           "produced: rawcoop never copies silently)")
    st = sa.strides
    if m > 1 and st[-2] != 4:
        raise ValueError(f"scale_a must be M-major (unit stride along M: the kernel TMA-loads 128 consecutive "
                         f"rows of one k-block), got strides {st} (bytes) for shape {tuple(sa.shape)}" + fix)
    if kb_count > 1:
        pitch = st[-1]
        if pitch <= 0 or pitch % 16 or pitch < 4 * m:
            raise ValueError(f"scale_a: the stride between k-blocks is {pitch} bytes; TMA needs a positive "
                             f"multiple of 16 bytes of at least 4*M = {4 * m} (M rounded up to a multiple of 4 "
                             "floats)" + fix)
    else:
        pitch = round16(4 * m)
    bs.sa_batches = sa.shape[0] if (sa.ndim == 3 and a_batched) else 1
    if bs.sa_batches > 1:
        bs.sa_bstride = st[0]
        if st[0] <= 0 or st[0] % 16:
            raise ValueError(f"scale_a: batch stride {st[0]} bytes must be a positive multiple of 16 bytes for "
                             "TMA" + fix)
    else:
        bs.sa_bstride = round16(pitch * max(kb_count, 1))
    if sa.size and sa.data.ptr % 16:
        raise ValueError(f"scale_a: base address 0x{sa.data.ptr:x} is not 16-byte aligned, as TMA needs" + fix)
    bs.sa_ptr, bs.sa_pitch = sa.data.ptr, pitch
    sst = sb.strides
    if any(x % 4 for x in sst) or any(x // 4 >= 2 ** 31 for x in sst):
        raise ValueError(f"scale_b: strides {sst} (bytes) must be multiples of 4 bytes below 2^33; pass "
                         "cupy.ascontiguousarray(scale_b)")
    bs.sb_ptr = sb.data.ptr
    bs.sb_n, bs.sb_k = sst[-2] // 4, sst[-1] // 4
    bs.sb_l = sst[0] // 4 if (sb.ndim == 3 and b_batched and sb.shape[0] > 1) else 0
    return bs


def mn_major_scales(scale_a):
    """An M-major float32 copy of block scales ``scale_a`` of shape (M, KB) or
    (L, M, KB) (any layout and float dtype; a CuPy array or another GPU array),
    as ``rawcoop.gemm(..., scale_mode="block")`` needs it: returned as an
    (M, KB) / (L, M, KB) view with unit stride along M and the k-block pitch
    padded to 16 bytes (M rounded up to a multiple of 4; the padding is
    zeros).  One explicit copy on the array's device and CuPy's current stream
    there: make it where the scales are produced, not before every GEMM."""
    from ._cuda import cupy
    cp = cupy()
    x = as_cupy(cp, "scale_a", scale_a, required=True)
    if x.ndim not in (2, 3):
        raise ValueError(f"scale_a must be 2-D (M, KB) or 3-D (L, M, KB), got shape {x.shape}")
    lead, (m, kb) = x.shape[:-2], x.shape[-2:]
    mp = max(4, -(-m // 4) * 4)
    with cp.cuda.Device(x.device.id):
        buf = cp.zeros(lead + (kb, mp), dtype=cp.float32)
        buf[..., :m] = cp.swapaxes(x, -1, -2)
        return cp.swapaxes(buf[..., :m], -1, -2)


def np_dtype(name: str) -> np.dtype:
    """NumPy dtype of a dtype name, including the ml_dtypes ones (bfloat16,
    float8_e4m3fn, float8_e5m2)."""
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def dtype_name(dt) -> str:
    """The name of ``out_dtype``: a NumPy/ml_dtypes dtype, a dtype name, or a
    torch dtype (``torch.bfloat16`` -> "bfloat16")."""
    if isinstance(dt, str) and dt in ("bfloat16", "bf16"):
        return "bfloat16"
    if type(dt).__name__ == "dtype" and type(dt).__module__ == "torch":
        return torch_dtype_name(dt)
    try:
        return np.dtype(dt).name
    except TypeError:
        raise TypeError(f"out_dtype {dt!r} is not a dtype") from None


def torch_dtype_name(dt) -> str:
    """``torch.float8_e4m3fn`` -> "float8_e4m3fn" (the NumPy / ml_dtypes name)."""
    return str(dt).removeprefix("torch.")


def result_shape(a_shape: tuple, b_shape: tuple) -> tuple:
    """(m, n, k, batch, out_shape) of ``a @ b`` with rawcoop.gemm's rules: a
    (M, K) or (L, M, K), b (K, N) or (L, K, N), batches equal or one of them 1
    (or 2-D: shared); the result is 3-D when either operand is.  Raises
    ValueError naming the rule.  Pure (shared by planning and the torch fake
    implementation)."""
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) not in (2, 3):
            raise ValueError(f"{name} must be 2-D (M, K)/(K, N) or 3-D (L, ., .), got shape {tuple(shape)}")
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2:
        raise ValueError(f"shape mismatch: a is {tuple(a_shape)}, b is {tuple(b_shape)} (a.shape[-1] must equal "
                         "b.shape[-2])")
    la = a_shape[0] if len(a_shape) == 3 else 1
    lb = b_shape[0] if len(b_shape) == 3 else 1
    if la != lb and la != 1 and lb != 1:
        raise ValueError(f"batch mismatch: a has batch {la}, b has batch {lb} (they must match or one must be 1)")
    batch = max(la, lb)
    out_shape = (batch, m, n) if len(a_shape) == 3 or len(b_shape) == 3 else (m, n)
    return m, n, k, batch, out_shape


def result_dtype(ka: int, out_dtype) -> str:
    """The output dtype name: ``out_dtype`` (float16, bfloat16 or float32,
    else TypeError), or the default of the input kind (DEFAULT_OUT)."""
    if out_dtype is None:
        return DEFAULT_OUT[ka]
    name = dtype_name(out_dtype)
    if name not in configs.OUT_TYPES:
        raise TypeError(f"out_dtype must be float16, bfloat16 or float32, got {name}")
    return name


def check_activation(activation) -> None:
    if activation not in configs.ACTIVATIONS:
        raise ValueError(f"activation must be one of None, 'relu', 'gelu', 'silu'; got {activation!r}")


def round16(nbytes: int) -> int:
    return max(16, -(-nbytes // 16) * 16)


def matrix_layout(name: str, x, inner_axis_name: str, outer_axis_name: str, prefer_inner: bool = True,
                   require: bool | None = None, why: str = ""):
    """Classify the last two axes of ``x`` (rows, cols).  Returns
    (cols_contiguous, pitch_bytes).  A size-1 axis has no meaningful stride,
    so either orientation is accepted for it.  ``require`` (True: rows as
    lines, i.e. unit stride along the columns; False: columns as lines) keeps
    only that orientation and raises ValueError(``why`` + the strides)
    when it does not exist."""
    isz = x.dtype.itemsize
    rows, cols = x.shape[-2], x.shape[-1]
    s_rows, s_cols = x.strides[-2], x.strides[-1]
    options = []
    if s_cols == isz or cols == 1:          # row-major: lines are rows
        options.append((True, s_rows if rows > 1 else round16(cols * isz)))
    if s_rows == isz or rows == 1:          # column-major: lines are columns
        options.append((False, s_cols if cols > 1 else round16(rows * isz)))
    if not prefer_inner:
        options.reverse()
    if require is not None:
        options = [o for o in options if o[0] == require]
        if not options:
            raise ValueError(f"{why}; got strides {x.strides} (bytes) for shape {x.shape}")
    if not options:
        raise ValueError(
            f"{name} has strides {x.strides} (bytes) for shape {x.shape}: neither of its last two axes has unit "
            "stride, which TMA needs; pass cupy.ascontiguousarray(" + name + ")")
    for row_major, pitch in options:
        if pitch > 0 and pitch % 16 == 0:
            return row_major, pitch
    row_major, pitch = options[0]
    what = f"rows ({outer_axis_name})" if row_major else f"columns ({inner_axis_name})"
    unit = 16 // isz
    raise ValueError(
        f"{name}: the stride between its {what} is {pitch} bytes; TMA needs a positive multiple of 16 bytes. "
        f"Pad that dimension to a multiple of {unit} elements (allocate a larger array and slice it)")


def batch_info(name: str, x, batch: int) -> tuple[int, bool]:
    """(batch stride in bytes, batched?) for an operand of a batch-``batch`` problem."""
    if x.ndim == 2 or x.shape[0] == 1 or batch == 1:
        return 0, False
    s = x.strides[0]
    if s == 0:
        return 0, False                     # broadcast view (stride 0): same matrix for every batch
    if s < 0 or s % 16:
        raise ValueError(f"{name}: batch stride {s} bytes must be a positive multiple of 16 bytes for TMA")
    return s, True


GPU_ARRAYS = ("a cupy.ndarray, or another library's CUDA array (a torch tensor on a CUDA device; anything with "
              "__cuda_array_interface__ or __dlpack__)")
"""What every array argument of rawcoop's operations may be (error messages)."""

_DLPACK_HOST = {1: "host (CPU) memory", 3: "pinned host memory", 13: "host memory (CUDA managed: not supported)"}


def as_cupy(cp, name: str, x, required: bool = False):
    """A zero-copy CuPy view of argument ``name``: a CuPy array as is; another
    library's CUDA array through DLPack (``__dlpack__``; the producer is asked
    to order its work before CuPy's current stream) or
    ``__cuda_array_interface__`` v3 (CuPy makes the current stream wait on the
    producer's stream when the interface names one).  None stays None unless
    ``required``.  Anything else (None when required, numbers, lists, NumPy
    and other host arrays) raises TypeError naming the argument and what it
    may be.  torch float8_e4m3fn/float8_e5m2 tensors (which neither protocol
    may carry) go through a uint8 view and come back as CuPy arrays of the
    ml_dtypes fp8 dtype, so the format travels with them."""
    if isinstance(x, cp.ndarray):
        return x
    if x is None:
        if required:
            raise TypeError(f"{name} must be a GPU array, got None. Accepted: {GPU_ARRAYS}")
        return None
    fp8 = torch_fp8_format(x)
    if fp8 is not None:
        import ml_dtypes
        import torch
        return as_cupy(cp, name, x.view(torch.uint8)).view(getattr(ml_dtypes, FP8_NUMPY_NAMES[fp8]))
    if getattr(x, "requires_grad", False):
        x = x.detach()                  # the same memory; DLPack refuses to export a tensor that requires grad
    kind = f"{type(x).__module__}.{type(x).__name__}"
    dl_device = getattr(x, "__dlpack_device__", None)
    if dl_device is not None and hasattr(x, "__dlpack__"):
        dev_type = int(dl_device()[0])
        if dev_type in _DLPACK_HOST:
            raise TypeError(f"{name} is a {kind} in {_DLPACK_HOST[dev_type]}; rawcoop computes on the GPU: copy it "
                            f"there first (e.g. cupy.asarray({name})). Accepted: {GPU_ARRAYS}")
        if dev_type != 2:                            # kDLCUDA
            raise TypeError(f"{name} must be a GPU array, got a {kind} on DLPack device type {dev_type} (not "
                            f"CUDA). Accepted: {GPU_ARRAYS}")
        return cp.from_dlpack(x)
    try:
        has_cai = hasattr(x, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001 - a property that raises (e.g. an unsupported dtype)
        has_cai = False
    if has_cai:
        return cp.asarray(x)
    if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        raise TypeError(f"{name} is a {kind}, a host array; rawcoop computes on the GPU: copy it there first "
                        f"(e.g. cupy.asarray({name})). Accepted: {GPU_ARRAYS}")
    raise TypeError(f"{name} must be a GPU array, got {kind}. Accepted: {GPU_ARRAYS}")


def gemm_operands(cp, a, b, c=None, bias=None, out=None, scale_a=None, scale_b=None) -> tuple:
    """The array arguments of ``rawcoop.gemm`` (and of ``rawcoop.tune``,
    which takes the same) as CuPy arrays, through :func:`as_cupy`: ``a`` and
    ``b`` required, ``c``, ``bias`` and ``out`` optional, ``scale_a`` and
    ``scale_b`` converted when they are arrays (a Python number stays as it
    is).  Raises TypeError naming the argument, before anything touches the
    GPU's memory; the shape, dtype and device rules follow in planning."""
    a = as_cupy(cp, "a", a, required=True)
    b = as_cupy(cp, "b", b, required=True)
    c, bias, out = as_cupy(cp, "c", c), as_cupy(cp, "bias", bias), as_cupy(cp, "out", out)
    if foreign_scale(scale_a, cp.ndarray):
        scale_a = as_cupy(cp, "scale_a", scale_a)
    if foreign_scale(scale_b, cp.ndarray):
        scale_b = as_cupy(cp, "scale_b", scale_b)
    return a, b, c, bias, out, scale_a, scale_b


def torch_fp8_format(x) -> str | None:
    """'e4m3'/'e5m2' for a torch float8_e4m3fn/float8_e5m2 tensor, else None;
    TypeError for torch's other 8-bit float formats (fnuz: other encodings)."""
    import sys
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        return None
    name = str(x.dtype).removeprefix("torch.")
    if name in FP8_DTYPES:
        return FP8_DTYPES[name]
    if name.startswith("float8"):
        raise TypeError(f"torch.{name} is not supported: rawcoop's fp8 formats are float8_e4m3fn (e4m3) and "
                        "float8_e5m2 (e5m2)")
    return None


def torch_view(cp, name: str, t):
    """A CuPy array over the memory of torch tensor ``t`` (argument ``name``),
    for planning a call on torch tensors: built from ``data_ptr()``, the
    shape, strides and dtype directly (no DLPack export, so tensors that
    require grad are fine; float8 dtypes map to the ml_dtypes ones), with
    ``t`` kept alive by the view.  Nothing is ordered between streams: the
    caller launches on torch's current stream.  TypeError naming the
    argument for a tensor off the GPU or of a dtype NumPy cannot name."""
    if not t.is_cuda:
        where = "host (CPU) memory" if t.device.type == "cpu" else f"memory of device '{t.device}'"
        raise TypeError(f"{name} is a torch.Tensor in {where}; rawcoop computes on a CUDA GPU: move it there first "
                        f"({name}.cuda())")
    dname = torch_dtype_name(t.dtype)
    if dname.startswith("float8") and dname not in FP8_DTYPES:
        torch_fp8_format(t)                                     # raises: the fnuz encodings
    try:
        dt = np_dtype(dname)
    except TypeError:
        raise TypeError(f"{name} has dtype torch.{dname}; rawcoop.gemm takes float16, bfloat16, float32 with "
                        "precision='tf32', float8_e4m3fn or float8_e5m2") from None
    shape, elem_strides = tuple(t.shape), t.stride()
    isz = dt.itemsize
    extent = 0 if t.numel() == 0 else (sum((d - 1) * s for d, s in zip(shape, elem_strides)) + 1) * isz
    mem = cp.cuda.UnownedMemory(t.data_ptr(), extent, t, t.get_device())
    return cp.ndarray(shape, dtype=dt, memptr=cp.cuda.MemoryPointer(mem, 0),
                      strides=tuple(s * isz for s in elem_strides))


def check_array(name: str, x, cp, dev: int | None):
    if not isinstance(x, cp.ndarray):
        raise TypeError(f"{name} must be a GPU array, got {type(x).__module__}.{type(x).__name__}. Accepted: "
                        f"{GPU_ARRAYS}")
    if dev is not None and x.device.id != dev:
        raise ValueError(f"{name} is on device {x.device.id}, but a is on device {dev}: every array of one call "
                         "must be on the same GPU")


def check_out(cp, out, dev: int, out_shape: tuple, out_dtype) -> None:
    """``out`` must be a CuPy array on a's device with the result's shape and
    dtype (validation and the repeated-call path share these checks)."""
    if not isinstance(out, cp.ndarray):
        raise TypeError(f"out must be a GPU array, got {type(out).__module__}.{type(out).__name__}. Accepted: "
                        f"{GPU_ARRAYS}")
    if out.data.device_id != dev:
        raise ValueError(f"out is on device {out.data.device_id}, but a is on device {dev}")
    if out.shape != out_shape:
        raise ValueError(f"out has shape {out.shape}, expected {out_shape}")
    if out.dtype != out_dtype:
        raise TypeError(f"out has dtype {out.dtype.name}, expected {np.dtype(out_dtype).name}")


def foreign_scale(s, nd) -> bool:
    """A scale that is neither None, a number nor a CuPy array (another
    library's GPU array, or something to reject)."""
    return s is not None and not isinstance(s, (nd, int, float, np.number, np.bool_))


def scale_key(s):
    """A scale's part of the plan key: the value of a Python number (folded
    into alpha), the address, shape, strides and dtype of an array (whose
    contents the kernel reads at launch time, so they may change without a
    new plan; block scales' strides are part of the TMA map)."""
    if s is None or isinstance(s, (int, float, np.number, np.bool_)):
        return (type(s), s)             # typed: True (rejected) must not share 1.0's plan
    return (s.data.ptr, s.data.device_id, s.shape, s.strides, s.dtype)


def tma_storable(ptr: int, shape: tuple, strides: tuple, osz: int, batch: int) -> bool:
    """Can the kernel TMA-store straight into the output at address ``ptr``
    with ``shape`` and ``strides`` (bytes): row-major lines, 16-byte pitches
    and base?"""
    if ptr % 16 or strides[-1] != osz:
        return False
    if shape[-1] * osz % 16:
        # TMA stores whole 16-byte chunks of a line: a row whose byte length is
        # not a multiple of 16 would get the chunk past its last column written
        # (found by the fuzzer: a view of a wider array, or a (1, N) array's
        # end).  Such outputs go through the padded buffer and a copy.
        return False
    if shape[-2] > 1 and (strides[-2] <= 0 or strides[-2] % 16):
        return False
    if len(shape) == 3 and batch > 1 and (strides[0] <= 0 or strides[0] % 16):
        return False
    return True
