"""bench/gemm.py's command line: problem shapes, the default problem sets,
``--variants``, and the argument parser.

Nothing here imports CuPy or touches the GPU.
"""
from __future__ import annotations

import argparse
from typing import NamedTuple

from bench.timing import TIMINGS

SUITES = ("main", "layouts", "batched", "epilogue", "small_m", "pdl", "fp8", "tf32")
LAYOUTS = ("TN", "NN", "NT", "TT")
"""BLAS-style names as in rawcoop.plan.kernel_config.LAYOUTS: first letter A
(T: row-major (M, K), N: column-major), second letter B (N: column-major
(K, N), i.e. ``bt.T``; T: row-major)."""
DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16", "half": "fp16"}
"""Accepted spellings -> the short name used in rows and tables."""
ROW_DTYPES = dict(DTYPES, e4m3="e4m3", tf32="tf32")
"""Spellings understood in result rows (the main suite's --dtype takes only DTYPES)."""

DEFAULT_SHAPES = ("4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "4096x14336x4096",
                  "8192x8192x28672", "256x16384x4096", "128x8192x8192", "1024x1024x65536")
"""The main suite's shapes (TN): square, LLM projections (Llama-3 8B/70B N and K), long K, small M."""
FP8_SHAPES = ("4096x4096x4096", "8192x8192x8192", "8192x28672x8192", "128x8192x8192", "4096x7168x16384")
"""The fp8 suite's shapes (TN, e4m3 x e4m3, bf16 out)."""
FP8_BLOCK_SHAPES = ("4096x7168x16384", "4096x4096x7168", "128x7168x16384")
"""--fp8-block: block-scaled e4m3 shapes (DeepGEMM's published set; TN, bf16 out)."""
TF32_SHAPES = ("4096x4096x4096", "8192x8192x8192", "4096x14336x4096")
"""The tf32 suite's shapes (TN, float32 in and out)."""

DESCRIPTION = """\
rawcoop.gemm against cuBLAS (cupy.matmul; cuBLASLt through torch for fp8),
side by side in one process, on one Hopper GPU.

Method: normal-distributed inputs for both sides (power, and so the clock,
depends on the data); inputs rotated across several sets when one set would
fit in L2 (3x L2 in total, at most 8 sets); warm-up (3 calls per side on
every set, so no plan is built inside a timed call); in each of R rounds
rawcoop and the baseline alternate, each timed with CUDA events (--timing
calls: median of per-call event pairs; batch: one pair around the round's
calls, for short kernels whose per-call timing would measure the host).
The reported ratio is the median over rounds of baseline time / rawcoop time
(> 1: rawcoop faster), because clocks and power drift by up to ~10% within a
run.  The table also gives the min-max of the per-round ratios and each
side's fraction of the dense peak of an H100/H200 SXM for the input type:
989 TFLOP/s fp16/bf16, 1979 FP8, 494.5 TF32.

Suites:
  main      --shapes x --dtype x --layout (x --variants), vs cupy.matmul (cuBLAS);
            with --beta != 0 rawcoop fuses beta*C, the baseline is cuBLAS + one
            CuPy element-wise kernel ("cuBLAS+ew"); batched shapes (MxNxKxL,
            L > 1) are compared with cublasGemmStridedBatchedEx ("cuBLAS batched";
            where CuPy lacks it, L 2-D cupy.matmul calls: "cuBLASxL")
  layouts   8192^3 bf16 in TN/NN/NT/TT (cuBLAS gets the same strided views)
  batched   L=16 x 2048^3 fp16, vs cupy.matmul 3-D, 16 2-D calls, torch.bmm
  epilogue  alpha/beta with C, and bias+gelu, vs cuBLAS + one CuPy element-wise kernel
  small_m   M in {1, 16, 64}, N = K = 8192: forced swap-AB and forced no-swap
  pdl       a chain of 8 dependent GEMMs with and without programmatic dependent launch
  fp8       e4m3 x e4m3 per-tensor scaled GEMM, bf16 out (--fp8-shapes), vs cuBLASLt
            through torch._scaled_mm on the same bytes and scales, with
            use_fast_accum=False ("cuBLASLt _scaled_mm") and =True ("... fast-accum");
            rel err = rawcoop vs that baseline's output (each row also gives both
            sides' error vs an fp32 GEMM of the dequantised inputs).  Without a
            working torch: rawcoop alone, said so.  --fp8-block adds block-scaled
            rows (scale_mode="block": fp32 scales per 1x128 of A and per 128x128 of
            B, as in DeepSeek-V3) on --fp8-block-shapes, rawcoop alone
  tf32      float32 in/out with precision="tf32" (--tf32-shapes), vs cupy.matmul
            with CuPy's float32 compute type TF32 ("cuBLAS tf32") and torch.matmul
            with TF32 allowed ("torch tf32"); each row also gives both sides' error
            vs float64, which shows TF32 really ran

A row whose rawcoop output differs from its baseline's by more than 1e-2
(relative Frobenius norm) is reported as a mismatch and fails the run.

example:
  PYTHONPATH=$PWD python bench/gemm.py --suite main,fp8,tf32 --json gemm_h200.json --plot gemm_h200.png
"""


# ---------------------------------------------------------------- shapes
class Shape(NamedTuple):
    m: int
    n: int
    k: int
    batch: int = 1

    def __str__(self) -> str:
        s = f"{self.m}x{self.n}x{self.k}"
        return s if self.batch == 1 else f"{s}x{self.batch}"

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k


def parse_shape(text: str) -> Shape:
    """``MxNxK`` or ``MxNxKxL`` (L: batch) with positive integers."""
    parts = str(text).strip().lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        dims = []
    if len(dims) not in (3, 4) or any(d <= 0 for d in dims):
        raise ValueError(f"bad shape {text!r}: expected MxNxK or MxNxKxL with positive integers "
                         "(e.g. 4096x4096x4096, or 2048x2048x2048x16 for a batch of 16)")
    return Shape(*dims)


def split_list(text: str) -> list[str]:
    """The non-empty items of a comma list."""
    return [t.strip() for t in str(text).split(",") if t.strip()]


def parse_shapes(text: str) -> list[Shape]:
    items = split_list(text)
    if not items:
        raise ValueError("no shapes given (expected a comma list of MxNxK[xL])")
    return [parse_shape(s) for s in items]


def parse_gemm_shapes(text: str, k_multiple: int, what: str) -> list[Shape]:
    """A comma list of 2-D ``MxNxK`` shapes whose K is a multiple of
    ``k_multiple`` (rows of 16 bytes: 8 for 16-bit, 16 for fp8, 4 for tf32)."""
    shapes = parse_shapes(text)
    for s in shapes:
        if s.batch != 1:
            raise ValueError(f"bad shape {str(s)!r}: the {what} suite takes MxNxK (no batch)")
        if s.k % k_multiple:
            raise ValueError(f"bad shape {str(s)!r}: {what} needs K a multiple of {k_multiple} "
                             "(rows of 16 bytes)")
    return shapes


def parse_fp8_shapes(text: str) -> list[Shape]:
    return parse_gemm_shapes(text, 16, "fp8")


def parse_tf32_shapes(text: str) -> list[Shape]:
    return parse_gemm_shapes(text, 4, "tf32")


# ---------------------------------------------------------------- other lists
def _parse_choices(text: str, canonical, what: str, choices: str) -> list[str]:
    """The distinct items of a comma list, each mapped by ``canonical`` (None: unknown)."""
    out = []
    for x in split_list(text):
        name = canonical(x)
        if name is None:
            raise ValueError(f"unknown {what} {x!r}: use {choices}")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"no {what} given ({choices})")
    return out


def parse_dtypes(text: str) -> list[str]:
    return _parse_choices(text, lambda d: DTYPES.get(d.lower()), "dtype", "float16 (fp16) or bfloat16 (bf16)")


def parse_layouts(text: str) -> list[str]:
    return _parse_choices(text, lambda x: x.upper() if x.upper() in LAYOUTS else None, "layout",
                          "TN, NN, NT or TT")


def parse_suites(text: str) -> list[str]:
    if [s.lower() for s in split_list(text)] == ["all"]:
        return list(SUITES)
    return _parse_choices(text, lambda s: s if s in SUITES else None, "suite", ", ".join(SUITES) + " (or all)")


_VARIANT_KEYS = ("block_n", "group", "splits", "cluster")


def _cluster_value(text: str):
    """A variant's cluster: ``2`` (= 2x1, as ``_cluster=2``), ``2x1`` or ``1x2``."""
    text = text.strip().lower()
    if "x" in text:
        cm, cn = text.split("x", 1)
        return int(cm), int(cn)
    return int(text)


def parse_variants(text: str) -> list[tuple[str, dict]]:
    """``auto`` or ``BLOCK_N:GROUP[:SPLITS[:CLUSTER]]`` (SPLITS 0 = automatic;
    CLUSTER 1, 2 = 2x1, or ``2x1``/``1x2``), or colon-separated ``key=value``
    pairs naming any of rawcoop.gemm's private ``_key`` arguments (e.g.
    ``block_n=128:pingpong=1``, ``cluster=1x2``)."""
    out = []
    for v in split_list(text):
        if v == "auto":
            out.append(("auto", {}))
            continue
        kw = {}
        try:
            for i, part in enumerate(v.split(":")):
                if "=" in part:
                    key, val = part.split("=", 1)
                else:
                    if i >= len(_VARIANT_KEYS):
                        raise ValueError
                    key, val = _VARIANT_KEYS[i], part
                key = key.strip().lstrip("_")
                kw["_" + key] = _cluster_value(val) if key == "cluster" else int(val)
        except ValueError:
            raise ValueError(f"bad variant {v!r}: expected auto, BLOCK_N:GROUP[:SPLITS[:CLUSTER]] "
                             "or key=value pairs such as block_n=128:group=8") from None
        if kw.get("_splits") == 0:
            del kw["_splits"]
        out.append((v, kw))
    if not out:
        raise ValueError("no variant given (auto, or BLOCK_N:GROUP[:SPLITS[:CLUSTER]])")
    return out


def variant_label(label: str, variant: str) -> str:
    """A row's case label with its --variants entry (none for "auto")."""
    return label if variant == "auto" else f"{label} {variant}"


# ---------------------------------------------------------------- the parser
def _argtype(fn, what):
    def conv(text):
        try:
            return fn(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    conv.__name__ = what
    return conv


def _positive_int(text):
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return v


def _shape_option(ap, flag, dest, defaults, parse, what, help_text):
    ap.add_argument(flag, dest=dest, default=[parse_shape(s) for s in defaults], metavar="LIST",
                    type=_argtype(parse, what), help=f"{help_text} (default {','.join(defaults)})")


def add_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The benchmark's options."""
    ap.add_argument("--suite", default=["main"], metavar="LIST", type=_argtype(parse_suites, "suites"),
                    help=f"comma list of {', '.join(SUITES)}, or all (default main)")
    ap.add_argument("--dtype", "--dtypes", dest="dtypes", default=["bf16", "fp16"], metavar="LIST",
                    type=_argtype(parse_dtypes, "dtypes"),
                    help="main suite: comma list of bfloat16 (bf16), float16 (fp16) (default both)")
    _shape_option(ap, "--shapes", "shapes", DEFAULT_SHAPES, parse_shapes, "shapes",
                  "main suite: comma list of MxNxK or MxNxKxL (batch L)")
    ap.add_argument("--layout", "--layouts", dest="layouts", default=["TN"], metavar="LIST",
                    type=_argtype(parse_layouts, "layouts"),
                    help="main suite: comma list of TN, NN, NT, TT (default TN: A row-major, B = bt.T)")
    ap.add_argument("--beta", type=float, default=0.0,
                    help="main suite: nonzero -> D = A@B + beta*C with a normal C; the baseline is then "
                         "cuBLAS + one CuPy element-wise kernel (default 0)")
    ap.add_argument("--out-dtype", dest="out_dtype", choices=("float32",), default=None,
                    help="main suite: rawcoop writes float32 D (fp16/bf16 in, fp32 out); the baseline keeps "
                         "cupy.matmul's output in the input type, so compare variants within a row set "
                         "(default: the input type)")
    ap.add_argument("--variants", default=[("auto", {})], metavar="LIST", type=_argtype(parse_variants, "variants"),
                    help="main, fp8, --fp8-block and tf32 rows: comma list of auto or "
                         "BLOCK_N:GROUP[:SPLITS[:CLUSTER]] (SPLITS 0 = auto) or key=value pairs of gemm's "
                         "private _key options (default auto); with several, all of a problem's variants and "
                         "its baseline are timed in the same rounds and each later variant's row also gives "
                         "its time against the first's (vs_first)")
    _shape_option(ap, "--fp8-shapes", "fp8_shapes", FP8_SHAPES, parse_fp8_shapes, "fp8 shapes",
                  "fp8 suite: comma list of MxNxK, K a multiple of 16")
    ap.add_argument("--fp8-block", dest="fp8_block", action="store_true",
                    help="fp8 suite: also time block-scaled fp8 (scale_mode='block') on --fp8-block-shapes, "
                         "rawcoop alone")
    _shape_option(ap, "--fp8-block-shapes", "fp8_block_shapes", FP8_BLOCK_SHAPES, parse_fp8_shapes, "fp8 shapes",
                  "--fp8-block: comma list of MxNxK, K a multiple of 16")
    _shape_option(ap, "--tf32-shapes", "tf32_shapes", TF32_SHAPES, parse_tf32_shapes, "tf32 shapes",
                  "tf32 suite: comma list of MxNxK, K a multiple of 4")
    ap.add_argument("--rounds", type=_positive_int, default=5, metavar="R",
                    help="rounds of alternating timing (default 5)")
    ap.add_argument("--iters", type=_positive_int, default=20, metavar="N",
                    help="timed calls per side and round (default 20)")
    ap.add_argument("--timing", choices=TIMINGS, default="calls",
                    help="calls: median of per-call CUDA event pairs (default); batch: one event pair around "
                         "the round's calls, per call (back to back: kernel time for short kernels whose "
                         "per-call timing is host-bound)")
    ap.add_argument("--json", metavar="PATH", help="write every row, every round and the environment here")
    ap.add_argument("--plot", metavar="PNG", help="draw rawcoop vs cuBLAS TFLOP/s per shape into this PNG "
                                                  "(needs matplotlib)")
    return ap


def build_parser(prog: str = "bench/gemm.py") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_arguments(ap)


def settings_of(args) -> dict:
    """The options of a run, as its results file records them."""
    def shapes(name):
        return [str(s) for s in getattr(args, name, None) or []]
    return {"suites": list(args.suite), "dtypes": list(args.dtypes), "shapes": shapes("shapes"),
            "layouts": list(args.layouts), "beta": args.beta, "variants": [v for v, _ in args.variants],
            "fp8_shapes": shapes("fp8_shapes"),
            "fp8_block_shapes": shapes("fp8_block_shapes") if getattr(args, "fp8_block", False) else [],
            "tf32_shapes": shapes("tf32_shapes"),
            "rounds": args.rounds, "iters": args.iters, "timing": getattr(args, "timing", "calls"),
            "out_dtype": getattr(args, "out_dtype", None)}
