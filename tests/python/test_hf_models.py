# Hugging Face transformers architectures (hf_models.py: tiny configs, random
# weights, nothing downloaded) through both of mutwo's routes, on the CPU:
# - captured (mutwo.capture), then `mutwo optimize --graph --check` at 70% of
#   the unplanned peak: it fits, the measured peak is the prediction, and loss
#   and gradients equal the unplanned step's bit for bit;
# - mutwo.torch.wrap at 70% in a plain loop over two steps: losses, gradients
#   and parameters equal those of the same capture without a plan, bit for bit,
#   and the losses equal eager PyTorch's within rounding.
# An architecture mutwo cannot capture is listed in REFUSED with the words of
# its CaptureError and why; the test then checks it is refused so.
from __future__ import annotations

import pytest
import torch

import hf_models
import loop
import mutwo.torch
from mutwo.capture import CaptureError, capture
from mutwo_cli import last_json
from mutwo_cli import mutwo as run_mutwo

pytest.importorskip("transformers", reason="transformers is in requirements.txt: scripts/install-deps.sh")

ARCHS = sorted(hf_models.ARCHS)
REFUSED: dict[str, str] = {}  # name: a regular expression the CaptureError matches


@pytest.mark.parametrize("name", ARCHS)
def test_captured_step_optimizes_and_checks(tmp_path, name: str) -> None:
    model, inputs, loss_fn = hf_models.factory(name)
    step = tmp_path / "step.json"
    if name in REFUSED:
        with pytest.raises(CaptureError, match=REFUSED[name]):
            capture(model, inputs, loss_fn, str(step))
        return
    capture(model, inputs, loss_fn, str(step))
    r = run_mutwo("optimize", "--graph", str(step), "--budget", "70%", "--steps", "1", "--check", "--json", "--quiet",
              "--out", str(tmp_path / "out"))
    j = last_json(r)
    assert j["feasible"] and j["check"] == "passed", f"{name}: {r.stdout}"
    planned = j["planned"]
    assert planned["peak_bytes"] <= j["budget_bytes"], f"{name}: {r.stdout}"
    assert planned["peak_bytes"] == planned["predicted_peak_bytes"], f"{name}: {r.stdout}"
    assert planned["dropped"] + planned["swapped"] > 0, f"{name}: nothing dropped or swapped at 70%: {r.stdout}"


def _train(name: str, budget: str | None, planner: str = "mutwo", steps: int = 2) -> dict:
    return loop.train(lambda: hf_models.factory(name), "adamw", budget, planner, steps)


@pytest.mark.parametrize("name", ARCHS)
def test_wrapped_model_trains_at_70_percent(name: str) -> None:
    if name in REFUSED:
        model, inputs, loss_fn = hf_models.factory(name)
        with pytest.raises(CaptureError, match=REFUSED[name]):
            loss_fn(mutwo.torch.wrap(model, "70%"), *inputs)
        return
    base = _train(name, "100%", planner="none")
    eager = _train(name, None)
    assert base["losses"] == pytest.approx(eager["losses"], rel=1e-5, abs=1e-6), name
    run = _train(name, "70%")
    info = mutwo.torch.report(run["model"])
    assert info["feasible"] and info["measured_peak_bytes"] <= info["budget_bytes"], f"{name}: {info}"
    assert run["losses"] == base["losses"], name
    for a, b in zip(run["grads"], base["grads"]):
        assert all(torch.equal(x, y) for x, y in zip(a, b)), f"{name}: gradients differ from the unplanned capture"
    assert all(torch.equal(x, y) for x, y in zip(run["params"], base["params"])), name


# Known misses of the prediction, each a bug to fix (strict: the test fails
# once the prediction becomes exact, so the entry must then go).
PREDICTION_OFF = {
    "t5": "the wrapped T5 measures 8 B under its prediction at 70% (2061320 vs 2061328 B, CPU, torch 2.11); "
          "the captured step through the CLI is exact",
}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=PREDICTION_OFF[n])) if n in PREDICTION_OFF else n
    for n in ARCHS if n not in REFUSED])
def test_wrapped_model_peak_is_predicted_to_the_byte(name: str) -> None:
    """On the CPU (a counting allocator, no caching) the wrapped module's
    measured peak is its prediction."""
    info = mutwo.torch.report(_train(name, "70%", steps=1)["model"])
    assert info["measured_peak_bytes"] == info["predicted_peak_bytes"], f"{name}: {info}"
