# What each variant of bench/peers.py does to a model or its loss, and what mutwo.torch says of it
# afterwards. Variants: eager; ckpt or checkpoint (every block under torch.utils.checkpoint, or the
# model's own per-layer checkpointing for Hugging Face models); sac (selective checkpointing: matmuls
# and attention saved); offload (every block under save_on_cpu); ckpt-offload (offloaded checkpointing:
# checkpointed blocks under save_on_cpu, each saving its input to host memory); sac-offload (matmuls offloaded, the
# rest recomputed); compile, compile:X (activation_memory_budget X); wrap:B, backend:B (mutwo.torch);
# inductor:B, inductor-peak:P, inductor-unchunked:B, inductor-kept:B (mutwo plans, Inductor compiles; inductor@VARIANT,
# measure.py's, runs inductor-peak at that variant's measured peak); vmap:N, many:N[:B] (N copies as one
# fused array: measure.py's measure_array); processes:N[:V] (N processes at once: measure.py's at_once).
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Optional

import torch

from models import Made
from steps import WARMUP_STEPS, mutwo_torch


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """scaled_dot_product_attention as torch picks it ("auto"), or held to one backend such as "math"
    (plain ATen ops in a captured step instead of fused attention kernels)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, name.upper()))


def wrap_forwards(blocks: list[torch.nn.Module], wrap: Callable[[Callable], Callable]) -> None:
    """Every block's forward replaced by wrap(forward) (bench/blocks.py's blocks)."""
    for b in blocks:
        b.forward = wrap(b.forward)


def checkpoint_blocks(made: Made) -> None:
    """Per-block torch.utils.checkpoint (non-reentrant): the model's own where it has one (Hugging Face's)."""
    from torch.utils.checkpoint import checkpoint
    if made.checkpoint is not None:
        made.checkpoint(made.model)
    else:
        wrap_forwards(made.blocks, lambda f: functools.partial(checkpoint, f, use_reentrant=False))


def offload_policy() -> Any:
    """The CheckpointPolicy value that offloads to the CPU, or None."""
    from torch.utils import checkpoint as cp
    policy = getattr(cp, "CheckpointPolicy", None)
    for name in ("PREFER_CPU_OFFLOAD", "MUST_CPU_OFFLOAD"):
        if policy is not None and hasattr(policy, name):
            return getattr(policy, name)
    return None


def selective_blocks(blocks: list[torch.nn.Module], heavy: Any) -> None:
    """Every block under torch.utils.checkpoint with a selective policy: matmuls, convolutions and
    attention get `heavy` (saved, or offloaded), everything else is recomputed (PyTorch's SAC)."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    ops = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.convolution.default,
           aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
           aten._scaled_dot_product_cudnn_attention.default}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return heavy if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    context = functools.partial(create_selective_checkpoint_contexts, policy)
    wrap_forwards(blocks, lambda f: functools.partial(checkpoint, f, use_reentrant=False, context_fn=context))


def offload_blocks(blocks: list[torch.nn.Module]) -> None:
    """Every block's saved tensors kept in pinned host memory (torch.autograd.graph.save_on_cpu)."""
    def wrap(f: Callable) -> Callable:
        def offloaded(*args: Any, **kwargs: Any) -> Any:
            with torch.autograd.graph.save_on_cpu(pin_memory=True):
                return f(*args, **kwargs)
        return offloaded
    wrap_forwards(blocks, wrap)


def offload_checkpointed(blocks: list[torch.nn.Module]) -> None:
    """Offloaded checkpointing: every block under reentrant torch.utils.checkpoint, which saves its inputs
    with save_for_backward, within save_on_cpu, which moves them to pinned host memory (the non-reentrant
    checkpoint holds its inputs by reference, out of save_on_cpu's reach)."""
    from torch.utils.checkpoint import checkpoint
    wrap_forwards(blocks, lambda f: functools.partial(checkpoint, f, use_reentrant=True))
    offload_blocks(blocks)


def partition_budget(variant: str) -> None:
    """Dynamo reset; "compile:X" (or "fsdp_compile:X", ...) sets the partitioner's activation_memory_budget to X."""
    import torch._dynamo as dynamo
    import torch._functorch.config as fc
    dynamo.reset()
    if ":" in variant:
        fc.activation_memory_budget = float(variant.split(":", 1)[1])


def compiled(loss_fn: Callable, variant: str) -> Callable:
    """torch.compile(loss_fn); "compile:X" sets the partitioner's activation_memory_budget to X first."""
    partition_budget(variant)
    return torch.compile(loss_fn)


def inductor_backend(made: Made, variant: str, device: str) -> Any:
    """mutwo plans, Inductor compiles. inductor:B is the backend's own budget (what the step adds);
    inductor-peak:P holds the whole process to a peer's measured peak P: the budget is P less what the
    process holds beside the step (parameters, inputs, the optimizer's momentum, which the first step makes);
    inductor-unchunked:B is inductor:B with the vocabulary loss left whole (chunk_loss=False);
    inductor-kept:B is inductor:B with nothing offloaded to host memory (host_memory=0)."""
    budget = variant.split(":", 1)[1]
    if variant.startswith("inductor-peak:"):
        budget = f"{peak_budget(int(budget), device, made.model)}B"
    return mutwo_torch().backend(budget, chunk_loss=not variant.startswith("inductor-unchunked:"),
                                 **({"host_memory": 0} if variant.startswith("inductor-kept:") else {}))


def allocated_now(device: str) -> int:
    """What tensors hold on `device` now (on the CPU as mutwo's counting allocator counts it)."""
    return torch.cuda.memory_allocated(device) if device.startswith("cuda") else mutwo_torch().memory("cpu")[0]


def peak_budget(peak: int, device: str, model: torch.nn.Module) -> int:
    """mutwo's budget (what the step adds) that holds this process to a whole-process peak: the peak less
    what the process holds now (parameters, inputs; on the CPU as mutwo's counting allocator counts it)
    and the optimizer's momentum, which the first step makes (one buffer per parameter; under FSDP2 per
    local shard)."""
    held = allocated_now(device)
    local = [p.to_local() if hasattr(p, "to_local") else p for p in model.parameters()]
    return max(1, peak - held - sum(p.numel() * p.element_size() for p in local))


def prepare(made: Made, variant: str, device: str, autocast: Optional[str] = None) -> tuple[Callable, Any]:
    """Applies `variant` to made (in place); returns the loss function to train with and what
    mutwo.torch.report reads afterwards (a wrapped module or a backend), if any."""
    loss_fn, reported = made.loss_fn, None
    if variant in ("ckpt", "checkpoint"):
        checkpoint_blocks(made)
    elif variant == "sac":
        from torch.utils.checkpoint import CheckpointPolicy
        selective_blocks(made.blocks, CheckpointPolicy.MUST_SAVE)
    elif variant == "offload":
        offload_blocks(made.blocks)
    elif variant == "ckpt-offload":
        offload_checkpointed(made.blocks)
    elif variant == "sac-offload":
        if offload_policy() is None:
            raise RuntimeError("this torch's CheckpointPolicy has no CPU offload value")
        selective_blocks(made.blocks, offload_policy())
    elif variant.startswith("compile"):
        loss_fn = compiled(loss_fn, variant)
    elif variant.startswith("wrap:"):
        made.model = reported = mutwo_torch().wrap(made.model, variant.split(":", 1)[1])
    elif variant.startswith("backend:"):
        import torch._dynamo as dynamo
        dynamo.reset()
        reported = mutwo_torch().backend(variant.split(":", 1)[1], compiler="mutwo")
        loss_fn = torch.compile(loss_fn, backend=reported)
    elif variant.startswith(("inductor:", "inductor-peak:", "inductor-unchunked:", "inductor-kept:")):
        reported = inductor_backend(made, variant, device)
        loss_fn = torch.compile(loss_fn, backend=reported, dynamic=False)
    elif variant != "eager":
        raise ValueError(f"unknown variant {variant!r}: eager, ckpt or checkpoint, sac, offload, ckpt-offload, sac-offload, "
                         "compile, compile:X, wrap:B, backend:B, inductor:B, inductor-unchunked:B, inductor-kept:B, "
                         "inductor@VARIANT, vmap:N, many:N, many:N:B")
    return autocast_loss(loss_fn, autocast, device), reported


def autocast_loss(loss_fn: Callable, autocast: Optional[str], device: str) -> Callable:
    """loss_fn with its forward under torch.autocast (bf16 or f16), or loss_fn itself (None)."""
    if not autocast:
        return loss_fn
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[autocast]

    def under_autocast(*args: Any) -> torch.Tensor:
        with torch.autocast(device.split(":")[0], dtype=dtype):
            return loss_fn(*args)
    return under_autocast


def report_fields(variant: str, reported: Any) -> dict:
    """What mutwo.torch says of a wrapped module or a backend, for the row."""
    if variant.startswith("wrap:"):
        info = mutwo_torch().report(reported)
        return dict(predicted_peak_bytes=info["predicted_peak_bytes"], budget_bytes=info["budget_bytes"],
                    dropped=len(info["dropped"]), mutwo_step_peak_bytes=info["measured_peak_bytes"])
    if variant.startswith("backend:"):
        return dict(graphs=len(reported.graphs))
    if variant.startswith("inductor"):
        info = mutwo_torch().report(reported)
        step = info["step"]  # the whole step's figures, over every graph (a graph break makes several)
        return dict(graphs=len(info["graphs"]), budget_bytes=step["budget_bytes"],
                    predicted_peak_bytes=step["predicted_peak_bytes"],
                    mutwo_step_peak_bytes=step["measured_peak_bytes"],
                    # per graph, per compile: the plan, its prediction before it ran (corrected by what
                    # the compiles before it measured), what it measured, and Inductor's own estimate of
                    # its forward's and backward's peaks (torch._inductor.memory, for the model's misses)
                    attempts=[[dict(chosen=a["chosen"], predicted=a["predicted_peak_bytes"],
                                    measured=max(a["measured_peak_bytes"], default=None),
                                    inductor=a["inductor_estimated_peak_bytes"],
                                    phases=[a.get("predicted_phases"), a.get("measured_phases")])
                               for a in g["attempts"]]
                              for g in info["graphs"]],
                    # per graph, every candidate priced: its name, added peak as the model, corrected by
                    # what was measured, now predicts it, and modelled recompute ms and nodes (why a faster
                    # one was not chosen; with the step times, how far the time model is off)
                    candidates=[[(c["name"], c["predicted_peak_bytes"], c["extra_ms"], c["recomputed"])
                                 for c in g["candidates"]] for g in info["graphs"]],
                    recompilations=sum(g["recompilations"] for g in info["graphs"]),
                    compiles=sum(g["compiles"] for g in info["graphs"]), chosen=info["chosen"],
                    residual_cached=info["residual_cached"], predicted_extra_ms=info["predicted_extra_ms"],
                    compile_s=round(sum(a["compile_seconds"] for g in info["graphs"] for a in g["attempts"]), 2),
                    plan_s=round(sum(a["plan_seconds"] for g in info["graphs"] for a in g["attempts"]), 2),
                    recomputed=sum(v["decision"] == "recompute" for g in info["graphs"] for v in g["activations"]),
                    loss_chunk_rows=[g.get("loss_chunk_rows") for g in info["graphs"]],
                    # Each measured step resets the allocator's peak at the graphs' boundaries: past the
                    # warm-up steps (timed_steps), the row's peak_bytes may miss the step's peak.
                    steps_measured=info["step"]["steps_measured"],
                    peak_valid=info["step"]["steps_measured"] <= WARMUP_STEPS)
    return {}
