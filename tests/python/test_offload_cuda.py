# Offload on a card (CUDA only; on the CPU it skips): the compiled route's
# lowest plans with saved values offloaded to host memory, every step, not
# only the first:
# - the recompute floor's offload (an MLP without dropout, checkpoint left
#   out) trains bit for bit as the same partition kept: the copies come back equal;
# - checkpoint+offload (each layer's input offloaded, dropout replayed) trains
#   as checkpoint kept, within TOLERANCE: the backward that reloads is another
#   graph for Inductor to fuse (on the CPU, a bias's gradient differs in its last bits).
# On an H100 the offload pass's separate streams changed the loss (BERT-base
# NaN; python/mutwo/compiled/_inductor.py, OFFLOAD_STREAM), so the copies run
# on the compute stream; with MUTWO_OFFLOAD_STREAM=1 this test is how a card
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
TOLERANCE = 1e-5  # relative, as tests/python/test_compile.py's


def kept_as(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Every graph compiled from here plans the candidate `name`, whatever the
    budget: an offloaded plan's own partition, kept, to compare it with."""
    from mutwo.compiled import _frontier
    choose = _frontier.choose
    monkeypatch.setattr(_frontier, "choose", lambda q, device, budget, corrections, planner, *a, **k:
                        choose(q, device, budget, corrections, f"candidate:{name}", *a, **k))


def priced_as_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU, every graph planned as on a card: fused pointwise, the cuda
    rate row, offload copies on the compute stream at 25 GB/s each way."""
    from mutwo.compiled import _frontier, _inductor
    choose = _frontier.choose
    monkeypatch.setattr(_frontier, "choose", lambda q, device, *a, **k: choose(q, "cuda", *a, **k))
    monkeypatch.setattr(_inductor, "offloading", lambda host, device: _frontier.Offloading(host, 25.0, 25.0, False))


def no_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The frontier without its checkpoint candidate: the recompute floor's own offload."""
    from mutwo.compiled import _frontier
    monkeypatch.setattr(_frontier.Frontier, "checkpointed", lambda self: None)


def _model(dropout: float = 0.1) -> tuple[nn.Module, tuple, object]:
    """An MLP; at dropout 0 its recompute floor offloads (mutwo:2+offload:7
    priced as CUDA on the CPU), with dropout only checkpoint's does (mutwo:11
    on an H100: its values come back at the backward's start)."""
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(256, 1024)]
    for _ in range(6):
        layers += [nn.GELU()] + ([nn.Dropout(dropout)] if dropout else []) + [nn.Linear(1024, 1024)]
    model = nn.Sequential(*layers, nn.GELU(), nn.Linear(1024, 10)).to(DEVICE)
    inputs = (torch.randn(4096, 256, device=DEVICE), torch.randint(10, (4096,), device=DEVICE))
    return model, inputs, lambda m, x, y: F.cross_entropy(m(x), y)


def _train(backend: object, dropout: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each step's loss and the last step's gradients, SGD between steps."""
    torch._dynamo.reset()
    model, inputs, loss_fn = _model(dropout)
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


def _offloaded_and_kept(tmp_path, monkeypatch, dropout: float) -> tuple[str, tuple, tuple]:
    """The lowest plan with offload, trained, and its partition kept, trained."""
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "offloaded"))
    moved = mt.backend(budget="lowest", host_memory="1GiB")
    offloaded = _train(moved, dropout)
    info = mt.report(moved)
    assert "+offload:" in info["chosen"], (info["chosen"], [c["name"] for c in info["candidates"]])
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "kept"))
    kept_as(monkeypatch, info["chosen"].split("+")[0])
    kept = mt.backend(budget="lowest", host_memory=0)
    same = _train(kept, dropout)
    assert mt.report(kept)["chosen"] == info["chosen"].split("+")[0]
    assert all(torch.isfinite(x) for x in offloaded[0]), offloaded[0]
    return info["chosen"], offloaded, same


def test_the_floors_offloaded_values_come_back_bit_for_bit_on_the_card(tmp_path, monkeypatch) -> None:
    no_checkpoint(monkeypatch)
    _, (losses, grads), (kept_losses, kept_grads) = _offloaded_and_kept(tmp_path, monkeypatch, 0.0)
    assert [x.item() for x in losses] == [x.item() for x in kept_losses]
    assert all(torch.equal(a, b) for a, b in zip(grads, kept_grads))


def test_offloaded_checkpointing_trains_as_checkpoint_on_the_card(tmp_path, monkeypatch) -> None:
    chosen, (losses, grads), (kept_losses, kept_grads) = _offloaded_and_kept(tmp_path, monkeypatch, 0.1)
    assert chosen.startswith("checkpoint+offload:"), chosen
    assert torch.allclose(torch.stack(losses), torch.stack(kept_losses), rtol=TOLERANCE, atol=0)
    assert all(torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE * float(b.abs().max())) for a, b in zip(grads, kept_grads))
