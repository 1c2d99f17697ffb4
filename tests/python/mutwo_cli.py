# The mutwo binary for the Python tests: $MUTWO_BIN (CTest sets it) or
# build/src/cli/mutwo, run with its output captured, and its --json line read;
# a planted child for its fresh-process checks.
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
MUTWO = os.path.abspath(os.environ.get("MUTWO_BIN", str(ROOT / "build/src/cli/mutwo")))


def mutwo(*args: str, expect: int | None = 0, cwd: str | None = None,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs `mutwo args...` (`env` added to the environment); asserts its exit
    code unless `expect` is None."""
    r = subprocess.run([MUTWO, *args], capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})})
    if expect is not None:
        assert r.returncode == expect, f"mutwo {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def last_line(r: subprocess.CompletedProcess) -> str:
    """The last line of a run's stdout."""
    return r.stdout.strip().splitlines()[-1]


def last_json(r: subprocess.CompletedProcess) -> dict:
    """The JSON object every --json command prints on its last line."""
    return json.loads(last_line(r))


def random_recomputations(ir_text: str) -> list[str]:
    """The recompute lines of a rewritten step's IR that draw random numbers,
    after asserting that each replays its generator state: attribute
    rng_replay=1 and, as its last input, a state an rng_save node made (random
    nodes are recomputed only with their state)."""
    lines = ir_text.splitlines()
    saved = {m.group(1) for l in lines if (m := re.match(r"(%\S+) : i64\[\d+\] \w+ = rng_save\(\)", l))}
    out = []
    for l in lines:
        if not re.search(r"\) (\{.*\} )?recompute", l):
            continue
        random = 'tags="random' in l or "random" in l.split("tags=")[-1][:30] or " = dropout_mask(" in l
        if not random:
            continue
        assert "rng_replay=1" in l, f"a random node recomputed without its generator state: {l}"
        args = re.search(r" = \w+\(([^)]*)\)", l).group(1).split(", ")
        assert args[-1] in saved, f"its last input is no rng_save output: {l}"
        out.append(l)
    return out


# The child of a fresh-process check (max-batch's answers, many --memory's),
# planted: a wrapper (MUTWO_TEST_FRESH_EXE) that logs its arguments and, call
# by call as FRESH_PLAN says, runs mutwo and passes its output on ("ok"), adds
# bytes to the peaks it reports ("over:BYTES"), says it ran out of memory
# ("oom", or "cublas": in cuBLAS's words, as a child on a full card did),
# exits 3 as run --arena does where its arena passes the cap ("cap") or prints
# no JSON ("garbage"); the last entry holds for every later call.
FRESH_WRAPPER = """#!{python}
import json, os, subprocess, sys
log = os.path.join(os.environ["FRESH_DIR"], "argv.log")
n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
with open(log, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
plan = os.environ["FRESH_PLAN"].split(",")
mode = plan[min(n, len(plan) - 1)]
if mode == "garbage":
    print("no JSON here")
    sys.exit(0)
if mode == "oom":
    print("mutwo: out of memory: planted by the test", file=sys.stderr)
    sys.exit(1)
if mode == "cublas":
    print("mutwo: ATen error: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
          file=sys.stderr)
    sys.exit(1)
if mode == "cap":
    print("--arena: the planned arena passes --device-memory: planted by the test", file=sys.stderr)
    sys.exit(3)
r = subprocess.run([{mutwo!r}, *sys.argv[1:]], capture_output=True, text=True)
sys.stderr.write(r.stderr)
lines = r.stdout.splitlines()
if mode.startswith("over:") and r.returncode == 0:
    j = json.loads(lines[-1])
    j["peak_bytes"] += int(mode[5:])
    j["device_peak_bytes"] += int(mode[5:])
    lines[-1] = json.dumps(j)
print("\\n".join(lines))
sys.exit(r.returncode)
"""


def planted_child(tmp_path: pathlib.Path, plan: str) -> dict[str, str]:
    """The environment under which mutwo's fresh-process children are
    FRESH_WRAPPER (written to tmp_path), following `plan`."""
    exe = tmp_path / "child.py"
    exe.write_text(FRESH_WRAPPER.format(python=sys.executable, mutwo=MUTWO))
    exe.chmod(0o755)
    return {"MUTWO_TEST_FRESH_EXE": str(exe), "FRESH_DIR": str(tmp_path), "FRESH_PLAN": plan}


def planted_calls(tmp_path: pathlib.Path) -> list[list[str]]:
    """The planted child's argument lists, one per call, in order."""
    log = tmp_path / "argv.log"
    return [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
