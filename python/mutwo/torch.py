# mutwo inside the user's own training loop (docs/python.md):
#
#   import mutwo.torch
#   model = mutwo.torch.wrap(model, budget="60%")                          # eager
#   model = torch.compile(model, backend=mutwo.torch.backend(budget="6GiB"))  # torch 2.x
#
# On the first call with a new input shape the module's forward and backward
# are captured as one joint graph (mutwo.capture, AOTAutograd), profiled on
# the user's own tensors, planned under the budget and rewritten by mutwo's
# C++ core (the extension libmutwo_torch.so, src/torchext). Every call then
# runs the forward part of the rewritten graph, and loss.backward() its
# backward part, recomputing dropped activations where the rewrite put them,
# on mutwo's executor. Parameters stay the user's nn.Parameters: the user's
# loss, backward() and optimizer are unchanged.
from __future__ import annotations

import inspect
import json
import os
import warnings
from typing import Any, Callable, Optional, Sequence

import torch

from mutwo import _budget, _compat, _registry
from mutwo._progress import Progress, format_bytes, quiet
from mutwo._report import Report, StepClock, by_use
from mutwo._ext import BudgetError, MutwoError, call, memory, ops
from mutwo.capture import (CaptureError, DataDependentError, OutputSpec, data_key, document, named_state,
                           rng_preserved, trace)
from mutwo.many import ModelArray, check as _check_many

__all__ = ["wrap", "backend", "report", "many", "ModelArray", "MutwoError", "BudgetError", "CaptureError", "memory"]

_registry.register()  # backend="mutwo" in a source tree too, where no entry point names it

# The stages of a new shape's first call, shown on a terminal (MUTWO_QUIET=1: not).
_STAGES = ["capturing the step (AOTAutograd)", "writing it as mutwo's graph"]
_PLANNING = {"measure": "profiling it on your tensors, planning, rewriting",
             "flops": "estimating its times, planning, rewriting"}


class _Session:
    """One planned step: one input signature of one module."""

    def __init__(self, module: torch.nn.Module, args: tuple, options: dict) -> None:
        shapes = ", ".join(str(list(a.shape)) for a in args if isinstance(a, torch.Tensor))
        progress = Progress(f"mutwo.torch.wrap: {options['label']}", _STAGES + [_PLANNING[options["profile"]]],
                            enabled=not quiet(), every_stage=False)
        try:
            self._plan(module, args, options, progress)
        except BaseException:
            progress.done()
            raise
        i = self.info()
        self.inputs = f"[{shapes}]" if shapes.count("[") > 1 else shapes or "(no tensors)"
        self.device = torch.device(i["device"])
        self.clock = StepClock()  # each step's time, for report()
        progress.close(f"planned for inputs {shapes}: peak {format_bytes(i['unplanned_peak_bytes'])} -> "
                       f"{format_bytes(i['predicted_peak_bytes'])} predicted (budget {i['budget'] or 'none'}), "
                       f"{len(i['dropped'])} activations dropped ({format_bytes(i['dropped_bytes'])}), "
                       f"+{i['predicted_extra_ms']:.2f} ms predicted")

    def _plan(self, module: torch.nn.Module, args: tuple, options: dict, progress: Progress) -> None:
        """Captures the step, writes it as a graph and hands it to the extension (profile, plan, rewrite)."""
        spec: list[OutputSpec] = []
        progress.stage(0)
        try:
            joint = trace(module, args, None, spec)
        except DataDependentError as e:
            raise DataDependentError(f"{e}; torch.compile(model, backend=mutwo.torch.backend(budget)) trains such "
                                     "a model, this same one: Dynamo breaks the graph where the data decides (a "
                                     "mixture-of-experts router, .item()), mutwo plans each graph it compiles, and "
                                     "the code between them runs eagerly") from e
        progress.stage(1)
        with _compat.no_autocast():  # the graph holds autocast's casts; its real run must not cast again
            doc, tensors = document(joint, options["label"], data=None)
        self.spec = spec[0]
        self.primals = [(p.role, p.key) for p in joint.primals]  # parameter/buffer qualname, input position
        self.tangent_of = list(joint.tangent_of)
        primal_values = [v["name"] for v in doc["values"] if v["role"] in ("parameter", "buffer", "input")]
        position = {name: i for i, name in enumerate(primal_values)}
        # the primal position of each gradient, in the order the extension returns them (the file's)
        self.gradient_of = [position[v["of"]] for v in doc["values"] if v["role"] == "gradient"]
        del joint
        # Every tensor by its graph name (data_key): the user's own where they exist, the capture's constants.
        live = {**named_state(module),
                **{f"input{i}": a.detach() for i, a in enumerate(args) if isinstance(a, torch.Tensor)}}
        held = [v for v in doc["values"] if v["role"] in ("parameter", "buffer", "input", "constant")]
        names = [data_key(v) for v in held]
        given = [tensors[k] if v["role"] == "constant" else live[k] for v, k in zip(held, names)]
        text = json.dumps(doc)
        extension = ops()
        progress.stage(2)
        with rng_preserved():  # profiling steps draw random numbers too
            self.handle = call(extension.create, text, names, given, json.dumps(options), tensors=True)
        self.report_dir: Optional[str] = options.get("report")
        self.reported = False

    def __del__(self) -> None:
        try:
            torch.ops.mutwo.release(self.handle)
        except Exception:  # interpreter shutdown
            pass

    def gather(self, module: torch.nn.Module, args: tuple) -> list[torch.Tensor]:
        state = named_state(module)
        return [state[key] if role != "input" else args[key] for role, key in self.primals]

    def info(self) -> dict:
        return json.loads(call(ops().info, self.handle))

    def summary(self) -> dict:
        """info() with the input shapes and the steps' measured times (StepClock.fields)."""
        return {**self.info(), "inputs": self.inputs, **self.clock.fields()}

    def write_report(self, directory: str) -> None:
        call(ops().report, self.handle, directory)


class _Step(torch.autograd.Function):
    """The forward part when called, the backward part when autograd asks."""

    @staticmethod
    def forward(ctx: Any, session: _Session, *primals: torch.Tensor) -> Any:
        session.clock.start(session.device)
        outs = call(ops().forward, session.handle, list(primals), tensors=True)
        ctx.session = session
        ctx.n = len(primals)
        with_grad = set(session.tangent_of)
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outs) if i not in with_grad])
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:
        s: _Session = ctx.session
        tangents = [grads[i].contiguous() for i in s.tangent_of]
        result = call(ops().backward, s.handle, tangents, tensors=True)
        out: list[Optional[torch.Tensor]] = [None] * ctx.n
        for pos, g in zip(s.gradient_of, result):
            out[pos] = g
        s.clock.stop(s.device)
        if s.report_dir and not s.reported:
            s.reported = True
            s.write_report(s.report_dir)
        return (None, *out)


class Wrapped(torch.nn.Module):
    """A module whose training steps run under mutwo's plan (see wrap()); with
    no budget, the module itself, as it is (nothing captured or planned).

    `state_dict()` and `load_state_dict()` are the wrapped module's own, so
    checkpoints move between the wrapped and the plain model unchanged."""

    def __init__(self, module: torch.nn.Module, options: dict) -> None:
        super().__init__()
        self.module = module
        self._options = options
        self._sessions: dict[Any, _Session] = {}
        self._last: Optional[_Session] = None
        self._kept_bytes = 0  # the largest budget a percentage was planned under, over the shapes so far
        self._unplanned_steps = 0  # training calls run as they are, with no budget

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or not self.module.training:
            return self.module(*args, **kwargs)  # evaluation: nothing to plan
        if self._options["budget"] is None:  # no budget: the step as it is
            self._unplanned_steps += 1
            return self.module(*args, **kwargs)
        args = _positional(self.module, args, kwargs)
        if not any(p.requires_grad for p in self.module.parameters()) and \
                not any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return self.module(*args)
        key = _signature(self.module, args)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = self._plan(args)
        self._last = session
        outs = _Step.apply(session, *session.gather(self.module, args))
        spec = session.spec
        leaves = list(spec.leaves)
        for pos, o in zip(spec.tensor_positions, outs):
            leaves[pos] = o
        return torch.utils._pytree.tree_unflatten(leaves, spec.spec)

    def _plan(self, args: tuple) -> _Session:
        """A new input shape's session. A percentage budget is planned under at
        least the bytes an earlier shape was: a smaller batch fits where a
        larger one did (its lowest peak is below the larger one's plan)."""
        budget = self._options["budget"]
        by_fraction = budget is not None and budget.endswith("%")
        options = {**self._options, "at_least_bytes": self._kept_bytes} if by_fraction else self._options
        session = _Session(self.module, args, options)
        if by_fraction:
            self._kept_bytes = max(self._kept_bytes, int(session.info()["budget_bytes"]))
        return session

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.state_dict(*args, **kwargs)

    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.module.load_state_dict(*args, **kwargs)


def _positional(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
    """Keyword arguments moved to their positions (defaults filled in between),
    because the capture traces positional inputs."""
    if not kwargs:
        return tuple(args)
    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise MutwoError(f"{type(module).__name__}.forward: {e}") from None
    bound.apply_defaults()
    if bound.kwargs:
        raise MutwoError(f"{type(module).__name__}.forward takes keyword-only arguments "
                         f"({', '.join(bound.kwargs)}); mutwo.torch passes inputs by position")
    return tuple(bound.args)


def _signature(module: torch.nn.Module, args: tuple) -> tuple:
    """What a plan depends on: each input's shape, dtype, device and whether it
    requires grad, non-tensor inputs by value, the modules' training flags and
    autocast: a change plans again, never reusing a stale plan."""
    def one(a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            return ("tensor", tuple(a.shape), a.dtype, str(a.device), a.requires_grad)
        return ("value", repr(a))
    return (tuple(one(a) for a in args), tuple(m.training for m in module.modules()), _compat.autocast_state(),
            tuple((n, p.requires_grad, tuple(p.shape), p.dtype, str(p.device)) for n, p in module.named_parameters()))


def _options(budget: Any, planner: str, profile: str, report: Optional[str], label: str) -> dict:
    """The options of wrap() and backend(), each checked now, before any step runs."""
    try:
        parsed = _budget.parse(budget)
        _budget.check_planner(planner, list(call(ops().planners)))
    except ValueError as e:
        raise MutwoError(str(e)) from None
    if profile not in ("measure", "flops"):
        raise MutwoError(f"profile={profile!r}: use 'measure' (time the step once on the first call) or "
                         "'flops' (estimate, without running the unplanned step)")
    if report is not None and not isinstance(report, (str, os.PathLike)):
        raise MutwoError(f"report={report!r}: give a directory's path")
    opts = {"budget": parsed.text() if parsed else None, "planner": planner, "profile": profile, "label": label}
    if report:
        opts["report"] = os.path.abspath(report)
    return opts


def wrap(module: torch.nn.Module, budget: Any = None, *, planner: str = "mutwo", profile: str = "measure",
         report: Optional[str] = None, arena: Optional[bool] = None) -> Wrapped:
    """The module, training under mutwo's plan.

    budget (docs/budgets.md): bytes ("6GiB", "1500MiB"), a fraction of the
    activation memory the plan can free (0.6 or "60%": 100% is the unplanned
    peak), "lowest" (the lowest peak the planner reaches), or None (no
    budget). What it covers is stated once, in src/plan/pipeline.h (here:
    the module's step, not the user's optimizer state). A percentage is resolved on the first input shape; a later shape
    is planned under at least the bytes an earlier one was, so a smaller
    batch (a DataLoader's last) never fails where a larger one fitted.
    planner: mutwo (the μ-TWO greedy), per-layer, sqrt-n, optimal or none.
    profile: "measure" runs and times the step on the first call of each input
    shape; "flops" estimates it without running it. report: a directory
    written after each new plan's first backward (as report()). arena: serve
    the step from one arena planned ahead (docs/budgets.md); None: on CUDA
    under a budget, not on the CPU; report() says which ("arena", "arena_from").
    With no budget the module runs as it is: nothing is captured, profiled
    or planned ("100%" profiles and runs it on mutwo's executor, dropping nothing).
    Raises MutwoError now for a bad budget, planner or option, and
    BudgetError on the first call if no plan fits."""
    if not isinstance(module, torch.nn.Module):
        raise MutwoError(f"wrap() takes an nn.Module, got {type(module).__name__}")
    if budget is None and report is not None:
        raise MutwoError(f"report={report!r} with no budget: with none, wrap() runs the module as it is and has no "
                         "plan to write; give budget=\"100%\" to profile the step and plan nothing, or a lower one")
    if arena is not None and not isinstance(arena, bool):
        raise MutwoError(f"arena={arena!r}: give True, False or None (the default: on CUDA under a budget)")
    options = _options(budget, planner, profile, report, type(module).__name__)
    return Wrapped(module, options if arena is None else {**options, "arena": arena})


def report(module: Any = None, directory: Optional[str] = None) -> Report:
    """The plan of the module's latest step: predicted and measured peak, what was
    dropped, the predicted extra time (docs/python.md lists the keys), as a
    dict whose str() is a short summary for a person (print(report(model))):
    peak before and after, budget, time, what lowered the peak, what was
    dropped or swapped by module and op, recompilations. With a
    directory, also writes there the CLI's files: profile.json and its tables and
    plots, plan.json, plan.csv, rewritten.ir, summary.json and report.md, and
    PyTorch's memory snapshots (memory_snapshot.pickle: the profiled step,
    measured then predicted; memory_before_after.pickle: the unplanned step,
    then the plan's, as predicted), which `python -m torch.cuda._memory_viz
    trace_plot FILE -o page.html` draws.

    `module`: what wrap() returned, or a backend() after its compiled model ran:
    with compiler="inductor", the latest graph's plan (each value's decision
    and why), its predicted and measured peaks and its recompilations, under
    "graphs" every graph's, and under "step" the whole step's: its order,
    measured and predicted peaks, and what each graph holds of the peak (no
    files are written: a directory given here only warns so). A module compiled
    with backend="mutwo" (by name) or backend=backend(...): its backend's; no
    module: the latest backend="mutwo"'s. Both add `budget_source`."""
    if module is None or _registry.compiled(module):
        entry = _registry.entry_of(module)
        if entry.error:
            raise entry.error
        return Report({**report(entry.backend, directory), "budget_source": entry.source})
    compiled = [g for g in getattr(module, "graphs", []) if not isinstance(g, Wrapped)]
    if compiled:  # a backend(compiler="inductor"): each graph's plan, predicted and measured
        if directory:
            warnings.warn(f"report(backend, {directory!r}): the compiled route (compiler='inductor') writes no files; "
                          "its plans are in the dict returned. For the CLI's files (profile, plan.json, report.md, "
                          "memory snapshots) use wrap() or backend(compiler='mutwo')", stacklevel=2)
        return Report({**compiled[-1].info(), "graphs": [g.info() for g in compiled], "step": module.step.report()})
    if getattr(module, "graphs", None):  # a backend(compiler="mutwo")
        module = module.graphs[-1]
    sessions = module._sessions if isinstance(module, Wrapped) else getattr(module, "_mutwo_sessions", None)
    if sessions is None:
        raise MutwoError("report() takes a module returned by mutwo.torch.wrap()")
    if isinstance(module, Wrapped) and module._options["budget"] is None:
        if directory:
            raise MutwoError(f"report(model, {directory!r}): wrap() had no budget, so it ran the module as it is and "
                             "has no plan to write; give budget=\"100%\" to profile the step and plan nothing")
        return Report({"unplanned": True, "budget": None, "model": module._options["label"],
                       "steps": module._unplanned_steps, "plans": 0, "shapes": []})
    if not sessions:
        raise MutwoError("no plan yet: call the module on a batch (in training mode, with grad enabled) first")
    # Every input shape's plan, the most used first; its fields are the report's own.
    summaries = [s.summary() for s in sessions.values()]
    shapes = by_use(summaries)
    if directory:
        next(s for s, d in zip(sessions.values(), summaries) if d is shapes[0]).write_report(directory)
    return Report({**shapes[0], "plans": len(sessions), "shapes": shapes})


def _same_budget(parsed: Optional[_budget.Budget], made: Any, options: Optional[dict], mode: Optional[str]) -> None:
    """torch.compile(..., backend=be, options=...) passes its options to the
    backend: a backend holds one budget for every graph of the step, so
    options may repeat it, not change it."""
    if mode is not None:
        raise MutwoError(f"mode={mode!r} is Inductor's; a mutwo.torch.backend(...) takes no mode")
    if not options:
        return
    unknown = sorted(str(k) for k in options if k != "budget")
    if unknown:
        raise MutwoError(f"options {', '.join(map(repr, unknown))}: a mutwo.torch.backend(...) takes only "
                         "options={'budget': ...}, equal to the one it was made with")
    asked = options["budget"]
    try:
        same = _budget.parse(asked) == parsed
    except ValueError as e:
        raise MutwoError(str(e)) from None
    if not same:
        raise MutwoError(f"this backend was made with budget={made!r}, and torch.compile(..., options=) gives it "
                         f"budget={asked!r}: one backend holds one budget for every graph it compiles (the blocks "
                         "of a model compiled one by one share it); make the backend with the budget you want, "
                         "mutwo.torch.backend(budget=...), and pass that one object to every torch.compile")


HOST_SHARE = 0.5  # of the machine's memory, what offloaded values may hold there by default


def _host_memory(value: Any) -> int:
    """backend's host_memory in bytes."""
    if value is None:
        return int(HOST_SHARE * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    try:
        parsed = _budget.parse(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if isinstance(value, bool) or not (isinstance(value, int) and value >= 0 or parsed and parsed.kind == "bytes"):
        raise MutwoError(f"host_memory={value!r}: give bytes or a size such as '32GiB' (0: never offload; "
                         f"None: {HOST_SHARE:.0%} of this machine's memory)")
    return value if isinstance(value, int) else parsed.bytes


def backend(budget: Any = None, *, compiler: str = "inductor", planner: str = "mutwo", profile: str = "measure",
            report: Optional[str] = None, chunk_loss: bool = True, host_memory: Any = None) -> Callable:
    """A torch.compile backend under a memory budget.

    compiler="inductor" (the default): mutwo plans, Inductor compiles.
    PyTorch's own min-cut partitioner splits each graph's joint forward and
    backward; mutwo chooses what it saves, from candidates that include
    torch.compile's own answer at every activation_memory_budget, priced by one
    model of the partition Inductor runs (docs/python.md, "The compiled
    route"). The budget bounds what the whole step adds, from its first
    compiled forward to its last compiled backward, over every graph this
    object compiles (blocks compiled one by one, graph breaks, DDP's buckets:
    one backend object, one budget; a torch.compile options={"budget": ...}
    must equal it): bytes ("6GiB"), "lowest", or a fraction of the activations
    plain torch.compile saves over the step (0.6 or "60%": the rest of the
    step's peak plus that share of them, resolved to bytes once, after the
    first measured step); None is plain torch.compile's plan. Each step
    is measured; the first measurement corrects the model (and is cached for
    later runs), and a step over budget plans again and recompiles, at most
    twice per graph; then the next call raises BudgetError naming the lowest
    measured peak. Under torchrun the ranks agree on the plan (docs/python.md,
    "Under torchrun"). planner: "mutwo" or "none" (plain compile's partition).
    Static shapes: a graph Dynamo compiles for dynamic shapes (dynamic=None,
    once an input's shape changed) runs plain compile's plan, with a warning;
    pass dynamic=False to torch.compile to have each shape planned.
    chunk_loss: under "lowest", or a budget no plan of the whole loss fits, a
    vocabulary loss (a linear layer read only by a cross-entropy, in one
    graph) runs as mutwo's chunked operator, which never holds the whole
    logits (docs/python.md, "The chunked loss"); False: never.
    host_memory: on CUDA, what saved values offloaded to host memory may hold
    there (bytes, or a size such as "32GiB"; docs/python.md, "Offload"):
    None, half the machine's memory; 0, never offload.

    compiler="mutwo": each graph is captured and run by mutwo's own executor,
    as wrap() runs a module (`profile` and `report` apply to it). A
    percentage budget applies to each graph; a byte budget needs the model in
    one graph and raises MutwoError on a graph break (compiler="mutwo" only)."""
    if compiler not in ("inductor", "mutwo"):
        raise MutwoError(f"compiler={compiler!r}: use 'inductor' (mutwo plans, Inductor compiles) or 'mutwo' "
                         "(mutwo's executor)")
    if compiler == "inductor":
        from mutwo.compiled import _inductor
        try:
            parsed = _budget.parse(budget)
            _budget.check_planner(planner, list(_inductor.PLANNERS))
        except ValueError as e:
            raise MutwoError(f"{e}; the compiled route plans with {' or '.join(_inductor.PLANNERS)}: per-layer, "
                             "sqrt-n and optimal run under wrap() or backend(compiler='mutwo')"
                             if "planner" in str(e) else str(e)) from None
        if not isinstance(chunk_loss, bool):
            raise MutwoError(f"chunk_loss={chunk_loss!r}: True (the default) or False")
        settings = {"budget": parsed, "planner": planner, "chunk_loss": chunk_loss,
                    "host_memory": _host_memory(host_memory)}
    else:
        _options(budget, planner, profile, report, "compiled")  # its errors, before any graph
        parsed = _budget.parse(budget)
    step = None
    if compiler == "inductor":  # one budget for every graph of the step (_step.py)
        from mutwo.compiled._step import Step
        kind = parsed.kind if parsed is not None and planner == "mutwo" else None
        step = Step(parsed.bytes if kind == "bytes" else "lowest" if kind == "lowest" else None, memory, BudgetError,
                    fraction=parsed.fraction if kind == "fraction" and not parsed.whole else None)
    graphs: list[Any] = []
    warned = False  # the dynamic-shapes warning, once per backend

    def refuse(error: Exception) -> Callable:
        """A graph whose call raises mutwo's own error, not Dynamo's BackendCompilerFailed around it."""
        def call(*args: Any) -> Any:
            raise error
        return call

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, options: Optional[dict] = None,
                      mode: Optional[str] = None) -> Callable:
        nonlocal warned
        try:
            _same_budget(parsed, budget, options, mode)
        except MutwoError as e:
            return refuse(e)
        if graphs and compiler == "mutwo" and not (parsed is None or parsed.kind != "bytes"):
            return refuse(MutwoError(
                f"torch.compile made a second graph (a graph break, or a recompilation for new shapes): under "
                f"compiler='mutwo' a byte budget ({parsed.text()}) cannot be split between graphs; use "
                "compiler='inductor' (the default: one budget for the step), a percentage budget, or "
                "mutwo.torch.wrap"))
        if compiler == "inductor":
            ops()
            from mutwo.compiled._inductor import DYNAMIC_WARNING, CompiledGraph, device_of, symbolic, unplanned
            if symbolic(example_inputs):
                if not warned:
                    warnings.warn(DYNAMIC_WARNING, stacklevel=2)
                    warned = True
                return unplanned(gm, example_inputs)
            try:
                with step.tracker(device_of(example_inputs)).compiling():
                    compiled = CompiledGraph(gm, example_inputs, dict(settings), step)
            except (MutwoError, CaptureError) as e:
                return refuse(e)
            graphs.append(compiled)
            return compiled
        w = wrap(gm, budget, planner=planner, profile=profile, report=report)
        graphs.append(w)

        def run(*args: Any) -> Any:
            return w(*args)
        run._mutwo_sessions = w._sessions  # type: ignore[attr-defined]
        return run

    compile_graph.step = step  # type: ignore[attr-defined]
    compile_graph.graphs = graphs  # type: ignore[attr-defined]
    return compile_graph


def many(models: Sequence[torch.nn.Module], loss: Callable[..., torch.Tensor], *, budget: Any = None,
         host_memory: Any = None, randomness: str = "different", compile: bool = True) -> ModelArray:
    """N models of one architecture as one array, trained in one fused step.

    `loss(model, *batch)` returns one model's scalar loss, where `model` is
    called like the nn.Module (`loss = lambda model, x, y: F.cross_entropy(model(x), y)`).
    Calling the array returns the N losses as one tensor; `.sum().backward()`
    gives each model the gradients it would get alone (the models share
    nothing), so each model's own optimizer, at its own learning rate, steps
    its own nn.Parameters unchanged.

    The step is compiled by torch.compile under mutwo.torch.backend(budget,
    host_memory=...): one budget (bytes, a percentage, "lowest"; None: plain
    compile's plan) for the whole array. randomness: torch.vmap's
    ("different": each model draws its own dropout masks; "same": one mask
    for all). compile=False runs the fused step eagerly, unplanned. Models of
    one class whose shapes differ (another width) train as separate fused
    sub-arrays in the one step, and so do models whose modules are set apart
    (another Dropout p, eval mode). Buffers are stacked too, and what the step
    writes to them (BatchNorm's running statistics) is copied back to each
    model's own."""
    _check_many(models, loss, budget, host_memory, randomness, compile)
    chosen = backend(budget, host_memory=host_memory) if compile else None
    return ModelArray(list(models), loss, chosen, randomness, (lambda: dict(report(chosen))) if compile else None)
