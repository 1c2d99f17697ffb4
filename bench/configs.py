# The named configs of bench/run.py: each a benchmark (a suite of bench/suites/) and the settings
# it runs with. `bench/run.py NAME` runs one; options on the command line override its settings
# (`bench/run.py zoo --models gpt2-small:8 --budgets 50%`). Every suite has a config of its own
# name holding its defaults; the others reproduce a figure of README.md or docs/results.md.
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Optional


CAPTURED = ("vit_b_16", "llama", "llama1b", "decoder12", "bert", "bert-mini", "gpt2", "t5", "resnet18-32")  # bench/models.py's user models; the rest are the zoo's


def is_captured(name: str) -> bool:
    """True for the user models of captured steps, False for the zoo's (`mutwo --model` names);
    llama1b-Nk is llama1b at a sequence of N*1024 tokens (the long-context runs)."""
    return name in CAPTURED or re.fullmatch(r"llama1b-\d+k", name) is not None


@dataclass
class Settings:
    """What a suite reads; each suite's module says which fields it uses and how."""
    models: list[str] = field(default_factory=list)  # MODEL:BATCHES[:bf16], BATCHES a comma list: gpt2-small:8,16
    budgets: list[str] = field(default_factory=list)  # 60%, 6GiB, 6400000000 (bytes)
    variants: list[str] = field(default_factory=list)  # bench/peers.py's variants, for suites that run a list
    peers: list[str] = field(default_factory=list)  # PyTorch peers run first; empty: none
    compile_peers: list[str] = field(default_factory=list)  # torch.compile peers, run last (slow to compile)
    caps: list[str] = field(default_factory=list)  # device-memory caps (--device-memory), one pass each
    planners: list[str] = field(default_factory=list)
    steps: Optional[int] = None  # mutwo's and the peers' measured steps, where the suite uses one count
    rounds: int = 1  # wrap, graph: every variant once per round, each in its own process (A B A B ...; noise.py)
    sdpa: str = "auto"  # scaled_dot_product_attention's backend in peers and captures
    memory: str = ""  # max-batch's --memory (zoo: run max-batch at it; capped: plan below the cap)
    limit: int = 1024  # max-batch's --limit
    hints: str = ""  # where PyTorch's bisection starts: eager=64,ckpt=190
    sections: list[str] = field(default_factory=list)  # shared-card's sections
    keep_gib: int = 12  # shared-card: what the other process leaves free
    graph: bool = True  # run as a captured CUDA graph where the suite offers it (zoo, swap)
    check: bool = True  # optimize --check where the suite offers it
    sweep_only: list[str] = field(default_factory=list)  # zoo: the MODEL:BATCH entries that get --budgets
    fallback_budget: str = ""  # graph: the budget when no checkpoint peer measured a peak (CPU tests)
    small: bool = False  # tiny captured models (CPU tests)
    mutwo_flags: list[str] = field(default_factory=list)  # added to graph's mutwo optimize, shared-card's max-batch
    timeouts: dict[str, int] = field(default_factory=dict)  # seconds per step kind: peer=300, ...
    gpus: int = 1  # dist: ranks; others: one-card jobs spread over this many cards
    warm_inductor: bool = False  # wrap: one Inductor cache for the call (rounds after the first compile warm)

    def timeout(self, name: str, default: int) -> int:
        return self.timeouts.get(name, default)


@dataclass
class Config:
    suite: str
    about: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class Entry:
    """One --models entry: MODEL:BATCHES[:EXTRA]."""
    model: str
    batches: list[int]
    extra: str = ""  # bf16: the forward under torch.autocast (wrap)

    @staticmethod
    def parse(text: str) -> "Entry":
        model, _, rest = text.partition(":")
        batches, _, extra = rest.partition(":")
        try:
            return Entry(model, [int(b) for b in batches.split(",") if b], extra)
        except ValueError:
            raise SystemExit(f"bad --models entry {text!r}: write MODEL:BATCH, MODEL:B1,B2 or MODEL:BATCH:bf16")


def entries(s: Settings) -> list[Entry]:
    return [Entry.parse(m) for m in s.models]


def configs(s: Settings) -> list[tuple[str, int, str]]:
    """(model, batch, extra) for every batch of every entry, in order."""
    return [(e.model, b, e.extra) for e in entries(s) for b in e.batches]


FULL_COMPILE = "eager,checkpoint,sac,compile,compile:0.5,compile:0.2,inductor@compile,inductor@compile:0.5," \
               "inductor@compile:0.2,inductor@checkpoint"
LADDER = ["1", "0.8", "0.6", "0.5", "0.4", "0.3", "0.2", "0.1", "0.05"]  # activation_memory_budget points
FRONTIER = [f"compile:{x}" if x != "1" else "compile" for x in LADDER]
FRONTIER = FRONTIER + [f"inductor@{v}" for v in FRONTIER] + ["inductor:lowest", "inductor-unchunked:lowest"]
DIST_PEERS = ["", "_ckpt", "_compile", "_compile:0.5", "_compile:0.2"]  # bench/peers.py dist, after fsdp or ddp
DIST_COMPILE = [f"{e}{p}" for e in ("fsdp", "ddp") for p in DIST_PEERS] + \
    [f"{e}_mutwo@{e}{p}" for e in ("fsdp", "ddp") for p in DIST_PEERS] + ["fsdp_mutwo:lowest"]
ROUNDS = 3  # processes per variant where a figure compares step times (issue 47, item 5)
TIMED_STEPS = 20  # timed steps per process there; --steps and --rounds ask for fewer
WRAP_ALL = "eager,checkpoint,sac,compile:0.5,compile:0.2,wrap:80%,wrap:60%,wrap:40%,backend:60%"


def _c(suite: str, about: str, **settings: Any) -> Config:
    return Config(suite, about, settings)


CONFIGS: dict[str, Config] = {
    # The suites with their defaults.
    "zoo": _c("zoo", "the zoo beside its PyTorch peers: baselines, per-layer and the greedy at per-layer's and "
              "checkpointing's peaks, --check, fresh-process reruns; --budgets sweeps, --memory max-batch",
              models=["resnet-152:8,32", "bert-base:8,32"], peers=["eager", "ckpt"]),
    "graph": _c("graph", "captured user models (bench/models.py) beside eager and per-block checkpointing: "
                "optimize --graph --check at 100% and at checkpointing's peak; --compile-peers last",
                models=["vit_b_16:64", "llama:8", "bert:32", "gpt2:8"], peers=["eager", "checkpoint"],
                steps=TIMED_STEPS, rounds=ROUNDS),
    "wrap": _c("wrap", "mutwo.torch's wrap and backend in the user's loop beside eager, checkpoint, sac and "
               "torch.compile's activation_memory_budget", models=["vit_b_16:64", "llama:8:bf16", "bert:32", "gpt2:8"],
               variants="eager,checkpoint,sac,compile:0.5,compile:0.2,wrap:80%,wrap:60%,backend:60%".split(","),
               steps=TIMED_STEPS, rounds=ROUNDS),
    "many": _c("wrap", "many models as one array in the user's loop (issue 51): one model compiled (the "
               "throughput of N run one after another), 8 compiled processes at once, a torch.func vmap "
               "ensemble compiled by Inductor, and mutwo.torch.many unplanned and at its lowest, at N = 2, 8, 16; "
               "rows give model_steps_per_s. The issue's models; six variants of resnet18-32 take 500 s a round "
               "on an H200: one call per model and round (--models, --rounds 1). SDPA math: the decoder's vmap "
               "fails in CUDA's efficient-attention backward ('LSE is not correctly aligned')",
               models=["resnet18-32:128", "bert-mini:32", "decoder12:8"], sdpa="math",
               variants=["compile", "processes:8"] + [f"{v}:{n}" for n in (2, 8, 16) for v in ("vmap", "many")] +
               ["many:8:lowest"],
               steps=TIMED_STEPS, rounds=ROUNDS),
    "wrap-check": _c("wrap-check", "mutwo.torch.wrap on the small LLaMA decoder: 3 steps at 80% against the "
                     "unplanned capture (bitwise) and eager (losses)", models=["llama:8"]),
    "replay": _c("replay", "random nodes replayed from their generator state: zoo entries at 50% with --check and at their lowest "
                 "peaks, captured entries as `graph` with SDPA math", models=["gpt2-small:8", "bert-large:32"],
                 peers=["eager", "checkpoint"], sdpa="math", steps=5),
    "capped": _c("capped", "max-batch under --device-memory caps, each answer trained 10 steps under the cap; "
                 "--peers: PyTorch's largest batches by bisection", models=["resnet-152", "bert-base"],
                 caps=["8GiB"], planners=["none", "per-layer", "mutwo"]),
    "shared-card": _c("shared-card", "a card another process shares (its bytes are not ours to plan): 1 run, 2 max-batch without "
                      "--memory, 3 captured HF LLaMA --check, 4 wrap HF T5, 5 CUDA pytest, 6 PyTorch's bisection",
                      models=["resnet-152", "bert-base"], sections=["1", "2", "3", "4", "5"],
                      planners=["none", "per-layer", "mutwo"], limit=4096),
    "sweep": _c("sweep", "the original study's batch sweeps (docs/results.md): mutwo sweep, the greedy at "
                "per-layer's peak, PyTorch eager and checkpoint at each batch",
                models=["resnet-152:8,16,32,64", "bert-base:8,16,32", "bert-large:8,16,32"], budgets=["60%"],
                peers=["eager", "ckpt"], steps=5),
    "swap": _c("swap", "swapping beside recomputation and PyTorch's offload: floors, below the "
               "recompute floor with --check, at the peers' peaks",
               models=["resnet-152:32", "bert-large:32", "gpt2-small:8", "resnet-152:64"],
               peers=["eager", "ckpt", "offload", "sac-offload"], steps=5, graph=False),
    "dist": _c("dist", "several GPUs (data parallel): mutwo run and optimize under torchrun, all-reduce and "
               "--shard-optimizer, on 1 and --gpus GPUs, beside DDP, DDP+checkpointing and FSDP2+checkpointing",
               models=["bert-large:32", "gpt2-medium:8"], budgets=["60%", "40%"], steps=5, gpus=2),
    "dist-compile": _c("dist-compile", "several GPUs under torchrun: FSDP2 (per block) and DDP, plain, checkpointed, "
                       "compiled at activation_memory_budget 1, 0.5, 0.2, then mutwo's backend (one for every graph) "
                       "held to each of their per-rank peaks and at its lowest; DDP on gpt2-medium only",
                       models=["gpt2-medium:8", "llama1b:4:bf16"], variants=DIST_COMPILE, steps=5, gpus=2),
    "ops": _c("ops", "where the step's time goes, op by op: mutwo profile's nodes.csv summed beside "
              "torch.profiler's table for eager, and step times at each batch",
              models=["resnet-152:8,32", "bert-base:8,32"]),
    # Figures of README.md and docs/results.md.
    "zoo-resnet-sweep": _c("zoo", "README: ResNet-152 at 32, the greedy at 90% down to 45%, compile peers last",
                           models=["resnet-152:32"], budgets=["90%", "80%", "70%", "60%", "50%", "45%"],
                           compile_peers=["compile:0.5", "compile"]),
    "graph-run2": _c("graph", "README's captured-models table (graph_h100_2026-11-26_run2)",
                     models=["gpt2:8", "bert:32", "llama:8"], sdpa="math"),
    "wrap-bert": _c("wrap", "README's wrap table, BERT row", models=["bert:32"], variants=WRAP_ALL.split(",")),
    "wrap-llama-gpt2": _c("wrap", "README's wrap table, LLaMA and GPT-2 rows", models=["llama:8:bf16", "gpt2:8"],
                          variants=WRAP_ALL.split(","), sdpa="efficient_attention"),
    "compile": _c("wrap", "mutwo plans, Inductor compiles, held to each compile point's and "
                  "checkpointing's peak", variants=FULL_COMPILE.split(","),
                  timeouts={"variant": 200}),
    "long-context": _c("wrap", "issue 50: the bench's llama1b in bf16 at batch 1, sequences doubling from 4K, beside "
                       "plain compile, per-block and offloaded checkpointing and compile at activation_memory_budget 0: "
                       "mutwo at its lowest, with offload and without; one sequence per device call (--models); "
                       "not yet: the blocker that leaves 24 or 80 GiB free, mutwo held to each peer's peak",
                       models=[f"llama1b-{k}k:1:bf16" for k in (4, 8, 16, 32, 64)],
                       variants=["compile", "checkpoint", "ckpt-offload", "compile:0", "inductor:lowest",
                                 "inductor-kept:lowest"], steps=4, rounds=1, timeouts={"variant": 400}),
    "ladder": _c("wrap", "issue 46's ladder: compile:X and mutwo's backend held to its measured peak at X in 1, 0.5, "
                 "0.2, 0.05, 3 interleaved rounds; one Inductor cache for the call (round 1 compiles cold, mutwo "
                 "plans fresh in every process) so one model fits one device call",
                 models=["llama:8:bf16"], variants=[v for x in ("compile", "compile:0.5", "compile:0.2", "compile:0.05")
                                                     for v in (x, f"inductor@{x}")],
                 steps=10, rounds=ROUNDS, warm_inductor=True, timeouts={"variant": 200}),
    "frontier": _c("wrap", "torch.compile's activation_memory_budget at every ladder point, then mutwo's backend "
                   "held to each point's measured peak, and at its lowest (one model per device call; "
                   "`bench/run.py report frontier` draws it)", models=["llama:8:bf16"], variants=FRONTIER,
                   timeouts={"variant": 240}),
    "first-step": _c("wrap", "the first training step a user waits for (compiles included, caches cold) and the "
                     "median settled step: the 12-layer small decoder compiled plainly, at activation_memory_budget "
                     "0.4 and by mutwo's backend; docs/budgets.md quotes it (--device cpu --steps 600)",
                     models=["decoder12:4"], variants=["compile", "compile:0.4", "inductor:60%"]),
    "replay-gpt2": _c("replay", "docs/results.md, random nodes replayed: the zoo's floors and checks, then captured GPT-2",
                      models=["gpt2-small:8", "bert-large:32", "gpt2:8"]),
    "replay-t5": _c("replay", "docs/results.md, random nodes replayed: the same, then captured T5",
                    models=["gpt2-small:8", "bert-large:32", "t5:16"]),
    "capped-4gpu": _c("capped", "docs/results.md's capped table: 8 and 16 GiB, mutwo and PyTorch, one card "
                      "per cap and model", caps=["8GiB", "16GiB"], peers=["eager", "ckpt"], gpus=4),
    "dist-bert": _c("dist", "README's two-GPU table", models=["bert-large:32"], budgets=["60%"], steps=3),
}


def resolve(name: str, overrides: dict[str, Any]) -> tuple[str, Settings]:
    """The suite and settings of config `name`: its suite's defaults, then its own settings, then
    `overrides` (the command line's). An unknown name lists the known ones."""
    if name not in CONFIGS:
        known = "\n".join(f"  {n:<18} {c.about}" for n, c in CONFIGS.items())
        raise SystemExit(f"unknown config {name!r}; the known ones (bench/configs.py):\n{known}\n"
                         "run one as `bench/run.py NAME`, or add an entry to CONFIGS")
    config = CONFIGS[name]
    merged = {**CONFIGS[config.suite].settings, **config.settings, **overrides}
    unknown = set(merged) - {f.name for f in dataclasses.fields(Settings)}
    if unknown:
        raise SystemExit(f"config {name!r} sets {sorted(unknown)}, which Settings in bench/configs.py does not have")
    return config.suite, Settings(**merged)
