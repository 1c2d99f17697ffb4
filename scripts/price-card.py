#!/usr/bin/env python3
# The compiled route's plan for a bench model on a card, priced on the CPU: the
# joint graph traced and planned as CUDA would plan it (fused pointwise, the
# cuda rate row, offload copies on the compute stream at 25 GB/s each way), the
# compile stopped once the frontier is priced. Prints one JSON line per
# candidate of note (the lowest few, checkpoint's, plain compile's): predicted
# added peaks, uncorrected by any measurement, so read them as the model's,
# not a card's (docs/compiled.md, "On a card", for how far the model missed).
#   OMP_NUM_THREADS=1 .venv/bin/python scripts/price-card.py llama1b-64k [BATCH] [HOST_MEMORY]
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", d) for d in ("python", "bench")]
os.environ.setdefault("MUTWO_QUIET", "1")
import torch  # noqa: E402

import models  # noqa: E402  (bench/models.py)
import mutwo.torch as mt  # noqa: E402
from mutwo.compiled import _frontier, _inductor  # noqa: E402


class _Priced(Exception):
    """Raised once the frontier is priced: Inductor's code generation is not needed."""


def price(name: str, batch: int, host: str) -> tuple[Any, float]:
    """The first graph's Choice, priced as CUDA, and the seconds it took."""
    seen: dict[str, Any] = {}
    choose = _frontier.choose

    def as_cuda(q: Any, device: str, *a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        seen["choice"] = choose(q, "cuda", *a, **k)
        seen["s"] = time.perf_counter() - start
        raise _Priced
    _frontier.choose = as_cuda
    _inductor.offloading = lambda limit, device: _frontier.Offloading(limit, 25.0, 25.0, False)
    made = models.make(name, batch)

    def step(*inputs: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the bench's bf16, on the CPU
            return made.loss_fn(made.model, *inputs)
    try:
        torch.compile(step, backend=mt.backend(budget="lowest", host_memory=host), dynamic=False)(*made.inputs)
    except Exception as e:  # Dynamo wraps what the backend raises
        if "choice" not in seen:
            raise
        del e
    return seen["choice"], seen["s"]


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: scripts/price-card.py MODEL [BATCH] [HOST_MEMORY], e.g. llama1b-64k 1 64GiB")
    name, batch = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    host = sys.argv[3] if len(sys.argv) > 3 else "64GiB"
    choice, seconds = price(name, batch, host)
    none = _frontier.Corrections()
    ranked = sorted(choice.candidates, key=lambda c: c.peak(none))
    shown = ranked[:4] + [c for c in ranked[4:] if c.name.startswith("checkpoint")] + [choice.chosen, choice.default]
    for c in {c.name: c for c in shown}.values():
        print(json.dumps({"model": name, "batch": batch, "priced_as": "cuda", "candidate": c.name,
                          "chosen": c.name == choice.chosen.name, "predicted_peak_bytes": c.peak(none),
                          "fwd_peak_bytes": c.fwd_peak, "bwd_peak_bytes": c.bwd_peak, "host_bytes": c.host_bytes,
                          "extra_ms": round(c.extra_ms, 1), "plan_s": round(seconds, 2),
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
