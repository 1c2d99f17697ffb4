# Reports in the user's names (issue 39, item 3): every dropped or swapped
# activation named by its module path and op, blocks found for captured
# models as for the zoo, every decision that lowered the peak listed (the
# vocabulary loss's chunks among them), and mutwo.torch.report()'s summary
# beside its fields. The binary comes from $MUTWO_BIN (CTest sets it) or
# build/src/cli/mutwo (mutwo_cli.py).
from __future__ import annotations

import json
import pathlib
import re
from typing import Callable

import torch
from torch import nn

from workloads import hf_models
import models
import mutwo.torch as mt
from mutwo import _report
from mutwo.capture import capture

from mutwo_cli import last_json, mutwo


def _optimize(factory: Callable[[], models.Factory], tmp_path: pathlib.Path, budget: str) -> tuple[str, dict, pathlib.Path]:
    """The model captured, then `mutwo optimize` under `budget`: its stdout, plan.json and --out."""
    model, inputs, loss_fn = factory()
    step, out = tmp_path / "step.json", tmp_path / "opt"
    capture(model, inputs, loss_fn, str(step))
    r = mutwo("optimize", "--graph", str(step), "--budget", budget, "--steps", "2", "--json", "--out", str(out))
    last_json(r)  # the run ended with its JSON line
    return r.stdout, json.loads((out / "plan.json").read_text()), out


def test_captured_resnet18_names_its_dropped_activations(tmp_path: pathlib.Path) -> None:
    """torchvision's ResNet-18 captured: its dropped activations carry their
    module paths and ops in plan.json, plan.csv, report.md (grouped by the
    blocks layer1.0 ... as the zoo's are) and the printed summary."""
    stdout, plan, out = _optimize(models.resnet18, tmp_path, "lowest")
    dropped = [a for a in plan["activations"] if a["decision"] == "recompute"]
    assert dropped, plan["decisions"]
    assert all(a["op"] for a in dropped), dropped
    assert all(not re.fullmatch(r"[a-z_]+_\d+", a["op"]) for a in dropped), "an op is an FX node's name"
    in_layers = [a for a in dropped if re.match(r"layer[1-4]\.[01]\.", a["module"])]
    assert len(in_layers) >= len(dropped) // 2, [(a["name"], a["module"]) for a in dropped]
    assert any(a["module"] == "layer1.0.conv1" and a["op"] == "convolution" for a in dropped), dropped
    report = (out / "report.md").read_text()
    blocks = report.split("## Dropped activations by block")[1].split("##")[0]
    assert "| layer1.0 |" in blocks and "| layer2.0 |" in blocks, blocks
    assert "layer1.0.conv1: convolution" in report
    assert "Recomputed activations:" in stdout and re.search(r"- layer\d\.\d\.[a-z0-9.]+: \w+ \(`", stdout), stdout
    header = (out / "plan.csv").read_text().splitlines()[0]
    assert header.endswith(",module,op"), header
    kinds = [d["kind"] for d in plan["decisions"]]
    assert "recompute" in kinds, plan["decisions"]
    recompute = next(d for d in plan["decisions"] if d["kind"] == "recompute")
    assert recompute["count"] == len(dropped) and recompute["lowered_bytes"] > 0, recompute
    assert recompute["peak_without_bytes"] == plan["predicted_peak_bytes"] + recompute["lowered_bytes"]


def test_the_vocabulary_loss_in_chunks_is_reported(tmp_path: pathlib.Path) -> None:
    """A plan that lowers the peak by chunking the vocabulary loss alone says so:
    plan.json's decisions, the printed summary and report.md."""
    stdout, plan, out = _optimize(models.gpt_head, tmp_path, "60%")
    chunks = [d for d in plan["decisions"] if d["kind"] == "chunks"]
    assert len(chunks) == 1 and chunks[0]["lowered_bytes"] > 0, plan["decisions"]
    assert chunks[0]["peak_without_bytes"] == plan["predicted_peak_bytes"] + chunks[0]["lowered_bytes"]
    assert any(c["chunk_rows"] < 256 for c in plan["chunks"]), plan["chunks"]
    assert "the vocabulary loss computed in smaller chunks" in stdout, stdout
    assert "lm_head: linear_cross_entropy" in stdout, stdout
    assert "the vocabulary loss computed in smaller chunks" in (out / "report.md").read_text()


def test_hf_model_under_wrap_names_its_dropped_activations() -> None:
    """Hugging Face's LLaMA (a tiny config) under wrap(): report() names what it
    drops by module and op, "model.layers.N.mlp.act_fn: silu" among them; its
    str() is the summary, its keys the fields they were."""
    model, inputs, loss_fn = hf_models.factory("llama")
    # Estimated times: the plan, and so its peak node, do not depend on the
    # machine's load (under measured times one CI run with its other core busy
    # planned a peak at a top-level add, outside any module to name).
    w = mt.wrap(model, budget="lowest", profile="flops")
    loss_fn(w, *inputs).backward()
    r = mt.report(w)
    assert isinstance(r, dict) and r["plans"] == 1 and r["steps"] == 1
    assert len(r["dropped"]) == sum(a["decision"] == "recompute" for a in r["moved"]) > 0
    labels = [a["label"] for a in r["moved"] if a["decision"] == "recompute"]
    assert any(re.fullmatch(r"model\.layers\.\d+\.mlp\.act_fn: silu", x) for x in labels), labels
    assert all(a["module"] for a in r["moved"]), [a for a in r["moved"] if not a["module"]]
    assert r["predicted_peak_node"] and ": " in r["predicted_peak_node"], r["predicted_peak_node"]
    text = str(r)
    assert text.startswith("mutwo plan of LlamaForCausalLM"), text
    for part in ("peak: ", "budget lowest", "time: +", "what lowered the peak:", "recomputed ",
                 "model.layers.", "plans: 1"):
        assert part in text, (part, text)
    assert len(text.splitlines()) <= 20, text
    assert json.loads(json.dumps(r)) == dict(r)
    assert repr(r).startswith(text)


def test_report_of_an_unplanned_wrap_says_nothing_lowered_the_peak() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    w = mt.wrap(model, "100%")
    w(torch.randn(8, 16)).sum().backward()
    r = mt.report(w)
    assert r["decisions"] == [] and r["moved"] == [], r
    assert "what lowered the peak: nothing" in str(r), str(r)
    assert r["predicted_peak_bytes"] == r["unplanned_peak_bytes"]


def test_a_spread_wider_than_the_difference_is_noted() -> None:
    """The step time is shown with its spread over the profiled steps, and a
    note when that spread is wider than the extra time shown."""
    wide = _report._spread_note(10.0, 8.0, 14.0, 1.5, 3)
    assert "8.00 to 14.00 ms over 3 profiled steps" in wide[0] and "note:" in wide[1], wide
    narrow = _report._spread_note(10.0, 9.9, 10.1, 1.5, 3)
    assert len(narrow) == 1, narrow
    assert "no spread" in _report._spread_note(10.0, 10.0, 10.0, 1.5, 1)[0]
