"""mutwo many: N copies of a zoo model trained as one graph. Copy i's losses
equal `mutwo run --seed S+i --lr lrs[i]`'s bit for bit on the CPU, with no
plan and under a budget that recomputes activations (dropout masks among
them, replayed from each copy's own generator).
"""
from __future__ import annotations

import json

import pytest

from mutwo_cli import last_line, mutwo

SEED, LRS, STEPS = 5, [0.01, 0.05, 0.1], 2
STEP = ["--model", "mlp", "--batch", "128", "--steps", str(STEPS)]


def run_losses(seed: int, lr: float) -> list[float]:
    return json.loads(last_line(mutwo("run", *STEP, "--seed", str(seed), "--lr", str(lr), "--json")))["losses"]


@pytest.fixture(scope="module")
def alone() -> list[list[float]]:
    """Each copy trained alone, by mutwo run."""
    return [run_losses(SEED + i, lr) for i, lr in enumerate(LRS)]


@pytest.mark.parametrize("budget", [[], ["--budget", "lowest"]], ids=["no-plan", "lowest"])
def test_copies_train_as_alone(alone: list[list[float]], budget: list[str]) -> None:
    r = json.loads(last_line(mutwo("many", *STEP, "--copies", "3", "--lrs", ",".join(map(str, LRS)),
                                   "--seed", str(SEED), *budget, "--quiet", "--json")))
    assert r["losses"] == alone, (r["losses"], alone)
    assert r["seeds"] == [SEED, SEED + 1, SEED + 2] and r["lrs"] == LRS, r
    assert r["model_steps_per_s"] > 0 and r["peak_bytes"] > 0, r
    if budget:  # the budget recomputes, and the measured peak holds it
        assert r["dropped"] > 0 and r["recompute_nodes"] > 0, r
        assert r["peak_bytes"] <= r["budget_bytes"], r
    else:
        assert r["budget_bytes"] is None and r["dropped"] == 0, r


def test_one_lr_for_every_copy() -> None:
    r = json.loads(last_line(mutwo("many", *STEP, "--copies", "2", "--lrs", "0.05", "--seed", "3", "--json")))
    assert r["lrs"] == [0.05, 0.05]
    assert r["losses"] == [run_losses(3, 0.05), run_losses(4, 0.05)]


def test_transformer_copies_with_adam_under_a_budget() -> None:
    """A small decoder (dropout, the chunked vocabulary loss) with Adam, at 50%."""
    step = ["--model", "transformer-lm", "--batch", "16", "--optimizer", "adam", "--steps", "2"]
    r = json.loads(last_line(mutwo("many", *step, "--copies", "2", "--lrs", "0.01,0.1", "--budget", "50%",
                                   "--quiet", "--json")))
    assert r["dropped"] > 0 and r["peak_bytes"] <= r["budget_bytes"], r
    for i, lr in enumerate(["0.01", "0.1"]):
        alone = json.loads(last_line(mutwo("run", *step, "--seed", str(i), "--lr", lr, "--json")))["losses"]
        assert r["losses"][i] == alone, (i, r["losses"][i], alone)
