"""mutwo many: N copies of a zoo model trained as one graph. Copy i's losses
equal `mutwo run --seed S+i --lr lrs[i]`'s bit for bit on the CPU, with no
plan and under a budget that recomputes activations (dropout masks among
them, replayed from each copy's own generator), in the order the scheduler
chooses and in each order asked for (the paired order interleaves one copy's
backward with the next one's forward). Under --memory CAP, the most copies
that train under CAP: the answer trains there, in a fresh process too, and
one copy more is predicted over it.
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

from mutwo_cli import last_json, last_line, mutwo, planted_calls, planted_child

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


# --memory: mlp unplanned (each copy adds its persistent state: the sequential
# order holds one copy's activations at a time), and the small decoder under
# --budget lowest (each count profiled and planned).
CAPPED = {"mlp": ["--model", "mlp", "--batch", "128", "--steps", "2"],
          "lm-lowest": ["--model", "transformer-lm", "--batch", "16", "--steps", "2", "--budget", "lowest"]}


def plain(step: list[str], copies: int) -> dict:
    return last_json(mutwo("many", *step, "--copies", str(copies), "--quiet", "--json"))


@pytest.mark.parametrize("name", list(CAPPED))
def test_most_copies_under_a_cap(name: str) -> None:
    """A cap between 3 copies' predicted peak and 4's (plain many's): the answer
    is 3, it trains under the cap here and in its fresh process, as plain many
    trains 3 copies (bit for bit), and the search predicted 4 copies over the
    cap (unplanned, plain many's prediction exactly; under lowest the plan
    follows the measured times, so its peak may move by a few KiB)."""
    step = CAPPED[name]
    three, four = plain(step, 3), plain(step, 4)
    cap = (three["predicted_peak_bytes"] + four["predicted_peak_bytes"]) // 2
    assert three["predicted_peak_bytes"] <= cap < four["predicted_peak_bytes"], (three, four)
    r = last_json(mutwo("many", *step, "--copies", "6", "--memory", str(cap), "--quiet", "--json"))
    assert r["copies"] == 3 and r["copies_bound"] == 6 and r["memory_bytes"] == cap, r
    assert r["peak_bytes"] <= cap and r["losses"] == three["losses"] and len(r["losses"]) == 3, r
    f = r["fresh_process"]
    assert f["copies"] == 3 and f["fits"] and max(f["peak_bytes"], f["device_peak_bytes"]) <= cap, f
    tries = {t["copies"]: t for t in r["tries"]}
    assert tries[3]["fits"] and tries[3]["peak_bytes"] <= cap, tries
    assert tries[4]["predicted_peak_bytes"] > cap and not tries[4]["predicted_fits"] and tries[4]["fits"] is False, tries
    if name == "mlp":
        assert tries[4]["predicted_peak_bytes"] == four["predicted_peak_bytes"], (tries, four)
    else:  # each count planned under its own lowest budget, recomputing
        assert r["dropped"] > 0 and r["budget_bytes"] is not None, r


def test_not_one_copy_under_the_cap_names_what_would_fit() -> None:
    """Under a cap below one copy's unplanned peak: exit 3, one line naming
    the memory one copy needs and what --budget lowest needs; that memory
    then fits one copy."""
    step = ["--model", "transformer-lm", "--batch", "16", "--steps", "1"]
    one = plain(step, 1)["predicted_peak_bytes"]
    r = mutwo("many", *step, "--copies", "4", "--memory", str(one - 4096), "--quiet", "--json", expect=3)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and last_json(r)["copies"] == 0 and last_json(r)["error"] in err[0], r.stderr
    m = re.search(r"not even 1 copy of transformer-lm batch 16 fits --memory .*: it needs .*; give --memory at least "
                  r"(\S+), or --budget lowest, under which 1 copy is predicted to need", err[0])
    assert m, err
    again = last_json(mutwo("many", *step, "--copies", "4", "--memory", m.group(1), "--quiet", "--json"))
    assert again["copies"] == 1 and again["peak_bytes"] <= again["memory_bytes"], again


def test_an_answer_over_the_cap_in_its_fresh_process_steps_down(tmp_path: pathlib.Path) -> None:
    """The fresh child of the answer (3 copies) reports 1 KiB over the cap:
    the answer steps down to 2, whose child fits, and stderr says so."""
    step = CAPPED["mlp"]
    three, four = plain(step, 3), plain(step, 4)
    cap = (three["predicted_peak_bytes"] + four["predicted_peak_bytes"]) // 2
    over = cap - three["predicted_peak_bytes"] + 1024
    r = mutwo("many", *step, "--copies", "6", "--memory", str(cap), "--quiet", "--json",
              env=planted_child(tmp_path, f"over:{over},ok"))
    j = last_json(r)
    assert [(t["copies"], t["fits"]) for t in j["fresh_process"]["tries"]] == [(3, False), (2, True)], j
    assert j["copies"] == 2 == len(j["losses"]) and j["searched_copies"] == 3 and len(planted_calls(tmp_path)) == 2, j
    assert "many: 3 copies fitted in this process but not in a fresh one (peak" in r.stderr, r.stderr
