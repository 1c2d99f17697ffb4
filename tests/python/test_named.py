# torch.compile(model, backend="mutwo") by name, as Hugging Face and torch users name backends (docs/python.md, "By
# name"): the entry point pyproject.toml declares, found by torch's registry in
# a fresh process (a dist-info folder made here stands in for pip install .,
# which scripts/test-install.sh does for real); options= and its errors; the
# default budget; report() of a named backend; one backend per torch.compile.
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from typing import Any

import pytest
import torch
from torch import nn

import mutwo.torch as mt
from mutwo import _named, _registry

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """No budget from the environment or a callback (backend="mutwo" is
    named by import mutwo.torch, as the source tree has no entry point installed)."""
    torch._dynamo.reset()  # each test's compiles from scratch, far from Dynamo's recompile limit
    for name in _named.ENVIRONMENT.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_named, "defaults", {})


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 4))


def _first_call_error(**compile_kwargs: Any) -> str:
    model = torch.compile(_mlp(), backend="mutwo", **compile_kwargs)
    with pytest.raises(mt.MutwoError) as e:
        model(torch.randn(8, 32)).sum().backward()
    return str(e.value)


# A fresh process's step through backend="mutwo" by name, after `before`:
# gradients equal eager's, the report's budget from options=.
_NAMED_STEP = """
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
compiled = torch.compile(model, backend="mutwo", options={"budget": "100%", "compiler": "mutwo"})
x = torch.randn(8, 32)
compiled(x).sum().backward()
got = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
model(x).sum().backward()
assert all(torch.equal(a, p.grad) for a, p in zip(got, model.parameters()))
import mutwo.torch
report = mutwo.torch.report(compiled)
assert report["budget_source"] == "options" and report["measured_peak_bytes"] <= report["budget_bytes"]
print("named backend:", report["budget"], report["measured_peak_bytes"])
"""


def _named_step(before: str, path: list[str], cwd: Any) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path + [os.path.join(ROOT, "python")])}
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(before) + _NAMED_STEP], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "named backend: 100%" in run.stdout


def test_entry_point_finds_the_backend_in_a_fresh_process(tmp_path: Any) -> None:
    """The entry point of pyproject.toml, as an installed distribution's
    metadata: torch lists mutwo and compiles with it before mutwo is imported."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        points = tomllib.load(f)["project"]["entry-points"]["torch_dynamo_backends"]
    assert points == {"mutwo": _registry.ENTRY_POINT}
    info = tmp_path / "mutwo_entry_point-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mutwo-entry-point\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[torch_dynamo_backends]\n" +
                                           "".join(f"{k} = {v}\n" for k, v in points.items()))
    _named_step("""
        import sys, torch
        assert "mutwo" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        assert not any(m.startswith("mutwo") for m in sys.modules)
    """, [str(tmp_path)], tmp_path)


def test_import_mutwo_torch_names_the_backend_in_a_source_tree(tmp_path: Any) -> None:
    """The README's source-tree setup (PYTHONPATH=python, no entry point
    installed): `import mutwo.torch` alone makes backend="mutwo" known, not
    only `import mutwo.trainer`."""
    _named_step("""
        import sys, torch
        import mutwo.torch
        assert "mutwo.trainer" not in sys.modules and "mutwo" in torch._dynamo.list_backends()
    """, [], tmp_path)


@pytest.mark.parametrize("options, message", [
    ({"budgett": "1GiB"}, "options: unknown key 'budgett'"),
    ({"budget": "6 apples"}, "options: budget='6 apples': unknown unit"),  # the one budget language (_budget)
    ({"budget": "0%"}, "options: budget='0%' is not a percentage in (0%, 100%]"),
    ({"budget": "6 GiB", "compiler": "mutwo"}, "options: budget='6 GiB': unknown unit"),  # as the CLI's
    ({"budget": "0%", "compiler": "mutwo"}, "options: budget='0%' is not a percentage in (0%, 100%]"),
    ({"budget": True}, "options: budget=True: a budget is a size"),
    ({"planner": "sqrt-n"}, "options: planner='sqrt-n' is not one of mutwo, none (compiler inductor)"),
    ({"planner": "greedy", "compiler": "mutwo"},
     "options: planner='greedy' is not one of mutwo, per-layer, sqrt-n, optimal, none (compiler mutwo)"),
    ({"compiler": "tvm"}, "options: compiler='tvm' is not one of inductor, mutwo"),
    ({"profile": 3}, "options: profile=3 is not a string"),
    ({"chunk_loss": "yes"}, "options: chunk_loss='yes' is not True or False"),
])
def test_bad_options_raise_mutwo_error_naming_the_keys(options: dict, message: str) -> None:
    text = _first_call_error(options=options)
    first = text.splitlines()[0]
    assert first.startswith(message), first
    for key in _named.KEYS:  # every accepted key, with its form
        assert f"{key}: " in first


def test_mode_and_what_the_backend_checks() -> None:
    assert _first_call_error(mode="max-autotune").startswith("mode='max-autotune' is Inductor's")
    text = _first_call_error(options={"profile": "guess", "compiler": "mutwo"})  # backend() checks it
    assert text.startswith("profile='guess': use 'measure'"), text


def test_a_bad_environment_budget_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUTWO_BUDGET", "lots")
    assert _first_call_error().startswith("the environment (MUTWO_BUDGET, MUTWO_PLANNER): budget='lots'")


def test_where_the_budget_comes_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """options= before MutwoCallback's before MUTWO_BUDGET before the default,
    which on the CPU is none: plain torch.compile's plan (100% with compiler mutwo)."""
    inputs = [nn.Parameter(torch.randn(4, 4)), torch.randn(2, 4)]

    def source() -> tuple[str, Any]:
        entry = _named._build(None, None, inputs)
        return entry.source, entry.backend
    assert source()[0].startswith("default on the CPU: none (plain torch.compile's plan")
    assert _named.default_budget(inputs, "inductor")[0] is None
    assert _named.default_budget(inputs, "mutwo")[0] == "100%"
    monkeypatch.setenv("MUTWO_BUDGET", "70%")
    assert source()[0] == "MUTWO_BUDGET"
    monkeypatch.setattr(_named, "defaults", {"budget": "2GiB"})
    assert source()[0] == "MutwoCallback"
    assert _named._build({"budget": "1GiB"}, None, inputs).source == "options"


def test_report_reaches_the_named_backend_and_each_compile_has_its_own() -> None:
    """Two models compiled with the same byte budget: each torch.compile call
    has its own backend (a shared one would refuse the second graph), and
    report(model) reads it; report() reads the latest. A third model like the
    first runs the first's compiled code (Dynamo reuses it: the options are
    equal), so its report is the first's."""
    x = torch.randn(8, 32)

    def trained(width: int) -> nn.Module:
        torch.manual_seed(0)
        model = torch.compile(nn.Sequential(nn.Linear(32, width), nn.GELU(), nn.Linear(width, 4)),
                              backend="mutwo", options={"budget": "1GiB", "compiler": "mutwo"})
        for _ in range(2):
            model(x).sum().backward()
        return model
    compiled = [trained(64), trained(128)]
    first, second = (mt.report(m) for m in compiled)
    assert first["budget_bytes"] == second["budget_bytes"] == 1 << 30
    assert first["unplanned_peak_bytes"] < second["unplanned_peak_bytes"]
    assert first["steps"] == second["steps"] == 2
    assert first["measured_peak_bytes"] <= first["budget_bytes"]
    assert mt.report() == second
    third = trained(64)
    assert mt.report(third)["steps"] == mt.report(compiled[0])["steps"] == 4
    # evaluation compiles a graph without a backward: not planned, and no second graph for the byte budget
    with torch.no_grad():
        assert torch.allclose(compiled[0].eval()(x), compiled[0]._orig_mod(x))
    # a model compiled with backend=mutwo.torch.backend(...) reports through the model too
    backend = mt.backend("100%", compiler="mutwo")
    direct = torch.compile(_mlp(), backend=backend)
    direct(x).sum().backward()
    assert mt.report(direct)["budget_source"] == "backend()"
    with pytest.raises(mt.MutwoError, match="compiled with backend='eager', not mutwo's"):
        mt.report(torch.compile(_mlp(), backend="eager"))
