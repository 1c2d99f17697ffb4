"""What mutwo writes for people: mutwo report remakes a profile's files and a
plan's report.md; sweep's table, CSV and plot mark a plan that missed its
budget.
"""
from __future__ import annotations

import csv
import pathlib
import shutil

from mutwo_cli import mutwo

GENERATED = ["nodes.csv", "activations.csv", "trace.json", "memory_snapshot.pickle", "memory_timeline.dat",
             "memory_timeline.gp", "peak_breakdown.dat", "peak_breakdown.gp"]


def test_report_writes_the_profile_again(mlp_report: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """mutwo report writes a profile's files again from profile.json alone,
    byte for byte (reports made again from saved files, nothing run), and a plan's report.md. (A plan made from
    another profile, exit 2: tests/errors/cases.py.)"""
    p, saved = tmp_path / "p", tmp_path / "saved"
    shutil.copytree(mlp_report, p)
    saved.mkdir()
    for f in GENERATED:
        (p / f).rename(saved / f)
    for f in [*p.glob("*.svg"), *p.glob("*.png")]:
        f.unlink()
    mutwo("report", "--profile", str(p / "profile.json"), "--plan", str(p / "plan.json"), "--out", str(p))
    differ = [f for f in GENERATED if (saved / f).read_bytes() != (p / f).read_bytes()]
    assert not differ, f"mutwo report wrote {differ} differently"
    if shutil.which("gnuplot"):
        for f in ("memory_timeline.svg", "memory_timeline.png", "peak_breakdown.svg", "peak_breakdown.png"):
            assert (p / f).exists() and (p / f).stat().st_size, f"mutwo report did not render {f}"
    assert "| rank | module: op | activation |" in (p / "report.md").read_text(), "report.md lacks the candidates table"


def test_sweep_marks_the_plan_that_missed(tmp_path: pathlib.Path) -> None:
    """sweep marks a point whose plan missed its budget: on the mlp at batch 8,
    parameters, gradients and momentum alone (7.7 MiB) are far above 1 MiB.
    (A percentage would not miss: its peak holds no activations, so every
    percentage is the unplanned peak; docs/budgets.md.)"""
    out = mutwo("sweep", "--model", "mlp", "--batches", "8", "--budget", "1MiB", "--steps", "1", "--quiet",
                "--out", str(tmp_path), expect=None).stdout
    with open(tmp_path / "sweep.csv") as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    assert rows["baseline"]["feasible"] == "", rows
    assert rows["per-layer"]["feasible"] == "1", rows
    m = rows["mutwo"]
    assert m["feasible"] == "0" and int(m["predicted_peak_bytes"]) > int(m["budget_bytes"]), rows
    missed = tmp_path / "peak_vs_batch_missed.dat"
    assert "Missed its budget (1 of the planned points" in out and "| 8 | mutwo |" in out \
        and missed.exists() and missed.stat().st_size \
        and "peak_vs_batch_missed.dat" in (tmp_path / "peak_vs_batch.gp").read_text(), \
        f"sweep does not say the plan missed: {out}"
