"""Whole-model forward time of a transformers Llama (random weights from a
config, bf16, examples/llama_rawcoop.py) on rawcoop's GEMMs
(rawcoop.torch.swap_linear) against the same model on torch's, in one
process, alternating rounds; eager, and with ``--compile`` also under
torch.compile (both models compiled the same way).

    PYTHONPATH=$PWD python bench/torch_model.py [--hidden 4096] [--layers 4] [--batch 8] [--seq 512]
        [--rounds 7] [--iters 20] [--compile] [--json out.json]

Times are CUDA-event milliseconds per forward (no_grad, use_cache=False) over
``--iters`` back-to-back forwards per round after a warm-up; the verdict is
the median over rounds of torch time / rawcoop time (> 1: rawcoop faster).
The logits' relative error between the two is printed with them.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _example():
    spec = importlib.util.spec_from_file_location("llama_rawcoop", ROOT / "examples" / "llama_rawcoop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def forward_ms(torch, model, ids, iters: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        start.record()
        for _ in range(iters):
            model(ids, use_cache=False)
        end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/torch_model.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also time both models under torch.compile")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args(argv)
    from bench.baselines import import_torch
    torch, why = import_torch()
    if torch is None:
        print(f"bench/torch_model.py: {why}; nothing was measured.", file=sys.stderr)
        return 1
    try:
        import transformers  # noqa: F401
    except ImportError:
        print("bench/torch_model.py: transformers is not installed; nothing was measured.", file=sys.stderr)
        return 1
    import rawcoop.torch as rt
    ex = _example()
    plain = ex.llama(args.hidden, args.layers, args.vocab)
    ours = copy.deepcopy(plain)
    swapped = rt.swap_linear(ours)
    ids = torch.randint(args.vocab, (args.batch, args.seq), device="cuda")
    err = ex.rel_err(ex.logits(ours, ids), ex.logits(plain, ids))
    variants = {"eager": (plain, ours)}
    if args.compile:
        variants["compiled"] = (torch.compile(plain), torch.compile(ours))
    res = {"model": dict(hidden=args.hidden, layers=args.layers, vocab=args.vocab, batch=args.batch, seq=args.seq,
                         swapped=len(swapped)), "logits rel err rawcoop vs torch": err}
    print(f"Llama hidden {args.hidden}, {args.layers} layers, batch {args.batch} x seq {args.seq}, bf16; "
          f"{len(swapped)} linear layers on rawcoop; logits rel err vs torch {err:.2e}")
    for name, (theirs, mine) in variants.items():
        for m in (theirs, mine):                    # warm-up: compiles, plans, autotuning
            forward_ms(torch, m, ids, 3)
        t, r = [], []
        for i in range(args.rounds):
            order = [(t, theirs), (r, mine)] if i % 2 == 0 else [(r, mine), (t, theirs)]
            for times, m in order:
                times.append(forward_ms(torch, m, ids, args.iters))
        ratio = statistics.median(a / b for a, b in zip(t, r))
        res[name] = {"torch ms": t, "rawcoop ms": r, "torch / rawcoop, median of rounds": ratio}
        print(f"{name:9s} forward: torch {statistics.median(t):8.3f} ms, rawcoop {statistics.median(r):8.3f} ms, "
              f"torch/rawcoop {ratio:.3f} (rounds {min(a / b for a, b in zip(t, r)):.3f}-"
              f"{max(a / b for a, b in zip(t, r)):.3f})")
    if args.json:
        from bench.report import write_json
        write_json(args.json, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
