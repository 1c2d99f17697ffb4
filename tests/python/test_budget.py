# One budget language (docs/budgets.md) under mutwo.torch.wrap: a float in
# (0, 1], "60%" and the bytes they resolve to plan the same; "lowest" is the
# planner's lowest peak and never refused; a refusal names a percentage that
# fits; the default (no budget) trains any model; a DataLoader's short last
# batch fits where the full batches did; bad budgets, planners and capture()
# arguments are refused at the call, before any step.
from __future__ import annotations

import json
import pathlib
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import models
import mutwo.torch as mt
from mutwo import _budget
from mutwo.capture import CaptureError, capture


def _step(model: nn.Module, inputs: tuple, loss_fn, budget, **kw) -> dict:
    """One training step of `model` wrapped under `budget`: its report."""
    w = mt.wrap(model, budget, profile="flops", **kw)
    loss_fn(w, *inputs).backward()
    return mt.report(w)


def _fixed_and_activation(info: dict) -> tuple[int, int]:
    a = info["unplanned_activation_bytes"]
    return info["unplanned_peak_bytes"] - a, a


# -- parsing, as the CLI's --budget ----------------------------------------------------------------


def test_parse_reads_fractions_sizes_and_lowest() -> None:
    assert _budget.parse(0.6) == _budget.parse("60%") == _budget.Budget("fraction", fraction=0.6)
    assert _budget.parse(1.0) == _budget.Budget("fraction", fraction=1.0)
    assert _budget.parse("6GiB") == _budget.parse(6 << 30) == _budget.Budget("bytes", bytes=6 << 30)
    assert _budget.parse("1500MiB").bytes == 1500 << 20
    assert _budget.parse("lowest") == _budget.parse("LOWEST") == _budget.Budget("lowest")
    assert _budget.parse(None) is None
    assert _budget.parse(0.6).text() == "60%" and _budget.parse("2GiB").text() == "2GiB"
    assert _budget.parse("100B").text() == "100B"  # a size with its unit is taken at its word


CASES = json.loads((pathlib.Path(__file__).parents[1] / "core" / "data" / "budgets.json").read_text())["cases"]


@pytest.mark.parametrize("case", CASES, ids=[repr(c["text"]) for c in CASES])
def test_the_grammar_is_the_cores_case_table(case: dict) -> None:
    """The same table tests/core/test_inputs.cpp reads: one grammar in both languages."""
    if "error" in case:
        with pytest.raises(ValueError) as e:
            _budget.parse(case["text"])
        for needle in case["error"]:
            assert needle in str(e.value), (needle, str(e.value))
        assert str(e.value).startswith(f"budget={case['text']!r}")
        return
    want = {"bytes": _budget.Budget("bytes", bytes=case.get("bytes", 0)), "lowest": _budget.Budget("lowest"),
            "fraction": _budget.Budget("fraction", fraction=case.get("fraction", 0.0))}[case["kind"]]
    assert _budget.parse(case["text"]) == want


@pytest.mark.parametrize("value,needle", [  # Python's own values: numbers and other types
    (60, "write 60% or 60MiB"), (1, "write 100% or 1MiB"), (1.5, "write 1.5% or 1.5MiB"), (True, "not a bool"),
    (0.0, "bare number"), (-0.5, "not a budget"), ([60], "not a list"), (float("nan"), "not a budget"),
])
def test_parse_refuses_with_what_to_write(value, needle: str) -> None:
    with pytest.raises(ValueError, match=re.escape(needle)):
        _budget.parse(value)


# -- one meaning: 0.6 = "60%" = the bytes they resolve to ------------------------------------------


@pytest.mark.parametrize("name", ["unet", "llama"])
def test_fraction_percentage_and_bytes_plan_the_same(name: str) -> None:
    model, inputs, loss_fn = models.FACTORIES[name]()
    plans = [_step(model, inputs, loss_fn, b) for b in (0.6, "60%")]
    fixed, activation = _fixed_and_activation(plans[0])
    resolved = _budget.resolve(_budget.parse(0.6), fixed, activation)
    assert fixed + int(0.6 * activation) == resolved, "resolve() is not F + f * A"
    plans += [_step(model, inputs, loss_fn, f"{resolved}B"), _step(model, inputs, loss_fn, resolved)]
    assert resolved >= 1 << 20, "the integer form needs at least 1 MiB"
    for p in plans:
        assert p["budget_bytes"] == resolved, (name, p["budget"], p["budget_bytes"], resolved)
        assert p["dropped"] == plans[0]["dropped"] and p["predicted_peak_bytes"] == plans[0]["predicted_peak_bytes"]
    assert plans[0]["dropped"], f"{name}: 60% dropped nothing; the test says nothing about planning"
    # 100% is the unplanned peak, and nothing is dropped there.
    full = _step(model, inputs, loss_fn, 1.0)
    assert full["budget_bytes"] == full["unplanned_peak_bytes"] and not full["dropped"]


# -- lowest, and refusals that say what fits -------------------------------------------------------


def test_lowest_is_the_floor_a_refusal_names() -> None:
    model, inputs, loss_fn = models.llama()
    low = _step(model, inputs, loss_fn, "lowest")
    assert low["feasible"] and low["budget_bytes"] == low["predicted_peak_bytes"]
    with pytest.raises(mt.BudgetError) as e:
        _step(model, inputs, loss_fn, "1KiB")
    floor = int(re.search(r"lowest peak the mutwo planner reaches is [0-9.]+ [KMG]?i?B = ([0-9]+) B", str(e.value))[1])
    assert low["predicted_peak_bytes"] <= floor, (low["predicted_peak_bytes"], floor)
    assert 'try budget="' in str(e.value) and 'budget="lowest"' in str(e.value), str(e.value)


def test_a_refused_percentage_names_one_that_fits() -> None:
    model, inputs, loss_fn = models.llama()
    with pytest.raises(mt.BudgetError) as e:
        _step(model, inputs, loss_fn, "10%")
    text = str(e.value)
    said = float(re.search(r"which is ([0-9.]+)% as a budget", text)[1])
    ask = re.search(r'try budget="([0-9]+)%"', text)
    assert ask, text
    assert said <= int(ask[1]) < said + 1 and int(ask[1]) > 10, text
    info = _step(model, inputs, loss_fn, f"{ask[1]}%")  # the percentage it names fits
    assert info["feasible"] and info["predicted_peak_bytes"] <= info["budget_bytes"]


# -- the default: no budget, never refused -----------------------------------------------------------


def _mlp() -> tuple[nn.Module, tuple, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Dropout(0.1), nn.Linear(128, 10))
    return model, (torch.randn(16, 32), torch.randint(10, (16,))), lambda m, x, y: F.cross_entropy(m(x), y)


@pytest.mark.parametrize("factory", [_mlp, models.unet, lambda: models.llama(dropout=0.1), models.vit],
                         ids=["mlp", "unet", "llama", "vit"])
def test_the_default_budget_trains_ten_steps(factory) -> None:
    model, inputs, loss_fn = factory()
    w = mt.wrap(model)  # no budget: as a user first tries it, the module as it is
    opt = torch.optim.SGD(w.parameters(), lr=0.01, momentum=0.9)
    losses = []
    for _ in range(10):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(w, *inputs)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    info = mt.report(w)
    assert info["budget"] is None and info["unplanned"] and info["steps"] == 10 and not w._sessions, info
    assert all(torch.isfinite(torch.tensor(losses))), losses


# -- a DataLoader's short last batch ---------------------------------------------------------------


def test_a_short_last_batch_fits_where_full_batches_did() -> None:
    """19 samples in batches of 8: 8, 8, 3. At 35% the LLaMA-style decoder's
    batch of 8 fits (its lowest is near 30%), while a batch of 3 alone does
    not (its lowest is near 41%: parameters weigh more); planned after the
    8s, it keeps their budget in bytes and fits."""
    model, (tokens, targets), loss_fn = models.llama(batch=19)
    three = (tokens[:3], targets[:3])
    with pytest.raises(mt.BudgetError):  # the case this test is about: 35% of a batch of 3 alone is refused
        _step(model, three, loss_fn, "35%")
    data = torch.utils.data.TensorDataset(tokens, targets)
    w = mt.wrap(model, "35%", profile="flops")
    opt = torch.optim.SGD(w.parameters(), lr=0.01)
    budgets, sizes = [], []
    for x, y in torch.utils.data.DataLoader(data, batch_size=8):
        opt.zero_grad(set_to_none=True)
        loss_fn(w, x, y).backward()
        opt.step()
        info = mt.report(w)
        sizes.append(len(x))
        budgets.append(info["budget_bytes"])
        assert info["feasible"] and info["predicted_peak_bytes"] <= info["budget_bytes"]
    assert sizes == [8, 8, 3] and budgets[2] == budgets[0], (sizes, budgets)


# -- refused at the call, before any step ----------------------------------------------------------


@pytest.mark.parametrize("kwargs,needle", [
    ({"budget": "abc"}, "budget='abc' is not a budget"), ({"budget": 60}, 'write 60% or 60MiB'),
    ({"budget": "-5GiB"}, "not a budget"), ({"budget": "60%", "planner": "greedy"}, "unknown planner"),
])
def test_wrap_and_backend_refuse_at_the_call(kwargs: dict, needle: str) -> None:
    model, _, _ = _mlp()
    with pytest.raises(mt.MutwoError, match=re.escape(needle)):
        mt.wrap(model, **kwargs)
    with pytest.raises(mt.MutwoError, match=re.escape(needle)):
        mt.backend(**kwargs)


def test_capture_refuses_its_arguments_before_tracing(tmp_path) -> None:
    model, (x, y), loss_fn = _mlp()
    path = tmp_path / "step.json"
    for args, needle in [((model, x, loss_fn, str(path)), "example_inputs: a tuple or list"),
                         ((lambda v: v, (x, y), loss_fn, str(path)), "capture() takes an nn.Module"),
                         ((model, (x, y), "loss", str(path)), "loss_fn: a function"),
                         ((model, (x, y), loss_fn, str(tmp_path)), "give the step file to write")]:
        with pytest.raises(CaptureError, match=re.escape(needle)):
            capture(*args)
    assert not list(tmp_path.iterdir()), "a refused capture wrote something"


class _Broken(nn.Module):
    """Two graphs under torch.compile: a graph break between its layers."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        torch._dynamo.graph_break()
        return self.b(h)


def test_the_compiled_routes_refusals_are_mutwos_own() -> None:
    """A byte budget cannot be split between two graphs: the call raises
    MutwoError itself, not Dynamo's BackendCompilerFailed around it."""
    torch._dynamo.reset()
    compiled = torch.compile(_Broken(), backend=mt.backend(budget="2GiB", compiler="mutwo"))
    with pytest.raises(mt.MutwoError, match="a byte budget .* cannot be split between graphs"):
        compiled(torch.randn(4, 8)).sum().backward()
    torch._dynamo.reset()
