#!/usr/bin/env python3
"""PyTorch's torch.amp.GradScaler on the CPU, as the reference for the C++ ddp::GradScaler
(tests/integration/python_bridge_grad_scaler.sh):

  python3 python/grad_scaler_reference.py make inputs.pt python.pt   # the run, in Python
  build/bin/grad_scaler_replay inputs.pt cpp.pt                      # the same run, in C++
  python3 python/grad_scaler_reference.py check python.pt cpp.pt     # equal?

A small float32 model (Linear 6->8, tanh, Linear 8->2) trains for STEPS steps under
torch.autocast("cpu", float16) twice, once with SGD (momentum 0.9, PyTorch's for-loop step, which
GradScaler skips after reading found_inf on the host) and once with AdamW(fused=True) (which
GradScaler hands found_inf, skipping on the device), each with its own GradScaler("cpu",
growth_interval=3). At the steps in POISONED the batch holds an inf, so the float16 forward gives
inf/NaN gradients. inputs.pt holds the weights and batches; python.pt and cpp.pt the scale after
every step, whether each step changed the parameters, and the final parameters.
"""
import sys

import torch

STEPS = 16
POISONED = (0, 1, 5, 9, 10, 11)
GROWTH_INTERVAL = 3


def make_inputs():
    g = torch.Generator().manual_seed(7)
    inputs = {
        "w1": torch.randn(8, 6, generator=g) * 0.4, "b1": torch.randn(8, generator=g) * 0.1,
        "w2": torch.randn(2, 8, generator=g) * 0.4, "b2": torch.randn(2, generator=g) * 0.1,
        "steps": torch.tensor(STEPS), "growth_interval": torch.tensor(GROWTH_INTERVAL),
    }
    for step in range(STEPS):
        x = torch.randn(5, 6, generator=g)
        if step in POISONED:
            x[0, 0] = float("inf")
        inputs[f"x{step}"] = x
        inputs[f"y{step}"] = torch.randn(5, 2, generator=g)
    return inputs


def model_from(inputs):
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        model[0].weight.copy_(inputs["w1"]), model[0].bias.copy_(inputs["b1"])
        model[2].weight.copy_(inputs["w2"]), model[2].bias.copy_(inputs["b2"])
    return model


def run(inputs, name, make_optimizer):
    model = model_from(inputs)
    optimizer = make_optimizer(model.parameters())
    scaler = torch.amp.GradScaler("cpu", growth_interval=GROWTH_INTERVAL)
    scales, changed = [], []
    for step in range(STEPS):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(inputs[f"x{step}"]), inputs[f"y{step}"])
        scaler.scale(loss).backward()
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
        changed.append(any(not torch.equal(a, p) for a, p in zip(before, model.parameters())))
    out = {f"{name}/scale": torch.tensor(scales, dtype=torch.float64),
           f"{name}/changed": torch.tensor(changed, dtype=torch.int64)}
    for i, p in enumerate(model.parameters()):
        out[f"{name}/param{i}"] = p.detach().clone()
    return out


def make(inputs_path, python_path):
    inputs = make_inputs()
    torch.save(inputs, inputs_path)
    results = {}
    results.update(run(inputs, "sgd", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)))
    results.update(run(inputs, "adamw", lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01, fused=True)))
    torch.save(results, python_path)
    for name in ("sgd", "adamw"):
        skipped = [s for s, c in enumerate(results[f"{name}/changed"].tolist()) if not c]
        print(f"Python {name}: scales {results[f'{name}/scale'].tolist()}, skipped steps {skipped}")


def check(python_path, cpp_path):
    py = torch.load(python_path, weights_only=True)
    cpp = torch.load(cpp_path, weights_only=True)
    bad = 0
    for name in ("sgd", "adamw"):
        if not torch.equal(py[f"{name}/scale"], cpp[f"{name}/scale"]):
            print(f"FAIL {name}: scales differ\n  Python {py[f'{name}/scale'].tolist()}\n"
                  f"  C++    {cpp[f'{name}/scale'].tolist()}")
            bad += 1
        if not torch.equal(py[f"{name}/changed"], cpp[f"{name}/changed"]):
            print(f"FAIL {name}: skipped steps differ\n  Python changed {py[f'{name}/changed'].tolist()}\n"
                  f"  C++    changed {cpp[f'{name}/changed'].tolist()}")
            bad += 1
        worst = max((py[k] - cpp[k]).abs().max().item() for k in py if k.startswith(f"{name}/param"))
        skipped = [s for s, c in enumerate(py[f"{name}/changed"].tolist()) if not c]
        print(f"{name}: scales equal ({py[f'{name}/scale'].tolist()[-1]} at the end), skipped steps {skipped} "
              f"on both sides, max |Python - C++| of the final parameters {worst:.3g}")
        if worst > 1e-6:
            print(f"FAIL {name}: final parameters differ by {worst:.3g} > 1e-6")
            bad += 1
    return bad


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        return 1 if check(sys.argv[2], sys.argv[3]) else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
