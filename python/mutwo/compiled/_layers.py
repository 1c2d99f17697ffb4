# The compiled route's layer planner (docs/compiled.md,
# "Layers"): where a model repeats a layer (`layers.0`, `layers.1`, ... in the
# module path), each layer chooses how many of its expensive ops to recompute,
# and one exact solve across layers finds the least added time that frees
# the bytes the budget asks for.
#
# Every layer orders its anchors as μ-TWO's greedy does (recompute time per
# byte saved, cheapest first); an option is a prefix of that order. Options are
# priced once, on one template layer, from the partition PyTorch's min-cut
# gives with that prefix recomputed in that layer alone: the bytes the forward
# then saves less, and the recompute time it adds. What is a layer (the core's
# block rule, plan::block_of) and the solve across layers (an exact knapsack,
# plan::compiled::solve_layers) are the core's, called through the extension;
# what is here finds the layers' nodes in PyTorch's graph. The plan the solve
# returns is then priced whole by the frontier's one model, like every other
# candidate.
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch.fx as fx

from mutwo._ext import call, ops

def _path(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack")
    return list(stack.values())[-1][0] if stack else ""


def layer_names(nodes: Sequence[fx.Node]) -> list[Optional[str]]:
    """The repeated layer each node belongs to (the core's block rule: its
    module path up to the first all-digit component, `layers.3`), or None."""
    names = call(ops().blocks_of, [_path(n) for n in nodes]) if nodes else []
    return [name or None for name in names]


def layer_of(node: fx.Node) -> Optional[str]:
    return layer_names([node])[0]


def _role(node: fx.Node, layer: str) -> str:
    """What a node is within its layer: its module path below the layer, and its op."""
    path = list(node.meta["nn_module_stack"].values())[-1][0]
    return f"{path[len(layer):]}|{node.target}"


def layers(anchors: Sequence[fx.Node]) -> list[list[fx.Node]]:
    """The anchors of the model's repeated layers, one list per layer in graph
    order, each ordered as `anchors` is; only layers alike in their anchors'
    roles (the most common shape, when at least two layers share it)."""
    by_layer: dict[str, list[fx.Node]] = {}
    for n, name in zip(anchors, layer_names(anchors)):
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


def inputs(forward: Sequence[fx.Node], names: set[Optional[str]]) -> list[fx.Node]:
    """The values the layers `names` read that another layer or the rest of
    the model makes: what per-layer checkpointing saves."""
    layer = dict(zip(forward, layer_names(forward)))
    return list({a: None for n in forward if layer[n] in names for a in n.all_input_nodes
                 if a in layer and layer[a] != layer[n]})


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


def solve(options: Sequence[Option], count: int, need: int) -> Optional[list[int]]:
    """The option of each of `count` layers (its k, the most recomputed first):
    the least total extra_ms whose freed bytes add up to at least `need`; None
    if even every layer's most freeing option does not (the core's solve)."""
    out = call(ops().solve_layers, [o.k for o in options], [o.freed for o in options],
               [float(o.extra_ms) for o in options], count, need)
    return [int(k) for k in out[1:]] if out[0] else None
