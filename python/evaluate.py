#!/usr/bin/env python3
"""Evaluates a C++ run's weights in Python: loads the --export-weights file into the twin module
with torch.load (weights_only=True, the default since torch 2.6) and prints the figures
build/bin/model_weights prints for the same weights, with the same digits.

  python3 python/evaluate.py model.pt --dataset fashion-mnist
"""
import argparse
import sys

import torch

from ddpw import evaluate, first_batch_loss, load_dataset, make_model, model_for_state_dict, weights_checksum


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("weights", help="a state_dict file: C++ --export-weights, or Python's torch.save")
    parser.add_argument("--dataset", choices=["synthetic", "mnist", "fashion-mnist"],
                        help="default: synthetic for the linear model, fashion-mnist for the CNN")
    parser.add_argument("--data-dir", help="folder with the four IDX files (as the C++ --data-dir)")
    parser.add_argument("--seed", type=int, default=0, help="the sampler's seed (the first batch), as --seed")
    parser.add_argument("--batch-size", type=int, help="samples in the first batch (default: 32 synthetic, 64 CNN)")
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    state_dict = torch.load(args.weights, map_location="cpu", weights_only=True)
    kind = model_for_state_dict(state_dict)
    dataset = args.dataset or ("fashion-mnist" if kind == "cnn" else "synthetic")
    model = make_model(dataset)
    model.load_state_dict(state_dict)  # strict: every key and shape must match
    batch_size = args.batch_size or (32 if dataset == "synthetic" else 64)
    parameters = sum(p.numel() for p in model.parameters())
    print(f"# evaluate.py: {dataset}, {type(model).__name__} ({parameters} parameters), weights from "
          f"{args.weights}, torch {torch.__version__}")

    train = load_dataset(dataset, "train", args.data_dir, args.seed)
    test = load_dataset(dataset, "test", args.data_dir, args.seed)
    loss, samples = first_batch_loss(model, train, dataset, batch_size, args.seed)
    print("first batch loss %.17g (epoch 0, step 0: %d samples, seed %d, dropout off)" % (loss, samples, args.seed))
    test_loss, accuracy, correct = evaluate(model, test, dataset, args.test_batch_size)
    if dataset == "synthetic":
        print("test loss %.17g (%d samples)" % (test_loss, len(test)))
    else:
        print("test loss %.17g | test accuracy %.17g (%d of %d)" % (test_loss, accuracy, correct, len(test)))
    print("weights checksum %.17g" % weights_checksum(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
