# One candidate per graph under one byte budget for the whole step
# (docs/planners.md, "Several graphs"). Plain data in: each graph's
# candidates (bytes and modelled time) and the measured steps; no torch.
#
# A measured step is a list of intervals: each compiled forward, each compiled
# backward, and the code between them, with the most memory allocated in it
# above what the step began with, and how many instances of each graph had
# their forward run and their backward not yet (their retained bytes are
# allocated throughout). Changing graph g's plan from the one that ran (r) to
# o moves an interval's peak by
#   alive_g × (retained_g(o) − retained_g(r))
#   + (forward or backward peak of g under o − under r), where it is g's own,
# so a plan that ran is predicted exactly as measured, and the others by the
# model's differences. solve() keeps the least modelled extra time such that
# every interval of every recorded step fits: all combinations where they are
# few, else μ-TWO's greedy (the cheapest time per byte off the worst
# interval, then back to faster candidates where they still fit).
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

EXHAUSTIVE = 4096  # combinations tried one by one up to this many


@dataclass
class Option:
    """One candidate of one graph, corrected by what measurement showed."""
    name: str
    key: str  # the saved set's hash: the same key is the same partition
    fwd: int  # the forward's added peak, from its start
    bwd: int  # the backward's added peak, from its forward's start, its own retained bytes included
    retained: int  # what the forward leaves allocated until the backward: its saved set and outputs
    extra_ms: float  # modelled recompute time


@dataclass
class Interval:
    """One stretch of a step: a compiled forward ("fwd") or backward ("bwd") of
    `graph`, or the code between two of them ("gap"; "other" is a compiled call
    that trains nothing)."""
    kind: str
    graph: Optional[int]
    start: int  # bytes allocated above the step's base when it began
    alive: dict[int, int]  # graph -> instances whose retained bytes are allocated, the interval's own excluded
    peak: int = 0  # the most allocated above the base within it

    def label(self) -> str:
        return f"{self.kind} {self.graph}" if self.graph is not None else self.kind


@dataclass
class Record:
    """One measured step: its intervals, the option key each graph ran, and per
    graph the most any instance's forward added, its backward added from its
    own start, and its forward left allocated."""
    intervals: list[Interval]
    running: dict[int, str]
    fwd: dict[int, int] = field(default_factory=dict)
    bwd: dict[int, int] = field(default_factory=dict)
    retained: dict[int, int] = field(default_factory=dict)
    instances: dict[int, int] = field(default_factory=dict)

    @property
    def peak(self) -> int:
        return max((i.peak for i in self.intervals), default=0)

    def signature(self) -> tuple:
        """The order in which graphs ran forward and backward."""
        return tuple((i.kind, i.graph) for i in self.intervals if i.kind in ("fwd", "bwd"))

    def at_peak(self) -> Interval:
        return max(self.intervals, key=lambda i: i.peak)


@dataclass
class Joint:
    """solve()'s answer: an option index per graph, its predicted step peak
    and weighted extra time; the lowest peak any choice reaches (floor)."""
    choice: dict[int, int]
    peak: int
    extra_ms: float
    feasible: bool
    floor: int
    floor_choice: dict[int, int]
    method: str


def _matrices(menus: dict[int, list[Option]], records: list[Record]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The measured peaks of every interval of every record, and per graph
    the change each option makes to each of them."""
    base = np.array([i.peak for r in records for i in r.intervals], dtype=np.float64)
    coef = {g: np.zeros((len(m), len(base))) for g, m in menus.items()}
    col = 0
    for r in records:
        ran = {g: next((o for o in menus[g] if o.key == r.running.get(g)), None) for g in menus}
        for iv in r.intervals:
            for g, options in menus.items():
                run = ran[g]
                if run is None:  # the graph did not run in this step, or ran a plan not among its options
                    continue
                for k, o in enumerate(options):
                    delta = iv.alive.get(g, 0) * (o.retained - run.retained)
                    if iv.graph == g and iv.kind == "fwd":
                        delta += o.fwd - run.fwd
                    elif iv.graph == g and iv.kind == "bwd":
                        delta += o.bwd - run.bwd
                    coef[g][k, col] = delta
            col += 1
    return base, coef


def interval_peaks(menus: dict[int, list[Option]], records: list[Record], choice: dict[int, int]) -> np.ndarray:
    """The predicted peak of every interval of `records` under `choice` (graph -> option index)."""
    base, coef = _matrices(menus, records)
    return base + sum((coef[g][k] for g, k in choice.items()), np.zeros_like(base))


def solve(menus: dict[int, list[Option]], records: list[Record], budget: int, weights: dict[int, int],
          fixed: Optional[dict[int, int]] = None) -> Joint:
    """One option per graph of `menus` (graph -> options) such that every
    interval of every record fits `budget`, with the least extra time, each
    graph's weighted by how often it runs per step; `fixed` graphs keep the
    option given."""
    fixed = fixed or {}
    graphs = sorted(menus)
    base, coef = _matrices(menus, records)
    allowed = {g: [fixed[g]] if g in fixed else list(range(len(menus[g]))) for g in graphs}
    times = {g: np.array([weights.get(g, 1) * o.extra_ms for o in menus[g]]) for g in graphs}
    combos = 1
    for g in graphs:
        combos *= len(allowed[g])
    if combos <= EXHAUSTIVE:
        return _exhaustive(graphs, allowed, base, coef, times, budget)
    return _greedy(graphs, allowed, base, coef, times, budget)


def _exhaustive(graphs: list[int], allowed: dict[int, list[int]], base: np.ndarray, coef: dict[int, np.ndarray],
                times: dict[int, np.ndarray], budget: int) -> Joint:
    index = np.array(list(itertools.product(*(allowed[g] for g in graphs))), dtype=np.int64).reshape(-1, len(graphs))
    total = np.tile(base, (len(index), 1))
    cost = np.zeros(len(index))
    for j, g in enumerate(graphs):
        total += coef[g][index[:, j]]
        cost += times[g][index[:, j]]
    peaks = total.max(axis=1) if total.shape[1] else np.zeros(len(index))
    low = int(np.lexsort((cost, peaks))[0])
    fits = np.flatnonzero(peaks <= budget)
    best = int(fits[np.lexsort((peaks[fits], cost[fits]))[0]]) if len(fits) else low

    def pick(row: int) -> dict[int, int]:
        return {g: int(index[row, j]) for j, g in enumerate(graphs)}
    return Joint(pick(best), int(peaks[best]), float(cost[best]), bool(len(fits)), int(peaks[low]), pick(low),
                 "exhaustive")


def _greedy(graphs: list[int], allowed: dict[int, list[int]], base: np.ndarray, coef: dict[int, np.ndarray],
            times: dict[int, np.ndarray], budget: float) -> Joint:
    def peaks_of(choice: dict[int, int]) -> np.ndarray:
        return base + sum((coef[g][choice[g]] for g in graphs), np.zeros_like(base))

    def lower(choice: dict[int, int], limit: float, by_time: bool) -> dict[int, int]:
        """Moves off the worst interval until every one fits `limit`: the least
        time per byte taken off it (by_time), else the most bytes."""
        choice = dict(choice)
        for _ in range(sum(len(a) for a in allowed.values()) * 4):
            peaks = peaks_of(choice)
            worst = int(np.argmax(peaks)) if len(peaks) else 0
            if not len(peaks) or peaks[worst] <= limit:
                break
            best, best_score = None, None
            for g in graphs:
                for k in allowed[g]:
                    gain = coef[g][choice[g], worst] - coef[g][k, worst]
                    if gain <= 0:
                        continue
                    moved = peaks - coef[g][choice[g]] + coef[g][k]
                    if moved.max() >= peaks[worst]:
                        continue  # moves the peak elsewhere, no lower
                    score = (max(times[g][k] - times[g][choice[g]], 0.0) / gain, -gain) if by_time else (-gain,)
                    if best_score is None or score < best_score:
                        best, best_score = (g, k), score
            if best is None:
                break
            choice[best[0]] = best[1]
        return choice

    fastest = {g: min(allowed[g], key=lambda k: (times[g][k], coef[g][k].max(initial=0))) for g in graphs}
    choice = lower(fastest, budget, by_time=True)
    feasible = bool(peaks_of(choice).max(initial=0) <= budget)
    if feasible:  # back to faster options where they still fit, the most often run graphs first
        for g in sorted(graphs, key=lambda g: -times[g].max(initial=0)):
            for k in sorted(allowed[g], key=lambda k: times[g][k]):
                if times[g][k] >= times[g][choice[g]]:
                    break
                trial = {**choice, g: k}
                if peaks_of(trial).max(initial=0) <= budget:
                    choice = trial
                    break
    floor_choice = lower(choice, float("-inf"), by_time=False)
    cost = float(sum(times[g][choice[g]] for g in graphs))
    return Joint(choice, int(peaks_of(choice).max(initial=0)), cost, feasible,
                 int(peaks_of(floor_choice).max(initial=0)), floor_choice, "greedy")
