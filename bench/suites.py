"""The benchmark's suites: which problems each one times, against what.

:class:`Bench` runs on the current CuPy device and collects rows
(bench/rows.py); each suite is a method of the name ``--suite`` takes
(bench/options.py describes them).  The 16-bit suites are here, fp8 and
tf32 in bench/suites_lowp.py.  Every problem first runs once on input set 0
to check rawcoop's output against the baseline's (``rel_err``), each
variant into a NaN-filled output so that it is that variant's own.
"""
from __future__ import annotations

import sys

from bench import suites_lowp
from bench.baselines import axpby_kernel, bias_gelu_kernel, cublas_strided_batched, first_line, import_torch
from bench.data import Data
from bench.environment import gpu_problem
from bench.options import LAYOUTS, Shape, variant_label
from bench.rows import PEAK_TFLOPS, host_bound_sides, host_fields, make_row
from bench.timing import compare, compare_variants, n_sets_for, vs_first_fields


class Bench:
    """Runs the suites on the current CuPy device and collects rows; ``on_row(row)`` sees each one."""

    def __init__(self, args, on_row=None):
        import cupy as cp

        from rawcoop import device
        self.cp = cp
        self.args = args
        self.info = device.info(cp.cuda.Device().id)
        self.data = Data(cp)
        self.rows: list[dict] = []
        self.on_row = on_row
        self._axpby = None
        self._torch = None

    # ------------------------------------------------------------ timing and rows
    def record(self, suite, label, flops, ours, theirs, n_sets, baseline="cuBLAS", extra=None, peak=PEAK_TFLOPS):
        """Time ``ours`` against ``theirs`` (None: ours alone) and keep the row."""
        host: dict = {}
        rounds = compare(self.cp, ours, theirs, n_sets, self.args.rounds, self.args.iters, host,
                         getattr(self.args, "timing", "calls"))
        return self.keep(make_row(suite, label, flops, rounds, n_sets, baseline, extra, peak=peak), host, baseline)

    def record_variants(self, suite, variants, flops, theirs, n_sets, baseline="cuBLAS", peak=PEAK_TFLOPS):
        """``variants``: (name, label, ours, extra) per --variants entry.  One
        entry: :meth:`record`.  Several: all timed in the same rounds
        (compare_variants), each later row also carrying its time against
        the first variant's of the same rounds (``vs_first``)."""
        if len(variants) == 1:
            _, label, ours, extra = variants[0]
            return [self.record(suite, label, flops, ours, theirs, n_sets, baseline=baseline, extra=extra,
                                peak=peak)]
        hosts = [{} for _ in variants]
        per = compare_variants(self.cp, [v[2] for v in variants], theirs, n_sets, self.args.rounds,
                               self.args.iters, hosts, getattr(self.args, "timing", "calls"))
        rows = []
        for j, ((_, label, _, extra), rounds, host) in enumerate(zip(variants, per, hosts)):
            row = make_row(suite, label, flops, rounds, n_sets, baseline, extra, peak=peak)
            if j:
                row.update(vs_first_fields(per[0], rounds, variants[0][0]))
            rows.append(self.keep(row, host, baseline))
        return rows

    def keep(self, row, host, baseline):
        """Add the host times to ``row``, keep it and print its line."""
        row.update(host_fields(row, host))
        self.rows.append(row)
        if row["ratio"] is None:
            vs = f"  (no baseline: {row.get('baseline_skipped', 'none')})"
            times = [r["rawcoop_ms"] for r in row.get("rounds", []) if r.get("rawcoop_ms")]
            if len(times) > 1:     # the spread shows clock modes the median hides
                vs += f"  rounds {row['flops'] / max(times) / 1e9:.1f}-{row['flops'] / min(times) / 1e9:.1f} TF/s"
        else:
            vs = (f"  {baseline} {row['baseline_tflops']:6.1f}  ratio {row['ratio']:.3f} "
                  f"[{row['ratio_min']:.3f}-{row['ratio_max']:.3f}]")
        if row.get("vs_first") is not None:
            vs += (f"  vs {row['vs_variant']} {row['vs_first']:.3f} "
                   f"[{row['vs_first_min']:.3f}-{row['vs_first_max']:.3f}]")
        print(f"{row['suite']:8s} {row['case']:38s} rawcoop {row['rawcoop_tflops']:6.1f} TF/s "
              f"({row['rawcoop_peak_frac']:5.1%})"
              + vs + (f"  err {row['rel_err']:.1e}" if row.get("rel_err") is not None else "")
              + "".join(f"  HOST-BOUND {side} ({row[side + '_host_us']:.1f} us/call on the host)"
                        for side in host_bound_sides(row)), flush=True)
        if self.on_row is not None:
            self.on_row(row)
        return row

    def variant_rows(self, variants, out, label, ref, extra):
        """record_variants' entries for ``variants`` ((name, gemm keywords,
        fn(i))): each runs once on set 0 into ``out`` (its set-0 output),
        NaN-filled first; ``extra`` plus the variant's name and its rel_err
        against ``ref``."""
        rows = []
        for v, _, ours in variants:
            out.fill(float("nan"))
            ours(0)
            rows.append((v, variant_label(label, v), ours, dict(extra, variant=v, rel_err=self.rel_err(out, ref))))
        return rows

    # ------------------------------------------------------------ helpers
    def rel_err(self, d, ref):
        """Relative Frobenius error of ``d`` against ``ref``, in float32."""
        cp = self.cp
        d, ref = d.astype(cp.float32), ref.astype(cp.float32)
        den = float(cp.linalg.norm(ref))
        return float(cp.linalg.norm(d - ref)) / (den or 1.0)

    def rel_err64(self, d, ref64):
        """Relative Frobenius error of ``d`` against a float64 reference."""
        cp = self.cp
        den = float(cp.linalg.norm(ref64))
        return float(cp.linalg.norm(d.astype(cp.float64) - ref64)) / (den or 1.0)

    def free(self):
        self.cp.get_default_memory_pool().free_all_blocks()

    def axpby(self):
        if self._axpby is None:
            self._axpby = axpby_kernel(self.cp)
        return self._axpby

    def torch(self):
        """(torch, None) or (None, why), imported once."""
        if self._torch is None:
            self._torch = import_torch()
        return self._torch

    def n_sets(self, nbytes: int) -> int:
        return n_sets_for(nbytes, self.info.l2_bytes)

    # ------------------------------------------------------------ 16-bit suites
    def main(self):
        beta = float(getattr(self.args, "beta", 0.0) or 0.0)
        for dname in self.args.dtypes:
            for shape in self.args.shapes:
                for layout in self.args.layouts:
                    self._main_problem(dname, shape, layout, beta)
                    self.free()

    def _main_problem(self, dname, shape, layout, beta):
        """One main-suite problem: every --variants entry against cuBLAS (+ the beta*C kernel)."""
        import rawcoop
        cp, data = self.cp, self.data
        dt = data.dtypes[dname]
        m, n, k, L = shape
        sets = self.n_sets(L * (m * k + n * k + m * n * (2 if beta else 1)) * 2)
        A = [data.operand_a(shape, layout, dt, 10 * i) for i in range(sets)]
        B = [data.operand_b(shape, layout, dt, 10 * i + 1) for i in range(sets)]
        out_shape = (L, m, n) if L > 1 else (m, n)
        D = [cp.empty(out_shape, dt) for _ in range(sets)]
        out32 = getattr(self.args, "out_dtype", None) == "float32"
        D_ours = [cp.empty(out_shape, cp.float32) for _ in range(sets)] if out32 else D
        C = [data.rand(out_shape, dt, 10 * i + 2) for i in range(sets)] if beta else None
        T = cp.empty(out_shape, dt) if beta else None

        batched, base = None, "cuBLAS"
        if L > 1:
            try:
                batched = [cublas_strided_batched(cp, a, b, d) for a, b, d in zip(A, B, D if T is None else [T] * sets)]
                base = "cuBLAS batched"
            except Exception as e:  # noqa: BLE001 - fall back to one 2-D call per batch
                print(f"main     (cublasGemmStridedBatchedEx unavailable: {type(e).__name__}: {e}; "
                      f"baseline = {L} cupy.matmul 2-D calls)", flush=True)
                base = f"cuBLASx{L}"

        def matmul(i, out):
            if batched is not None:     # one cublasGemmStridedBatchedEx
                batched[i]()
            elif L > 1:                 # L cuBLAS GEMMs through CuPy's 2-D path
                for j in range(L):
                    cp.matmul(A[i][j], B[i][j], out=out[j])
            else:
                cp.matmul(A[i], B[i], out=out)

        if beta:
            axpby = self.axpby()
            base += "+ew"

            def theirs(i):
                matmul(i, T)
                axpby(T, C[i], cp.float32(1.0), cp.float32(beta), D[i])
        else:
            def theirs(i):
                matmul(i, D[i])
        theirs(0)
        ref = D[0].copy()
        variants = []
        for vname, kw in self.args.variants:
            if out32:   # gemm's out= must carry the out_dtype asked for
                kw = dict(kw, out_dtype="float32")
            if beta:
                kw = dict(kw, beta=beta)

            def ours(i, kw=kw):
                return rawcoop.gemm(A[i], B[i], out=D_ours[i], **(dict(kw, c=C[i]) if beta else kw))
            D_ours[0].fill(float("nan"))     # each variant's own output, never the previous one's
            err = self.rel_err(ours(0), ref)
            label = (variant_label(f"{dname} {shape} {layout}", vname) + (f" beta={beta:g}" if beta else "")
                     + (" out=fp32" if out32 else ""))
            variants.append((vname, label, ours,
                             {"dtype": dname, "shape": str(shape), "layout": layout, "batch": L, "beta": beta,
                              "variant": vname, "rel_err": err, "out_dtype": "float32" if out32 else dname}))
        self.record_variants("main", variants, shape.flops, theirs, sets, baseline=base)

    def layouts(self):
        import rawcoop
        cp = self.cp
        dt = self.data.dtypes["bf16"]
        shape = Shape(8192, 8192, 8192)
        sets = self.n_sets(3 * shape.m * shape.n * 2)
        for layout in LAYOUTS:
            A = [self.data.operand_a(shape, layout, dt, i) for i in range(sets)]
            B = [self.data.operand_b(shape, layout, dt, 7 + i) for i in range(sets)]
            D = [cp.empty((shape.m, shape.n), dt) for _ in range(sets)]
            err = self.rel_err(rawcoop.gemm(A[0], B[0]), cp.matmul(A[0], B[0]))
            self.record("layouts", f"bf16 8192^3 {layout}", shape.flops,
                        lambda i: rawcoop.gemm(A[i], B[i], out=D[i]), lambda i: cp.matmul(A[i], B[i], out=D[i]),
                        sets, extra={"dtype": "bf16", "layout": layout, "rel_err": err})
            del A, B, D
            self.free()

    def batched(self):
        # fp16: CuPy's batched matmul rejects bfloat16 ("data type 'E' not understood"
        # in its integer tensordot path), so bf16 has no 3-D cuBLAS baseline through CuPy.
        import rawcoop
        cp = self.cp
        dt = self.data.dtypes["fp16"]
        L, m, n, k = 16, 2048, 2048, 2048
        sets = self.n_sets(L * 3 * m * n * 2)
        A = [self.data.rand((L, m, k), dt, i) for i in range(sets)]
        B = [self.data.rand((L, k, n), dt, 5 + i) for i in range(sets)]
        D = [cp.empty((L, m, n), dt) for _ in range(sets)]
        err = self.rel_err(rawcoop.gemm(A[0], B[0]), cp.matmul(A[0], B[0]))
        flops = 2.0 * L * m * n * k
        extra = {"dtype": "fp16", "batch": L}

        def ours(i):
            return rawcoop.gemm(A[i], B[i], out=D[i])
        self.record("batched", "fp16 16 x 2048^3 vs cupy.matmul 3-D", flops, ours,
                    lambda i: cp.matmul(A[i], B[i], out=D[i]), sets, extra=dict(extra, rel_err=err))

        def loop(i):                          # cuBLAS through CuPy's 2-D path, one GEMM per batch
            for j in range(L):
                cp.matmul(A[i][j], B[i][j], out=D[i][j])
        self.record("batched", "fp16 16 x 2048^3 vs 16 cupy 2-D calls", flops, ours, loop, sets,
                    baseline="cuBLASx16", extra=extra)
        torch, why = self.torch()
        if torch is None:
            print(f"batched  (no torch.bmm baseline: {why})", flush=True)
        else:
            TA, TB, TD = ([torch.as_tensor(x, device="cuda") for x in X] for X in (A, B, D))
            self.record("batched", "fp16 16 x 2048^3 vs torch.bmm", flops, ours,
                        lambda i: torch.bmm(TA[i], TB[i], out=TD[i]), sets, baseline="torch.bmm", extra=extra)
        self.free()

    def epilogue(self):
        import rawcoop
        cp = self.cp
        axpby, bias_gelu = self.axpby(), bias_gelu_kernel(cp)
        dt = self.data.dtypes["fp16"]
        for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
            sets = self.n_sets(4 * m * n * 2)
            A = [self.data.rand((m, k), dt, i) for i in range(sets)]
            BT = [self.data.rand((n, k), dt, 3 + i) for i in range(sets)]
            C = [self.data.rand((m, n), dt, 6 + i) for i in range(sets)]
            D = [cp.empty((m, n), dt) for _ in range(sets)]
            T = cp.empty((m, n), dt)
            bias = self.data.rand((n,), cp.float32, 9)

            def theirs_ab(i):
                cp.matmul(A[i], BT[i].T, out=T)
                axpby(T, C[i], cp.float32(0.5), cp.float32(1.5), D[i])

            def theirs_bg(i):
                cp.matmul(A[i], BT[i].T, out=T)
                bias_gelu(T, bias, n, D[i])

            cases = (("0.5*AB+1.5*C", dict(alpha=0.5, beta=1.5), True, theirs_ab),
                     ("gelu(AB+bias)", dict(bias=bias, activation="gelu"), False, theirs_bg))
            for name, kw, with_c, theirs in cases:
                def ours(i, kw=kw, with_c=with_c):
                    return rawcoop.gemm(A[i], BT[i].T, out=D[i], **(dict(kw, c=C[i]) if with_c else kw))
                theirs(0)
                ref = D[0].copy()
                D[0].fill(float("nan"))
                err = self.rel_err(ours(0), ref)
                self.record("epilogue", f"fp16 {m}x{n}x{k} {name}", 2.0 * m * n * k, ours, theirs, sets,
                            baseline="cuBLAS+ew", extra={"dtype": "fp16", "rel_err": err})
            del A, BT, C, D, T
            self.free()

    def pdl(self):
        """A chain of 8 dependent GEMMs (each consumes the previous output),
        launched with and without programmatic dependent launch."""
        import rawcoop
        cp = self.cp
        dt = self.data.dtypes["bf16"]
        for size in (1024, 2048):
            x0 = self.data.rand((size, size), dt, 1)
            W = [(self.data.rand((size, size), dt, 2 + i).astype(cp.float32) / 32).astype(dt) for i in range(8)]
            X = [cp.empty((size, size), dt) for _ in range(8)]

            def chain(pdl):
                def run(_):
                    x = x0
                    for i in range(8):
                        x = rawcoop.gemm(x, W[i], out=X[i], pdl=pdl)
                return run

            def chain_cublas(_):
                x = x0
                for i in range(8):
                    x = cp.matmul(x, W[i], out=X[i])
            flops = 8 * 2.0 * size ** 3
            self.record("pdl", f"bf16 8x{size}^3 chain pdl vs no-pdl", flops, chain(True), chain(False), 1,
                        baseline="no-pdl", extra={"dtype": "bf16"})
            self.record("pdl", f"bf16 8x{size}^3 chain pdl vs cuBLAS", flops, chain(True), chain_cublas, 1,
                        extra={"dtype": "bf16"})
            self.free()

    def small_m(self):
        import rawcoop
        cp = self.cp
        dt = self.data.dtypes["bf16"]
        n = k = 8192
        for m in (1, 16, 64):
            sets = self.n_sets((m * k + n * k) * 2)
            A = [self.data.rand((m, k), dt, i) for i in range(sets)]
            BT = [self.data.rand((n, k), dt, 4 + i) for i in range(sets)]
            D = [cp.empty((m, n), dt) for _ in range(sets)]
            ref = cp.matmul(A[0], BT[0].T)
            for swap in (True, False):
                err = self.rel_err(rawcoop.gemm(A[0], BT[0].T, _swap=swap), ref)
                self.record("small_m", f"bf16 {m}x{n}x{k} swap={swap}", 2.0 * m * n * k,
                            lambda i, s=swap: rawcoop.gemm(A[i], BT[i].T, out=D[i], _swap=s),
                            lambda i: cp.matmul(A[i], BT[i].T, out=D[i]), sets,
                            extra={"dtype": "bf16", "m": m, "swap": swap, "rel_err": err})
            del A, BT, D
            self.free()

    # ------------------------------------------------------------ fp8 and tf32 (bench/suites_lowp.py)
    def fp8(self):
        suites_lowp.fp8(self)

    def tf32(self):
        suites_lowp.tf32(self)


def open_bench(args, prog: str):
    """``Bench(args)`` on GPU 0, or None after one line on stderr saying why
    not (no Hopper GPU, no CuPy, no driver): for the scripts that time their
    own problems with the benchmark's data and timing."""
    problem = gpu_problem(0)
    if problem is None:
        try:
            return Bench(args)
        except Exception as e:  # noqa: BLE001 - one line, not a traceback
            problem = f"no usable GPU ({first_line(e)})"
    print(f"{prog}: {problem}; nothing was measured.", file=sys.stderr)
    return None
