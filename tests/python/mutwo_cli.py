# The mutwo binary for the Python tests: $MUTWO_BIN (CTest sets it) or
# build/src/cli/mutwo, run with its output captured, and its --json line read.
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess

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
