# One rank of tests/python/test_compile_ranks.py, started by torchrun on the
# CPU with Gloo: a tiny LLaMA-style decoder (tests/python/models.py) trained
# under DDP with the whole model compiled (DDP's optimizer splits the graph at
# its gradient buckets) or under FSDP2 (fully_shard per block) with each block
# compiled. Per scenario it trains the same steps three times from the same
# weights: with plain torch.compile, with mutwo's backend and no budget (plain
# compile's plan, measured: the unplanned step peak), and with mutwo's backend
# at BUDGET_SHARE of that peak (each run goes on, up to SETTLE steps more,
# while its plan is not settled); it writes each run's losses and report to
# OUT/rank<k>.json. Scenario "differ": rank 1's sequences are shorter, so its
# graphs differ from rank 0's; each rank writes the MutwoError it got.
# Scenario "overrun": a fake step over budget on rank 1 alone (_overrun).
#   python -m torch.distributed.run --nproc-per-node 2 compiled_ranks.py {ddp|fsdp|differ|overrun} OUT
from __future__ import annotations

import copy
import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

import models  # this folder, the script's own (python/ comes from the launcher's PYTHONPATH)
import mutwo.torch as mt

STEPS = 3  # compared with plain torch.compile's
SETTLE = 3  # more steps, at most, for a plan to settle (the step's MAX_COMPILES)
# Of the unplanned step peak (the lowest rank's): between the floor and 1 for
# this decoder (measured floors: 0.58 of it under DDP, 0.80 under FSDP2, where
# FSDP2's unsharded parameters and gradient buffers are more of the step).
BUDGET_SHARE = 0.9
BUCKET_MB = 0.15  # DDP's gradient buckets: three for this decoder, so three graphs


def _data(rank: int, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
    text = torch.randint(128, (8, seq + 1), generator=torch.Generator().manual_seed(100 + rank))
    return text[:, :-1].contiguous(), text[:, 1:].contiguous()


def _parallel(scenario: str, model: torch.nn.Module, backend: Any) -> torch.nn.Module:
    """The model under DDP and compiled whole, or under FSDP2 with each block compiled."""
    if scenario == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        for block in model.layers:
            block.compile(backend=backend, dynamic=False)
        return model
    from torch.nn.parallel import DistributedDataParallel
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(BUCKET_MB * 2**20)  # DDP's optimizer wants the first bucket no larger
    return torch.compile(DistributedDataParallel(model, bucket_cap_mb=BUCKET_MB), backend=backend, dynamic=False)


def _unsettled(backend: Any) -> bool:
    """Whether any rank's backend will measure its next step (a plan not yet
    measured, or one to compile again: after a step over budget, say)."""
    if isinstance(backend, str):
        return False
    flag = torch.tensor([int(backend.step.unsettled())])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag)


def train(scenario: str, start: torch.nn.Module, backend: Any, inputs: tuple) -> list[float]:
    """STEPS steps' losses; then, up to SETTLE more steps while a plan is not
    settled, so the last measured step is of the plan the backend keeps."""
    torch._dynamo.reset()
    model = copy.deepcopy(start)
    run = _parallel(scenario, model, backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for k in range(STEPS + SETTLE):
        if k >= STEPS and not _unsettled(backend):
            break
        loss = models.lm_loss(run, *inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if k < STEPS:
            losses.append(loss.item())
    return losses


def _report(backend: Any) -> dict:
    info = mt.report(backend)
    return {"step": info["step"], "compiles": [g["compiles"] for g in info["graphs"]],
            "chosen": [g["chosen"] for g in info["graphs"]], "graphs": len(info["graphs"]),
            "settled": not backend.step.unsettled()}


def _overrun(rank: int, start: torch.nn.Module) -> dict:
    """A step over budget on rank 1 alone (a fake measurement, one byte over,
    given to rank 1's backend while rank 0 gets its own last step): every rank
    plans again, or every rank has the BudgetError."""
    backend = mt.backend(budget="80%")
    train("ddp", start, backend, _data(rank, 32))
    step = backend.step
    record = copy.deepcopy(step.last)
    if rank == 1:
        record.at_peak().peak = step.budget + 1
    step.done(record)
    return {"replans": any(g._replan for g in step.graphs), "error": step.error}


def main() -> None:
    scenario, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mt.memory()  # the counting CPU allocator, from before the model exists
    start, _, _ = models.llama()
    result: dict[str, Any] = {"rank": rank}
    if scenario == "differ":  # rank 1 trains on shorter sequences: its graphs are not rank 0's
        try:
            train("ddp", start, mt.backend(budget="lowest"), _data(rank, 32 if rank == 0 else 16))
        except mt.MutwoError as e:
            result["error"] = str(e)
    elif scenario == "overrun":
        result.update(_overrun(rank, start))
    else:
        inputs = _data(rank, 32)
        result["plain"] = train(scenario, start, "inductor", inputs)
        unplanned = mt.backend()
        result["unplanned"] = train(scenario, start, unplanned, inputs)
        result["unplanned_report"] = _report(unplanned)
        peak = torch.tensor([result["unplanned_report"]["step"]["lowest_measured_peak_bytes"]])
        dist.all_reduce(peak, op=dist.ReduceOp.MIN)  # one budget for every rank
        budget = int(BUDGET_SHARE * int(peak))
        planned = mt.backend(budget=f"{budget}B")
        result["planned"] = train(scenario, start, planned, inputs)
        result["planned_report"] = _report(planned)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
