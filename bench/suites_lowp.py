"""The fp8 and tf32 suites (``--suite fp8``, ``--suite tf32``), run by a
bench.suites.Bench ``b``.

fp8: e4m3 x e4m3 with per-tensor device scales, bf16 out, TN, against
cuBLASLt through ``torch._scaled_mm`` on the same bytes and scales, with and
without fast accumulation; each row's rel_err is rawcoop's output against
that baseline's, and both sides' error against an fp32 GEMM of the
dequantised inputs is kept too.  Without a working torch rawcoop is timed
alone (baseline "none") and its rel_err is against that fp32 GEMM.
``--fp8-block``: block-scaled e4m3 (``scale_mode="block"``), rawcoop alone.

tf32: float32 in and out with ``precision="tf32"``, TN, against
``cupy.matmul`` with CuPy's float32 compute type TF32 and ``torch.matmul``
with TF32 allowed; both sides' error against float64 shows that TF32 really
ran (full fp32 gives < 5e-5, TF32 ~1e-4..1e-3).
"""
from __future__ import annotations

import contextlib
import sys

from bench.baselines import (BASE_CUBLAS_TF32, BASE_SCALED_MM, BASE_SCALED_MM_FAST, BASE_TORCH_TF32, CUBLAS_COMPUTE,
                             NO_BASELINE, cupy_f32_compute_type, scaled_mm, torch_tf32)
from bench.rows import PEAK_FP8_TFLOPS, PEAK_TF32_TFLOPS

TF32_EVIDENT = 5e-5
"""A float32 GEMM whose error against float64 is below this ran in full fp32, not TF32."""
FP8_CALL = ('rawcoop.gemm(a, bt.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb, '
            'out_dtype=bfloat16, out=d)')
FP8_BLOCK_CALL = ('rawcoop.gemm(a, bt.T, a_format="e4m3", b_format="e4m3", scale_a=sa, scale_b=sb, '
                  'scale_mode="block", out_dtype=bfloat16, out=d)  [sa = rawcoop.mn_major_scales(...)]')


def _variants(b, make_ours):
    """(name, gemm keywords, fn(i)) per --variants entry."""
    return [(v, kw, make_ours(kw)) for v, kw in b.args.variants]


def _fp32_reference(cp, a, bt):
    """a @ bt.T in full fp32 (no TF32), float32 inputs."""
    with cupy_f32_compute_type(cp, "DEFAULT"):
        return cp.matmul(a, bt.T)


def fp8(b):
    """The fp8 suite on ``b``, then --fp8-block's rows."""
    import rawcoop
    cp = b.cp
    bf16 = b.data.dtypes["bf16"]
    torch, why = b.torch()
    if torch is not None and not (hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")):
        torch, why = None, f"torch {torch.__version__} has no _scaled_mm or float8_e4m3fn"
    if torch is None:
        print(f"fp8      SKIP the cuBLASLt baseline ({why}): timing rawcoop alone", flush=True)
    else:
        print(f"fp8      baseline: cuBLASLt through torch._scaled_mm (torch {torch.__version__}), "
              "use_fast_accum False and True", flush=True)
    lut = b.data.e4m3_values()
    for shape in b.args.fp8_shapes:
        m, n, k = shape.m, shape.n, shape.k
        sets = b.n_sets(m * k + n * k + 2 * m * n)
        ops = [(b.data.fp8_operand(m, k, 100 + 10 * i), b.data.fp8_operand(n, k, 101 + 10 * i)) for i in range(sets)]
        A, BT = [a for (a, _), _ in ops], [bt for _, (bt, _) in ops]
        sa, sb = [x for (_, x), _ in ops], [y for _, (_, y) in ops]
        SA = [cp.asarray([v], dtype=cp.float32) for v in sa]
        SB = [cp.asarray([v], dtype=cp.float32) for v in sb]
        D = [cp.empty((m, n), dtype=bf16) for _ in range(sets)]

        def make_ours(kw):
            def ours(i):
                return rawcoop.gemm(A[i], BT[i].T, a_format="e4m3", b_format="e4m3", scale_a=SA[i],
                                    scale_b=SB[i], out_dtype=bf16, out=D[i], **kw)
            return ours
        variants = _variants(b, make_ours)
        variants[0][2](0)
        ref32 = _fp32_reference(cp, lut[A[0].astype(cp.int32)], lut[BT[0].astype(cp.int32)])
        ref32 *= cp.float32(sa[0] * sb[0])
        label = f"e4m3 {shape} TN"
        common = {"dtype": "e4m3", "shape": str(shape), "layout": "TN", "batch": 1, "out_dtype": "bf16",
                  "scale_a": sa[0], "scale_b": sb[0], "rawcoop_call": FP8_CALL,
                  "rawcoop_err_fp32": b.rel_err(D[0], ref32)}
        timed, skipped = False, why
        if torch is not None:
            try:
                timed, skipped = _fp8_vs_scaled_mm(b, torch, shape, sets, A, BT, sa, sb, D, variants, label,
                                                   common, ref32)
            except Exception as e:  # noqa: BLE001 - a broken torch drops the baseline, not the suite
                skipped = f"torch baseline failed: {type(e).__name__}: {e}"
                print(f"fp8      {label}: {skipped}", flush=True)
        if not timed:
            rows = b.variant_rows(variants, D[0], label, ref32,
                                  dict(common, err_vs="fp32 GEMM of the dequantised inputs",
                                       baseline_skipped=skipped))
            b.record_variants("fp8", rows, shape.flops, None, sets, baseline=NO_BASELINE, peak=PEAK_FP8_TFLOPS)
        del A, BT, SA, SB, D, ref32, ops
        b.free()
        if torch is not None:
            with contextlib.suppress(Exception):
                torch.cuda.empty_cache()
    if getattr(b.args, "fp8_block", False):
        fp8_block(b, lut)


def _fp8_vs_scaled_mm(b, torch, shape, sets, A, BT, sa, sb, D, variants, label, common, ref32):
    """The fp8 rows of one shape against torch._scaled_mm, without and with
    fast accumulation: (any row timed, why a baseline was refused)."""
    cp = b.cp
    bf16 = b.data.dtypes["bf16"]
    m, n = shape.m, shape.n
    TA = [torch.as_tensor(a, device="cuda").view(torch.float8_e4m3fn) for a in A]
    TB = [torch.as_tensor(bt, device="cuda").view(torch.float8_e4m3fn).t() for bt in BT]
    TSA = [torch.tensor(v, dtype=torch.float32, device="cuda") for v in sa]
    TSB = [torch.tensor(v, dtype=torch.float32, device="cuda") for v in sb]
    OUT = [cp.empty((m, n), dtype=bf16) for _ in range(sets)]
    TD = [torch.as_tensor(o.view(cp.int16), device="cuda").view(torch.bfloat16) for o in OUT]
    timed, skipped = False, None
    for fast, bname in ((False, BASE_SCALED_MM), (True, BASE_SCALED_MM_FAST)):
        fn, text, writes_out, refused = scaled_mm(torch, TA, TB, TSA, TSB, TD, fast)
        if fn is None:
            skipped = refused
            print(f"fp8      {label}: {refused}", flush=True)
            continue
        r0 = fn(0)
        ref = OUT[0] if writes_out else cp.asarray(r0.view(torch.int16)).view(bf16)
        extra = dict(common, rel_err=b.rel_err(D[0], ref), err_vs=bname, baseline_call=text,
                     use_fast_accum=fast, baseline_err_fp32=b.rel_err(ref, ref32), torch=torch.__version__)
        rows = b.variant_rows(variants, D[0], label, ref, extra)
        b.record_variants("fp8", rows, shape.flops, fn, sets, baseline=bname, peak=PEAK_FP8_TFLOPS)
        timed = True
    return timed, skipped


def fp8_block(b, lut):
    """--fp8-block: e4m3 x e4m3 with block scales (scale_mode="block"),
    bf16 out, TN, rawcoop alone; the data are fp8_operand's codes, the
    block scales 2^U(-2, 2).  ``lut``: the e4m3 values (Data.e4m3_values)."""
    import rawcoop
    cp = b.cp
    bf16 = b.data.dtypes["bf16"]
    for shape in b.args.fp8_block_shapes:
        m, n, k = shape.m, shape.n, shape.k
        kb, nb = -(-k // 128), -(-n // 128)
        sets = b.n_sets(m * k + n * k + 2 * m * n)
        A, BT, SA, SB = [], [], [], []
        for i in range(sets):
            A.append(b.data.fp8_operand(m, k, 200 + 10 * i)[0])
            BT.append(b.data.fp8_operand(n, k, 201 + 10 * i)[0])
            rs = cp.random.RandomState(300 + i)
            SA.append(rawcoop.mn_major_scales(cp.exp2(rs.uniform(-2, 2, (m, kb))).astype(cp.float32)))
            SB.append(cp.exp2(rs.uniform(-2, 2, (nb, kb))).astype(cp.float32))
        D = [cp.empty((m, n), dtype=bf16) for _ in range(sets)]

        def make_ours(kw):
            def ours(i):
                return rawcoop.gemm(A[i], BT[i].T, a_format="e4m3", b_format="e4m3", scale_a=SA[i],
                                    scale_b=SB[i], scale_mode="block", out_dtype=bf16, out=D[i], **kw)
            return ours
        variants = _variants(b, make_ours)
        variants[0][2](0)
        ad = lut[A[0].astype(cp.int32)] * cp.repeat(SA[0], 128, axis=1)[:, :k]
        bd = lut[BT[0].astype(cp.int32)] * cp.repeat(cp.repeat(SB[0], 128, axis=0)[:n], 128, axis=1)[:, :k]
        ref32 = _fp32_reference(cp, ad, bd)
        del ad, bd
        rows = b.variant_rows(variants, D[0], f"e4m3 block {shape} TN", ref32,
                              {"dtype": "e4m3", "shape": str(shape), "layout": "TN", "batch": 1,
                               "out_dtype": "bf16", "scale_mode": "block", "rawcoop_call": FP8_BLOCK_CALL,
                               "err_vs": "fp32 GEMM of the dequantised inputs",
                               "baseline_skipped": "no block-scaled baseline in this benchmark (rawcoop alone)"})
        for row in rows:
            row[3]["rawcoop_err_fp32"] = row[3]["rel_err"]    # (the reference is that fp32 GEMM)
        b.record_variants("fp8", rows, shape.flops, None, sets, baseline=NO_BASELINE, peak=PEAK_FP8_TFLOPS)
        del A, BT, SA, SB, D, ref32
        b.free()


def _tf32_check(b, who, label, e64):
    """Warn when a TF32 baseline's error against float64 says it ran in full fp32."""
    if e64 < TF32_EVIDENT:
        print(f"tf32     WARNING {label}: {who}'s error vs float64 is {e64:.1e}, as full fp32 would give; "
              "TF32 gives ~1e-4..1e-3.  That baseline did NOT run in TF32.", file=sys.stderr, flush=True)
    return {"baseline_err_fp64": e64, "baseline_tf32_evident": e64 >= TF32_EVIDENT}


def tf32(b):
    """The tf32 suite on ``b``: every shape against cuBLAS (CuPy, TF32) and torch.matmul (TF32)."""
    import rawcoop
    cp = b.cp
    torch, why = b.torch()
    if torch is None:
        print(f"tf32     SKIP the torch baseline ({why})", flush=True)
    for j, shape in enumerate(b.args.tf32_shapes):
        m, n, k = shape.m, shape.n, shape.k
        sets = b.n_sets(4 * (m * k + n * k + m * n))
        A = [b.data.rand((m, k), cp.float32, 200 + 10 * i) for i in range(sets)]
        BT = [b.data.rand((n, k), cp.float32, 201 + 10 * i) for i in range(sets)]
        D = [cp.empty((m, n), dtype=cp.float32) for _ in range(sets)]

        def make_ours(kw):
            def ours(i):
                return rawcoop.gemm(A[i], BT[i].T, precision="tf32", out=D[i], **kw)
            return ours
        variants = _variants(b, make_ours)
        d0 = rawcoop.gemm(A[0], BT[0].T, precision="tf32", **variants[0][1])
        ref64 = cp.matmul(A[0].astype(cp.float64), BT[0].astype(cp.float64).T)
        label = f"tf32 {shape} TN"
        common = {"dtype": "tf32", "shape": str(shape), "layout": "TN", "batch": 1, "out_dtype": "float32",
                  "rawcoop_err_fp64": b.rel_err64(d0, ref64)}
        with cupy_f32_compute_type(cp, "TF32") as ctype:
            cublas_ct = CUBLAS_COMPUTE.get(ctype, "?")
            if j == 0:
                print(f"tf32     cupy.matmul on float32: CuPy compute type {ctype} -> cublasGemmEx compute "
                      f"{cublas_ct}", flush=True)
            ref = cp.matmul(A[0], BT[0].T)
            rows = b.variant_rows(variants, D[0], label, ref,
                                  dict(common, err_vs="cupy.matmul", cupy_compute_type=ctype,
                                       cublas_compute_type=cublas_ct,
                                       **_tf32_check(b, "cupy.matmul", label, b.rel_err64(ref, ref64))))
            b.record_variants("tf32", rows, shape.flops, lambda i: cp.matmul(A[i], BT[i].T, out=D[i]), sets,
                              baseline=BASE_CUBLAS_TF32 if ctype == "COMPUTE_TYPE_TF32" else f"cuBLAS {ctype}",
                              peak=PEAK_TF32_TFLOPS)
            del ref
        if torch is not None:
            try:
                TA = [torch.as_tensor(a, device="cuda") for a in A]
                TB = [torch.as_tensor(bt, device="cuda").t() for bt in BT]
                TD = [torch.as_tensor(d, device="cuda") for d in D]
                with torch_tf32(torch) as setting:
                    if j == 0:
                        print(f"tf32     torch.matmul on float32 (torch {torch.__version__}) with {setting}",
                              flush=True)
                    ref = cp.asarray(torch.matmul(TA[0], TB[0]))
                    rows = b.variant_rows(variants, D[0], label, ref,
                                          dict(common, err_vs="torch.matmul", torch_setting=setting,
                                               torch=torch.__version__,
                                               **_tf32_check(b, "torch.matmul", label, b.rel_err64(ref, ref64))))
                    b.record_variants("tf32", rows, shape.flops, lambda i: torch.matmul(TA[i], TB[i], out=TD[i]),
                                      sets, baseline=BASE_TORCH_TF32, peak=PEAK_TF32_TFLOPS)
                del TA, TB, TD, ref
            except Exception as e:  # noqa: BLE001 - a broken torch drops this baseline only
                print(f"tf32     torch baseline failed on {label}: {type(e).__name__}: {e}", flush=True)
        del A, BT, D, d0, ref64
        b.free()
