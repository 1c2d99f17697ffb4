# End to end on models outside mutwo's zoo: capture with python/mutwo, then
# `mutwo optimize --graph step.json --check` at 100/80/60/40% of the unplanned
# peak with SGD and AdamW, and `mutwo run --graph` against eager PyTorch.
# The binary comes from $MUTWO_BIN (CTest sets it) or build/src/cli/mutwo (mutwo_cli.py).
import json
import pathlib
import subprocess

import pytest
import torch

import models
from mutwo._files import read_safetensors
from mutwo.capture import capture

from mutwo_cli import MUTWO, ROOT, last_json, mutwo, random_recomputations

MODELS = ["vit", "mobilenet", "convnext", "unet", "llama"]
EAGER = ["vit", "mobilenet", "unet"]  # also compared with eager training over 3 steps


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict[str, tuple[pathlib.Path, tuple]]:
    out = {}
    for name in MODELS:
        model, inputs, loss_fn = getattr(models, name)()
        path = tmp_path_factory.mktemp(name) / "step.json"
        capture(model, inputs, loss_fn, str(path))
        out[name] = (path, (model, inputs, loss_fn))
    return out


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_optimize_fits_and_matches_bitwise(captured, tmp_path, name: str, optimizer: str) -> None:
    step, _ = captured[name]
    for budget in ["100%", "80%", "60%", "40%"]:
        out = tmp_path / budget.rstrip("%")
        r = subprocess.run([MUTWO, "optimize", "--graph", str(step), "--budget", budget, "--optimizer", optimizer,
                            "--steps", "1", "--check", "--json", "--quiet", "--out", str(out)], capture_output=True, text=True)
        j = last_json(r)
        assert r.returncode == (0 if j["feasible"] else 3), f"{name} {budget}: exit {r.returncode}\n{r.stderr}"
        assert j["check"] == "passed", f"{name} {optimizer} {budget}: {r.stdout}"
        planned = j["planned"]
        if j["feasible"]:
            assert planned["peak_bytes"] <= j["budget_bytes"], f"{name} {budget}: {r.stdout}"
            # On the CPU the measured peak is the prediction (a counting allocator, no caching).
            assert planned["peak_bytes"] == planned["predicted_peak_bytes"], f"{name} {budget}: {r.stdout}"
        assert j["baseline"]["peak_bytes"] == j["baseline"]["predicted_peak_bytes"], r.stdout
        # Random ops are recomputed only with their generator state.
        random_recomputations((out / "rewritten.ir").read_text())
        if budget == "60%":
            # The rewritten step trains from anywhere: its tensor file is named by an absolute path.
            rerun = subprocess.run([MUTWO, "run", "--graph", str(out / "rewritten.ir"), "--optimizer", optimizer,
                                    "--steps", "1", "--json"], capture_output=True, text=True, cwd="/")
            assert rerun.returncode == 0, rerun.stderr
        if budget == "60%" and name in ("llama", "vit"):
            assert planned["dropped"] + planned["swapped"] > 0, f"{name}: nothing dropped or swapped at 60%: {r.stdout}"


@pytest.mark.parametrize("name", EAGER)
def test_three_steps_equal_eager(captured, tmp_path, name: str) -> None:
    """Loss of every step, then every parameter and buffer, against eager PyTorch
    with torch.optim.SGD(lr=0.01, momentum=0.9) from torch.manual_seed(0): bit for bit,
    the classifier head and its cross-entropy as captured (--no-fuse-loss: fused
    into linear_cross_entropy they are equal within rounding, not bit for bit)."""
    step, (model, inputs, loss_fn) = captured[name]
    saved = tmp_path / "after.safetensors"
    r = mutwo("run", "--graph", str(step), "--steps", "3", "--seed", "0", "--json", "--save", str(saved),
              "--no-fuse-loss")
    losses = last_json(r)["losses"]

    torch.manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    eager = []
    for _ in range(3):
        opt.zero_grad()
        loss = loss_fn(model, *inputs)
        loss.backward()
        opt.step()
        eager.append(loss.item())
    assert losses == eager, f"{name}: mutwo {losses} eager {eager}"
    _, after = read_safetensors(str(saved))
    state = dict(model.named_parameters()) | dict(model.named_buffers())
    for qualname, t in state.items():
        assert qualname in after, f"{name}: {qualname} missing from run --save"
        assert torch.equal(after[qualname], t.detach()), f"{name}: {qualname} differs from eager after 3 steps"


def test_resnet18_unplanned_peak_matches_zoo(tmp_path) -> None:
    """torchvision's resnet18 captured gives the unplanned peak of `--model resnet-18` within 1%."""
    model, inputs, loss_fn = models.resnet18()
    step = tmp_path / "step.json"
    capture(model, inputs, loss_fn, str(step))
    images = inputs[0]
    cap = last_json(mutwo("run", "--graph", str(step), "--steps", "1", "--json"))
    zoo = last_json(mutwo("run", "--model", "resnet-18", "--batch", str(images.shape[0]), "--image-size",
                          str(images.shape[-1]), "--classes", str(model.fc.out_features), "--steps", "1", "--json"))
    ratio = cap["peak_bytes"] / zoo["peak_bytes"]
    assert abs(ratio - 1) <= 0.01, f"captured {cap['peak_bytes']} vs zoo {zoo['peak_bytes']} bytes ({ratio:.4f})"


def _corrupt(step: pathlib.Path, tmp_path: pathlib.Path, edit) -> pathlib.Path:
    doc = json.loads(step.read_text())
    edit(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    (tmp_path / doc["data"]).write_bytes((step.parent / doc["data"]).read_bytes())
    return bad


def test_bad_step_files_exit_2_naming_the_field(captured, tmp_path) -> None:
    step, _ = captured["unet"]
    text = step.read_text()
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) // 2])
    r = mutwo("run", "--graph", str(truncated), "--steps", "1", expect=2)
    assert "truncated" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr

    def unknown_op(doc):
        doc["nodes"][3]["target"] = "aten::no_such_op"
    r = mutwo("run", "--graph", str(_corrupt(step, tmp_path, unknown_op)), "--steps", "1", expect=2)
    assert "aten::no_such_op" in r.stderr, r.stderr

    def wrong_shape(doc):
        v = next(v for v in doc["values"] if v["role"] == "parameter")
        v["shape"] = [7] + v["shape"][1:]
    r = mutwo("run", "--graph", str(_corrupt(step, tmp_path, wrong_shape)), "--steps", "1", expect=2)
    assert "declares" in r.stderr, r.stderr

    def wrong_node_shape(doc):
        node = next(n for n in doc["nodes"] if n["target"] == "aten::convolution")
        v = next(v for v in doc["values"] if v["name"] == node["outputs"][0])
        v["shape"] = [v["shape"][0] + 1] + v["shape"][1:]
    r = mutwo("run", "--graph", str(_corrupt(step, tmp_path, wrong_node_shape)), "--steps", "1", expect=2)
    assert "aten::convolution" in r.stderr and "declares" in r.stderr, r.stderr

    bad = _corrupt(step, tmp_path, lambda doc: None)
    (tmp_path / json.loads(bad.read_text())["data"]).unlink()
    r = mutwo("run", "--graph", str(bad), "--steps", "1", expect=2)
    assert "tensor file" in r.stderr, r.stderr

    def missing_tensor(doc):
        doc["values"][0]["qualname"] = "not.in.the.file"
    r = mutwo("run", "--graph", str(_corrupt(step, tmp_path, missing_tensor)), "--steps", "1", expect=2)
    assert "not.in.the.file" in r.stderr, r.stderr


def test_per_layer_finds_the_blocks_of_a_capture(captured, tmp_path) -> None:
    """torch 1.13 records no module scopes: mutwo labels forward nodes by the parameters they
    read, so per-layer (torch.utils.checkpoint per block) has the decoder's layers to work on."""
    step, _ = captured["llama"]
    r = mutwo("optimize", "--graph", str(step), "--planner", "per-layer", "--budget", "100%", "--steps", "1",
              "--check", "--json", "--quiet", "--out", str(tmp_path / "pl"))
    j = last_json(r)
    assert j["check"] == "passed", r.stdout
    assert j["planned"]["dropped"] > 0 and "no numbered module blocks" not in r.stdout, r.stdout
    assert j["planned"]["peak_bytes"] < j["baseline"]["peak_bytes"], r.stdout


def test_vocabulary_head_is_fused_and_lowers_the_peak(tmp_path) -> None:
    """A captured LM's lm_head + F.cross_entropy become one linear_cross_entropy
    (docs/step-file.md): its logits never exist whole, so the unplanned peak is
    lower than with --no-fuse-loss, the loss is the same within 1e-6, and a
    plan under 60% picks a chunk below the whole and checks bit for bit."""
    model, inputs, loss_fn = models.gpt_head()
    step = tmp_path / "step.json"
    capture(model, inputs, loss_fn, str(step))
    shown = mutwo("show", "--graph", str(step)).stdout
    assert shown.count("= linear_cross_entropy(") == 1 and shown.count("= linear_cross_entropy_backward(") == 1, shown
    assert "aten::_log_softmax" not in shown and "aten::nll_loss" not in shown
    unfused = mutwo("show", "--graph", str(step), "--no-fuse-loss").stdout
    assert "linear_cross_entropy" not in unfused and "aten::_log_softmax" in unfused
    peaks, losses = {}, {}
    for flag in ("", "--no-fuse-loss"):
        j = last_json(mutwo("profile", "--graph", str(step), "--json", "--quiet", "--out", str(tmp_path / f"prof{flag}"),
                            *([flag] if flag else [])))
        peaks[flag] = j["peak_bytes"]
        r = last_json(mutwo("run", "--graph", str(step), "--steps", "1", "--json", *([flag] if flag else [])))
        losses[flag] = r["losses"][0]
    assert peaks[""] < peaks["--no-fuse-loss"], peaks
    assert abs(losses[""] - losses["--no-fuse-loss"]) <= 1e-6 * abs(losses["--no-fuse-loss"]), losses
    out = tmp_path / "opt"
    j = last_json(mutwo("optimize", "--graph", str(step), "--budget", "70%", "--steps", "1", "--check", "--json",
                        "--quiet", "--out", str(out)))
    assert j["feasible"] and j["check"] == "passed", j
    assert "= linear_cross_entropy(" in (out / "rewritten.ir").read_text()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: swapping inside a captured CUDA graph")
def test_swapped_step_runs_as_a_captured_cuda_graph(tmp_path) -> None:
    """Below recomputation's floor, a plan that swaps fits node by node
    (bit for bit with --check) and as a captured CUDA graph, at the predicted peak."""
    prof = tmp_path / "profile"
    mutwo("profile", "--model", "bert-tiny", "--batch", "16", "--device", "cuda", "--quiet", "--out", str(prof))
    floors = {}
    for mode, flags in (("recompute", ["--no-swap"]), ("hybrid", [])):
        r = mutwo("plan", "--profile", str(prof / "profile.json"), "--budget", "1", *flags, "--json",
                  "--out", str(tmp_path / f"floor_{mode}.json"), expect=3)
        floors[mode] = last_json(r)["predicted_peak_bytes"]
    assert floors["hybrid"] < floors["recompute"], floors
    budget = str((floors["hybrid"] + floors["recompute"]) // 2)
    for extra in (["--check"], ["--cuda-graph"]):
        r = mutwo("optimize", "--model", "bert-tiny", "--batch", "16", "--device", "cuda", "--budget", budget,
                  "--steps", "3", "--json", "--quiet", "--out", str(tmp_path / extra[0].strip("-")), *extra)
        j = last_json(r)
        assert j["fits"] and j["planned"]["swapped"] > 0, j
        assert abs(j["planned"]["peak_bytes"] - j["planned"]["predicted_peak_bytes"]) <= 0.03 * j["planned"]["peak_bytes"], j
        if extra == ["--check"]:
            assert j["check"] == "passed", j
