"""PyTorch's memory viewer opens mutwo's timelines, so users read them with
a tool they know: the snapshots
that profile and optimize write load with PyTorch's reader (pickle, as
`python -m torch.cuda._memory_viz` reads them) and its functions; their
allocations, replayed, give mutwo's peaks to the byte; `trace_plot` makes the
page; and headless Chromium renders that page with no script error.

Where PyTorch's page cannot load its viewer (CI reaches package registries
only, not the CDNs it loads from) and MUTWO_MEMORY_VIZ_DIR names no local
copy, the render test skips, saying so (tests/python/memory_snapshots.py).
"""
from __future__ import annotations

import base64
import json
import pathlib
import pickle
import re

import pytest

from memory_snapshots import PAGE_SCRIPT, load, render, render_missing, replay, steps, trace_plot, value_name

DROPPED, RECOMPUTED = "activation, dropped by the plan", "activation, recomputed"


def test_profile_writes_the_measured_and_predicted_step(mlp_report: pathlib.Path) -> None:
    snapshot = load(mlp_report / "memory_snapshot.pickle")
    by_label = steps(snapshot)
    assert list(by_label) == ["measured step", "unplanned step (predicted)"]
    profile = json.loads((mlp_report / "profile.json").read_text())
    plan = json.loads((mlp_report / "plan.json").read_text())
    assert replay(by_label["measured step"]) == profile["peak_bytes"]
    assert replay(by_label["unplanned step (predicted)"]) == plan["unplanned_peak_bytes"]
    # Each output allocated by the node that made it (the frame's line is its
    # rank), in schedule order.
    made = [e for e in by_label["measured step"] if e["action"] == "alloc" and e["category"] != "workspace"
            and e["frames"][0]["line"] >= 0]
    defined = {v["name"]: v["def"] for v in profile["values"]}
    assert len(made) > len(profile["nodes"]) // 2
    assert all(defined[value_name(e)] == e["frames"][0]["line"] for e in made)
    ranks = [e["frames"][0]["line"] for e in made]
    assert ranks == sorted(ranks), "not in schedule order"
    # PyTorch's own readers take it.
    from torch.cuda import _memory_viz
    assert "TOTAL MEM" in _memory_viz.trace(snapshot)
    assert "segments: 1" in _memory_viz.segsum(snapshot)


def test_optimize_writes_before_and_after(bert8_plan: pathlib.Path) -> None:
    """bert-tiny at 70%: the unplanned step then the plan's, each replaying to
    plan.json's peak, the plan's dropped activations in their own category
    before and its recomputed ones after."""
    by_label = steps(load(bert8_plan / "memory_before_after.pickle"))
    before, after = by_label["unplanned step (predicted)"], by_label["planned step (predicted, mutwo planner)"]
    plan = json.loads((bert8_plan / "plan.json").read_text())
    assert replay(before) == plan["unplanned_peak_bytes"]
    assert replay(after) == plan["predicted_peak_bytes"]
    assert plan["predicted_peak_bytes"] < plan["unplanned_peak_bytes"]
    dropped = [e for e in before if e["action"] == "alloc" and e["category"] == DROPPED]
    assert sum(e["size"] for e in dropped) == plan["dropped_bytes"] > 0
    # The snapshot allocates storages; a dropped view is drawn as the tensor it shares.
    decided = {a.get("storage", a["name"]) for a in plan["activations"] if a["decision"] == "recompute"}
    assert {value_name(e) for e in dropped} <= decided
    recomputed = [e for e in after if e["action"] == "alloc" and e["category"] == RECOMPUTED]
    assert len(recomputed) >= plan["dropped"] and not any(e["category"] == DROPPED for e in after if "category" in e)


def test_trace_plot_makes_the_page(bert8_plan: pathlib.Path, tmp_path: pathlib.Path) -> None:
    snapshot = bert8_plan / "memory_before_after.pickle"
    html = trace_plot(snapshot, tmp_path / "page.html")
    assert PAGE_SCRIPT in html and "'Active Memory Timeline'" in html
    files = json.loads(re.search(r"const local_files = (\[.*\])", html).group(1))
    assert pickle.loads(base64.b64decode(files[0]["base64"]).rstrip(b"\0")) == load(snapshot)


def test_viewer_renders_the_page(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> None:
    """The page of the before/after snapshot in headless Chromium: the
    timeline drawn (polygons, the legend's categories), no script error, and
    a screenshot that is not blank."""
    if missing := render_missing():
        pytest.skip(missing)
    bert8_plan = request.getfixturevalue("bert8_plan")  # only once the page can be rendered
    shot = tmp_path / "page.png"
    dom, console = render(bert8_plan / "memory_before_after.pickle", tmp_path, shot)
    errors = re.search(r'data-errors="([^"]*)"', dom)
    assert not errors and not any(re.search(r"Uncaught|Error|Failed", line) for line in console), \
        f"the page's script failed: {errors and errors.group(1)} {console}"
    assert dom.count("<polygon") > 10, "no timeline drawn"
    for category in (DROPPED, RECOMPUTED, "parameter", "unknown"):
        assert f">{category}</text>" in dom, f"the legend lacks {category}"
    assert shot.exists(), console
    from PIL import Image
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 16) or []
    assert len(colours) > 8, "the screenshot is blank"
    non_white = sum(n for n, c in colours if c != (255, 255, 255))
    assert non_white > image.width * image.height // 20, "the screenshot is almost blank"
