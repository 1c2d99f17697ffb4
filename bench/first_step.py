"""The first training step of a compiled model, in a fresh process: what a
user waits for before training starts. The bench's LLaMA-style decoder (12
layers; small enough for a CPU), compiled plainly, at a PyTorch
activation_memory_budget, or with mutwo's backend under a budget; prints the
seconds and mutwo's pricing line. Run it under Inductor's caches off, each
variant a few times (docs/planners.md, "The compiled route", quotes it):

  TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 bench/first_step.py plain
  TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 bench/first_step.py compile:0.4
  TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 bench/first_step.py mutwo:60%

With --steps N, then N more steps (after 5 settling ones) and their median:
what the compiled route adds to a step once its plan is settled, against
plain compile under a budget its partition meets (docs/python.md quotes it):

  OMP_NUM_THREADS=1 python3 bench/first_step.py plain --steps 600
  OMP_NUM_THREADS=1 python3 bench/first_step.py mutwo:1GiB --steps 600
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "tests", "python")]

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from llama_decoder import Llama  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant", help="plain, compile:X (activation_memory_budget=X), or mutwo:BUDGET")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=0, help="then time this many more steps (their median)")
    args = p.parse_args()
    kind, _, value = args.variant.partition(":")
    if kind not in ("plain", "compile", "mutwo") or (kind != "plain" and not value):
        p.error(f"variant {args.variant!r}: give plain, compile:X (0 < X <= 1) or mutwo:BUDGET (6GiB, 60%, lowest)")
    os.environ.setdefault("MUTWO_CACHE_DIR", tempfile.mkdtemp())  # no cached correction: a first run
    torch.manual_seed(0)
    model = Llama(vocab=512, dim=64, layers=12, heads=4, hidden=176, max_seq=64, sdpa=True, tied=False)
    model = model.to(args.device)
    tokens = torch.randint(0, 512, (4, 64), device=args.device)
    backend = None
    if kind == "mutwo":
        import mutwo.torch as mt
        backend = mt.backend(value)
        compiled = torch.compile(model, backend=backend)
    else:
        if kind == "compile":
            from torch._functorch import config as functorch_config
            functorch_config.activation_memory_budget = float(value)
        compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> float:
        start = time.perf_counter()
        F.cross_entropy(compiled(tokens).flatten(0, 1), tokens.flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start
    row = {"variant": args.variant, "device": args.device, "torch": torch.__version__,
           "first_step_s": round(step(), 2)}
    if args.steps:
        for _ in range(5):
            step()
        row.update(steps=args.steps, median_step_ms=round(1000 * statistics.median(step() for _ in range(args.steps)), 4))
    if backend is not None:
        row["chosen"] = mt.report(backend)["chosen"]
    print(json.dumps(row))


if __name__ == "__main__":
    main()
