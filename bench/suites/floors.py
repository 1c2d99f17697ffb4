# The lowest peaks: random nodes replayed (replay: dropout's outputs recomputed too) and swapping beside
# recomputation (swap: below what recomputation alone reaches).
#
# replay: for each zoo entry of --models (a `mutwo --model` name), optimize at 50% with --check, then
# at a 1-byte budget (the greedy's lowest plan is run and measured, exit 3) with recomputation alone
# (--no-swap) and with swapping, 3 steps each; then the captured entries (bench/models.py's names) as
# the graph suite runs them (--sdpa, default math; --steps, default 5; --peers, eager,checkpoint).
# swap, per MODEL:BATCH: the peers (--peers: eager, ckpt, offload, sac-offload, each in its own
# process); mutwo profile (the copy bandwidth measured at start-up); the lowest predicted peaks with
# recomputation only and with swapping (plan --budget 1B); optimize between the two floors with
# --check (with --graph also as a captured CUDA graph) and at 1.01 times the hybrid floor; at the ckpt
# peer's peak with and without swapping; at each offloading peer's peak. Steps: --steps (5).
# Timeouts: peer (150 s a variant), optimize (240), plan (300).
from __future__ import annotations

import dataclasses
import json
import os

from configs import Settings, configs, is_captured
from runner import Context, measure_peers
from suites.captured import graph


def replay(ctx: Context, s: Settings) -> None:
    ctx.env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS for --check
    for model, batch, _ in configs(s):
        if is_captured(model):
            continue
        mb, name = f"{model}:{batch}", f"{model}-{batch}"
        done = ctx.mutwo_run("optimize", "--model", model, "--batch", str(batch), "--budget", "50%", "--device",
                             ctx.device, "--check", "--steps", "3", "--quiet", "--out", ctx.workdir(f"{name}-50"),
                             "--json", timeout=s.timeout("optimize", 150))
        ctx.emit_json(done, f"zoo {mb} at 50%, --check")
        for how in ("--no-swap", ""):  # recomputation alone (as the floors before replay were measured), then swapping
            done = ctx.mutwo_run("optimize", "--model", model, "--batch", str(batch), "--budget", "1B", "--device",
                                 ctx.device, "--steps", "3", "--quiet", *([how] if how else []), "--out",
                                 ctx.workdir(f"{name}-floor"), "--json", timeout=s.timeout("optimize", 150))
            ctx.emit_json(done, f"zoo {mb} {how or 'with swapping'}: the lowest peak the planner reaches, "
                                "exit 3 expected")
    captured = [m for m in s.models if is_captured(m.partition(":")[0])]
    if captured:
        graph(ctx, dataclasses.replace(s, models=captured))


def swap_row(label: str, j: dict) -> dict:
    """mutwo optimize's JSON as swap's row."""
    p, base = j["planned"], j["baseline"]
    return dict(variant=label, budget_bytes=j["budget_bytes"], fits=j["fits"], feasible=j["feasible"],
                check=j["check"], peak_bytes=p["peak_bytes"], predicted_peak_bytes=p["predicted_peak_bytes"],
                device_peak_bytes=p["device_peak_bytes"], step_ms=p["step_ms"],
                predicted_extra_ms=p["predicted_extra_ms"], predicted_swap_ms=p["predicted_swap_ms"],
                dropped=p["dropped"], swapped=p["swapped"], swapped_bytes=p["swapped_bytes"],
                host_peak_bytes=p["host_peak_bytes"], baseline_step_ms=base["step_ms"],
                baseline_peak_bytes=base["peak_bytes"])


def floors(ctx: Context, s: Settings, model: str, batch: int, prof: str) -> dict[str, int]:
    """The lowest peak plan predicts at a 1-byte budget, recomputing only and with swapping: one row each."""
    out = {}
    for mode in ("recompute", "hybrid"):
        j = ctx.mutwo_run("plan", "--profile", os.path.join(prof, "profile.json"), "--budget", "1B",
                          *(["--no-swap"] if mode == "recompute" else []), "--json", "--out",
                          os.path.join(prof, f"floor_{mode}.json"), timeout=s.timeout("plan", 300)).json()
        if j is None:
            continue
        out[mode] = j["predicted_peak_bytes"]
        ctx.emit(dict(variant="floor-" + mode, predicted_peak_bytes=j["predicted_peak_bytes"],
                      predicted_extra_ms=j["predicted_extra_ms"], swapped=j.get("swapped"), dropped=j["dropped"],
                      planning_ms=j["planning_ms"]), "swap: the lowest predicted peak", system="mutwo", model=model,
                 batch=batch)
    return out


def swap_one(ctx: Context, s: Settings, model: str, batch: int) -> None:
    steps = str(s.steps or 5)

    def optimize(label: str, budget: int, *flags: str) -> None:
        done = ctx.mutwo_run("optimize", "--model", model, "--batch", str(batch), "--budget", f"{budget}B", "--device",
                             ctx.device, "--steps", steps, "--out", ctx.workdir(f"{model}_{batch}_{label}"), "--json",
                             "--quiet", *flags, timeout=s.timeout("optimize", 240))
        if done.json() is not None:
            ctx.emit(swap_row(label, done.json()), "swap: mutwo optimize", system="mutwo", model=model, batch=batch)

    for v in s.peers:
        measure_peers(ctx, "swap: PyTorch peer", model, batch, [v], int(steps), s.timeout("peer", 150))
    prof = ctx.workdir(f"{model}_{batch}_profile")
    done = ctx.mutwo_run("profile", "--model", model, "--batch", str(batch), "--device", ctx.device, "--quiet",
                         "--out", prof, timeout=s.timeout("optimize", 240))
    if done.rc != 0 or not os.path.exists(os.path.join(prof, "profile.json")):
        ctx.say(f"profile failed: {done.why()}")
        return
    with open(os.path.join(prof, "profile.json")) as f:
        p = json.load(f)
    ctx.emit(dict(variant="bandwidth", h2d_gbps=p["h2d_gbps"], d2h_gbps=p["d2h_gbps"],
                  unplanned_peak_bytes=p["peak_bytes"]), "swap: copy bandwidth", system="mutwo", model=model,
             batch=batch)
    low = floors(ctx, s, model, batch, prof)
    r, h = low.get("recompute"), low.get("hybrid")
    if r and h and h < r:
        optimize("below-floor", (h + r) // 2, "--check")
        if s.graph:
            optimize("below-floor-cuda-graph", (h + r) // 2, "--cuda-graph")
        optimize("hybrid-floor", h * 101 // 100, "--check")
    ckpt = ctx.find("peak_bytes", system="pytorch", variant="ckpt", model=model, batch=batch)
    if ckpt:
        optimize("at-ckpt-recompute", ckpt, "--no-swap")
        optimize("at-ckpt-hybrid", ckpt)
    for v in ("offload", "sac-offload"):
        peak = ctx.find("peak_bytes", system="pytorch", variant=v, model=model, batch=batch)
        if peak:
            optimize(f"at-{v}", peak)


def swap(ctx: Context, s: Settings) -> None:
    for model, batch, _ in configs(s):
        ctx.say(f"== {model} batch {batch} ({ctx.elapsed()}s)")
        swap_one(ctx, s, model, batch)
