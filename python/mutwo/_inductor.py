# mutwo plans, Inductor compiles (docs/python.md, "The compiled route").
#
# torch.compile(model, backend=mutwo.torch.backend(budget)) hands each graph
# Dynamo captures to Inductor's compile_fx with a custom partitioner
# (torch._inductor.config.custom_partitioner_fn). AOTAutograd calls it with the
# joint forward-and-backward graph after Inductor's decompositions and joint
# passes; there mutwo's C++ planner reads the graph (written as a step file
# whose tensors are fake), decides per forward value keep or recompute under
# the budget, and the decision goes to PyTorch's own partitioner as
# checkpointing tags (n.meta["recompute"] = MUST_SAVE / MUST_RECOMPUTE, one
# ac_graph_id). Inductor then fuses and generates the kernels of both parts.
#
# The budget bounds what the compiled forward and backward add to what was
# allocated when the step began. Each step is measured; a step over budget
# plans again with the overshoot taken off and recompiles, a bounded number of
# times, then raises BudgetError naming the lowest measured peak.
from __future__ import annotations

import hashlib
import json
import operator
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.custom_graph_pass import CustomPartitionerFn
from torch.utils.checkpoint import CheckpointPolicy

from mutwo import capture

MAX_RECOMPILES = 3  # plans after the first one, per graph, before BudgetError
_MARGIN = 0.01  # of the budget, taken off again when a step is over it
_SOURCE_HASH = hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()[:16]  # in the partitioner's uuid


class _PlanWriter(capture._Writer):
    """The joint graph as a step file for planning: Inductor's graph also holds
    prims (its random number generation, dtype conversions)."""
    namespaces = ("aten::", "prims::")


def _meta(node: torch.fx.Node) -> Any:
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat)) or (
            isinstance(val, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in val.shape)):
        raise capture.CaptureError(f"node {node.name}: a symbolic shape; mutwo plans static shapes: compile with "
                                   "torch.compile(..., dynamic=False)")
    return capture._describe(val)


def _shares(node: torch.fx.Node) -> list[set[int]]:
    """Per output of `node`, the argument positions whose storage it shares (from the fake tensors)."""
    def key(t: Any) -> Optional[int]:
        return t.untyped_storage()._cdata if isinstance(t, torch.Tensor) else None
    storages: dict[int, set[int]] = {}
    for pos, a in enumerate(capture._normalize_args(node)):
        for x in capture._flatten(a):
            k = key(x.meta.get("val")) if isinstance(x, torch.fx.Node) else None
            if k is not None:
                storages.setdefault(k, set()).add(pos)
    val = node.meta.get("val")
    outs = val if isinstance(val, (tuple, list)) else [val]
    return [storages.get(key(o), set()) if key(o) is not None else set() for o in outs]


def _scope(path: str) -> str:
    """A module path as the step file takes it: "L['self'].layers[0].attn" -> "layers.0.attn"."""
    path = re.sub(r"^(L\['self'\]|L__self__|L\['fn'\])\.?", "", path)
    path = re.sub(r"\[['\"]?([^\]'\"]*)['\"]?\]", r".\1", path)
    path = re.sub(r"[^A-Za-z0-9_.-]", "_", path)
    return re.sub(r"\.+", ".", path).strip(".")


@dataclass
class JointView:
    """What the planner needs of AOTAutograd's joint graph."""
    document: dict
    value_node: dict[str, torch.fx.Node]  # value name -> the FX node holding it
    fused: list[str]  # first outputs of nodes Inductor fuses into their consumers
    unmaterialized: list[str]  # temporaries it never writes to memory
    forward: set[torch.fx.Node]  # what the forward outputs are computed from


def _pointwise(node: torch.fx.Node) -> bool:
    """Elementwise: Inductor computes it inside the loops of what reads it."""
    if node.target in (torch.ops.prims.inductor_random.default, torch.ops.prims.inductor_lookup_seed.default):
        return True
    return torch.Tag.pointwise in getattr(node.target, "tags", ())


def _fused(node: torch.fx.Node) -> bool:
    """Nodes Inductor fuses into the kernels around them (pointwise, views,
    its own random numbers): recomputing one inside a consumer costs little."""
    if _pointwise(node):
        return True
    return isinstance(node.target, torch._ops.OpOverload) and bool(_shares(node)[0])  # a view


_REALIZE_READS = 4  # Inductor realizes a buffer read this many times or more (config.realize_reads_threshold)


def _unmaterialized(node: torch.fx.Node, forward: set) -> bool:
    """A temporary Inductor never writes to memory: made by a fused node and
    read only by pointwise nodes or reductions (which take their inputs' loops
    in) of the same part of the step, and not returned. A view of it read
    elsewhere (by a matmul, by the backward) makes it real, so any view does."""
    if node.op != "call_function" or not _pointwise(node) or len(node.users) >= _REALIZE_READS:
        return False
    if not isinstance(node.meta.get("val"), torch.Tensor) or not node.users:
        return False
    for u in node.users:
        if u.op != "call_function" or (u in forward) != (node in forward):
            return False
        if not (_pointwise(u) or torch.Tag.reduction in getattr(u.target, "tags", ())):
            return False
    return True


def view_joint(gm: torch.fx.GraphModule, joint_inputs: Sequence[Any], num_fwd_outputs: int,
               static_inputs: Sequence[int]) -> JointView:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    primal_nodes = [n for n in placeholders if not n.name.startswith("tangents")]
    tangent_nodes = [n for n in placeholders if n.name.startswith("tangents")]
    static = set(static_inputs)
    primals = []
    for i, n in enumerate(primal_nodes):
        role, key = ("parameter", n.name) if i in static else ("input", i)
        primals.append(capture.Primal(role, key, n.meta.get("val")))
        n.meta["mutwo_primal"] = primals[-1]
    out_args = list(next(n for n in gm.graph.nodes if n.op == "output").args[0])
    fwd = [a for a in out_args[:num_fwd_outputs] if isinstance(a, torch.fx.Node)
           and isinstance(a.meta.get("val"), torch.Tensor)]
    grads = {i: g for i, g in enumerate(out_args[num_fwd_outputs:]) if isinstance(g, torch.fx.Node)}
    # Each tangent is the gradient of the next forward output of its type.
    tangent_of, at = [], 0
    for t in tangent_nodes:
        tv = t.meta["val"]
        while at < len(fwd) and (fwd[at].meta["val"].shape, fwd[at].meta["val"].dtype) != (tv.shape, tv.dtype):
            at += 1
        if at == len(fwd):
            raise capture.CaptureError(f"{t.name}: no forward output of its type ({tuple(tv.shape)}, {tv.dtype})")
        tangent_of.append(at)
        at += 1
    joint = capture.Joint(gm, primals, None, grads, [], primal_nodes, [], fwd, tangent_of)
    nodes = [n for n in gm.graph.nodes if n.op in ("placeholder", "call_function", "get_attr")]
    w = _PlanWriter(joint, {n: _meta(n) for n in nodes},
                    {n: _shares(n) for n in nodes if isinstance(n.target, torch._ops.OpOverload)})
    try:
        doc, _ = capture.written(w, "compiled", None)
    finally:
        for n in primal_nodes:
            n.meta.pop("mutwo_primal", None)
    for node in doc["nodes"]:
        node["scope"] = _scope(node["scope"])
    by_name = {n.name: n for n in gm.graph.nodes}
    value_node = {name: by_name[name] for name in w.value_of.values() if name in by_name}
    fused = [name for name, n in value_node.items() if n.op == "call_function" and _fused(
        n.args[0] if n.target is operator.getitem else n)]
    forward = set().union(*(capture._ancestors(o) for o in fwd))
    unmaterialized = [name for name, n in value_node.items() if _unmaterialized(n, forward)]
    return JointView(doc, value_node, fused, unmaterialized, forward)


def tag(gm: torch.fx.GraphModule, view: JointView, decisions: dict[str, str]) -> dict[str, int]:
    """Checkpointing tags from mutwo's decisions: a recomputed activation and the
    forward nodes it is recomputed through MUST_RECOMPUTE, every other forward
    node MUST_SAVE (never recomputed; saved if the backward reads it). Returns
    how many of each."""
    recompute = {view.value_node[n] for n, d in decisions.items() if d == "recompute" and n in view.value_node}
    kept = {view.value_node[n] for n, d in decisions.items() if d != "recompute" and n in view.value_node}
    todo = list(recompute)
    while todo:  # up to the kept activations and the graph's inputs
        n = todo.pop()
        for a in n.all_input_nodes:
            if a.op == "call_function" and a not in kept and a not in recompute:
                recompute.add(a)
                todo.append(a)
    for n in list(recompute):  # a multi-output op is recomputed whole
        if n.target is operator.getitem:
            recompute.add(n.args[0])

    def recomputable(n: torch.fx.Node) -> bool:  # a seeded random op is never (attention with dropout_p, too)
        if n.target is operator.getitem:
            return recomputable(n.args[0])
        return torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ())

    counts = {"recompute": 0, "save": 0}
    for n in gm.graph.nodes:
        if n.op != "call_function" or n not in view.forward:
            continue
        must = n in recompute and recomputable(n)
        n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE if must else CheckpointPolicy.MUST_SAVE
        n.meta["ac_graph_id"] = 0
        counts["recompute" if must else "save"] += 1
    return counts


@dataclass
class Attempt:
    """One plan of one graph, as compiled and as measured."""
    planner_budget: int  # the budget the planner was given (bytes added)
    plan: dict = field(default_factory=dict)  # torch.ops.mutwo.plan's answer
    tags: dict = field(default_factory=dict)  # forward nodes tagged recompute and save
    measured: list[int] = field(default_factory=list)  # each step's measured added peak


class _Partitioner(CustomPartitionerFn):
    """Plans the joint graph with mutwo, then partitions it by the plan's tags."""

    def __init__(self, graph: "CompiledGraph", attempt: Attempt) -> None:
        self.graph, self.attempt = graph, attempt

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[object],
                 **kwargs: Any) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
        gm.graph.eliminate_dead_code()
        view = view_joint(gm, joint_inputs, kwargs["num_fwd_outputs"],
                          kwargs.get("static_lifetime_input_indices") or [])
        budget = self.attempt.planner_budget
        self.attempt.plan = self.graph.plan(view, budget if budget >= 0 else None)
        decisions = {a["name"]: a["decision"] for a in self.attempt.plan["activations"]}
        self.attempt.tags = tag(gm, view, decisions)
        return min_cut_rematerialization_partition(gm, joint_inputs, **kwargs)

    def uuid(self) -> Any:
        """What the plan depends on besides the graph, which Inductor's cache key holds already."""
        o = self.graph.options
        return f"mutwo-{_SOURCE_HASH}-{o['planner']}-{o['budget']}-{self.attempt.planner_budget}-{o['device']}"


class CompiledGraph:
    """One graph Dynamo hands the backend: compiled under mutwo's plan,
    measured each step, planned again while over budget."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict,
                 memory: Callable[[str, bool], tuple[int, int]], budget_error: type) -> None:
        self.gm, self.example_inputs, self.options = gm, list(example_inputs), options
        self.memory, self.budget_error = memory, budget_error
        devices = {a.device.type for a in example_inputs if isinstance(a, torch.Tensor)}
        self.device = "cuda" if "cuda" in devices else "cpu"
        options.setdefault("device", self.device)
        self.attempts: list[Attempt] = []
        self.budget_bytes: Optional[int] = None  # the user's budget in bytes, known after the first plan
        self.error: Optional[str] = None
        self._replan: Optional[int] = None  # the planner's next budget, after a step over budget
        self._base = self._fwd_end = 0
        self._fwd_peak = 0
        self.fn = self._compile(None)

    # -- planning and compiling
    def plan(self, view: JointView, planner_budget: Optional[int]) -> dict:
        from mutwo.torch import _call, _ops  # the extension, loaded by backend()
        budget = self.options["budget"] if planner_budget is None else str(planner_budget)
        opts = {"budget": budget, "planner": self.options["planner"], "device": self.device,
                "fused": view.fused, "unmaterialized": view.unmaterialized, "label": "compiled"}
        plan = json.loads(_call(_ops().plan, json.dumps(view.document), json.dumps(opts)))
        if self.budget_bytes is None:
            self.budget_bytes = plan["budget_bytes"]
        return plan

    def _compile(self, planner_budget: Optional[int]) -> Callable:
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner
        attempt = Attempt(-1 if planner_budget is None else planner_budget)
        self.attempts.append(attempt)

        def inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
            code = compile_fx_inner(gm, example_inputs, **kwargs)
            if kwargs.get("is_backward"):
                run = code.current_callable

                def measured(args: list) -> Any:
                    self._backward_begins()
                    out = run(args)
                    self._backward_ends()
                    return out
                code.current_callable = measured
            return code

        part = _Partitioner(self, attempt)
        # AOTAutograd's cache would skip the partitioner, and with it the plan
        # this object reports and measures against; Inductor's own cache of
        # the partitioned graphs' kernels still serves.
        with torch._inductor.config.patch(custom_partitioner_fn=part), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            fn = compile_fx(self.gm, self.example_inputs, inner_compile=inner)
        if attempt.planner_budget < 0:
            attempt.planner_budget = attempt.plan["budget_bytes"]
        return fn

    # -- measuring
    def __call__(self, *args: Any) -> Any:
        if self._replan is not None:
            self._recompile()
        if self.error:
            raise self.budget_error(self.error)
        self._base = self.memory(self.device, True)[0]
        out = self.fn(*args)
        current, peak = self.memory(self.device, False)
        self._fwd_peak, self._fwd_end = peak - self._base, current
        return out

    def _backward_begins(self) -> None:
        self.memory(self.device, True)

    def _backward_ends(self) -> None:
        peak = max(self._fwd_peak, self.memory(self.device, False)[1] - self._base)
        attempt = self.attempts[-1]
        attempt.measured.append(peak)
        if peak <= self.budget_bytes or self.error:
            return
        recompiles = len(self.attempts) - 1
        lowest = min(m for a in self.attempts for m in a.measured)
        if recompiles >= MAX_RECOMPILES:
            self.error = (f"budget {self.budget_bytes} B cannot be met: the lowest measured peak of this compiled "
                          f"step is {lowest} B after {recompiles} recompilations; raise the budget or lower the batch")
            return
        # Planned again on the next call: autograd runs this with grad mode off, and what
        # compiles here would be an inference graph.
        # The prediction misses by more the more is recomputed (fusion changes
        # with the plan), so the planner's budget shrinks in proportion to the
        # overshoot, with a margin of 1% of the budget.
        self._replan = max(0, int(attempt.planner_budget * self.budget_bytes / peak - self.budget_bytes * _MARGIN))

    def _recompile(self) -> None:
        cut, self._replan = self._replan, None
        lowest = min(m for a in self.attempts for m in a.measured)
        try:
            self.fn = self._compile(cut)
        except self.budget_error as e:  # the planner cannot go lower
            self.error = f"{e}; the lowest measured peak of this compiled step is {lowest} B"

    def info(self) -> dict:
        last = self.attempts[-1]
        measured = [m for a in self.attempts for m in a.measured]
        return {"compiler": "inductor", "device": self.device, "planner": self.options["planner"],
                "budget": self.options["budget"], "budget_bytes": self.budget_bytes,
                "predicted_peak_bytes": last.plan.get("predicted_peak_bytes"),
                "unplanned_peak_bytes": last.plan.get("unplanned_peak_bytes"),
                "measured_peak_bytes": last.measured[-1] if last.measured else None,
                "lowest_measured_peak_bytes": min(measured) if measured else None,
                "recompilations": len(self.attempts) - 1,
                "attempts": [{"planner_budget_bytes": a.planner_budget,
                              "predicted_peak_bytes": a.plan.get("predicted_peak_bytes"),
                              "measured_peak_bytes": a.measured, "tags": a.tags} for a in self.attempts],
                "activations": last.plan.get("activations", []), "error": self.error}
