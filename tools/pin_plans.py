"""Write the planner's choices: a frozen table of problems (tests/cpu/plans-h200.json) and the kernels it picks
over a grid of LLM shapes (rawcoop/plan/warm_h200.json, part of what ``rawcoop warmup`` compiles).

    python tools/pin_plans.py            # after a deliberate planner or cost-model change; review the diff

tests/cpu/test_planner.py compares the planner against both files, so a change of choice shows up in review as a
diff.  The problems: LLM projection shapes (decode to prefill M, square, long K), ragged sizes,
all four layouts, fp16/bf16, tf32, fp8 per-tensor and block-scaled, batches and epilogues.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rawcoop.plan.candidates import Problem  # noqa: E402
from rawcoop.plan.kernel_config import BF16, E4M3, E5M2, FP16, LAYOUTS, TF32  # noqa: E402
from rawcoop.plan.select import choose  # noqa: E402

OUT = ROOT / "tests" / "cpu" / "plans-h200.json"
WARM = ROOT / "rawcoop" / "plan" / "warm_h200.json"
GRID_M = (1, 16, 32, 64, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384)
GRID_N = (1024, 2048, 2560, 4096, 5120, 7168, 8192, 14336, 28672)
GRID_K = (1024, 2048, 4096, 7168, 8192, 14336)
"""The warm grid: decode to prefill token counts x the projection widths of common LLMs."""
SHAPES = [(1, 4096, 4096), (16, 7168, 2048), (64, 4096, 14336), (128, 8192, 8192), (192, 7168, 7168),
          (256, 16384, 4096), (512, 12288, 4096), (1024, 1024, 65536), (2048, 2048, 2048), (3000, 5000, 2504),
          (4096, 4096, 4096), (8192, 8192, 8192), (777, 1029, 4097), (5416, 6280, 1400), (129, 3000, 777)]


def problems() -> list[tuple[str, Problem]]:
    out = []
    for m, n, k in SHAPES:
        for layout, kmajor in LAYOUTS.items():
            out.append((f"bf16 {layout} {m}x{n}x{k}", Problem(m, n, k, 1, (BF16, BF16), kmajor)))
        out.append((f"fp16 TN {m}x{n}x{k}", Problem(m, n, k, 1, (FP16, FP16), (True, True))))
        out.append((f"e4m3 TN {m}x{n}x{k}", Problem(m, n, k, 1, (E4M3, E4M3), (True, True))))
        out.append((f"e4m3xe5m2 TN {m}x{n}x{k}", Problem(m, n, k, 1, (E4M3, E5M2), (True, True))))
        out.append((f"e4m3 block TN {m}x{n}x{k}", Problem(m, n, k, 1, (E4M3, E4M3), (True, True), block=True)))
        out.append((f"tf32 TN {m}x{n}x{k}", Problem(m, n, k, 1, (TF32, TF32), (True, True))))
    out += [("bf16 TN 8x512x512x1024 batch", Problem(512, 512, 1024, 8, (BF16, BF16), (True, True))),
            ("bf16 TN 4096x4096x4096 C fp32 bias gelu",
             Problem(4096, 4096, 4096, 1, (BF16, BF16), (True, True), "float32", True, True, 1, "gelu")),
            ("fp16 NN 96x2048x4096 C col-major",
             Problem(96, 2048, 4096, 1, (FP16, FP16), (False, True), "float16", True, False)),
            ("bf16 TN 4096x4096x4104 misaligned pitch", Problem(4096, 4096, 4104, 1, (BF16, BF16), (True, True)))]
    return out


def table() -> dict:
    rows = {}
    for name, p in problems():
        c = choose(p)
        d = c.dec
        rows[name] = dict(plan=c.label, spec=c.cfg.spec.label,
                          decomposition=[d.tiles, d.k_blocks, d.tiles_dp, d.splits, d.sk_ctas], grid=c.grid)
    return rows


def grid_problems():
    """Every (kind pair, layouts, block-scaled) of the warm grid: fp16/bf16 in all four layouts, tf32, fp8
    per-tensor (both kinds) and block-scaled e4m3 in TN, with the plain epilogue and the default output."""
    kinds = [((k, k), kmajor, False) for k in (FP16, BF16) for kmajor in LAYOUTS.values()]
    kinds += [((TF32, TF32), (True, True), False), ((E4M3, E4M3), (True, True), False),
              ((E5M2, E5M2), (True, True), False), ((E4M3, E4M3), (True, True), True)]
    for pair, kmajor, block in kinds:
        for m in GRID_M:
            for n in GRID_N:
                for k in GRID_K:
                    yield Problem(m, n, k, 1, pair, kmajor, block=block)


def warm_configs() -> list[dict]:
    """The distinct configurations the planner picks over the warm grid, as GemmConfig fields."""
    seen = {}
    for p in grid_problems():
        cfg = choose(p).cfg
        seen.setdefault(cfg.spec, cfg)
    return sorted((dataclasses.asdict(c) for c in seen.values()), key=lambda d: json.dumps(d, sort_keys=True))


def main() -> int:
    OUT.write_text(json.dumps(table(), indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    WARM.write_text(json.dumps(dict(command="python tools/pin_plans.py", configs=warm_configs()), indent=0)
                    + "\n")
    print(f"wrote {WARM.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
