"""mutwo many: N copies of a zoo model trained as one graph. Copy i's losses
equal `mutwo run --seed S+i --lr lrs[i]`'s bit for bit on the CPU, with no
plan and under a budget that recomputes activations (dropout masks among
them, replayed from each copy's own generator), in the order the scheduler
chooses and in each order asked for (the paired order interleaves one copy's
backward with the next one's forward).
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


def many(*args: str) -> dict:
    return json.loads(last_line(mutwo("many", *STEP, "--copies", "3", "--lrs", ",".join(map(str, LRS)),
                                      "--seed", str(SEED), *args, "--quiet", "--json")))


@pytest.mark.parametrize("args", [[], ["--budget", "lowest", "--order", "by-phase"],
                                  ["--budget", "lowest", "--order", "paired"]],
                         ids=["no-plan", "lowest-by-phase", "lowest-paired"])
def test_copies_train_as_alone(alone: list[list[float]], args: list[str]) -> None:
    r = many(*args)
    assert r["losses"] == alone, (r["losses"], alone)
    assert r["seeds"] == [SEED, SEED + 1, SEED + 2] and r["lrs"] == LRS, r
    assert r["model_steps_per_s"] > 0 and r["peak_bytes"] > 0, r
    if args:  # the budget recomputes, and the measured peak holds it
        assert r["order"] == args[-1] and [k["order"] for k in r["orders"]] == [args[-1]], r
        assert r["dropped"] > 0 and r["recompute_nodes"] > 0, r
        assert r["peak_bytes"] <= r["budget_bytes"], r
    else:
        assert r["budget_bytes"] is None and r["dropped"] == 0, r


def test_the_chosen_order_trains_as_alone(alone: list[list[float]]) -> None:
    """Under --budget lowest the scheduler plans every order and runs the one
    with the lowest predicted peak: not phase order here (sequential holds one
    copy's activations at a time), and the copies' losses are still their own."""
    r = many("--budget", "lowest")
    orders = {k["order"]: k for k in r["orders"]}
    assert set(orders) == {"by-phase", "sequential", "paired"}, r
    best = min(r["orders"], key=lambda k: k["predicted_peak_bytes"])
    assert r["order"] == best["order"] != "by-phase", r
    assert r["predicted_peak_bytes"] == best["predicted_peak_bytes"] < orders["by-phase"]["predicted_peak_bytes"], r
    assert r["peak_bytes"] <= r["budget_bytes"], r
    assert r["losses"] == alone, (r["losses"], alone)


def test_under_a_byte_budget_the_fastest_order_that_fits(alone: list[list[float]]) -> None:
    """Below phase order's unplanned peak: every order is planned under the
    same bytes, the chosen is the fastest predicted that fits (ties to the
    lower peak: not phase order), and trains as alone."""
    unplanned = many("--budget", "lowest", "--order", "by-phase")["unplanned_peak_bytes"]
    r = many("--budget", str(unplanned * 9 // 10))
    fits = [k for k in r["orders"] if k["feasible"]]
    fastest = min(k["predicted_step_ms"] for k in fits)  # ties (within a part in 1e9) to the lower peak
    tied = [k for k in fits if k["predicted_step_ms"] - fastest <= 1e-9 * fastest]
    assert r["order"] == min(tied, key=lambda k: k["predicted_peak_bytes"])["order"], r
    by_phase = next(k for k in r["orders"] if k["order"] == "by-phase")
    assert r["predicted_peak_bytes"] < by_phase["predicted_peak_bytes"] and r["order"] != "by-phase", r
    assert r["peak_bytes"] <= r["budget_bytes"], r
    assert r["losses"] == alone, (r["losses"], alone)


def test_one_lr_for_every_copy() -> None:
    r = json.loads(last_line(mutwo("many", *STEP, "--copies", "2", "--lrs", "0.05", "--seed", "3", "--json")))
    assert r["lrs"] == [0.05, 0.05]
    assert r["losses"] == [run_losses(3, 0.05), run_losses(4, 0.05)]


@pytest.mark.parametrize("order", ["by-phase", "paired"])
def test_transformer_copies_with_adam_under_a_budget(order: str) -> None:
    """A small decoder (dropout, the chunked vocabulary loss) with Adam, at 50%,
    in phase order and interleaved (paired), each recomputing."""
    step = ["--model", "transformer-lm", "--batch", "16", "--optimizer", "adam", "--steps", "2"]
    r = json.loads(last_line(mutwo("many", *step, "--copies", "2", "--lrs", "0.01,0.1", "--budget", "50%",
                                   "--order", order, "--quiet", "--json")))
    assert r["order"] == order, r
    assert r["dropped"] > 0 and r["peak_bytes"] <= r["budget_bytes"], r
    for i, lr in enumerate(["0.01", "0.1"]):
        alone = json.loads(last_line(mutwo("run", *step, "--seed", str(i), "--lr", lr, "--json")))["losses"]
        assert r["losses"][i] == alone, (i, r["losses"][i], alone)
