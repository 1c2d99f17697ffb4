# bench/peers.py dist: one rank of a data-parallel variant under torchrun (DIST_VARIANTS): DDP or FSDP2
# (fully_shard per block), plain, with per-block checkpointing, compiled (FSDP2 per block, DDP whole)
# by Inductor or by mutwo's backend (one backend object, one budget, for every graph) held to a
# per-rank peak; rank 0 prints the row, each per-rank figure the largest of any rank's. --device cpu:
# Gloo (CPU tests).
from __future__ import annotations

import argparse
import json
import os
import statistics
from typing import Any, Callable

import torch

from models import Made, make
from steps import FIRST_STEP_S, error_text, mutwo_torch, sgd_step, timed_steps
from variants import allocated_now, autocast_loss, checkpoint_blocks, partition_budget, report_fields

DIST_VARIANTS = ("ENGINE or ENGINE_HOW: ENGINE ddp, or fsdp (fully_shard per block, then the root); HOW ckpt "
                 "(per-block checkpointing), compile or compile:X (fsdp: each block compiled, ddp: the whole model; "
                 "X: activation_memory_budget), mutwo:B (compiled as compile, one mutwo.torch.backend(B) for every "
                 "graph; B e.g. lowest or 6GiB), mutwo-peak:P (that backend held to a per-rank peak of P bytes)")


def dist_kind(variant: str) -> tuple[str, str, str]:
    """"fsdp_compile:0.5" -> ("fsdp", "compile", "0.5"); SystemExit naming the forms for a variant dist does not know."""
    engine, _, rest = variant.partition("_")
    how, _, arg = rest.partition(":")
    ok = engine in ("ddp", "fsdp") and {"": not arg, "ckpt": not arg, "compile": not arg or _number(arg),
                                         "mutwo": bool(arg), "mutwo-peak": arg.isdigit()}.get(how, False)
    if not ok:
        raise SystemExit(f"unknown dist variant {variant!r}; the forms: {DIST_VARIANTS}")
    return engine, how, arg


def _number(text: str) -> bool:
    try:
        return float(text) >= 0
    except ValueError:
        return False


def parallel(engine: str, made: Made, device: str) -> torch.nn.Module:
    """The model under FSDP2 (fully_shard per block, then on the root) or DDP."""
    if engine == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for block in made.blocks:
            fully_shard(block)
        return fully_shard(made.model)
    ids = [torch.device(device).index] if device.startswith("cuda") else None
    return torch.nn.parallel.DistributedDataParallel(made.model, device_ids=ids)


def dist_compile(engine: str, made: Made, model: torch.nn.Module, variant: str, backend: Any) -> torch.nn.Module:
    """fsdp: each block compiled (block.compile); ddp: the whole DDP module, whose graph Dynamo's DDP
    optimizer splits at the gradient buckets. With mutwo's backend (one object for every graph), else
    Inductor at the variant's activation_memory_budget. Static shapes (dynamic=False), as mutwo plans them."""
    partition_budget(variant if backend is None else "")
    options = dict(dynamic=False, **({} if backend is None else {"backend": backend}))
    if engine == "fsdp":
        for block in made.blocks:
            block.compile(**options)
        return model
    return torch.compile(model, **options)


def dist_budget(how: str, arg: str, base: int) -> str:
    """mutwo's budget: mutwo:B's B; mutwo-peak:P's, P less each rank's measured base (window_base), then
    the lowest of the ranks': the ranks agree on one plan, so one budget holds on all of them."""
    if how == "mutwo":
        return arg
    return f"{min(v[0] for v in every_rank('budget', [max(1, int(arg) - base)]))}B"


def window_base(engine: str, made: Made, model: torch.nn.Module, loss_fn: Callable, device: str) -> int:
    """What this rank holds where mutwo's measured step begins, its first compiled forward (block 0's under
    FSDP2, the model's under DDP), read in the second of two eager steps of the same engine before anything
    is compiled: the parameters and gathered parameters, the optimizer's momentum, the embedding's output,
    the engine's buffers. A peer's whole-process peak less this is the budget that holds mutwo's process to
    that peak. The parameters and the random generators are put back after, so training starts as the
    peer's does."""
    first = made.blocks[0] if engine == "fsdp" else made.model
    local = [p.to_local() if hasattr(p, "to_local") else p for p in made.model.parameters()]
    saved = [p.detach().to("cpu", copy=True) for p in local]  # in host memory: off a card's count,
    aside = 0 if device.startswith("cuda") else sum(t.untyped_storage().nbytes() for t in saved)  # taken off the CPU's
    rng = torch.get_rng_state(), (torch.cuda.get_rng_state_all() if device.startswith("cuda") else None)
    seen: list[int] = []
    hook = first.register_forward_pre_hook(lambda *_: seen.append(allocated_now(device)))
    opt = torch.optim.SGD(made.model.parameters(), lr=made.lr, momentum=0.9)
    step = sgd_step(loss_fn, model, made.inputs, opt)
    for _ in range(2):
        step()
    hook.remove()
    del opt, step
    with torch.no_grad():
        for p, s in zip(local, saved):
            p.copy_(s)
    torch.set_rng_state(rng[0])
    if rng[1] is not None:
        torch.cuda.set_rng_state_all(rng[1])
        torch.cuda.empty_cache()
    return seen[-1] - aside


def step_fields(backend: Any) -> dict:
    """report_fields' keys of a backend (the whole step's figures), with every graph's chosen plan."""
    info = mutwo_torch().report(backend)
    return {**report_fields("inductor", backend), "chosen": [g["chosen"] for g in info["graphs"]]}


def every_rank(key: str, values: list[float]) -> list[list[float]]:
    """Every rank's values, rank by rank, exchanged through the process group's store. Not a collective:
    Gloo's worker thread lets go of a collective's tensors after its caller has returned, and a Python
    tensor let go of while the interpreter exits aborts the process (seen on the CPU in 1 run of 4)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d
    store = distributed_c10d._get_default_store()
    store.set(f"bench/{key}/{dist.get_rank()}", json.dumps(values))
    return [json.loads(store.get(f"bench/{key}/{r}")) for r in range(dist.get_world_size())]


def dist_measure(a: argparse.Namespace, device: str) -> dict:
    """This rank's model under the variant, trained (SGD, momentum 0.9) as measure does; the row, its
    per-rank figures the largest of any rank's: peak_bytes (the whole process), first_step_s, and for
    mutwo mutwo_step_peak_bytes; within_budget: mutwo's measured step within budget_bytes on every rank."""
    import torch.distributed as dist
    engine, how, arg = dist_kind(a.variant)
    made = make(a.model, a.batch, device, a.small)
    if getattr(made.model, "config", None) is not None:
        made.model.config.use_cache = False  # Hugging Face's KV cache: none in training
    if how == "ckpt":
        checkpoint_blocks(made)
    model = parallel(engine, made, device)
    backend, base = None, None
    loss_fn = autocast_loss(made.loss_fn, a.autocast, device)
    if how == "mutwo-peak":
        base = window_base(engine, made, model, loss_fn, device)
    if how.startswith("mutwo"):
        backend = mutwo_torch().backend(dist_budget(how, arg, base or 0))
    if how not in ("", "ckpt"):
        model = dist_compile(engine, made, model, a.variant, backend)
    opt = torch.optim.SGD(made.model.parameters(), lr=made.lr, momentum=0.9)
    step = sgd_step(loss_fn, model, made.inputs, opt)
    times, peak, loss = timed_steps(step, a.steps, device, counted=not device.startswith("cuda"))
    fields = step_fields(backend) if backend is not None else {}
    budget, ours = fields.get("budget_bytes"), fields.get("mutwo_step_peak_bytes")
    over = budget is not None and (ours is None or ours > budget)
    ranks = every_rank("row", [-1 if peak is None else peak, FIRST_STEP_S[0], -1 if ours is None else ours, over])
    top, first, ours_top, any_over = (max(column) for column in zip(*ranks))
    r = dict(model=a.model, batch=a.batch, world_size=dist.get_world_size(),
             system="pytorch" if backend is None else "mutwo", variant=a.variant,
             peak_bytes=None if top < 0 else int(top), step_ms=round(statistics.median(times), 3),
             loss=float(loss), steps=a.steps, first_step_s=round(first, 2), **fields)
    if a.autocast:
        r["autocast"] = a.autocast
    if backend is not None:
        r["mutwo_step_peak_bytes"] = None if ours_top < 0 else int(ours_top)
        r["within_budget"] = None if budget is None else not any_over
    if how == "mutwo-peak":
        r["target_peak_bytes"] = int(arg)
        r["window_base_bytes"] = int(max(v[0] for v in every_rank("base", [base])))
    return r


def dist_step(a: argparse.Namespace) -> None:
    """One rank of a dist variant (dist_kind): NCCL on CUDA, Gloo on the CPU (--device cpu, where peaks
    are mutwo's counting allocator's). Rank 0 prints the row; a rank that fails prints an error row
    naming it and exits non-zero, and torchrun stops the others."""
    import torch.distributed as dist
    dist_kind(a.variant)
    cuda = a.device.startswith("cuda")
    device = f"cuda:{os.environ['LOCAL_RANK']}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    else:
        mutwo_torch().memory("cpu")  # the counting CPU allocator, loaded before the model: the CPU's peaks
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        r = dist_measure(a, device)
    except Exception as e:
        print(json.dumps(dict(model=a.model, batch=a.batch, variant=a.variant, rank=dist.get_rank(),
                              system="mutwo" if "_mutwo" in a.variant else "pytorch", error=error_text(e))), flush=True)
        raise
    if dist.get_rank() == 0:
        print(json.dumps(r), flush=True)
    dist.destroy_process_group()
