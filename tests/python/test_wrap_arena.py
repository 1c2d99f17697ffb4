# wrap(arena=) (issue 47): which allocator serves the wrapped step, as
# report() says ("arena", "arena_from"). On the CPU the default is the
# allocator (on CUDA under a budget it is the arena: the one rule,
# runtime::arena_by_default, tests/unit/test_cli_rules.cpp); arena=True serves
# the step from its arena with eager's losses and gradients; a non-bool is
# refused at the call. The CUDA default is checked on a card (skipped here).
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mutwo.torch as mt


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10))


def _train(budget, device: str = "cpu", **kw) -> tuple[dict, list[float], list[torch.Tensor]]:
    model = _model().to(device)
    w = mt.wrap(model, budget, **kw)
    torch.manual_seed(1)
    x, y = torch.randn(64, 32, device=device), torch.randint(0, 10, (64,), device=device)
    losses = []
    for _ in range(2):
        model.zero_grad()
        loss = F.cross_entropy(w(x), y)
        loss.backward()
        losses.append(loss.item())
    return mt.report(w), losses, [p.grad.clone() for p in model.parameters()]


def test_cpu_default_is_the_allocator() -> None:
    r, _, _ = _train("60%")
    assert r["arena"] is False and r["arena_from"] == "default" and r["arena_bytes"] is None, r


def test_arena_true_trains_as_without() -> None:
    plain, plain_losses, plain_grads = _train("60%")
    r, losses, grads = _train("60%", arena=True)
    assert r["arena"] is True and r["arena_from"] == "arena=True" and r["arena_bytes"] > 0, r
    assert losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(grads, plain_grads))
    off, _, _ = _train("60%", arena=False)
    assert off["arena"] is False and off["arena_from"] == "arena=False", off


def test_arena_must_be_a_bool() -> None:
    with pytest.raises(mt.MutwoError, match=r"arena='yes': give True, False or None"):
        mt.wrap(_model(), "60%", arena="yes")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the arena is CUDA's default under a budget")
def test_cuda_default_is_the_arena_under_a_budget() -> None:
    r, _, _ = _train("60%", device="cuda")
    assert r["arena"] is True and r["arena_from"] == "default", r
    none, _, _ = _train(None, device="cuda")
    assert none["arena"] is False, none
