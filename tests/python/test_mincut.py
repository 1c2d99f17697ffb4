# The compiled route's shim over PyTorch's min-cut partitioner (python/mutwo/compiled/_mincut.py),
# checked against PyTorch itself inside real partitions on Inductor's CPU backend:
# - its min-cut, with networkx's Boykov-Kolmogorov max-flow, cuts where PyTorch's
#   default (preflow-push) does, at every activation_memory_budget of the ladder and
#   for prefixes of the anchors;
# - Query.schedules, which mirrors the forward and backward modules without building
#   them, runs the same nodes in the same order as the modules PyTorch builds
#   (Query.modules), with the same inputs and outputs, for every one of those saved sets;
# - the core's knapsack (plan::compiled::dp_knapsack) answers as PyTorch's dp_knapsack, to the bit.
# When PyTorch changes its extraction or its backward's reordering, this fails.
from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import torch
from torch import nn
from torch._functorch import partitioners as _pt

from workloads import hf_models
import models
from mutwo.compiled import _frontier, _loss, _mincut

MODELS: dict[str, Callable[[], tuple[nn.Module, tuple, Callable]]] = {
    "llama-dropout": lambda: models.llama(dropout=0.1),  # random ops, pinned as the backend pins them
    "vit": models.vit,
    "unet": models.unet,
    "hf-gpt2": lambda: hf_models.factory("gpt2", batch=4, seq=32),
}


class _Checked(Exception):
    """Raised once the checks ran: Inductor's code generation is not needed."""


class _Checker(torch._inductor.custom_graph_pass.CustomPartitionerFn):
    """PyTorch's partition with mutwo's shim in place, checking the shim on
    the saved sets the compiled route prices, then stopping the compile."""

    def __init__(self, check: Callable[[_mincut.Query], None]) -> None:
        self.check, self.graphs = check, 0

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        _mincut.pin_random(gm)
        _loss.pin(gm)

        def chooser(q: _mincut.Query) -> list[torch.fx.Node]:
            self.check(q)
            self.graphs += 1
            raise _Checked()
        with _mincut.choosing(gm, kwargs["num_fwd_outputs"], chooser):
            return _mincut.partition(gm, joint_inputs, kwargs)

    def uuid(self) -> Any:
        return None


def _partition(name: str, check: Callable[[_mincut.Query], None]) -> int:
    model, inputs, loss_fn = MODELS[name]()
    torch._dynamo.reset()
    checker = _Checker(check)
    step = torch.compile(models.Step(copy.deepcopy(model), loss_fn), backend="inductor", dynamic=False)
    with torch._inductor.config.patch(custom_partitioner_fn=checker), \
            torch._functorch.config.patch(enable_autograd_cache=False), \
            pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as stopped:
        step(*inputs)
    if not isinstance(stopped.value.inner_exception, _Checked):
        raise stopped.value.inner_exception  # a check that failed, or the compile's own error
    return checker.graphs


def _saved_sets(q: _mincut.Query) -> dict[str, list[torch.fx.Node]]:
    order = _frontier.Frontier(q, "cpu").order()
    sets = {f"compile:{x:g}": q.pytorch(x) for x in (1.0, *_frontier.LADDER)}
    for k in sorted({0, len(order) // 3, len(order) // 2, len(order)}):
        sets[f"mutwo:{k}"] = q.with_recomputed(order[:k])
    return sets


def _names(nodes: list[torch.fx.Node]) -> list[str]:
    return [n.name for n in nodes]


@pytest.mark.parametrize("name", list(MODELS))
def test_schedules_run_what_pytorchs_modules_run(name: str) -> None:
    compared: list[str] = []

    def check(q: _mincut.Query) -> None:
        for label, saved in _saved_sets(q).items():
            made = _mincut._partition_schedules(q, saved)
            assert made is not None, f"{name} {label}: the mirror gave up on an ordinary graph"
            for phase, mine, module in zip(("forward", "backward"), made, q.modules(saved)):
                theirs = _mincut.Schedule.of(module)
                where = f"{name} {label} {phase}"
                assert _names(mine.nodes) == _names(theirs.nodes), where
                assert set(_names(mine.inputs)) == set(_names(theirs.inputs)), where
                assert set(_names(mine.outputs)) == set(_names(theirs.outputs)), where
                for n, m in zip(mine.nodes, theirs.nodes):
                    assert set(_names(mine.users[n])) == set(_names(theirs.users[m])), f"{where}: users of {n.name}"
            compared.append(label)
    assert _partition(name, check) >= 1
    assert len(compared) >= 10, compared


@pytest.mark.parametrize("name", ["llama-dropout", "unet"])
def test_the_cores_max_flow_cuts_where_networkx_does(name: str, monkeypatch) -> None:
    """Every saved set the frontier asks for (PyTorch's ladder, each anchor
    set's cut) is the one networkx's own preflow-push and PyTorch's own
    knapsack give on the graph PyTorch builds for that set (mutwo cuts one
    graph again, and solves the knapsack in the core, instead)."""
    cuts: list[list[str]] = []

    def check(q: _mincut.Query) -> None:
        mine = {k: _names(v) for k, v in _saved_sets(q).items()}
        with monkeypatch.context() as m:
            m.setattr(_mincut, "_minimum_cut", _mincut._ORIGINAL_MINIMUM_CUT)
            m.setattr(_mincut, "_reusable", lambda options: False)
            m.setattr(_mincut, "_dp_knapsack", _pt.dp_knapsack)  # PyTorch's own, in Python
            fresh = _mincut.Query(q.joint_module, q.joint_graph, q.node_info, q.num_fwd_outputs)
            theirs = {k: _names(v) for k, v in _saved_sets(fresh).items()}
        assert mine == theirs
        cuts.append(list(mine))
    assert _partition(name, check) >= 1
    assert cuts and len(cuts[0]) >= 10


def test_the_cores_knapsack_is_pytorchs_to_the_bit() -> None:
    """plan::compiled::dp_knapsack against PyTorch's dp_knapsack on random
    items: equal runtimes (ties), items of no memory, items over the limit,
    memories that round half way."""
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = int(torch.randint(0, 24, (1,), generator=g))
        memory = [round(float(x), int(torch.randint(2, 6, (1,), generator=g))) for x in torch.rand(n, generator=g)]
        memory = [0.0 if i % 7 == 3 else 0.00005 if i % 11 == 5 else m for i, m in enumerate(memory)]
        runtime = [float(x) for x in torch.randint(1, 5, (n,), generator=g).float() / 3] if trial % 2 else \
            [float(x) for x in torch.rand(n, generator=g)]
        limit = float(torch.rand(1, generator=g)) * max(sum(memory), 0.1)
        assert _mincut._dp_knapsack(memory, runtime, limit) == _pt.dp_knapsack(memory, runtime, limit), trial


def test_a_log_softmax_its_gather_reads_is_not_written_on_cuda() -> None:
    """Inductor lowers gather as a load inside its own loop (lowering.py's
    gather), so the fp32 log-softmax a cross-entropy gathers its targets from
    is never written. On an H200 the bench decoder's forward was predicted
    exactly that tensor's 1,048,576,000 bytes high while it counted
    (docs/compiled.md, "Where the model missed")."""
    gathered: list[str] = []

    def check(q: _mincut.Query) -> None:
        fw, _ = q.schedules(q.pytorch(1.0))
        outputs = set(fw.outputs)
        for n in fw.nodes:
            if n.target is torch.ops.aten.gather.default and n.args[0] not in outputs:
                read = n.args[0]
                gathered.append(read.name)
                assert _frontier._unmaterialized(read, fw, outputs), f"{read.name} ({read.target}), read by {n.name}"
    assert _partition("llama-dropout", check) >= 1
    assert gathered, "the decoder's cross-entropy has no gather in its forward"
