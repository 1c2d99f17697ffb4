"""mutwo train over the shipped text, planned: a plan that trains, not only steps."""
from __future__ import annotations

import json
import math
import pathlib

from mutwo_cli import mutwo

TEXT = pathlib.Path(__file__).resolve().parents[2] / "data" / "english.txt"


def test_loss_falls_over_three_planned_epochs() -> None:
    """Three epochs of transformer-lm over the shipped text in batches, the
    step planned under 60% of its peak so that the plan drops activations; the
    training loss falls epoch by epoch, the held-out loss is reported every
    epoch, and each epoch's measured peak is the plan's prediction to the byte
    (on the CPU), within the budget."""
    out = mutwo("train", "--model", "transformer-lm", "--data", str(TEXT), "--epochs", "3", "--batch", "16",
                "--budget", "60%", "--no-swap", "--json", "--quiet").stdout
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    epochs, summary = lines[:-1], lines[-1]
    keys = {"epoch", "train_loss", "heldout_loss", "tokens_per_s", "peak_bytes", "steps"}
    assert [e["epoch"] for e in epochs] == [1, 2, 3], epochs
    assert all(keys <= set(e) for e in epochs + [summary]), (epochs, summary)
    train = [e["train_loss"] for e in epochs]
    assert train[0] > train[1] > train[2], train
    assert all(math.isfinite(e["heldout_loss"]) and 0 < e["heldout_loss"] < 6 for e in epochs), epochs
    assert epochs[2]["heldout_loss"] < epochs[0]["heldout_loss"], epochs
    assert summary["dropped"] > 0 and summary["planner"] == "mutwo", summary
    assert all(e["peak_bytes"] == summary["predicted_peak_bytes"] <= summary["budget_bytes"] for e in epochs), \
        (epochs, summary)
    assert all(e["tokens_per_s"] > 0 and e["steps"] == 98 for e in epochs), epochs
    assert summary["steps"] == 3 * 98 and summary["batch"] == 16 and summary["seq"] == 20, summary
