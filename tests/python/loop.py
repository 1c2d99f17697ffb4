# A plain PyTorch training loop for the tests of mutwo.torch: the model
# wrapped when a budget is given, the user's loss, backward() and torch.optim,
# and what the tests compare (losses, gradients, parameters, buffers, RNG);
# gc_paused() for steps whose memory a test measures.
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

import mutwo.torch


def optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)


def train(factory: Callable, opt_name: str, budget: str | None, planner: str = "mutwo", steps: int = 3,
          report: str | None = None) -> dict:
    """`steps` steps of a plain loop on factory()'s (model, inputs, loss_fn)."""
    model, inputs, loss_fn = factory()
    if budget is not None:
        model = mutwo.torch.wrap(model, budget, planner=planner, report=report)
    opt = optimizer(opt_name, model.parameters())
    torch.manual_seed(1)  # dropout's draws
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, *inputs)
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    plain = model.module if budget is not None else model
    return {"losses": losses, "grads": grads, "params": [p.detach().clone() for p in plain.parameters()],
            "buffers": {k: b.clone() for k, b in plain.named_buffers()}, "rng": torch.get_rng_state(),
            "model": model}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Steps whose memory a test measures: earlier tests' garbage collected
    first, not by the collector in the middle of a measured step, where it
    would move the step's figures."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
