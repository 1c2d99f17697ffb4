"""Which allocator serves each command's step, as its --json says (issue 47):
on the CPU the arena only by --arena (the default there is the allocator;
on CUDA the arena is the default wherever a budget or a memory cap applies,
a rule tests/unit/test_cli_rules.cpp checks without a card); --no-arena
opts out and --arena with --no-arena is refused. Small steps, one each."""
from __future__ import annotations

import json
import pathlib

import pytest

from mutwo_cli import last_json, mutwo

TEXT = pathlib.Path(__file__).resolve().parents[2] / "data" / "english.txt"


def commands(tmp: pathlib.Path) -> dict[str, list[str]]:
    """One small run of each command that serves a budget or a cap."""
    return {
        "run": ["run", "--model", "mlp", "--batch", "8", "--steps", "1", "--device-memory", "1GiB", "--json"],
        "optimize": ["optimize", "--model", "mlp", "--batch", "8", "--budget", "60%", "--steps", "1", "--out",
                     str(tmp / "optimize"), "--json", "--quiet"],
        "sweep": ["sweep", "--model", "mlp", "--batches", "8", "--steps", "1", "--out", str(tmp / "sweep"),
                  "--json", "--quiet"],
        "train": ["train", "--data", str(TEXT), "--batch", "16", "--holdout", "0.9", "--budget", "60%", "--json",
                  "--quiet"],
        "max-batch": ["max-batch", "--model", "transformer-lm", "--memory", "2MiB", "--limit", "16", "--planners", "none",
                      "--no-fresh-check", "--json", "--quiet"],
    }


def arena_of(args: list[str]) -> tuple[bool, str]:
    j = last_json(mutwo(*args))
    return j["arena"], j["arena_from"]


@pytest.mark.parametrize("command", ["run", "optimize", "sweep", "train", "max-batch"])
def test_cpu_default_is_the_allocator_and_arena_opts_in(command: str, tmp_path: pathlib.Path) -> None:
    args = commands(tmp_path)[command]
    assert arena_of(args) == (False, "default"), command
    assert arena_of(args + ["--arena"]) == (True, "--arena"), command


def test_no_arena_opts_out_and_excludes_arena(tmp_path: pathlib.Path) -> None:
    args = commands(tmp_path)["run"]
    assert arena_of(args + ["--no-arena"]) == (False, "--no-arena")
    r = mutwo(*args, "--arena", "--no-arena", expect=2)
    assert "excludes" in r.stderr and "see mutwo run --help" in r.stderr, r.stderr


def test_help_says_the_default() -> None:
    """Each command's --help says where the arena is the default and that the CPU keeps the allocator."""
    for command in ("run", "optimize", "sweep", "train", "max-batch"):
        text = mutwo(command, "--help").stdout
        assert "--no-arena" in text and "default on CUDA" in text and "off on the CPU" in text, (command, text)


def test_optimize_json_keeps_planned_arena(tmp_path: pathlib.Path) -> None:
    """The keys before issue 47 stay: optimize's planned.arena beside the new top-level ones."""
    j = last_json(mutwo(*commands(tmp_path)["optimize"], "--arena"))
    assert j["planned"]["arena"] is True and j["arena"] is True and j["planned"]["arena_bytes"] > 0, j
    assert json.dumps(j["arena_from"]) == '"--arena"'
