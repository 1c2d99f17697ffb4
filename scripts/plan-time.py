#!/usr/bin/env python3
# The compiled route's planning time and first call on the CPU (issue 46, item 7): one
# process per run, fresh mutwo and Inductor caches, a bench model compiled whole under a
# budget; prints one JSON line: the first call's wall seconds and, under mutwo, the
# seconds spent choosing the saved set (report()'s plan_seconds, summed over attempts).
#   MUTWO_QUIET=1 OMP_NUM_THREADS=1 PYTHONPATH=python:bench .venv/bin/python scripts/plan-time.py mutwo 50% [decoder12]
#   ... scripts/plan-time.py plain - [decoder12]     (plain torch.compile: its first call alone)
#   ... scripts/plan-time.py plain 0.5 [decoder12]   (torch.compile at activation_memory_budget 0.5)
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("MUTWO_CACHE_DIR", tempfile.mkdtemp())  # fresh caches, before torch reads them
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp())
import torch  # noqa: E402

import models  # noqa: E402  (bench/models.py)


def main() -> None:
    kind, budget = sys.argv[1], sys.argv[2]
    name = sys.argv[3] if len(sys.argv) > 3 else "decoder12"
    if kind not in ("mutwo", "plain"):
        sys.exit("usage: scripts/plan-time.py mutwo|plain BUDGET [MODEL]")
    import mutwo.torch as mt
    made = models.make(name, 8)

    def step(*inputs: torch.Tensor) -> torch.Tensor:
        return made.loss_fn(made.model, *inputs)
    backend = "inductor" if kind == "plain" else mt.backend(budget=budget)
    if kind == "plain" and budget != "-":
        torch._functorch.config.activation_memory_budget = float(budget)
    compiled = torch.compile(step, backend=backend, dynamic=False)
    start = time.perf_counter()
    compiled(*made.inputs).backward()
    first = time.perf_counter() - start
    report = None if kind == "plain" else mt.report(backend)
    plan = report and sum(a["plan_seconds"] for g in report["graphs"] for a in g["attempts"])
    chosen = report and report["chosen"]
    print(json.dumps({"kind": kind, "model": name, "budget": None if budget == "-" else budget, "chosen": chosen,
                      "first_call_s": round(first, 2), "plan_s": plan, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
