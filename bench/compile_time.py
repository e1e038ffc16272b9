"""Cold NVRTC compile time per registered kernel configuration, plus the
options study (-minimal, --pch).  Runs on the CPU; no GPU needed.

    python bench/compile_time.py [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rawcoop import compiler, registry  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    print(f"NVRTC {compiler.nvrtc_version()}")
    base = compiler.base_options()
    variants = {"default": base,
                "no -minimal": [o for o in base if o != "-minimal"]}
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as td:
        os.chdir(td)  # --pch writes a .pch file into the working directory
        variants["default + --pch"] = base + ["--pch"]
        for spec in registry.all_specs():
            row = {"kernel": spec.label}
            for name, opts in variants.items():
                times = []
                for _ in range(args.repeat):
                    r = compiler.compile_spec(spec, options=list(opts))
                    times.append(r.seconds)
                row[name] = statistics.median(times)
            row.update(compiler.resource_usage(r.log))
            rows.append(row)
            print(f"{spec.label:80s} " + "  ".join(f"{k}: {row[k]*1e3:7.1f} ms" for k in variants))
        os.chdir(cwd)
    if args.json:
        from rawcoop.bench import write_json
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
