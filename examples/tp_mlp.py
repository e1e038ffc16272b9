"""A tensor-parallel MLP on rawcoop's layers under torch.distributed (NCCL,
one process per GPU): the up projection column-parallel (each rank holds
``intermediate / world`` rows of W1 and computes its slice of the hidden
activations, no communication), SiLU, the down projection row-parallel (each
rank holds the matching ``intermediate / world`` columns of W2 and computes
a partial sum of the output), then one all-reduce and the bias.

    python examples/tp_mlp.py                      # one process per visible GPU (spawned here)
    torchrun --nproc-per-node 2 examples/tp_mlp.py # or under torchrun

Every rank checks its output against the unsharded MLP in float64 and in
torch's bf16; the script exits 1 if rawcoop's is off by more than bf16 noise.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch import nn

import rawcoop.torch as rt


class ColumnParallelLinear(nn.Module):
    """Rows ``rank·n/world ..`` of ``full``'s weight (and bias): this rank's slice of the outputs."""

    def __init__(self, full: nn.Linear, rank: int, world: int):
        super().__init__()
        n = full.out_features // world
        self.inner = rt.Linear(full.in_features, n, bias=full.bias is not None, device=full.weight.device,
                               dtype=full.weight.dtype)
        with torch.no_grad():
            self.inner.weight.copy_(full.weight[rank * n:(rank + 1) * n])
            if full.bias is not None:
                self.inner.bias.copy_(full.bias[rank * n:(rank + 1) * n])

    def forward(self, x):
        return self.inner(x)


class RowParallelLinear(nn.Module):
    """Columns ``rank·k/world ..`` of ``full``'s weight: a partial sum, all-reduced, then the bias once."""

    def __init__(self, full: nn.Linear, rank: int, world: int, group=None):
        super().__init__()
        k = full.in_features // world
        self.group = group
        self.inner = rt.Linear(k, full.out_features, bias=False, device=full.weight.device, dtype=full.weight.dtype)
        with torch.no_grad():
            self.inner.weight.copy_(full.weight[:, rank * k:(rank + 1) * k])
        self.bias = None if full.bias is None else nn.Parameter(full.bias.detach().clone())

    def forward(self, x):
        y = self.inner(x)                      # rawcoop, on torch's current stream: NCCL orders after it
        dist.all_reduce(y, group=self.group)
        return y if self.bias is None else y + self.bias


class TensorParallelMLP(nn.Module):
    def __init__(self, up: nn.Linear, down: nn.Linear, rank: int, world: int):
        super().__init__()
        self.up = ColumnParallelLinear(up, rank, world)
        self.down = RowParallelLinear(down, rank, world)

    def forward(self, x):
        return self.down(nn.functional.silu(self.up(x)))


def _rel(a, ref) -> float:
    return float(torch.linalg.norm((a.double() - ref).flatten()) / torch.linalg.norm(ref.flatten()))


def worker(rank: int, world: int, port: int, args) -> float:
    """Build, run and check the MLP on this rank; returns the relative error against float64."""
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dev = torch.device("cuda", local)
    torch.manual_seed(0)                       # the same full weights and input on every rank
    up = nn.Linear(args.hidden, args.intermediate).to(dev, torch.bfloat16)
    down = nn.Linear(args.intermediate, args.hidden).to(dev, torch.bfloat16)
    x = torch.randn(args.tokens, args.hidden, device=dev, dtype=torch.bfloat16)
    tp = TensorParallelMLP(up, down, rank, world)
    with torch.no_grad():
        y = tp(x)
        ref_bf16 = down(nn.functional.silu(up(x)))
        ref64 = nn.functional.linear(nn.functional.silu(nn.functional.linear(
            x.double(), up.weight.double(), up.bias.double())), down.weight.double(), down.bias.double())
    torch.cuda.synchronize()
    err, err_torch = _rel(y, ref64), _rel(ref_bf16, ref64)
    gathered = [torch.empty_like(y) for _ in range(world)]
    dist.all_gather(gathered, y)
    same = all(torch.equal(g, y) for g in gathered)
    if rank == 0:
        print(f"tp_mlp: world {world}, {args.tokens}x{args.hidden} -> {args.intermediate} -> {args.hidden} bf16; "
              f"relative error vs float64 {err:.2e} (torch bf16 unsharded: {err_torch:.2e}); ranks agree: {same}")
    ok = same and err < 2e-2
    dist.barrier()
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(f"rank {rank}: relative error {err:.2e}, ranks agree: {same}")
    return err


def _spawned(rank: int, world: int, port: int, args) -> None:
    worker(rank, world, port, args)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=None, help="processes (GPUs); default: every visible GPU")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--intermediate", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args(argv)
    if "RANK" in os.environ:                  # under torchrun
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        worker(dist.get_rank(), dist.get_world_size(), 0, args)
        return 0
    world = args.nproc or torch.cuda.device_count()
    if world < 1 or args.intermediate % world:
        print(f"tp_mlp: need 1 or more GPUs dividing --intermediate {args.intermediate}; have {world}",
              file=sys.stderr)
        return 1
    torch.multiprocessing.spawn(_spawned, args=(world, _free_port(), args), nprocs=world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
