# Memory that is not the whole card: a device-memory cap (capped: a smaller card's answers on a large one)
# and a card another process shares (shared-card: the other process's bytes are not ours to plan).
#
# capped, per cap of --caps and model of --models (batches ignored): max-batch --memory (--memory, else
# the cap) --device-memory CAP, one planner of --planners per run (a run cut off by its timeout loses
# only its own answer), batch+1 refused by its bisection and the batch 5% above tried; each answer's own
# rewritten step then trained 10 steps under the cap with run --graph (it must not run out of memory).
# --peers eager,ckpt: PyTorch's largest batches under the same cap (bench/peers.py largest, started
# from mutwo's none and per-layer answers, or --hints). Timeouts: max-batch (240 s), train (120), peers
# (400). A table ends it.
# shared-card: a second process holds all but --keep-gib (12) GiB of the card while --sections run:
# 1 run (device_peak_bytes is this process's); 2 max-batch without --memory, each answer trained 10
# steps; 3 a Hugging Face LLaMA captured and optimized with --check; 4 mutwo.torch.wrap on Hugging Face
# T5, 2 steps; 6 PyTorch's largest batches on the shared card (peers largest --cap free, --hints); then,
# the card free again, 5 the CUDA pytest cases. Timeouts: max-batch (200 s), peers (400).
from __future__ import annotations

import os
import time

from configs import Settings, entries
from runner import Context, Done


def capped_one(ctx: Context, s: Settings, cap: str, model: str) -> None:
    memory, work = s.memory or cap, ctx.workdir(f"capped_{model}_{cap}")
    answers: dict[str, int] = {}
    for p in s.planners:
        t0 = time.monotonic()
        j = ctx.mutwo_run("max-batch", "--model", model, "--device", ctx.device, "--memory", memory, "--device-memory",
                          cap, "--planners", p, "--limit", str(s.limit), "--out", work, "--json",
                          timeout=s.timeout("max-batch", 240)).json()
        a = next((r for r in (j or {}).get("results", []) if r.get("planner") == p), None)
        if a is None:
            ctx.say(f"max-batch {model} {p}: no answer after {time.monotonic() - t0:.0f}s")
            continue
        answers[p] = batch = a["max_batch"]
        r = ctx.mutwo_run("run", "--graph", os.path.join(work, f"{p}.ir"), "--device", ctx.device, "--device-memory",
                          cap, "--steps", "10", "--json", timeout=s.timeout("train", 120))
        t = r.json() or {}
        ctx.emit(dict(model=model, planner=p, batch=batch, refused_batch=batch + 1, above_batch=a.get("above_batch"),
                      above_fits=a.get("above_fits"), seconds=int(time.monotonic() - t0),
                      trained_steps=len(t.get("losses", [])), exit=r.rc, max_batch_peak_bytes=a["peak_bytes"],
                      max_batch_device_peak_bytes=a["device_peak_bytes"], peak_bytes=t.get("peak_bytes"),
                      reserved_peak_bytes=t.get("reserved_peak_bytes"), device_peak_bytes=t.get("device_peak_bytes"),
                      step_ms=t.get("step_ms"), error=r.err.strip()[-200:] or None),
                 "capped: mutwo's max-batch answer trained under the cap", cap=cap, budget=memory)
    if s.peers:
        hints = s.hints or f"eager={answers.get('none', 0)},ckpt={answers.get('per-layer', 0)}"
        done = ctx.peers("largest", "--cap", cap, "--models", model, "--variants", ",".join(s.peers), "--hints", hints,
                         timeout=s.timeout("peers", 400))
        ctx.emit_all(done, "capped: PyTorch's largest batch by bisection", cap=cap)


def capped_table(rows: list[dict]) -> str:
    def mib(r: dict, k: str) -> str:
        return f"{r[k] / 2**20:.0f}" if r.get(k) else "-"
    lines = [f"\n{'cap':<6} {'model':<11} {'planner':<10} {'batch':>6} {'trained':>7} {'exit':>4} {'+5%':>5} "
             f"{'fits':>5} {'alloc MiB':>9} {'reserved':>9} {'device':>9} {'ms':>8}"]
    for r in rows:
        if r.get("system") == "pytorch":
            lines.append(f"{r.get('cap', ''):<6} {r.get('model', ''):<11} {r.get('variant', ''):<10} "
                         f"{r.get('max_batch', '-'):>6} (PyTorch, 10 steps by bisection)")
        elif "planner" in r:
            lines.append(f"{r['cap']:<6} {r['model']:<11} {r['planner']:<10} {r['batch']:>6} {r['trained_steps']:>7} "
                         f"{r['exit']:>4} {r.get('above_batch') or '-':>5} {str(r.get('above_fits')):>5} "
                         f"{mib(r, 'peak_bytes'):>9} {mib(r, 'reserved_peak_bytes'):>9} "
                         f"{mib(r, 'device_peak_bytes'):>9} {r.get('step_ms') or '-':>8}")
    return "\n".join(lines)


def capped(ctx: Context, s: Settings) -> None:
    for cap in s.caps:
        for e in entries(s):
            ctx.say(f"== {e.model} under {cap} ({ctx.elapsed()}s)")
            capped_one(ctx, s, cap, e.model)
    ctx.say(capped_table(ctx.rows()))


HOG = """import sys, time, torch
free, total = torch.cuda.mem_get_info()
hold = torch.empty(free - int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda")
print(f"hog: holds {hold.numel() / 2**30:.1f} GiB of {total / 2**30:.1f}", flush=True)
time.sleep(3600)"""

CAPTURE_LLAMA = """import sys
from mutwo.capture import capture
from workloads import hf_models
model, inputs, loss = hf_models.factory("llama")
capture(model.cuda(), tuple(t.cuda() for t in inputs), loss, sys.argv[1])"""

WRAP_T5 = """import json, torch, mutwo.torch
from workloads import hf_models
model, inputs, loss = hf_models.factory("t5")
w = mutwo.torch.wrap(model.cuda(), "70%")
inputs = tuple(t.cuda() for t in inputs)
losses = []
for _ in range(2):
    l = loss(w, *inputs); l.backward(); losses.append(l.item())
info = mutwo.torch.report(w)
print(json.dumps({"losses": losses, "feasible": info["feasible"], "measured_peak_bytes": info["measured_peak_bytes"],
                  "budget_bytes": info["budget_bytes"]}))"""


def shared_sections(ctx: Context, s: Settings, on: set[str]) -> None:
    """Sections 1, 2, 3, 4 and 6, while the other process holds the card."""
    def row(done: Done, case: str) -> None:
        ctx.emit(done.json() or {"error": done.why()}, f"shared-card: {case}", case=case)
    if "1" in on:
        row(ctx.mutwo_run("run", "--model", "resnet-50", "--batch", "32", "--steps", "3", "--device", "cuda", "--json"),
            "run-resnet-50")
    for model in [e.model for e in entries(s)] if "2" in on else []:
        out = ctx.workdir(f"mb_{model}")
        row(ctx.mutwo_run("max-batch", "--model", model, "--device", "cuda", "--planners", ",".join(s.planners),
                          "--limit", str(s.limit), "--out", out, "--json", "--quiet", *s.mutwo_flags,
                          timeout=s.timeout("max-batch", 200)),
            f"max-batch-{model}")
        arena = [f for f in s.mutwo_flags if f in ("--arena", "--no-arena")]  # each answer trained as max-batch measured it
        for p in ("none", "per-layer", "mutwo"):
            if os.path.exists(os.path.join(out, f"{p}.ir")):
                r = ctx.mutwo_run("run", "--graph", os.path.join(out, f"{p}.ir"), "--steps", "10", "--device", "cuda",
                                  "--json", *arena, timeout=60)
                ctx.emit({"trained": r.json() is not None, "out": (r.out.strip().splitlines() or [r.why()])[-1][:300]},
                         f"shared-card: train-{model}-{p}", case=f"train-{model}-{p}")
    if "3" in on:
        step = ctx.workdir("llama", "step.json")
        ctx.run([ctx.python, "-c", CAPTURE_LLAMA, step], 120)
        row(ctx.mutwo_run("optimize", "--graph", step, "--device", "cuda", "--budget", "70%", "--check", "--json",
                          "--quiet", "--out", ctx.workdir("llama", "o"), timeout=120), "optimize-llama-check")
    if "4" in on:
        row(ctx.run([ctx.python, "-c", WRAP_T5], 120), "wrap-t5")
    for model in [e.model for e in entries(s)] if "6" in on else []:
        done = ctx.peers("largest", "--cap", "free", "--models", model, "--variants", "eager,ckpt", "--hints", s.hints,
                         "--timeout", "90", timeout=s.timeout("peers", 400))
        ctx.emit_all(done, "shared-card: PyTorch's largest batch on the shared card", case=f"peers-{model}")


def shared_card(ctx: Context, s: Settings) -> None:
    on = set(s.sections)
    hog = ctx.spawn([ctx.python, "-c", HOG, str(s.keep_gib)])
    try:
        ctx.sleep(15)
        ctx.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader"], 30)
        shared_sections(ctx, s, on)
    finally:
        ctx.stop(hog)
    if "5" in on:  # the card free again
        done = ctx.run([ctx.python, "-m", "pytest", "tests/python", "-q", "-p", "no:cacheprovider", "-k", "cuda"], 150,
                       {"MUTWO_BIN": ctx.mutwo})
        tail = (done.out.strip().splitlines() or [done.why()])[-1]
        ctx.emit(dict(pytest=tail, exit=done.rc), "shared-card: the CUDA pytest cases", case="pytest-cuda")
