"""mutwo run and info on the zoo's models: the good path ends with one JSON
line holding losses, peak and step time; info counts the mlp; the default
batches; the largest models train on the CPU.
"""
from __future__ import annotations

import json

import pytest

from mutwo_cli import last_line, mutwo


def test_run_json_line() -> None:
    last = last_line(mutwo("run", "--model", "mlp", "--batch", "16", "--steps", "3", "--json"))
    for key in ('"losses":[', '"peak_bytes":', '"reserved_peak_bytes":', '"step_ms":'):
        assert key in last, f"last line lacks {key}: {last}"
    # On CPU nothing is cached: reserved equals allocated.
    r = json.loads(last)
    assert r["reserved_peak_bytes"] == r["peak_bytes"], f"CPU reserved peak differs from the allocated peak: {last}"


def test_info() -> None:
    info = last_line(mutwo("info", "--model", "mlp", "--batch", "8", "--json"))
    assert '"parameters":669706' in info, f"info: {info}"
    assert '"nodes":' in info, f"info lacks nodes: {info}"


# transformer-lm's default batch is 256 (docs/zoo-transformers.md); the others keep 64.
@pytest.mark.parametrize("model, batch", [("transformer-lm", 256), ("mlp", 64)])
def test_default_batch(model: str, batch: int) -> None:
    got = last_line(mutwo("info", "--model", model, "--json"))
    assert f'"batch":{batch},' in got, f"{model}'s default batch is not {batch}: {got}"


# The model zoo's done-when runs: the largest models train on the CPU.
@pytest.mark.parametrize("args", ["--model resnet-152 --batch 2 --image-size 64 --steps 2",
                                  "--model bert-base --batch 2 --steps 1"])
def test_largest_models_train(args: str) -> None:
    last = last_line(mutwo("run", *args.split(), "--json"))
    assert '"losses":[' in last, f"mutwo run {args}: {last}"


def test_run_from_the_arena_plans_each_nodes_workspace() -> None:
    """--arena measures each node's workspace first (one profiling step of
    its own) and gives it a block in the arena: BERT-tiny's kernel
    temporaries are then served from the arena, not from the allocator, and
    the losses are the run's without it."""
    args = ("run", "--model", "bert-tiny", "--batch", "8", "--steps", "2", "--json")
    plain, arena = json.loads(last_line(mutwo(*args))), json.loads(last_line(mutwo(*args, "--arena")))
    assert arena["losses"] == plain["losses"]
    assert arena["arena_missed_storages"] == 0
    # Without the workspaces 260 MB fell back over 218 allocations a step; with them under 4 MB.
    assert arena["arena_fallback_bytes"] < 0.1 * arena["arena_bytes"], arena
    assert arena["peak_bytes"] <= 1.01 * plain["peak_bytes"], (arena["peak_bytes"], plain["peak_bytes"])
