"""Progress on stderr, so long work is never silent: max-batch, sweep, optimize's optimal
planner, mutwo.capture and wrap's first call say what they try, how far they are and what is
left; one redrawn line on a terminal, one line per step otherwise, nothing
under --quiet, and --json's stdout still one JSON line.
"""
from __future__ import annotations

import json
import os
import pathlib
import pty
import re
import select
import subprocess
import sys

from mutwo_cli import MUTWO, ROOT

MAX_BATCH = ["max-batch", "--model", "mlp", "--memory", "10MiB", "--limit", "512", "--planners", "none,mutwo"]


def on_terminal(argv: list[str], cwd: str | None = None, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Runs argv with stderr on a pseudo-terminal and stdout on a pipe: (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, cwd=cwd,
                         env={**os.environ, **(env or {})})
    os.close(slave)
    got = b""
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                break
            got += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    out = p.stdout.read().decode()
    return p.wait(), out, got.decode(errors="replace")


def piped(argv: list[str], **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def test_max_batch_live_on_a_terminal() -> None:
    rc, out, term = on_terminal([MUTWO, *MAX_BATCH])
    assert rc == 0, term
    # One line redrawn in place: carriage returns that clear the line, an estimate of what is left.
    assert "\r\x1b[K" in term and "max-batch: [" in term and "left)" in term and "running batch" in term, term
    assert "max-batch:" not in out, out


def test_max_batch_one_line_per_step_otherwise_and_none_under_quiet() -> None:
    r = piped([MUTWO, *MAX_BATCH])
    lines = r.stderr.splitlines()
    assert r.returncode == 0 and "\r" not in r.stderr and len(lines) > 3, r.stderr
    assert all(l.startswith("max-batch: ") for l in lines), r.stderr
    assert any("profiling batch" in l for l in lines) and any("about" in l and "left" in l for l in lines), r.stderr
    q = piped([MUTWO, *MAX_BATCH, "--quiet"])
    assert q.returncode == 0 and q.stderr == "", q.stderr


def test_json_stays_one_line_with_progress_on_a_terminal() -> None:
    rc, out, term = on_terminal([MUTWO, *MAX_BATCH, "--json"])
    lines = out.strip().splitlines()
    j = json.loads(lines[-1])
    assert rc == 0 and j["command"] == "max-batch" and len(j["results"]) == 2, out
    assert sum(l.startswith("{") for l in lines) == 1 and "\r" not in out and "max-batch:" not in out, out
    assert "max-batch: [" in term, term


def test_sweep_live_on_a_terminal(tmp_path: pathlib.Path) -> None:
    argv = [MUTWO, "sweep", "--model", "mlp", "--batches", "4,8", "--steps", "1", "--out", str(tmp_path)]
    rc, _, term = on_terminal(argv)
    assert rc == 0 and "\r\x1b[K" in term and "sweep: [" in term and "batch 8 mutwo" in term, term
    q = piped([*argv, "--quiet"])
    assert q.returncode == 0 and "sweep:" not in q.stderr, q.stderr


def test_optimal_planner_says_how_far(tmp_path: pathlib.Path) -> None:
    argv = [MUTWO, "optimize", "--model", "transformer-lm", "--batch", "8", "--budget", "80%", "--planner", "optimal",
            "--steps", "1", "--out", str(tmp_path)]
    r = piped(argv)
    assert r.returncode == 0, r.stderr
    assert any(l.startswith("optimal: CBC") and "left by the time limit" in l for l in r.stderr.splitlines()), r.stderr
    q = piped([*argv, "--quiet"])
    assert "optimal:" not in q.stderr, q.stderr


def test_plan_says_how_far_and_nothing_under_quiet(tmp_path: pathlib.Path) -> None:
    """mutwo plan's optimal planner reports its progress, and --quiet, as every command has, silences it."""
    r = piped([MUTWO, "profile", "--model", "transformer-lm", "--batch", "8", "--out", str(tmp_path), "--quiet"])
    assert r.returncode == 0, r.stderr
    argv = [MUTWO, "plan", "--profile", str(tmp_path / "profile.json"), "--budget", "80%", "--planner", "optimal",
            "--out", str(tmp_path / "plan.json")]
    loud = piped(argv)
    assert loud.returncode == 0 and any(l.startswith("optimal: CBC") for l in loud.stderr.splitlines()), loud.stderr
    q = piped([*argv, "--quiet"])
    assert q.returncode == 0 and q.stderr == "" and "wrote " in q.stdout, q.stderr


def test_capture_live_on_a_terminal(tmp_path: pathlib.Path) -> None:
    env = {"PYTHONPATH": str(ROOT / "python")}
    argv = [sys.executable, "-m", "mutwo.capture", "models:unet", "--out", str(tmp_path / "step.json")]
    here = str(ROOT / "tests/python")
    rc, out, term = on_terminal(argv, cwd=here, env=env)
    assert rc == 0 and out.startswith("wrote "), (out, term)
    assert "\r\x1b[K" in term and "mutwo.capture: [3/4] tracing" in term and "left: writing the step file" in term, term
    r = piped(argv, cwd=here, env={**os.environ, **env})
    assert r.returncode == 0 and "\r" not in r.stderr and len(r.stderr.splitlines()) == 4, r.stderr
    q = piped([*argv, "--quiet"], cwd=here, env={**os.environ, **env})
    assert q.returncode == 0 and q.stderr == "", q.stderr


WRAPPED = """
import torch, torch.nn as nn
import mutwo.torch
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))  # README's
model = mutwo.torch.wrap(model, budget="60%")
for batch in (256, 256, 128):  # a new shape plans again; a known one runs silently
    model(torch.randn(batch, 64)).sum().backward()
print("trained")
"""


def test_wrap_first_call_live_on_a_terminal_and_none_under_mutwo_quiet(tmp_path: pathlib.Path) -> None:
    """wrap's first call of each input shape shows capture, then profiling,
    planning and rewriting on a terminal, and ends with one line of what was
    planned (the only line elsewhere); MUTWO_QUIET=1 silences it, as the compiled route's."""
    script = tmp_path / "wrapped.py"
    script.write_text(WRAPPED)
    env = {"PYTHONPATH": str(ROOT / "python")}
    rc, out, term = on_terminal([sys.executable, str(script)], env=env)
    assert rc == 0 and out == "trained\n", (out, term)
    assert "\r\x1b[K" in term and "mutwo.torch.wrap: Sequential: [1/3] capturing the step" in term, term
    assert "[3/3] profiling it on your tensors, planning, rewriting" in term, term
    closing = [l for l in term.replace("\r", "\n").splitlines() if ": planned for inputs" in l]
    assert len(closing) == 2 and "[256, 64]" in closing[0] and "[128, 64]" in closing[1], term
    assert re.search(r"peak [0-9.]+ [KM]iB -> [0-9.]+ [KM]iB predicted \(budget 60%\)", closing[0]), term
    r = piped([sys.executable, str(script)], env={**os.environ, **env})
    assert r.returncode == 0 and r.stderr.count("\n") == 2 and "\r" not in r.stderr, r.stderr
    rc, out, term = on_terminal([sys.executable, str(script)], env={**env, "MUTWO_QUIET": "1"})
    assert rc == 0 and out == "trained\n" and "mutwo.torch.wrap" not in term, term
