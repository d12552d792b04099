#!/usr/bin/env python3
"""Trains the twin module in Python for a few steps and saves its state_dict with torch.save, the
way any Python script saves a model: a C++ step then starts from it with --init-weights.

  python3 python/pretrain.py pretrained.pt --dataset fashion-mnist --steps 100
  build/bin/step0_single_gpu 2 1 --dataset fashion-mnist --init-weights pretrained.pt
"""
import argparse
import sys

import torch

from ddpw import load_dataset, loss_function, make_model, sampler_indices


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="where torch.save writes the state_dict")
    parser.add_argument("--dataset", choices=["synthetic", "mnist", "fashion-mnist"], default="fashion-mnist")
    parser.add_argument("--data-dir", help="folder with the four IDX files (as the C++ --data-dir)")
    parser.add_argument("--steps", type=int, default=100, help="training steps (batches of epoch 0)")
    parser.add_argument("--seed", type=int, default=1, help="initial weights, dropout and data order")
    parser.add_argument("--batch-size", type=int, help="default: 32 synthetic, 64 CNN (as the steps)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    torch.manual_seed(args.seed)
    model = make_model(args.dataset)
    train = load_dataset(args.dataset, "train", args.data_dir, args.seed)
    batch_size = args.batch_size or (32 if args.dataset == "synthetic" else 64)
    # The C++ workloads' optimizers: SGD 1e-2 (synthetic), Adadelta 1.0 (the MNIST seed's).
    if args.dataset == "synthetic":
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    else:
        optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    loss_fn = loss_function(args.dataset)
    order = sampler_indices(len(train), seed=args.seed, epoch=0)
    steps = min(args.steps, (len(order) + batch_size - 1) // batch_size)
    for step in range(steps):
        x, y = train.gather(order[step * batch_size:(step + 1) * batch_size])
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        if step == 0 or (step + 1) % 20 == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps} | loss {loss.item():.4f}")
    torch.save(model.state_dict(), args.out)  # an OrderedDict, as every state_dict() is
    print(f"saved the state_dict of {type(model).__name__} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
