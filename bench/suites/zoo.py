# The zoo beside its PyTorch peers (bench/run.py zoo), and where its step's time goes (ops).
#
# zoo, per MODEL:BATCH of --models: the peers (--peers, default eager,ckpt; 8 measured steps);
# mutwo's baseline node by node and, with --graph (default), as a replayed CUDA graph, whose losses
# over 5 deterministic steps are compared with node-by-node ones; the profile (copied to
# $OUT/profiles); per-layer's plan and the greedy at per-layer's predicted peak, and the greedy at
# the ckpt peer's peak (target T2) where it differs by over 1%, as CUDA graphs with --graph, with
# --check (default), each rewritten step again alone in a fresh process; --budgets B...: the greedy
# at each budget (for the entries of --sweep-only, if given); --compile-peers last (slow to compile).
# Then --memory M: max-batch for each model (T7). Settings: models, peers, compile_peers, graph,
# check, budgets, sweep_only, memory, steps (mutwo run's, default 10), timeouts peer (300 s a variant).
# ops, per MODEL:BATCHES: mutwo profile at the largest batch and its nodes.csv summed by op, mutwo run
# at each batch, and eager with torch.profiler's table (bench/peers.py --trace), all in $OUT/log.txt.
from __future__ import annotations

import collections
import csv
import os
import shutil

from configs import Settings, configs, entries
from runner import Context, measure_peers

WHAT = "zoo"


def peer_rows(ctx: Context, model: str, batch: int, variants: list[str], s: Settings) -> None:
    measure_peers(ctx, f"{WHAT}: PyTorch peer", model, batch, variants, 8, s.timeout("peer", 300))


def optimize(ctx: Context, args: list[str], variant: str, timeout: float = 600) -> None:
    """mutwo optimize ARGS, then its rewritten step alone in a fresh process; exit 3 (no plan fits,
    the lowest ran) keeps its row."""
    out = args[args.index("--out") + 1]
    done = ctx.mutwo_run("optimize", *args, timeout=timeout)
    if done.json() is None:
        ctx.say(f"{variant}: {done.why()}")
        return
    ctx.emit(done.json(), WHAT, system="mutwo", variant=variant)
    steps = args[args.index("--steps") + 1]
    fresh = ctx.mutwo_run("run", "--graph", os.path.join(out, "rewritten.ir"), "--steps", steps, "--device",
                          ctx.device, "--json")
    if fresh.json() is not None:
        ctx.emit(fresh.json(), WHAT, system="mutwo", variant=f"{variant}-fresh-process")


def baselines(ctx: Context, model: str, batch: int, s: Settings) -> None:
    """mutwo's unplanned step node by node and as a CUDA graph, and 5 deterministic steps of each compared."""
    base = ["run", "--model", model, "--batch", str(batch)]
    steps = str(s.steps or 10)
    for variant, flags in [("baseline", [])] + ([("baseline-cuda-graph", ["--cuda-graph"])] if s.graph else []):
        done = ctx.mutwo_run(*base, "--steps", steps, "--device", ctx.device, *flags, "--json")
        if done.json() is not None:
            ctx.emit(done.json(), WHAT, system="mutwo", variant=variant)
    if not s.graph:
        return
    a, b = (ctx.mutwo_run(*base, "--steps", "5", "--device", ctx.device, "--deterministic", *flags, "--json").json()
            for flags in ([], ["--cuda-graph"]))
    if a and b:
        ctx.emit(dict(model=model, batch=batch, system="mutwo", variant="graph-check",
                      losses_equal=a["losses"] == b["losses"], losses_node=a["losses"], losses_graph=b["losses"]), WHAT)


def plans(ctx: Context, model: str, batch: int, s: Settings) -> None:
    """The profile, per-layer's plan, then per-layer and the greedy at its predicted peak and the greedy
    at the ckpt peer's peak, each optimized and rerun alone."""
    prof = ctx.workdir(f"prof_{model}_{batch}")
    done = ctx.mutwo_run("profile", "--model", model, "--batch", str(batch), "--device", ctx.device, "--out", prof,
                         "--json", "--quiet")
    if done.json() is None:
        ctx.say(f"profile {model}:{batch}: {done.why()}")
        return
    ctx.emit(done.json(), WHAT, system="mutwo", variant="profile")
    os.makedirs(os.path.join(ctx.out, "profiles"), exist_ok=True)
    shutil.copy(os.path.join(prof, "profile.json"), os.path.join(ctx.out, "profiles", f"{model}_{batch}.json"))
    pl = ctx.mutwo_run("plan", "--profile", os.path.join(prof, "profile.json"), "--planner", "per-layer",
                       "--budget", "100%", "--out", os.path.join(prof, "plan_pl.json"), "--json").json()
    if pl is None:
        return
    peak = pl["predicted_peak_bytes"]
    runs = [("per-layer", peak), ("mutwo", peak)]
    ckpt = ctx.find("peak_bytes", system="pytorch", variant="ckpt", model=model, batch=batch)
    if ckpt and abs(ckpt - peak) > 0.01 * peak:
        runs.append(("mutwo-at-ckpt-peak", ckpt))
    flags = (["--cuda-graph"] if s.graph else []) + (["--check"] if s.check else [])
    for variant, budget in runs:
        optimize(ctx, ["--model", model, "--batch", str(batch), "--device", ctx.device, "--planner",
                       variant.split("-at-")[0], "--budget", f"{budget}B", "--steps", "5", *flags, "--out",
                       ctx.workdir(f"opt_{variant}_{model}_{batch}"), "--json", "--quiet"], variant)


def budget_sweep(ctx: Context, model: str, batch: int, s: Settings) -> None:
    """The greedy at each of --budgets, 3 steps, and each rewritten step alone."""
    if s.sweep_only and f"{model}:{batch}" not in s.sweep_only:
        return
    for budget in s.budgets:
        name = budget.rstrip("%")
        optimize(ctx, ["--model", model, "--batch", str(batch), "--device", ctx.device, "--planner", "mutwo",
                       "--budget", budget, "--steps", "3", *(["--cuda-graph"] if s.graph else []), "--out",
                       ctx.workdir(f"sweep_{model}_{batch}_{name}"), "--json", "--quiet"], f"sweep-{name}")


def zoo(ctx: Context, s: Settings) -> None:
    ctx.env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS for optimize --check
    for model, batch, _ in configs(s):
        ctx.say(f"== {model} batch {batch} ({ctx.elapsed()}s)")
        peer_rows(ctx, model, batch, s.peers, s)
        baselines(ctx, model, batch, s)
        plans(ctx, model, batch, s)
        budget_sweep(ctx, model, batch, s)
        for v in s.compile_peers:  # last: compiling can take minutes, and a timeout then loses no mutwo row
            peer_rows(ctx, model, batch, [v], s)
    if s.memory:
        for model in dict.fromkeys(e.model for e in entries(s)):
            done = ctx.mutwo_run("max-batch", "--model", model, "--memory", s.memory, "--planners",
                                 ",".join(s.planners or ["none", "per-layer", "mutwo"]), "--device", ctx.device,
                                 "--json", "--quiet", timeout=s.timeout("max-batch", 600))
            ctx.emit_json(done, WHAT, system="mutwo", variant="max-batch")


def ops_table(nodes_csv: str, top: int = 25) -> str:
    """A profile's nodes.csv summed by op and phase: where the step's time goes."""
    by_op: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    with open(nodes_csv) as f:
        for r in csv.DictReader(f):
            key = f"{r['op']} ({r['phase']})"
            by_op[key] += float(r["ms"])
            count[key] += 1
    total = sum(by_op.values()) or 1.0
    lines = [f"# {nodes_csv}: {total:.2f} ms over {sum(count.values())} nodes"]
    lines += [f"{k:<40} {count[k]:>5} nodes {ms:>9.3f} ms {100 * ms / total:5.1f}%" for k, ms in by_op.most_common(top)]
    return "\n".join(lines)


def ops(ctx: Context, s: Settings) -> None:
    for e in entries(s):
        prof = ctx.workdir(f"wtg_{e.model}")
        done = ctx.mutwo_run("profile", "--model", e.model, "--batch", str(max(e.batches)), "--device", ctx.device,
                             "--out", prof, "--json", "--quiet")
        if ctx.emit_json(done, "ops: mutwo profile", system="mutwo", variant="profile") and done.json():
            ctx.say(ops_table(os.path.join(prof, "nodes.csv")))
        for b in e.batches:
            done = ctx.mutwo_run("run", "--model", e.model, "--batch", str(b), "--steps", "10", "--device",
                                 ctx.device, "--json")
            ctx.emit_json(done, "ops: mutwo run", system="mutwo", variant="baseline")
            measure_peers(ctx, "ops: PyTorch eager", e.model, b, ["eager"], 8, s.timeout("peer", 300), ["--trace"])
