"""The first training step of a compiled model, in a fresh process: what a
user waits for before training starts. The bench's LLaMA-style decoder (12
layers; small enough for a CPU), compiled plainly, at a PyTorch
activation_memory_budget, or with mutwo's backend under a budget; prints the
seconds and mutwo's pricing line. Run it under Inductor's caches off, each
variant a few times (docs/planners.md, "The compiled route", quotes it):

  TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 bench/first_step.py plain
  TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 bench/first_step.py compile:0.4
  TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 python3 bench/first_step.py mutwo:60%
"""
from __future__ import annotations

import argparse
import json
import os
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
    args = p.parse_args()
    kind, _, value = args.variant.partition(":")
    if kind not in ("plain", "compile", "mutwo") or (kind != "plain" and not value):
        p.error(f"variant {args.variant!r}: give plain, compile:X (0 < X <= 1) or mutwo:BUDGET (6GiB, 60%, lowest)")
    os.environ.setdefault("MUTWO_CACHE_DIR", tempfile.mkdtemp())  # no cached correction: a first run
    torch.manual_seed(0)
    model = Llama(vocab=512, dim=64, layers=12, heads=4, hidden=176, max_seq=64, sdpa=True, tied=False)
    model = model.to(args.device)
    tokens = torch.randint(0, 512, (4, 64), device=args.device)
    if kind == "mutwo":
        import mutwo.torch as mt
        compiled = torch.compile(model, backend=mt.backend(value))
    else:
        if kind == "compile":
            from torch._functorch import config as functorch_config
            functorch_config.activation_memory_budget = float(value)
        compiled = torch.compile(model)
    start = time.perf_counter()
    F.cross_entropy(compiled(tokens).flatten(0, 1), tokens.flatten()).backward()
    if args.device == "cuda":
        torch.cuda.synchronize()
    print(json.dumps({"variant": args.variant, "device": args.device, "torch": torch.__version__,
                      "first_step_s": round(time.perf_counter() - start, 2)}))


if __name__ == "__main__":
    main()
