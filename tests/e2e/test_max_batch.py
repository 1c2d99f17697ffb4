"""mutwo max-batch's search, fast enough to use: answers predicted from a model of
the step against the batch, then confirmed by real runs, against the search
before the model (--search full: doubling and bisection, a profile at every
batch tried).
"""
from __future__ import annotations

from mutwo_cli import last_json, mutwo

# transformer-lm is small enough for a full search in seconds, and has
# numbered blocks, so per-layer and sqrt-n differ from none.
ARGS = ["max-batch", "--model", "transformer-lm", "--memory", "2MiB", "--limit", "64",
        "--planners", "none,per-layer,sqrt-n,mutwo", "--json", "--quiet"]


def answers(search: str) -> dict[str, dict]:
    j = last_json(mutwo(*ARGS, "--search", search))
    assert j["search"] == search, j
    return {r["planner"]: r for r in j["results"]}


def confirmed(r: dict) -> bool:
    """Whether the row's own real runs show its answer fitting (measured, at
    most the memory) and the batch above it refused."""
    runs = {x["batch"]: x for x in r["runs"]}
    a = r["max_batch"]
    return (a in runs and runs[a]["fits"] and runs[a]["peak_bytes"] == r["peak_bytes"] <= 2 << 20
            and a + 1 in runs and not runs[a + 1]["fits"])


def test_model_search_answers_as_the_full_search() -> None:
    """The model's answers equal the full search's for the planners whose
    plans follow from bytes alone. mutwo's plan follows measured node times
    too (the greedy's order), so two full searches can differ near its floor
    (bert-tiny at 96 MiB: 180 once, 181 another time); both searches'
    mutwo answers are checked against their own real runs instead."""
    model, full = answers("model"), answers("full")
    for p in ("none", "per-layer", "sqrt-n"):
        assert model[p]["max_batch"] == full[p]["max_batch"] > 0, (p, model[p], full[p])
    assert model["per-layer"]["max_batch"] > model["none"]["max_batch"], model
    for rows in (model, full):
        for p, r in rows.items():
            assert confirmed(r), (p, r)
    # The model's predictions need few real runs; the full search many.
    for p in model:
        assert model[p]["predicted_batch"] is not None and full[p]["predicted_batch"] is None
        assert len(model[p]["runs"]) < len(full[p]["runs"]), (p, model[p]["runs"], full[p]["runs"])


def test_runs_are_real() -> None:
    """Every batch a row says fit was measured at or under the memory, and
    the one above each answer, 5% up, was tried for real too."""
    for p, r in answers("model").items():
        assert r["above_fits"] is False and any(x["batch"] == r["above_batch"] for x in r["runs"]), (p, r)
        for x in r["runs"]:
            assert not x["fits"] or (x["peak_bytes"] is not None and x["peak_bytes"] <= 2 << 20), (p, x)
