"""NVIDIA compute-sanitizer over every rawcoop kernel variant, on small problems.

    PYTHONPATH=$PWD python bench/sanitize.py                    # memcheck, racecheck, synccheck, initcheck
    PYTHONPATH=$PWD python bench/sanitize.py --quick --tools memcheck,synccheck --json san.json
    PYTHONPATH=$PWD python bench/sanitize.py --driver [--quick]  # the problems once, no sanitizer
    python bench/sanitize.py --list

Two modes.  The driver (``--driver``) runs each problem once and checks it:
GEMMs against a float64 reference computed on the host (so the only GPU work
is rawcoop's kernels, CuPy's copies and, for a row-padded result, one CuPy copy
kernel), ``replicate`` bit for bit; it prints one line per problem and exits 1
if any result is wrong or any call raises.  The main mode first runs the
driver once without a sanitizer (NVRTC compiles go into the kernel cache then,
so no compiler runs under the sanitizer, and a wrong answer is caught before
any tool), then for each tool runs

    compute-sanitizer --tool T --error-exitcode 99 --launch-timeout 0 --report-api-errors no \
        python bench/sanitize.py --driver

under a wall-clock limit, reads "ERROR SUMMARY: N errors" (racecheck also
"RACECHECK SUMMARY"), prints a table tool -> status, errors, seconds, writes
the table and the first error lines as JSON (``--json``), and exits 1 when a
tool reports errors, times out, fails to run or the driver finds a wrong
result.  Kernels are compiled with ``-lineinfo`` (RAWCOOP_LINEINFO=1, in both
runs) so reports carry source lines; ``--no-lineinfo`` turns that off.

The problems cover: float16 and bfloat16; the four layouts (A, B row- or
column-major); 64-, 128- and 256-wide tiles; C row- and column-major with
beta != 0; bias (float32 and the input type) with relu, gelu and silu; float32
output; swap-AB (M <= 64) and small M without it; split-K (``_splits``); CTA
pairs (``_cluster=2``); batched, 2-D-broadcast and stride-0-broadcast batches;
ragged M, N, K; a returned result whose rows need padding; an ``out`` that is
stored through a temporary; ping-pong consumers when this rawcoop has them;
192-row tiles (``_block_m=192``, with C, and split-K; fp8 too);
and the TMA multicast kernel (``rawcoop.replicate``) for 1, 2, 4 copies.
Sizes stay <= 512 (K up to 1024 for split-K): the sanitizer slows kernels
10-100x.

initcheck skips the two problems whose result rawcoop writes into a buffer of
its own (a row-padded returned result, an ``out`` stored through a
temporary): initcheck does not count TMA stores as initialising memory, so
every read of such a buffer is reported (112,721 reports on the H200, all
from CuPy's copy out of those two buffers; cuBLAS's own output, written into
a ``cupy.empty`` array by ``cupy.matmul``, is reported the same way).  Every
other problem poisons its ``out`` first, so initcheck still checks that no
kernel reads memory nobody wrote (inputs, C, bias, scales, the split-K
workspace and flags); ``replicate`` also gets a poisoned ``out``.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rawcoop._reference import activation as activation64  # noqa: E402

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
TEMPORARY_OUTPUTS = ("none", "col")     # Gemm.out values whose result rawcoop stores into a buffer of its own
INITCHECK_TMA_NOTE = ("the result goes through a buffer rawcoop allocates and only TMA stores write; initcheck "
                      "does not count TMA (cp.async.bulk.tensor) stores as initialising, so it reports every read "
                      "of it (shown on the H200 with cuBLAS too: cupy.matmul into a cupy.empty out, then reading "
                      "out, gives the same report)")
TOL = {"float16": 1e-3, "bfloat16": 7e-3, "float32": 5e-5}     # relative Frobenius error vs float64
LAYOUTS = {"TN": (True, True), "NN": (False, True), "NT": (False, False), "TT": (True, False)}


# ------------------------------------------------------------------ problems
@dataclass
class Gemm:
    """One rawcoop.gemm call.  layout: (A K-major?, B K-major?) by BLAS name
    (rawcoop.plan.kernel_config.LAYOUTS).  batch: (la, lb), 0 for a 2-D operand,
    lb "stride0" for a stride-0 broadcast view.  c: "row", "col" or "row3"
    (batched).  bias: "float32" or "input".  out: "poison" (a NaN-filled out=),
    "none" (the returned array) or "col" (a column-major out=, stored through
    a temporary)."""
    name: str
    dtype: str = "float16"
    layout: str = "TN"
    m: int = 200
    n: int = 264
    k: int = 200
    batch: tuple | None = None
    c: str | None = None
    alpha: float = 1.0
    bias: str | None = None
    act: str | None = None
    out_dtype: str | None = None
    out: str = "poison"
    kw: dict = field(default_factory=dict)
    quick: bool = False
    scales: str | None = None   # fp8: "tensor" (1-element device scales) or "block" (scale_mode="block")
    tol: float | None = None    # None: TOL of the output dtype

    def run(self, cp, np, rawcoop) -> str:
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        dt, odt = _np_dtype(self.dtype), _np_dtype(self.out_dtype or self.dtype)
        a_kmajor, b_kmajor = LAYOUTS[self.layout]
        la, lb = self.batch or (0, 0)
        L = max(1 if x == "stride0" else x for x in (la, lb)) if self.batch else 0
        ha, a = _operand(cp, np, rng, self.m, self.k, a_kmajor, dt, (la,) if la else ())
        if lb == "stride0":
            hb, b = _operand(cp, np, rng, self.k, self.n, not b_kmajor, dt, ())
            hb, b = np.broadcast_to(hb, (L, self.k, self.n)), cp.broadcast_to(b, (L, self.k, self.n))
        else:
            hb, b = _operand(cp, np, rng, self.k, self.n, not b_kmajor, dt, (lb,) if lb else ())
        out_shape = ((L,) if L else ()) + (self.m, self.n)
        kw = dict(self.kw)
        if self.scales == "tensor":             # per-tensor fp8 scales, read by the kernel
            kw["scale_a"], kw["scale_b"] = cp.asarray([0.75], cp.float32), cp.asarray([1.5], cp.float32)
            ha, hb = ha * 0.75, hb * 1.5
        elif self.scales == "block":            # per (row, 128-K) A scales, per 128x128 B scales
            kb = -(-self.k // 128)
            sa = np.exp2(rng.integers(-4, 5, size=(self.m, kb))).astype(np.float32)
            sb = np.exp2(rng.integers(-4, 5, size=(-(-self.n // 128), kb))).astype(np.float32)
            kw["scale_a"] = rawcoop.mn_major_scales(cp.asarray(sa))
            kw["scale_b"], kw["scale_mode"] = cp.asarray(sb), "block"
            ks = np.arange(self.k) // 128
            ha = ha * sa[:, ks]
            hb = hb * sb[np.arange(self.n) // 128][:, ks].T
        ref = self.alpha * np.matmul(ha, hb)
        if self.c:
            lead = (L,) if self.c == "row3" else ()
            hc, kw["c"] = _operand(cp, np, rng, self.m, self.n, self.c != "col", odt, lead)
            kw["beta"] = 0.5
            ref = ref + 0.5 * hc
        if self.bias:
            hbias = rng.standard_normal(self.n).astype(np.float32).astype(np.float32 if self.bias == "float32"
                                                                           else dt)
            kw["bias"] = cp.asarray(hbias)
            ref = ref + hbias.astype(np.float64)
        ref = _act(np, ref, self.act)
        out = None
        if self.out == "poison":
            out = cp.asarray(np.full(out_shape, np.nan, dtype=np.float32).astype(odt))
        elif self.out == "col":
            out = cp.asarray(np.full(out_shape[::-1], np.nan, dtype=np.float32).astype(odt)).T
        d = rawcoop.gemm(a, b, alpha=self.alpha, activation=self.act, out=out,
                         out_dtype=odt if self.out_dtype else None, **kw)
        cp.cuda.Device().synchronize()
        if out is not None and d is not out:
            raise AssertionError("gemm did not return its out")
        if d.shape != out_shape or d.dtype != odt:
            raise AssertionError(f"result {d.shape} {d.dtype}, expected {out_shape} {odt}")
        got = cp.asnumpy(d).astype(np.float64)
        if not np.isfinite(got).all():
            raise AssertionError(f"{int((~np.isfinite(got)).sum())} non-finite elements (unwritten or wrong)")
        err = float(np.linalg.norm((got - ref).ravel()) / np.linalg.norm(ref.ravel()))
        tol = self.tol or TOL[np.dtype(odt).name]
        if not err < tol:
            raise AssertionError(f"relative error {err:.2e} >= {tol:.0e}")
        return f"rel err {err:.1e}"


@dataclass
class Replicate:
    """rawcoop.replicate(src, copies), compared bit for bit."""
    name: str
    dtype: str
    copies: int
    m: int
    n: int
    quick: bool = False

    def run(self, cp, np, rawcoop) -> str:
        rng = np.random.default_rng(zlib.crc32(self.name.encode()))
        dt = np.dtype(self.dtype)
        host = rng.integers(0, 256, size=self.m * self.n * dt.itemsize, dtype=np.uint8).view(dt)
        host = host.reshape(self.m, self.n)
        poison = cp.full((self.copies, self.m, self.n * dt.itemsize), 0xA5, dtype=cp.uint8).view(dt)
        out = rawcoop.replicate(cp.asarray(host), self.copies, out=poison)   # poisoned first: unwritten bytes show
        cp.cuda.Device().synchronize()
        got = cp.asnumpy(out).view(np.uint8)
        want = host.view(np.uint8)
        bad = [r for r in range(self.copies) if not np.array_equal(got[r], want)]
        if bad:
            raise AssertionError(f"copies {bad} differ from the source")
        return "bit-exact"


def _np_dtype(name):
    from rawcoop.operands import np_dtype
    return np_dtype(name)


def _operand(cp, np, rng, rows, cols, cols_contiguous, dt, lead):
    """(lead..., rows, cols) standard-normal data in ``dt``: row-major when
    ``cols_contiguous``, else a transposed view of a (cols, rows) array.
    Returns (float64 host copy, device array)."""
    shape = lead + ((rows, cols) if cols_contiguous else (cols, rows))
    host = rng.standard_normal(shape).astype(np.float32).astype(dt)
    dev = cp.asarray(host.view(np.uint8)).view(dt) if dt.itemsize == 1 else cp.asarray(host)   # fp8 via bytes
    if not cols_contiguous:
        host, dev = np.swapaxes(host, -1, -2), cp.swapaxes(dev, -1, -2)
    return host.astype(np.float64), dev


def _act(np, v, act):
    return activation64(np, v, act)


def problems(have_pingpong: bool = True) -> list:
    P: list = []
    short = {"float16": "fp16", "bfloat16": "bf16"}
    # both input types x four layouts, ragged M/N/K, 128- and 256-wide tiles
    for i, dt in enumerate(("float16", "bfloat16")):
        for j, lay in enumerate(LAYOUTS):
            bn = 128 if (i + j) % 2 else 256
            P.append(Gemm(f"{short[dt]} {lay} 200x264x200 tile {bn}", dt, lay, kw={"_block_n": bn},
                          quick=lay in ("TN", "NT")))
    # C row-/column-major with beta != 0 (and alpha)
    for dt in ("float16", "bfloat16"):
        for cl in ("row", "col"):
            P.append(Gemm(f"{short[dt]} C {cl}-major beta=0.5 alpha=0.5", dt, "NN" if cl == "col" else "TN",
                          c=cl, alpha=0.5, quick=dt == "float16"))
    # bias + activations
    for act in ("relu", "gelu", "silu"):
        P.append(Gemm(f"bf16 bias fp32 + {act}", "bfloat16", "NT", bias="float32", act=act, quick=act == "gelu"))
    P.append(Gemm("fp16 bias fp16 + C", "float16", "TT", c="row", bias="input"))
    # float32 output
    P.append(Gemm("bf16 -> fp32 out", "bfloat16", "TN", out_dtype="float32", quick=True))
    P.append(Gemm("fp16 -> fp32 out + C + bias + silu", "float16", "NN", out_dtype="float32", c="row",
                  bias="float32", act="silu"))
    # small M: swap-AB (64-wide tiles, D column-major) and without it
    P.append(Gemm("fp16 swap-AB M=40", "float16", "TN", m=40, quick=True))
    P.append(Gemm("bf16 swap-AB M=24 NN + C col + bias + relu", "bfloat16", "NN", m=24, c="col", bias="float32",
                  act="relu"))
    P.append(Gemm("fp16 M=40 no swap", "float16", "TT", m=40, kw={"_swap": False}))
    # split-K
    P.append(Gemm("fp16 split-K 2", "float16", "TN", m=256, n=256, k=1024, kw={"_splits": 2}, quick=True))
    P.append(Gemm("bf16 split-K 3 NT + C + bias + gelu", "bfloat16", "NT", k=1000, c="row", bias="float32",
                  act="gelu", kw={"_splits": 3}))
    P.append(Gemm("fp16 split-K 2 swap-AB", "float16", "TN", m=40, k=1024, kw={"_splits": 2}))
    P.append(Gemm("bf16 split-K 2 -> fp32", "bfloat16", "TT", k=1024, out_dtype="float32", kw={"_splits": 2}))
    # CTA pairs (B multicast)
    P.append(Gemm("bf16 cluster 2 tile 128", "bfloat16", "TN", m=512, n=256, k=256,
                  kw={"_cluster": 2, "_block_n": 128}, quick=True))
    # misaligned pitch (K = 8 mod 16): the automatic plan is 128x256 in 2x1 clusters (as planned)
    P.append(Gemm("bf16 misaligned pitch auto (128x256 2x1)", "bfloat16", "TN", m=392, n=520, k=1032, quick=True))
    P.append(Gemm("fp16 cluster 2 tile 256 TT", "float16", "TT", m=384, n=512, k=256,
                  kw={"_cluster": 2, "_block_n": 256}))
    P.append(Gemm("bf16 cluster 2 + split-K + bias", "bfloat16", "NN", m=256, n=256, k=1024, bias="float32",
                  act="relu", kw={"_cluster": 2, "_splits": 2}))
    # batches
    P.append(Gemm("fp16 batched 3", "float16", "TN", m=136, n=200, k=128, batch=(3, 3), quick=True))
    P.append(Gemm("bf16 batched 2 NT + batched C", "bfloat16", "NT", m=136, n=200, k=128, batch=(2, 2), c="row3"))
    P.append(Gemm("fp16 broadcast 2-D a", "float16", "NN", m=136, n=200, k=128, batch=(0, 3)))
    P.append(Gemm("bf16 broadcast stride-0 b", "bfloat16", "TT", m=136, n=200, k=128, batch=(3, "stride0")))
    P.append(Gemm("fp16 batched split-K", "float16", "TN", m=136, n=200, k=512, batch=(2, 2), kw={"_splits": 2}))
    # outputs that are not TMA-storable as they are
    P.append(Gemm("fp16 N=203 returned (padded rows)", "float16", "TN", m=136, n=203, k=96, out="none",
                  quick=True))
    P.append(Gemm("bf16 column-major out (temporary)", "bfloat16", "TN", m=136, n=200, k=96, out="col"))
    if have_pingpong:
        P.append(Gemm("fp16 ping-pong tile 128", "float16", "TN", m=512, n=384, k=256,
                      kw={"_pingpong": True, "_block_n": 128}))
        P.append(Gemm("bf16 ping-pong tile 64 swap-AB", "bfloat16", "TN", m=40, k=256, kw={"_pingpong": True}))
    # stream-K (35 tiles of 128x128, 16 k-blocks: every tile in pieces over 132 CTAs), cooperative and ping-pong
    P.append(Gemm("fp16 stream-K 128x128", "float16", "TN", m=520, n=776, k=1000,
                  kw={"_streamk": True, "_block_n": 128}, quick=True))
    if have_pingpong:
        P.append(Gemm("bf16 ping-pong stream-K + C", "bfloat16", "TN", m=520, n=776, k=1000, c="row",
                      kw={"_streamk": True, "_pingpong": True, "_block_n": 128}, quick=True))
    # CTA pairs along N (A multicast)
    P.append(Gemm("bf16 cluster 1x2 tile 128 NT", "bfloat16", "NT", m=256, n=640, k=256,
                  kw={"_cluster": (1, 2), "_block_n": 128}, quick=True))
    P.append(Gemm("fp16 cluster 1x2 ping-pong + C", "float16", "TN", m=512, n=384, k=256, c="row",
                  kw={"_cluster": (1, 2), "_block_n": 128, "_pingpong": True}))
    # 192-row tiles (three consumer warpgroups; the third C loader; three split-K slots per tile)
    P.append(Gemm("bf16 tall 192x192 + C + bias + gelu", "bfloat16", "TN", m=400, n=304, k=256, c="row",
                  bias="float32", act="gelu", kw={"_block_m": 192}, quick=True))
    P.append(Gemm("fp16 tall 192x128 split-K 3 NN", "float16", "NN", m=400, n=300, k=1024,
                  kw={"_block_m": 192, "_block_n": 128, "_splits": 3}, quick=True))
    P.append(Gemm("e4m3 tall 192x192 split-K 2 -> fp32", "float8_e4m3fn", "TN", m=400, n=304, k=1024,
                  out_dtype="float32", scales="tensor", tol=1e-2, kw={"_block_m": 192, "_splits": 2}, quick=True))
    # tiles between the multiples of 64 (32-byte-wide C/D boxes, a partial last chunk)
    P.append(Gemm("bf16 128x176 narrow boxes + C + bias + gelu", "bfloat16", "TN", m=300, n=400, k=256, c="row",
                  bias="float32", act="gelu", kw={"_block_n": 176}, quick=True))
    P.append(Gemm("fp16 128x240 narrow split-K 3 -> fp32 + C NN", "float16", "NN", m=264, n=500, k=1024, c="row",
                  out_dtype="float32", kw={"_block_n": 240, "_splits": 3}, quick=True))
    # ... in 2x1 pairs (the misaligned-pitch rule's narrow widths; each CTA multicasts half of B's rows)
    P.append(Gemm("fp16 128x208 narrow 2x1 pairs + C NN", "float16", "NN", m=520, n=400, k=1032, c="row",
                  kw={"_block_n": 208, "_cluster": 2}, quick=True))
    P.append(Gemm("bf16 128x176 narrow 2x1 pairs split-K 2 + bias", "bfloat16", "TN", m=392, n=352, k=1032,
                  bias="float32", act="relu", kw={"_block_n": 176, "_cluster": 2, "_splits": 2}, quick=True))
    # TF32 (float32 inputs, K-major A and B) and FP8 (K-major), per-tensor and block-scaled
    P.append(Gemm("tf32 TN -> fp32", "float32", "TN", kw={"precision": "tf32"}, tol=5e-3, quick=True))
    P.append(Gemm("tf32 TN -> bf16 + C + bias + gelu", "float32", "TN", out_dtype="bfloat16", c="row",
                  bias="float32", act="gelu", kw={"precision": "tf32", "_splits": 2}, k=512, tol=1e-2))
    P.append(Gemm("e4m3 TN -> bf16, device scales", "float8_e4m3fn", "TN", m=200, n=264, k=256,
                  out_dtype="bfloat16", scales="tensor", tol=1e-2, quick=True))
    P.append(Gemm("e5m2 TN -> bf16 + bias + relu, swap-AB", "float8_e5m2", "TN", m=40, n=264, k=384,
                  out_dtype="bfloat16", bias="float32", act="relu", scales="tensor", tol=1e-2))
    P.append(Gemm("e4m3 block-scaled -> bf16", "float8_e4m3fn", "TN", m=200, n=264, k=400,
                  out_dtype="bfloat16", scales="block", tol=1e-2, quick=True))
    P.append(Gemm("e4m3 block-scaled split-K 2 -> fp32 + C", "float8_e4m3fn", "TN", m=136, n=200, k=1024,
                  out_dtype="float32", c="row", scales="block", kw={"_splits": 2}, tol=1e-2))
    # the TMA multicast kernel
    for dt in ("float16", "float32", "uint8", "float64"):
        for copies in (1, 2, 4):
            quick = (dt, copies) in (("float16", 2), ("float32", 4), ("uint8", 1))
            m, n = (130, 208) if copies == 4 else (65, 80)
            P.append(Replicate(f"replicate {dt} x{copies} {m}x{n}", dt, copies, m, n, quick=quick))
    return P


def _have_pingpong() -> bool:
    import inspect

    import rawcoop
    return "_pingpong" in inspect.signature(rawcoop.gemm).parameters


def _select(args) -> list:
    ps = problems(_have_pingpong())
    if args.quick:
        ps = [p for p in ps if p.quick]
    if args.only:
        ps = [p for p in ps if args.only.lower() in p.name.lower()]
    return ps


def run_driver(args) -> int:
    import cupy as cp
    import numpy as np

    import rawcoop
    ps = _select(args)
    failed = skipped = 0
    tool = os.environ.get("RAWCOOP_SANITIZE_TOOL", "")
    t_all = time.perf_counter()
    for p in ps:
        t = time.perf_counter()
        if tool == "initcheck" and getattr(p, "out", "poison") in TEMPORARY_OUTPUTS:
            skipped += 1
            print(f"skip  {p.name:<46} initcheck: {INITCHECK_TMA_NOTE}", flush=True)
            continue
        try:
            msg = p.run(cp, np, rawcoop)
            print(f"ok    {p.name:<46} {msg} ({time.perf_counter() - t:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - every problem is reported, the run goes on
            failed += 1
            print(f"FAIL  {p.name:<46} {type(e).__name__}: {e}", flush=True)
    print(f"driver: {len(ps) - skipped} problems, {failed} failed, {time.perf_counter() - t_all:.1f} s"
          + (f" ({skipped} skipped under {tool})" if skipped else ""), flush=True)
    return 1 if failed else 0


# ------------------------------------------------------------------ sanitizer runs
def find_sanitizer(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for base in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if base:
            cand = Path(base) / "bin" / "compute-sanitizer"
            if cand.is_file():
                return str(cand)
    return None


def _driver_args(args) -> list[str]:
    out = ["--driver"]
    if args.quick:
        out.append("--quick")
    if args.only:
        out += ["--only", args.only]
    return out


def _run(cmd, env, timeout) -> tuple[int | None, str, float, bool]:
    """(exit code or None on timeout, combined output, seconds, timed out).
    The command runs in its own process group, killed whole on timeout."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True,
                         errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out, time.perf_counter() - t0, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = p.communicate()
        return None, out or "", time.perf_counter() - t0, True


def parse(output: str) -> dict:
    """Error counts and the first error lines from compute-sanitizer's output."""
    errors = warnings = None
    m = re.findall(r"ERROR SUMMARY:\s*(\d+)\s+errors?", output)
    if m:
        errors = int(m[-1])
    r = re.findall(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards?\s+displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)",
                   output)
    if r:
        errors = max(errors or 0, int(r[-1][1]))
        warnings = int(r[-1][2])
    d = re.findall(r"driver: (\d+) problems, (\d+) failed", output)
    lines = [ln.rstrip() for ln in output.splitlines()
             if ln.startswith("=========") and ln.strip("= ").strip()
             and "SUMMARY" not in ln and not ln.startswith("========= COMPUTE-SANITIZER")]
    return {"errors": errors, "warnings": warnings,
            "problems": int(d[-1][0]) if d else None, "wrong_results": int(d[-1][1]) if d else None,
            "failed_problems": [ln for ln in output.splitlines() if ln.startswith("FAIL ")][:20],
            "first_error_lines": lines[:40]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="bench/sanitize.py",
        description="Run NVIDIA compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every "
                    "rawcoop kernel variant on small problems; exit 1 on any sanitizer error, timeout "
                    "or wrong result.")
    ap.add_argument("--driver", action="store_true",
                    help="run the problems once in this process (what each sanitizer run executes) and exit")
    ap.add_argument("--quick", action="store_true", help="a smaller set of problems (one per kind)")
    ap.add_argument("--only", metavar="SUBSTR", help="only the problems whose name contains SUBSTR")
    ap.add_argument("--list", action="store_true", help="print the problems and exit")
    ap.add_argument("--tools", default=",".join(TOOLS),
                    help=f"comma-separated compute-sanitizer tools (default {','.join(TOOLS)})")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per tool (default 900)")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--log-dir", metavar="DIR", help="write each tool's full output to DIR/<tool>.log")
    ap.add_argument("--sanitizer", metavar="PATH",
                    help="compute-sanitizer executable (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    ap.add_argument("--launch-timeout", type=int, default=0,
                    help="compute-sanitizer --launch-timeout (seconds to wait for the target; 0: no limit)")
    ap.add_argument("--sanitizer-args", default="",
                    help="extra compute-sanitizer arguments, one shell-quoted string")
    ap.add_argument("--no-lineinfo", action="store_true",
                    help="do not compile the kernels with -lineinfo (RAWCOOP_LINEINFO)")
    ap.add_argument("--skip-warmup", action="store_true",
                    help="do not run the driver once without a sanitizer first (kernels may then compile "
                         "under the sanitizer)")
    args = ap.parse_args(argv)

    if args.list:
        for p in problems(_have_pingpong()):
            if (not args.quick or p.quick) and (not args.only or args.only.lower() in p.name.lower()):
                print(("* " if p.quick else "  ") + p.name)
        return 0
    from bench.environment import gpu_problem
    problem = gpu_problem(0)
    if problem:
        print(f"bench/sanitize.py: {problem}; nothing was checked.", file=sys.stderr)
        return 1
    if args.driver:
        return run_driver(args)

    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        ap.error(f"unknown tools {unknown}; choose from {', '.join(TOOLS)}")
    san = find_sanitizer(args.sanitizer)
    if san is None:
        print("compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin); use --sanitizer",
              file=sys.stderr)
        return 2
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not args.no_lineinfo:
        env["RAWCOOP_LINEINFO"] = "1"
    me = [sys.executable, str(Path(__file__).resolve())] + _driver_args(args)
    report: dict = {"sanitizer": san, "quick": args.quick, "only": args.only, "tools": {}}
    _, ver, _, _ = _run([san, "--version"], env, 60)
    report["sanitizer_version"] = next((ln.strip() for ln in ver.splitlines() if "Version" in ln or "version" in ln),
                                       ver.strip().splitlines()[-1] if ver.strip() else "")
    print(f"compute-sanitizer: {san} ({report['sanitizer_version']})", flush=True)

    if not args.skip_warmup:
        rc, out, secs, timed_out = _run(me, env, args.timeout)
        info = parse(out)
        report["warmup"] = {"rc": rc, "seconds": round(secs, 1), "timed_out": timed_out,
                            "problems": info["problems"], "wrong_results": info["wrong_results"],
                            "failed_problems": info["failed_problems"]}
        print(f"warm-up driver (no sanitizer): rc={rc} {secs:.1f} s, {info['problems']} problems, "
              f"{info['wrong_results']} failed", flush=True)
        if rc != 0:
            print(out[-4000:], file=sys.stderr)
            print("the driver fails without a sanitizer; fix that first", file=sys.stderr)
            _write_json(args.json, report)
            return 2

    extra = shlex.split(args.sanitizer_args)
    bad = False
    for tool in tools:
        # Host API errors are not kernel errors: cuda-bindings probes driver entry points with
        # cuGetProcAddress, and every failed probe counts as an "error" under the default
        # --report-api-errors explicit (34 of them per run, none from our kernels).
        cmd = [san, "--tool", tool, "--error-exitcode", "99", "--launch-timeout", str(args.launch_timeout),
               "--report-api-errors", "no"]
        cmd += extra + me
        print(f"{tool}: {' '.join(shlex.quote(c) for c in cmd)}", flush=True)
        rc, out, secs, timed_out = _run(cmd, dict(env, RAWCOOP_SANITIZE_TOOL=tool), args.timeout)
        info = parse(out)
        if args.log_dir:
            Path(args.log_dir).mkdir(parents=True, exist_ok=True)
            (Path(args.log_dir) / f"{tool}.log").write_text(out)
        if timed_out:
            status = "TIMEOUT"
        elif info["errors"] is None:
            status = "DID NOT RUN" if rc != 0 else "NO SUMMARY"
        elif info["errors"]:
            status = "ERRORS"
        elif info["wrong_results"]:
            status = "WRONG RESULTS"
        elif rc != 0:
            status = f"EXIT {rc}"
        else:
            status = "clean"
        bad |= status != "clean"
        report["tools"][tool] = {"status": status, "rc": rc, "seconds": round(secs, 1), **info}
        if status != "clean":
            for ln in (info["first_error_lines"] or out.strip().splitlines()[-15:])[:15]:
                print(f"    {ln}", flush=True)
            for ln in info["failed_problems"][:10]:
                print(f"    {ln}", flush=True)

    print()
    print(f"{'tool':<10} {'status':<14} {'errors':>7} {'warnings':>9} {'problems':>9} {'seconds':>8}")
    def fmt(v):
        return "-" if v is None else str(v)
    for tool, r in report["tools"].items():
        print(f"{tool:<10} {r['status']:<14} {fmt(r['errors']):>7} {fmt(r['warnings']):>9} "
              f"{fmt(r['problems']):>9} {r['seconds']:>8.1f}")
    _write_json(args.json, report)
    return 1 if bad else 0


def _write_json(path, report) -> None:
    if path:
        from bench.report import write_json
        write_json(path, report)


if __name__ == "__main__":
    sys.exit(main())
