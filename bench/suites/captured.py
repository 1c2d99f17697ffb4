# User models (bench/models.py) against PyTorch's peers: captured steps (graph), mutwo.torch from the
# user's own loop (wrap; compile is its config with mutwo's Inductor backend), and a quick check of
# wrap against the unplanned capture (wrap-check).
#
# graph, per NAME:BATCH of --models: the peers (--peers, default eager,checkpoint); the step captured
# (bench/peers.py capture) into the work folder, its JSON copied to $OUT; `mutwo optimize --graph
# --check` at 100% (mutwo's captured baseline) and at the checkpoint peer's peak (else at
# --fallback-budget), the peers and both runs again in each of --rounds rounds (the capture once);
# then --compile-peers for every entry, in rounds of their own. --sdpa holds scaled_dot_product_attention
# to one backend in peers and capture alike; --small takes tiny models (CPU tests). Settings: models,
# peers, compile_peers, steps (20), rounds (3), sdpa, small, fallback_budget, mutwo_flags; timeouts peer
# (150 s a variant), capture (240), optimize (120), compile (300 a variant).
# wrap, per NAME:BATCH[:bf16]: bench/peers.py measure with --variants (bf16: the forward under
# torch.autocast), once per round (A B A B ...: --rounds, 3); --small as in graph; timeouts variant
# (150 s). A table ends both: per variant the median of its processes' step medians, their min-max and
# n, and the ratio to eager with its spread, "within noise" where the spreads overlap (noise.py).
from __future__ import annotations

import os
import shutil

from configs import TIMED_STEPS, Settings, configs
from noise import compare, spread
from runner import Context, Done, measure_peers, rounds


def captured_row(variant: str, model: str, batch: int, j: dict, eager_ms: float | None) -> dict:
    """mutwo optimize --graph's JSON as one row: the baseline's or the plan's figures."""
    part = j["baseline"] if variant == "graph baseline" else j["planned"]
    r = dict(system="mutwo", model=model, batch=batch, variant=variant, peak_bytes=part["peak_bytes"],
             step_ms=round(part["step_ms"], 3), budget_bytes=j["budget_bytes"], check=j["check"], fits=j["fits"],
             feasible=j["feasible"], predicted_peak_bytes=part["predicted_peak_bytes"],
             dropped=part.get("dropped", 0), dropped_bytes=part.get("dropped_bytes", 0),
             baseline_peak_bytes=j["baseline"]["peak_bytes"], baseline_step_ms=round(j["baseline"]["step_ms"], 3))
    # what the card gave (issue 36: the reserve against the allocated peak), and the arena's figures under --arena
    r.update({k: v for k, v in part.items() if k in ("reserved_peak_bytes", "device_peak_bytes") or k.startswith("arena")})
    if eager_ms:
        r["extra_vs_eager_pct"] = round(100 * (r["step_ms"] / eager_ms - 1), 1)
    return r


def optimize_graph(ctx: Context, s: Settings, variant: str, model: str, batch: int, budget: str) -> Done:
    """mutwo optimize --graph on the captured step at `budget`, --check; one row (an error row when it fails)."""
    done = ctx.mutwo_run("optimize", "--graph", ctx.workdir(f"{model}.json"), "--device", ctx.device, "--budget",
                         budget, "--steps", str(s.steps or 10), "--check", "--json", "--out",
                         ctx.workdir(f"{model}_{'base' if budget == '100%' else 'opt'}"), *s.mutwo_flags,
                         timeout=s.timeout("optimize", 120))
    j = done.json()
    if j is None or "planned" not in j:
        ctx.emit(dict(system="mutwo", model=model, batch=batch, variant=variant, error=done.why()), "graph")
    else:
        eager = ctx.find("step_ms", system="pytorch", model=model, batch=batch, variant="eager")
        ctx.emit(captured_row(variant, model, batch, j, eager), "graph")
    return done


def capture(ctx: Context, s: Settings, model: str, batch: int) -> bool:
    """The step captured into the work folder (its JSON copied to $OUT); a row either way."""
    step = ctx.workdir(f"{model}.json")
    if os.path.exists(step):
        os.remove(step)
    done = ctx.peers("capture", "--model", model, "--batch", str(batch), "--device", ctx.device, "--sdpa", s.sdpa,
                     "--out", step, *(["--small"] if s.small else []), timeout=s.timeout("capture", 240))
    if done.json() is None or not os.path.exists(step):
        ctx.emit(dict(system="mutwo", model=model, batch=batch, variant="capture", error=f"capture: {done.why()}"),
                 "graph")
        return False
    ctx.emit(done.json(), "graph")
    shutil.copy(step, os.path.join(ctx.out, f"{model}.json"))
    return True


def mutwo_rows(ctx: Context, s: Settings, model: str, batch: int) -> None:
    """mutwo optimize --graph on the captured step at 100% and at the checkpoint peer's peak (this round's)."""
    if optimize_graph(ctx, s, "graph baseline", model, batch, "100%").timed_out:  # the second would hang too
        ctx.emit(dict(system="mutwo", model=model, batch=batch, variant="graph mutwo@checkpoint-peak",
                      error="skipped: mutwo's baseline run timed out"), "graph")
        return
    peak = ctx.find("peak_bytes", system="pytorch", model=model, batch=batch, variant="checkpoint", round=ctx.round)
    if peak:
        optimize_graph(ctx, s, "graph mutwo@checkpoint-peak", model, batch, f"{peak}B")
    elif s.fallback_budget:
        optimize_graph(ctx, s, f"graph mutwo@{s.fallback_budget}", model, batch, s.fallback_budget)
    else:
        ctx.emit(dict(system="mutwo", model=model, batch=batch, variant="graph mutwo@checkpoint-peak",
                      error="no checkpoint peak to use as the budget"), "graph")


def graph(ctx: Context, s: Settings) -> None:
    """Per entry, --rounds rounds of the peers then mutwo's two runs (the step captured once, in the first);
    then the compile peers, in rounds of their own."""
    ctx.env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS for optimize --check
    flags = ["--sdpa", s.sdpa] + (["--small"] if s.small else [])
    steps = s.steps or TIMED_STEPS
    for model, batch, _ in configs(s):
        ctx.say(f"== {model} batch {batch} ({ctx.elapsed()}s)")
        for k in rounds(ctx, s.rounds):
            measure_peers(ctx, "graph: PyTorch peer", model, batch, s.peers, steps, s.timeout("peer", 150), flags)
            if k == 1 and not capture(ctx, s, model, batch):
                break
            mutwo_rows(ctx, s, model, batch)
    for model, batch, _ in configs(s) if s.compile_peers else []:
        for _ in rounds(ctx, s.rounds):
            measure_peers(ctx, "graph: PyTorch compile peer", model, batch, s.compile_peers, steps,
                          s.timeout("compile", 300), flags)
    ctx.say(table([r for r in ctx.rows() if r.get("what", "").startswith("graph")]))


def wrap(ctx: Context, s: Settings) -> None:
    """Per entry, --rounds rounds of every variant, each in its own process."""
    for model, batch, extra in configs(s):
        ctx.say(f"== {model}:{batch}{':' + extra if extra else ''} ({ctx.elapsed()}s)")
        flags = ["--sdpa", s.sdpa] + (["--autocast", extra] if extra else []) + (["--small"] if s.small else [])
        env = {"BENCH_INDUCTOR_CACHE": os.path.join(ctx.work, f"inductor-{model}-{batch}")} if s.warm_inductor else None
        for _ in rounds(ctx, s.rounds):
            measure_peers(ctx, "wrap", model, batch, s.variants, s.steps or TIMED_STEPS, s.timeout("variant", 150),
                          flags, env)
    ctx.say(table(ctx.rows()))


def note(r: dict) -> str:
    if "error" in r:
        return "ERROR " + str(r["error"])[:80]
    if r.get("variant") == "capture":
        return f"{r.get('nodes')} nodes in {r.get('capture_s')} s"
    if "check" in r:
        fits = "fits" if r.get("fits") else "EXCEEDS"
        return f"check {r['check']}, {fits} budget {r['budget_bytes'] / 2**20:.0f} MiB"
    if "budget_bytes" in r:
        if r["budget_bytes"] is not None:
            budget = f"{r['budget_bytes'] / 2**20:.0f} MiB"
        elif "copies" in r:  # an array (measure.py's measure_array): its own budget, or none
            budget = r.get("budget") or "none"
        else:  # lowest, or 100% (plain compile's plan)
            budget = r["variant"].rsplit(":", 1)[-1]
        predicted = r.get("predicted_peak_bytes")  # none for plain compile's plan (100%, an unplanned array)
        return (f"predicted {'-' if predicted is None else f'{predicted / 2**20:.0f}'} MiB, budget {budget}, "
                f"{r.get('dropped', r.get('recomputed'))} dropped, {r.get('recompilations', 0)} recompilations")
    return ""


def entry_of(r: dict) -> tuple:
    return r.get("model"), r.get("batch"), r.get("autocast"), r.get("sdpa")


def grouped(rows: list[dict]) -> list[list[dict]]:
    """The rows of each variant of each entry together (its rounds), the entries in the order they came."""
    entry: dict = {}
    groups: dict = {}
    for r in rows:
        e = entry.setdefault(entry_of(r), len(entry))
        groups.setdefault((e, r.get("system"), r.get("variant")), []).append(r)
    return [g for _, g in sorted(groups.items(), key=lambda kv: kv[0][0])]


def timed(group: list[dict]) -> list[float]:
    """The step medians of a variant's processes that ran."""
    return [r["step_ms"] for r in group if r.get("step_ms") and "error" not in r]


def table(rows: list[dict]) -> str:
    """Per variant of each entry: its highest peak over the rounds, the median of its processes' step medians
    with their min-max and n, and that against eager's with its spread ("within noise" where they overlap)."""
    groups = grouped(rows)
    eager = {entry_of(g[0]): timed(g) for g in groups if g[0].get("variant") == "eager"}
    lines = [f"\n{'model':<9} {'batch':>5} {'system':<8} {'variant':<28} {'peak MiB':>9} {'step ms':>24} "
             f"{'x eager':>32}  notes"]
    for g in groups:
        ok = [r for r in g if r.get("step_ms") and "error" not in r]
        r = (ok or g)[-1]
        peak, ms = max((x.get("peak_bytes") or 0 for x in g), default=0), spread(timed(g))
        vs = compare(timed(g), eager.get(entry_of(r), [])) if r.get("variant") != "eager" else None
        failed = [x for x in g if "error" in x]
        notes = note(r) + (f"; {len(failed)} of {len(g)} rounds failed: {failed[-1]['error'][:60]}"
                           if ok and failed else "")
        lines.append(f"{r.get('model', ''):<9} {r.get('batch', ''):>5} {r.get('system', ''):<8} "
                     f"{r.get('variant', ''):<28} {f'{peak / 2**20:.0f}' if peak else '-':>9} "
                     f"{ms.text() if ms else '-':>24} {vs.text() if vs else '':>32}  {notes}")
    return "\n".join(lines)


WRAP_CHECK = """import json, sys, torch
import models, mutwo.torch
from variants import sdpa_backend
device, batch = sys.argv[1], int(sys.argv[2])
def train(budget, planner="mutwo"):
    made = models.make("llama", batch, device, small=True)
    model = made.model if not budget else mutwo.torch.wrap(made.model, budget, planner=planner)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        loss = made.loss_fn(model, *made.inputs)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()], model
torch.use_deterministic_algorithms(True, warn_only=True)
with sdpa_backend("math"):
    eager, _, _ = train(None)
    unplanned, pu, _ = train("100%", "none")
    planned, pp, m = train("80%")
info = mutwo.torch.report(m)
print(json.dumps(dict(model="llama", batch=batch, small=True, system="mutwo", variant="wrap:80%",
                      bitwise=all(torch.equal(a, b) for a, b in zip(pu, pp)), losses=planned,
                      losses_unplanned=unplanned, losses_eager=eager, budget_bytes=info["budget_bytes"],
                      predicted_peak_bytes=info["predicted_peak_bytes"],
                      measured_peak_bytes=info["measured_peak_bytes"])))
"""


def wrap_check(ctx: Context, s: Settings) -> None:
    """mutwo.torch.wrap at 80% on the small LLaMA decoder against the unplanned capture (parameters bit
    for bit after 3 SGD steps) and eager (losses), attention held to the math backend."""
    for model, batch, _ in configs(s):
        done = ctx.run([ctx.python, "-c", WRAP_CHECK, ctx.device, str(batch)], s.timeout("check", 300))
        ctx.emit_json(done, "wrap-check: wrap at 80% against the unplanned capture", model=model, batch=batch)
