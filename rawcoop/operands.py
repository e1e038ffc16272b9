"""The operands of ``rawcoop.gemm`` as the kernel needs them: input kinds
(fp16/bf16, tf32, fp8 formats and per-tensor scales), each matrix's
orientation and pitch (the TMA rules: a unit-stride axis, 16-byte pitches and
batch strides), zero-copy views of other libraries' GPU arrays, and the checks
on ``out``.  Everything here raises TypeError/ValueError naming the argument
before anything is allocated or launched; nothing here touches the GPU."""
from __future__ import annotations

import numpy as np

from . import gemm_configs

INPUTS_16BIT = ("float16", "bfloat16")
FP8_DTYPES = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}     # ml_dtypes names -> format
FP8_FORMATS = ("e4m3", "e5m2")
FP8_NUMPY_NAMES = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}
DEFAULT_OUT = {gemm_configs.FP16: "float16", gemm_configs.BF16: "bfloat16", gemm_configs.TF32: "float32",
                gemm_configs.E4M3: "bfloat16", gemm_configs.E5M2: "bfloat16"}


def input_kinds(a_dtype: str, b_dtype: str, a_format, b_format, precision) -> tuple[int, int]:
    """(A kind, B kind) (see gemm_configs.IN_KINDS) from the operands' dtype
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
            kinds.append(gemm_configs.IN_KINDS[FP8_DTYPES[dt]])
        elif dt == "uint8":
            if fmt is None:
                raise TypeError(f"{name} is uint8: pass {name}_format='e4m3' or 'e5m2' to read its bytes as fp8 "
                                "(rawcoop has no integer GEMM)")
            kinds.append(gemm_configs.IN_KINDS[fmt])
        elif fmt is not None:
            raise ValueError(f"{name}_format applies to fp8 operands (uint8 storage, or ml_dtypes float8_e4m3fn/"
                             f"float8_e5m2 arrays); {name} has dtype {dt}")
        elif dt in INPUTS_16BIT:
            kinds.append(gemm_configs.IN_KINDS[dt])
        elif dt == "float32":
            if precision != "tf32":
                raise TypeError(f"{name} has dtype float32, and rawcoop has no full-fp32 GEMM: pass "
                                "precision='tf32' to multiply float32 inputs on the tensor cores in TF32 (each "
                                "input keeps a 10-bit mantissa; fp32 accumulation), or convert the inputs to "
                                "bfloat16/float16")
            kinds.append(gemm_configs.TF32)
        else:
            raise TypeError(f"{name} has dtype {dt}; rawcoop.gemm takes float16 or bfloat16 (ml_dtypes.bfloat16), "
                            "float32 with precision='tf32', or fp8 (ml_dtypes float8_e4m3fn/float8_e5m2, or uint8 "
                            "with a_format/b_format)")
    ka, kb = kinds
    if precision == "tf32" and (ka, kb) != (gemm_configs.TF32, gemm_configs.TF32):
        raise TypeError(f"precision='tf32' needs float32 a and b; got {a_dtype} and {b_dtype}")
    if ka != kb and not (gemm_configs.is_fp8(ka) and gemm_configs.is_fp8(kb)):
        raise TypeError(f"a and b must have the same dtype (only fp8 e4m3 and e5m2 may be mixed), got {a_dtype} "
                        f"and {b_dtype}")
    return ka, kb


def kind_label(ka: int, kb: int) -> str:
    """The input part of a tuning signature: the dtype name for 16-bit inputs
    (as before), 'tf32', 'e4m3', 'e5m2', or 'e4m3*e5m2' for mixed fp8."""
    na, nb = gemm_configs.KIND_NAMES[ka], gemm_configs.KIND_NAMES[kb]
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
            raise ValueError(f"{name} must hold exactly one value (0-d or 1-element), got shape {s.shape}")
        if s.data.device_id != dev:
            raise ValueError(f"{name} is on device {s.data.device_id}, but a is on device {dev}")
        return 1.0, s.data.ptr
    if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a Python float or a 1-element float32 GPU array on a's device, got "
                        f"{type(s).__module__}.{type(s).__name__}")
    return float(s), 0


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def dtype_name(dt) -> str:
    if isinstance(dt, str) and dt in ("bfloat16", "bf16"):
        return "bfloat16"
    try:
        return np.dtype(dt).name
    except TypeError:
        raise TypeError(f"out_dtype {dt!r} is not a dtype") from None


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


def as_cupy(cp, name: str, x):
    """A zero-copy CuPy view of a GPU array from another library: DLPack
    (``__dlpack__``; the producer is asked to order its work before CuPy's
    current stream) or ``__cuda_array_interface__`` v3 (CuPy makes the current
    stream wait on the producer's stream when the interface names one).  Host
    arrays and other objects raise TypeError.  torch float8_e4m3fn/float8_e5m2
    tensors (which neither protocol may carry) go through a uint8 view and come
    back as CuPy arrays of the ml_dtypes fp8 dtype, so the format travels with them."""
    if x is None or isinstance(x, cp.ndarray):
        return x
    fp8 = torch_fp8_format(x)
    if fp8 is not None:
        import ml_dtypes
        import torch
        return as_cupy(cp, name, x.view(torch.uint8)).view(getattr(ml_dtypes, FP8_NUMPY_NAMES[fp8]))
    kind = f"{type(x).__module__}.{type(x).__name__}"
    dl_device = getattr(x, "__dlpack_device__", None)
    if dl_device is not None and hasattr(x, "__dlpack__"):
        dev_type = int(dl_device()[0])
        if dev_type != 2:                            # kDLCUDA
            raise TypeError(f"{name} must be a cupy.ndarray or another GPU array; got {kind} on DLPack device "
                            f"type {dev_type} (not CUDA)")
        return cp.from_dlpack(x)
    try:
        has_cai = hasattr(x, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001 - a property that raises (e.g. an unsupported dtype)
        has_cai = False
    if has_cai:
        return cp.asarray(x)
    raise TypeError(f"{name} must be a cupy.ndarray or a GPU array exposing __cuda_array_interface__ or "
                    f"__dlpack__, got {kind}")


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


def check_array(name: str, x, cp, dev: int | None):
    if not isinstance(x, cp.ndarray):
        raise TypeError(f"{name} must be a cupy.ndarray, got {type(x).__module__}.{type(x).__name__}")
    if dev is not None and x.device.id != dev:
        raise ValueError(f"{name} is on device {x.device.id}, but a is on device {dev}")


def check_out(cp, out, dev: int, out_shape: tuple, out_dtype) -> None:
    """``out`` must be a CuPy array on a's device with the result's shape and
    dtype (validation and the repeated-call path share these checks)."""
    if not isinstance(out, cp.ndarray):
        raise TypeError(f"out must be a cupy.ndarray, got {type(out).__module__}.{type(out).__name__}")
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
    into alpha), the address of an array (whose contents the kernel reads at
    launch time, so they may change without a new plan)."""
    if s is None or isinstance(s, (int, float, np.number, np.bool_)):
        return (type(s), s)             # typed: True (rejected) must not share 1.0's plan
    return (s.data.ptr, s.data.device_id, s.shape, s.dtype)


def tma_storable(d, osz: int, batch: int) -> bool:
    """Can the kernel TMA-store straight into ``d`` (row-major lines, 16-byte
    pitches and base)?"""
    if d.data.ptr % 16 or d.strides[-1] != osz:
        return False
    if d.shape[-1] * osz % 16:
        # TMA stores whole 16-byte chunks of a line: a row whose byte length is
        # not a multiple of 16 would get the chunk past its last column written
        # (found by the fuzzer: a view of a wider array, or a (1, N) array's
        # end).  Such outputs go through the padded buffer and a copy.
        return False
    if d.shape[-2] > 1 and (d.strides[-2] <= 0 or d.strides[-2] % 16):
        return False
    if d.ndim == 3 and batch > 1 and (d.strides[0] <= 0 or d.strides[0] % 16):
        return False
    return True
