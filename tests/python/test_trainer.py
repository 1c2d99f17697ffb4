# The Hugging Face Trainer under mutwo's plan (docs/huggingface.md, "The
# Hugging Face Trainer"): examples/hf_trainer.py's train(), a LLaMA from a tiny
# config on random tokens, three Trainer.train() steps on the CPU with
# TrainingArguments(torch_compile_backend="mutwo"), against the same Trainer
# without mutwo: each step's loss equal within the tolerance of the route, and
# the report's measured peak within the budget.
from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

import mutwo.torch as mt
import mutwo.trainer
from mutwo import _named

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TINY = dict(steps=3, batch=8, seq=32, hidden=32, layers=1, use_cpu=True)
# Relative, per step's loss. Inductor fuses kernels, which may reorder a sum's
# terms (as test_compile.py's 1e-5); mutwo's executor runs the same ATen
# kernels as eager autograd on the graph AOTAutograd traced, whose
# decompositions may round differently (measured: equal to the bit).
TOLERANCE = {"inductor": 1e-5, "mutwo": 1e-6}


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("hf_trainer", os.path.join(ROOT, "examples", "hf_trainer.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def plain() -> list[float]:
    return _example().train(plain=True, **TINY)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    torch._dynamo.reset()
    for name in _named.ENVIRONMENT.values():
        monkeypatch.delenv(name, raising=False)


def _check(losses: list[float], plain: list[float], report: dict, compiler: str) -> None:
    assert len(losses) == len(plain) == TINY["steps"]
    for mine, theirs in zip(losses, plain):
        assert abs(mine - theirs) <= TOLERANCE[compiler] * abs(theirs), (losses, plain)
    assert report["measured_peak_bytes"] <= report["budget_bytes"], report


def test_trainer_by_name_with_the_budget_from_the_environment(plain: list[float],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The Trainer's own route: TrainingArguments alone, MUTWO_BUDGET, Inductor."""
    monkeypatch.setenv("MUTWO_BUDGET", "80%")
    losses = _example().train(**TINY)
    report = mt.report()
    assert report["budget_source"] == "MUTWO_BUDGET" and report["compiler"] == "inductor"
    assert any(a["decision"] == "recompute" for a in report["activations"]), "80% needs activations recomputed"
    _check(losses, plain, report, "inductor")


def test_trainer_with_mutwo_callback_on_mutwos_executor(plain: list[float]) -> None:
    callback = mutwo.trainer.MutwoCallback(budget="80%", compiler="mutwo")
    losses = _example().train(callbacks=[callback], **TINY)
    assert callback.report is not None and callback.report["budget_source"] == "MutwoCallback"
    assert callback.report["dropped"], "80% of the unplanned peak needs activations dropped"
    assert _named.defaults == {}, "the callback's options last for its training run only"
    _check(losses, plain, callback.report, "mutwo")
