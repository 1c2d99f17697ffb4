"""mutwo max-batch's search, fast enough to use: answers predicted from a model of
the step against the batch, then confirmed by real runs, against the search
before the model (--search full: doubling and bisection, a profile at every
batch tried); each answer trained again in a fresh process, and stepped down
where a planted wrapper of that child says it does not fit; with --arena,
measured and trained from the arena.
"""
from __future__ import annotations

import os
import pathlib
import re

from mutwo_cli import last_json, mutwo, planted_calls, planted_child

# transformer-lm is small enough for a full search in seconds, and has
# numbered blocks, so per-layer and sqrt-n differ from none.
ARGS = ["max-batch", "--model", "transformer-lm", "--memory", "2MiB", "--limit", "64",
        "--planners", "none,per-layer,sqrt-n,mutwo", "--json", "--quiet"]


def answers(search: str) -> dict[str, dict]:
    """Each planner's row; the full search without the fresh-process check
    (what it compares is the search)."""
    j = last_json(mutwo(*ARGS, "--search", search, *(["--no-fresh-check"] if search == "full" else [])))
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
    the one above each answer, 5% up, was tried for real too; each answer
    trained again in a fresh process, under the memory by the margin the row
    states (on the CPU at the peak measured in process, to the byte)."""
    for p, r in answers("model").items():
        assert r["above_fits"] is False and any(x["batch"] == r["above_batch"] for x in r["runs"]), (p, r)
        for x in r["runs"]:
            assert not x["fits"] or (x["peak_bytes"] is not None and x["peak_bytes"] <= 2 << 20), (p, x)
        f = r["fresh_process"]
        assert f["batch"] == r["max_batch"] == r["searched_batch"] and f["fits"] is True and len(f["tries"]) == 1, (p, f)
        assert f["margin_bytes"] == (2 << 20) - max(f["peak_bytes"], f["device_peak_bytes"]) >= 0, (p, f)
        assert f["peak_bytes"] == r["peak_bytes"] and f["seconds"] > 0, (p, f, r)


def test_no_fresh_check() -> None:
    """--no-fresh-check: no child, the row's fresh_process null, the table says skipped."""
    r = mutwo("max-batch", "--model", "transformer-lm", "--memory", "2MiB", "--limit", "64", "--planners", "none",
              "--no-fresh-check", "--json", "--quiet")
    row = last_json(r)["results"][0]
    assert row["fresh_process"] is None and row["max_batch"] == row["searched_batch"] > 0, row
    assert re.search(r"^\| none \| \d+ \| .* \| skipped \|$", r.stdout, re.M), r.stdout


def planted(tmp_path: pathlib.Path, plan: str, *args: str, expect: int | None, planners: str = "none",
            children: bool = False) -> tuple[dict, str, list[list[str]]]:
    """max-batch on transformer-lm under 2 MiB (planner none, seed 3, capped
    there too) with the planted child: its JSON line, its stderr and the
    child's argument lists."""
    r = mutwo("max-batch", "--model", "transformer-lm", "--memory", "2MiB", "--device-memory", "2MiB", "--limit", "64",
              "--planners", planners, "--seed", "3", "--json", "--quiet", *args, expect=expect,
              env={**planted_child(tmp_path, plan), **({"MUTWO_TEST_SEARCH_IN_CHILDREN": "1"} if children else {})})
    return last_json(r), r.stderr, planted_calls(tmp_path)


def test_fresh_child_argv(tmp_path: pathlib.Path) -> None:
    """The child trains the answer's rewritten step with max-batch's device,
    its cap in bytes, its seed, as many steps as a run in process."""
    j, _, calls = planted(tmp_path, "ok", expect=0)
    row = j["results"][0]
    assert len(calls) == 1 and row["fresh_process"]["fits"], (calls, row)
    a = calls[0]
    assert a[:2] == ["run", "--graph"] and a[2].endswith(".ir") and not os.path.exists(a[2]), a
    assert a[3:] == ["--device", "cpu", "--device-memory", str(2 << 20), "--seed", "3", "--steps", "3", "--json"], a


def test_arena_answers_are_measured_and_trained_from_their_arena(tmp_path: pathlib.Path) -> None:
    """--arena: every batch tried is measured from its arena, and the answer's
    child trains from one too (run --arena): the answer fits the memory there."""
    j, _, calls = planted(tmp_path, "ok", "--arena", expect=0)
    row = j["results"][0]
    assert j["arena"] is True and row["max_batch"] > 0 and row["fresh_process"]["fits"], row
    assert row["peak_bytes"] <= 2 << 20 and row["fresh_process"]["device_peak_bytes"] <= 2 << 20, row
    assert len(calls) == 1 and calls[0][-1] == "--arena", calls
    assert last_json(mutwo(*ARGS, "--no-fresh-check"))["arena"] is False


def test_an_arena_refused_over_the_cap_is_no_fit(tmp_path: pathlib.Path) -> None:
    """A child whose arena passes the cap (run --arena exits 3) did not fit:
    the answer steps down, as after running out of memory, not an error."""
    j, err, calls = planted(tmp_path, "cap,ok", "--arena", expect=0)
    row = j["results"][0]
    tries = row["fresh_process"]["tries"]
    assert [t["fits"] for t in tries] == [False, True] and tries[0]["arena_over_cap"], tries
    assert not tries[0]["out_of_memory"] and tries[0]["peak_bytes"] is None, tries
    assert row["max_batch"] == tries[1]["batch"] < tries[0]["batch"] and len(calls) == 2, (row, calls)
    assert "not in a fresh one (its arena passed --memory)" in err, err


def test_fresh_overshoot_steps_down(tmp_path: pathlib.Path) -> None:
    """A first child over the limit by 100 KiB, then one out of memory: the
    answer steps down twice (by the overshoot at the step's bytes per sample,
    then by at least one batch), each a batch that fits in process, and the
    third child's batch is the answer; stderr says so."""
    j, err, calls = planted(tmp_path, "over:102400,oom,ok", expect=0)
    row = j["results"][0]
    f, searched = row["fresh_process"], row["searched_batch"]
    tries = f["tries"]
    assert [t["fits"] for t in tries] == [False, False, True] and len(calls) == 3, f
    assert tries[0]["batch"] == searched and tries[0]["peak_bytes"] > 2 << 20 and tries[1]["out_of_memory"], f
    per_sample = tries[0]["device_peak_bytes"] // searched
    assert tries[1]["batch"] <= searched - -(-(tries[0]["device_peak_bytes"] - (2 << 20)) // per_sample), f
    assert tries[2]["batch"] < tries[1]["batch"] and f["fits"] and f["batch"] == row["max_batch"] == tries[2]["batch"], f
    assert f["margin_bytes"] == (2 << 20) - f["device_peak_bytes"] >= 0, f
    fits = {x["batch"]: x["fits"] for x in row["runs"]}
    assert all(fits[t["batch"]] for t in tries), (tries, row["runs"])
    assert re.search(rf"^max-batch: none: batch {searched} fitted in this process but not in a fresh one \(peak "
                     r"[\d.]+ MiB, [\d.]+ KiB over --memory\); trying \d+ and below$", err, re.M), err


def test_fresh_never_fits_fails(tmp_path: pathlib.Path) -> None:
    """Every child over the limit: three tries, then exit 1 naming the planner;
    the JSON line still holds the row, its fresh_process.fits false."""
    j, err, calls = planted(tmp_path, "over:1048576", expect=1)
    f = j["results"][0]["fresh_process"]
    assert len(calls) == 3 and f["fits"] is False and len(f["tries"]) == 3, (calls, f)
    assert j["error"].startswith("max-batch: an answer fitted in this process but not in a fresh one"), j
    assert f["margin_bytes"] < 0 and [t["batch"] for t in f["tries"]] == sorted({t["batch"] for t in f["tries"]})[::-1]
    assert re.search(r"^mutwo: max-batch: an answer fitted in this process but not in a fresh one, after 3 tries each: "
                     r"none ", err, re.M), err


def test_fresh_child_error_names_the_command(tmp_path: pathlib.Path) -> None:
    """A child whose output has no JSON line: exit 1, the message names the
    command that re-runs it, whose step file is still there."""
    j, err, _ = planted(tmp_path, "garbage", expect=1)
    m = re.search(r"the fresh-process check of none at batch \d+ failed: its last line on stdout is not .*"
                  r"re-run it alone to see why: \S+ run --graph (\S+\.ir) --device cpu", err)
    assert m and os.path.exists(m.group(1)) and "--no-fresh-check" in err, err
    assert "fresh-process check" in j["error"] and j["results"] == [], j
    os.remove(m.group(1))


def test_a_library_that_cannot_make_its_handle_ran_out_of_memory(tmp_path: pathlib.Path) -> None:
    """A child whose cuBLAS could not make its handle (CUBLAS_STATUS_ALLOC_FAILED,
    on a card the parent shares) did not fit: the answer steps down as after
    running out of memory, exit 0, not the error exit of issue 47."""
    j, err, calls = planted(tmp_path, "cublas,ok", expect=0)
    tries = j["results"][0]["fresh_process"]["tries"]
    assert [t["fits"] for t in tries] == [False, True] and tries[0]["out_of_memory"], tries
    assert len(calls) == 2 and "not in a fresh one (out of memory)" in err, (calls, err)


def test_mutwo_is_never_below_per_layer(tmp_path: pathlib.Path) -> None:
    """mutwo's own answers never fit in a fresh process (every child after
    per-layer's first says out of memory): its answer is per-layer's
    confirmed one, as plan_mutwo takes per-layer's plan where it is better,
    and the row says whose plan it is; exit 0. Without the planted child,
    on the CPU, mutwo's own answer is at least per-layer's."""
    j, err, calls = planted(tmp_path, "ok,oom", expect=0, planners="mutwo,per-layer")
    rows = {r["planner"]: r for r in j["results"]}
    assert [r["planner"] for r in j["results"]] == ["mutwo", "per-layer"], j["results"]
    m, pl = rows["mutwo"], rows["per-layer"]
    assert pl["answer_from"] == "per-layer" and pl["fresh_process"]["fits"], pl
    assert m["answer_from"] == "per-layer" and m["max_batch"] == pl["max_batch"] > 0, m
    assert m["fresh_process"]["fits"] and m["own_max_batch"] == 0, m
    assert "the answer is per-layer's plan" in err and "error" not in j, err
    own = {r["planner"]: r for r in last_json(mutwo(*ARGS)).get("results")}
    assert own["mutwo"]["max_batch"] >= own["per-layer"]["max_batch"] > 0, own
    assert all(r["monotone"] and r["answer_from"] == r["planner"] for r in own.values()), own


# On CUDA the search runs in children and the fresh-process check in a
# process that never opened the device (max_batch_children.cpp): on a card it
# held its context and the libraries' handles while the child trained. The
# same route on the CPU, asked for by the test switch.
CHILDREN = {"MUTWO_TEST_SEARCH_IN_CHILDREN": "1"}


def test_search_in_children_answers_as_in_one_process() -> None:
    """The same answers as the search in one process, each confirmed fresh; the JSON says which route ran."""
    here, there = last_json(mutwo(*ARGS)), last_json(mutwo(*ARGS, env=CHILDREN))
    assert here["search_process"] == "this" and there["search_process"] == "children", (here, there)
    rows = {r["planner"]: r for r in there["results"]}
    assert [r["planner"] for r in there["results"]] == [r["planner"] for r in here["results"]]
    for r in here["results"]:
        p = r["planner"]
        if p != "mutwo":  # mutwo's plans follow measured times (test_model_search_answers_as_the_full_search)
            assert rows[p]["max_batch"] == r["max_batch"] > 0, (p, rows[p], r)
        assert rows[p]["fresh_process"]["fits"] and rows[p]["fresh_process"]["batch"] == rows[p]["max_batch"], rows[p]
    assert rows["mutwo"]["max_batch"] >= rows["per-layer"]["max_batch"], rows


def test_search_in_children_steps_down(tmp_path: pathlib.Path) -> None:
    """A fresh child over the limit, then one out of memory: each lower answer is searched again in a child
    (under --limit of the batch below), and the third fresh child's batch is the answer."""
    j, err, calls = planted(tmp_path, "over:102400,oom,ok", expect=0, children=True)
    f = j["results"][0]["fresh_process"]
    assert j["search_process"] == "children" and len(calls) == 3, (j, calls)
    assert [t["fits"] for t in f["tries"]] == [False, False, True] and f["tries"][1]["out_of_memory"], f
    batches = [t["batch"] for t in f["tries"]]
    assert batches == sorted(batches, reverse=True) and len(set(batches)) == 3, f
    assert j["results"][0]["max_batch"] == batches[2] and "not in a fresh one (out of memory)" in err, (j, err)
