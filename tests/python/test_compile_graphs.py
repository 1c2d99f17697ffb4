# One byte budget over several compiled graphs (docs/python.md, "Several
# graphs, one budget"), on Inductor's CPU backend:
# - per-block compile of a tiny LLaMA-style decoder (one backend object for
#   every block; identical blocks share one graph, called once per block);
# - Hugging Face GPT-2 (tiny config), whose loss is a second graph after a
#   graph break.
# For each: the measured step peak of plain compile's plan (budget None) and
# of the lowest plan ("lowest") are the bounds; budgets between them hold,
# measured, in at most three compiles per graph, with the losses of the
# uncompiled model; a different budget gives a different plan. Bad input: a
# backend given a second budget through torch.compile's options; a budget
# below what the graphs reach together (BudgetError naming the floor).
from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import pytest
import torch

from workloads import hf_models
import loop
import models
import mutwo.torch as mt
from workloads.llama_decoder import Llama
from mutwo import _budget
from mutwo.compiled import _joint

TOLERANCE = 1e-5  # relative, on each step's loss: fusion may reorder a sum
STEPS = 4  # the first plan, the plan the measured step chose, one to measure it, one more
MAX_COMPILES = 3  # per graph: _step.MAX_COMPILES


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch) -> None:
    """No cached corrections from another test: each run plans from its own measurements."""
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "cache"))


def _per_block() -> tuple[torch.nn.Module, tuple, Callable, Callable]:
    model, inputs, loss_fn = models.llama(batch=16)

    def compile_blocks(m: torch.nn.Module, backend: Any) -> Callable:
        for block in m.layers:
            block.compile(backend=backend, dynamic=False)
        return m
    return model, inputs, loss_fn, compile_blocks


def _graph_break() -> tuple[torch.nn.Module, tuple, Callable, Callable]:
    # No dropout: the losses are compared with the uncompiled model's, whose
    # random numbers are not Inductor's.
    model, inputs, loss_fn = hf_models.factory("gpt2", batch=8, seq=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                               attn_pdrop=0.0)
    return model, inputs, loss_fn, lambda m, backend: torch.compile(m, backend=backend, dynamic=False)


SETUPS = {"per-block": _per_block, "graph-break": _graph_break}


def _train(setup: str, budget: Any, steps: int = STEPS, budgets: Optional[list] = None) -> tuple[list[float], dict]:
    """Losses of `steps` steps from the setup's weights (SGD), and the backend's
    report; `budgets` gets the step's budget in bytes after each step."""
    torch._dynamo.reset()
    start, inputs, loss_fn, compile_ = SETUPS[setup]()
    model = copy.deepcopy(start)
    backend = mt.backend(budget=budget) if budget != "eager" else None
    run = compile_(model, backend) if backend else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for _ in range(steps):
        loss = loss_fn(run, *inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if budgets is not None:
            budgets.append(mt.report(backend)["step"]["budget_bytes"])
    return losses, (mt.report(backend) if backend else {})


@pytest.fixture(scope="module")
def bounds() -> Callable[[str], dict]:
    """Per setup: eager losses, and the measured step peaks of plain compile's
    plan and of the lowest (run once each)."""
    done: dict[str, dict] = {}

    def get(setup: str) -> dict:
        if setup not in done:
            eager, _ = _train(setup, "eager")
            _, top = _train(setup, None, 2)
            _, low = _train(setup, "lowest", 3)
            done[setup] = {"eager": eager, "top": top["step"]["measured_peak_bytes"],
                           "floor": low["step"]["measured_peak_bytes"], "graphs": len(top["graphs"]),
                           "order": top["step"]["order"]}
        return done[setup]
    return get


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= TOLERANCE * max(1.0, abs(y)) for x, y in zip(a, b))


@pytest.mark.parametrize("setup", list(SETUPS))
def test_a_budget_between_the_floor_and_plain_compile_holds_across_graphs(setup: str, bounds) -> None:
    b = bounds(setup)
    assert b["floor"] < b["top"], f"{setup}: nothing to plan ({b})"
    if setup == "per-block":  # two blocks, one graph; forwards in order, backwards reversed
        assert b["graphs"] == 1 and b["order"] == ["fwd 0", "fwd 0", "bwd 0", "bwd 0"], b
    else:  # the model, then its loss after the break
        assert b["graphs"] == 2 and b["order"] == ["fwd 0", "fwd 1", "bwd 1", "bwd 0"], b
    chosen = {}
    for share in (0.3, 0.7):
        budget = int(b["floor"] + share * (b["top"] - b["floor"]))
        losses, info = _train(setup, f"{budget}B")
        step = info["step"]
        assert step["budget_bytes"] == budget and step["error"] is None, step
        assert step["measured_peak_bytes"] <= budget, (share, step, info["attempts"])
        assert all(g["compiles"] <= MAX_COMPILES for g in info["graphs"]), [g["attempts"] for g in info["graphs"]]
        assert _close(losses, b["eager"]), (share, losses, b["eager"])
        parts = [g["measured_contribution_bytes"] for g in info["graphs"]]
        assert sum(parts) + step["other_bytes"] == step["measured_peak_bytes"], (parts, step)
        chosen[share] = [g["chosen"] for g in info["graphs"]]
        # The summary numbers graphs as the progress lines do, leaves out a
        # graph with no figure, and gives the step's peak under plain compile.
        text = str(info)
        assert step["unplanned_peak_bytes"] is not None, step
        assert "as plain torch.compile would plan it" in text and "peak - as plain" not in text, text
        numbers = {int(line.split()[1].rstrip(":")) for line in text.splitlines() if line.startswith("  graph ")}
        assert numbers and numbers <= {g["index"] for g in info["graphs"]}, (numbers, text)
    assert chosen[0.3] != chosen[0.7], chosen  # the plan follows the budget


def test_a_budget_below_what_the_graphs_reach_together_names_the_floor(bounds) -> None:
    floor = bounds("per-block")["floor"]
    # Far below the floor: refused at the first compile, before a step runs, naming the graph's source line.
    with pytest.raises(mt.BudgetError, match=r"cannot be met by the compiled graph at \S+\.py:\d+ .*lowest "
                                             r"predicted added peak is [0-9.]+ MiB.*try budget="):
        _train("per-block", f"{floor // 2}B", 3)


def test_one_backend_takes_one_budget() -> None:
    torch._dynamo.reset()
    model, inputs, loss_fn = models.llama()
    backend = mt.backend(budget="4MiB")
    for block in model.layers:
        block.compile(backend=backend, options={"budget": "5MiB"}, dynamic=False)
    with pytest.raises(mt.MutwoError, match=r"made with budget='4MiB'.*gives it budget='5MiB'.*one backend holds "
                                            r"one budget"):
        loss_fn(model, *inputs)
    made = _budget.parse("4MiB")
    mt._same_budget(made, "4MiB", {"budget": "4096KiB"}, None)  # the same budget, written otherwise: accepted
    with pytest.raises(mt.MutwoError, match="takes no mode"):
        mt._same_budget(made, "4MiB", None, "max-autotune")


def test_the_instances_of_one_graph_run_two_plans_as_the_model_says() -> None:
    # Four identical blocks, one graph called four times a step. Told to run a
    # Split (the first two calls one candidate, the last two another), the
    # step runs both compiled candidates, each instance its own, and its
    # measured peak is the model's for that Split from the first step's
    # record and each candidate's own measurement; the losses stay eager's.
    torch._dynamo.reset()
    torch.manual_seed(0)
    start = Llama(layers=4)
    text = torch.randint(128, (16, 33))
    inputs = (text[:, :-1].contiguous(), text[:, 1:].contiguous())
    losses = {}
    for run in ("eager", "split"):
        torch._dynamo.reset()
        model = copy.deepcopy(start)
        backend = mt.backend(budget="1GiB") if run == "split" else None
        for block in model.layers if backend else []:
            block.compile(backend=backend, dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        losses[run] = []
        with loop.gc_paused():
            for i in range(3):
                loss = models.lm_loss(model, *inputs)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses[run].append(loss.item())
                if backend and i == 0:  # measure a second step on compile:1: the first may hold one-off costs
                    (graph,) = backend.graphs
                    graph.measured_key = ""  # (in one process after other tests it measured 0.8 MB lower)
                if backend and i == 1:
                    step, first = backend.step, backend.step.last
                    assert first.instances == {0: 4} and graph.running_name() == "compile:1" and step.steps == 2
                    other = min(graph.menu, key=lambda c: c.retained).name  # the candidate that saves least
                    split = _joint.split_name("compile:1", 2, other)
                    graph.retarget(split)
    assert _close(losses["split"], losses["eager"]), losses
    second = step.last
    assert graph.running_name() == split and len(graph.attempts) == 2 and second.running[0] == graph.running_key()
    assert len(second.by_plan[0]) == 2, second.by_plan  # each candidate measured on its own instances
    menus, _, _ = step._menus()
    k = next(k for k, o in enumerate(menus[0]) if o.name == split)
    predicted = max(_joint.interval_peaks(menus, [first], {0: k}))
    # within 0.01% (measured here: 4 bytes of 8.1 MiB, a scalar the model does not place)
    assert abs(predicted - second.peak) <= 1e-4 * second.peak < first.peak, (predicted, second.peak, first.peak)


@pytest.mark.parametrize("fraction", ["60%", "20%"])
def test_a_fraction_is_of_the_whole_step(fraction: str, bounds) -> None:
    # The model and its loss after a graph break: the loss graph is small and
    # can drop little of what it saves, so alone it would refuse a low
    # percentage that the step as a whole meets. The fraction is resolved to
    # bytes once, after the first measured step, between the step's floor and
    # plain compile's peak, and every later step holds it.
    b = bounds("graph-break")
    budgets: list = []
    losses, info = _train("graph-break", fraction, budgets=budgets)
    step = info["step"]
    assert step["error"] is None, step
    assert budgets[0] is not None and len(set(budgets)) == 1, budgets  # resolved once, never moved
    assert b["floor"] <= step["budget_bytes"] <= b["top"], (step["budget_bytes"], b)
    assert step["measured_peak_bytes"] <= step["budget_bytes"], (step, [g["attempts"] for g in info["graphs"]])
    assert _close(losses, b["eager"]), (losses, b["eager"])
