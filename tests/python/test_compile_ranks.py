# The compiled route under torchrun (docs/python.md, "Under torchrun"): two
# Gloo ranks on the CPU (tests/python/compiled_ranks.py is each rank), a tiny
# LLaMA-style decoder
# - under DDP with the whole model compiled: DDP's optimizer splits the graph
#   at its gradient buckets, one backend plans the graphs together;
# - under FSDP2 (fully_shard per block) with each block compiled;
# each rank's losses equal plain torch.compile's within 1e-5 relative, and
# each rank's measured step peak is within the budget. A rank whose graphs
# differ from rank 0's gets a MutwoError naming it, on every rank, without a
# hang; a step over budget on one rank alone replans every rank. In one
# process: collectives in a compiled graph are never recomputed, whatever the
# budget.
from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import mutwo.torch as mt

HERE = pathlib.Path(__file__).resolve().parent
TOLERANCE = 1e-5  # relative, per step's loss: Gloo's sums and the fusions may reorder additions
TIMEOUT_S = 600  # both ranks, all three runs (about 80 s on two busy cores)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ranks(scenario: str, out: pathlib.Path, **env: str) -> list[dict]:
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
         "--master-port", str(_port()), str(HERE / "compiled_ranks.py"), scenario, str(out)],
        capture_output=True, text=True, timeout=TIMEOUT_S,
        env={**os.environ, "MUTWO_CACHE_DIR": str(out / "cache"), "OMP_NUM_THREADS": "1", **env,
             "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent / "python"), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) > 0 and all(abs(x - y) <= TOLERANCE * max(1.0, abs(y)) for x, y in zip(a, b))


@pytest.mark.parametrize("scenario", ["ddp", "fsdp"])
def test_every_rank_trains_as_plain_compile_within_its_budget(scenario: str, tmp_path) -> None:
    ranks = _ranks(scenario, tmp_path)
    budgets = {r["planned_report"]["step"]["budget_bytes"] for r in ranks}
    assert len(budgets) == 1, budgets  # one budget, every rank
    for r in ranks:
        planned, unplanned = r["planned_report"], r["unplanned_report"]
        step = planned["step"]
        assert step["error"] is None, step
        assert planned["settled"], planned  # the last measured step is of the plan kept
        assert step["measured_peak_bytes"] <= step["budget_bytes"], (r["rank"], step)
        assert step["measured_peak_bytes"] < unplanned["step"]["measured_peak_bytes"], (r["rank"], step)
        assert _close(r["planned"], r["plain"]) and _close(r["unplanned"], r["plain"]), r
        assert any(c != "compile:1" for c in planned["chosen"]), planned  # the budget changed a plan
        assert all(c <= 3 for c in planned["compiles"]), planned
        if scenario == "ddp":  # DDP's optimizer split the graph; forwards in order, backwards reversed
            n = planned["graphs"]
            assert n >= 2 and step["order"] == [f"fwd {g}" for g in range(n)] + [f"bwd {g}" for g in
                                                                                 reversed(range(n))], step
        else:  # the two blocks share one graph
            assert planned["graphs"] == 1 and step["order"] == ["fwd 0", "fwd 0", "bwd 0", "bwd 0"], step
    assert ranks[0]["planned_report"]["chosen"] == ranks[1]["planned_report"]["chosen"]  # the ranks agree


def test_a_rank_whose_graphs_differ_is_named_without_a_hang(tmp_path) -> None:
    ranks = _ranks("differ", tmp_path, MUTWO_RANK_TIMEOUT="60")
    for r in ranks:
        assert "rank 1 compiled other graphs than rank 0" in r.get("error", ""), r


def test_a_step_over_budget_on_one_rank_replans_every_rank(tmp_path) -> None:
    """Only the rank that is over knows it: every measured step is exchanged,
    so both ranks plan again (or both raise), without a hang."""
    ranks = _ranks("overrun", tmp_path, MUTWO_RANK_TIMEOUT="60")
    for r in ranks:
        assert r["replans"] or r["error"], r
    assert ranks[0] == {**ranks[1], "rank": 0}, ranks  # the same decision


def test_collectives_in_a_compiled_graph_are_never_recomputed(tmp_path, monkeypatch) -> None:
    """A forward all-reduce (as tensor parallelism or traceable FSDP2 put in the
    graph): PyTorch marks _c10d_functional ops MUST_SAVE before mutwo's
    chooser runs (force_save_collectives) and its min-cut never unbans them;
    no candidate, down to the floor, recomputes one."""
    from torch.distributed import _functional_collectives as funcol
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "cache"))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch._dynamo.reset()
        torch.manual_seed(0)
        w1, w2 = (torch.randn(64, 64, requires_grad=True) for _ in range(2))

        def step(x: torch.Tensor) -> torch.Tensor:
            h = funcol.all_reduce(torch.relu(x @ w1), "sum", dist.group.WORLD)
            return torch.relu(torch.tanh(h) @ w2).sum()
        backend = mt.backend(budget="lowest")
        compiled = torch.compile(step, backend=backend, dynamic=False)
        for _ in range(3):
            compiled(torch.randn(256, 64)).backward()
        graph = backend.graphs[0]
        collectives = {n.name for n in graph.menu[0].saved[0].graph.nodes
                       if getattr(n.target, "namespace", None) == "_c10d_functional"}
        assert collectives, "no collective in the joint graph"
        assert len(graph.menu) > 1
        for c in graph.menu:
            assert not collectives & set(c.recomputed), (c.name, collectives & set(c.recomputed))
        assert mt.report(backend)["step"]["error"] is None
    finally:
        dist.destroy_process_group()


def test_ranks_on_different_cards_compile_under_one_key() -> None:
    """Each rank runs on its own card: the joint graph's code names cuda:0 on
    one and cuda:1 on the other, and their keys must agree (the exchange
    above compares them). The device's kind still counts. Built, not run."""
    from mutwo.compiled._inductor import graph_key

    def joint(device: torch.device) -> torch.fx.GraphModule:
        g = torch.fx.Graph()
        x = g.placeholder("x")
        seeds = g.call_function(torch.ops.aten.full.default, ([2], 1.0), {"device": device})
        g.output((g.call_function(torch.ops.aten.add.Tensor, (x, seeds)),))
        return torch.fx.GraphModule(torch.nn.Module(), g)

    card0, card1 = joint(torch.device("cuda", 0)), joint(torch.device("cuda", 1))
    assert "index=1" in card1.code  # what the key must not see
    assert graph_key(card0, "cpu") == graph_key(card1, "cpu")
    assert graph_key(joint(torch.device("cpu")), "cpu") != graph_key(card0, "cpu")
