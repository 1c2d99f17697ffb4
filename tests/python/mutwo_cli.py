# The mutwo binary for the Python tests: $MUTWO_BIN (CTest sets it) or
# build/src/cli/mutwo, run with its output captured, and its --json line read.
from __future__ import annotations

import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
MUTWO = os.path.abspath(os.environ.get("MUTWO_BIN", str(ROOT / "build/src/cli/mutwo")))


def mutwo(*args: str, expect: int | None = 0, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Runs `mutwo args...`; asserts its exit code unless `expect` is None."""
    r = subprocess.run([MUTWO, *args], capture_output=True, text=True, cwd=cwd)
    if expect is not None:
        assert r.returncode == expect, f"mutwo {' '.join(args)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def last_json(r: subprocess.CompletedProcess) -> dict:
    """The JSON object every --json command prints on its last line."""
    return json.loads(r.stdout.strip().splitlines()[-1])
