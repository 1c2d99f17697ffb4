# One training step and its timing, for every peer process of bench/peers.py (measure, largest, dist):
# the SGD step, warm-up then timed steps with the allocator's peak, torch.profiler's table by op, and
# the one-line text of an error for a row.
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Optional

import torch


def mutwo_torch() -> Any:
    """mutwo.torch, imported when a variant or the CPU's counting allocator needs it."""
    import mutwo.torch
    return mutwo.torch


def sgd_step(loss_fn: Callable, model: torch.nn.Module, inputs: tuple, opt: torch.optim.Optimizer) -> Callable:
    """One training step: loss, backward, optimizer step, gradients dropped; returns the loss."""
    def step() -> torch.Tensor:
        loss = loss_fn(model, *inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()
    return step


FIRST_STEP_S: list[float] = []  # the first step's wall time, its compiles included
WARMUP_STEPS = 2  # before the timed ones (timed_steps)


def timed_steps(step: Callable, steps: int, device: str,
                counted: bool = False) -> tuple[list[float], Optional[int], torch.Tensor]:
    """WARMUP_STEPS warm-up steps, then `steps` measured ones: their times (ms, each synchronized),
    the peak allocated bytes over them (off CUDA: None, or with `counted` mutwo's counting CPU allocator's,
    which must have been loaded before the model was made) and the last loss."""
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for i in range(WARMUP_STEPS):
        t0 = time.perf_counter()
        step()
        sync()
        if i == 0:
            FIRST_STEP_S[:] = [time.perf_counter() - t0]  # compiles included
    wait_for_the_others()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    elif counted:
        mutwo_torch().memory("cpu", reset=True)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(1000 * (time.perf_counter() - t0))
    peak = torch.cuda.max_memory_allocated() if cuda else mutwo_torch().memory("cpu")[1] if counted else None
    return times, peak, loss


def wait_for_the_others() -> None:
    """Under $BENCH_BARRIER (DIR:N: measure.py's processes:N), this process says it is warm and waits until
    all N are, so that their timed steps run at the same time whatever their compiles took."""
    barrier = os.environ.get("BENCH_BARRIER")
    if not barrier:
        return
    folder, n = barrier.rsplit(":", 1)
    open(os.path.join(folder, str(os.getpid())), "w").close()
    while len(os.listdir(folder)) < int(n):
        time.sleep(0.05)


def trace(step: Callable, label: str, device: str) -> None:
    """Where one step spends its time (on CUDA its GPU time), by op (torch.profiler), on stderr."""
    from torch.profiler import ProfilerActivity, profile
    cuda = device.startswith("cuda")
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(f"# {label}: one step, top ops by {key}", file=sys.stderr, flush=True)
    print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=48), file=sys.stderr, flush=True)


def error_text(e: Exception) -> str:
    """A row's error: "out of memory", else the exception's type and first line (with the next line
    where the first ends in ':', as a wrapper's "backend='compile_graph' raised:" does)."""
    if "out of memory" in str(e).lower():
        return "out of memory"
    lines = [line for line in str(e).strip().splitlines() if line.strip()] or [""]
    return f"{type(e).__name__}: {' '.join(lines[:2]) if lines[0].endswith(':') else lines[0]}"[:400]
