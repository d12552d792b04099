#!/usr/bin/env python3
"""bench/python_fsdp.py: PyTorch's own FSDP2 (fully_shard) on fsdp_bench's workload, the reference
beside build/bin/fsdp_bench. CPU ranks over Gloo with init_device_mesh("cpu", (N,)).

    torchrun --standalone --nproc_per_node=2 bench/python_fsdp.py [--checkpoint] [--no-header]

Each block is one fully_shard unit, then the root; AdamW (foreach). Prints fsdp_bench's row: bytes
held per rank between steps (local shards of the parameters, their gradients, AdamW's moments),
the largest unit, peak RSS (VmHWM) and its growth, the median step time of the slowest rank.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.utils.checkpoint import checkpoint

MIB = 1024.0 * 1024.0


def resident():
    now = peak = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) * 1024
            if line.startswith("VmHWM:"):
                peak = int(line.split()[1]) * 1024
    return now, peak


class Block(nn.Module):
    def __init__(self, d, ckpt):
        super().__init__()
        self.ln, self.fc, self.proj, self.ckpt = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d), ckpt

    def body(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x))))

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=False) if self.ckpt else self.body(x)


class Stack(nn.Module):
    def __init__(self, d, layers, ckpt):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(Block(d, ckpt) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, 10)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.head(self.ln_f(h))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--no-header", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    before = resident()[0]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = Stack(a.width, a.layers, a.checkpoint)
    numel = sum(q.numel() for q in model.parameters())
    largest = max(sum(q.numel() for q in b.parameters()) for b in model.blocks) * 4
    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
    times, loss = [], None
    for step in range(a.warmup + a.steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(a.batch_size, a.seq, a.width, generator=g)
        y = torch.randint(0, 10, (a.batch_size * a.seq,), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x).view(-1, 10), y)
        loss.backward()
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    local = lambda t: t.to_local() if hasattr(t, "to_local") else t  # noqa: E731
    held = sum(local(q).nbytes + (local(q.grad).nbytes if q.grad is not None else 0) for q in model.parameters())
    for state in opt.state.values():
        held += sum(local(v).nbytes for k, v in state.items() if k in ("exp_avg", "exp_avg_sq"))
    peak = resident()[1]
    vals = torch.tensor([peak, peak - before, held], dtype=torch.float64)
    dist.all_reduce(vals, op=dist.ReduceOp.MAX)
    finite = torch.tensor([1.0 if torch.isfinite(loss).item() else 0.0])
    dist.all_reduce(finite, op=dist.ReduceOp.MIN)
    if rank == 0:
        if not a.no_header:
            print(f"# python_fsdp: torch {torch.__version__}, gloo, cpu, {a.threads} thread(s) per rank; "
                  f"{numel} parameters ({numel * 4 / MIB:.1f} MiB float32)")
            print("# ranks  strategy  params+grads+state  largest unit  peak RSS  RSS growth  step median")
        name = "py-fsdp-ckpt" if a.checkpoint else "py-fsdp"
        print(f"{world:7d} {name:>9s} {vals[2] / MIB:19.2f} {largest / MIB:13.2f} {vals[0] / MIB:9.0f} "
              f"{vals[1] / MIB:11.0f} {statistics.median(slowest.tolist()) * 1e3:12.1f}")
        print("# OK" if finite.item() == 1.0 else "# FAILED: the loss is not finite", flush=True)
    ok = finite.item() == 1.0
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
