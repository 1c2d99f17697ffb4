# The compiled route's layer planner (docs/planners.md, "The compiled route",
# "Layers"): where a model repeats a layer (`layers.0`, `layers.1`, ... in the
# module path), each layer chooses how many of its expensive ops to recompute,
# and one exact solve across layers finds the least added time that frees
# the bytes the budget asks for.
#
# Every layer orders its anchors as μ-TWO's greedy does (recompute time per
# byte saved, cheapest first); an option is a prefix of that order. Options are
# priced once, on one template layer, from the partition PyTorch's min-cut
# gives with that prefix recomputed in that layer alone: the bytes the forward
# then saves less, and the recompute time it adds. The solve (`solve`) is a
# knapsack over quantised bytes: layers are interchangeable for the peak at
# the backward's start, where every layer's saved values are live, so it
# counts how many layers take each option. The plan it returns is then priced
# whole by the frontier's one model, like every other candidate.
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

import torch.fx as fx

_INDEX = re.compile(r"^\d+$")


def layer_of(node: fx.Node) -> Optional[str]:
    """The repeated layer a node belongs to: its module path up to the first
    all-digit component (`layers.3`), or None."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    parts = path.split(".")
    for i, p in enumerate(parts):
        if _INDEX.match(p):
            return ".".join(parts[:i + 1])
    return None


def _role(node: fx.Node, layer: str) -> str:
    """What a node is within its layer: its module path below the layer, and its op."""
    path = list(node.meta["nn_module_stack"].values())[-1][0]
    return f"{path[len(layer):]}|{node.target}"


def layers(anchors: Sequence[fx.Node]) -> list[list[fx.Node]]:
    """The anchors of the model's repeated layers, one list per layer in graph
    order, each ordered as `anchors` is; only layers alike in their anchors'
    roles (the most common shape, when at least two layers share it)."""
    by_layer: dict[str, list[fx.Node]] = {}
    for n in anchors:
        name = layer_of(n)
        if name is not None:
            by_layer.setdefault(name, []).append(n)
    shapes: dict[tuple, list[str]] = {}
    for name, nodes in by_layer.items():
        shapes.setdefault(tuple(sorted(_role(n, name) for n in nodes)), []).append(name)
    if not shapes:
        return []
    common = max(shapes.values(), key=len)
    if len(common) < 2:
        return []
    order = {n: i for i, n in enumerate(anchors)}
    return sorted((by_layer[name] for name in common), key=lambda nodes: min(order[n] for n in nodes))


def aligned(layer: Sequence[fx.Node], template: Sequence[fx.Node], name: str, template_name: str) -> list[fx.Node]:
    """`layer`'s anchors in the order of `template`'s, matched by role (and,
    among equal roles, by position)."""
    slots: dict[str, list[fx.Node]] = {}
    for n in layer:
        slots.setdefault(_role(n, name), []).append(n)
    return [slots[_role(n, template_name)].pop(0) for n in template]


@dataclass
class Option:
    """Recompute the first `k` anchors of a layer's order."""
    k: int
    freed: int  # bytes the forward saves less, priced on the template layer
    extra_ms: float


def useful(options: Sequence[Option]) -> list[Option]:
    """The options no other beats: none frees as much or more for less time."""
    kept = []
    for o in sorted(options, key=lambda o: (o.extra_ms, -o.freed)):
        if not kept or o.freed > kept[-1].freed:
            kept.append(o)
    return kept


def solve(options: Sequence[Option], count: int, need: int, buckets: int = 512) -> Optional[list[int]]:
    """The option of each of `count` layers (its k), the least total
    extra_ms whose freed bytes add up to at least `need`; None if even every
    layer's most freeing option does not. A knapsack over bytes quantised to
    `buckets` steps of need (rounded up, so a solution frees at least need)."""
    opts = useful(options)
    if need <= 0:
        return [0] * count
    if not opts or max(o.freed for o in opts) * count < need:
        return None
    step = max(1, math.ceil(need / buckets))
    goal = math.ceil(need / step)
    units = [min(goal, o.freed // step) for o in opts]
    inf = float("inf")
    best = [0.0] + [inf] * goal  # best[b]: least ms freeing at least b units, over the layers so far
    picks: list[list[int]] = []
    for _ in range(count):
        nxt, pick = [inf] * (goal + 1), [0] * (goal + 1)
        for b in range(goal + 1):
            if best[b] == inf:
                continue
            for i, o in enumerate(opts):
                t = min(goal, b + units[i])
                if best[b] + o.extra_ms < nxt[t]:
                    nxt[t], pick[t] = best[b] + o.extra_ms, i * (goal + 1) + b
        best = nxt
        picks.append(pick)
    if best[goal] == inf:
        return None
    chosen, b = [], goal
    for pick in reversed(picks):
        i, b = divmod(pick[b], goal + 1)
        chosen.append(opts[i].k)
    return sorted(chosen, reverse=True)  # the most recomputed first: which layer takes which does not move the peak
