# bench/peers.py's measure and capture: one row per variant, each variant trained in its own process (an
# OOM or a compile failure loses only its own row): peak = torch.cuda.max_memory_allocated over the
# measured steps, step_ms = their median (wall clock, synchronized), after the warm-up steps (steps.py);
# vmap:N and many:N[:B], N copies as one fused array (measure_array), and processes:N[:V], N processes at
# once (at_once), add copies and model_steps_per_s;
# inductor@VARIANT at VARIANT's measured peak, from this call or an earlier one ($BENCH_PEAKS). capture
# writes the model's step for mutwo (python/mutwo/capture.py).
from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

import runner
from models import make
from runner import system_of
from steps import FIRST_STEP_S, error_text, mutwo_torch, sgd_step, timed_steps, trace
from variants import prepare, report_fields, sdpa_backend

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers.py")  # the child's command line


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
    round: int = 1  # bench/run.py --rounds: which of the variant's processes this is


def row(spec: Spec, variant: str, system: str = "", **fields: Any) -> dict:
    sdpa = {} if spec.sdpa == "auto" else {"sdpa": spec.sdpa}
    return dict(system=system or system_of(variant), model=spec.model, batch=spec.batch, variant=variant, **fields,
                **sdpa, round=spec.round)


def measure_array(spec: Spec, variant: str) -> dict:
    """vmap:N or many:N[:BUDGET]: N copies of the model (copy i at SGD's rate times 1 + i/N, momentum 0.9)
    trained as one fused array (python/mutwo/many.py) on one shared batch; vmap compiled by plain Inductor,
    many under mutwo's backend at BUDGET (none: plain compile's plan). model_steps_per_s: N per step."""
    kind, n, budget = (variant.split(":", 2) + [None])[:3]
    copies = int(n)
    made = make(spec.model, spec.batch, spec.device, spec.small)
    models = [made.model] + [copy.deepcopy(made.model) for _ in range(copies - 1)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=made.lr * (1 + i / copies), momentum=0.9)
                  for i, m in enumerate(models)]
    mt = mutwo_torch()
    from mutwo.many import ModelArray
    # vmap: the same fused step (one ModelArray) under plain Inductor. Only its loss step is compiled, as
    # many's is: the array's loss history around it is a Dynamo guard that would recompile every step.
    array = ModelArray(models, made.loss_fn, "inductor", "different") if kind == "vmap" \
        else mt.many(models, made.loss_fn, budget=budget)

    def step() -> torch.Tensor:
        losses = array(*made.inputs)
        losses.sum().backward()
        for o in optimizers:
            o.step()
            o.zero_grad(set_to_none=True)
        return losses.detach()
    times, peak, losses = timed_steps(step, spec.steps, spec.device)
    ms = statistics.median(times)
    plan = mt.report(array.backend).get("step", {}) if kind == "many" else {}
    return row(spec, variant, system="mutwo" if kind == "many" else "pytorch", copies=copies, peak_bytes=peak,
               step_ms=round(ms, 3), model_steps_per_s=round(1000 * copies / ms, 3), loss=float(losses.mean()),
               steps=spec.steps, first_step_s=round(FIRST_STEP_S[0], 2), budget=budget,
               budget_bytes=plan.get("budget_bytes"), predicted_peak_bytes=plan.get("predicted_peak_bytes"))


def measure_variant(spec: Spec, variant: str) -> dict:
    """Trains a fresh model (SGD, momentum 0.9) in this process: one row."""
    if variant.startswith(("vmap:", "many:")):
        return measure_array(spec, variant)
    made = make(spec.model, spec.batch, spec.device, spec.small)
    loss_fn, reported = prepare(made, variant, spec.device, spec.autocast)
    opt = torch.optim.SGD(made.model.parameters(), lr=made.lr, momentum=0.9)
    step = sgd_step(loss_fn, made.model, made.inputs, opt)
    if spec.trace:
        step(), step()
        trace(step, f"{spec.model} batch {spec.batch} {variant}", spec.device)
    times, peak, loss = timed_steps(step, spec.steps, spec.device)
    return row(spec, variant, peak_bytes=peak, step_ms=round(statistics.median(times), 3),
               loss=float(loss), steps=spec.steps, first_step_s=round(FIRST_STEP_S[0], 2),
               **({"autocast": spec.autocast} if spec.autocast else {}), **report_fields(variant, reported))


def measure_here(spec: Spec, variant: str) -> None:
    """The child: one variant, one JSON line on stdout (an error line when it fails)."""
    try:
        with sdpa_backend(spec.sdpa):
            r = measure_variant(spec, variant)
    except Exception as e:  # OOM, compile failure, missing feature: the row says so, the log its trace
        traceback.print_exc(limit=-8)
        r = row(spec, variant, error=error_text(e))
    print(json.dumps(r), flush=True)


RUNNING: list[subprocess.Popen] = []  # the child now running, killed with us on SIGTERM


def on_term(signum: int, frame: Any) -> None:
    for p in RUNNING:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    sys.exit(128 + signum)


def in_child(spec: Spec, variant: str, timeout: float, env: Optional[dict[str, str]] = None) -> dict:
    """`measure --one VARIANT` in its own process group, killed with its workers after `timeout` seconds;
    what it wrote besides its row goes to our stderr."""
    args = [sys.executable, PEERS, "measure", "--one", variant, "--spec", json.dumps(asdict(spec))]
    env = {**os.environ, **runner.cold_env(), **(env or {})}  # each variant compiles cold and plans as a first run
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=env)
    RUNNING.append(p)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return row(spec, variant, error=f"timed out after {timeout:g} s")
    finally:
        RUNNING.remove(p)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    sys.stderr.write("".join(line + "\n" for line in out.splitlines() if not line.startswith("{")) + err[-20000:])
    if lines:
        r = json.loads(lines[-1])
        return {**r, "inductor_cache": "shared"} if os.environ.get("BENCH_INDUCTOR_CACHE") else r
    tail = (err.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return row(spec, variant, error=f"exit status {p.returncode}: {tail[:300]}")


def at_once(spec: Spec, variant: str, timeout: float) -> dict:
    """processes:N[:V]: N processes at once, each training its own model under variant V (compile when not
    given), their timed steps started together (steps.wait_for_the_others): how PyTorch users share one card
    between N models. One row: the sum of their model-steps per second and of their peaks."""
    _, n, *inner = variant.split(":", 2)
    copies, each = int(n), inner[0] if inner else "compile"
    with tempfile.TemporaryDirectory() as folder, ThreadPoolExecutor(copies) as pool:
        env = {"BENCH_BARRIER": f"{folder}:{copies}"}
        rows = list(pool.map(lambda _: in_child(spec, each, timeout, env), range(copies)))
    failed = [r for r in rows if "error" in r]
    if failed:
        return row(spec, variant, copies=copies, error=f"{len(failed)} of {copies} processes: {failed[0]['error']}")
    peaks = [r.get("peak_bytes") for r in rows]
    return row(spec, variant, system=rows[0]["system"], copies=copies,
               peak_bytes=sum(peaks) if None not in peaks else None, step_ms=max(r["step_ms"] for r in rows),
               model_steps_per_s=round(sum(1000 / r["step_ms"] for r in rows), 3), steps=spec.steps,
               processes=[{"step_ms": r["step_ms"], "peak_bytes": r.get("peak_bytes")} for r in rows])


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
        elif variant.startswith("processes:"):
            r = at_once(spec, variant, timeout)
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
