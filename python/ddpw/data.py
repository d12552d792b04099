"""The course's data as the C++ library builds it: the IDX files (course/idx.cpp) normalised per
dataset (course/workload.cpp), the synthetic set and the sampler's order (ddp/data.cpp). The same
torch operations in the same order, so every batch is the same to the last bit."""
import gzip
import math
import os

import numpy as np
import torch

# (mean, std) of each dataset's training images, as course/workload.cpp normalises them.
NORMALISATION = {"mnist": (0.1307, 0.3081), "fashion-mnist": (0.2860, 0.3530)}
DEFAULT_FOLDER = {"mnist": "data/mnist", "fashion-mnist": "/usr/share/datasets/fashion-mnist"}
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


class Dataset:
    """All samples in two tensors; inputs may be uint8 images, converted when a batch is cut."""

    def __init__(self, inputs, targets, scale=1.0, shift=0.0, divide=1.0):
        self.inputs, self.targets = inputs, targets
        self.scale, self.shift, self.divide = scale, shift, divide

    def __len__(self):
        return self.inputs.shape[0]

    def gather(self, indices):
        """ddp::Dataset::gather: float32 inputs, then * scale, - shift, / divide, in place."""
        x = self.inputs.index_select(0, indices).to(torch.float32)
        if self.scale != 1.0:
            x.mul_(self.scale)
        if self.shift != 0.0:
            x.sub_(self.shift)
        if self.divide != 1.0:
            x.div_(self.divide)
        return x, self.targets.index_select(0, indices)


def _read_idx(folder, name, magic):
    """One IDX file, plain or gzipped (the plain one first, as course/idx.cpp looks)."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        path += ".gz"
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{os.path.join(folder, name)} not found (nor .gz): Fashion-MNIST is "
                                "`apt-get install dataset-fashion-mnist`; for MNIST pass --data-dir")
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gzipped else open(path, "rb")) as f:
        data = f.read()
    found = int.from_bytes(data[0:4], "big")
    if found != magic:
        raise ValueError(f"{path}: not an IDX file of this kind (magic {found}, expected {magic})")
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    values = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if values.size != math.prod(shape):
        raise ValueError(f"{path}: {values.size} values, the header says {math.prod(shape)}")
    return torch.from_numpy(values.copy()).reshape(shape)


def load_dataset(dataset, split, data_dir=None, seed=0):
    """The train or test split of --dataset, as a C++ step loads it (same --data-dir, --seed)."""
    if dataset == "synthetic":  # make_synthetic_dataset: 2048 training, 512 test samples
        return _synthetic(2048, 20, seed) if split == "train" else _synthetic(512, 20, seed + 1000)
    folder = data_dir or DEFAULT_FOLDER[dataset]
    prefix = "train" if split == "train" else "t10k"
    images = _read_idx(folder, f"{prefix}-images-idx3-ubyte", IMAGES_MAGIC).reshape(-1, 1, 28, 28)
    labels = _read_idx(folder, f"{prefix}-labels-idx1-ubyte", LABELS_MAGIC).to(torch.int64)
    mean, std = NORMALISATION[dataset]
    return Dataset(images, labels, 1.0 / 255.0, mean, std)


def _synthetic(samples, features, seed):
    """ddp::make_synthetic_dataset: x ~ U[0,1), y = x·linspace(-1, 1) + 0.5 + 0.01·noise."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand((samples, features), generator=gen)
    w = torch.linspace(-1.0, 1.0, features).reshape(features, 1)
    y = torch.matmul(x, w) + 0.5 + 0.01 * torch.randn((samples, 1), generator=gen)
    return Dataset(x, y)


def sampler_indices(size, seed=0, epoch=0, num_replicas=1, rank=0):
    """ddp::DistributedSampler: one rank's order of the samples in one epoch."""
    order = torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))
    num_samples = (size + num_replicas - 1) // num_replicas
    total = num_samples * num_replicas
    if total > size:
        order = torch.cat([order, order[:total - size]])
    return order[rank:total:num_replicas].contiguous()
