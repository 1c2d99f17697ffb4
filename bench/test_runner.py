# CPU tests of the benchmark runner (bench/run.py): the tagger, configs resolved to settings, the
# command lines suites build (as plain data, with a fake in place of the processes), and one real
# tiny run of the zoo config on mlp through the mutwo CLI ($MUTWO_BIN, else build/src/cli/mutwo);
# peers.py as its runner starts it (PYTHONPATH alone) refusing a variant it does not know; the
# frontier report's table; variants in interleaved rounds and their spreads (noise.py).
#   MUTWO_BIN=build/src/cli/mutwo python3 -m pytest bench/test_runner.py -q -p no:cacheprovider
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Callable, Union

import pytest

import run  # bench/, which pytest puts on sys.path (this file's folder)
from configs import CONFIGS, FULL_COMPILE, Settings, resolve
from runner import ROOT, TAG_KEYS, Context, Done, commit_of, python_path, tag
from suites import SUITES

MUTWO = os.path.abspath(os.environ.get("MUTWO_BIN", os.path.join(ROOT, "build", "src", "cli", "mutwo")))
Answer = Union[str, Callable[[list[str]], str]]  # a command's stdout, or how to make it from its argv
TAGS = dict(card="cpu", torch="2.11.0", date="2026-11-27", commit="abc1234")


class Fake:
    """Stands in for the processes: records every argv; answers those a rule matches with its stdout
    (a rule may also write files, as the command would)."""

    def __init__(self, rules: list[tuple[Callable[[list[str]], bool], Answer]]) -> None:
        self.rules, self.calls = rules, []

    def __call__(self, argv: list[str], timeout: float, env: dict[str, str]) -> Done:
        self.calls.append(argv)
        for match, out in self.rules:
            if match(argv):
                return Done(argv, 0, out if isinstance(out, str) else out(argv))
        return Done(argv, 0, "")

    def find(self, *words: str) -> list[list[str]]:
        return [c for c in self.calls if all(w in c for w in words)]


def context(tmp_path, fake: Fake) -> Context:
    return Context(out=str(tmp_path / "out"), work=str(tmp_path / "work"), device="cuda", mutwo="/m", python="py",
                   tags=dict(TAGS), call=fake, quiet=True)


def has(*words: str) -> Callable[[list[str]], bool]:
    return lambda argv: all(w in argv for w in words)


def after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_tagger_adds_card_torch_date_commit_and_what(tmp_path) -> None:
    r = tag({"peak_bytes": 1, "card": "stale"}, "zoo: a step", TAGS, system="mutwo")
    assert {k: r[k] for k in TAG_KEYS} == {**TAGS, "what": "zoo: a step"}
    assert r["system"] == "mutwo" and r["peak_bytes"] == 1
    ctx = context(tmp_path, Fake([]))
    ctx.emit({"x": 1}, "w")
    row = json.loads(open(ctx.results).read())
    assert set(TAG_KEYS) <= set(row) and row["what"] == "w"


def test_the_commit_outside_git_is_mutwo_commit_or_unknown(tmp_path) -> None:
    assert commit_of(str(tmp_path), {"MUTWO_COMMIT": "1234abc"}) == "1234abc"
    assert commit_of(str(tmp_path), {}) == "unknown"
    assert commit_of(ROOT, {"MUTWO_COMMIT": "feedbee"}) == "feedbee"  # the given hash wins over a stale .git


def test_configs_resolve_over_their_suites_defaults() -> None:
    suite, s = resolve("compile", {"models": ["llama:8:bf16"], "sdpa": "efficient_attention"})
    assert suite == "wrap" and s.variants == FULL_COMPILE.split(",") and s.timeout("variant", 150) == 200
    assert s.models == ["llama:8:bf16"] and s.steps == 20 and s.rounds == 3  # the wrap suite's defaults
    assert all(c.suite in SUITES and c.suite in CONFIGS for c in CONFIGS.values())
    for name in CONFIGS:
        resolve(name, {})


def test_an_unknown_config_lists_the_known_ones() -> None:
    with pytest.raises(SystemExit, match="zoo .*\n.*graph"):
        resolve("zooo", {})


def test_the_command_line_overrides_a_config() -> None:
    a = run.parser().parse_args(["zoo", "--models", "gpt2-small:8", "bert-base:8,32", "--budgets", "50%,40%",
                                 "--peers", "--no-graph", "--timeout", "peer=60"])
    _, s = resolve(a.config, run.overrides(a))
    assert s.models == ["gpt2-small:8", "bert-base:8,32"] and s.budgets == ["50%", "40%"] and s.peers == []
    assert not s.graph and s.timeout("peer", 300) == 60
    assert [u.models for u in run.units(resolve("capped-4gpu", {})[1])] == [["resnet-152"], ["bert-base"]] * 2


def test_zoo_plans_at_per_layers_peak_and_at_the_checkpoint_peak(tmp_path) -> None:
    peers = "\n".join(json.dumps(dict(system="pytorch", model="gpt2-small", batch=8, variant=v, peak_bytes=p))
                      for v, p in (("eager", 9000), ("ckpt", 6000)))

    def profile(argv: list[str]) -> bool:  # the profile's folder, as mutwo would leave it
        if "profile" in argv:
            os.makedirs(after(argv, "--out"), exist_ok=True)
            open(os.path.join(after(argv, "--out"), "profile.json"), "w").write("{}")
        return False
    fake = Fake([(profile, ""), (has("measure"), peers), (has("profile"), '{"peak_bytes": 9}'),
                 (has("plan"), '{"predicted_peak_bytes": 5000}'), (has("optimize"), '{"planned": {}}'),
                 (has("run"), '{"command": "run", "losses": [2.5]}')])
    SUITES["zoo"](context(tmp_path, fake), Settings(models=["gpt2-small:8"], peers=["eager", "ckpt"], budgets=["50%"]))
    measure = fake.find("measure")[0]
    assert measure[1].endswith("bench/peers.py") and after(measure, "--variants") == "eager,ckpt"
    runs = {(after(c, "--planner"), after(c, "--budget")) for c in fake.find("optimize")}
    assert runs == {("per-layer", "5000B"), ("mutwo", "5000B"), ("mutwo", "6000B"), ("mutwo", "50%")}
    assert all("--check" in c and "--cuda-graph" in c for c in fake.find("optimize", "--planner", "per-layer"))
    assert len(fake.find("run", "--graph")) == 4  # each plan again in a fresh process
    rows = [json.loads(line) for line in open(os.path.join(tmp_path, "out", "results.jsonl"))]
    assert {r["variant"] for r in rows} >= {"eager", "ckpt", "baseline", "baseline-cuda-graph", "graph-check",
                                           "per-layer", "mutwo-at-ckpt-peak", "sweep-50", "sweep-50-fresh-process"}


def test_graph_captures_then_optimizes_at_the_checkpoint_peak(tmp_path) -> None:
    def capture(argv: list[str]) -> bool:
        if "capture" in argv:
            open(after(argv, "--out"), "w").write("{}")
            return True
        return False
    peers = json.dumps(dict(system="pytorch", model="llama", batch=8, variant="checkpoint", peak_bytes=4000))
    fake = Fake([(capture, '{"variant": "capture", "nodes": 3}'), (has("measure"), peers)])
    _, s = resolve("graph", {"models": ["llama:8"], "sdpa": "math", "compile_peers": ["compile:0.5"], "rounds": 1})
    SUITES["graph"](context(tmp_path, fake), s)
    assert [after(c, "--budget") for c in fake.find("optimize", "--graph")] == ["100%", "4000B"]
    assert all("--check" in c for c in fake.find("optimize"))
    assert [after(c, "--variants") for c in fake.find("measure")] == ["eager,checkpoint", "compile:0.5"]
    assert all(after(c, "--sdpa") == "math" for c in fake.find("measure") + fake.find("capture"))


def test_capped_trains_each_answer_and_starts_pytorch_from_them(tmp_path) -> None:
    def answer(argv: list[str]) -> str:
        p = after(argv, "--planners")
        return json.dumps({"results": [dict(planner=p, max_batch={"none": 40, "per-layer": 109, "mutwo": 145}[p],
                                            peak_bytes=1, device_peak_bytes=1)]})
    fake = Fake([(has("max-batch"), answer)])
    ctx = context(tmp_path, fake)
    _, s = resolve("capped", {"models": ["resnet-152"], "caps": ["8GiB"], "peers": ["eager", "ckpt"]})
    SUITES["capped"](ctx, s)
    assert [after(c, "--device-memory") for c in fake.find("max-batch")] == ["8GiB"] * 3
    trained = [os.path.basename(after(c, "--graph")) for c in fake.find("--graph")]
    assert trained == ["none.ir", "per-layer.ir", "mutwo.ir"]
    largest = fake.find("largest")[0]
    assert after(largest, "--hints") == "eager=40,ckpt=109" and after(largest, "--cap") == "8GiB"


def test_dist_runs_mutwo_and_the_peers_under_torchrun(tmp_path) -> None:
    fake = Fake([])
    SUITES["dist"](context(tmp_path, fake), resolve("dist-bert", {})[1])
    ranks = [after(c, "--nproc-per-node") for c in fake.calls]
    assert set(ranks) == {"1", "2"} and all(c[1:3] == ["-m", "torch.distributed.run"] for c in fake.calls)
    assert len(fake.find("--shard-optimizer")) == 2  # run and optimize, on two ranks only
    assert {after(c, "--variant") for c in fake.find("dist")} == {"ddp", "ddp_ckpt", "fsdp_ckpt"}


def test_dist_compile_runs_every_peer_first_then_mutwo_at_their_peaks(tmp_path, monkeypatch) -> None:
    def peer(argv: list[str]) -> str:  # rank 0's row; each peer's peak told apart by its variant
        v = after(argv, "--variant")
        return json.dumps(dict(model=after(argv, "--model"), batch=int(after(argv, "--batch")), world_size=2,
                               variant=v, peak_bytes=1000 + len(v), **({"autocast": "bf16"} if "--autocast" in argv
                                                                       else {})))
    earlier = tmp_path / "earlier.jsonl"  # an earlier call's fsdp_ckpt of llama1b, on a card, two ranks
    earlier.write_text(json.dumps(dict(model="llama1b", batch=4, autocast="bf16", card="H200", world_size=2,
                                       variant="fsdp_ckpt", peak_bytes=77)) + "\n")
    monkeypatch.setenv("BENCH_PEAKS", str(earlier))
    fake = Fake([(has("dist"), peer)])
    _, s = resolve("dist-compile", {"variants": ["fsdp_compile:0.5", "fsdp_mutwo@fsdp_compile:0.5", "ddp",
                                                 "fsdp_mutwo@fsdp_ckpt", "fsdp_mutwo:lowest"]})
    SUITES["dist-compile"](context(tmp_path, fake), s)
    runs = [(after(c, "--model"), after(c, "--variant")) for c in fake.calls]
    at = f"fsdp_mutwo-peak:{1000 + len('fsdp_compile:0.5')}"
    assert runs == [("gpt2-medium", "fsdp_compile:0.5"), ("gpt2-medium", "ddp"), ("llama1b", "fsdp_compile:0.5"),
                    ("gpt2-medium", at), ("gpt2-medium", "fsdp_mutwo:lowest"),  # fsdp_ckpt's peak: none
                    ("llama1b", at), ("llama1b", "fsdp_mutwo-peak:77"), ("llama1b", "fsdp_mutwo:lowest")]  # no DDP
    assert all(c[1:3] == ["-m", "torch.distributed.run"] and after(c, "--nproc-per-node") == "2" for c in fake.calls)
    assert all(("--autocast" in c) == (after(c, "--model") == "llama1b") for c in fake.calls)
    rows = [json.loads(line) for line in open(tmp_path / "out" / "results.jsonl")]
    missing = [r for r in rows if r["variant"] == "fsdp_mutwo@fsdp_ckpt" and r["model"] == "gpt2-medium"]
    assert len(missing) == 1 and "fsdp_ckpt has no measured peak" in missing[0]["error"]
    assert {r["variant"] for r in rows} >= {"fsdp_mutwo@fsdp_compile:0.5", "fsdp_mutwo:lowest"}


def test_dist_compile_dry_run_prints_its_command_lines(tmp_path, capsys) -> None:
    run.main(["dist-compile", "--dry-run", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("would run:")]
    # The peers (five FSDP2 per model, five DDP for gpt2-medium) and mutwo's lowest per model; mutwo at a
    # peer's peak needs that peak, so a dry run leaves it out.
    assert len(lines) == 17 and sum("--variant fsdp_mutwo:lowest" in line for line in lines) == 2
    assert not [line for line in lines[:15] if "_mutwo" in line.split("--variant")[1]]  # the peers first
    assert all("torch.distributed.run --standalone --nproc-per-node 2 bench/peers.py dist" in line for line in lines)
    assert sum("--model llama1b --batch 4" in line and "--autocast bf16" in line for line in lines) == 6


def test_shared_card_passes_mutwo_flags_to_max_batch(tmp_path, capsys) -> None:
    """--mutwo-flags=--arena: shared-card's max-batch measures from the arena (issue 36)."""
    run.main(["shared-card", "--dry-run", "--mutwo-flags=--arena", "--out", str(tmp_path / "out"),
              "--work", str(tmp_path / "work")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("would run:")]
    searches = [line for line in lines if " max-batch " in line]
    assert len(searches) == 2 and all(line.endswith("--arena") for line in searches), searches  # its two models


def test_cards_run_on_shares_of_the_cores(tmp_path, capsys) -> None:
    """--gpus N: each card's runner on its own share of the cores, the shares apart and all of them used."""
    cores = sorted(os.sched_getaffinity(0))
    shares = [[int(c) for c in s.split(",")] for s in run.core_shares(2)]
    if len(cores) >= 2:
        assert not set(shares[0]) & set(shares[1]) and set(shares[0]) | set(shares[1]) <= set(cores)
        assert len(shares[0]) == len(shares[1]) == len(cores) // 2
    run.main(["frontier", "--dry-run", "--gpus", "2", "--models", "llama:8:bf16", "bert:32", "--variants", "compile",
              "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("would run:")]
    # The cards' runners start on threads of their own, in either order.
    given = {line.split("CUDA_VISIBLE_DEVICES=")[1].split()[0]: line.split("BENCH_CORES=")[1].split()[0] for line in lines}
    assert given == {str(g): share for g, share in enumerate(run.core_shares(2))}


def test_dist_compile_under_torchrun_on_the_cpu(tmp_path) -> None:
    """Two Gloo ranks, the tiny decoder: FSDP2 with each block compiled, mutwo's backend held to its
    measured per-rank peak, DDP with the whole model compiled; each rank within mutwo's budget."""
    run.main(["dist-compile", "--models", "llama:8", "--variants", "fsdp_compile,fsdp_mutwo@fsdp_compile,ddp_compile",
              "--small", "--device", "cpu", "--mutwo", MUTWO, "--deadline", "0", "--steps", "3",
              "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    by = {r["variant"]: r for r in map(json.loads, open(tmp_path / "out" / "results.jsonl"))}
    assert not [r["error"] for r in by.values() if "error" in r], by
    peer, ours = by["fsdp_compile"], by["fsdp_mutwo@fsdp_compile"]
    assert peer["system"] == "pytorch" and peer["world_size"] == 2 and peer["peak_bytes"] > 0
    assert ours["system"] == "mutwo" and ours["target_peak_bytes"] == peer["peak_bytes"]
    assert {"budget_bytes", "predicted_peak_bytes", "mutwo_step_peak_bytes", "compiles", "graphs", "first_step_s",
            "step_ms", "within_budget", "peak_valid"} <= set(ours)
    assert ours["within_budget"] is True and 0 < ours["mutwo_step_peak_bytes"] <= ours["budget_bytes"]
    # Held to the peer's peak: the budget is that peak less what the process holds where mutwo's step
    # begins, measured (the largest of the ranks'), not estimated.
    assert 0 < ours["window_base_bytes"] < peer["peak_bytes"]
    assert ours["budget_bytes"] == peer["peak_bytes"] - ours["window_base_bytes"]
    assert ours["compiles"] >= 1 and ours["first_step_s"] > 0 and ours["peak_valid"]
    # every candidate priced, with its modelled time beside its peak: the time model checked against steps
    names = [c[0] for c in ours["candidates"][0]]
    assert "compile:1" in names and all(len(c) == 4 and c[2] >= 0 and c[3] >= 0 for c in ours["candidates"][0])
    losses = [by[v]["loss"] for v in ("fsdp_compile", "fsdp_mutwo@fsdp_compile", "ddp_compile")]
    assert max(losses) - min(losses) <= 1e-4 * abs(losses[0]), losses  # the same training, three ways


@pytest.mark.skipif(not os.path.exists(MUTWO), reason=f"no mutwo CLI at {MUTWO} (set MUTWO_BIN)")
def test_an_earlier_calls_peaks_serve_inductor_at(tmp_path, monkeypatch) -> None:
    """BENCH_PEAKS: the ladder's peaks from an earlier call, same model, batch, autocast and card kind."""
    import measure
    rows = [dict(model="llama", batch=8, autocast="bf16", card="H100", variant="compile:0.5", peak_bytes=3),
            dict(model="llama", batch=8, autocast="bf16", card="H100", variant="compile:0.2", error="oom"),
            dict(model="llama", batch=4, autocast="bf16", card="H100", variant="compile", peak_bytes=5),
            dict(model="llama", batch=8, autocast=None, card="H100", variant="compile", peak_bytes=7)]
    path = tmp_path / "earlier.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setenv("BENCH_PEAKS", str(path))
    assert measure.earlier_peaks(measure.Spec("llama", 8, device="cuda", autocast="bf16")) == {"compile:0.5": 3}
    assert measure.earlier_peaks(measure.Spec("llama", 8, device="cpu", autocast="bf16")) == {}
    monkeypatch.delenv("BENCH_PEAKS")
    assert measure.earlier_peaks(measure.Spec("llama", 8)) == {}


def test_a_real_zoo_run_on_the_cpu(tmp_path) -> None:
    run.main(["zoo", "--models", "mlp:8", "--peers", "eager", "--no-graph", "--device", "cpu", "--mutwo", MUTWO,
              "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"), "--deadline", "0"])
    rows = [json.loads(line) for line in open(tmp_path / "out" / "results.jsonl")]
    assert all(set(TAG_KEYS) <= set(r) and r["card"] == "cpu" for r in rows)
    by = {r["variant"]: r for r in rows}
    assert by["eager"]["system"] == "pytorch" and by["eager"]["step_ms"] > 0
    assert by["baseline"]["command"] == "run" and by["mutwo"]["check"] == "passed"
    assert "mutwo-fresh-process" in by and "error" not in by["per-layer"]


def test_peers_trains_the_first_step_decoder_and_refuses_a_variant_it_does_not_know() -> None:
    """peers.py as the runner starts it (its PYTHONPATH, no path set up by the script): first-step's
    12-layer decoder trains eager; an unknown variant is an error row naming the forms."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "peers.py"), "measure", "--model", "decoder12",
                           "--batch", "4", "--device", "cpu", "--steps", "1", "--variants", "eager,plain"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": python_path()})
    rows = {r["variant"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0 and rows["eager"]["step_ms"] > 0, done.stderr[-2000:]
    assert "unknown variant 'plain'" in rows["plain"]["error"] and "compile:X" in rows["plain"]["error"]


def test_peers_trains_copies_as_one_fused_array_and_as_processes_at_once() -> None:
    """vmap:N, many:N and processes:N (bench/configs.py's many): two copies of the MLP as one array, each
    variant in its own process, and as two processes at once, with throughput in model-steps per second."""
    variants = ["vmap:2", "many:2:lowest", "processes:2:eager"]
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "peers.py"), "measure", "--model", "mlp",
                           "--batch", "8", "--device", "cpu", "--steps", "1", "--variants", ",".join(variants)],
                          capture_output=True, text=True, timeout=240, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": python_path()})
    rows = {r["variant"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert done.returncode == 0 and set(rows) == set(variants), done.stderr[-2000:]
    for r in rows.values():
        assert "error" not in r and r["copies"] == 2 and r["model_steps_per_s"] > 0, r
    assert rows["many:2:lowest"]["system"] == "mutwo" and rows["many:2:lowest"]["predicted_peak_bytes"] > 0
    at_once = rows["processes:2:eager"]
    assert len(at_once["processes"]) == 2 and at_once["step_ms"] == max(p["step_ms"] for p in at_once["processes"])


def test_first_step_measures_its_decoder_compiled_three_ways(tmp_path, capsys) -> None:
    run.main(["first-step", "--dry-run", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("would run:")]
    assert len(lines) == 3 and all("bench/peers.py measure --model decoder12 --batch 4" in line for line in lines)
    assert all(f"--variants compile,compile:0.4,inductor:60% --steps 20 --device cuda --timeout 150 --round {k}"
               in line for k, line in enumerate(lines, 1))


def test_the_frontier_table_reads_the_chosen_plans_own_prediction(tmp_path) -> None:
    """The frontier report's table: per X compile's point beside mutwo's, the × ratio, the last compile's prediction
    made before it ran (not the step's, corrected by its own measurement), and both lowest rows."""
    from reports import frontier
    mib = 2**20
    rows = [dict(model="m", variant="compile:0.5", peak_bytes=100 * mib, step_ms=10.0, first_step_s=3.0),
            dict(model="m", variant="inductor@compile:0.5", peak_bytes=90 * mib, step_ms=11.0, compiles=2,
                 chosen="mutwo:3", predicted_peak_bytes=50 * mib, mutwo_step_peak_bytes=50 * mib,
                 attempts=[[dict(chosen="compile:1", predicted=40 * mib, measured=70 * mib),
                            dict(chosen="mutwo:3", predicted=55 * mib, measured=50 * mib)]]),
            dict(model="m", variant="inductor-unchunked:lowest", peak_bytes=80 * mib, step_ms=12.0,
                 predicted_peak_bytes=30 * mib, mutwo_step_peak_bytes=33 * mib)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = "\n".join(frontier.table("m", frontier.load(str(path))[0]["m"]))
    assert "| 0.5 | 100 | 10.0 | 3.0 | 90 | 11.0 | 1.100 | 2 |" in table and "| mutwo:3 | 55 / 50 |" in table
    assert "| lowest, loss whole | | | | 80 | 12.0 |" in table and "| 30 / 33 |" in table


def test_variants_a_cut_off_call_left_say_so(tmp_path) -> None:
    """A call whose time ran out mid-way: the variants it never reached get a row saying so, each under its
    own system (not the runner's last line of output, once read as the variant's own failure)."""
    from runner import measure_peers
    row = json.dumps(dict(model="llama", batch=8, system="pytorch", variant="compile", peak_bytes=1, step_ms=1.0))
    ctx = context(tmp_path, lambda argv, timeout, env: Done(argv, 124, row + "\n", "mutwo: graph 0, compile 2"))
    rows = measure_peers(ctx, "frontier", "llama", 8, ["compile", "compile:0.1", "inductor@compile:0.1"], 10, 60)
    assert [(r["variant"], r["system"], r.get("error")) for r in rows] == [
        ("compile", "pytorch", None), ("compile:0.1", "pytorch", "not run: out of the call's time"),
        ("inductor@compile:0.1", "mutwo", "not run: out of the call's time")]


def test_the_wrap_table_takes_a_lowest_row() -> None:
    """budget="lowest" has no byte budget (budget_bytes null): its row is
    written as such, where the table raised at the end of a GPU call."""
    from suites import captured
    row = {"system": "mutwo", "model": "llama", "batch": 8, "variant": "inductor:lowest", "peak_bytes": 2353769984,
           "step_ms": 32.1, "budget_bytes": None, "predicted_peak_bytes": 1313428480, "recomputed": 874}
    assert "budget lowest" in captured.table([row])
    # 100% (plain compile's plan) and an unplanned array predict no step peak: written as "-".
    plain = dict(row, variant="inductor:100%", predicted_peak_bytes=None)
    array = dict(row, variant="vmap:8", system="pytorch", predicted_peak_bytes=None, copies=8)
    text = captured.table([plain, array])
    assert text.count("predicted - MiB") == 2 and "budget 100%" in text and "budget none" in text, text


def test_spreads_and_ratios_say_within_noise_where_they_overlap() -> None:
    """The median of the process medians with min-max and n; a ratio's range is what the spreads allow, and
    it is within noise exactly where they overlap (issue 47's numbers: compiled 26.6..34.7, plain 25.5..32.6)."""
    from noise import Spread, compare, spread
    assert spread([26.6, 28.8, 34.0, 34.7]) == Spread(31.4, 26.6, 34.7, 4) and spread([]) is None
    assert spread([26.6, 28.8, 34.0, 34.7]).text() == "31.4 (26.6-34.7, n=4)" and spread([5.0]).text() == "5.0"
    r = compare([26.6, 28.8, 34.0, 34.7], [25.5, 29.9, 32.6])
    assert abs(r.value - 31.4 / 29.9) < 1e-12 and r.lo == 26.6 / 32.6 and r.hi == 34.7 / 25.5
    assert r.within_noise and r.text() == "1.050 (0.82-1.36), within noise"
    apart = compare([11.0, 11.5, 12.0], [9.0, 10.0, 10.5])  # 11.0 > 10.5: the spreads do not meet
    assert apart.within_noise is False and apart.text() == "1.150 (1.05-1.33)"
    assert compare([12.0, 13.0], [10.0, 12.0]).within_noise  # touching counts as overlapping
    one = compare([11.0], [10.0])  # one process a side: no spread to judge by
    assert one.within_noise is None and one.text() == "1.100" and compare([1.0], []) is None


def test_wrap_runs_its_variants_in_interleaved_rounds(tmp_path, capsys) -> None:
    """Dry run: per entry, one peers.py measure per round, in round order, each starting every variant in
    its own process in the same order (eager compile eager compile ...), 20 timed steps each by default;
    --rounds 1 --steps 5 asks for less."""
    run.main(["wrap", "--dry-run", "--models", "llama:8:bf16", "gpt2:8", "--variants", "eager,compile",
              "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("would run:")]
    got = [(line.split("--model ")[1].split()[0], line.split("--round ")[1].split()[0]) for line in lines]
    assert got == [("llama", "1"), ("llama", "2"), ("llama", "3"), ("gpt2", "1"), ("gpt2", "2"), ("gpt2", "3")]
    assert all("--variants eager,compile --steps 20 " in line for line in lines)
    run.main(["wrap", "--dry-run", "--models", "gpt2:8", "--variants", "eager", "--rounds", "1", "--steps", "5",
              "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("would run:")]
    assert len(lines) == 1 and "--steps 5 " in lines[0] and "--round 1" in lines[0] and "read their ratios as rough" in out


def test_graph_runs_the_peers_and_mutwo_in_rounds_and_every_row_says_its_round(tmp_path) -> None:
    """graph: the step captured once; then per round the peers, mutwo's baseline and mutwo at that round's
    checkpoint peak; every row carries its round; the table gives medians with spreads."""
    def capture(argv: list[str]) -> bool:
        if "capture" in argv:
            open(after(argv, "--out"), "w").write("{}")
            return True
        return False

    def peers(argv: list[str]) -> str:
        k = int(after(argv, "--round"))
        return "\n".join(json.dumps(dict(system="pytorch", model="llama", batch=8, variant=v, peak_bytes=4000 + k,
                                          step_ms=ms + k, round=k)) for v, ms in (("eager", 10.0), ("checkpoint", 13.0)))
    part = dict(peak_bytes=3000, step_ms=12.0, predicted_peak_bytes=2900)
    optimized = json.dumps(dict(baseline=part, planned=part, budget_bytes=4000, check="passed", fits=True,
                                feasible=True))
    fake = Fake([(capture, '{"variant": "capture", "nodes": 3}'), (has("measure"), peers),
                 (has("optimize"), optimized)])
    _, s = resolve("graph", {"models": ["llama:8"]})
    SUITES["graph"](context(tmp_path, fake), s)
    kinds = [("measure " + after(c, "--round")) if "measure" in c else "capture" if "capture" in c else
             f"optimize {after(c, '--budget')}" for c in fake.calls]
    assert kinds == ["measure 1", "capture", "optimize 100%", "optimize 4001B", "measure 2", "optimize 100%",
                     "optimize 4002B", "measure 3", "optimize 100%", "optimize 4003B"]
    rows = [json.loads(line) for line in open(tmp_path / "out" / "results.jsonl")]
    assert [r["round"] for r in rows if r["variant"] == "graph baseline"] == [1, 2, 3]
    assert all(r["round"] == 1 for r in rows if r["variant"] == "capture")
    from suites import captured
    text = captured.table(rows)
    assert "12.0 (11.0-13.0, n=3)" in text and "15.0 (14.0-16.0, n=3)" in text  # eager's, checkpoint's
    assert "1.000 (0.92-1.09), within noise" in text  # mutwo's 12.0 three times against eager's 11.0..13.0


def test_the_frontier_table_gives_medians_with_spreads_over_rounds(tmp_path) -> None:
    """Rows of several rounds: each step is the median of its rounds with min-max and n, the ratio to
    compile's with its spread; a round that failed does not count; the other columns are the last round's."""
    from reports import frontier
    mib = 2**20
    rows = [dict(model="m", variant="compile:0.5", peak_bytes=100 * mib, step_ms=ms, first_step_s=3.0, round=k)
            for k, ms in ((1, 10.0), (2, 12.0), (3, 11.0))]
    rows += [dict(model="m", variant="inductor@compile:0.5", peak_bytes=90 * mib, step_ms=ms, compiles=2,
                  chosen="mutwo:3", predicted_peak_bytes=50 * mib, mutwo_step_peak_bytes=50 * mib, round=k)
             for k, ms in ((1, 13.0), (2, 14.0), (3, 13.5))]
    rows += [dict(model="m", variant="inductor@compile:0.5", error="not run: out of the call's time", round=4)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = "\n".join(frontier.table("m", frontier.load(str(path))[0]["m"]))
    assert "| 0.5 | 100 | 11.0 (10.0-12.0, n=3) | 3.0 | 90 | 13.5 (13.0-14.0, n=3) | 1.227 (1.08-1.40) | 2 |" in table


def test_shared_card_trains_each_answer_as_the_flags_say(tmp_path) -> None:
    """The lone runs of max-batch's answers follow --mutwo-flags: --arena, --no-arena, or neither (the default)."""
    def answers(argv: list[str]) -> str:
        for p in ("none", "per-layer", "mutwo"):
            os.makedirs(after(argv, "--out"), exist_ok=True)
            open(os.path.join(after(argv, "--out"), f"{p}.ir"), "w").write("")
        return "{}"
    for k, flags in enumerate(([], ["--no-arena"], ["--arena"])):
        fake = Fake([(has("max-batch"), answers)])
        SUITES["shared-card"](context(tmp_path / str(k), fake),
                              Settings(models=["resnet-152"], sections=["2"], planners=["none"], mutwo_flags=flags))
        lone = fake.find("run", "--graph")
        assert len(lone) == 3 and all([w for w in c if w in ("--arena", "--no-arena")] == flags for c in lone), lone
