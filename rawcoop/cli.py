"""``python -m rawcoop [info | warmup | cache info|clear|export FILE | demo]``.

With no arguments: on a Hopper GPU, a short demo of what exists; without one,
the warm-up (which needs no GPU).
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def _versions() -> dict:
    import rawcoop
    from . import _cuda, compiler, device
    out = {"rawcoop": rawcoop.__version__, "cuda-bindings": _cuda.bindings_version()}
    try:
        out["nvrtc"] = ".".join(map(str, compiler.nvrtc_version()))
    except ImportError as e:
        out["nvrtc"] = f"unavailable: {e}"
    try:
        out["cupy"] = _cuda.cupy().__version__
    except Exception as e:  # noqa: BLE001 - a CuPy that fails to import says why
        out["cupy"] = f"unavailable: {e}"
    n = device.gpu_count()
    if n:
        drv = device.info(0).driver_version
        out["driver"] = f"{drv // 1000}.{(drv % 1000) // 10}"
        out["gpus"] = [f"{i}: {device.info(i).name} (sm_{device.info(i).cc[0]}{device.info(i).cc[1]}, "
                       f"{device.info(i).sm_count} SMs)" for i in range(n)]
    else:
        major = _cuda.driver_cuda_major()
        out["driver"] = "none" if major is None else f"CUDA {major} (no usable GPU)"
        out["gpus"] = "no GPU"
    return out


def cmd_info(args) -> int:
    from .cache import default_cache
    v = _versions()
    cache = default_cache()
    for k, val in v.items():
        if isinstance(val, list):
            print(f"{k:14s}")
            for line in val:
                print(f"  {line}")
        else:
            print(f"{k:14s}{val}")
    print(f"{'cache dir':14s}{cache.directory}" + ("" if cache.directory.exists() else " (not created yet)"))
    print(f"{'cache size':14s}{cache.size_bytes() / 1e6:.2f} MB in {len(cache.entries())} entries")
    return 0


_DTYPES = {"bf16": (1, 1), "fp16": (0, 0), "tf32": (2, 2), "e4m3": (3, 3), "e5m2": (4, 4),
           "e4m3xe5m2": (3, 4), "e5m2xe4m3": (4, 3)}
"""--dtypes names -> (a's kind, b's kind) (configs.IN_KINDS); "e4m3xe5m2": a e4m3, b e5m2."""


def _select_specs(args):
    """Warm-up selection: the registry (or its --all superset), or the GEMM
    configurations that --shapes would use, narrowed by --dtypes/--layouts/--kernel."""
    from . import registry
    from .plan import kernel_config as configs
    from .plan.select import config_for_problem
    everything = getattr(args, "all", False)
    default_dtypes = ",".join(_DTYPES) if everything else "bf16,fp16"
    dtypes = [d.strip() for d in (getattr(args, "dtypes", None) or default_dtypes).split(",") if d.strip()]
    layouts = [x.strip().upper() for x in (getattr(args, "layouts", None) or "TN,NN,NT,TT").split(",") if x.strip()]
    for d in dtypes:
        if d not in _DTYPES:
            raise SystemExit(f"--dtypes: unknown dtype {d!r} ({', '.join(_DTYPES)})")
    for x in layouts:
        if x not in configs.LAYOUTS:
            raise SystemExit(f"--layouts: unknown layout {x!r} (TN, NN, NT, TT)")
    if getattr(args, "from_list", None):
        from .warmup import load_kernel_list
        if getattr(args, "shapes", None) or everything or getattr(args, "dtypes", None) or getattr(args, "layouts", None):
            raise SystemExit("--from: the list is the whole set; it does not combine with --all, --shapes, --dtypes "
                             "or --layouts (--kernel narrows it)")
        try:
            specs = load_kernel_list(args.from_list)
        except ValueError as e:
            raise SystemExit(f"--from: {e}") from None
    elif getattr(args, "shapes", None):
        specs = []
        for shape in args.shapes.split(","):
            try:
                m, n, k = (int(v) for v in shape.lower().split("x"))
            except ValueError:
                raise SystemExit(f"--shapes: {shape!r} is not MxNxK") from None
            for d in dtypes:
                ka, kb = _DTYPES[d]
                for x in layouts:
                    ak, bk = configs.LAYOUTS[x]
                    if configs.ELEMENT_BYTES[ka] != 2 and (ak, bk) != (True, True):
                        continue            # tf32/fp8: K-major operands (TN) only
                    spec = config_for_problem(m, n, k, ka, ak, bk, args.sms, b_kind=kb).spec
                    if spec not in specs:
                        specs.append(spec)
    else:
        specs = registry.all_specs(everything=everything)
        want_kinds = {_DTYPES[d] for d in dtypes}
        want_layouts = {configs.LAYOUTS[x] for x in layouts}
        kept = []
        for s in specs:
            d = dict(s.defines)
            if s.name == "gemm_kernel":
                ka, kb = configs.spec_kinds(s)
                if d.get("D_COLMAJOR"):
                    ka, kb = kb, ka                  # swap-AB kernels see b as A
                if (ka, kb) not in want_kinds:
                    continue
                kmaj = (bool(d["A_KMAJOR"]), bool(d["B_KMAJOR"]))
                if d.get("D_COLMAJOR"):
                    kmaj = (kmaj[1], kmaj[0])        # swap-AB kernels see B as A
                if kmaj not in want_layouts:
                    continue
            kept.append(s)
        specs = kept
    if getattr(args, "kernel", None):
        specs = [s for s in specs if any(k in s.label for k in args.kernel)]
    return specs


def cmd_warmup(args) -> int:
    from .warmup import warmup
    specs = _select_specs(args)
    report = warmup(specs, jobs=args.jobs, timeout=args.timeout, show_progress=not args.quiet)
    for o in report.repaired:
        print(f"REBUILT {o.spec.label}: its cache entry was unusable ({o.repaired})", file=sys.stderr)
    for o in report.failed:
        print(f"FAILED {o.spec.label}: {o.error.strip().splitlines()[0] if o.error.strip() else ''}",
              file=sys.stderr)
    print(report.summary())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_json(), f, indent=1)
    return 1 if report.failed else 0


def cmd_cache(args) -> int:
    from .cache import default_cache
    cache = default_cache()
    if args.action == "export":
        from .warmup import save_kernel_list
        if not args.file:
            raise SystemExit("cache export: name the file to write (python -m rawcoop cache export FILE)")
        specs, unknown = cache.specs()
        save_kernel_list(specs, args.file)
        print(f"wrote {len(specs)} kernel configurations to {args.file}"
              + (f" ({unknown} older entries without source/defines left out)" if unknown else ""))
        return 0
    if args.file:
        raise SystemExit(f"cache {args.action}: takes no file (only export does)")
    if args.action == "clear":
        n = cache.clear()
        print(f"removed {n} files from {cache.root}")
        return 0
    entries = cache.entries()
    print(f"cache dir  {cache.directory}")
    print(f"entries    {len(entries)}, {cache.size_bytes() / 1e6:.2f} MB")
    for e in entries:
        print(f"  {e.get('key', '?')[:12]}  {e.get('size', 0):8d} B  nvrtc {'.'.join(map(str, e.get('nvrtc', [])))}"
              f"  {e.get('label', e.get('kernel', '?'))}")
    return 0


def cmd_demo(args) -> int:
    from . import _cuda, device
    why = device.why_no_hopper()
    if why is not None:
        print(f"rawcoop demo needs a Hopper GPU: {why}", file=sys.stderr)
        return 1
    cp = _cuda.cupy()
    info = next(device.info(d) for d in range(device.gpu_count()) if device.info(d).cc == (9, 0))
    with cp.cuda.Device(info.ordinal):
        return _demo(cp, info)


def _demo(cp, info) -> int:
    import ml_dtypes
    import numpy as np

    import rawcoop
    print(f"rawcoop {rawcoop.__version__} on {info.name} ({info.sm_count} SMs)")
    rng = np.random.default_rng(0)
    src = cp.asarray(rng.standard_normal((4099, 4104)).astype(np.float16))
    t0 = time.perf_counter()
    out = rawcoop.replicate(src, 2)
    cp.cuda.get_current_stream().synchronize()
    ok = all(bool(cp.array_equal(out[r].view(cp.uint16), src.view(cp.uint16))) for r in range(2))
    print(f"replicate 4099x4104 fp16 through TMA multicast in clusters of 2: "
          f"{'bit-exact' if ok else 'MISMATCH'} ({(time.perf_counter() - t0) * 1e3:.1f} ms incl. compile/load)")
    a = cp.asarray(rng.standard_normal((2048, 2048)).astype(ml_dtypes.bfloat16))
    bt = cp.asarray(rng.standard_normal((2048, 2048)).astype(ml_dtypes.bfloat16))
    d = rawcoop.gemm(a, bt.T)
    ref = a.astype(cp.float32) @ bt.T.astype(cp.float32)
    err = float(cp.linalg.norm(d.astype(cp.float32) - ref) / cp.linalg.norm(ref))
    print(f"gemm 2048^3 bf16: relative Frobenius error vs fp32 {err:.2e}")
    return 0 if ok and err < 1e-2 else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rawcoop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("info", help="versions, GPUs, cache location and size")
    w = sub.add_parser("warmup", help="compile every registered kernel configuration into the cache (no GPU needed)")
    w.add_argument("--jobs", type=int, default=None, help="worker processes (default: number of CPUs)")
    w.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per configuration")
    w.add_argument("--kernel", action="append", help="only configurations whose label contains this (repeatable)")
    w.add_argument("--all", action="store_true", help="also the epilogue variants (C, bias, activations, fp32 out) "
                   "and the tf32/fp8 kernels")
    w.add_argument("--dtypes", help="comma list of bf16, fp16, tf32, e4m3, e5m2, e4m3xe5m2, e5m2xe4m3 (a x b) "
                   "(default bf16,fp16; with --all every one)")
    w.add_argument("--layouts", help="comma list of TN, NN, NT, TT (default all)")
    w.add_argument("--shapes", help="comma list of MxNxK: compile what rawcoop.gemm would pick for these")
    w.add_argument("--sms", type=int, default=132, help="SM count assumed by --shapes (default 132, H100/H200)")
    w.add_argument("--from", dest="from_list", metavar="FILE",
                   help="compile the configurations of a kernel list written by `cache export` (e.g. on the "
                        "machine that ran the application) instead of the registered set; --kernel narrows it")
    w.add_argument("--json", help="write a JSON report here")
    w.add_argument("--quiet", action="store_true", help="no progress bar")
    c = sub.add_parser("cache", help="inspect, clear or export the kernel cache")
    c.add_argument("action", choices=["info", "clear", "export"],
                   help="export FILE: write the cached configurations as a kernel list for `warmup --from FILE`")
    c.add_argument("file", nargs="?", help="(export) the kernel list to write")
    sub.add_parser("demo", help="run the kernels once on the GPU and check them")
    args = ap.parse_args(argv)
    from ._cuda import MissingCudaPackage
    from .device import NoGpuError
    try:
        if args.cmd is None:
            from . import device
            if device.has_hopper():
                return cmd_demo(args)
            print("no Hopper GPU here: warming the kernel cache instead (python -m rawcoop --help for more)")
            args = ap.parse_args(["warmup"])
        return {"info": cmd_info, "warmup": cmd_warmup, "cache": cmd_cache, "demo": cmd_demo}[args.cmd](args)
    except (MissingCudaPackage, NoGpuError) as e:
        # A missing package or GPU is a setup problem, not a bug: one line saying what to do.
        print(f"rawcoop {args.cmd}: {e}" if args.cmd else f"rawcoop: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
