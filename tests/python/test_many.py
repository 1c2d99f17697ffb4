# Many models as one fused array in the user's loop (mutwo.torch.many,
# docs/many.md "From Python"), on the CPU with Inductor:
# - each model of the array trains as it would alone (its own optimizer and
#   learning rate; a model of another width in a sub-array of its own), its
#   losses and parameters within TOLERANCE of training it alone, eagerly;
# - under a budget, the array's measured step peak is within it, and its
#   losses and gradients equal the same array's under plain compile bit for
#   bit, dropout (each model its own masks) replayed;
# - BatchNorm's running statistics come back to each model as if it trained alone;
# - models set apart (another dropout p, eval mode) train in sub-arrays of their own;
# - per-model batches (shared=False) give model i its slice i;
# - bad input is refused with one line that says what to do.
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import mutwo.torch as mt

TOLERANCE = 1e-5  # relative: a batched matmul may sum in another order than one model's


class Mlp(nn.Module):
    def __init__(self, width: int = 32, p: float = 0.0, depth: int = 1) -> None:
        super().__init__()
        self.up = nn.Linear(16, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth - 1))
        self.down, self.drop = nn.Linear(width, 4), nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.drop(F.gelu(self.up(x)))
        for layer in self.hidden:
            x = self.drop(F.gelu(layer(x)))
        return self.down(x)


def _models(widths: list[int], p: float = 0.0, depth: int = 1) -> list[nn.Module]:
    out = []
    for seed, w in enumerate(widths):
        torch.manual_seed(seed)
        out.append(Mlp(w, p, depth))
    return out


def _loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def _batches(n: int, per_model: int = 0, batch: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(11)
    lead = (per_model,) if per_model else ()
    return [(torch.randn(*lead, batch, 16, generator=g), torch.randint(0, 4, (*lead, batch), generator=g))
            for _ in range(n)]


def _train(array_or_model, optimizers, batches, *, shared: bool = True) -> list:
    seen = []
    for x, y in batches:
        losses = array_or_model(x, y) if shared else array_or_model(x, y, shared=False)
        losses.sum().backward()
        for o in optimizers:
            o.step()
            o.zero_grad()
        seen.append(losses.detach())
    return seen


def test_each_model_trains_as_it_would_alone() -> None:
    """Four models, one of another width (a sub-array of its own), each with
    its own SGD learning rate, three steps on one shared batch stream."""
    widths, lrs = [32, 32, 48, 32], [0.01, 0.05, 0.1, 0.2]
    models = _models(widths)
    alone = copy.deepcopy(models)
    optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m, lr in zip(models, lrs)]
    array = mt.many(models, _loss)
    batches = _batches(3)
    _train(array, optimizers, batches)
    report = array.report()
    assert report["groups"] == [[0, 1, 3], [2]] and report["steps"] == 3, report
    for i, (m, lr) in enumerate(zip(alone, lrs)):
        o = torch.optim.SGD(m.parameters(), lr=lr)
        own = []
        for x, y in batches:
            loss = _loss(m, x, y)
            own.append(loss.item())
            loss.backward()
            o.step()
            o.zero_grad()
        assert report["losses"][i] == pytest.approx(own, rel=TOLERANCE), (i, report["losses"][i], own)
        for a, b in zip(models[i].parameters(), m.parameters()):
            assert torch.allclose(a, b, rtol=TOLERANCE, atol=1e-7), i


class Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm, self.head = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.norm(self.conv(x))).mean((2, 3)))


def test_batchnorm_running_statistics_come_back_to_each_model() -> None:
    """A CNN with BatchNorm, three models at their own rates, two compiled steps:
    each model's losses, parameters and running statistics (and its count of
    batches) as training it alone."""
    torch.manual_seed(0)
    models = [Cnn() for _ in range(3)]
    alone = copy.deepcopy(models)
    lrs = [0.1, 0.2, 0.3]
    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(2)]
    array = mt.many(models, _loss)
    seen = _train(array, [torch.optim.SGD(m.parameters(), lr=lr) for m, lr in zip(models, lrs)], batches)
    for i, (m, lr) in enumerate(zip(alone, lrs)):
        own = _train(lambda x, y: _loss(m, x, y).reshape(1), [torch.optim.SGD(m.parameters(), lr=lr)], batches)
        assert [float(s[i]) for s in seen] == pytest.approx([float(o) for o in own], rel=TOLERANCE), i
        for a, b in zip((*models[i].parameters(), *models[i].buffers()), (*m.parameters(), *m.buffers())):
            assert torch.allclose(a.float(), b.float(), rtol=TOLERANCE, atol=1e-6), i
        assert int(models[i].norm.num_batches_tracked) == 2


def test_models_set_apart_train_apart() -> None:
    """Another dropout probability, or eval mode, is another sub-array: its step
    calls its own first model's modules (with p=0 the fused result is the model's
    own, which a shared p=0.5 would not give)."""
    models = _models([32, 32, 32, 32], p=0.5)
    models[1].drop.p = 0.0
    models[3].eval()
    array = mt.many(models, _loss, compile=False)
    (x, y), = _batches(1)
    losses = array(x, y)
    assert array.groups == [[0, 2], [1], [3]], array.groups
    assert torch.equal(losses[1], _loss(models[1], x, y)) and torch.equal(losses[3], _loss(models[3], x, y))


def test_per_model_batches_give_each_model_its_slice() -> None:
    models = _models([32, 32, 32])
    array = mt.many(models, _loss, compile=False)
    (x, y), = _batches(1, per_model=3)
    losses = array(x, y, shared=False)
    for i, m in enumerate(models):
        assert torch.allclose(losses[i], _loss(m, x[i], y[i]), rtol=TOLERANCE), i


def test_a_budget_holds_and_keeps_plain_compiles_bits() -> None:
    """The array's step under 70% of its activations against the same array
    under plain compile (budget None): the same losses and gradients, bit for
    bit, with each model drawing its own dropout masks; the measured peak
    within the budget the report states, with values recomputed to get there."""
    def run(budget):
        models = _models([256, 256, 256], p=0.2, depth=4)
        array = mt.many(models, _loss, budget=budget)
        torch.manual_seed(5)
        seen, grads = [], []
        for x, y in _batches(4, batch=128):
            losses = array(x, y)
            losses.sum().backward()
            seen.append(losses.detach())
            grads.append([p.grad.clone() for m in models for p in m.parameters()])
            for m in models:
                m.zero_grad()
        return array, seen, grads
    plain, plain_losses, plain_grads = run(None)
    low, low_losses, low_grads = run("70%")
    assert all(torch.equal(a, b) for a, b in zip(low_losses, plain_losses))
    assert all(torch.equal(a, b) for s, t in zip(low_grads, plain_grads) for a, b in zip(s, t))
    plan = low.report()["plan"]
    step = plan["step"]
    assert plan["chosen"] != "compile:1" and step["budget_bytes"] is not None, (plan["chosen"], step)
    assert step["measured_peak_bytes"] <= step["budget_bytes"], step


@pytest.mark.parametrize("models, loss, kwargs, says", [
    ([], _loss, {}, "no models given"),
    (Mlp(), _loss, {}, "a list of nn.Modules"),
    ([Mlp(), nn.Linear(16, 4)], _loss, {}, "2 architectures"),
    ([Mlp(), Mlp()], "cross_entropy", {}, "loss(model, *batch)"),
    ([Mlp()], _loss, {"randomness": "error"}, "'different'"),
    ([Mlp()], _loss, {"compile": False, "budget": "lowest"}, "drop compile=False"),
])
def test_bad_input_is_refused_with_what_to_do(models, loss, kwargs, says: str) -> None:
    with pytest.raises(mt.MutwoError) as e:
        mt.many(models, loss, **kwargs)
    assert says in str(e.value), str(e.value)


def test_shared_parameters_and_bad_slices_are_refused() -> None:
    m = Mlp()
    with pytest.raises(mt.MutwoError, match="shares a parameter"):
        mt.many([m, m], _loss)
    array = mt.many(_models([32, 32]), _loss, compile=False)
    (x, y), = _batches(1)
    with pytest.raises(mt.MutwoError, match="leading dimension of 2"):
        array(x, y, shared=False)
    with pytest.raises(mt.MutwoError, match="one scalar per model"):
        mt.many(_models([32]), lambda model, x, y: F.cross_entropy(model(x), y, reduction="none"),
                compile=False)(x, y)
