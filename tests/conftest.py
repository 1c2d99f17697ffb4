"""The CLI runs that tests/errors (refusals of what they wrote, mutated) and
tests/e2e (checks of what they wrote) both read: each made once per pytest
session, and only when a test asks for it. Also makes tests/python's
mutwo_cli (the binary: $MUTWO_BIN) importable for every folder here.
"""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "python"))
from mutwo_cli import last_json, mutwo  # noqa: E402


@pytest.fixture(scope="session")
def mlp_report(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The mlp's profile at batch 8 from one timed iteration, and its plan at
    95% (plan.json; its peak, after the backward, holds no activations, so
    every percentage is its unplanned peak)."""
    d = tmp_path_factory.mktemp("mlp_report")
    mutwo("profile", "--model", "mlp", "--batch", "8", "--iters", "1", "--warmup", "0", "--out", str(d), "--quiet")
    mutwo("plan", "--profile", str(d / "profile.json"), "--budget", "95%", "--out", str(d / "plan.json"), expect=None)
    return d


@pytest.fixture(scope="session")
def bert8_plan(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """optimize's output for bert-tiny at batch 8 and its lowest peak without
    swapping: plan.json (activations dropped and the vocabulary loss chunked
    below its default) and rewritten.ir. (At any percentage down to 1% the
    chunked loss alone fits it: the unplanned peak is the loss's logits, which
    a percentage counts with what planning cannot change; docs/budgets.md.)"""
    d = tmp_path_factory.mktemp("bert8_plan")
    mutwo("optimize", "--model", "bert-tiny", "--batch", "8", "--budget", "lowest", "--no-swap", "--steps", "1",
          "--quiet", "--out", str(d), expect=None)
    return d


@pytest.fixture(scope="session")
def bert16_profile(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """bert-tiny's profile at batch 16 (profile.json)."""
    d = tmp_path_factory.mktemp("bert16_profile")
    mutwo("profile", "--model", "bert-tiny", "--batch", "16", "--quiet", "--out", str(d))
    return d


@pytest.fixture(scope="session")
def bert16_floor(bert16_profile: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> int:
    """The recompute-only floor of bert16_profile: the peak of its plan under
    1 MiB with --no-swap."""
    out = tmp_path_factory.mktemp("bert16_floor") / "plan.json"
    return last_json(mutwo("plan", "--profile", str(bert16_profile / "profile.json"), "--budget", "1MiB", "--no-swap",
                           "--json", "--out", str(out), expect=None))["predicted_peak_bytes"]


@pytest.fixture(scope="session")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """optimize's output for a step that replays random nodes (per-layer
    drops the dropout masks inside transformer-lm's blocks):
    rewritten.ir, and profile.json holding the unplanned graph."""
    d = tmp_path_factory.mktemp("replayed")
    mutwo("optimize", "--model", "transformer-lm", "--batch", "4", "--planner", "per-layer", "--budget", "100%",
          "--no-swap", "--steps", "1", "--quiet", "--out", str(d), expect=None)
    return d
