#!/usr/bin/env python3
"""The Python reference for build/bin/ddp_train_bench: the same workloads (model, data, batch,
optimizer, loss), threads and step counts, trained with torch.nn.parallel.DistributedDataParallel.
Prints the same table, so bench/compare can set the two side by side.

    torchrun --standalone --nproc_per_node=2 bench/python_ddp.py --workload synthetic --threads 1

Workloads (per rank):
  synthetic  Linear(20,1) regression on 2048x20 samples, batch 32, SGD lr 1e-2, MSE
  cnn        the MNIST CNN, batch 64, Adadelta lr 1.0, NLL, random [N,1,28,28] images
             (or --dataset fashion-mnist)
  mlp        10 x (Linear(1024,1024)+ReLU) + Linear(1024,10) (10.5 M parameters), batch 32,
             SGD lr 1e-2, cross-entropy
--precision bf16|fp16: the forward and the loss under torch.autocast (bfloat16 or float16), float32
parameters and optimizer state; fp16 also with torch.amp.GradScaler (scale, step, update). On
CUDA the fp16 runs use SGD's fused kernel (fused=True), to which GradScaler hands found_inf on the
device; Adadelta has none, so GradScaler reads found_inf on the host there (one synchronization
per step, which the table's sync count shows).
A timed step = cut the batch from the in-memory data, zero_grad, forward, loss, backward (with
DDP's allreduce), optimizer step. The step time is the slowest rank's; the table shows the median.
Like-for-like with ddp_train_bench on a GPU: data and each epoch's order on the device (the order
copied from pinned memory without blocking), DDP with gradient_as_bucket_view=True (the C++ DDP's
gradients are bucket views), foreach optimizers on CUDA (per tensor on the CPU, as in C++),
cudnn.benchmark off and TF32 set by --tf32, steps timed with CUDA events (no synchronization
inside a step), host synchronizations inside the timed steps counted with
torch.cuda.set_sync_debug_mode("warn").
"""

import argparse
import datetime
import gzip
import math
import os
import platform
import socket
import statistics
import struct
import sys
import time
import warnings

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

DEFAULT_BATCH = {"synthetic": 32, "cnn": 64, "mlp": 32}
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530


class LinearRegressor(nn.Module):
    def __init__(self, features=20):
        super().__init__()
        self.fc = nn.Linear(features, 1)

    def forward(self, x):
        return self.fc(x)


class MnistCnn(nn.Module):
    """The pytorch/examples MNIST net (ddpw::MnistCnn)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = torch.flatten(self.dropout1(x), 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def make_mlp(width=1024, hidden_layers=10, classes=10):
    layers = []
    for _ in range(hidden_layers):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find_idx(data_dir, stem):
    for name in (stem, stem + ".gz"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    sys.exit(f"python_ddp.py: error: {stem}[.gz] not found in {data_dir} "
             f"(fix: apt-get install dataset-fashion-mnist, or pass --data-dir)")


def make_workload(args, device):
    """Returns (inputs, targets, model, optimizer, loss_fn); inputs/targets hold all samples."""
    g = torch.Generator().manual_seed(args.seed)
    foreach = device.type == "cuda"  # torch.optim's own default, made explicit (C++ does the same)
    # fp16 on CUDA: the fused SGD, which takes GradScaler's found_inf without a host read.
    sgd_kind = {"fused": True} if args.precision == "fp16" and device.type == "cuda" else {"foreach": foreach}
    if args.workload == "synthetic":
        x = torch.rand(2048, 20, generator=g)
        w, b = torch.linspace(-1, 1, 20), 0.5
        y = (x @ w + b + 0.01 * torch.randn(2048, generator=g)).unsqueeze(1)
        model = LinearRegressor(20)
        make_opt = lambda params: torch.optim.SGD(params, lr=1e-2, **sgd_kind)
        loss_fn = F.mse_loss
    elif args.workload == "cnn":
        if args.dataset == "fashion-mnist":
            images = read_idx(find_idx(args.data_dir, "train-images-idx3-ubyte"))
            labels = read_idx(find_idx(args.data_dir, "train-labels-idx1-ubyte"))
            x = (torch.from_numpy(images.copy()).float().div_(255).sub_(FASHION_MEAN).div_(FASHION_STD)
                 .unsqueeze(1))
            y = torch.from_numpy(labels.astype(np.int64))
        else:
            x = torch.rand(args.samples, 1, 28, 28, generator=g)
            y = torch.randint(0, 10, (args.samples,), generator=g)
        model = MnistCnn()
        make_opt = lambda params: torch.optim.Adadelta(params, lr=1.0, foreach=foreach)
        loss_fn = F.nll_loss
    else:  # mlp
        x = torch.rand(args.samples, 1024, generator=g)
        y = torch.randint(0, 10, (args.samples,), generator=g)
        model = make_mlp()
        make_opt = lambda params: torch.optim.SGD(params, lr=1e-2, **sgd_kind)
        loss_fn = F.cross_entropy
    return x.to(device), y.to(device), model.to(device), make_opt, loss_fn


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", choices=["synthetic", "cnn", "mlp"], default="synthetic")
    p.add_argument("--dataset", choices=["random", "fashion-mnist"], default="random",
                   help="cnn only: random images or the Fashion-MNIST training set")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--samples", type=int, default=4096, help="random cnn/mlp samples in memory")
    p.add_argument("--batch-size", type=int, default=0, help="per rank (0: the workload's default)")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--steps", type=int, default=100, help="timed steps")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP bucket_cap_mb")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300, help="seconds before a collective fails")
    p.add_argument("--no-header", action="store_true", help="print only the result row")
    p.add_argument("--tf32", choices=["off", "on"], default="off",
                   help="CUDA: TensorFloat-32 in matmuls and convolutions (cudnn.benchmark stays off)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="bf16/fp16: torch.autocast around the forward and the loss; fp16 with GradScaler")
    args = p.parse_args()
    for name in ("threads", "steps", "samples"):
        if getattr(args, name) < 1:
            sys.exit(f"python_ddp.py: error: --{name} must be >= 1 (fix: pass a positive number)")
    if "RANK" not in os.environ:
        sys.exit("python_ddp.py: error: no torchrun environment (fix: launch with "
                 "torchrun --standalone --nproc_per_node=N bench/python_ddp.py ...)")

    torch.set_num_threads(args.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
        # The same switches ddp_train_bench sets (at::globalContext() behind both).
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"
        torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout),
                            device_id=device if use_cuda else None)

    batch = args.batch_size or DEFAULT_BATCH[args.workload]
    torch.manual_seed(args.seed)
    x, y, model, make_opt, loss_fn = make_workload(args, device)
    # gradient_as_bucket_view: .grad are views of the buckets (no copy back), as in the C++ DDP.
    ddp_model = DDP(model, device_ids=[local_rank] if use_cuda else None, bucket_cap_mb=args.bucket_mb,
                    gradient_as_bucket_view=True)
    optimizer = make_opt(ddp_model.parameters())
    params = sum(p.numel() for p in model.parameters())
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    buckets = "-"
    try:  # private API: how many buckets DDP built (informational only)
        sizes = ddp_model._get_ddp_logging_data().get("bucket_sizes", "")
        buckets = str(len([s for s in str(sizes).split(",") if s.strip()])) or "-"
    except Exception:
        pass

    # Each rank's order: a seeded shuffle per epoch, every world-th index (DistributedSampler).
    n = x.shape[0]
    per_rank = math.ceil(n / world)
    steps_per_epoch = math.ceil(per_rank / batch)
    order, epoch = None, -1

    def batch_indices(step):
        nonlocal order, epoch
        e, k = divmod(step, steps_per_epoch)
        if e != epoch:
            epoch = e
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(args.seed + e))
            perm = torch.cat([perm, perm[: per_rank * world - n]])  # pad like DistributedSampler
            order = perm[rank::world].contiguous()
            if use_cuda:  # once per epoch, from pinned memory, without blocking (as the C++ Loader)
                order = order.pin_memory().to(device, non_blocking=True)
        return order[k * batch:(k + 1) * batch]

    # Step times: CUDA events on the current stream read after the last step (nothing in a step
    # waits for the GPU), or the host clock on the CPU. Events are created before the loop.
    if use_cuda:
        events = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(args.steps)]
        for trio in events:
            for e in trio:
                e.record()
        torch.cuda.synchronize()
    host = [[0.0] * 3 for _ in range(args.steps)]

    def mark(i, which):
        if use_cuda:
            events[i][which].record()
        else:
            host[i][which] = time.perf_counter()

    model.train()
    cpu_start = 0.0
    final_loss = None
    earlier = []  # warnings of the warm-up steps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(args.warmup + args.steps):
            timed = step - args.warmup
            if timed == 0:
                if use_cuda:
                    torch.cuda.synchronize()  # the warm-up's work is done before the first timed step
                    torch.cuda.set_sync_debug_mode("warn")
                earlier = list(caught)
                caught.clear()
                cpu_start = time.process_time()  # all threads of this process, user + system
            if timed >= 0:
                mark(timed, 0)
            idx = batch_indices(step)
            inputs, targets = x.index_select(0, idx), y.index_select(0, idx)
            optimizer.zero_grad()
            if amp_dtype is None:  # fp32: the plain step
                loss = loss_fn(ddp_model(inputs), targets)
            else:
                with torch.autocast(device.type, dtype=amp_dtype):
                    loss = loss_fn(ddp_model(inputs), targets)
            if timed >= 0:
                mark(timed, 1)
            if scaler.is_enabled():  # fp16
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            if timed >= 0:
                mark(timed, 2)
            final_loss = loss
        if use_cuda:
            torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchronizing CUDA operation" in str(w.message)]
        others = earlier + [w for w in caught if "synchronizing CUDA operation" not in str(w.message)]
    for w in others:  # not ours to hide
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)

    cpu_per_step = (time.process_time() - cpu_start) / args.steps
    last_loss = final_loss.item()  # after the timed steps: it waits for the GPU
    if use_cuda:
        torch.cuda.synchronize()
        times = [events[i][0].elapsed_time(events[i][2]) / 1e3 for i in range(args.steps)]
    else:
        times = [host[i][2] - host[i][0] for i in range(args.steps)]

    # The slowest rank sets each step's time.
    t = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    times = t.cpu().tolist()

    # Correctness: DDP keeps every rank's parameters identical.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    check = torch.stack([flat.sum(), (flat * flat).sum()])
    gathered = [torch.zeros_like(check) for _ in range(world)]
    dist.all_gather(gathered, check)
    same = all(torch.equal(g, gathered[0]) for g in gathered)
    ok = same and math.isfinite(last_loss)

    if rank == 0:
        med = statistics.median(times)
        p90 = sorted(times)[min(len(times) - 1, int(0.9 * len(times)))]
        if not args.no_header:
            print(f"# python_ddp: torch {torch.__version__}, Python {platform.python_version()}, "
                  f"torch.nn.parallel.DistributedDataParallel")
            print(f"# world size {world}, backend {backend}, device {device.type}, "
                  f"threads {args.threads} per rank (torch.set_num_threads)")
            print(f"# machine: {cpu_model()}, {os.cpu_count()} cores, host {socket.gethostname()}")
            print(f"# date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
            print(f"# steps: {args.warmup} warm-up (untimed), {args.steps} timed; "
                  f"step time = slowest rank")
            print("#")
            print(HEADER1)
            print(HEADER2)
        print(ROW.format(args.workload, "overlapped", backend, world, args.threads, batch, params,
                         args.bucket_mb, buckets, args.steps, med * 1e3, min(times) * 1e3, p90 * 1e3,
                         batch * world / med, "python"))
        if use_cuda:
            print("# timing: CUDA events on the current stream, read after the last step "
                  "(no synchronization inside a step)")
        else:
            print("# timing: the host's steady clock around each step")
        opt_name = type(optimizer).__name__
        print(f"# optimizer: torch.optim.{opt_name} "
              + ("(fused kernel)" if optimizer.defaults.get("fused")
                 else "(multi-tensor foreach kernels)" if optimizer.defaults.get("foreach")
                 else "(per tensor, as torch.optim on the CPU)"))
        if amp_dtype is not None:
            print(f"# precision: {args.precision} (torch.autocast {str(amp_dtype).replace('torch.', '')} around the "
                  "forward and the loss; parameters and optimizer state float32"
                  + ("; torch.amp.GradScaler" if scaler.is_enabled() else "") + ")")
        if use_cuda:
            on = lambda b: "on" if b else "off"
            print(f"# cuda math: cudnn.benchmark {on(torch.backends.cudnn.benchmark)}, "
                  f"TF32 matmul {on(torch.backends.cuda.matmul.allow_tf32)}, "
                  f"TF32 cuDNN {on(torch.backends.cudnn.allow_tf32)}")
            print(f"# host synchronizations per timed step: {len(syncs) / args.steps:.2f} "
                  f"({len(syncs)} in {args.steps} steps; CUDA sync debug mode)")
            for w in syncs[:3]:  # where they come from
                print(f"#   sync at {w.filename}:{w.lineno}")
        print(f"# rank 0 CPU time per timed step, all its threads: {cpu_per_step * 1e3:.3f} ms "
              f"(wall median {med * 1e3:.3f} ms)")
        if not ok:
            why = "parameters differ between ranks" if not same else f"loss is {last_loss}"
            print(f"# FAILED: {why}")
        else:
            print(f"# OK (parameters identical on all ranks, final loss {last_loss:.4g})")
        sys.stdout.flush()
    # No rank leaves before rank 0 has printed: a peer that exits first closes its Gloo pairs,
    # and rank 0 then fails in destroy_process_group() (exit code 1 after a good run).
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


# Same columns as ddp_train_bench (bench/compare parses both).
HEADER1 = ("#  workload        mode  backend  ranks  threads  batch    params  bucket  buckets"
           "  steps    median       min       p90    samples/s  impl")
HEADER2 = ("#                                                 /rank             (MiB)         "
           "          (ms)      (ms)      (ms)     (global)")
ROW = ("{:>10} {:>11} {:>8} {:>6} {:>8} {:>6} {:>9} {:>7.2f} {:>8} {:>6} {:>9.3f} {:>9.3f} {:>9.3f}"
       " {:>12.1f}  {}")

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (torch thread pools, the Gloo context): nothing is left to do,
    # and a failure there would turn a good run into a failed one.
    os._exit(code)
