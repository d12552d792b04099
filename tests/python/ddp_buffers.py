"""Python's DistributedDataParallel and its buffers, for tests/test_batchnorm_python.cpp.

The C++ test writes, into FOLDER, the initial weights of its BnNet (weights.pt, ddp::export_weights)
and the batches of every step and rank (inputs.pt: "x.<step>.<rank>.<micro>", "y...", the schedule,
lr and momentum). This script trains the twin of BnNet with torch.nn.parallel.DistributedDataParallel
on WORLD CPU processes over Gloo, through that schedule, twice: broadcast_buffers=True (PyTorch's
default) and False. Each rank writes what it ends with (state_dict and the outputs of the evaluation
steps) to python.<on|off>.rank<r>.pt, which the C++ ranks compare with their own.

    python3 ddp_buffers.py FOLDER WORLD
"""
import contextlib
import datetime
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

TRAIN, ACCUMULATE, EVALUATE = 0, 1, 2  # the schedule's steps (the C++ test's kTrain, ...)


class BnNet(nn.Module):
    """The twin of the C++ test's BnNet: same modules, names and forward. Input [N, 3, 6, 6]."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn2d = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 8)
        self.bn1d = nn.BatchNorm1d(8, momentum=None)  # cumulative average: counts num_batches_tracked
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        h = F.relu(self.bn2d(self.conv(x)))
        h = F.relu(self.bn1d(self.fc(torch.flatten(h, 1))))
        return self.out(h)


def worker(rank, world, folder):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/python-store", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    inputs = torch.load(f"{folder}/inputs.pt")
    schedule = inputs["schedule"].tolist()
    for broadcast in (True, False):
        model = BnNet()
        model.load_state_dict(torch.load(f"{folder}/weights.pt"))
        ddp_model = nn.parallel.DistributedDataParallel(model, broadcast_buffers=broadcast)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=inputs["lr"].item(), momentum=inputs["momentum"].item())
        outputs = {}
        for step, kind in enumerate(schedule):
            if kind == EVALUATE:
                ddp_model.eval()
                with torch.no_grad():
                    outputs[f"eval.{step}"] = ddp_model(inputs[f"x.{step}.{rank}.0"])
                ddp_model.train()
                continue
            optimizer.zero_grad()
            micro = 2 if kind == ACCUMULATE else 1
            for m in range(micro):
                quiet = ddp_model.no_sync() if m < micro - 1 else contextlib.nullcontext()
                with quiet:
                    out = ddp_model(inputs[f"x.{step}.{rank}.{m}"])
                    F.mse_loss(out, inputs[f"y.{step}.{rank}.{m}"]).backward()
            optimizer.step()
        result = {name: t.detach().clone() for name, t in model.state_dict().items()}
        result.update(outputs)
        torch.save(result, f"{folder}/python.{'on' if broadcast else 'off'}.rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    mp.spawn(worker, args=(int(sys.argv[2]), sys.argv[1]), nprocs=int(sys.argv[2]), join=True)
