"""A HuggingFace transformers Llama (random weights from a config) whose
nn.Linear layers run on rawcoop: ``rawcoop.torch.swap_linear(model)`` turns
them into ``rawcoop.torch.Linear`` in place (q/k/v/o, gate/up/down, lm_head).

    python examples/llama_rawcoop.py [--hidden 1024] [--layers 2] [--batch 4] [--seq 256]

It prints the logits' relative error against the same model on torch's GEMMs
(both bf16) and against an fp32 copy, then one training step (AdamW) of each
with its loss.  bench/torch_model.py times the forward pass.  Needs
``transformers`` and a Hopper GPU.
"""
from __future__ import annotations

import argparse
import copy
import sys

import torch

import rawcoop.torch as rt


def llama(hidden: int = 1024, layers: int = 2, vocab: int = 32000, seed: int = 0, dtype=torch.bfloat16):
    """A LlamaForCausalLM with random weights (``seed``) on the GPU in ``dtype``, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM
    heads = max(1, hidden // 128)
    config = LlamaConfig(hidden_size=hidden, intermediate_size=(hidden * 8 // 3 + 255) // 256 * 256,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                         vocab_size=vocab, max_position_embeddings=4096)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to("cuda", dtype).eval()


def rel_err(x, ref) -> float:
    return float(torch.linalg.norm((x.double() - ref.double()).flatten()) / torch.linalg.norm(ref.double().flatten()))


def logits(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def train_step(model, ids, lr: float = 1e-4) -> float:
    """One AdamW step of next-token loss on ``ids``; returns the loss before the step."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    loss = model(ids, labels=ids, use_cache=False).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()
    return float(loss)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args(argv)
    torch_model = llama(args.hidden, args.layers, args.vocab)
    fp32 = copy.deepcopy(torch_model).float()
    model = copy.deepcopy(torch_model)
    swapped = rt.swap_linear(model)
    print(f"swapped {len(swapped)} nn.Linear layers to rawcoop.torch.Linear ({', '.join(swapped[:7])}, ...)")
    ids = torch.randint(args.vocab, (args.batch, args.seq), device="cuda", generator=torch.Generator("cuda"))
    ref32 = logits(fp32, ids)
    ours, theirs = logits(model, ids), logits(torch_model, ids)
    print(f"logits {tuple(ours.shape)}: rawcoop vs torch bf16 {rel_err(ours, theirs):.2e}; vs fp32: rawcoop "
          f"{rel_err(ours, ref32):.2e}, torch bf16 {rel_err(theirs, ref32):.2e}")
    print(f"training step: loss rawcoop {train_step(model, ids):.4f}, torch {train_step(torch_model, ids):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
