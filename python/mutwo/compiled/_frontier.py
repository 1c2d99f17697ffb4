# The compiled route's planner (docs/compiled.md): which
# forward values Inductor saves for the backward, chosen from PyTorch's own
# frontier and scored by one model of the partition Inductor really runs.
#
# Candidates, each a saved set inside PyTorch's min-cut partitioner
# (_mincut.Query):
# - PyTorch's own: torch.compile's default (activation_memory_budget=1) and
#   its answer at every budget of LADDER.
#   Pointwise ops, views and casts stay min-cut's to place, recomputed for
#   free inside the backward's fused kernels.
# - mutwo's: the anchors (the expensive ops min-cut bans: matmuls,
#   convolutions, attention, reductions) ordered as μ-TWO's greedy orders
#   candidates, by modelled recompute time per byte saved, and the shortest
#   prefix of that order whose partition fits, found by bisection; and, where
#   the model repeats a layer, the layer planner's (_layers.py): per layer, a
#   prefix of its own anchors, chosen across layers by one exact solve for the
#   least added time that frees what the budget asks ("layers:3,3,2,0"); and
#   per-layer checkpointing ("checkpoint": each layer's inputs saved).
# Each candidate is priced from the forward and backward modules min-cut
# returns for it (`predict`): the added peak of each phase by the core's walk
# over its memory events (plan::compiled::phase_peak; the events leave out
# what Inductor never writes to memory), and the recompute time of
# the forward ops the backward holds, from the core's roofline (the device rate
# table, src/profile/rates.h). μ-TWO's order, the solve across layers, the
# choice among priced candidates, what a budget resolves to and the refusal
# text are the core's (src/plan/compiled.h), called through the extension: this
# module finds PyTorch's nodes and reads partitions into plain lists. The fastest candidate
# that fits wins; with no budget pressure that is compile's own default, and
# PyTorch's answer at any budget is among the candidates, so at the same
# modelled peak mutwo is never slower by its model.
from __future__ import annotations

import hashlib
import operator
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx as fx

from mutwo import _budget
from mutwo.compiled import _layers, _loss
from mutwo._budget import Budget
from mutwo._ext import call, ops
from mutwo.compiled._mincut import Query, Schedule

LADDER = (0.8, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.05)  # activation_memory_budget values, besides 1
SPREAD = 8  # mutwo:K candidates priced for choosing across graphs (Frontier.spread)
MIN_OFFLOAD = 64 << 10  # bytes: a smaller copy costs its launch and sync more than it frees (random seeds)
CHECKPOINT = "checkpoint"  # the candidate that saves each repeated layer's inputs (Frontier.checkpointed)
LAYER_OPTIONS = 6  # prefixes of a layer's anchors the layer planner prices (Frontier.layered)

@dataclass
class Candidate:
    """One saved set and what it costs, predicted."""
    name: str  # "compile:1" (plain compile's), "compile:0.5", "mutwo:12" (the first 12 anchors recomputed)
    saved: list[fx.Node] = field(repr=False)
    fwd_peak: int = 0  # bytes the forward adds at its peak
    bwd_peak: int = 0  # bytes the backward adds at its peak, the saved set included
    retained: int = 0  # bytes the forward leaves allocated: its outputs and the saved set
    saved_bytes: int = 0
    saved_at_peak: int = 0  # of those, live at the peak: what planning can take off it
    extra_ms: float = 0.0  # modelled time of the forward ops the backward recomputes
    recomputed: list[str] = field(default_factory=list)  # their node names
    offloaded: list[str] = field(default_factory=list)  # saved values kept in host memory between the phases
    host_bytes: int = 0  # what those hold there

    @property
    def key(self) -> str:
        """The plan, by what it saves and offloads: the same sets are the same partition."""
        text = ",".join(sorted(n.name for n in self.saved))
        text += "|" + ",".join(sorted(self.offloaded)) if self.offloaded else ""
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def peak(self, corrections: "Corrections") -> int:
        """The added peak, corrected by what measurement showed the model misses."""
        r = corrections.of(self)
        return max(self.fwd_peak + r.fwd, self.bwd_peak + r.bwd)

    def corrected(self, corrections: "Corrections") -> tuple[int, int, int]:
        """(forward peak, backward peak, retained bytes), each corrected by the measured miss."""
        r = corrections.of(self)
        return self.fwd_peak + r.fwd, self.bwd_peak + r.bwd, self.retained + r.retained

    def summary(self, corrections: "Corrections") -> dict:
        fwd, bwd, retained = self.corrected(corrections)
        return {"name": self.name, "predicted_peak_bytes": self.peak(corrections), "saved_bytes": self.saved_bytes,
                "fwd_peak_bytes": fwd, "bwd_peak_bytes": bwd, "retained_bytes": retained,
                "extra_ms": round(self.extra_ms, 4), "recomputed": len(self.recomputed),
                "offloaded": len(self.offloaded), "host_bytes": self.host_bytes,
                "measured": self.key in corrections.by_plan}


@dataclass
class Residual:
    """Measured minus predicted added peak, per phase (bytes): the model's miss;
    and of what the forward leaves allocated for the backward."""
    fwd: int = 0
    bwd: int = 0
    retained: int = 0


@dataclass
class Corrections:
    """The model's misses, measured: a plan that ran is predicted exactly as
    measured; one that has not takes the largest miss seen on any plan of the
    graph, per phase, where the model fell short (none before the first
    measurement), so a replan after a step over budget errs towards fitting.
    A plan the model over-predicted says nothing of another's: on the CPU the
    test decoder's compile:1 backward measured 360 KB below its prediction,
    mutwo:2's 45 KB, and carrying the first onto the second put it 315 KB
    short, over budget (docs/compiled.md, "Corrections")."""
    by_plan: dict[str, Residual] = field(default_factory=dict)

    def of(self, c: Candidate) -> Residual:
        if c.key in self.by_plan:
            return self.by_plan[c.key]
        if not self.by_plan:
            return Residual()
        return Residual(*(max(0, *(getattr(r, k) for r in self.by_plan.values()))
                          for k in ("fwd", "bwd", "retained")))

    def measured(self, c: Candidate, fwd: int, bwd: int, retained: Optional[int] = None) -> None:
        self.by_plan[c.key] = Residual(fwd - c.fwd_peak, bwd - c.bwd_peak,
                                       0 if retained is None else retained - c.retained)


# -- what Inductor writes to memory
def _pointwise(node: fx.Node) -> bool:
    if node.target in (torch.ops.prims.inductor_random.default, torch.ops.prims.inductor_lookup_seed.default):
        return True
    return torch.Tag.pointwise in getattr(node.target, "tags", ())


def _reduction(node: fx.Node) -> bool:
    return torch.Tag.reduction in getattr(node.target, "tags", ())


# Lowered by Inductor as loads through an index (lowering.py: gather's,
# index's and embedding's Pointwise): they read their input inside their own loop.
_INDIRECT = (torch.ops.aten.gather.default, torch.ops.aten.index.Tensor, torch.ops.aten.embedding.default)


def _view(node: fx.Node) -> bool:
    """An op whose result aliases its input (its schema says so), or _unsafe_view."""
    if node.target is torch.ops.aten._unsafe_view.default:
        return True
    returns = getattr(getattr(node.target, "_schema", None), "returns", None)
    return bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write


def _fuses(user: fx.Node, module: Schedule, outputs: set, depth: int = 0) -> bool:
    """Inductor computes what `user` reads inside `user`'s own loop: a
    pointwise node, a reduction, an indexed load (a cross-entropy's gather of
    its log-softmax), or a view, not returned, whose readers all do."""
    if user.op != "call_function":
        return False
    if _pointwise(user) or _reduction(user) or user.target in _INDIRECT:
        return True
    readers = module.users[user]
    return _view(user) and user not in outputs and depth < 4 and bool(readers) and \
        all(_fuses(u, module, outputs, depth + 1) for u in readers)


def _unmaterialized(node: fx.Node, module: Schedule, outputs: set) -> bool:
    """A temporary Inductor's GPU code never writes to memory: made by a
    pointwise node and read, fewer than 4 times (Inductor realizes a buffer
    read more often), only by readers that take its loop in (_fuses); not an
    output of its module."""
    if node.op != "call_function" or not _pointwise(node) or node in outputs:
        return False
    users = module.users[node]
    if not users or len(users) >= 4:
        return False
    return all(_fuses(u, module, outputs) for u in users)


def _tensors(val: Any) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        return [t for v in val for t in _tensors(v)]
    return []


def _storage(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s._cdata, s.nbytes()


def _stored(module: Schedule, n: fx.Node) -> list[tuple[int, int]]:
    """The storages of n's value, (key, bytes) each, looked up once per Query."""
    out = module.storages.get(n)
    if out is None:
        out = module.storages[n] = [_storage(t) for t in _tensors(n.meta.get("val"))]
    return out


def _events(module: Schedule, carried: dict[int, int], fused: bool, relaid: frozenset = frozenset(),
            gone: Optional[dict] = None, back: Optional[dict] = None) -> tuple[list[list[int]], dict[int, int]]:
    """One module's memory events, the core's plain data (plan::compiled::Phase):
    per storage its bytes, the node that makes it (-1: carried, live before
    the module: the backward's saved set), the node after which it is freed
    (its last reader; never when the module returns it; right after its maker
    when nothing reads it) and whether it is saved (the carried set, or the
    forward's outputs); per node the workspace it holds (_loss.workspace_bytes).
    Also the storages the module leaves live, with their bytes. With `fused`
    (CUDA), a pointwise temporary Inductor keeps in registers takes nothing
    (_unmaterialized); on the CPU every node's output counts as written. Both
    choices are measured (docs/compiled.md): on the CPU counting fused
    temporaries as free missed the backward's peak by up to 50% once values
    were recomputed; on an H100 counting them over-predicted the added peak
    about twofold. `relaid`: inputs Inductor copies before a convolution reads
    them (Query.relaid), made where the first of them reads it. Offloaded
    saved values: `gone` (forward) frees a storage after the node its copy out
    ends under, instead of returning it; `back` (backward) makes a storage of
    the given bytes where its copy back starts, instead of carrying it.
    """
    gone, back = gone or {}, back or {}
    nodes, outputs = module.nodes, set(module.outputs)
    never = len(nodes)
    kept = {k for n in outputs for k, _ in _stored(module, n)}
    given = set(carried) | {k for n in module.inputs for k, _ in _stored(module, n)}
    index: dict[int, int] = {}  # storage -> its row
    size, made, last = [], [], []

    def add(k: int, nbytes: int, at: int) -> None:
        index[k] = len(size)
        size.append(nbytes), made.append(at), last.append(at)

    for k, nbytes in carried.items():
        add(k, nbytes, -1)
    for k, (nbytes, at) in back.items():
        add(k, nbytes, at)
    workspace = []
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            for k, nbytes in _stored(module, a):
                if a in relaid and k not in index:
                    add(k, nbytes, i)
                if k in index:
                    last[index[k]] = i
        if n.op == "call_function" and not (fused and _unmaterialized(n, module, outputs)):
            for k, nbytes in _stored(module, n):
                if k not in index and k not in given:
                    add(k, nbytes, i)
        workspace.append(_loss.workspace_bytes(n))
    for k, r in index.items():  # returned, or carried and never read (a user's output, held through the step)
        if k in kept or last[r] < 0:
            last[r] = never
        if k in gone:
            last[r] = gone[k]
    saved = [int(made[r] < 0 or k in back if carried else k in kept) for k, r in index.items()]
    left = {k: size[r] for k, r in index.items() if last[r] == never}
    return [size, made, last, saved, workspace], left


def memory(fw: Schedule, bw: Schedule, fused: bool, relaid: frozenset = frozenset(),
           offload: Sequence[tuple[fx.Node, int, int]] = ()) -> tuple[int, int, int, int]:
    """(forward's added peak, backward's added peak, saved bytes live at the
    higher of the two, bytes the forward leaves allocated) of one partition,
    walked by the core (plan::compiled::phase_peak): the forward from nothing
    but its inputs, less the inputs it copies (`relaid`, Query.relaid); the
    backward from what the forward returned (the saved set, such copies among
    it, and the outputs), each saved value freed after its last reader, the
    gradients kept. `offload`: saved values kept in host memory between the
    phases, each with the forward node its copy out ends under and the
    backward node its copy back starts under."""
    storage = {n: _storage(n.meta["val"]) for n, _, _ in offload}
    gone = {storage[n][0]: out for n, out, _ in offload}
    back = {storage[n][0]: (storage[n][1], at) for n, _, at in offload}
    events, after = _events(fw, {}, fused, relaid, gone=gone)
    fwd_peak, fwd_saved, retained = call(ops().phase_peak, *events)
    events, _ = _events(bw, after, fused, back=back)
    bwd_peak, bwd_saved, _ = call(ops().phase_peak, *events)
    return fwd_peak, bwd_peak, bwd_saved if bwd_peak >= fwd_peak else fwd_saved, retained


# -- what recomputation costs
def _flops(node: fx.Node) -> float:
    from torch.utils.flop_counter import flop_registry
    packet = getattr(node.target, "overloadpacket", None)
    if packet not in flop_registry:
        return 0.0
    args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda n: n.meta.get("val"))
    try:
        return float(flop_registry[packet](*args, **kwargs, out_val=node.meta.get("val")))
    except Exception:  # a formula that wants what the fake values lack: count it as memory-bound
        return 0.0


def _bytes(vals: Sequence[Any]) -> int:
    return sum(t.numel() * t.element_size() for v in vals for t in _tensors(v))


_TIMES: "weakref.WeakKeyDictionary[Query, dict[fx.Node, float]]" = weakref.WeakKeyDictionary()


def times(q: Query, device: str) -> dict[fx.Node, float]:
    """Modelled ms of every op of the joint graph, from the core's roofline
    (one call): matmul-like work at the device's rate for its element size,
    everything else at memory speed; a pointwise op, fused into its consumer
    when recomputed, pays a share of what it reads."""
    if q not in _TIMES:
        nodes = [n for n in q.joint_graph.nodes if n.op == "call_function"]
        flops, read, written, element, fused = [], [], [], [], []
        for n in nodes:
            out = _tensors(n.meta.get("val"))
            flops.append(_flops(n))
            read.append(_bytes([a.meta.get("val") for a in n.all_input_nodes]))
            written.append(_bytes(out))
            element.append(out[0].element_size() if out else 4)
            fused.append(int(_pointwise(n) or n.target is operator.getitem))
        ms = call(ops().roofline, device, flops, read, written, element, fused) if nodes else []
        _TIMES[q] = dict(zip(nodes, ms))
    return _TIMES[q]


def predict(q: Query, name: str, saved: list[fx.Node], device: str) -> Candidate:
    fw, bw = q.schedules(saved)
    fwd_peak, bwd_peak, at_peak, retained = memory(fw, bw, fused=device == "cuda", relaid=frozenset(q.relaid(fw)))
    forward = {n.name: n for n in q.joint_graph.nodes if n.op == "call_function" and q.is_forward(n)}
    recomputed = [n.name for n in bw.nodes if n.op == "call_function" and n.name in forward]
    kept = [n for n in saved if isinstance(n.meta.get("val"), torch.Tensor)]
    return Candidate(name, list(saved), fwd_peak, bwd_peak, retained, saved_at_peak=at_peak,
                     saved_bytes=sum(v for _, v in {_storage(n.meta["val"]) for n in kept}),
                     extra_ms=sum(times(q, device)[forward[r]] for r in recomputed), recomputed=recomputed)


# -- offloading saved values to host memory
@dataclass
class Offloading:
    """What a graph may offload (docs/compiled.md, "Offload"): the host
    bytes its offloaded values may hold, and the copy rates each way in GB/s
    (0: the rate table's)."""
    host_limit: int = 0  # 0: offload nothing
    d2h_gbps: float = 0.0
    h2d_gbps: float = 0.0
    overlap: bool = True  # copies on their own stream, hidden behind compute where it can


def _effective_reads(n: fx.Node, module: Schedule) -> list[fx.Node]:
    """The module's nodes that read `n`, through views of it (a view keeps its base alive)."""
    out, todo = [], list(module.users.get(n, ()))
    while todo:
        u = todo.pop()
        out.append(u)
        if _view(u):
            todo.extend(module.users.get(u, ()))
    return out


def offloadable(q: Query, fw: Schedule, bw: Schedule) -> list[fx.Node]:
    """The saved values PyTorch's offload pass may move (its can_offload):
    made by the forward, read by the backward, contiguous tensors that are not
    views, getitems or the forward's own outputs; one per storage, and none
    under MIN_OFFLOAD bytes."""
    model_outputs, read = set(fw.outputs[:q.num_fwd_outputs]), {n for n in bw.inputs if bw.users.get(n)}
    out, storages = [], set()
    for n in fw.outputs[q.num_fwd_outputs:]:
        val = n.meta.get("val")
        if n.op != "call_function" or n in model_outputs or n not in read or _view(n) or \
                n.target is operator.getitem or not isinstance(val, torch.Tensor) or not val.is_contiguous() or \
                _storage(val) in storages or _storage(val)[1] < MIN_OFFLOAD:
            continue
        storages.add(_storage(val))
        out.append(n)
    return out


def offload_order(q: Query, fw: Schedule, bw: Schedule, device: str,
                  how: Offloading) -> list[tuple[fx.Node, int, int, float]]:
    """The core's offload order over offloadable(): per value, the forward node
    its copy out ends under, the backward node its copy back starts under, and
    the copy time the compute does not hide (plan::compiled::offload_order)."""
    values = offloadable(q, fw, bw) if how.host_limit > 0 else []
    if not values:
        return []
    ms = times(q, device)
    node_ms = [ms.get(n, 0.0) for n in fw.nodes] + [ms.get(n, 0.0) for n in bw.nodes]
    # A node the backward recomputes is in both phases: each phase's positions apart.
    fw_at, bw_at = {n: i for i, n in enumerate(fw.nodes)}, {n: len(fw.nodes) + i for i, n in enumerate(bw.nodes)}
    last = [max((fw_at[u] for u in _effective_reads(n, fw) if u in fw_at), default=fw_at[n]) for n in values]
    first = [min(bw_at[u] for u in bw.users[n]) for n in values]
    picked, out_done, in_start, exposed = call(
        ops().offload_order, node_ms, [_storage(n.meta["val"])[1] for n in values], last, first, device,
        how.d2h_gbps, how.h2d_gbps, how.overlap, how.host_limit)
    forward = len(fw.nodes)
    return [(values[i], min(o, forward - 1), max(b - forward, 0), e)
            for i, o, b, e in zip(picked, out_done, in_start, exposed)]


def offloaded(q: Query, base: Candidate, k: int, device: str,
              plan: tuple[Schedule, Schedule, list]) -> Candidate:
    """`base` with the first `k` values of its offload order kept in host
    memory between the phases: the same partition, its memory walked again
    with the copies' positions, its time plus what the copies leave exposed.
    `plan`: base's forward, backward and offload order (Frontier._offload_plan)."""
    fw, bw, order = plan
    order = order[:k]
    assert len(order) == k, f"{base.name} has {len(order)} values to offload, not {k}"
    fwd_peak, bwd_peak, at_peak, retained = memory(
        fw, bw, fused=device == "cuda", relaid=frozenset(q.relaid(fw)), offload=[(n, o, b) for n, o, b, _ in order])
    return Candidate(f"{base.name}+offload:{k}", list(base.saved), fwd_peak, bwd_peak, retained,
                     base.saved_bytes, at_peak, base.extra_ms + sum(e for *_, e in order), list(base.recomputed),
                     [n.name for n, *_ in order], sum(_storage(n.meta["val"])[1] for n, *_ in order))


def saving(q: Query, saved: list[fx.Node], device: str) -> tuple[int, float]:
    """(bytes saved, modelled recompute ms) of a saved set, without building
    its modules (what pricing a layer option needs, at a fraction of
    predict's cost): the forward nodes the backward recomputes are those it
    reaches from its own nodes through forward nodes that are not saved."""
    kept = {n for n in saved}
    stop = kept | {n for n in q.joint_graph.nodes if n.op == "placeholder"}
    seen: set[fx.Node] = set()
    todo = [a for n in q.joint_graph.nodes if n.op == "call_function" and not q.is_forward(n)
            for a in n.all_input_nodes]
    while todo:
        n = todo.pop()
        if n in seen or n in stop or not q.is_forward(n):
            continue
        seen.add(n)
        todo.extend(n.all_input_nodes)
    tensors = [n for n in kept if isinstance(n.meta.get("val"), torch.Tensor)]
    return (sum(v for _, v in {_storage(n.meta["val"]) for n in tensors}),
            sum(times(q, device)[n] for n in seen if n.op == "call_function"))


# -- the search
@dataclass
class Choice:
    chosen: Candidate
    default: Candidate  # plain torch.compile's
    candidates: list[Candidate]
    budget_bytes: Optional[int]  # the byte budget the candidates were held to (None: no budget)
    split: Optional[tuple[int, int]] = None  # (F, A) a percentage was resolved on: kept for the graph's later plans
    roomier: Optional[Candidate] = None  # where none fits: the lowest with offload unbounded by the host limit


class Frontier:
    """Candidates of one joint graph, priced once, chosen from under a budget.
    `remembered`: the candidates an earlier compile of the same joint graph
    priced; they are chosen from without pricing them again, and only the
    chosen one is made again on this trace (fresh)."""

    def __init__(self, q: Query, device: str, remembered: Sequence[Candidate] = (),
                 priced: Optional[Callable[[str], None]] = None, offloading: Offloading = Offloading()) -> None:
        self.q, self.device, self.how = q, device, offloading
        self.priced = priced or (lambda name: None)  # told each candidate's name as it is priced (progress)
        self.seen: dict[frozenset, Candidate] = {}
        self.by_name = {c.name: c for c in remembered}
        for c in remembered:
            self.seen[_seen_key(c.saved, c.offloaded)] = c
        self.stale = {id(c) for c in remembered}  # priced on an earlier trace: their nodes are not this graph's
        self._layer_groups: Optional[list[list[fx.Node]]] = None
        self._plans: dict[str, tuple] = {}  # per base candidate: its phases and its offload order (_offload_plan)
        self.default = self.by_name.get("compile:1") or self._add("compile:1", q.pytorch(1.0))

    def _add(self, name: str, saved: list[fx.Node]) -> Candidate:
        key = _seen_key(saved)
        if key not in self.seen:
            self.priced(name)
            self.seen[key] = predict(self.q, name, saved, self.device)
        return self.seen[key]

    def fresh(self, c: Candidate) -> Candidate:
        """`c` on this trace of the graph: remade from its name where it was remembered."""
        if id(c) not in self.stale:
            return c
        base, _, k = c.name.partition("+offload:")
        name, _, arg = base.partition(":")
        saved = self.q.pytorch(float(arg)) if name == "compile" else self._checkpoint_saved() if name == CHECKPOINT \
            else self.q.with_recomputed(self._layer_anchors(arg) if name == "layers" else self.order()[:int(arg)])
        made = predict(self.q, base, saved, self.device)
        made = offloaded(self.q, made, int(k), self.device, self._offload_plan(made)) if k else made
        assert made.key == c.key, f"{c.name} saves other values on this trace of the same graph"
        return made

    def pytorch_ladder(self) -> None:
        for x in LADDER:
            if f"compile:{x:g}" not in self.by_name:
                self._add(f"compile:{x:g}", self.q.pytorch(x))
        # Not compile:0: PyTorch then saves the inputs alone, random seeds
        # not among them (_mincut.pin_random); every anchor recomputed is mutwo's floor.
        order = self.order()
        self._prefix(order, len(order))
        self.checkpointed()

    def checkpointed(self) -> Optional[Candidate]:
        """Per-layer checkpointing (CHECKPOINT; None where no layer repeats):
        each layer's inputs saved, the layers recomputed from them. Its backward
        reads an input only as it recomputes that layer, so offloading them
        lowers its peak, where the floor's values come back at the backward's start."""
        if CHECKPOINT not in self.by_name and (saved := self._checkpoint_saved()) is not None:
            self.by_name[CHECKPOINT] = self._add(CHECKPOINT, saved)
        return self.by_name.get(CHECKPOINT)

    def _checkpoint_saved(self) -> Optional[list[fx.Node]]:
        forward = [n for n in self.q.joint_graph.nodes if n.op == "call_function" and self.q.is_forward(n)]
        inputs = [n for n in _layers.inputs(forward, {_layers.layer_of(g[0]) for g in self._groups()}) if not _view(n)]
        return self.q.checkpointed(inputs) if inputs else None

    def greedy(self, budget: int, corrections: Corrections) -> None:
        """The shortest prefix of order() that fits, by bisection (more recomputed, less saved)."""
        order = self.order()
        _shortest(len(order), lambda k: self._prefix(order, k).peak(corrections) <= budget)

    def layered(self, budget: int, corrections: Corrections) -> None:
        """The layer planner's plan under `budget` (_layers.py), where the
        model repeats a layer: options priced on a template layer, one exact
        solve across layers, the result priced whole; solved again with the
        bytes it missed by, at most three times."""
        groups = self._groups()
        base = self._prefix(self.order(), 0) if groups else None
        if base is None or base.peak(corrections) <= budget:
            return  # min-cut alone fits: nothing for the layers to free
        template = groups[len(groups) // 2]
        options = [_layers.Option(0, 0, 0.0)]
        most = min(LAYER_OPTIONS, len(template))
        for k in sorted({round(i * len(template) / most) for i in range(1, most + 1)}):
            self.priced(f"layer option {k}")
            saved_bytes, extra_ms = saving(self.q, self.q.with_recomputed(template[:k]), self.device)
            options.append(_layers.Option(k, base.saved_bytes - saved_bytes, extra_ms - base.extra_ms))
        need = base.peak(corrections) - budget
        for _ in range(3):
            ks = _layers.solve(options, len(groups), need)
            if ks is None:
                return
            over = self._layers(ks).peak(corrections) - budget
            if over <= 0:
                return
            need += over

    def _groups(self) -> list[list[fx.Node]]:
        """The repeated layers' anchors, each layer in the template's order of roles."""
        if self._layer_groups is None:
            order = self.order()
            groups = _layers.layers(order)
            if groups:
                t = groups[len(groups) // 2]
                tname = _layers.layer_of(t[0])
                groups = [_layers.aligned(g, t, _layers.layer_of(g[0]), tname) for g in groups]
            self._layer_groups = groups
        return self._layer_groups

    def _layer_anchors(self, arg: str) -> list[fx.Node]:
        ks = [int(k) for k in arg.split(",")]
        groups = self._groups()
        assert len(ks) == len(groups), f"layers:{arg} names {len(ks)} layers; this graph repeats {len(groups)}"
        return [n for g, k in zip(groups, ks) for n in g[:k]]

    def _layers(self, ks: Sequence[int]) -> Candidate:
        name = "layers:" + ",".join(map(str, ks))
        if name in self.by_name:
            return self.by_name[name]
        return self._add(name, self.q.with_recomputed(self._layer_anchors(name.split(":", 1)[1])))

    def order(self) -> list[fx.Node]:
        """The anchors in μ-TWO's order (the core's recompute_order: bytes freed
        per modelled ms, highest first; ties by name)."""
        anchors = sorted(self.q.anchors(), key=lambda n: n.name)
        ms = times(self.q, self.device)
        order = call(ops().recompute_order, [float(ms[n]) for n in anchors],
                     [_bytes([n.meta.get("val")]) for n in anchors]) if anchors else []
        return [anchors[i] for i in order]

    def _prefix(self, order: list[fx.Node], k: int) -> Candidate:
        if f"mutwo:{k}" in self.by_name:
            return self.by_name[f"mutwo:{k}"]
        return self._add(f"mutwo:{k}", self.q.with_recomputed(order[:k]))

    def spread(self, most: int = SPREAD) -> None:
        """Prefixes of order() at `most` evenly spaced lengths: a menu for
        choosing across graphs, where no single graph's budget is known."""
        order = self.order()
        for i in range(1, min(most, len(order)) + 1):
            self._prefix(order, round(i * len(order) / min(most, len(order))))

    def named(self, name: str) -> Candidate:
        """The candidate `name` (as Candidate.name spells it) of this joint graph."""
        if name in self.by_name:
            return self.by_name[name]
        if "+offload:" in name:
            base, _, k = name.partition("+offload:")
            return self._offloaded(self.fresh(self.named(base)), int(k))
        kind, _, value = name.partition(":")
        if kind == "compile":
            return self.default if float(value) == 1 else self._add(name, self.q.pytorch(float(value)))
        if kind == "layers":
            return self._layers([int(k) for k in value.split(",")])
        if name == CHECKPOINT:
            made = self.checkpointed()
            assert made is not None, f"{CHECKPOINT}: this graph repeats no layer"
            return made
        return self._prefix(self.order(), int(value))

    def lowest(self, corrections: Corrections) -> Candidate:
        return lowest(list(self.seen.values()), corrections)

    def _offloaded(self, base: Candidate, k: int) -> Candidate:
        name = f"{base.name}+offload:{k}"
        if name not in self.by_name:
            self.priced(name)
            made = offloaded(self.q, base, k, self.device, self._offload_plan(base))
            self.by_name[name] = self.seen.setdefault(_seen_key(made.saved, made.offloaded), made)
        return self.by_name[name]

    def _offload_plan(self, base: Candidate) -> tuple[Schedule, Schedule, list]:
        """base's forward and backward, and its offload order, made once."""
        if base.name not in self._plans:
            fw, bw = self.q.schedules(base.saved)
            self._plans[base.name] = (fw, bw, offload_order(self.q, fw, bw, self.device, self.how))
        return self._plans[base.name]

    def roomier(self, corrections: Corrections) -> Optional[Candidate]:
        """The lowest plan's offload floor with no host limit, where the limit cut its offload
        order short: what more host memory would reach (for a refusal); None where it cut nothing."""
        if self.how.host_limit <= 0:
            return None
        base = self.fresh(lowest([c for c in self.seen.values() if not c.offloaded], corrections))
        fw, bw, order = self._offload_plan(base)
        free = Offloading(1 << 62, self.how.d2h_gbps, self.how.h2d_gbps, self.how.overlap)
        full = offload_order(self.q, fw, bw, self.device, free)
        if len(full) <= len(order):
            return None
        made = offloaded(self.q, base, len(full), self.device, (fw, bw, full))
        return made if made.peak(corrections) < self.lowest(corrections).peak(corrections) else None

    def offloading(self, budget: Optional[int], corrections: Corrections) -> None:
        """Offload where recomputing alone does not fit, or costs more: from the lowest candidate
        that recomputes, checkpoint and the two fastest that miss `budget`, the shortest prefix of
        each one's offload order that fits, by bisection; with no budget ("lowest"), the whole order."""
        if self.how.host_limit <= 0:
            return
        plain = [c for c in self.seen.values() if not c.offloaded]
        bases = [lowest(plain, corrections)] + [c for c in (self.checkpointed(),) if c is not None]
        if budget is not None:
            bases += sorted((c for c in plain if c.peak(corrections) > budget), key=lambda c: c.extra_ms)[:2]
        for base in {c.name: c for c in bases}.values():
            base = self.fresh(base)
            n = len(self._offload_plan(base)[2])
            if n and budget is None:
                self._offloaded(base, n)
            elif n:
                _shortest(n, lambda k: self._offloaded(base, k).peak(corrections) <= budget)


def _shortest(most: int, fits: Callable[[int], bool]) -> None:
    """Bisects for the least k in 1..`most` that fits, where more fits better
    (a longer prefix recomputes or offloads more); each k tried is priced."""
    if most == 0 or not fits(most):
        return
    lo, hi = 0, most
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid


def roomier_args(host_limit: int, roomier: Optional[Candidate], corrections: Corrections) -> tuple[int, int, int]:
    """refusal_text's (host_limit, roomier_lowest, roomier_host): what more host memory would reach."""
    return (host_limit, roomier.peak(corrections), roomier.host_bytes) if roomier else (0, 0, 0)


def _seen_key(saved: Sequence[fx.Node], offloaded: Sequence[str] = ()) -> frozenset:
    return frozenset(n.name for n in saved) | {"offload:" + name for name in offloaded}


def _priced(candidates: Sequence[Candidate], corrections: Corrections) -> tuple[list[int], list[float]]:
    return [c.peak(corrections) for c in candidates], [float(c.extra_ms) for c in candidates]


def lowest(candidates: Sequence[Candidate], corrections: Corrections) -> Candidate:
    """The candidate of the lowest corrected peak, the faster of equals (the core's rule)."""
    return candidates[call(ops().lowest, *_priced(candidates, corrections))]


def fastest_within(candidates: Sequence[Candidate], budget: int, corrections: Corrections) -> Optional[Candidate]:
    """The fastest candidate whose corrected peak is within `budget`, None if none is (the core's rule)."""
    i = call(ops().fastest_within, *_priced(candidates, corrections), budget)
    return candidates[i] if i >= 0 else None


def choose(q: Query, device: str, budget: Any, corrections: Corrections, planner: str,
           remembered: Sequence[Candidate] = (), menu: bool = False, prefer: Optional[str] = None,
           priced: Optional[Callable[[str], None]] = None, split: Optional[tuple[int, int]] = None,
           offloading: Offloading = Offloading()) -> Choice:
    """The fastest candidate whose corrected peak fits `budget` (a
    _budget.Budget: bytes, a fraction of the activations, "lowest"; None: plain
    compile's). Raises FloorError when none fits, unless `menu` (a graph of a
    step planned under one budget, _step.py): then every candidate of the
    ladder and of spread() is priced, for choosing across graphs later, and the
    lowest runs where none fits; `prefer` names the candidate an earlier
    process's step chose, which runs instead. `remembered`: an earlier
    compile's candidates of the same joint graph (Frontier); `priced` is told
    each candidate as it is priced. `split`: the (F, A) this graph's first plan
    resolved a percentage on, so that a measurement never moves its bytes.
    `offloading`: what the graph may offload to host memory (none by default)."""
    f = Frontier(q, device, remembered, priced, offloading)
    choice = _choose(f, budget, corrections, planner, menu, split)
    if menu and prefer is not None and choice.chosen.name != prefer:
        choice.chosen = next((c for c in choice.candidates if c.name == prefer), choice.chosen)
    choice.chosen = f.fresh(choice.chosen)
    return choice


def named(q: Query, device: str, name: str, remembered: Sequence[Candidate] = (),
          priced: Optional[Callable[[str], None]] = None, offloading: Offloading = Offloading()) -> Choice:
    """The candidate `name` of this joint graph (the step's choice), and plain compile's."""
    f = Frontier(q, device, remembered, priced, offloading)
    chosen = f.fresh(f.named(name))
    return Choice(chosen, f.default, list(f.seen.values()), None)


def _choose(f: Frontier, budget: Any, corrections: Corrections, planner: str, menu: bool = False,
            split: Optional[tuple[int, int]] = None) -> Choice:
    if menu and planner != "none" and budget is not None and budget.kind in ("bytes", "fraction"):
        # A fraction here is the graph's own share, for the step's first plan
        # before the step's one budget is resolved (_step.Step.resolve).
        split = split or _split(f.default, corrections)
        limit = budget.bytes if budget.kind == "bytes" else _budget.resolve(budget, *split)
        f.pytorch_ladder()
        f.spread()
        f.greedy(limit, corrections)
        f.layered(limit, corrections)
        f.offloading(limit, corrections)
        f.offloading(None, corrections)  # the offload floor, for the step's choice across graphs
        best = fastest_within(list(f.seen.values()), limit, corrections)
        return Choice(best or f.lowest(corrections), f.default, list(f.seen.values()), limit,
                      split if budget.kind == "fraction" else None, None if best else f.roomier(corrections))
    if planner.startswith("candidate:"):  # one named candidate, whatever the budget (the model's own checks)
        f.pytorch_ladder()
        named = f.named(planner.split(":", 1)[1])
        return Choice(named, f.default, list(f.seen.values()), None)
    if budget is None or planner == "none" or budget.whole:
        # 100%: plain compile's plan, never bytes resolved on its predicted
        # peak (which a measurement may exceed, and a frozen resolution refuse).
        return Choice(f.default, f.default, [f.default], None)
    lowest_wanted = budget.kind == "lowest"
    split = split or _split(f.default, corrections)
    limit = _budget.resolve(budget, *split) if not lowest_wanted else 0
    if not lowest_wanted and f.default.peak(corrections) <= limit:
        return Choice(f.default, f.default, [f.default], limit, split)
    f.pytorch_ladder()
    if menu:
        f.spread()
    if lowest_wanted:
        low = f.lowest(corrections)
        f.greedy(low.peak(corrections), corrections)
        f.offloading(None, corrections)
        best = f.lowest(corrections)
        return Choice(best, f.default, list(f.seen.values()), best.peak(corrections))
    f.greedy(limit, corrections)
    f.layered(limit, corrections)
    f.offloading(limit, corrections)
    best = fastest_within(list(f.seen.values()), limit, corrections)
    if best is None:
        f.offloading(None, corrections)  # the offload floor, for the refusal
        low = f.lowest(corrections).peak(corrections)
        # Nothing measured yet, and the budget within the model's tolerance of
        # the floor: run the lowest candidate, and its measurement decides.
        # Further below, no step need run to know (the core's surely_below).
        if not corrections.by_plan and not call(ops().surely_below, limit, low):
            return Choice(f.lowest(corrections), f.default, list(f.seen.values()), limit, split)
        fixed, activation = split if budget.kind == "fraction" else (0, 0)
        raise FloorError(limit, low, f.default.peak(corrections), fixed, activation, f.lowest(corrections).host_bytes,
                         roomier_args(f.how.host_limit, f.roomier(corrections), corrections))
    return Choice(best, f.default, list(f.seen.values()), limit, split)


def _split(default: Candidate, corrections: Corrections) -> tuple[int, int]:
    """(F, A) of plain compile's partition, as docs/budgets.md defines them:
    A the saved activations live at its peak, F the rest of that peak."""
    unplanned = default.peak(corrections)
    activations = min(default.saved_at_peak, unplanned)
    return unplanned - activations, activations


class FloorError(Exception):
    """No candidate fits: the budget, the lowest predicted peak, plain
    compile's, (for a percentage) what a percentage is of, and the host
    memory the lowest offloads to."""

    def __init__(self, budget: int, lowest: int, unplanned: int, fixed: int = 0, activation: int = 0,
                 host: int = 0, roomier: tuple[int, int, int] = (0, 0, 0)) -> None:
        super().__init__(budget, lowest, unplanned)
        self.budget, self.lowest, self.unplanned = budget, lowest, unplanned
        self.fixed, self.activation, self.host = fixed, activation, host
        self.roomier = roomier  # roomier_args: what more host memory would reach

    def text(self, what: str) -> str:
        """The core's refusal (plan::compiled::refusal_text), naming `what` was planned."""
        return call(ops().refusal_text, self.budget, self.lowest, self.unplanned, what, self.fixed, self.activation, 0,
                    self.host, *self.roomier)
