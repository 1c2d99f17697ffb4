# Offload on a card (CUDA only; on the CPU it skips): the compiled route's
# lowest plan with saved values offloaded to host memory trains bit for bit as
# the same partition kept on the card, every step, not only the first. On an
# H100 the offload pass's separate streams changed the loss (BERT-base NaN;
# python/mutwo/compiled/_inductor.py, OFFLOAD_STREAM), so the copies run on
# the compute stream; with MUTWO_OFFLOAD_STREAM=1 this test is how a card
# tells whether the streamed copies come back equal.
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import models
import mutwo.torch as mt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: on the CPU an offload frees "
                                "nothing, and tests/python/test_compile.py checks the copies bit for bit")

DEVICE = "cuda"
STEPS = 6  # a plan, its measured correction, and steps after it: a race shows in any of them


def _model() -> tuple[nn.Module, tuple, object]:
    """An MLP without dropout, whose lowest plan offloads. With dropout the
    floor is another partition (mutwo:11, on an H100 too), whose backward peak
    offload does not lower: priced as CUDA on the CPU, 121.7 MB with or without
    6 values offloaded, only the forward's falling (100.8 to 33.6 MB). The
    CPU's offload test (tests/python/test_compile.py) replays dropout."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(256, 1024)]
    for _ in range(6):
        layers += [nn.GELU(), nn.Linear(1024, 1024)]
    model = nn.Sequential(*layers, nn.GELU(), nn.Linear(1024, 10)).to(DEVICE)
    inputs = (torch.randn(4096, 256, device=DEVICE), torch.randint(10, (4096,), device=DEVICE))
    return model, inputs, lambda m, x, y: F.cross_entropy(m(x), y)


def _train(backend: object) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each step's loss and the last step's gradients, SGD between steps."""
    torch._dynamo.reset()
    model, inputs, loss_fn = _model()
    torch.manual_seed(0)
    step = models.Step(copy.deepcopy(model), loss_fn)
    compiled = torch.compile(step, backend=backend, dynamic=False)
    opt = torch.optim.SGD(step.parameters(), lr=0.1)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = compiled(*inputs)
        loss.backward()
        losses.append(loss.detach().clone())
        opt.step()
    return losses, [p.grad.clone() for p in step.parameters()]


def test_offloaded_values_come_back_bit_for_bit_on_the_card(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "kept"))
    kept = mt.backend(budget="lowest", host_memory=0)
    kept_losses, kept_grads = _train(kept)
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "offloaded"))
    moved = mt.backend(budget="lowest", host_memory="1GiB")
    losses, grads = _train(moved)
    info = mt.report(moved)
    assert "+offload:" in info["chosen"], (info["chosen"], [c["name"] for c in info["candidates"]])
    assert info["chosen"].split("+")[0] == mt.report(kept)["chosen"]  # the same partition, its values offloaded
    assert all(torch.isfinite(x) for x in losses), losses
    assert [x.item() for x in losses] == [x.item() for x in kept_losses]
    assert all(torch.equal(a, b) for a, b in zip(grads, kept_grads))
