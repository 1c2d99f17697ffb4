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

import functools
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Iterator, Optional, Sequence

import networkx as nx

import torch
import torch.fx as fx
from torch._functorch import config as _config
from torch._functorch import partitioners as _pt

from mutwo import _compat
from mutwo._ext import call, ops

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
        self._excluded: dict[str, set[Node]] = {}
        self._sizes: dict[Node, int] = {}
        self._graphs: dict[str, Optional[_CutGraph]] = {}  # by options: the graph with nothing allowed
        self.reads = {n: n.all_input_nodes for n in joint_graph.nodes}  # each node's inputs, listed once
        self.storages: dict[Node, list[tuple[int, int]]] = {}  # Schedule.storages, for every schedule made here
        self._impure: dict[bool, set[Node]] = {}  # impure(): by fallback_random
        self._bindings: Optional[dict] = None  # symbol -> the node binding it (bindings())
        self._symbols: dict[Node, Any] = {}

    # -- the sets
    def pytorch(self, budget: float) -> list[Node]:
        """What torch.compile saves under activation_memory_budget=`budget`
        (its own choose_saved_values_set, with its configured solver)."""
        with _patched(_pt, solve_min_cut=self._solve, estimate_runtime=self._estimate, _size_of=self._size_of,
                      dp_knapsack=_dp_knapsack):
            return list(_ORIGINAL_CHOOSE(self.joint_graph, self.node_info, budget))

    def with_recomputed(self, anchors: Sequence[Node]) -> list[Node]:
        """min-cut's saved set with `anchors` (expensive ops it would ban) allowed
        to be recomputed: PyTorch's knapsack step, for a set mutwo chose."""
        return self._solve(self.joint_graph, self.node_info, _aggressive(), _pt.OrderedSet(anchors))[0]

    def checkpointed(self, kept: Sequence[Node]) -> Optional[list[Node]]:
        """min-cut's saved set with every anchor allowed to be recomputed and
        the values `kept` banned from it: per-layer checkpointing's cut, where
        `kept` are each layer's inputs (the backward then recomputes a layer
        from its input alone, its attention too where it draws no dropout,
        as torch.utils.checkpoint would). None where the graph is not one the core cuts."""
        _, banned = self._solve(self.joint_graph, self.node_info, _aggressive())
        freed = set(self.anchors()) | {n for n in banned if _drawless(n)}
        made = self._unbanned(self.joint_graph, self.node_info, _aggressive(), freed, kept)
        return None if made is None else made[0]

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

    def schedules(self, saved: Sequence[Node]) -> tuple[Schedule, Schedule]:
        """What modules(saved) would run, as the joint graph's own nodes, in
        a fraction of its time (no graph is built or compiled to Python):
        pricing a candidate needs only what runs, in which order. Where
        PyTorch would repair an output the replica does not know, or
        quantize activations, the modules themselves are read."""
        made = None if _config_quantizes() or not MIRRORED else _partition_schedules(self, saved)
        if made is None:
            fw, bw = self.modules(saved)
            return Schedule.of(fw), Schedule.of(bw)
        return made

    def excluded(self, subgraph: str) -> set[Node]:
        """The joint graph's nodes that must be in the other module than
        `subgraph` ("forward" or "backward"), as the extraction excludes them."""
        if subgraph not in self._excluded:
            other = _pt._must_be_in_forward if subgraph == "backward" else _pt._must_be_in_backward
            self._excluded[subgraph] = {n for n in self.joint_graph.nodes if other(n)}
        return self._excluded[subgraph]

    def impure(self, random: bool) -> set[Node]:
        """The joint graph's nodes dead-code elimination keeps though nothing
        reads them (Node.is_impure), found once per Query."""
        if random not in self._impure:
            self._impure[random] = {n for n in self.joint_graph.nodes if n.is_impure(random)}
        return self._impure[random]

    def bindings(self) -> dict:
        """Each symbol and the node that binds it, looked up once (none under static shapes)."""
        if self._bindings is None:
            self._bindings = _pt.find_symbol_binding_fx_nodes(self.joint_graph)
        return self._bindings

    def symbols(self, node: Node) -> Any:
        """The free symbols of a node's value, memoised."""
        if node not in self._symbols:
            self._symbols[node] = _pt.free_symbols(node.meta["val"])
        return self._symbols[node]

    def is_forward(self, node: Node) -> bool:
        return bool(self.node_info.is_required_fw(node))

    def relaid(self, fw: Schedule) -> set[Node]:
        """The forward's inputs Inductor copies before a convolution reads
        them. With its layout optimization on (GraphLowering.decide_layout_opt,
        which Inductor asks of each module it compiles and which reads only its
        nodes; on the CPU with oneDNN, any graph with a convolution), a 2-D
        convolution's input and weight are made channels-last
        (kernel/conv.py): an input not already so is copied, and where the
        backward reads it, the forward saves the copy, not the input."""
        from torch._inductor.graph import GraphLowering
        nodes = [*fw.inputs, *fw.nodes, SimpleNamespace(op="output", target="output")]  # it counts the output node
        module = SimpleNamespace(graph=SimpleNamespace(nodes=nodes))
        if not any(n.target is torch.ops.aten.convolution.default for n in fw.nodes) or \
                not GraphLowering.decide_layout_opt(module, is_inference=False):
            return set()
        inputs = set(fw.inputs)
        copied = set()
        for n in fw.nodes:
            if n.target is not torch.ops.aten.convolution.default:
                continue
            for a in n.args[:2]:
                val = a.meta.get("val") if isinstance(a, Node) else None
                if a in inputs and isinstance(val, torch.Tensor) and val.dim() == 4 and \
                        not val.is_contiguous(memory_format=torch.channels_last):
                    copied.add(a)
        return copied

    # -- memoised internals
    def _solve(self, joint_graph: fx.Graph, node_info: Any, options: Any, dont_ban: Any = None) -> Any:
        """PyTorch's solve_min_cut, memoised. With ops allowed to be recomputed
        (`dont_ban`), under options whose bans do not depend on one another,
        its graph is the one with nothing allowed less those ops' bans: that
        graph is built once (by PyTorch) and cut again in the core."""
        key = (repr(options), frozenset(dont_ban or ()))
        if key not in self._cuts:
            made = self._unbanned(joint_graph, node_info, options, dont_ban) if dont_ban and _reusable(options) \
                else None
            if made is None:
                graphs: list[nx.DiGraph] = []

                def recorded(graph: nx.DiGraph, source: Any, sink: Any, **kw: Any) -> Any:
                    graphs.append(graph)
                    return _minimum_cut(graph, source, sink, **kw)
                with _patched(nx, minimum_cut=recorded), _patched(_pt, _size_of=self._size_of):
                    made = _ORIGINAL_SOLVE(joint_graph, node_info, options, dont_ban)
                if not dont_ban and graphs:
                    self._graphs[repr(options)] = _CutGraph.of(graphs[0], joint_graph)
            self._cuts[key] = made
        saved, banned = self._cuts[key]
        return list(saved), banned

    def _unbanned(self, joint_graph: fx.Graph, node_info: Any, options: Any, dont_ban: Any,
                  kept: Sequence[Node] = ()) -> Optional[tuple]:
        """solve_min_cut's answer with `dont_ban` allowed (and `kept` banned),
        from its graph with nothing allowed; None where that graph cannot be cut in the core."""
        self._solve(joint_graph, node_info, options)
        graph = self._graphs.get(repr(options))
        if graph is None:
            return None
        _, banned = self._cuts[(repr(options), frozenset())]
        allowed = _allowed(banned, dont_ban)
        saved = graph.saved({graph.ban[n.name] for n in allowed}, kept)
        if saved is None:
            return None  # unbounded: PyTorch's own solve raises its error
        return saved, _pt.OrderedSet(n for n in banned if n not in allowed)

    def _size_of(self, node: Node) -> int:
        if node not in self._sizes:
            self._sizes[node] = _ORIGINAL_SIZE_OF(node)
        return self._sizes[node]

    def _estimate(self, node: Node) -> float:
        if node not in self._runtimes:
            self._runtimes[node] = _ORIGINAL_ESTIMATE(node)
        return self._runtimes[node]


def _dp_knapsack(memory: Sequence[float], runtime: Sequence[float], max_memory: float) -> tuple[float, list, list]:
    """PyTorch's dp_knapsack (its default knapsack solver), to the bit, in the
    core (plan::compiled::dp_knapsack): the same answer, found in C++."""
    value, saved, recomputed = call(ops().dp_knapsack, [float(m) for m in memory], [float(r) for r in runtime],
                                    float(max_memory))
    return value, list(saved), list(recomputed)


def _allowed(banned: Any, dont_ban: Any) -> set[Node]:
    """The banned nodes `dont_ban` frees, as solve_min_cut frees them
    (collectives stay banned unless its config allows)."""
    unsafe = _config.unsafe_allow_optimization_of_collectives
    return {n for n in banned if n in dont_ban and
            (unsafe or getattr(n.target, "namespace", None) != "_c10d_functional")}


# PyTorch's min-cut with the core's maximum flow (plan::min_cut, Dinic's on
# the graph's edge lists) instead of networkx's (preflow-push by default). The
# cut is the same: networkx returns as the sink side the nodes that reach the
# sink in the residual network, which is one set for every maximum flow, and
# min-cut's capacities are integers or infinite, so every exact algorithm
# finds it (tests/python/test_mincut.py checks it against networkx). A
# capacity that is not an integer goes to networkx's Boykov-Kolmogorov.
_ORIGINAL_MINIMUM_CUT = nx.minimum_cut


def _edges(graph: nx.DiGraph, capacity: str = "capacity") -> Optional[tuple[list, dict, list[int], list[int], list[int]]]:
    """The graph as the core takes it: its node names, their indices, and per
    edge tail, head and capacity (-1: infinite). None where a capacity is not an integer."""
    names = list(graph)
    index = {n: i for i, n in enumerate(names)}
    tail, head, caps = [], [], []
    for u, v, data in graph.edges(data=True):
        c = data.get(capacity, math.inf)
        if c != math.inf and not float(c).is_integer():
            return None
        tail.append(index[u]), head.append(index[v]), caps.append(-1 if c == math.inf else int(c))
    return names, index, tail, head, caps


def _minimum_cut(graph: nx.DiGraph, source: Any, sink: Any, capacity: str = "capacity") -> tuple[Any, tuple[set, set]]:
    """nx.minimum_cut(graph, source, sink): (the cut's value, (source side, sink side))."""
    edges = _edges(graph, capacity)
    if edges is None:
        return _ORIGINAL_MINIMUM_CUT(graph, source, sink, capacity=capacity,
                                     flow_func=nx.algorithms.flow.boykov_kolmogorov)
    names, index, tail, head, caps = edges
    unbounded, value, sink_side = call(ops().min_cut, len(names), tail, head, caps, index[source], index[sink])
    if unbounded:
        raise nx.NetworkXUnbounded("Infinite capacity path, flow unbounded above.")
    far = {names[i] for i in sink_side}
    return value, (set(names) - far, far)


def _reusable(options: Any) -> bool:
    """Whether solve_min_cut's bans under `options` are each a node's own (the
    two heuristics that read earlier bans off)."""
    return not options.ban_if_used_far_apart and not options.ban_if_long_fusible_chains


@dataclass
class _CutGraph:
    """solve_min_cut's graph as the core takes it, with per banned node the
    edge from the source that bans it, and per joint node its in -> out edge
    (the one a cut through saves it), in the joint graph's order."""
    nodes: int
    tail: list[int]
    head: list[int]
    capacity: list[int]
    source: int
    sink: int
    ban: dict[str, int]
    through: list[tuple[Node, int, int]]

    @staticmethod
    def of(graph: nx.DiGraph, joint_graph: fx.Graph) -> Optional["_CutGraph"]:
        edges = _edges(graph)
        if edges is None:
            return None
        names, index, tail, head, caps = edges
        source = index["source"]
        ban = {names[v][:-3]: e for e, (u, v) in enumerate(zip(tail, head)) if u == source}
        through = [(n, index[n.name + "_in"], index[n.name + "_out"]) for n in joint_graph.nodes
                   if graph.has_edge(n.name + "_in", n.name + "_out")]
        return _CutGraph(len(names), tail, head, caps, source, index["sink"], ban, through)

    def saved(self, unbanned: set[int], banned: Sequence[Node] = ()) -> Optional[list[Node]]:
        """What a cut saves with the edges `unbanned` gone and the nodes
        `banned` banned too (an infinite edge from the source, as
        solve_min_cut bans): the nodes whose in -> out edge crosses it, in the
        joint graph's order; None where no cut is finite."""
        caps = [0 if e in unbanned else c for e, c in enumerate(self.capacity)]
        wanted = set(banned)
        more = [a for n, a, _ in self.through if n in wanted]
        tail, head = self.tail + [self.source] * len(more), self.head + more
        unbounded, _, sink_side = call(ops().min_cut, self.nodes, tail, head, caps + [-1] * len(more),
                                       self.source, self.sink)
        if unbounded:
            return None
        far = set(sink_side)
        return [n for n, a, b in self.through if a not in far and b in far]


_ORIGINAL_CHOOSE = _pt.choose_saved_values_set
_ORIGINAL_SOLVE = _pt.solve_min_cut
_ORIGINAL_ESTIMATE = _pt.estimate_runtime
_ORIGINAL_SIZE_OF = _pt._size_of


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
    with _patched(_pt, choose_saved_values_set=choose), _patched(_config, **{k: getattr(_config, k) for k in _OFFLOAD}):
        yield


# torch/_functorch/config.py's switches for its offload pass
# (torch/_functorch/_activation_offloading), which the partitioner runs on
# the forward and backward modules after the saved set is chosen.
_OFFLOAD = ("enable_activation_offloading", "activation_offload_separate_stream", "activation_offload_sink_wait",
            "activation_reload_prefetch")


def offload(saved: Sequence[Node], names: Sequence[str], stream: bool) -> None:
    """Called by a chooser within `choosing`: PyTorch's offload pass moves the
    saved values `names` to host memory after their last forward read and back
    before their first backward read (pinned host buffers, from its caching
    host allocator; non-blocking copies). With `stream` (CUDA), on a stream of
    their own: each copy out waits for its last read, the forward's end waits
    for the copies, and each copy back starts early enough to hide behind the
    backward's compute (its prefetch)."""
    wanted = set(names)
    for n in saved:
        n.meta["should_offload"] = n.name in wanted
    if wanted and stream:
        _mend_record_stream()
    if wanted:
        for k in _OFFLOAD:
            setattr(_config, k, k == _OFFLOAD[0] or stream)


@functools.lru_cache(maxsize=None)
def _mend_record_stream() -> None:
    """torch 2.11's streams::record_stream (torch/_dynamo/variables/streams.py)
    carries sync_dealloc's fake, of three arguments, so the offload pass's
    copies on their own stream fail to trace ("missing 1 required positional
    argument: 'to_dealloc'"). Its own fake, of its own two arguments."""
    from torch._dynamo.variables import streams
    streams.record_stream.register_fake(lambda tensor, stream_index: None)


def pin_random(joint_module: fx.GraphModule) -> int:
    """Marks every node that draws random numbers MUST_SAVE, so no candidate
    recomputes it: PyTorch's own aggressive min-cut options (any
    activation_memory_budget below 1) leave Inductor's `inductor_seeds` free
    to recompute, and the backward then draws new seeds, so its dropout masks
    are not the forward's. Returns how many were marked."""
    return pin(joint_module, lambda n: n.target is torch.ops.prims.inductor_seeds.default or
               torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()))


def _drawless(n: Node) -> bool:
    """Whether a call pin_random pinned draws no random numbers after all:
    attention is tagged nondeterministic_seeded for its dropout, and at
    dropout_p 0 it recomputes to the same bits."""
    schema = getattr(n.target, "_schema", None)
    at = [i for i, a in enumerate(schema.arguments) if a.name == "dropout_p"] if schema is not None else []
    if not at or n.target is torch.ops.prims.inductor_seeds.default:
        return False
    p = n.kwargs.get("dropout_p", n.args[at[0]] if len(n.args) > at[0] else schema.arguments[at[0]].default_value)
    return isinstance(p, (int, float)) and p == 0


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


# -- the partition's modules, mirrored without building them
# On the torch tests/python/test_mincut.py checks the mirror against (the
# minor version requirements.txt pins); under another, pricing reads the
# modules themselves, slower but never wrong.
MIRRORED = _compat.TORCH_RELEASE == _compat.MIN_TORCH


@dataclass
class Schedule:
    """One module of a partition: its inputs, the nodes it runs in order
    (calls and attributes), its outputs, and each node's users within it."""
    inputs: list[Node]
    nodes: list[Node]
    outputs: list[Node]
    users: dict[Node, list[Node]]
    # per node, its value's storages (_frontier._stored): one dict for all of a Query's schedules
    storages: dict[Node, list[tuple[int, int]]] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def of(gm: fx.GraphModule) -> "Schedule":
        graph = list(gm.graph.nodes)
        inputs = [n for n in graph if n.op == "placeholder"]
        nodes = [n for n in graph if n.op not in ("placeholder", "output")]
        out = graph[-1]
        outputs = [n for n in _pt.pytree.arg_tree_leaves(*out.args) if isinstance(n, Node)]
        return Schedule(inputs, nodes, outputs, {n: [u for u in n.users if u.op != "output"] for n in graph})

    @staticmethod
    def made(q: Query, inputs: list[Node], nodes: list[Node], outputs: list[Node]) -> "Schedule":
        inside = set(nodes)
        users = {n: [u for u in n.users if u in inside] for n in (*inputs, *nodes)}
        return Schedule(inputs, nodes, outputs, users, q.storages)


def _config_quantizes() -> bool:
    """Whether PyTorch rewrites the modules to quantize saved activations
    (enable_activation_quantization), which the replica does not mirror."""
    return torch._inductor.config.post_grad_fusion_options.get("activation_quantization_aten_pass") is not None


def _extract(q: Query, inputs: list[Node], outputs: list[Node], subgraph: str) -> Optional[list[Node]]:
    """The nodes _extract_graph_with_inputs_outputs keeps, in its order: those
    computable from `inputs` in `subgraph`, less what dead-code elimination
    removes. None where an output is not computable (PyTorch then repairs it)."""
    given, valid, order = set(inputs), set(inputs), []
    excluded, reads = q.excluded(subgraph), q.reads
    for node in q.joint_graph.nodes:
        if node in given or node in excluded:
            continue
        if node.op == "get_attr" or (node.op == "call_function" and all(a in valid for a in reads[node])):
            valid.add(node)
            order.append(node)
    if any(o not in valid for o in outputs):
        return None
    impure_random = torch._inductor.config.fallback_random if torch._guards.TracingContext.try_get() else True
    needed, kept, impure = set(outputs), [], q.impure(impure_random)
    for node in reversed(order):  # Graph.eliminate_dead_code
        if node in needed or node in impure:
            kept.append(node)
            needed.update(reads[node])
    kept.reverse()
    return kept


def _autograd_order(q: Query, inputs: list[Node], nodes: list[Node], outputs: list[Node]) -> list[Node]:
    """`nodes` in reordering_to_mimic_autograd_engine's order: from the first
    node that reads a tangent on, each node placed with the ancestors it still
    lacks, in the module's order; before it, only copy_ nodes (and theirs)."""
    index = {n: i for i, n in enumerate(nodes)}
    first = min((index[u] for t in inputs if _pt._is_tangent(t) for u in t.users if u in index), default=None)
    tangent_is_output = any(_pt._is_tangent(o) for o in outputs)
    if first is None and not tangent_is_output:
        return nodes
    first = len(nodes) if first is None else first
    placed, ordered = set(inputs), []

    def place(roots: list[Node]) -> None:
        todo, found = list(roots), set()
        while todo:
            n = todo.pop()
            if n in found or n in placed:
                continue
            found.add(n)
            todo += q.reads[n]
        for n in sorted(found, key=index.__getitem__):
            placed.add(n)
            ordered.append(n)
    for n in nodes[:first]:
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default:
            place([n])
    for n in nodes[first:]:
        place([n])
    place(list(outputs))  # the output node, last
    return ordered


def _partition_schedules(q: Query, saved: Sequence[Node]) -> Optional[tuple[Schedule, Schedule]]:
    """_extract_fwd_bwd_modules and the backward's reordering, mirrored on the
    joint graph (tests/python/test_mincut.py checks the two agree); None where
    the mirror stops."""
    graph = q.joint_graph
    fwd_outputs, bwd_outputs = (
        [o for o in outs if isinstance(o, Node)]  # a None gradient is returned as is
        for outs in _pt._extract_fwd_bwd_outputs(q.joint_module, num_fwd_outputs=q.num_fwd_outputs)[:2])
    placeholders = list(graph.find_nodes(op="placeholder"))
    primals = [n for n in placeholders if _pt._is_primal(n)]
    tangents = [n for n in placeholders if _pt._is_tangent(n)]
    fwd_seeds = [n for n in placeholders if _pt._is_fwd_seed_offset(n)]
    bwd_seeds = [n for n in placeholders if _pt._is_bwd_seed_offset(n)]
    states = [n for n in placeholders if _pt._is_backward_state(n)]
    values = [n for n in saved if not _pt.is_sym_node(n)]
    syms = [n for n in saved if _pt.is_sym_node(n)]
    first = _extract(q, syms + values + tangents + bwd_seeds, bwd_outputs, "backward")
    if first is None:
        return None
    inside = set(first)
    wait = torch.ops._c10d_functional.wait_tensor.default if torch.distributed.is_available() else None

    def used(n: Node) -> list[Node]:  # its readers in that first backward
        return [u for u in n.users if u in inside]

    def dropped(n: Node) -> bool:  # a saved value the backward does not read
        if n in bwd_outputs:
            return _pt._is_backward_state(n)
        readers = used(n)
        return not readers or (wait is not None and all(u.target is wait and not used(u) for u in readers)) \
            or _pt._is_backward_state(n)
    values = [n for n in values if not dropped(n)]
    syms = [n for n in syms if not dropped(n)]
    syms += _symbol_bindings(q, syms, values, tangents)
    fw_inputs, bw_inputs = primals + fwd_seeds, syms + values + tangents + bwd_seeds + states
    fw = _extract(q, fw_inputs, fwd_outputs + values + syms, "forward")
    bw = _extract(q, bw_inputs, bwd_outputs, "backward")
    if fw is None or bw is None:
        return None
    return (Schedule.made(q, fw_inputs, fw, fwd_outputs + values + syms),
            Schedule.made(q, bw_inputs, _autograd_order(q, bw_inputs, bw, bwd_outputs), bwd_outputs))


def _symbol_bindings(q: Query, syms: list[Node], values: list[Node], tangents: list[Node]) -> list[Node]:
    """The symbol-binding nodes PyTorch adds to the saved sym nodes, so the
    backward can bind every size its inputs name (dynamic shapes only)."""
    bindings = q.bindings()
    if not bindings:
        return []
    bound = {s for n in syms if (s := _pt.is_symbol_binding_fx_node(n))}
    added = []
    for n in (*[n for n in syms if not _pt.is_symbol_binding_fx_node(n)], *values, *tangents):
        if "val" not in n.meta:
            continue
        new = q.symbols(n) - bound
        added += [bindings[s] for s in sorted(new, key=lambda s: s.name) if s in bindings]
        bound |= new
    return [n for n in added if n not in syms]
