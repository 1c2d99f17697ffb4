# Writes tests/core/data/decoder_candidates.json: the test decoder's (models.llama)
# candidate partitions as the compiled route priced them on the CPU (name,
# predicted added peak, modelled recompute ms), and at budgets across its range
# the candidate the compiled route's rule chose when it was Python's (the
# fastest that fits, the lower peak breaking ties), for the C++ core's test of
# the same choice (tests/core/test_compiled.cpp). Run again only when the
# candidates' pricing changes:
#   PYTHONPATH=python:tests/python .venv/bin/python tests/python/record_candidates.py tests/core/data/decoder_candidates.json
from __future__ import annotations

import json
import sys

import torch

import models
import mutwo.torch as mt


def main(out: str) -> None:
    model, inputs, loss_fn = models.llama(dropout=0.1)
    torch._dynamo.reset()
    backend = mt.backend(budget="2600KiB")  # a byte budget: the whole menu is priced
    step = models.Step(model, loss_fn)
    compiled = torch.compile(step, backend=backend, dynamic=False)
    compiled(*inputs).backward()
    graph = backend.graphs[-1]
    corrections = graph.attempts[0].corrections
    rows = [{"name": c.name, "peak": c.peak(corrections), "extra_ms": round(c.extra_ms, 9)} for c in graph.menu]
    lo, hi = min(r["peak"] for r in rows), max(r["peak"] for r in rows)
    choices = []
    for i in range(13):
        budget = lo + (hi - lo) * i // 12
        fits = [r for r in rows if r["peak"] <= budget]
        best = min(fits, key=lambda r: (r["extra_ms"], r["peak"]))
        choices.append({"budget": budget, "chosen": best["name"]})
    with open(out, "w") as f:
        json.dump({"about": "tests/python/record_candidates.py: the test decoder's candidates on the CPU, torch "
                            f"{torch.__version__}, and the choice at each budget",
                   "candidates": rows, "choices": choices}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
