"""The `mutwo` command of an installed mutwo (pip install .): runs the C++
binary installed beside this package, mutwo/bin/mutwo, with the directory of
torch's shared libraries (libtorch, c10) on its library path. From a source
build, run build/src/cli/mutwo instead."""
from __future__ import annotations

import importlib.util
import os
import sys


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    binary = os.path.join(here, "bin", "mutwo")
    if not os.path.exists(binary):
        sys.exit(f"mutwo: {binary} is missing: reinstall mutwo (pip install .)")
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        sys.exit("mutwo: torch is not installed in this Python: pip install -r requirements.txt")
    torch_lib = os.path.join(os.path.dirname(spec.origin), "lib")
    paths = [torch_lib] + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    os.execv(binary, [binary] + sys.argv[1:])
