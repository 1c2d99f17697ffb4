"""What mutwo's compiled route adds to each step once its plan is settled: the
tiny LLaMA-style decoder (bench/models.py, small) trained on the CPU, plainly
compiled or through mutwo's backend under a byte budget that plain compile's
partition meets (so both run the same partition and only the route's own
bookkeeping differs); the median step of STEPS after 5 warm-up steps.

  OMP_NUM_THREADS=1 python3 bench/step_overhead.py plain
  OMP_NUM_THREADS=1 python3 bench/step_overhead.py 1GiB
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from models import make  # noqa: E402

STEPS = 600


def main() -> None:
    budget = sys.argv[1] if len(sys.argv) > 1 else "plain"
    torch.manual_seed(0)
    made = make("llama", 2, "cpu", small=True)
    backend = None
    if budget == "plain":
        loss_fn = torch.compile(made.loss_fn, dynamic=False)
    else:
        import mutwo.torch as mt
        backend = mt.backend(budget)
        loss_fn = torch.compile(made.loss_fn, backend=backend, dynamic=False)
    opt = torch.optim.SGD(made.model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        loss_fn(made.model, *made.inputs).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(5):
        step()
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        step()
        times.append(1000 * (time.perf_counter() - t0))
    row = dict(budget=budget, steps=STEPS, median_ms=round(statistics.median(times), 4), torch=torch.__version__)
    if backend is not None:
        import mutwo.torch as mt
        info = mt.report(backend)
        row.update(chosen=info["chosen"], compiles=info["compiles"])
    print(json.dumps(row))


if __name__ == "__main__":
    main()
