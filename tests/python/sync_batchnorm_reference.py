"""What SyncBatchNorm must compute, in Python, for tests/test_batchnorm_python.cpp (and the GPU tests).

The C++ test writes FOLDER/inputs.pt: per step s and rank r a batch "x.<s>.<r>" and an output gradient
"dy.<s>.<r>" (uneven sizes, an empty batch allowed), "eval.<r>" batches, the layer's starting "weight",
"bias", "running_mean", "running_var", and its "momentum" (negative: None) and "affine".

  batchnorm  FOLDER        Python's BatchNorm{1,2,3}d over the concatenation of every rank's batch
                           (what SyncBatchNorm computes, on the CPU): writes FOLDER/python.pt with the
                           output "y.<s>.<r>" and input gradient "gx.<s>.<r>" of each rank's part, the
                           weight and bias gradients "gw.<s>", "gb.<s>" (all ranks' together), the
                           final running statistics and the evaluation outputs "eval.<r>".
  sync  FOLDER BACKEND     torch.nn.SyncBatchNorm itself, one process per rank on CUDA (rank r on GPU
                           r % count; Gloo lets ranks share one GPU): each writes FOLDER/python.rank<r>.pt
                           with the same keys, its own (local) "gw.<s>", "gb.<s>".

The loss of step s is sum(y * dy) over all ranks, so the gradients are those of one objective.
"""
import datetime
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def world_and_steps(inputs):
    world = 1 + max(int(k.split(".")[2]) for k in inputs if k.startswith("x."))
    steps = 1 + max(int(k.split(".")[1]) for k in inputs if k.startswith("x."))
    return world, steps


def make_layer(inputs, sync=False):
    dims = inputs["x.0.0"].dim()
    channels = inputs["x.0.0"].shape[1]
    momentum = inputs["momentum"].item()
    momentum = None if momentum < 0 else momentum
    affine = bool(inputs["affine"].item())
    kind = nn.SyncBatchNorm if sync else {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[dims]
    layer = kind(channels, momentum=momentum, affine=affine).to(inputs["x.0.0"].dtype)
    with torch.no_grad():
        for name in ("weight", "bias", "running_mean", "running_var"):
            if getattr(layer, name) is not None:
                getattr(layer, name).copy_(inputs[name])
    return layer


def batchnorm(folder):
    inputs = torch.load(f"{folder}/inputs.pt")
    world, steps = world_and_steps(inputs)
    layer = make_layer(inputs)
    result = {}
    for s in range(steps):
        parts = [inputs[f"x.{s}.{r}"] for r in range(world)]
        x = torch.cat(parts).requires_grad_(True)
        y = layer(x)
        (y * torch.cat([inputs[f"dy.{s}.{r}"] for r in range(world)])).sum().backward()
        start = 0
        for r, part in enumerate(parts):
            result[f"y.{s}.{r}"] = y[start:start + len(part)].detach().clone()
            result[f"gx.{s}.{r}"] = x.grad[start:start + len(part)].clone()
            start += len(part)
        if layer.affine:
            result[f"gw.{s}"] = layer.weight.grad.clone()
            result[f"gb.{s}"] = layer.bias.grad.clone()
            layer.weight.grad = layer.bias.grad = None
    finish(layer, inputs, world, result)
    torch.save(result, f"{folder}/python.pt")


def finish(layer, inputs, world, result, rank=None):
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        result[name] = getattr(layer, name).detach().cpu().clone()
    layer.eval()
    with torch.no_grad():
        for r in range(world) if rank is None else [rank]:
            result[f"eval.{r}"] = layer(inputs[f"eval.{r}"].to(layer.running_mean.device)).cpu()


def sync_worker(rank, world, folder, backend):
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{folder}/python-store", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    inputs = torch.load(f"{folder}/inputs.pt")
    _, steps = world_and_steps(inputs)
    layer = make_layer(inputs, sync=True).to(device)
    result = {}
    for s in range(steps):
        x = inputs[f"x.{s}.{rank}"].to(device).requires_grad_(True)
        y = layer(x)
        (y * inputs[f"dy.{s}.{rank}"].to(device)).sum().backward()
        result[f"y.{s}.{rank}"] = y.detach().cpu()
        # An empty batch gets no input gradient from SyncBatchNorm (None: zeros).
        result[f"gx.{s}.{rank}"] = x.grad.cpu() if x.grad is not None else torch.zeros_like(x).cpu()
        if layer.affine:
            for key, p in (("gw", layer.weight), ("gb", layer.bias)):
                result[f"{key}.{s}"] = p.grad.cpu() if p.grad is not None else torch.zeros_like(p).cpu()
                p.grad = None
    finish(layer, inputs, world, result, rank)
    torch.save(result, f"{folder}/python.rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "batchnorm":
        batchnorm(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "sync":
        world, _ = world_and_steps(torch.load(f"{sys.argv[2]}/inputs.pt"))
        mp.spawn(sync_worker, args=(world, sys.argv[2], sys.argv[3]), nprocs=world, join=True)
    else:
        sys.exit(__doc__)
