# Batch sizes and cards: the original study's batch sweeps (sweep) and several GPUs (dist, data
# parallel).
#
# sweep, per MODEL:B1,B2,... of --models: PyTorch eager and per-block checkpointing (--peers) at each
# batch, each in its own process; `mutwo sweep` over the batches (unplanned, per-layer and the greedy at
# --budgets' first, default 60%, of each batch's unplanned peak; its tables and plots in
# $OUT/sweep_MODEL), each point a row; and the greedy again at the per-layer plan's predicted peak
# (optimize). `bench/run.py report sweep` turns the rows into docs/results.md's tables and plots. Steps:
# --steps (5). Timeouts: peer (120 s a variant), sweep (300), optimize (120).
# dist, per MODEL[:BATCH] (batch per rank; bert-large 32, gpt2-medium 8, else 8): mutwo run (all-reduce
# buckets) and, on --gpus ranks, with --shard-optimizer; optimize at each of --budgets with --check, all
# under torchrun on 1 and --gpus GPUs; then PyTorch's DDP, DDP with per-block checkpointing and FSDP2
# with checkpointing on 1 and --gpus GPUs (bench/peers.py dist). Rank 0's rows. Steps: --steps (5).
# Timeouts: run (300 s), optimize (400), peer (300).
# dist-compile, per MODEL:BATCH[:bf16] (batch per rank; bf16: the forward under torch.autocast), on --gpus
# ranks under torchrun, bench/peers.py dist with each of --variants (default configs.DIST_COMPILE): FSDP2
# plain, with per-block checkpointing, with each block compiled at activation_memory_budget 1, 0.5 and 0.2;
# mutwo's backend held to each of those per-rank peaks (ENGINE_mutwo@V: V's peak in this call, else in
# $BENCH_PEAKS) and at its lowest; the same with DDP (whole model compiled), but not for FSDP_ONLY's models.
# Every peer of every model first, then the mutwo runs; each run in its own torchrun with cold caches, its
# row written as it comes. Steps: --steps (5). Timeouts: peer (300 s), mutwo (300).
from __future__ import annotations

import time

from configs import Entry, Settings, entries
from runner import Context, cold_env, earlier_peaks, measure_peers


def sweep(ctx: Context, s: Settings) -> None:
    budget, steps = (s.budgets or ["60%"])[0], s.steps or 5
    for e in entries(s):
        ctx.say(f"== {e.model} at {','.join(map(str, e.batches))} ({ctx.elapsed()}s)")
        for b in e.batches:  # PyTorch first, each configuration in its own process (a clean allocator)
            measure_peers(ctx, "sweep: PyTorch peer", e.model, b, s.peers, steps, s.timeout("peer", 120))
        done = ctx.mutwo_run("sweep", "--model", e.model, "--batches", ",".join(map(str, e.batches)), "--budget",
                             budget, "--device", ctx.device, "--steps", str(steps), "--out",
                             f"{ctx.out}/sweep_{e.model}", "--json", "--quiet", timeout=s.timeout("sweep", 300))
        points = (done.json() or {}).get("points")
        if not points:
            ctx.say(f"sweep {e.model} failed: {done.why()}")
            continue
        for p in points:
            ctx.emit(p, "sweep: mutwo sweep", system="mutwo", model=e.model, budget=budget)
        for b in e.batches:  # the greedy at the per-layer plan's predicted peak: what μ-TWO adds at equal memory
            pl = next((p["predicted_peak_bytes"] for p in points if p["batch"] == b and p["variant"] == "per-layer"),
                      None)
            if pl is None:
                continue
            j = ctx.mutwo_run("optimize", "--model", e.model, "--batch", str(b), "--budget", f"{pl}B", "--device",
                              ctx.device, "--steps", str(steps), "--out", ctx.workdir(f"opt_{e.model}_{b}"), "--json",
                              "--quiet", timeout=s.timeout("optimize", 120)).json()
            if j is not None:
                p = j.get("planned", {})
                ctx.emit(dict(batch=b, variant="mutwo@per-layer", budget_bytes=pl, peak_bytes=p.get("peak_bytes"),
                              predicted_peak_bytes=p.get("predicted_peak_bytes"), step_ms=p.get("step_ms"),
                              feasible=j.get("feasible")), "sweep: the greedy at per-layer's peak", system="mutwo",
                         model=e.model)


DIST_BATCH = {"bert-large": 32, "gpt2-medium": 8}


def torchrun(ctx: Context, n: int, *args: str) -> list[str]:
    """torchrun on n local ranks (its module, as a list: no shell function under a timeout)."""
    return [ctx.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), *args]


def dist_mutwo(ctx: Context, s: Settings, model: str, batch: int, n: int, shard: list[str]) -> None:
    """mutwo run, then optimize at each budget with --check, on n ranks."""
    steps, sharded = str(s.steps or 5), " sharded" if shard else ""
    what = f"dist: mutwo on {n} GPU{'s' if n > 1 else ''}"
    t0 = time.monotonic()
    done = ctx.run(torchrun(ctx, n, "--no-python", ctx.mutwo, "run", "--model", model, "--batch", str(batch),
                            "--device", "cuda", "--steps", steps, *shard, "--json"), s.timeout("run", 300))
    if done.json() is not None:
        ctx.emit(done.json(), what, system="mutwo", variant=f"run{sharded}", nproc=n,
                 seconds=int(time.monotonic() - t0))
    else:
        ctx.say(f"mutwo run {model} x {n}{sharded}: {done.why()}")
    for budget in s.budgets:
        t0 = time.monotonic()
        out = ctx.workdir(f"{model}_{n}_{budget.rstrip('%')}{'_zero' if shard else ''}")
        done = ctx.run(torchrun(ctx, n, "--no-python", ctx.mutwo, "optimize", "--model", model, "--batch", str(batch),
                                "--device", "cuda", "--budget", budget, "--steps", steps, "--check", "--quiet", *shard,
                                "--out", out, "--json"), s.timeout("optimize", 400))
        if done.json() is not None:
            ctx.emit(done.json(), what, system="mutwo", variant=f"optimize {budget}{sharded}", nproc=n,
                     seconds=int(time.monotonic() - t0))
        else:
            ctx.say(f"mutwo optimize {model} x {n} {budget}{sharded}: {done.why()}")


def dist(ctx: Context, s: Settings) -> None:
    counts = sorted({1, s.gpus})
    for e in entries(s):
        batch = e.batches[0] if e.batches else DIST_BATCH.get(e.model, 8)
        for n in counts:
            for shard in ([[]] if n == 1 else [[], ["--shard-optimizer"]]):
                ctx.say(f"== mutwo {e.model} batch {batch} x {n} GPUs {shard or 'all-reduce'} ({ctx.elapsed()}s)")
                dist_mutwo(ctx, s, e.model, batch, n, shard)
        for v in ("ddp", "ddp_ckpt", "fsdp_ckpt"):
            for n in counts:
                done = ctx.run(torchrun(ctx, n, "bench/peers.py", "dist", "--model", e.model, "--batch", str(batch),
                                        "--variant", v, "--steps", str(s.steps or 5)), s.timeout("peer", 300))
                if done.json() is not None:
                    ctx.emit(done.json(), f"dist: PyTorch {v} on {n} GPUs", nproc=n)
                else:
                    ctx.say(f"peer {e.model} {v} x {n}: {done.why()}")


FSDP_ONLY = ("llama1b",)  # dist-compile's models that do not run under DDP (a replica of 1 B parameters per rank)


def dist_compiled(ctx: Context, s: Settings) -> None:
    runs = [(e, b, v) for e in entries(s) for b in e.batches or [DIST_BATCH.get(e.model, 8)] for v in s.variants
            if not v.startswith("ddp") or e.model not in FSDP_ONLY]
    for e, batch, variant in sorted(runs, key=lambda r: "_mutwo" in r[2]):  # stable: the peers first
        dist_variant(ctx, s, e, batch, variant)


def dist_variant(ctx: Context, s: Settings, e: Entry, batch: int, variant: str) -> None:
    """One variant under torchrun on s.gpus ranks, its row (or an error row) written now; ENGINE_mutwo@V
    runs as ENGINE_mutwo-peak:P, P the peak V measured (per rank, the largest of any rank's)."""
    autocast, mutwo = e.extra or None, "_mutwo" in variant
    base = dict(model=e.model, batch=batch, variant=variant, system="mutwo" if mutwo else "pytorch",
                world_size=s.gpus, **({"autocast": autocast} if autocast else {}))
    what = f"dist-compile: {variant} on {s.gpus} GPUs"
    run = variant
    if "@" in variant:
        head, _, at = variant.partition("@")
        match = dict(model=e.model, batch=batch, autocast=autocast, world_size=s.gpus)
        peak = ctx.find("peak_bytes", variant=at, **match) or earlier_peaks(
            e.model, batch, autocast, ctx.device.startswith("cuda"), world_size=s.gpus).get(at)
        if peak is None:
            ctx.say(f"{e.model} {variant}: {at} has no measured peak in this call or in $BENCH_PEAKS")
            ctx.emit(dict(base, error=f"{at} has no measured peak in this call or in $BENCH_PEAKS"), what)
            return
        run = f"{head}-peak:{peak}"
    argv = torchrun(ctx, s.gpus, "bench/peers.py", "dist", "--model", e.model, "--batch", str(batch), "--variant",
                    run, "--steps", str(s.steps or 5), "--device", ctx.device,
                    *(["--autocast", autocast] if autocast else []), *(["--small"] if s.small else []))
    t0 = time.monotonic()
    done = ctx.run(argv, s.timeout("mutwo" if mutwo else "peer", 300), cold_env())
    row = done.json()
    if row is None:
        if not ctx.dry:
            ctx.say(f"{e.model} {variant}: {done.why()}")
        row = dict(base, error=done.why())
    ctx.emit(dict(row, variant=variant), what, nproc=s.gpus, seconds=int(time.monotonic() - t0))
