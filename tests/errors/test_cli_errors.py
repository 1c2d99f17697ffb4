"""The CLI's bad inputs: one test per row of cases.py (named by its arguments),
each exiting with its code (2) and one line on stderr holding its needle;
then the refusals a row cannot say: no plan fits (exit 3, the line a
pattern, the best plan written anyway), max-batch --json's last line on
failure, and a profile's -0, which is accepted.
"""
from __future__ import annotations

import pathlib
import re
import shlex
import string

import pytest

from cases import CASES, Case
from mutwo_cli import last_json, mutwo

assert len({c.args for c in CASES}) == len(CASES), "two rows with the same arguments"


def placeholders(case: Case) -> set[str]:
    """The `{name}`s of a row: the fixtures it needs."""
    return {name for text in (case.args, case.needle) for _, name, _, _ in string.Formatter().parse(text) if name}


def one_line(err: str) -> bool:
    """Whether stderr is one line (a trailing newline allowed, as the shell's $(...) drops it)."""
    return len(err.rstrip("\n").split("\n")) == 1


@pytest.mark.parametrize("case", CASES, ids=[c.args for c in CASES])
def test_refused(case: Case, request: pytest.FixtureRequest) -> None:
    paths = {name: str(request.getfixturevalue(name)) for name in placeholders(case)}
    args = [word.format(**paths) for word in shlex.split(case.args)]
    needle = case.needle.format(**paths)
    r = mutwo(*args, expect=None)
    if case.unless == "cuda" and r.returncode != 2:
        pytest.skip("this build has CUDA; skipping the no-CUDA check")
    err = r.stderr
    assert r.returncode == case.code, f"mutwo {shlex.join(args)} exited {r.returncode}, expected {case.code} ({err})"
    assert needle in err, f"mutwo {shlex.join(args)}: message lacks '{needle}': {err}"
    assert one_line(err), f"mutwo {shlex.join(args)}: message is not one line: {err}"
    if case.before_work:  # no progress line was printed (none suppressed) and nothing was written
        assert "--quiet" not in args, f"{case.args}: a before-work row must let progress show"
        assert not re.search(r"^(profile|sweep|max-batch|optimize|train|many):", err, re.M), err
        written = [str(p) for p in request.getfixturevalue("out").rglob("*")]
        assert not written, f"mutwo {shlex.join(args)} wrote {written} before refusing"


# No plan fits: plan and optimize exit 3 after writing the best plan, with one
# line naming the lowest reachable peak and what it holds.
FLOOR = (r"no plan fits the budget 1.0 KiB: the lowest peak the mutwo planner reaches is [0-9.]* [KMG]*i*B = [0-9]* B "
         r"\(.*parameter.*working set of the peak node \(([a-z0-9_.]+: )?[a-z_]+\): its inputs, outputs and workspace, [0-9.]* [KMG]*i*B\)")


def test_no_plan_fits(profiles: pathlib.Path, tmp_path: pathlib.Path) -> None:
    for cmd in (["plan", "--profile", str(profiles / "profile.json"), "--budget", "1KiB", "--out", str(tmp_path / "plan.json")],
                ["optimize", "--model", "mlp", "--batch", "8", "--budget", "1KiB", "--steps", "1", "--quiet",
                 "--out", str(tmp_path / "opt")]):
        r = mutwo(*cmd, expect=None)
        assert r.returncode == 3 and re.search(FLOOR, r.stderr) and one_line(r.stderr), \
            f"mutwo {shlex.join(cmd)} exited {r.returncode}, expected 3 with the floor named: {r.stderr}"
    assert (tmp_path / "plan.json").stat().st_size and (tmp_path / "opt/plan.json").stat().st_size, \
        "an infeasible plan was not written"


def test_max_batch_json_on_failure() -> None:
    """max-batch --json ends with one JSON object on failure, so scripts can read
    it; an unknown planner is refused before any batch is tried."""
    r = mutwo("max-batch", "--model", "mlp", "--memory", "10MiB", "--planners", "none,nope", "--limit", "4", "--quiet",
              "--json", expect=2)
    j = last_json(r)
    assert j["command"] == "max-batch" and "nope" in j["error"] and j["results"] == [], r.stdout


def test_max_batch_when_batch_1_does_not_fit() -> None:
    """Nothing fits: exit 3, as an unreachable budget, with what batch 1 needs
    and its persistent state, not rows of zeros and exit 0."""
    r = mutwo("max-batch", "--model", "mlp", "--memory", "1MiB", "--limit", "64", "--planners", "none,mutwo",
              "--quiet", "--json", expect=3)
    need = r"batch 1 needs ([0-9.]+) ([KM]iB) \(persistent state ([0-9.]+) ([KM]iB)\)"
    assert one_line(r.stderr) and re.search(need, r.stderr), r.stderr
    j = last_json(r)
    assert re.search(need, j["error"]) and [x["max_batch"] for x in j["results"]] == [0, 0], j
    for x in j["results"]:
        assert x["batch1_needs_bytes"] > max(1 << 20, x["persistent_bytes"]) and x["peak_bytes"] is None, x
        assert f"| {x['planner']} | 0 | - | - | batch 1 needs " in r.stdout, r.stdout
    assert "0 B" not in r.stdout, r.stdout


def test_minus_zero_is_zero(numbers: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A profile's step_ms of -0 reads as 0 (never printed as -0)."""
    mutwo("plan", "--profile", str(numbers / "profile_zero.json"), "--budget", "100%", "--out", str(tmp_path / "plan.json"))


def test_unwritable_snapshot_leaves_nothing(tmp_path: pathlib.Path) -> None:
    """A --memory-snapshot that cannot be written: exit 2 before
    the step runs, with nothing written; and where the default snapshot's
    path turns out unwritable only at the end (a folder made in its place),
    exit 2 with no snapshot file, whole or partial, and no .tmp left."""
    out = tmp_path / "p"
    r = mutwo("profile", "--model", "mlp", "--batch", "8", "--quiet", "--out", str(out),
              "--memory-snapshot", str(tmp_path / "missing" / "snap.pickle"), expect=2)
    assert one_line(r.stderr) and not out.exists() and list(tmp_path.iterdir()) == [], r.stderr
    out.mkdir()
    (out / "memory_snapshot.pickle").mkdir()
    r = mutwo("profile", "--model", "mlp", "--batch", "8", "--iters", "1", "--warmup", "0", "--quiet",
              "--out", str(out), expect=2)
    assert f"cannot write {out}/memory_snapshot.pickle" in r.stderr and one_line(r.stderr), r.stderr
    assert (out / "memory_snapshot.pickle").is_dir() and not list((out / "memory_snapshot.pickle").iterdir())
    assert not list(out.glob("*.tmp")), list(out.glob("*.tmp"))
