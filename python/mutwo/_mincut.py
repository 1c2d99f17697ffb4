# PyTorch's min-cut partitioner (torch/_functorch/partitioners.py), the
# internals the compiled route leans on, in one place.
#
# AOTAutograd's min_cut_rematerialization_partition asks
# choose_saved_values_set which forward values to save for the backward; the
# rest of the partition (extracting the forward and backward modules,
# reordering the backward like autograd, random-number threading) follows
# from that one set. mutwo answers that question itself, inside PyTorch's own
# partitioner: within `choosing(chooser)`, the partitioner hands the chooser a
# Query, from which it can ask for PyTorch's own answer at any
# activation_memory_budget, for min-cut's answer with given expensive ops
# allowed to be recomputed, and for the forward and backward modules any saved
# set would give.
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx as fx
from torch._functorch import config as _config
from torch._functorch import partitioners as _pt

Node = fx.Node


class Query:
    """The joint graph as the partitioner holds it when it chooses the saved
    set, and the questions mutwo's chooser asks of it. Min-cut solutions are
    memoised: PyTorch's answers at different budgets share their cuts."""

    def __init__(self, joint_module: fx.GraphModule, joint_graph: fx.Graph, node_info: Any,
                 num_fwd_outputs: int) -> None:
        self.joint_module, self.joint_graph, self.node_info = joint_module, joint_graph, node_info
        self.num_fwd_outputs = num_fwd_outputs
        self._cuts: dict[tuple, tuple[list[Node], Any]] = {}
        self._runtimes: dict[Node, float] = {}
        self._anchors: list[Node] | None = None

    # -- the sets
    def pytorch(self, budget: float) -> list[Node]:
        """What torch.compile saves under activation_memory_budget=`budget`
        (its own choose_saved_values_set, with its configured solver)."""
        with _patched(_pt, solve_min_cut=self._solve, estimate_runtime=self._estimate):
            return list(_ORIGINAL_CHOOSE(self.joint_graph, self.node_info, budget))

    def with_recomputed(self, anchors: Sequence[Node]) -> list[Node]:
        """min-cut's saved set with `anchors` (expensive ops it would ban) allowed
        to be recomputed: PyTorch's knapsack step, for a set mutwo chose."""
        return self._solve(self.joint_graph, self.node_info, _aggressive(), _pt.OrderedSet(anchors))[0]

    def anchors(self) -> list[Node]:
        """The expensive forward ops min-cut bans from recomputation (matmuls,
        convolutions, attention, reductions, random ops) that the backward needs
        and that do not alias an input: what a memory budget chooses among."""
        if self._anchors is None:
            from torch._inductor.fx_utils import get_node_storage
            _, banned = self._solve(self.joint_graph, self.node_info, _aggressive(), None)
            inputs = {get_node_storage(n) for n in self.node_info.inputs}
            self._anchors = [n for n in banned if getattr(n, "dist_from_bw", 0) < int(1e9)
                             and (get_node_storage(n) not in inputs or _pt.is_non_builtin_to_include(n))
                             and n.meta.get("recompute") != torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE]
        return self._anchors

    def modules(self, saved: Sequence[Node]) -> tuple[fx.GraphModule, fx.GraphModule]:
        """The forward and backward modules `saved` gives, the backward in the
        order the partitioner will compile (autograd's)."""
        values = [n for n in saved if not _pt.is_sym_node(n)]
        syms = [n for n in saved if _pt.is_sym_node(n)]
        fw, bw = _pt._extract_fwd_bwd_modules(
            self.joint_module, values, saved_sym_nodes=syms, num_fwd_outputs=self.num_fwd_outputs,
            static_lifetime_input_nodes=self.node_info.static_lifetime_input_nodes)
        return fw, _pt.reordering_to_mimic_autograd_engine(bw)

    def is_forward(self, node: Node) -> bool:
        return bool(self.node_info.is_required_fw(node))

    # -- memoised internals
    def _solve(self, joint_graph: fx.Graph, node_info: Any, options: Any, dont_ban: Any = None) -> Any:
        key = (repr(options), frozenset(dont_ban or ()))
        if key not in self._cuts:
            self._cuts[key] = _ORIGINAL_SOLVE(joint_graph, node_info, options, dont_ban)
        saved, banned = self._cuts[key]
        return list(saved), banned

    def _estimate(self, node: Node) -> float:
        if node not in self._runtimes:
            self._runtimes[node] = _ORIGINAL_ESTIMATE(node)
        return self._runtimes[node]


_ORIGINAL_CHOOSE = _pt.choose_saved_values_set
_ORIGINAL_SOLVE = _pt.solve_min_cut
_ORIGINAL_ESTIMATE = _pt.estimate_runtime


def _aggressive() -> Any:
    """The min-cut options PyTorch's knapsack step runs under: only the
    expensive ops banned, which the knapsack then frees one by one."""
    return _pt.MinCutOptions(ban_if_used_far_apart=False, ban_if_long_fusible_chains=False,
                             ban_if_materialized_backward=False, ban_if_not_in_allowlist=False,
                             ban_if_reduction=_config.ban_recompute_reductions)


@contextmanager
def _patched(module: Any, **names: Any) -> Iterator[None]:
    old = {k: getattr(module, k) for k in names}
    for k, v in names.items():
        setattr(module, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


@contextmanager
def choosing(joint_module: fx.GraphModule, num_fwd_outputs: int,
             chooser: Callable[[Query], list[Node]]) -> Iterator[None]:
    """Within: PyTorch's min-cut partitioner saves what `chooser` returns for
    the joint module being partitioned, instead of what its memory budget's
    knapsack would."""
    def choose(joint_graph: fx.Graph, node_info: Any, memory_budget: float = 1) -> list[Node]:
        return chooser(Query(joint_module, joint_graph, node_info, num_fwd_outputs))
    with _patched(_pt, choose_saved_values_set=choose):
        yield


def pin_random(joint_module: fx.GraphModule) -> int:
    """Marks every node that draws random numbers MUST_SAVE, so no candidate
    recomputes it: PyTorch's own aggressive min-cut options (any
    activation_memory_budget below 1) leave Inductor's `inductor_seeds` free
    to recompute, and the backward then draws new seeds, so its dropout masks
    are not the forward's. Returns how many were marked."""
    return pin(joint_module, lambda n: n.target is torch.ops.prims.inductor_seeds.default or
               torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()))


def pin(joint_module: fx.GraphModule, test: Callable[[Node], bool]) -> int:
    """Marks every call for which `test` holds MUST_SAVE (unless a policy is
    already set): min-cut then never recomputes it. Returns how many were marked."""
    policy = torch.utils.checkpoint.CheckpointPolicy
    marked = 0
    for n in joint_module.graph.nodes:
        if n.op == "call_function" and n.meta.get("recompute") is None and test(n):
            n.meta["recompute"] = policy.MUST_SAVE
            marked += 1
    return marked


def partition(joint_module: fx.GraphModule, joint_inputs: Any, kwargs: dict) -> tuple[fx.GraphModule, fx.GraphModule]:
    """PyTorch's min-cut partition, as Inductor calls it."""
    return _pt.min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)


@contextmanager
def inductor_peaks(record: list[int]) -> Iterator[None]:
    """Within: Inductor's own peak-memory estimates appended to `record`
    (torch._inductor.memory.estimate_peak_memory, which its scheduler runs on
    each order reorder_for_peak_memory tries; the order it keeps has the
    least). A graph Inductor's cache serves is not scheduled: no estimate."""
    from torch._inductor import memory as _memory
    original = _memory.estimate_peak_memory

    def recording(*args: Any, **kwargs: Any) -> Any:
        peak, timeline = original(*args, **kwargs)
        record.append(int(peak))
        return peak, timeline
    with _patched(_memory, estimate_peak_memory=recording):
        yield
