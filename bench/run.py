#!/usr/bin/env python3
# The one benchmark runner. `bench/run.py CONFIG [options]` runs a named config of bench/configs.py
# (a suite of bench/suites/ with its settings; options override them) in one device call: it builds
# mutwo once (scripts/build-cuda.sh; --mutwo PATH or --no-build skip that), runs the suite, and
# writes every row to $OUT/results.jsonl tagged with card, torch, date, commit and what (the one
# tagger, bench/runner.py, with its round), the commands' output to $OUT/log.txt. Where a config's
# figures compare step times (wrap's and graph's), every variant runs once per round, each time in its
# own process (A B A B ...: --rounds, 3), 20 timed steps each (--steps); tables give the median of the
# process medians with min-max and n, and "within noise" where spreads overlap (bench/noise.py).
#   bench/run.py frontier --variants compile,inductor@compile --rounds 1 --steps 10   # fewer: a quick look
#   bench/run.py zoo --models gpt2-small:8 --budgets 50%
#   bench/run.py compile --models llama:8:bf16 --sdpa efficient_attention
#   bench/run.py capped-4gpu                       # --gpus 4: one-card jobs on four cards
#   bench/run.py --list                            # the configs
#   bench/run.py zoo --models mlp:8 --device cpu --mutwo build/src/cli/mutwo --no-graph --peers eager
#   bench/run.py report pareto bench/results/gpu_h200_2026-11-26_run12.jsonl --out plots   # also sweep, frontier
# --dry-run prints the commands a config starts with (those that need an earlier result are left out)
# and the line to run on the device machine, whose copy of the tree has no .git or a stale one: MUTWO_COMMIT=<hash>, which wins over git.
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import threading
import time
from typing import Any, Optional

from configs import CONFIGS, ROUNDS, TIMED_STEPS, Settings, resolve
from runner import ROOT, Context, Done, build, commit_of, probe, run_process
from reports import main as report
from suites import RANKS, ROUNDS_SUITES, SUITES


def listing(values: Optional[list[str]]) -> Optional[list[str]]:
    """Words of the values, split at commas and spaces: `--budgets 90% 80%` or `--budgets 90%,80%`."""
    return None if values is None else [w for v in values for w in v.replace(",", " ").split()]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="mutwo's benchmarks: one runner, named configs (bench/configs.py)",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="configs:\n" + "\n".join(f"  {n:<18} {c.about}" for n, c in CONFIGS.items())
                                 + "\n\nbench/run.py report {pareto,sweep,frontier} RESULTS... --out DIR: plots and tables")
    ap.add_argument("config", nargs="?", help="a name from bench/configs.py (--list)")
    ap.add_argument("--list", action="store_true", help="list the configs and their settings")
    g = ap.add_argument_group("settings (override the config's; bench/configs.py's Settings says what each is)")
    g.add_argument("--models", nargs="+", help="MODEL:BATCHES[:bf16] entries, e.g. gpt2-small:8 resnet-152:8,16")
    for name in ("budgets", "variants", "peers", "compile-peers", "caps", "planners", "sections", "sweep-only"):
        g.add_argument(f"--{name}", nargs="*", help="comma or space separated; none given: empty")
    g.add_argument("--steps", type=int, help="timed steps per process (wrap's and graph's configs: 20)")
    g.add_argument("--rounds", type=int, help="wrap, graph: every variant once per round, each in its own process, "
                   "A B A B ... (their configs: 3; 1 asks for one process each)")
    g.add_argument("--sdpa")
    g.add_argument("--memory")
    g.add_argument("--limit", type=int)
    g.add_argument("--hints")
    g.add_argument("--keep-gib", type=int)
    g.add_argument("--graph", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--check", action=argparse.BooleanOptionalAction, default=None)
    g.add_argument("--fallback-budget")
    g.add_argument("--small", action="store_true", default=None)
    g.add_argument("--mutwo-flags", help="more flags for graph's mutwo optimize and shared-card's max-batch "
                   "(--arena: its answers also trained from the arena), one string")
    g.add_argument("--timeout", action="append", metavar="NAME=SECONDS", help="per step kind: peer=300, optimize=120")
    g.add_argument("--gpus", type=int, help="dist: ranks; the others: one-card jobs spread over this many cards")
    r = ap.add_argument_group("the run")
    r.add_argument("--out", help="results.jsonl and log.txt here (default $OUT, else bench/out/CONFIG)")
    r.add_argument("--work", help="plans, profiles, captured steps (default build-cuda/bench_work/CONFIG)")
    r.add_argument("--device", default="cuda")
    r.add_argument("--mutwo", default=os.environ.get("MUTWO"), help="a built CLI (also $MUTWO): no build")
    r.add_argument("--no-build", action="store_true", help="use build-cuda/src/cli/mutwo as it is")
    r.add_argument("--build-timeout", type=int, default=420)
    r.add_argument("--deadline", type=int, default=560, help="seconds for the whole call (0: none); every "
                   "command's timeout is cut to what is left (the device tool stops a command at 600 s)")
    r.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    r.add_argument("--unit", type=int, help=argparse.SUPPRESS)  # a child of --gpus N: run this one-card job only
    return ap


def overrides(a: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gives."""
    out: dict[str, Any] = {}
    if a.models is not None:
        out["models"] = [w for v in a.models for w in v.split()]
    for name in ("budgets", "variants", "peers", "compile_peers", "caps", "planners", "sections", "sweep_only"):
        if getattr(a, name) is not None:
            out[name] = listing(getattr(a, name))
    for name in ("steps", "rounds", "sdpa", "memory", "limit", "hints", "keep_gib", "graph", "check",
                 "fallback_budget", "small", "gpus"):
        if getattr(a, name) is not None:
            out[name] = getattr(a, name)
    if a.mutwo_flags is not None:
        out["mutwo_flags"] = shlex.split(a.mutwo_flags)
    if a.timeout:
        try:
            out["timeouts"] = {k: int(v) for k, v in (t.split("=", 1) for t in a.timeout)}
        except ValueError:
            raise SystemExit(f"bad --timeout {a.timeout}: write NAME=SECONDS, e.g. --timeout peer=300")
    return out


def units(s: Settings) -> list[Settings]:
    """The one-card jobs of --gpus N: one per cap and --models entry."""
    caps: list[Optional[str]] = list(s.caps) or [None]
    return [dataclasses.replace(s, models=[m], caps=[c] if c else []) for c in caps for m in s.models] or [s]


def fan_out(ctx: Context, s: Settings, argv: list[str]) -> None:
    """Each one-card job in a child runner on a card of its own (CUDA_VISIBLE_DEVICES), the cards' jobs in
    turn; then their rows together in $OUT/results.jsonl (each child tagged its own)."""
    jobs = units(s)
    dirs = [os.path.join(ctx.out, f"unit{k}") for k in range(len(jobs))]
    shares = core_shares(s.gpus)

    def card(g: int) -> None:
        for k in range(g, len(jobs), s.gpus):
            left = 0 if not ctx.deadline_s else max(1, int(ctx.left() - 10))
            child = [ctx.python, os.path.abspath(__file__), *argv, "--gpus", "1", "--unit", str(k), "--out", dirs[k],
                     "--mutwo", ctx.mutwo, "--deadline", str(left)] + (["--dry-run"] if ctx.dry else [])
            ctx.say(f"card {g}: {' '.join(jobs[k].models)} {' '.join(jobs[k].caps)}")
            done = ctx.run(child, left or 10**7, {"CUDA_VISIBLE_DEVICES": str(g), "MUTWO_COMMIT": ctx.tags["commit"],
                                                  "BENCH_CORES": shares[g]})
            if done.rc != 0:
                ctx.say(f"card {g}, job {k}: {done.why()}")
    threads = [threading.Thread(target=card, args=(g,)) for g in range(min(s.gpus, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(ctx.results, "a") as f:
        for d in dirs:
            if os.path.exists(os.path.join(d, "results.jsonl")):
                f.write(open(os.path.join(d, "results.jsonl")).read())


def core_shares(cards: int) -> list[str]:
    """This process's cores in `cards` equal runs, one per card ("0,1,2,..."): a card's step times are
    not disturbed by another card's compiles (the H200 pair's first frontier run, docs/gpu.md), and
    Inductor sizes its compile workers to the share (sched_getaffinity)."""
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // cards)
    return [",".join(map(str, cores[g * per:(g + 1) * per] or cores)) for g in range(cards)]


def keep_to_cores() -> None:
    """A card's child runner (fan_out) keeps itself, and so every process it starts, to its share."""
    if os.environ.get("BENCH_CORES"):
        os.sched_setaffinity(0, {int(c) for c in os.environ["BENCH_CORES"].split(",")})


def dry_call(argv: list[str], timeout: float, env: dict[str, str]) -> Done:
    shown = " ".join(f"{k}={v}" for k, v in env.items() if k not in ("MUTWO_LIBRARY", "PYTHONPATH"))
    print(f"would run: {shown + ' ' if shown else ''}{shlex.join(argv)}")
    return Done(argv, 0, err="(dry run)")


def binary(a: argparse.Namespace, ctx: Context) -> str:
    """The mutwo CLI: --mutwo's, else build-cuda's (built now unless --no-build or --dry-run)."""
    if a.mutwo:
        if not os.path.exists(a.mutwo):
            raise SystemExit(f"--mutwo {a.mutwo}: no such file; build it (scripts/build.sh or scripts/build-cuda.sh)")
        return os.path.abspath(a.mutwo)
    built = os.path.join(ROOT, "build-cuda", "src", "cli", "mutwo")
    if a.dry_run:
        return built
    if a.device == "cpu":
        raise SystemExit("on the CPU pass --mutwo PATH (a CPU build: build/src/cli/mutwo); only CUDA builds here")
    if a.no_build:
        if not os.path.exists(built):
            raise SystemExit(f"--no-build but no {built}: drop --no-build, or pass --mutwo PATH")
        return built
    return build(ctx, a.build_timeout)


def context(a: argparse.Namespace, name: str) -> Context:
    out = a.out or os.environ.get("OUT") or os.path.join(ROOT, "bench", "out", name)
    work = a.work or os.path.join(ROOT, "build-cuda", "bench_work", name)
    ctx = Context(out=out, work=work, device=a.device, deadline_s=a.deadline,
                  call=dry_call if a.dry_run else run_process, dry=a.dry_run)
    ctx.tags = dict(commit=commit_of(), date=time.strftime("%Y-%m-%d"))
    dry = dict(card="(dry run)", torch="(dry run)", transformers="")
    ctx.tags.update(dry if a.dry_run else probe(ctx.python, a.device))
    ctx.mutwo = binary(a, ctx)
    library = os.path.join(os.path.dirname(os.path.dirname(ctx.mutwo)), "torchext", "libmutwo_torch.so")
    if os.path.exists(library):
        ctx.env["MUTWO_LIBRARY"] = library
    return ctx


def main(argv: Optional[list[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:  # plots and tables from rows already written (bench/reports/)
        return report(argv[1:])
    a = parser().parse_args(argv)
    if a.list or not a.config:
        for n, c in CONFIGS.items():
            print(f"{n:<18} suite {c.suite:<12} {c.about}\n{'':<31}{c.settings}")
        return
    suite, s = resolve(a.config, overrides(a))
    if s.rounds < 1 or (s.steps is not None and s.steps < 1):
        raise SystemExit(f"--rounds {s.rounds} --steps {s.steps}: give at least 1 of each")
    if a.unit is not None:
        s = units(s)[a.unit]
        keep_to_cores()
    ctx = context(a, a.config)
    ctx.say(f"card: {ctx.tags['card']}; torch {ctx.tags['torch']}; transformers {ctx.tags.get('transformers')}; "
            f"commit {ctx.tags['commit']}; config {a.config} (suite {suite}); mutwo {ctx.mutwo}")
    ctx.say(f"settings: {dataclasses.asdict(s)}")
    steps = s.steps or TIMED_STEPS
    if suite in ROUNDS_SUITES and (s.rounds < ROUNDS or steps < TIMED_STEPS):
        ctx.say(f"note: {s.rounds} round(s) of {steps} timed steps, under the {ROUNDS} rounds of {TIMED_STEPS} "
                "that step times compared across processes need (issue 47): read their ratios as rough")
    if s.gpus > 1 and suite not in RANKS and a.unit is None:
        fan_out(ctx, s, argv)
    else:
        SUITES[suite](ctx, s)
    ctx.say(f"done in {ctx.elapsed()}s; rows in {ctx.results}")
    if a.dry_run:
        line = shlex.join(["python3", "bench/run.py", *[x for x in argv if x != "--dry-run"]])
        print(f"on the device machine (its .git, if any, is stale): MUTWO_COMMIT={ctx.tags['commit']} {line}")


if __name__ == "__main__":
    main()
