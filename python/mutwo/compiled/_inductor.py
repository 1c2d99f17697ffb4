# mutwo plans, Inductor compiles (docs/python.md, "The compiled route").
#
# torch.compile(model, backend=mutwo.torch.backend(budget)) hands each graph
# Dynamo captures to Inductor's compile_fx. AOTAutograd partitions the joint
# forward-and-backward graph with PyTorch's own min-cut partitioner; mutwo
# only answers the one question that partitioner asks, which forward values to
# save (_mincut.choosing), with the fastest candidate of _frontier that fits
# the budget. Nothing is tagged: pointwise ops, views and casts stay min-cut's
# to recompute inside the backward's fused kernels, so with no budget pressure
# the partition is plain compile's, and PyTorch's own answer at every
# activation_memory_budget is among the candidates.
#
# The budget bounds what the compiled forward and backward add to what was
# allocated when the step began. Each step is measured per phase; the first
# measurement of a plan gives the model's residual (measured − predicted, per
# phase), which is cached on disk by joint graph, device and torch version, so
# that a later process plans with it from the start. A step over budget plans
# again with the residual and recompiles; Inductor's own cache serves graphs
# an earlier attempt compiled already.
from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

import torch
from torch._inductor.custom_graph_pass import CustomPartitionerFn
from torch._subclasses.fake_tensor import FakeTensor

from mutwo import _compat
from mutwo.compiled import _frontier, _joint, _loss, _mincut
from mutwo.compiled._frontier import Candidate, Choice, Corrections, FloorError, Residual
from mutwo._budget import Budget
from mutwo._ext import call, ops
from mutwo._graph import is_tangent
from mutwo.compiled._joint import Option
from mutwo._progress import Ticker, quiet
from mutwo.compiled._step import MAX_COMPILES, Step

_SOURCE_HASH = hashlib.sha256(b"".join(pathlib.Path(__file__).with_name(n).read_bytes() for n in (
    "_inductor.py", "_frontier.py", "_mincut.py", "_loss.py"))).hexdigest()[:16]


# -- the residual cache
def cache_dir() -> pathlib.Path:
    """MUTWO_CACHE_DIR, else ~/.cache/mutwo (XDG_CACHE_HOME respected)."""
    if os.environ.get("MUTWO_CACHE_DIR"):
        return pathlib.Path(os.environ["MUTWO_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "mutwo"


def _cache_file(key: str) -> pathlib.Path:
    return cache_dir() / "compiled" / f"{key}.json"


def load_corrections(key: str) -> Optional[Corrections]:
    """The model's measured misses on this graph from an earlier process, by plan."""
    try:
        data = json.loads(_cache_file(key).read_text())
        return Corrections({plan: Residual(int(r["fwd"]), int(r["bwd"]), int(r.get("retained", 0)))
                            for plan, r in data["by_plan"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def save_corrections(key: str, corrections: Corrections) -> None:
    _update(key, {"by_plan": {k: asdict(r) for k, r in corrections.by_plan.items()}})


def load_choice(key: str, budget: str) -> Optional[str]:
    """The candidate a step under `budget` chose for this graph in an earlier process."""
    try:
        return str(json.loads(_cache_file(key).read_text())["chosen"][budget])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_choice(key: str, budget: str, name: str) -> None:
    try:
        chosen = json.loads(_cache_file(key).read_text()).get("chosen", {})
    except (OSError, ValueError, AttributeError):
        chosen = {}
    _update(key, {"chosen": {**chosen, budget: name}})


def _update(key: str, fields: dict) -> None:
    """The cache file with `fields` replaced, written whole or not at all; a
    cache that cannot be written only costs a compile next time."""
    path = _cache_file(key)
    try:
        try:
            data = json.loads(path.read_text())
            data = data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            data = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**data, **fields}))
        os.replace(tmp, path)
    except OSError:
        pass


_DEVICE_INDEX = re.compile(r"device\(type='(\w+)', index=\d+\)")


def graph_key(gm: torch.fx.GraphModule, device: str) -> str:
    """The joint graph (code and every value's shape and dtype), the card's
    kind and torch's version. Not the card's index: every rank of a torchrun
    job, each on its own card, compiles the same graph under the same key."""
    h = hashlib.sha256(_DEVICE_INDEX.sub(r"device(type='\1')", gm.code).encode())
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            h.update(f"{n.name}:{tuple(v.shape)}:{v.dtype};".encode())
    card = torch.cuda.get_device_name() if device == "cuda" and torch.cuda.is_available() else device
    h.update(f"{card}|{torch.__version__}|{_SOURCE_HASH}".encode())
    return h.hexdigest()[:32]


# -- one plan of one graph
@dataclass
class Attempt:
    """One plan of one graph, as compiled and as measured."""
    corrections: Corrections  # the measured misses the plan was chosen with
    choice: Optional[Choice] = None
    compile_s: float = 0.0
    plan_s: float = 0.0  # of it, choosing the saved set (pricing the candidates)
    saved: list[str] = field(default_factory=list)  # what the backward module compiled takes from the forward
    measured: list[tuple[int, int]] = field(default_factory=list)  # each step's (forward, backward) added peak
    # Inductor's scheduler's own estimate of each compiled module's peak
    # (its freeable inputs included, so not an added peak): a reference for
    # the model, where Inductor scheduled the graph (not served from its cache).
    inductor_peaks: dict[str, int] = field(default_factory=dict)

    def predicted(self) -> Optional[int]:
        return self.choice.chosen.peak(self.corrections) if self.choice else None

    def summary(self) -> dict:
        c = self.choice.chosen if self.choice else None
        return {"planner_budget_bytes": self.choice.budget_bytes if self.choice else None,
                "chosen": c.name if c else None, "predicted_peak_bytes": self.predicted(),
                "measured_peak_bytes": [max(m) for m in self.measured], "compile_seconds": round(self.compile_s, 3),
                # per phase (forward, backward): the prediction before it ran, and the first step's measurement
                "predicted_phases": list(c.corrected(self.corrections)[:2]) if c else None,
                "measured_phases": list(self.measured[0]) if self.measured else None,
                "plan_seconds": round(self.plan_s, 3), "inductor_estimated_peak_bytes": dict(self.inductor_peaks),
                "residual_bytes": asdict(self.corrections.of(c)) if c else None,
                "tags": {"recompute": len(c.recomputed), "save": len(c.saved)} if c else {}}


class _Partitioner(CustomPartitionerFn):
    """PyTorch's min-cut partition, saving what mutwo chose."""

    def __init__(self, graph: "CompiledGraph", attempt: Attempt) -> None:
        self.graph, self.attempt = graph, attempt

    def __call__(self, gm: torch.fx.GraphModule, joint_inputs: Sequence[object],
                 **kwargs: Any) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
        key = self.graph.joint_seen(gm)
        _mincut.pin_random(gm)
        _loss.pin(gm)

        def chooser(q: _mincut.Query) -> list[torch.fx.Node]:
            self.attempt.corrections = Corrections(dict(self.graph.corrections.by_plan))
            start = time.perf_counter()
            ticker = Ticker(f"mutwo: graph {self.graph.index}, compile {len(self.graph.attempts)}", not quiet())
            try:
                self.attempt.choice = self.graph.choose(q, self.attempt.corrections, key,
                                                        lambda name: ticker.tick(f"candidates priced: {name}"))
            finally:
                self.attempt.plan_s = time.perf_counter() - start
            chosen, step = self.attempt.choice.chosen, self.graph.step
            # Chosen by the step, the graph's own figure means little (corrected by its
            # measured residual, it was negative on one FSDP2 rank): the step's.
            peak = (f"the step's predicted added peak {_mib(step.joint.peak)}" if self.graph.target and step.joint
                    else f"predicted added peak {_mib(self.attempt.predicted())}")
            ticker.close(f"planned {chosen.name}: {peak}, +{chosen.extra_ms:.2f} ms modelled; candidates priced")
            _mincut.offload(chosen.saved, chosen.offloaded,
                            stream=self.graph.device == "cuda" and self.graph.offloading.overlap)  # as priced
            return chosen.saved
        with _mincut.choosing(gm, kwargs["num_fwd_outputs"], chooser):
            fw, bw = _mincut.partition(gm, joint_inputs, kwargs)
        self.attempt.saved = [n.name for n in bw.graph.nodes if n.op == "placeholder" and not is_tangent(n)]
        return fw, bw

    def __deepcopy__(self, memo: dict) -> "_Partitioner":
        return self  # Inductor copies its config for the cache key; the key is uuid()

    def __reduce__(self) -> tuple:
        return (str, (self.uuid(),))  # and pickles it: the uuid stands for it

    def uuid(self) -> Any:
        """Inductor's cache key holds the partitioned graphs already: attempts
        that give the same graphs share its compiled kernels."""
        return f"mutwo-{_SOURCE_HASH}"


class _ChunkFirst(Exception):
    """Raised from the partitioner: no plan fits unless the loss is chunked."""


class CompiledGraph:
    """One graph Dynamo hands the backend: compiled under mutwo's plan,
    measured each step, planned again while over budget. Under a byte budget
    the backend's Step plans its graphs together (_step.py); otherwise each
    graph plans alone."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict, step: Step) -> None:
        # The example inputs are the first call's own tensors: kept, they would
        # hold that call's activations for the whole run (on two H200s, 64 MiB
        # per block graph of GPT-2 medium). A recompile takes its call's inputs.
        self.gm, self.options = gm, options
        self.origin = origin(gm)  # "at model.py:31 (layers.0)", for refusals
        self.step, self.budget_error = step, step.budget_error
        self.device = device_of(example_inputs)
        self.offloading = offloading(options.get("host_memory", 0), self.device)
        self.index = step.add(self)
        self.attempts: list[Attempt] = []
        self.key: Optional[str] = None
        self.corrections = Corrections()
        self.cached = False  # the corrections came from an earlier process
        self.error: Optional[str] = None
        self.menu: list[Candidate] = []  # every candidate priced at the first compile (a byte budget's)
        self.resolved_on: Optional[tuple[int, int]] = None  # (F, A) of the first plan: a percentage's bytes, once
        self.want = ""  # what the step chose to run next: a candidate, or a Split of two (_joint)
        self.target: Optional[str] = None  # the candidate being compiled for it
        self.fns: dict[str, Callable] = {}  # each candidate compiled, by name
        self.plan = ""  # what runs: a candidate's name, or a Split's
        self.split: Optional[tuple[str, int, str]] = None  # (first, count, then) while a Split runs
        self.measured_key = ""  # the running plan's key, once a step measured it
        self._replan = False
        self.called = self.trained = False  # called yet; any call trained (else an evaluation's graph)
        self.loss_rows: Optional[int] = None  # rows per chunk of the chunked loss, once the graph has it
        self.chunkable = self._chunkable()
        if self.chunkable and options["budget"].kind == "lowest":
            self._chunk_loss()
        self.fn = self._compile(list(example_inputs))

    def _chunkable(self) -> bool:
        """Under a budget, whether the graph's vocabulary loss can become
        mutwo's chunked operator (_loss.py), holding less than the logits.
        The operator costs time (on an H200, 17 ms a step on the bench's
        decoder), so it is used only under "lowest" or where no plan of the
        whole loss fits the budget (_compile)."""
        o = self.options
        budget = o["budget"]
        if not o.get("chunk_loss", True) or budget is None or o["planner"] != "mutwo" or budget.whole:
            return False
        site = _loss.find(self.gm, _loss.ambient_autocast(self.device))
        weight = site.linear.args[1].meta.get("example_value") if site else None
        return isinstance(weight, torch.Tensor) and _loss.worth_it(site, weight.element_size())

    def _chunk_loss(self) -> bool:
        """Rewrites the graph's loss as the chunked operator; False where it is
        no longer found (Inductor's passes on the graph changed it)."""
        self.chunkable = False
        site = _loss.find(self.gm, _loss.ambient_autocast(self.device))
        if site is None:
            return False
        self.loss_rows = _loss.rewrite(self.gm, site)
        # A new joint graph: its own key, corrections and candidates.
        self.key, self.corrections, self.cached, self.menu = None, Corrections(), False, []
        self.resolved_on = None
        return True

    @property
    def joint(self) -> bool:
        """Planned with the backend's other graphs, under one budget."""
        return self.step.planned and self.options["planner"] == "mutwo"

    @property
    def budget_bytes(self) -> Optional[int]:
        if self.joint and isinstance(self.step.budget, int):
            return self.step.budget
        choice = self.attempts[0].choice if self.attempts else None
        return choice.budget_bytes if choice else None

    def joint_seen(self, gm: torch.fx.GraphModule) -> str:
        """The joint graph's key; the first partition also loads the cached corrections by it."""
        key = graph_key(gm, self.device)
        if self.key is None:
            self.key = key
            cached = load_corrections(self.key)
            if cached is not None:
                self.corrections, self.cached = cached, True
        return key

    def remembered(self, key: str) -> list[Candidate]:
        """The candidates the last compile priced (the step's: every one the
        first priced), if it partitioned this same joint graph."""
        if self.joint:
            return list(self.menu) if key == self.key else []
        last = self.attempts[-2] if len(self.attempts) > 1 else None
        if last is None or last.choice is None or key != self.key:
            return []
        return last.choice.candidates

    def choose(self, q: _mincut.Query, corrections: Corrections, key: str,
               priced: Optional[Callable[[str], None]] = None) -> Choice:
        """The saved set of this compile: the step's choice; or, first, the
        fastest candidate that fits what the step in progress leaves of the
        budget, with every candidate priced for the step's later choice; or,
        planning alone, the fastest that fits the graph's own budget."""
        o, remembered = self.options, self.remembered(key)
        if self.joint and self.target:
            choice = _frontier.named(q, self.device, self.target, remembered, priced, self.offloading)
            self.menu = [c for c in self.menu if c.name != choice.chosen.name] + [choice.chosen]
            return choice
        if self.joint:
            if self.step.budget is None:  # a fraction not resolved yet: the graph's own share, refused by none
                left = o["budget"]
            elif self.step.budget == "lowest":
                left = Budget("lowest")
            else:
                left = Budget("bytes", bytes=self.step.budget - self.step.allocated_in_step(self.device))
            earlier = load_choice(key, self.choice_label) if len(self.attempts) == 1 else None
            earlier = _joint.parse(earlier)[0] if earlier else None  # a Split's first candidate
            choice = _frontier.choose(q, self.device, left, corrections, o["planner"], remembered, menu=True,
                                      prefer=earlier, priced=priced, offloading=self.offloading)
            low = choice.chosen.peak(corrections)  # where none fits, the lowest
            if self.chunkable and left.kind != "lowest" and low > choice.budget_bytes:
                raise _ChunkFirst()
            if left.kind == "bytes" and low > left.bytes and call(ops().surely_below, left.bytes, low):
                held = self.step.budget - left.bytes  # what the step's graphs before this one hold now
                what = f"the compiled graph {self.origin}" if held <= 0 else \
                    f"the step up to the compiled graph {self.origin} ({held} B held by the graphs before it)"
                roomier = _frontier.roomier_args(self.offloading.host_limit, choice.roomier, corrections)
                raise self.budget_error(call(ops().refusal_text, self.step.budget, held + low,
                                             held + choice.default.peak(corrections), what, 0, 0, 0,
                                             choice.chosen.host_bytes, roomier[0], held + roomier[1] if roomier[1] else 0,
                                             roomier[2]))
            self.menu = list(choice.candidates)
            return choice
        try:
            choice = _frontier.choose(q, self.device, o["budget"], corrections, o["planner"], remembered,
                                      priced=priced, split=self.resolved_on, offloading=self.offloading)
            self.resolved_on = self.resolved_on or choice.split
        except FloorError as e:
            if self.chunkable:
                raise _ChunkFirst() from None
            raise self.budget_error(self.floor_text(e)) from None
        if self.chunkable and choice.budget_bytes is not None and choice.chosen.peak(corrections) > choice.budget_bytes:
            raise _ChunkFirst()  # before any measurement the lowest runs where none fits: chunked, it may
        return choice

    @property
    def choice_label(self) -> str:
        """What an earlier process's choice is cached under: the step's budget, and the host memory it could offload to."""
        limit = self.offloading.host_limit
        return f"{self.step.label}, host {limit}" if limit else self.step.label

    def activation_bytes(self) -> int:
        """What plain torch.compile's plan of this graph saves, per call (a step fraction's share)."""
        choice = self.attempts[0].choice if self.attempts else None
        return choice.default.saved_at_peak if choice else 0

    def floor_text(self, e: FloorError) -> str:
        return e.text(f"the compiled graph {self.origin}")

    # -- compiling
    def _compile(self, example_inputs: list) -> Callable:
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner
        attempt = Attempt(self.corrections)
        self.attempts.append(attempt)

        def inner(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any) -> Any:
            estimates: list[int] = []
            with _mincut.inductor_peaks(estimates):
                code = compile_fx_inner(gm, example_inputs, **kwargs)
            if estimates:  # the order Inductor keeps: its least estimate
                attempt.inductor_peaks["bwd" if kwargs.get("is_backward") else "fwd"] = min(estimates)
            if kwargs.get("is_backward"):
                run = code.current_callable

                def measured(args: list) -> Any:
                    tracker = self.step.tracker(self.device)
                    tracker.backward_begins(self.index)
                    try:
                        out = run(args)
                    except BaseException:
                        tracker.abandon()
                        raise
                    record = tracker.backward_ends(self.index)
                    if record is not None:
                        self.step.done(record)
                    return out
                code.current_callable = measured
            return code

        start = time.perf_counter()
        # AOTAutograd's cache would skip the partitioner, and with it the plan
        # this object reports and measures against; Inductor's own cache of
        # the partitioned graphs' kernels still serves.
        with torch._inductor.config.patch(custom_partitioner_fn=_Partitioner(self, attempt)), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            try:
                fn = compile_fx(self.gm, example_inputs, inner_compile=inner)
            except _ChunkFirst:  # no plan of the whole loss fits: the same compile, the loss chunked
                self._chunk_loss()  # if no longer found: the budget's own error, or the lowest plan
                attempt.inductor_peaks.clear()
                fn = compile_fx(self.gm, example_inputs, inner_compile=inner)
        attempt.compile_s = time.perf_counter() - start
        self.plan = attempt.choice.chosen.name if attempt.choice else ""
        self.fns[self.plan], self.split = fn, None
        return fn

    def remember(self) -> None:
        """The step's choice for this graph, for a later process's first compile."""
        if self.key and self.joint:
            save_choice(self.key, self.choice_label, self.want or self.running_name())

    def retarget(self, name: str) -> None:
        """Run `name` (a candidate, or a Split of two) from the next call,
        compiling what is not compiled yet then (autograd runs the step's end
        with grad mode off, where what compiled would be an inference graph)."""
        self.want, self._replan = name, True

    def missing(self, name: str) -> int:
        """How many compiles running `name` takes."""
        return sum(n not in self.fns for n in _joint.candidates(name))

    def _switch(self, args: list) -> None:
        """Compiles what the step's choice needs, then runs it; planning alone,
        plans again with what was measured."""
        if not self.want:
            self.fn = self._compile(args)
            return
        first, count, then = _joint.parse(self.want)
        for name in _joint.candidates(self.want):
            if name not in self.fns:
                self.target = name
                self._compile(args)
                assert name in self.fns, f"mutwo: compiling {name} gave {self.plan}"
        self.plan, self.fn = self.want, self.fns[first]
        self.split = (first, count, then) if count else None

    def unsettled(self) -> bool:
        """Its plan will compile again, or has not run a measured step yet."""
        if self.called and not self.trained:
            return self._replan  # an inference graph: nothing of its own to measure
        return self._replan or not self.attempts or not self.attempts[-1].measured or \
            self.measured_key != self.running_key()

    def running_name(self) -> str:
        return self.plan

    def _key_of(self, name: str) -> str:
        attempt = next((a for a in reversed(self.attempts) if a.choice and a.choice.chosen.name == name), None)
        return attempt.choice.chosen.key if attempt and attempt.choice else ""

    def running_key(self) -> str:
        if self.split:
            first, count, then = self.split
            return _joint.split_name(self._key_of(first), count, self._key_of(then))
        return self._key_of(self.plan)

    def _for_call(self, tracker: Any) -> tuple[Callable, str]:
        """The compiled candidate this call runs, and its key: under a Split, the
        first `count` instances awaiting their backward run `first`."""
        if not self.split:
            return self.fn, self.running_key()
        first, count, then = self.split
        name = first if tracker.alive[self.index] < count else then
        return self.fns[name], self._key_of(name)

    def options_for_step(self) -> list[Option]:
        """The menu, corrected by what was measured: what the step chooses from."""
        return [Option(c.name, c.key, *c.corrected(self.corrections), c.extra_ms) for c in self.menu]

    # -- measuring
    def __call__(self, *args: Any) -> Any:
        tracker = self.step.tracker(self.device)
        if self._replan:
            self._replan = False
            with tracker.compiling():
                try:
                    self._switch(list(args))
                except self.budget_error as e:
                    self.error = str(e)
        if self.error:
            raise self.budget_error(self.error)
        self.step.check()
        if any(isinstance(a, FakeTensor) for a in args):
            return self.fn(*args)  # DDP's optimizer propagating shapes between the graphs it split: no step
        fn, plan = self._for_call(tracker)
        tracker.forward_begins(self.index, self.running_key(), plan)
        try:
            out = fn(*args)
        except BaseException:
            tracker.abandon()
            raise
        outs = out if isinstance(out, (list, tuple)) else [out]
        trains = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in outs)
        self.called, self.trained = True, self.trained or trains
        tracker.forward_ends(self.index, trains)
        return out

    def measured(self, running: str, by_plan: dict[str, list[int]]) -> bool:
        """One step's measurement of this graph, running `running`: per
        candidate that ran, the most over its calls of what its forward added,
        its backward added from its own start, and its forward left
        allocated. True where one was the first of its candidate."""
        if running == self.running_key():
            self.measured_key = running
        first = over = False
        for key, (fwd, bwd, retained) in by_plan.items():
            attempt = next((a for a in reversed(self.attempts) if a.choice and a.choice.chosen.key == key), None)
            if attempt is None or attempt.choice is None:
                continue
            attempt.measured.append((fwd, bwd + retained))
            budget = attempt.choice.budget_bytes
            # A later step over the budget is never silent: its miss becomes the
            # plan's, and planning alone, the next call plans again or raises.
            late = len(attempt.measured) > 1 and budget is not None and max(fwd, bwd + retained) > budget
            if len(attempt.measured) == 1 or late:  # the first measurement of a plan: the model's miss, per phase
                self.corrections.measured(attempt.choice.chosen, fwd, bwd + retained, retained)
                first, over = first or len(attempt.measured) == 1, over or late
        if (first or over) and self.key:
            save_corrections(self.key, self.corrections)
        if (first or over) and not self.joint:
            self._alone(self.attempts[-1])
        return first

    def _alone(self, attempt: Attempt) -> None:
        """Planning alone (a fraction): over its budget, or a faster candidate
        fits, plan again on the next call, at most MAX_COMPILES compiles."""
        budget = attempt.choice.budget_bytes if attempt.choice else None
        over = budget is not None and max(attempt.measured[-1]) > budget
        if over and len(self.attempts) >= MAX_COMPILES:
            lowest = min(max(m) for a in self.attempts for m in a.measured)
            self.error = call(ops().refusal_text, budget, lowest, 0, f"the compiled graph {self.origin}", 0, 0,
                              len(self.attempts))
        elif over or self._faster_fits(attempt):
            self._replan = True

    def _faster_fits(self, attempt: Attempt) -> bool:
        """Whether, with the measured residual, a faster candidate than the one
        running fits the budget: worth the second of at most two compiles."""
        choice = attempt.choice
        budget = self.options["budget"]
        if len(self.attempts) > 1 or choice is None or choice.budget_bytes is None or budget.kind == "lowest":
            return False
        return any(c.extra_ms < choice.chosen.extra_ms and c.peak(self.corrections) <= choice.budget_bytes
                   for c in choice.candidates)

    def info(self) -> dict:
        last = self.attempts[-1]
        choice = last.choice
        measured = [max(m) for a in self.attempts for m in a.measured]
        candidates = self.menu if self.joint and self.menu else (choice.candidates if choice else [])
        return {"compiler": "inductor", "device": self.device, "planner": self.options["planner"],
                "budget": self.options["budget"].text() if self.options["budget"] else None,
                "budget_bytes": self.budget_bytes,
                "predicted_peak_bytes": last.predicted(),
                "unplanned_peak_bytes": choice.default.peak(last.corrections) if choice else None,
                "measured_peak_bytes": max(last.measured[-1]) if last.measured else None,
                "lowest_measured_peak_bytes": min(measured) if measured else None,
                "recompilations": len(self.attempts) - 1, "compiles": len(self.attempts),
                "loss_chunk_rows": self.loss_rows,
                "residual_cached": self.cached, "chosen": self.plan or None,
                "saved": last.saved,
                "predicted_extra_ms": round(choice.chosen.extra_ms, 4) if choice else None,
                "candidates": [c.summary(last.corrections) for c in candidates],
                "attempts": [a.summary() for a in self.attempts],
                "activations": _activations(choice) if choice else [],
                "error": self.error or self.step.error, **self._in_step()}

    def _in_step(self) -> dict:
        """Where this graph stands in the backend's step (report()'s per-graph keys)."""
        r = self.step.last
        return {"index": self.index, "key": self.key,
                "instances": r.instances.get(self.index, 0) if r else None,
                "measured_saved_bytes": r.retained.get(self.index) if r else None,
                "share_bytes": self.step.shares().get(self.index),
                "measured_contribution_bytes": self.step.parts().get(self.index, 0) if r else None}


def symbolic(example_inputs: Sequence[Any]) -> bool:
    """Whether Dynamo compiles this graph for dynamic shapes: a size among
    its inputs, or a tensor with a symbolic size (torch.compile's default
    dynamic=None does this once an input's shape changes)."""
    return any(isinstance(a, torch.SymInt) or (isinstance(a, torch.Tensor) and
                                               any(isinstance(d, torch.SymInt) for d in a.shape))
               for a in example_inputs)


DYNAMIC_WARNING = (
    "mutwo: torch.compile made a graph with dynamic shapes (an input's shape changed, a smaller last "
    "batch for instance, and torch.compile's default dynamic=None compiled the graph again for any "
    "size). mutwo plans static shapes only, so this graph runs torch.compile's own plan, outside the "
    "budget. Pass dynamic=False to torch.compile to have each new shape planned as a graph of its own.")


def unplanned(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """The graph as plain torch.compile compiles it (Inductor, its own partition)."""
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(gm, example_inputs)


# Whether offload copies run on streams of their own (PyTorch's
# activation_offload_separate_stream, with its sunk waits and prefetch) or on
# the compute stream. On an H100 (torch 2.11, 2026-12-06) the separate streams
# changed the loss: BERT-base's went NaN and the LLaMA decoder's drifted by
# 0.012 in 12 steps (bench/results/ladder_h100_2026-12-06.jsonl), where the same
# plans without offload matched plain compile. On the compute stream every copy
# is ordered with every read, so copies are priced as exposed. MUTWO_OFFLOAD_STREAM=1
# turns the streams back on, to test them (tests/python/test_offload_cuda.py).
OFFLOAD_STREAM = os.environ.get("MUTWO_OFFLOAD_STREAM") == "1"


def offloading(host_memory: int, device: str) -> _frontier.Offloading:
    """What a graph on `device` may offload: up to `host_memory` bytes, at
    the card's pinned copy rates, measured once per process. CUDA only: on
    the CPU host memory is the device's, and an offload frees nothing."""
    if host_memory <= 0 or device != "cuda":
        return _frontier.Offloading()
    return _frontier.Offloading(host_memory, *_copy_rates(), overlap=OFFLOAD_STREAM)


@functools.lru_cache(maxsize=None)
def _copy_rates(nbytes: int = 64 << 20) -> tuple[float, float]:
    """(device to host, host to device) GB/s of one pinned non-blocking copy of `nbytes`, the faster of three."""
    device = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    rates = []
    for dst, src in ((host, device), (device, host)):
        best = float("inf")
        for _ in range(3):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end))
        rates.append(nbytes / best / 1e6)  # bytes per ms / 1e6 = GB/s
    return rates[0], rates[1]


def device_of(example_inputs: Sequence[Any]) -> str:
    devices = {a.device.type for a in example_inputs if isinstance(a, torch.Tensor)}
    return "cuda" if "cuda" in devices else "cpu"


def _activations(choice: Choice) -> list[dict]:
    """What plain compile saves, and whether the chosen plan keeps or recomputes each."""
    kept = {n.name for n in choice.chosen.saved}
    out = []
    for n in choice.default.saved:
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor):
            continue
        keep = n.name in kept
        op = n.target._schema.name.split("::")[-1] if isinstance(n.target, torch._ops.OpOverload) else str(n.target)
        out.append({"name": n.name, "module": _compat.module_path(n) or "", "op": op,
                    "bytes": v.untyped_storage().nbytes(), "decision": "keep" if keep else "recompute",
                     "reason": "saved, as plain torch.compile saves it" if keep else
                     f"recomputed in the backward ({choice.chosen.name})"})
    return out


def origin(gm: torch.fx.GraphModule) -> str:
    """Where a Dynamo graph comes from, for messages: "at model.py:31 (layers.0.mlp)",
    from its first op's source line and module path."""
    for n in gm.graph.nodes:
        trace, stack = n.meta.get("stack_trace"), n.meta.get("nn_module_stack")
        if n.op != "call_function" or not (trace or stack):
            continue
        where = ""
        if trace:
            lines = re.findall(r'File "([^"]+)", line (\d+)', trace)
            if lines:
                where = f"at {os.path.basename(lines[-1][0])}:{lines[-1][1]}"
        path = _module_path(list(stack.values())[-1][0]) if stack else ""
        return " ".join(x for x in (where, f"({path})" if path else "") if x) or "(no source line)"
    return "(no source line)"


def _module_path(dynamo: str) -> str:
    """Dynamo's "L['self'].model.layers[0]" as a module path: "model.layers.0"."""
    path = re.sub(r"\[(\d+)\]", r".\1", re.sub(r"^L\['self'\]\.?", "", dynamo))
    return re.sub(r"\[['\"]([^'\"]+)['\"]\]", r".\1", path).strip(".")


def _mib(b: int) -> str:
    return f"{b / 2**20:.1f} MiB"


PLANNERS = ("mutwo", "none")
