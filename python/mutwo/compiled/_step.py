# The training step of one compiled-route backend, across all of its graphs
# (docs/python.md, "Several graphs, one budget").
#
# torch.compile hands a backend one graph per region: per-block compile one
# per distinct block (identical blocks share one, called once per block), a
# graph break two or more, DDP's optimizer one per gradient bucket. A forward
# graph's saved set stays allocated until its backward runs, so the graphs'
# plans compete for one peak. Here:
# - Tracker measures each step at the boundaries of every compiled forward and
#   backward (CompiledGraph calls it), from the first forward to the last
#   backward: what is allocated, the most allocated in between, and which
#   graphs' forwards are awaiting their backward (_joint.Record);
# - Step holds the backend's graphs and one byte budget: after each measured
#   step it chooses one candidate per graph (_joint.solve) and tells the graphs
#   whose plan changes to compile again on their next call; under torchrun the
#   ranks agree on the plan first (_ranks).
from __future__ import annotations

import dataclasses
import weakref
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from mutwo.compiled import _joint, _ranks
from mutwo._ext import call, ops
from mutwo.compiled._joint import Interval, Record

MAX_COMPILES = 3  # per graph: its first plan, one with the measured step, one more if that was still over
_TRACKERS: "weakref.WeakSet[Tracker]" = weakref.WeakSet()


class Tracker:
    """One device's step as measured at the boundaries of compiled calls. Every
    boundary reads the allocator (current bytes, peak since the last read),
    gives the peak to the open interval of every tracker on the device (two
    backends in one step measure each other's graphs as code between theirs)
    and starts the peak again.

    Starting the allocator's peak again is what the user's own
    torch.cuda.max_memory_allocated() reads too, so a step is measured only
    when `wanted()` says so at its start (a plan not yet measured): once the
    plans settle, the tracker only counts which forwards await their backward
    and leaves the allocator's statistics alone."""

    def __init__(self, memory: Callable[[str, bool], tuple[int, int]], device: str,
                 wanted: Callable[[], bool] = lambda: True) -> None:
        self.memory, self.device, self.wanted = memory, device, wanted
        self.longest = 0
        self.quiet = False  # this step is not measured
        self.calling: dict[int, str] = {}  # graph -> the candidate key of its forward in progress
        self._clear()
        _TRACKERS.add(self)

    def _clear(self) -> None:
        self.intervals: list[Interval] = []
        self.open: Optional[Interval] = None
        self.alive: Counter = Counter()
        self.plans: dict[int, list[str]] = {}  # graph -> the candidate key of each instance awaiting its backward
        self.base = 0
        self.record = Record([], {})

    def _read(self) -> int:
        current, peak = self.memory(self.device, False)
        for t in list(_TRACKERS):
            if t.device == self.device and t.open is not None:
                t.open.peak = max(t.open.peak, peak - t.base)
        self.memory(self.device, True)
        return current

    def _close(self, current: int, keep: bool = True) -> Optional[Interval]:
        iv, self.open = self.open, None
        if iv is not None and keep:
            self.intervals.append(iv)
        return iv

    def _begin(self, kind: str, graph: Optional[int], current: int, alive: dict[int, int]) -> None:
        self.open = Interval(kind, graph, current - self.base, {g: n for g, n in alive.items() if n > 0})
        self.open.peak = self.open.start

    def forward_begins(self, graph: int, running: str, plan: Optional[str] = None) -> None:
        """A forward of `graph` begins, the graph running `running` (a
        candidate's key, or a Split's), this call candidate `plan` (running's own)."""
        self.calling[graph] = running if plan is None else plan
        if self.open is None and not +self.alive:  # a step starts: measure it?
            self.quiet = not self.wanted()
            if self.quiet:
                self.base = self.memory(self.device, False)[0]  # a read, no reset
        if self.quiet:
            return
        current = self._read()
        if self.open is None or len(self.intervals) > max(4 * self.longest, 4096):
            # A new step (or one whose backward never came, dropped).
            self._clear()
            self.base = current
        else:
            self._close(current)
        self.record.running[graph] = running
        self._begin("fwd", graph, current, self.alive)

    def forward_ends(self, graph: int, trains: bool) -> None:
        plan = self.calling.pop(graph, "")
        if trains:
            self.plans.setdefault(graph, []).append(plan)
        if self.quiet:
            self.alive[graph] += trains
            return
        current = self._read()
        iv = self._close(current)
        if iv is None:
            return
        if trains:
            r = self.record
            r.most(graph, plan, fwd=iv.peak - iv.start, retained=current - self.base - iv.start)
            r.instances[graph] = r.instances.get(graph, 0) + 1
            self.alive[graph] += 1
        else:
            iv.kind = "other"  # nothing to plan: an evaluation's call, counted as code between graphs
        if not +self.alive:
            self._clear()  # an evaluation outside any step
            return
        self._begin("gap", None, current, self.alive)

    def backward_begins(self, graph: int) -> None:
        if self.quiet:
            return
        current = self._read()
        if self.open is None or self.alive[graph] <= 0:  # a step not measured from its start
            self._clear()
            return
        self._close(current)
        self._begin("bwd", graph, current, self.alive - Counter({graph: 1}))

    def backward_ends(self, graph: int) -> Optional[Record]:
        """The measured step, when this was its last backward."""
        stack = self.plans.get(graph) or [""]
        plan = stack.pop()  # backwards run in the reverse order of their forwards
        if self.quiet:
            self.alive[graph] -= 1
            if not +self.alive:
                self._clear()
            return None
        current = self._read()
        iv = self._close(current)
        if iv is None:
            return None
        r = self.record
        r.most(graph, plan, bwd=iv.peak - iv.start)
        self.alive[graph] -= 1
        if +self.alive:
            self._begin("gap", None, current, self.alive)
            return None
        r.intervals = self.intervals
        self.longest = max(self.longest, len(r.intervals))
        self._clear()
        return r

    def abandon(self) -> None:
        """A compiled call raised: the step is not measured."""
        self._clear()
        self.quiet = False

    @contextmanager
    def compiling(self) -> Iterator[None]:
        """A compile inside a step: what it allocates on the way is not the step's."""
        if self.open is None or self.quiet:
            yield
            return
        kind, graph = self.open.kind, self.open.graph
        self._close(self._read())
        try:
            yield
        finally:
            self._begin(kind, graph, self._read(), self.alive)


class Step:
    """The graphs of one backend and their one budget: bytes, or "lowest" (the
    lowest step peak the graphs' candidates reach together); None: no budget.
    A fraction of the step's activations (`fraction`, 0.6 for "60%") is
    resolved to bytes once, after the first measured step (resolve()): until
    then each graph's first plan holds its own share, and none is refused."""

    def __init__(self, budget: Any, memory: Callable[[str, bool], tuple[int, int]],
                 budget_error: type, fraction: Optional[float] = None) -> None:
        self.budget, self.memory, self.budget_error = budget, memory, budget_error
        self.fraction = fraction
        self.split: Optional[tuple[int, int]] = None  # (F, A) of the step a fraction was resolved on
        self.graphs: list[Any] = []  # CompiledGraph, by index
        self.trackers: dict[str, Tracker] = {}
        self.records: dict[tuple, Record] = {}
        self.last: Optional[Record] = None
        self.lowest: Optional[int] = None  # the lowest measured step peak
        self.steps = 0
        self.joint: Optional[_joint.Joint] = None
        self.error: Optional[str] = None
        self.plans: list[dict] = []  # each joint choice: its predicted step peak, then the measured one
        self.serial = _ranks.serial()

    @property
    def planned(self) -> bool:
        """Whether the graphs plan together, under one budget (resolved or not yet)."""
        return self.budget is not None or self.fraction is not None

    @property
    def label(self) -> str:
        """The budget as the cache of choices names it: "lowest", a percentage or bytes."""
        if self.fraction is not None:
            return f"{self.fraction * 100:.12g}%"
        return "lowest" if self.budget == "lowest" else f"{self.budget}B"

    def tracker(self, device: str) -> Tracker:
        if device not in self.trackers:
            self.trackers[device] = Tracker(self.memory, device, self.unsettled)
        return self.trackers[device]

    def unsettled(self) -> bool:
        """Whether the next step is to be measured: a graph's plan has not
        been measured yet, or will compile again."""
        return self.error is None and any(g.unsettled() for g in self.graphs)

    def add(self, graph: Any) -> int:
        self.graphs.append(graph)
        return len(self.graphs) - 1

    def allocated_in_step(self, device: str) -> int:
        """What the step in progress holds now above its start (0 between steps):
        a graph compiled in the middle of a step plans under the rest of the budget."""
        t = self.tracker(device)
        in_step = t.open is not None or (t.quiet and +t.alive)
        return max(self.memory(device, False)[0] - t.base, 0) if in_step else 0

    # -- after each measured step
    def done(self, record: Record) -> None:
        self.steps += 1
        self.last = record
        self.lowest = record.peak if self.lowest is None else min(self.lowest, record.peak)
        running = {str(g.index): g.running_name() for g in self.graphs if g.index in record.running}
        if self.plans and "measured_peak_bytes" not in self.plans[-1] and \
                all(running.get(g) == n for g, n in self.plans[-1]["choice"].items()):
            self.plans[-1]["measured_peak_bytes"] = record.peak
        firsts = [g for g in record.instances
                  if self.graphs[g].measured(record.running.get(g, ""), record.by_plan.get(g, {}))]
        if not self.planned:
            return
        new = record.signature() not in self.records
        self.records[record.signature()] = record
        if self.budget is None:  # a fraction: the step's one budget, from its first measured step
            self.budget = self.resolve()
            if self.budget is None:
                return
            new = True
        # Over the budget is never silent: plan again, or raise. Under several ranks
        # every measured step is exchanged, since only the rank that is over knows it;
        # the ranks measure the same steps (unsettled() is the same on each), so each
        # arrives, and they all take the proposal of the rank with the highest peak.
        over = isinstance(self.budget, int) and record.peak > self.budget
        if new or firsts or over:
            proposal = self._propose(record)
        elif _ranks.single():
            return  # nothing learnt and within budget: the plan stands
        else:  # within budget here: keep the plans, unless the rank with the highest peak is over
            proposal = {"choice": running, "error": None}
        signature = [(k, g, self.graphs[g].key) for k, g in record.signature()]
        if self.fraction is not None:
            proposal["budget"], proposal["split"] = self.budget, self.split  # every rank holds one resolution
        proposal = _ranks.agree(self.serial, signature, record.peak, proposal)
        self._apply(proposal)
        if not self.error:
            for g in self.graphs:
                if g.index in record.running:
                    g.remember()

    def resolve(self) -> Optional[int]:
        """A fraction f of the step's activations as bytes, once: F + f * A
        (the core's budget_of_fraction), where A is what plain torch.compile
        saves over every graph instance of the step and F the rest of the
        step's peak under plain compile's plans, predicted from the measured
        steps. None where no graph has plain compile's plan among its options."""
        assert self.fraction is not None
        menus, _, weights = self._menus()
        plain = {g: next((k for k, o in enumerate(m) if getattr(o, "name", "") == "compile:1"), None)
                 for g, m in menus.items()}
        if not menus or None in plain.values():
            return None
        unplanned = int(max(_joint.interval_peaks(menus, list(self.records.values()), plain), default=0))
        activations = min(sum(weights[g] * self.graphs[g].activation_bytes() for g in menus), unplanned)
        self.split = (unplanned - activations, activations)
        return int(call(ops().budget_of_fraction, self.fraction, *self.split))

    def _menus(self) -> tuple[dict[int, list[_joint.Choice]], dict[int, list[int]], dict[int, int]]:
        """Per graph its options (a graph called more than once a step also
        Splits of two candidates, _joint.with_splits), those still in reach
        of MAX_COMPILES compiles where that limits them, and its calls per step."""
        menus, weights, reach = {}, {}, {}
        ran = {g for r in self.records.values() for g in r.running}
        for g in self.graphs:
            options = g.options_for_step()
            if not options or g.index not in ran:  # nothing to choose, or no measured step to choose for
                continue
            weights[g.index] = max((r.instances.get(g.index, 0) for r in self.records.values()), default=1)
            menu = _joint.with_splits(options, weights[g.index])
            running = _joint.ran(menu, g.running_key(), weights[g.index])
            if running is not None and running not in menu:  # a Split no longer among the menu's
                menu.append(running)
            menus[g.index] = menu
            left = MAX_COMPILES - len(g.attempts)
            if any(g.missing(o.name) > left for o in menu):
                reach[g.index] = [k for k, o in enumerate(menu) if g.missing(o.name) <= left]
        return menus, reach, weights

    def _propose(self, record: Record) -> dict:
        """This rank's decision: per graph the candidate to compile next, or the
        error to raise. Over budget (or on the step's first choice under
        "lowest"), every graph may change, to MAX_COMPILES compiles; within
        it, only graphs still on their first plan: a faster plan the
        measurement allows is worth one compile, not more."""
        assert self.budget is not None
        menus, reach, weights = self._menus()
        running = {str(g.index): g.running_name() for g in self.graphs if g.index in menus}
        if not menus:
            return {"choice": running, "error": None}
        lowest = self.budget == "lowest"
        over = not lowest and record.peak > self.budget
        settled = {**reach, **{g: [k] for g, k in self._running_indices(menus).items()
                               if len(self.graphs[g].attempts) > 1}}
        records = list(self.records.values())
        limit = -1 if lowest else self.budget
        joint = _joint.solve(menus, records, limit, weights, reach if over else settled)
        if not over and not lowest and not joint.feasible:  # the settled plans no longer fit a step seen
            joint = _joint.solve(menus, records, limit, weights, reach)
        if lowest:  # the floor is the plan
            joint = dataclasses.replace(joint, choice=joint.floor_choice, peak=joint.floor, feasible=True)
        self.joint = joint
        if not joint.feasible:
            if over and all(g in reach and len(reach[g]) <= 1 for g in menus):
                return {"choice": running, "error": self._over_text()}
            return {"choice": running, "error": self._floor_text(joint, menus)}
        return {"choice": {**running, **{str(g): menus[g][k].name for g, k in joint.choice.items()}},
                "error": None}

    def _running_indices(self, menus: dict[int, list[_joint.Choice]]) -> dict[int, int]:
        out = {}
        for g, options in menus.items():
            k = next((k for k, o in enumerate(options) if o.key == self.graphs[g].running_key()), None)
            if k is not None:
                out[g] = k
        return out

    def _apply(self, proposal: dict) -> None:
        if "budget" in proposal:
            self.budget, self.split = proposal["budget"], tuple(proposal["split"] or ()) or None
        if proposal.get("error"):
            self.error = proposal["error"]
            return
        if any(self.graphs[int(g)].running_name() != name for g, name in proposal["choice"].items()):
            self.plans.append({"after_step": self.steps, "choice": dict(proposal["choice"]),
                               "predicted_peak_bytes": self.joint.peak if self.joint else None})
        for g, name in proposal["choice"].items():
            graph = self.graphs[int(g)]
            if name != graph.running_name() and len(graph.attempts) + graph.missing(name) <= MAX_COMPILES:
                graph.retarget(name)

    def _floor_text(self, joint: _joint.Joint, menus: dict) -> str:
        assert isinstance(self.budget, int)
        fixed, activation = self.split or (0, 0)
        return call(ops().refusal_text, self.budget, int(joint.floor), 0, self._what(menus), fixed, activation, 0)

    def _over_text(self) -> str:
        assert isinstance(self.budget, int)
        return call(ops().refusal_text, self.budget, int(self.lowest or 0), 0,
                    f"the {len(self.graphs)} compiled graph(s) of this step", 0, 0, MAX_COMPILES)

    def _what(self, menus: dict) -> str:
        """The graphs a refusal is about: the one, where it comes from, or how many."""
        if len(menus) > 1:
            return f"the {len(menus)} compiled graphs of this step together"
        g = next(iter(menus))
        calls = self.last.instances.get(g, 1) if self.last else 1
        where = getattr(self.graphs[g], "origin", "")
        return " ".join(x for x in ("the compiled graph", where, f"(called {calls} times per step)" if calls > 1 else "")
                        if x)

    def check(self) -> None:
        if self.error:
            raise self.budget_error(self.error)

    # -- report()
    def report(self) -> dict:
        """The step: its budget, order, measured and predicted peaks, and per
        graph its share of the predicted peak and its part of the measured one."""
        r = self.last
        out: dict = {"budget_bytes": self.budget if isinstance(self.budget, int) else None,
                     "graphs": len(self.graphs), "steps_measured": self.steps,
                     "measured_peak_bytes": r.peak if r else None, "lowest_measured_peak_bytes": self.lowest,
                     "order": [i.label() for i in r.intervals if i.kind in ("fwd", "bwd")] if r else [],
                     "predicted_peak_bytes": self.joint.peak if self.joint else None,
                     "floor_bytes": self.joint.floor if self.joint else None,
                     "solver": self.joint.method if self.joint else None, "error": self.error,
                     "plans": self.plans}
        parts = self.parts()
        out["unplanned_peak_bytes"] = self._unplanned_peak()
        out["at_peak"] = r.at_peak().label() if r and r.intervals else None
        out["other_bytes"] = (r.peak - sum(parts.values())) if r else None
        return out

    def _unplanned_peak(self) -> Optional[int]:
        """The step's peak as plain torch.compile would plan every graph,
        predicted from the measured steps (None before one, or where a graph
        has no compile:1 among its options)."""
        if self.budget is None or not self.records:
            return None
        menus, _, _ = self._menus()
        plain = {g: next((k for k, o in enumerate(m) if getattr(o, "name", "") == "compile:1"), None)
                 for g, m in menus.items()}
        if not menus or None in plain.values():
            return None
        return int(max(_joint.interval_peaks(menus, list(self.records.values()), plain), default=0))

    def parts(self) -> dict[int, int]:
        """Each graph's bytes in the latest step's measured peak: its retained
        bytes per instance awaiting its backward, and the peak's own forward or
        backward (its own retained bytes included)."""
        r = self.last
        if r is None or not r.intervals:
            return {}
        iv = r.at_peak()
        retained = r.retained
        parts = {g: n * retained.get(g, 0) for g, n in iv.alive.items()}
        if iv.graph is not None and iv.kind in ("fwd", "bwd"):
            own = iv.peak - iv.start + (retained.get(iv.graph, 0) if iv.kind == "bwd" else 0)
            parts[iv.graph] = parts.get(iv.graph, 0) + own
        return parts

    def shares(self) -> dict[int, int]:
        """Each graph's bytes in the predicted peak of the plan chosen last, on
        the latest step: its retained bytes per instance awaiting its backward,
        and the peak's own forward or backward peak."""
        if self.joint is None or self.last is None or not self.last.intervals:
            return {}
        menus, _, _ = self._menus()
        choice = {g: k for g, k in self.joint.choice.items() if g in menus}
        peaks = _joint.interval_peaks(menus, [self.last], choice)
        iv = self.last.intervals[max(range(len(peaks)), key=peaks.__getitem__)]
        out = {}
        for g, k in choice.items():
            out[g] = menus[g][k].holds(iv.alive.get(g, 0), iv.kind if iv.graph == g else "")
        return out
