"""Steps written out and read back: a saved plan applied again (optimize
--plan), a rewritten step that replays random nodes run from its IR, and the
graph --dump-ir-after prints between passes.
"""
from __future__ import annotations

import json
import pathlib

from mutwo_cli import last_json, mutwo


def test_saved_plan_gives_the_same_rewritten_step(bert8_plan: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A saved plan is applied by optimize --plan (the same step again without
    planning): bert-tiny's plan
    at batch 8 and its lowest peak (activations dropped and the vocabulary loss chunked
    below its default) gives the same rewritten step as the optimize that made
    it. (Its refusals are rows of tests/errors/cases.py.)"""
    mutwo("optimize", "--plan", str(bert8_plan / "plan.json"), "--model", "bert-tiny", "--batch", "8", "--steps", "1",
          "--quiet", "--out", str(tmp_path))
    assert json.loads((bert8_plan / "plan.json").read_text())["dropped"] != 0, "the plan drops nothing"
    assert (bert8_plan / "rewritten.ir").read_bytes() == (tmp_path / "rewritten.ir").read_bytes(), \
        "optimize --plan did not reproduce the rewritten step"


def test_replayed_masks_run_from_ir(replayed: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """A rewritten step that replays random nodes (per-layer drops the
    dropout masks inside the blocks), saved as IR by optimize, runs again with
    run --graph as the graph it was planned from: the same losses and the same
    parameters after three steps, bit for bit."""
    unplanned = tmp_path / "unplanned.ir"
    unplanned.write_text(json.loads((replayed / "profile.json").read_text())["graph"])
    losses, saved = [], []
    for g in (unplanned, replayed / "rewritten.ir"):
        save = tmp_path / f"{len(saved)}.safetensors"
        r = mutwo("run", "--graph", str(g), "--steps", "3", "--seed", "7", "--json", "--save", str(save), expect=None)
        losses.append(last_json(r)["losses"])
        saved.append(save.read_bytes())
    assert "rng_replay=1" in (replayed / "rewritten.ir").read_text(), "the rewritten step replays nothing"
    assert losses[0] and losses[0] == losses[1] and saved[0] == saved[1], \
        f"the rewritten step with replayed masks differs from the unplanned one run from IR: {losses}"


def test_dump_ir_after(tmp_path: pathlib.Path) -> None:
    """--dump-ir-after: the graph after a pass goes to stderr under a "# IR
    after" line and parses back as a step (run --graph reads it); a pass that
    changed nothing says "unchanged". (An unknown pass: tests/errors/cases.py.)"""
    dump = mutwo("show", "--model", "mlp", "--batch", "8", "--dump-ir-after", "autodiff,reinplace", expect=None).stderr
    lines = dump.split("\n")
    assert "# IR after autodiff (mlp)" in lines and "# IR after reinplace (mlp): unchanged" in lines, \
        f"--dump-ir-after: {dump[:300]}"
    autodiff = "".join(l + "\n" for l in lines[:next(i for i, l in enumerate(lines) if l.startswith("# IR after reinplace"))])
    (tmp_path / "autodiff.ir").write_text(autodiff)
    mutwo("run", "--graph", str(tmp_path / "autodiff.ir"), "--steps", "1")  # the dumped graph runs
    recompute = mutwo("optimize", "--model", "mlp", "--batch", "8", "--budget", "90%", "--steps", "1", "--quiet",
                      "--out", str(tmp_path / "opt"), "--dump-ir-after", "recompute", expect=None).stderr
    assert any(l.startswith("# IR after recompute (mlp)") for l in recompute.split("\n")), \
        f"--dump-ir-after recompute: {recompute[:300]}"
