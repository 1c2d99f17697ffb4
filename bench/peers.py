# PyTorch's peers of mutwo, and mutwo from the user's own loop, on the models of bench/models.py:
# one module for every benchmark of bench/run.py. Subcommands, each printing JSON lines (untagged:
# bench/run.py adds card, torch, date, commit and what):
#   measure  one training step per variant, each variant in its own process (an OOM or a compile
#            failure loses only its own row): peak = torch.cuda.max_memory_allocated over the
#            measured steps, step_ms = their median (wall clock, synchronized), after 2 warm-up steps;
#   capture  the model's step written for mutwo (python/mutwo/capture.py);
#   largest  the largest batch a variant trains 10 steps at under a device-memory cap (bisection,
#            each trial in its own process), or on a card another process shares (--cap free);
#   dist     one variant under torchrun (DIST_VARIANTS): DDP or FSDP2 (fully_shard per block), plain, with
#            per-block checkpointing, compiled (FSDP2 per block, DDP whole) by Inductor or by mutwo's backend
#            (one backend object, one budget, for every graph) held to a per-rank peak; rank 0 prints the
#            row, each per-rank figure the largest of any rank's. --device cpu: Gloo (CPU tests).
# Variants: eager; ckpt or checkpoint (every block under torch.utils.checkpoint, or the model's own
# per-layer checkpointing for Hugging Face zoo models); sac (selective checkpointing: matmuls and
# attention saved); offload (every block under save_on_cpu); sac-offload (matmuls offloaded, the rest
# recomputed); compile, compile:X (activation_memory_budget X); wrap:B, backend:B (mutwo.torch);
# inductor:B and inductor@VARIANT (mutwo plans, Inductor compiles, at that variant's measured peak, in
# this call or, with BENCH_PEAKS=results.jsonl, in an earlier one).
#   python3 bench/peers.py measure --model llama --batch 8 --variants eager,checkpoint,compile:0.5
#   python3 bench/peers.py capture --model llama --batch 8 --out steps/llama.json
#   python3 bench/peers.py largest --cap 8GiB --models resnet-152,bert-base --variants eager,ckpt
#   torchrun --nproc-per-node 2 bench/peers.py dist --model bert-large --batch 32 --variant ddp_ckpt
#   torchrun --nproc-per-node 2 bench/peers.py dist --model llama1b --batch 4 --autocast bf16 --variant fsdp_compile:0.5
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import runner  # noqa: E402
from runner import system_of  # noqa: E402
from models import Made, make  # noqa: E402

UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


@dataclass
class Spec:
    """One configuration to measure: the model, its batch and how it runs."""
    model: str
    batch: int
    device: str = "cuda"
    steps: int = 10
    sdpa: str = "auto"  # scaled_dot_product_attention's backend: auto, or math, efficient_attention, ...
    autocast: Optional[str] = None  # bf16 or f16: the forward under torch.autocast
    small: bool = False  # tiny captured models, for CPU tests
    trace: bool = False  # print one step's GPU time by op (torch.profiler)


def row(spec: Spec, variant: str, system: str = "", **fields: Any) -> dict:
    sdpa = {} if spec.sdpa == "auto" else {"sdpa": spec.sdpa}
    return dict(system=system or system_of(variant), model=spec.model, batch=spec.batch, variant=variant, **fields,
                **sdpa)


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """scaled_dot_product_attention as torch picks it ("auto"), or held to one backend such as "math"
    (plain ATen ops in a captured step instead of fused attention kernels)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, name.upper()))


# ---------------------------------------------------------------------------------------------
# What each variant does to the model or the loss.


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


def mutwo_torch() -> Any:
    import mutwo.torch
    return mutwo.torch


def inductor_backend(spec: Spec, made: Made, variant: str) -> Any:
    """mutwo plans, Inductor compiles. inductor:B is the backend's own budget (what the step adds);
    inductor-peak:P holds the whole process to a peer's measured peak P: the budget is P less what the
    process holds beside the step (parameters, inputs, the optimizer's momentum, which the first step makes);
    inductor-unchunked:B is inductor:B with the vocabulary loss left whole (chunk_loss=False)."""
    budget = variant.split(":", 1)[1]
    if variant.startswith("inductor-peak:"):
        budget = f"{peak_budget(int(budget), spec.device, made.model)}B"
    return mutwo_torch().backend(budget, chunk_loss=not variant.startswith("inductor-unchunked:"))


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


def prepare(spec: Spec, made: Made, variant: str) -> tuple[Callable, Any]:
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
    elif variant.startswith(("inductor:", "inductor-peak:", "inductor-unchunked:")):
        reported = inductor_backend(spec, made, variant)
        loss_fn = torch.compile(loss_fn, backend=reported, dynamic=False)
    elif variant != "eager":
        raise ValueError(f"unknown variant {variant!r}: eager, ckpt or checkpoint, sac, offload, sac-offload, "
                         "compile, compile:X, wrap:B, backend:B, inductor:B, inductor-unchunked:B, inductor@VARIANT")
    return autocast_loss(loss_fn, spec.autocast, spec.device), reported


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


# ---------------------------------------------------------------------------------------------
# Training and timing.


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


def measure(spec: Spec, variant: str) -> dict:
    """Trains a fresh model (SGD, momentum 0.9) in this process: one row."""
    made = make(spec.model, spec.batch, spec.device, spec.small)
    loss_fn, reported = prepare(spec, made, variant)
    opt = torch.optim.SGD(made.model.parameters(), lr=made.lr, momentum=0.9)
    step = sgd_step(loss_fn, made.model, made.inputs, opt)
    if spec.trace:
        step(), step()
        trace(step, f"{spec.model} batch {spec.batch} {variant}", spec.device)
    times, peak, loss = timed_steps(step, spec.steps, spec.device)
    return row(spec, variant, peak_bytes=peak, step_ms=round(statistics.median(times), 3),
               loss=float(loss), steps=spec.steps, first_step_s=round(FIRST_STEP_S[0], 2), **({"autocast": spec.autocast} if spec.autocast else {}),
               **report_fields(variant, reported))


# ---------------------------------------------------------------------------------------------
# measure: every variant in its own process.


def measure_here(spec: Spec, variant: str) -> None:
    """The child: one variant, one JSON line on stdout (an error line when it fails)."""
    try:
        with sdpa_backend(spec.sdpa):
            r = measure(spec, variant)
    except Exception as e:  # OOM, compile failure, missing feature: the row says so
        r = row(spec, variant, error=error_text(e))
    print(json.dumps(r), flush=True)


def error_text(e: Exception) -> str:
    """A row's error: "out of memory", else the exception's type and first line."""
    if "out of memory" in str(e).lower():
        return "out of memory"
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


RUNNING: list[subprocess.Popen] = []  # the child now running, killed with us on SIGTERM


def on_term(signum: int, frame: Any) -> None:
    for p in RUNNING:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def in_child(spec: Spec, variant: str, timeout: float) -> dict:
    """`measure --one VARIANT` in its own process group, killed with its workers after `timeout` seconds;
    what it wrote besides its row goes to our stderr."""
    args = [sys.executable, os.path.abspath(__file__), "measure", "--one", variant, "--spec", json.dumps(asdict(spec))]
    env = {**os.environ, **runner.cold_env()}  # each variant compiles cold and plans as a first run
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=env)
    RUNNING[:] = [p]
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return row(spec, variant, error=f"timed out after {timeout:g} s")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    sys.stderr.write("".join(line + "\n" for line in out.splitlines() if not line.startswith("{")) + err[-20000:])
    if lines:
        return json.loads(lines[-1])
    tail = (err.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return row(spec, variant, error=f"exit status {p.returncode}: {tail[:300]}")


def measure_all(spec: Spec, variants: list[str], timeout: float) -> None:
    """Each variant in its own process, one JSON line each; inductor@V runs at V's measured peak."""
    signal.signal(signal.SIGTERM, on_term)
    peaks = earlier_peaks(spec)
    for variant in variants:
        if variant.startswith("inductor@"):
            at = variant.split("@", 1)[1]
            if at not in peaks:
                print(json.dumps(row(spec, variant, error=f"{at} has no measured peak in this call")), flush=True)
                continue
            r = in_child(spec, f"inductor-peak:{peaks[at]}", timeout)
            r["variant"] = variant
        else:
            r = in_child(spec, variant, timeout)
        if r.get("peak_bytes"):
            peaks[variant] = r["peak_bytes"]
        print(json.dumps(r), flush=True)
        keep_partial(r)


def earlier_peaks(spec: Spec) -> dict[str, int]:
    """Peaks an earlier call measured ($BENCH_PEAKS), for inductor@V when V ran there (runner.earlier_peaks)."""
    return runner.earlier_peaks(spec.model, spec.batch, spec.autocast, spec.device.startswith("cuda"))


def keep_partial(r: dict) -> None:
    """Appends the row, untagged, to $BENCH_PARTIAL as it comes (bench/runner.py sets it in $OUT):
    a call cut off before the runner tags and writes its rows still returns them."""
    path = os.environ.get("BENCH_PARTIAL")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(r) + "\n")


def capture_step(spec: Spec, out: str) -> None:
    """Writes the model's training step for mutwo (out and its .safetensors); prints one JSON line."""
    from mutwo.capture import capture
    made = make(spec.model, spec.batch, spec.device, spec.small)
    t0 = time.perf_counter()
    with sdpa_backend(spec.sdpa):
        doc = capture(made.model, made.inputs, made.loss_fn, out, name=spec.model)
    seconds = time.perf_counter() - t0
    data = os.path.join(os.path.dirname(os.path.abspath(out)), doc["data"])
    print(json.dumps(row(spec, "capture", system="mutwo", path=out, nodes=len(doc["nodes"]),
                         capture_s=round(seconds, 2), step_bytes=os.path.getsize(out),
                         data_bytes=os.path.getsize(data))), flush=True)


# ---------------------------------------------------------------------------------------------
# largest: the largest batch under a cap, each trial in its own process.

TRIAL = """
import sys, torch
sys.path.insert(0, {here!r})
torch.empty(1, device="cuda")
free, total = torch.cuda.mem_get_info()
outside = (total - free) - torch.cuda.memory_reserved()
if {cap} > 0:  # else (--cap free) what the card has free is the limit: a card another process shares
    torch.cuda.set_per_process_memory_fraction(({cap} - outside) / total)
import peers
try:
    r = peers.measure(peers.Spec({model!r}, {batch}, steps=10), {variant!r})
    print("FITS", r["peak_bytes"], torch.cuda.max_memory_reserved() + outside)
except torch.cuda.OutOfMemoryError:
    print("OOM")
"""


def fits(model: str, batch: int, variant: str, cap: int, timeout: float) -> bool:
    """Whether `variant` trains 10 steps at `batch` under the cap (the CUDA context counted), expandable
    segments on as in mutwo."""
    env = dict(os.environ)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    code = TRIAL.format(here=HERE, cap=cap, model=model, batch=batch, variant=variant)
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


# ---------------------------------------------------------------------------------------------
# dist: data-parallel peers and mutwo's backend under torchrun.

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


def main() -> None:
    ap = argparse.ArgumentParser(description="PyTorch's peers of mutwo (bench/run.py runs them)")
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("measure", "capture"):
        p = sub.add_parser(name)
        p.add_argument("--model", help="a zoo name (resnet-152, bert-base, ...) or vit_b_16, llama, bert, gpt2, t5")
        p.add_argument("--batch", type=int)
        p.add_argument("--device", default="cuda")
        p.add_argument("--steps", type=int, default=10, help="measured steps, after 2 warm-up steps")
        p.add_argument("--sdpa", default="auto", help="attention backend: auto, or math, efficient_attention, ...")
        p.add_argument("--autocast", choices=["bf16", "f16"], help="run the forward under torch.autocast")
        p.add_argument("--small", action="store_true", help="tiny captured models, for CPU tests")
        p.add_argument("--spec", help=argparse.SUPPRESS)  # the child's Spec, as JSON
    m = sub.choices["measure"]
    m.add_argument("--variants", default="eager,ckpt")
    m.add_argument("--timeout", type=float, default=300, help="seconds per variant")
    m.add_argument("--trace", action="store_true", help="also print one step's GPU time by op")
    m.add_argument("--one", help=argparse.SUPPRESS)  # the child: measure this variant here
    sub.choices["capture"].add_argument("--out", required=True, metavar="STEP.json")
    p = sub.add_parser("largest")
    p.add_argument("--cap", default="8GiB", help="what the process may hold (8GiB), or free: what the card has free")
    p.add_argument("--models", default="resnet-152,bert-base")
    p.add_argument("--variants", default="eager,ckpt")
    p.add_argument("--limit", type=int, default=1024)
    p.add_argument("--timeout", type=float, default=60, help="seconds per trial")
    p.add_argument("--hints", default="", help="where to start, per variant: eager=40,ckpt=110")
    p = sub.add_parser("dist")
    p.add_argument("--model", default="bert-large")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--variant", default="ddp_ckpt", help=DIST_VARIANTS)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--device", default="cuda", help="cuda (NCCL) or cpu (Gloo)")
    p.add_argument("--autocast", choices=["bf16", "f16"], help="run the forward under torch.autocast")
    p.add_argument("--small", action="store_true", help="tiny captured models, for CPU tests")
    a = ap.parse_args()
    if a.command == "largest":
        return largest_all(a)
    if a.command == "dist":
        return dist_step(a)
    if a.spec:
        spec = Spec(**json.loads(a.spec))
    elif a.model and a.batch:
        spec = Spec(a.model, a.batch, a.device, a.steps, a.sdpa, a.autocast, a.small, getattr(a, "trace", False))
    else:
        ap.error(f"{a.command} needs --model and --batch")
    if a.command == "capture":
        return capture_step(spec, a.out)
    if a.one:
        return measure_here(spec, a.one)
    measure_all(spec, a.variants.split(","), a.timeout)


if __name__ == "__main__":
    main()
