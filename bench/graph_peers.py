# PyTorch's peers of mutwo on the user models of bench/graph_models.py, on the
# same card: eager, torch.utils.checkpoint around every block, selective
# activation checkpointing (sac: matmuls and attention saved, the rest
# recomputed), torch.compile under an activation memory budget; and mutwo
# from the user's loop: wrap:B (mutwo.torch.wrap at budget B) and backend:B
# (torch.compile with mutwo.torch.backend). --autocast bf16 runs the forward
# under torch.autocast. Each variant runs in its own subprocess
# (an OOM or a compile failure loses only its own row) and appends one JSON
# line to --out. With --capture, writes the model's step for mutwo instead.
#   python3 bench/graph_peers.py --model llama --batch 8 --variants eager,checkpoint,compile:0.5 --out r.jsonl
#   python3 bench/graph_peers.py --model llama --batch 8 --capture steps/llama.json
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
from typing import Any, Callable

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from graph_models import make  # noqa: E402


def card(device: str) -> str:
    return torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"


def row(a: argparse.Namespace, variant: str, system: str = "pytorch", **fields: Any) -> dict:
    sdpa = {} if a.sdpa == "auto" else {"sdpa": a.sdpa}
    return dict(system=system, model=a.model, batch=a.batch, variant=variant, **fields, **sdpa, card=card(a.device),
                torch=torch.__version__, date=time.strftime("%Y-%m-%d"))


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """scaled_dot_product_attention as torch picks it ("auto"), or held to one backend such as "math"
    (plain ATen ops in a captured step instead of fused attention kernels)."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel(getattr(SDPBackend, name.upper()))


def checkpoint_blocks(blocks: list[torch.nn.Module]) -> None:
    """Every block's forward under torch.utils.checkpoint (non-reentrant)."""
    from torch.utils.checkpoint import checkpoint
    for b in blocks:
        b.forward = functools.partial(checkpoint, b.forward, use_reentrant=False)


def compiled(loss_fn: Callable, variant: str) -> Callable:
    """torch.compile(loss_fn); "compile:X" sets the partitioner's activation_memory_budget to X first."""
    if not hasattr(torch, "compile"):
        raise RuntimeError(f"torch.compile is missing in torch {torch.__version__}")
    import torch._dynamo as dynamo
    import torch._functorch.config as fc
    dynamo.reset()
    if ":" in variant:
        if not hasattr(fc, "activation_memory_budget"):
            raise RuntimeError(f"torch._functorch.config.activation_memory_budget is missing in torch {torch.__version__}")
        fc.activation_memory_budget = float(variant.split(":", 1)[1])
    return torch.compile(loss_fn)


def selective_checkpoint_blocks(blocks: list[torch.nn.Module]) -> None:
    """Every block under torch.utils.checkpoint with a selective policy: matmuls and
    attention saved, everything else recomputed (PyTorch's SAC, torch >= 2.4)."""
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
    aten = torch.ops.aten
    save = {aten.mm.default, aten.addmm.default, aten.bmm.default, aten.convolution.default,
            aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
            aten._scaled_dot_product_cudnn_attention.default}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE
    context = functools.partial(create_selective_checkpoint_contexts, policy)
    for b in blocks:
        b.forward = functools.partial(checkpoint, b.forward, use_reentrant=False, context_fn=context)


def mutwo_torch() -> Any:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    import mutwo.torch
    return mutwo.torch


def measure(a: argparse.Namespace, variant: str) -> dict:
    """Trains a fresh model 2 warm-up steps + a.steps measured steps; peak bytes and median step time."""
    model, inputs, loss_fn, blocks = make(a.model, a.batch, a.device, a.small)
    fields: dict[str, Any] = {}
    wrapped = None
    if variant == "checkpoint":
        checkpoint_blocks(blocks)
    elif variant == "sac":
        selective_checkpoint_blocks(blocks)
    elif variant.startswith("compile"):
        loss_fn = compiled(loss_fn, variant)
    elif variant.startswith("wrap:"):
        model = wrapped = mutwo_torch().wrap(model, variant.split(":", 1)[1])
    elif variant.startswith("backend:"):
        import torch._dynamo as dynamo
        dynamo.reset()
        backend = mutwo_torch().backend(variant.split(":", 1)[1], compiler="mutwo")
        loss_fn = torch.compile(loss_fn, backend=backend)
    elif variant.startswith(("inductor:", "inductor-peak:")):
        # mutwo plans, Inductor compiles. inductor:B is the backend's own budget (what the
        # step adds); inductor-peak:P holds the whole process to a peer's measured peak P:
        # the budget is P less what the process holds beside the step (parameters, inputs,
        # the optimizer's momentum, which the first step creates).
        budget = variant.split(":", 1)[1]
        if variant.startswith("inductor-peak:"):
            held = torch.cuda.memory_allocated() if a.device.startswith("cuda") else 0
            momentum = sum(p.numel() * p.element_size() for p in model.parameters())
            budget = str(max(1, int(budget) - held - momentum))
        backend = mutwo_torch().backend(budget)
        loss_fn = torch.compile(loss_fn, backend=backend, dynamic=False)
    elif variant != "eager":
        raise ValueError(f"unknown variant {variant!r}: eager, checkpoint, sac, compile, compile:X, wrap:B, backend:B, "
                         "inductor:B, inductor@VARIANT")
    if a.autocast:
        plain_loss = loss_fn

        def loss_fn(*args: Any) -> torch.Tensor:
            with torch.autocast(a.device.split(":")[0], dtype=getattr(torch, {"bf16": "bfloat16", "f16": "float16"}[a.autocast])):
                return plain_loss(*args)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    cuda = a.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step() -> torch.Tensor:
        loss = loss_fn(model, *inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    step(), step()
    sync()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(1000 * (time.perf_counter() - t0))
    peak = torch.cuda.max_memory_allocated() if cuda else None
    if wrapped is not None:
        info = mutwo_torch().report(wrapped)
        fields.update(predicted_peak_bytes=info["predicted_peak_bytes"], budget_bytes=info["budget_bytes"],
                      dropped=len(info["dropped"]), mutwo_step_peak_bytes=info["measured_peak_bytes"])
    elif variant.startswith("backend:"):
        fields.update(graphs=len(backend.graphs))
    elif variant.startswith("inductor"):
        info = mutwo_torch().report(backend)
        fields.update(graphs=len(info["graphs"]), budget_bytes=info["budget_bytes"],
                      predicted_peak_bytes=info["predicted_peak_bytes"], mutwo_step_peak_bytes=info["measured_peak_bytes"],
                      recompilations=sum(g["recompilations"] for g in info["graphs"]),
                      recomputed=sum(a["decision"] == "recompute" for a in info["activations"]))
    system = "mutwo" if variant.startswith(("wrap:", "backend:", "inductor")) else "pytorch"
    return row(a, variant, system=system, peak_bytes=peak, step_ms=round(statistics.median(times), 3), loss=float(loss),
               steps=a.steps, **({"autocast": a.autocast} if a.autocast else {}), **fields)


def one(a: argparse.Namespace) -> None:
    """The child: one variant, one JSON line on stdout (an error line when it fails)."""
    try:
        with sdpa_backend(a.sdpa):
            r = measure(a, a.one)
    except Exception as e:  # OOM, compile failure, missing feature: the row says so
        oom = "out of memory" in str(e).lower()
        msg = "out of memory" if oom else f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
        r = row(a, a.one, error=msg)
    print(json.dumps(r), flush=True)


def child_args(a: argparse.Namespace, variant: str) -> list[str]:
    args = [sys.executable, os.path.abspath(__file__), "--model", a.model, "--batch", str(a.batch), "--device",
            a.device, "--steps", str(a.steps), "--sdpa", a.sdpa, "--one", variant] + \
        (["--autocast", a.autocast] if a.autocast else [])
    return args + (["--small"] if a.small else [])


RUNNING: list[subprocess.Popen] = []  # the child now running, killed with us on SIGTERM (timeout)


def on_term(signum: int, frame: Any) -> None:
    for p in RUNNING:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def run_variant(a: argparse.Namespace, variant: str) -> dict:
    """The child in its own process group, killed with its workers after a.timeout seconds."""
    p = subprocess.Popen(child_args(a, variant), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    RUNNING[:] = [p]
    try:
        out, err = p.communicate(timeout=a.timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return row(a, variant, error=f"timed out after {a.timeout} s")
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = (err.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return row(a, variant, error=f"exit status {p.returncode}: {tail[:300]}")


def capture_step(a: argparse.Namespace) -> None:
    """Writes the model's training step for mutwo (a.capture and its .safetensors); prints one JSON line."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
    from mutwo.capture import capture
    model, inputs, loss_fn, _ = make(a.model, a.batch, a.device, a.small)
    t0 = time.perf_counter()
    with sdpa_backend(a.sdpa):
        doc = capture(model, inputs, loss_fn, a.capture, name=a.model)
    seconds = time.perf_counter() - t0
    data = os.path.join(os.path.dirname(os.path.abspath(a.capture)), doc["data"])
    print(json.dumps(row(a, "capture", system="mutwo", path=a.capture, nodes=len(doc["nodes"]),
                         capture_s=round(seconds, 2), step_bytes=os.path.getsize(a.capture),
                         data_bytes=os.path.getsize(data))), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="PyTorch peers of mutwo on captured user models")
    ap.add_argument("--model", required=True, help="vit_b_16, llama, bert or gpt2")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=10, help="measured steps, after 2 warm-up steps")
    ap.add_argument("--variants", default="eager,checkpoint",
                    help="eager, checkpoint, sac, compile, compile:X, wrap:B, backend:B (mutwo's executor), inductor:B "
                         "(mutwo plans, Inductor compiles), inductor@VARIANT (that at an earlier variant's peak)")
    ap.add_argument("--out", help="append the JSON lines to this file too")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per variant")
    ap.add_argument("--sdpa", default="auto", help="attention backend: auto, or math, efficient_attention, ...")
    ap.add_argument("--small", action="store_true", help="tiny models, for CPU tests")
    ap.add_argument("--autocast", choices=["bf16", "f16"], help="run the forward under torch.autocast")
    ap.add_argument("--capture", metavar="OUT.json", help="capture the step for mutwo instead of measuring")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # the child: measure this variant here
    a = ap.parse_args()
    if a.one:
        return one(a)
    if a.capture:
        return capture_step(a)
    signal.signal(signal.SIGTERM, on_term)
    peaks: dict[str, int] = {}  # measured so far, for inductor@VARIANT
    for variant in a.variants.split(","):
        if variant.startswith("inductor@"):  # mutwo's backend at that variant's measured peak
            at = variant.split("@", 1)[1]
            if at not in peaks:
                print(json.dumps(row(a, variant, error=f"{at} has no measured peak in this call")), flush=True)
                continue
            r = run_variant(a, f"inductor-peak:{peaks[at]}")
            r["variant"] = variant
        else:
            r = run_variant(a, variant)
        if r.get("peak_bytes"):
            peaks[variant] = r["peak_bytes"]
        line = json.dumps(r)
        print(line, flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
