# Many models of one architecture trained at once, in the user's own loop
# (docs/many.md, "From Python"; mutwo.torch.many makes the array):
#
#   models = [make_model(seed=s) for s in range(8)]
#   optimizers = [torch.optim.SGD(m.parameters(), lr=lr) for m, lr in zip(models, lrs)]
#   array = mutwo.torch.many(models, loss, budget="lowest")
#   for x, y in batches:
#       losses = array(x, y)          # one loss per model, one shared batch
#       losses.sum().backward()       # each model's gradients land in its own parameters
#       for o in optimizers: o.step(); o.zero_grad()
#
# The models are fused horizontally, as HFTA and torch.func ensembles do: each
# parameter is stacked across the models inside the step (torch.stack, whose
# backward hands each model its own gradient), and the forward runs once under
# torch.vmap, so N matmuls become one batched matmul. Models whose parameters
# differ in shape (another width) form sub-arrays of their own, each fused, in
# the same step. The step is compiled by Inductor under mutwo's backend, so
# one budget bounds the whole array's step, with every saved value kept,
# recomputed or offloaded by the one planner.
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from torch import nn

from mutwo._ext import MutwoError

__all__ = ["ModelArray", "check"]


def _shape_key(m: nn.Module) -> tuple:
    """What a sub-array shares, since its step calls its first model's modules:
    every parameter's and buffer's name, shape and dtype, and every module's
    type, mode and settings as it prints them (a Dropout's p, a norm's eps)."""
    return (tuple((n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in m.named_parameters()),
            tuple((n, tuple(b.shape), b.dtype) for n, b in m.named_buffers()),
            tuple((n, type(s), s.training, s.extra_repr()) for n, s in m.named_modules()))


def _check(models: Sequence[nn.Module]) -> None:
    if isinstance(models, nn.Module) or not isinstance(models, (list, tuple, nn.ModuleList)):
        raise MutwoError("many(models, loss): models is a list of nn.Modules, one per model of the array")
    if not models:
        raise MutwoError("many(models, loss): no models given; give at least one nn.Module")
    for i, m in enumerate(models):
        if not isinstance(m, nn.Module):
            raise MutwoError(f"many(models, loss): models[{i}] is a {type(m).__name__}, not an nn.Module")
    kinds = {type(m) for m in models}
    if len(kinds) > 1:
        raise MutwoError(f"many(models, loss): the models are of {len(kinds)} architectures "
                         f"({', '.join(sorted(k.__name__ for k in kinds))}); an array holds models of one "
                         "architecture that differ in initialisation, hyperparameters or width; make one array "
                         "per architecture")
    seen = set()
    for i, m in enumerate(models):
        for p in m.parameters():
            if id(p) in seen:
                raise MutwoError(f"many(models, loss): models[{i}] shares a parameter with another model; each "
                                 "model of the array needs its own parameters (copy.deepcopy it)")
            seen.add(id(p))


class ModelArray(nn.Module):
    """N models trained as one fused step; calling it gives their N losses
    (made by many(); see its docstring)."""

    def __init__(self, models: Sequence[nn.Module], loss: Callable[..., torch.Tensor], backend: Optional[Callable],
                 randomness: str, plan: Optional[Callable[[], dict]] = None) -> None:
        super().__init__()
        self.backend, self._plan = backend, plan  # the torch.compile backend (None: eager), and its report
        self.models = nn.ModuleList(models)
        self.loss = loss
        self.randomness = randomness
        groups: dict[tuple, list[int]] = {}
        for i, m in enumerate(models):
            groups.setdefault(_shape_key(m), []).append(i)
        self.groups: list[list[int]] = list(groups.values())  # the sub-arrays, in the order of their first model
        order = [i for g in self.groups for i in g]
        self._inverse = torch.tensor(sorted(range(len(order)), key=order.__getitem__))
        self._step = torch.compile(self._losses, backend=backend, dynamic=False) if backend is not None \
            else self._losses
        self._history: list[torch.Tensor] = []

    def forward(self, *batch: Any, shared: bool = True) -> torch.Tensor:
        """The N models' losses on `batch` (a tensor of shape [N]): with
        `shared` (the default), every model reads the same batch; otherwise each
        argument has a leading dimension of N, and model i reads its slice i."""
        if not shared:
            n = len(self.models)
            for k, x in enumerate(batch):
                if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] != n:
                    raise MutwoError(f"array(..., shared=False): argument {k} needs a leading dimension of "
                                     f"{n} (one slice per model), got "
                                     f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        losses = self._step(*batch, shared=shared)
        if not isinstance(losses, torch.Tensor) or losses.dim() != 1:
            raise MutwoError(f"many(models, loss): loss(model, *batch) must return one scalar per model; it "
                             f"returned {tuple(losses.shape[1:]) if isinstance(losses, torch.Tensor) else losses!r} "
                             "per model (reduce it, e.g. with .mean())")
        self._history.append(losses.detach())
        return losses

    def _losses(self, *batch: Any, shared: bool) -> torch.Tensor:
        parts = []
        for g in self.groups:
            members = [self.models[i] for i in g]
            base = members[0]
            if len(members) == 1:  # a model set apart runs as itself: its own loss, bit for bit
                parts.append(self.loss(base, *(batch if shared else tuple(x[g[0]] for x in batch))).unsqueeze(0))
                continue
            params = {n: torch.stack([m.get_parameter(n) for m in members]) for n, _ in base.named_parameters()}
            buffers = {n: torch.stack([m.get_buffer(n) for m in members]) for n, _ in base.named_buffers()}
            xs = batch if shared else tuple(x[g] for x in batch)

            def one(p: dict, b: dict, *args: Any, base: nn.Module = base) -> torch.Tensor:
                return self.loss(lambda *a, **k: torch.func.functional_call(base, (p, b), a, k), *args)
            dims = (0, 0, *([None] * len(xs) if shared else [0] * len(xs)))
            parts.append(torch.vmap(one, in_dims=dims, randomness=self.randomness)(params, buffers, *xs))
            # What the step wrote to the stacked buffers (BatchNorm's running statistics), back to each model.
            for n, stacked in buffers.items():
                for j, m in enumerate(members):
                    m.get_buffer(n).copy_(stacked[j])
        losses = torch.cat(parts) if len(parts) > 1 else parts[0]
        return losses[self._inverse.to(losses.device)] if len(parts) > 1 else losses

    def report(self) -> dict:
        """Each model's losses, step by step (`losses`: N lists), the
        sub-arrays (`groups`: the models' indices), and, where the step was
        compiled under mutwo's backend, its plan (`plan`: mutwo.torch.report's
        dict; its "step" holds the array's measured and predicted peaks)."""
        history = torch.stack(self._history).cpu().t().tolist() if self._history else [[] for _ in self.models]
        out: dict = {"models": len(self.models), "groups": self.groups, "steps": len(self._history),
                     "losses": history}
        if self._plan is not None and self._history:
            out["plan"] = self._plan()
        return out


def check(models: Sequence[nn.Module], loss: Any, budget: Any, host_memory: Any, randomness: str,
          compile: bool) -> None:
    """mutwo.torch.many's arguments, each refused with what to do instead."""
    _check(models)
    if not callable(loss):
        raise MutwoError(f"many(models, loss): loss is a {type(loss).__name__}; give a function "
                         "loss(model, *batch) returning one model's scalar loss")
    if randomness not in ("different", "same"):
        raise MutwoError(f"many(..., randomness={randomness!r}): 'different' (each model its own dropout masks) "
                         "or 'same'")
    if not compile and (budget is not None or host_memory is not None):
        raise MutwoError("many(..., compile=False): a budget or host_memory needs the compiled step; drop "
                         "compile=False")
