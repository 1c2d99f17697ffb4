"""Fixtures for tests/errors: the files that the table's `{name}` placeholders
(cases.py) name, one fixture per name (those tests/e2e reads too are in
../conftest.py). Each is made once per session, and only when a row that
uses it runs: bad files written here, or what mutwo wrote (a profile, a
plan, a step's IR) mutated.
"""
from __future__ import annotations

import copy
import json
import pathlib
import re
import shutil
import struct
from collections.abc import Callable

import pytest

from mutwo_cli import mutwo

TESTS = pathlib.Path(__file__).resolve().parents[1]

SEEDS = TESTS / "fuzz" / "seeds"
TEXT = TESTS.parent / "data" / "english.txt"


def write_mutated(base: dict, path: pathlib.Path, change: Callable[[dict], object]) -> None:
    """Writes a copy of `base`, changed in place by `change`, to `path`."""
    p = copy.deepcopy(base)
    change(p)
    path.write_text(json.dumps(p))


@pytest.fixture
def out(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder for what a refused command would write."""
    return tmp_path


@pytest.fixture(scope="session")
def bad_ir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("bad_ir") / "bad.ir"
    path.write_text("not a graph\n")
    return path


@pytest.fixture(scope="session")
def blocker(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A file where an --out folder would be made."""
    path = tmp_path_factory.mktemp("blocker") / "file"
    path.write_text("")
    return path


@pytest.fixture(scope="session")
def text() -> pathlib.Path:
    return TEXT


@pytest.fixture(scope="session")
def short_text(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("short") / "short.txt"
    path.write_bytes(TEXT.read_bytes()[:300])
    return path


@pytest.fixture(scope="session")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """mlp.ir (the mlp's step); random.ir, which recomputes a dropout mask
    without its generator state; no_outputs.ir; deep.json, nested 100,000 deep."""
    d = tmp_path_factory.mktemp("graphs")
    (d / "mlp.ir").write_text(mutwo("show", "--model", "mlp").stdout)
    lines = (d / "mlp.ir").read_text().split("\n")
    i = next(k for k, l in enumerate(lines) if l.startswith("%loss.grad"))
    lines.insert(i + 1, "%fc1.dropout_mask.rc : bool[64,512] other = dropout_mask(%fc1.relu) {p=0.1} recompute scope=fc1")
    (d / "random.ir").write_text("\n".join(lines))
    (d / "no_outputs.ir").write_text("\n".join(l for l in lines[:i + 1] + lines[i + 2:] if not l.startswith("outputs")))
    (d / "deep.json").write_text("[" * 100000 + "]" * 100000 + "\n")
    return d


@pytest.fixture(scope="session")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The mlp's profile at batch 8 (profile.json) and mutations of it, each
    inconsistent in one field."""
    d = tmp_path_factory.mktemp("profiles")
    mutwo("profile", "--model", "mlp", "--batch", "8", "--out", str(d), "--quiet")
    base = json.loads((d / "profile.json").read_text())
    changes: dict[str, Callable[[dict], object]] = {
        "rank": lambda p: p["nodes"][3].update(rank=99999),
        "negative_ms": lambda p: p["nodes"][2].update(ms=-5),
        "reversed": lambda p: p.update(nodes=p["nodes"][::-1]),
        "fractional_batch": lambda p: p.update(batch=1.5),
        "fractional_version": lambda p: p.update(version=1.9),
        "value_rank": lambda p: p["values"][5].update(def_=0) or p["values"][5].update({"def": 100000}),
        "value_bytes": lambda p: p["values"][5].update(bytes=7),
        "node_name": lambda p: p["nodes"][5].update(name="zzz"),
    }
    for name, change in changes.items():
        write_mutated(base, d / f"{name}.json", change)
    return d


@pytest.fixture(scope="session")
def reports(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """q/: the mlp's profile at batch 16 (mlp_report's plan was not made from
    it); bad_plan.json, a plan without a model."""
    d = tmp_path_factory.mktemp("reports")
    mutwo("profile", "--model", "mlp", "--batch", "16", "--iters", "1", "--warmup", "0", "--out", str(d / "q"), "--quiet")
    (d / "bad_plan.json").write_text('{"format": "mutwo.plan", "version": 2}\n')
    return d


@pytest.fixture(scope="session")
def plans(bert8_plan: pathlib.Path, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Mutations of bert8_plan's plan.json, each lying about its activations."""
    d = tmp_path_factory.mktemp("plans")
    base = json.loads((bert8_plan / "plan.json").read_text())

    def recompute_mask(p: dict) -> None:  # a random value marked recompute, the summary made to agree, its replay not listed
        a = next(a for a in p["activations"] if a["name"].endswith("dropout_mask") and a["decision"] == "keep")
        a.update(decision="recompute", sources=[])
        p["dropped"] += 1
        p["dropped_bytes"] += a["bytes"]

    changes: dict[str, Callable[[dict], object]] = {
        "mask": recompute_mask,
        "count": lambda p: p.update(dropped=p["dropped"] + 1),
        "version": lambda p: p.update(version=1),
        "renamed": lambda p: p["activations"][0].update(name="zzz"),
        "budget": lambda p: p.update(budget_bytes=-1),
    }
    for name, change in changes.items():
        write_mutated(base, d / f"{name}.json", change)
    return d


@pytest.fixture(scope="session")
def swaps(bert16_profile: pathlib.Path, bert16_floor: int, tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """bad.json: bert-tiny's plan at batch 16 under 97% of its recompute-only
    floor with --host-memory (so it swaps), the first storage it swaps
    renamed %zzz."""
    d = tmp_path_factory.mktemp("swaps")
    mutwo("plan", "--profile", str(bert16_profile / "profile.json"), "--budget", f"{bert16_floor * 97 // 100}B",
          "--host-memory", "1GiB", "--out", str(d / "plan.json"), expect=None)
    base = json.loads((d / "plan.json").read_text())
    assert base["swapped"], "the plan below the recompute-only floor swaps nothing"
    write_mutated(base, d / "bad.json", lambda p: p["swapped"][0].update(name="zzz"))
    return d


@pytest.fixture(scope="session")
def steps(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The fuzzer's captured step, broken three ways: dev_zero/step.json (its
    tensor file /dev/zero), groups.json (a convolution's groups 0) and
    long/step.json (a tensor's offsets one float past its shape)."""
    d = tmp_path_factory.mktemp("steps")
    step_text = (SEEDS / "step.json").read_text()
    (d / "dev_zero").mkdir()
    (d / "dev_zero/step.json").write_text(re.sub(r'"data": *"step.safetensors"', '"data": "/dev/zero"', step_text))
    shutil.copy(SEEDS / "step.safetensors", d)
    j = json.loads(step_text)
    n = next(n for n in j["nodes"] if n["target"] == "aten::convolution_backward")
    n["args"][9] = 0
    (d / "groups.json").write_text(json.dumps(j))
    (d / "long").mkdir()
    shutil.copy(SEEDS / "step.json", d / "long")
    data = (SEEDS / "step.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"][1] += 4  # one float more than its shape holds
    head = json.dumps(header).encode()
    (d / "long/step.safetensors").write_bytes(struct.pack("<Q", len(head)) + head + data[8 + size:])
    return d


@pytest.fixture(scope="session")
def numbers(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The fuzzer's seeds with one number each written as 1e400, -1e400, NaN,
    -Infinity, Infinity or -0; a step value declared too large to hold; IR
    nodes missing an attribute or holding one of another kind or range."""
    d = tmp_path_factory.mktemp("numbers")
    shutil.copy(SEEDS / "step.safetensors", d)

    def put(src: str, dst: str, key: str, token: str) -> None:  # src's first number of `key` written as `token`
        text, n = re.subn(r'("%s": *)-?[0-9][0-9.eE+-]*' % key, lambda m: m.group(1) + token,
                          (SEEDS / src).read_text(), count=1)
        assert n == 1, (src, key)
        (d / dst).write_text(text)

    for name, token in [("big", "1e400"), ("small", "-1e400"), ("nan", "NaN"), ("inf", "-Infinity"), ("zero", "-0")]:
        put("profile.json", f"profile_{name}.json", "step_ms", token)
    put("profile.json", "profile_node.json", "ms", "Infinity")
    put("plan.json", "plan_big.json", "budget_bytes", "1e400")
    put("step.json", "step.json", "version", "-1e400")
    # A value the loss fusion removes, declared too large to hold (the fuzzer's seed 7 found it accepted).
    step = json.loads((SEEDS / "step.json").read_text())
    next(v for v in step["values"] if v["name"] == "t_2")["shape"][0] = 2**63 - 1
    (d / "step_shape.json").write_text(json.dumps(step))
    ir = (SEEDS / "mlp.ir").read_text()
    (d / "no_dim.ir").write_text(ir.replace(" {dim=1}", "", 1))
    (d / "p_string.ir").write_text(ir.replace("{p=0.1}", '{p="x"}', 1))
    (d / "dim_huge.ir").write_text(ir.replace("{dim=1}", "{dim=99999999999999999999}", 1))
    return d
