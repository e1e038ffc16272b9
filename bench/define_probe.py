"""``python -m rawcoop bench`` with extra preprocessor defines on the GEMM
kernels: for kernel experiments that live behind a ``#define`` switch in
kernels/gemm.cu (e.g. ``BS_SB_AHEAD=1``) and have no
Python option.  The defines join every matching configuration's KernelSpec,
so they are compiled (and cached) as kernels of their own.

    PYTHONPATH=$PWD python bench/define_probe.py --defines BS_SB_AHEAD=1 --block-scaled-only -- \\
        --suite fp8 --fp8-shapes 1024x1024x1024 --fp8-block --variants auto,block_n=64 --rounds 5

Everything after ``--`` goes to the bench unchanged.  Compare against the same
command without ``--defines`` (one process per setting; rows carry rel err,
so a wrong experimental kernel shows there too).  :func:`extra_defines` is the
same patch as a context manager, for tests.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_defines(text: str) -> tuple[tuple[str, int], ...]:
    """``"A=1,B=2"`` -> (("A", 1), ("B", 2)); names are C identifiers, values integers."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"bad define {item!r}: expected NAME=INTEGER")
        try:
            out.append((name, int(value)))
        except ValueError:
            raise ValueError(f"bad define {item!r}: the value must be an integer") from None
    return tuple(out)


@contextlib.contextmanager
def extra_defines(defines, block_scaled_only: bool = False):
    """Within the block, ``GemmConfig.spec`` carries ``defines`` too (only for
    block-scaled configurations when ``block_scaled_only``), and rawcoop.gemm's
    plan cache starts empty (plans hold their kernel), before and after."""
    import importlib

    from rawcoop import gemm_configs
    from rawcoop.compiler import KernelSpec
    G = importlib.import_module("rawcoop.gemm")
    extra = tuple(defines)
    clash = {k for k, _ in extra} & {"BLOCK_N", "STAGES", "IN_KIND", "IN_KIND_B", "SCALE_MODE", "PINGPONG"}
    if clash:
        raise ValueError(f"define_probe must not override configuration defines: {sorted(clash)}")
    prop = gemm_configs.GemmConfig.spec

    def spec(self):
        sp = prop.fget(self)
        if extra and (self.scale_mode == 1 or not block_scaled_only):
            sp = KernelSpec(sp.source, sp.name, tuple(sorted(sp.defines + extra)))
        return sp
    G._PLANS.clear()
    gemm_configs.GemmConfig.spec = property(spec)
    try:
        yield
    finally:
        gemm_configs.GemmConfig.spec = prop
        G._PLANS.clear()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog="bench/define_probe.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--defines", required=True, type=parse_defines, help="NAME=INT[,NAME=INT...]")
    ap.add_argument("--block-scaled-only", action="store_true",
                    help="add the defines to block-scaled fp8 kernels only (scale_mode='block')")
    args = ap.parse_args(argv)
    from rawcoop.bench import main as bench_main
    print(f"define_probe: extra defines {dict(args.defines)}"
          + (" on block-scaled kernels only" if args.block_scaled_only else " on every GEMM kernel"), flush=True)
    with extra_defines(args.defines, args.block_scaled_only):
        return bench_main(rest, prog="bench/define_probe.py ... --")


if __name__ == "__main__":
    sys.exit(main())
