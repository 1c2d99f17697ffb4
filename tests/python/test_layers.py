# The compiled route's layer planner on plain data (python/mutwo/compiled/_layers.py,
# through the core's solve, src/plan/compiled.h; tests/core/test_compiled.cpp
# tests the solve itself): the solve across layers against every assignment of
# options to layers, dominated options never taken, an unreachable need
# refused; and the repeated layers found by module path (the core's block rule).
from __future__ import annotations

import itertools
import random

import torch.fx as fx

from mutwo.compiled import _layers
from mutwo.compiled._layers import Option


def _brute(options: list[Option], count: int, need: int) -> float:
    best = float("inf")
    for pick in itertools.product(options, repeat=count):
        if sum(o.freed for o in pick) >= need:
            best = min(best, sum(o.extra_ms for o in pick))
    return best


def test_the_solve_is_the_least_time_that_frees_the_need() -> None:
    rng = random.Random(0)
    for _ in range(300):
        options = [Option(0, 0, 0.0)] + [Option(k, rng.randint(1, 40), round(rng.uniform(0.1, 5.0), 3))
                                         for k in range(1, rng.randint(2, 5))]
        count, need = rng.randint(1, 4), rng.randint(0, 120)
        ks = _layers.solve(options, count, need)  # under 4096 bytes: a step of one byte, exact
        want = _brute(options, count, need)
        if want == float("inf"):
            assert ks is None, (options, count, need)
            continue
        assert ks is not None and len(ks) == count, (options, count, need)
        by_k = {o.k: o for o in options}
        assert sum(by_k[k].freed for k in ks) >= need
        assert abs(sum(by_k[k].extra_ms for k in ks) - want) < 1e-9, (options, count, need, ks)


def test_quantised_the_solve_still_frees_the_need() -> None:
    options = [Option(0, 0, 0.0), Option(1, 1_000_003, 1.0), Option(2, 2_500_001, 2.2)]
    ks = _layers.solve(options, 8, 9_000_000)
    assert ks is not None and sum({o.k: o.freed for o in options}[k] for k in ks) >= 9_000_000


def test_a_dominated_option_is_never_taken() -> None:
    options = [Option(0, 0, 0.0), Option(1, 10, 1.0), Option(2, 8, 2.0), Option(3, 30, 2.5)]
    assert _layers.solve(options, 2, 18) == [1, 1]


def _anchor(graph: fx.Graph, path: str, target: str) -> fx.Node:
    n = graph.placeholder(f"n{len(graph.nodes)}")
    n.target = target
    n.meta["nn_module_stack"] = {"x": (path, object)}
    return n


def test_repeated_layers_are_found_by_module_path() -> None:
    g = fx.Graph()
    nodes = [_anchor(g, f"model.layers.{i}.{part}", "mm") for i in range(3) for part in ("q", "k", "mlp.w1")]
    nodes.append(_anchor(g, "model.head", "mm"))
    nodes.append(_anchor(g, "model.blocks.0.odd", "bmm"))  # a layer alone in its shape
    groups = _layers.layers(nodes)
    assert [[_layers.layer_of(n) for n in grp] for grp in groups] == [[f"model.layers.{i}"] * 3 for i in range(3)]
    t = groups[1]
    again = _layers.aligned(list(reversed(groups[0])), t, "model.layers.0", "model.layers.1")
    assert [n.meta["nn_module_stack"]["x"][0].split(".")[-1] for n in again] == ["q", "k", "w1"]
