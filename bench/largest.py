# bench/peers.py largest: the largest batch a variant trains 10 steps at under a device-memory cap
# (--cap 8GiB: the CUDA context counted), or on a card another process shares (--cap free: what the
# card has free is the limit). Bisection from a bracket, each trial in its own process.
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

TRIAL = """
import torch
torch.empty(1, device="cuda")
free, total = torch.cuda.mem_get_info()
outside = (total - free) - torch.cuda.memory_reserved()
if {cap} > 0:  # else (--cap free) what the card has free is the limit: a card another process shares
    torch.cuda.set_per_process_memory_fraction(({cap} - outside) / total)
from measure import Spec, measure_variant
try:
    r = measure_variant(Spec({model!r}, {batch}, steps=10), {variant!r})
    print("FITS", r["peak_bytes"], torch.cuda.max_memory_reserved() + outside)
except torch.cuda.OutOfMemoryError:
    print("OOM")
"""


def fits(model: str, batch: int, variant: str, cap: int, timeout: float) -> bool:
    """Whether `variant` trains 10 steps at `batch` under the cap (the CUDA context counted), expandable
    segments on as in mutwo."""
    path = [HERE] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])  # measure.py, then mutwo
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    code = TRIAL.format(cap=cap, model=model, batch=batch, variant=variant)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    ok = "FITS" in p.stdout
    print(f"  {model} {variant} batch {batch}: {'fits' if ok else 'does not fit'}", file=sys.stderr, flush=True)
    return ok


def largest(model: str, variant: str, cap: int, limit: int, timeout: float, hint: int = 0) -> int:
    """The largest batch that fits: a bracket found by steps of x2 from 8, or of x1.25 up or down from
    `hint` (another system's answer, to save trials), then bisection."""
    def ok(batch: int) -> bool:
        return fits(model, batch, variant, cap, timeout)
    if hint <= 0:
        lo, hi = 0, 8
        while hi <= limit and ok(hi):
            lo, hi = hi, hi * 2
    elif ok(hint):
        lo, hi = hint, max(hint + 1, hint * 5 // 4)
        while hi <= limit and ok(hi):
            lo, hi = hi, max(hi + 1, hi * 5 // 4)
    else:
        lo, hi = hint * 4 // 5, hint
        while lo > 0 and not ok(lo):
            lo, hi = lo * 4 // 5, lo
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def cap_bytes(text: str) -> int:
    """"8GiB" -> bytes; "free" -> 0 (no fraction set: what the card has free is the limit)."""
    if text == "free":
        return 0
    return int(float(text[:-3]) * UNITS[text[-3:]]) if text[-3:] in UNITS else int(text)


def largest_all(a: argparse.Namespace) -> None:
    hints = {k: int(v) for k, v in (h.split("=") for h in a.hints.split(",") if h)}
    for model in a.models.split(","):
        for variant in a.variants.split(","):
            t0 = time.time()
            best = largest(model, variant, cap_bytes(a.cap), a.limit, a.timeout, hints.get(variant, 0))
            print(json.dumps(dict(model=model, system="pytorch", variant=variant, max_batch=best,
                                  refused_batch=best + 1, cap=a.cap, seconds=round(time.time() - t0))), flush=True)
