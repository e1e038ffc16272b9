"""Write the planner's choices for a frozen table of problems to tests/cpu/plans-h200.json.

    python tools/pin_plans.py            # after a deliberate planner or cost-model change; review the diff

tests/cpu/test_planner.py compares the planner against this file, so a change of choice shows up in review as a
diff of this table.  The problems: LLM projection shapes (decode to prefill M, square, long K), ragged sizes,
all four layouts, fp16/bf16, tf32, fp8 per-tensor and block-scaled, batches and epilogues.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rawcoop.plan.candidates import Problem  # noqa: E402
from rawcoop.plan.kernel_config import BF16, E4M3, E5M2, FP16, LAYOUTS, TF32  # noqa: E402
from rawcoop.plan.select import choose  # noqa: E402

OUT = ROOT / "tests" / "cpu" / "plans-h200.json"
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


def main() -> int:
    OUT.write_text(json.dumps(table(), indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
