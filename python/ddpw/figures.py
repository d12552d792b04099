"""The figures the C++ side prints for a set of weights (build/bin/model_weights, the steps'
epoch lines), computed the same way: the first batch's loss, the test loss and accuracy, the
weights checksum."""
import torch
import torch.nn.functional as F

from .data import sampler_indices


def loss_function(dataset):
    """MSE for the synthetic regression, NLL of the log-probabilities for the CNN (workload.cpp)."""
    return F.mse_loss if dataset == "synthetic" else F.nll_loss


@torch.no_grad()
def first_batch_loss(model, train, dataset, batch_size, seed=0):
    """The loss of the first batch a step trains on (epoch 0, step 0, one rank), dropout off."""
    x, y = train.gather(sampler_indices(len(train), seed=seed, epoch=0)[:batch_size])
    model.eval()
    loss = loss_function(dataset)(model(x), y).item()
    model.train()
    return loss, x.shape[0]


@torch.no_grad()
def evaluate(model, test, dataset, batch_size=1000):
    """ddpw::evaluate on one rank: mean loss over all test samples, fraction correct, correct count."""
    model.eval()
    loss_fn, n = loss_function(dataset), len(test)
    loss_sum, correct = 0.0, 0
    for start in range(0, n, batch_size):
        indices = torch.arange(start, min(start + batch_size, n))
        x, y = test.gather(indices)
        out = model(x)
        loss_sum += loss_fn(out, y).item() * indices.numel()  # the sum in double, as C++ does
        if dataset != "synthetic":
            correct += int(out.argmax(1).eq(y).sum().item())
    model.train()
    return loss_sum / max(1, n), correct / max(1, n), correct


@torch.no_grad()
def weights_checksum(model):
    """EpochReporter::end_training's checksum: sum over parameters of value x (1-based position)."""
    total = 0.0
    for p in model.parameters():
        flat = p.detach().to("cpu", torch.float64).reshape(-1)
        total += (flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum().item()
    return total
