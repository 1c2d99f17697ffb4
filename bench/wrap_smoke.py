# A quick check of mutwo.torch.wrap on the device before the benchmark: the
# test LLaMA decoder, three SGD steps wrapped at 60% against the unplanned
# capture (bitwise) and eager (losses), on cuda.
#   PYTHONPATH=python python3 bench/wrap_smoke.py
import copy
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import models  # noqa: E402
import mutwo.torch  # noqa: E402


def train(budget, planner="mutwo"):
    model, inputs, loss_fn = models.llama()
    model = model.cuda()
    inputs = tuple(t.cuda() for t in inputs)
    if budget:
        model = mutwo.torch.wrap(model, budget, planner=planner)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, *inputs)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()], model


torch.use_deterministic_algorithms(True, warn_only=True)
eager, _, _ = train(None)
base, pb, _ = train("100%", "none")
planned, pp, m = train("80%")
print("eager", eager, "\nbase ", base, "\nplan ", planned)
print("bitwise vs unplanned capture:", all(torch.equal(a, b) for a, b in zip(pb, pp)))
print(mutwo.torch.report(m))
