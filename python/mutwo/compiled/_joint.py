# One candidate per graph under one byte budget for the whole step
# (docs/compiled.md, "Several graphs"): each graph's candidates (bytes and
# modelled time) and the measured steps, read into plain arrays for the core.
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
# model's differences. The core's solve (plan/compiled_step.h) keeps the least
# modelled extra time such that every interval of every recorded step fits:
# all combinations where they are few, else μ-TWO's greedy.
#
# A graph called several times per step (per-block compile: one graph for
# every identical block) may also run two of its candidates (Split): its
# first `count` calls of a step one, the rest the other. Backwards run in the
# reverse order of their forwards, so the instances awaiting their backward
# are always the first ones; a budget between two candidates' step peaks is
# then met at a cost between theirs, not the lower one's.
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from mutwo._ext import call, ops


@dataclass
class Option:
    """One candidate of one graph, corrected by what measurement showed."""
    name: str
    key: str  # the saved set's hash: the same key is the same partition
    fwd: int  # the forward's added peak, from its start
    bwd: int  # the backward's added peak, from its forward's start, its own retained bytes included
    retained: int  # what the forward leaves allocated until the backward: its saved set and outputs
    extra_ms: float  # modelled recompute time

    def holds(self, alive: int, own: str) -> int:
        """This graph's bytes in an interval: `alive` instances' retained bytes
        awaiting their backward, and, where the interval is one of its own
        calls ("fwd" or "bwd"), that call's peak."""
        return alive * self.retained + (self.fwd if own == "fwd" else self.bwd if own == "bwd" else 0)


@dataclass
class Split:
    """Two candidates of a graph called `instances` times per step: its first
    `count` calls of each step run `first`, the others `then`."""
    first: Option
    count: int
    then: Option
    instances: int

    @property
    def name(self) -> str:
        return split_name(self.first.name, self.count, self.then.name)

    @property
    def key(self) -> str:
        return split_name(self.first.key, self.count, self.then.key)

    @property
    def extra_ms(self) -> float:
        """Per call, averaged over the step's calls (solve() weights it by them)."""
        return (self.count * self.first.extra_ms + (self.instances - self.count) * self.then.extra_ms) / self.instances

    def holds(self, alive: int, own: str) -> int:
        """As Option.holds: the instances awaiting their backward are the first
        `alive`, and the call of the interval is instance number `alive`."""
        first = min(alive, self.count)
        mine = self.first if alive < self.count else self.then
        return first * self.first.retained + (alive - first) * self.then.retained + mine.holds(0, own)


Choice = Union[Option, Split]


def split_name(first: str, count: int, then: str) -> str:
    return f"{first}*{count}+{then}"


def parse(name: str) -> tuple[str, int, str]:
    """A Split's name as (first, count, then); a candidate's own as (name, 0, "")."""
    head, plus, then = name.rpartition("+")
    first, star, count = head.rpartition("*")
    if not plus or not star or not count.isdigit():
        return name, 0, ""
    return first, int(count), then


def candidates(name: str) -> list[str]:
    """The candidates a choice's name runs: a Split's two, or the one."""
    first, count, then = parse(name)
    return [first, then] if count else [first]


def with_splits(options: list[Option], instances: int) -> list[Choice]:
    """`options` and, for a graph called more than once a step, every split of
    two of them that are not dominated (another as fast with no more bytes)."""
    if instances < 2:
        return list(options)
    distinct = list({o.key: o for o in reversed(options)}.values())[::-1]  # the first of each partition

    def dominated(o: Option) -> bool:
        return any(p is not o and p.extra_ms <= o.extra_ms and p.retained <= o.retained and p.fwd <= o.fwd
                   and p.bwd <= o.bwd and (p.extra_ms, p.retained, p.fwd, p.bwd) != (o.extra_ms, o.retained, o.fwd,
                                                                                     o.bwd) for p in distinct)
    kept = [o for o in distinct if not dominated(o)]
    return list(options) + [Split(a, k, b, instances) for a in kept for b in kept if a is not b
                            for k in range(1, instances)]


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
    """One measured step: its intervals, the option key each graph ran (a
    Split's where it ran two), and per graph and candidate key that ran the
    most any of its calls' forward added, its backward added from its own
    start, and its forward left allocated (by_plan); fwd, bwd and retained
    are the same per graph."""
    intervals: list[Interval]
    running: dict[int, str]
    instances: dict[int, int] = field(default_factory=dict)
    by_plan: dict[int, dict[str, list[int]]] = field(default_factory=dict)  # graph -> key -> [fwd, bwd, retained]

    def most(self, graph: int, plan: str, fwd: int = 0, bwd: int = 0, retained: int = 0) -> None:
        """Counts one call of `graph` under candidate `plan`: the most of each figure."""
        seen = self.by_plan.setdefault(graph, {}).setdefault(plan, [0, 0, 0])
        for i, v in enumerate((fwd, bwd, retained)):
            seen[i] = max(seen[i], v)

    def _per_graph(self, i: int) -> dict[int, int]:
        return {g: max(v[i] for v in plans.values()) for g, plans in self.by_plan.items()}

    @property
    def fwd(self) -> dict[int, int]:
        return self._per_graph(0)

    @property
    def bwd(self) -> dict[int, int]:
        return self._per_graph(1)

    @property
    def retained(self) -> dict[int, int]:
        return self._per_graph(2)

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


def ran(options: list[Choice], key: Optional[str], instances: int = 0) -> Optional[Choice]:
    """The option that ran under `key`: one of `options`, or a Split of two of
    them over `instances` calls a step (at least its count and one more)."""
    found = next((o for o in options if o.key == key), None)
    first, count, then = parse(key or "")
    if found is not None or not count:
        return found
    a = next((o for o in options if o.key == first and isinstance(o, Option)), None)
    b = next((o for o in options if o.key == then and isinstance(o, Option)), None)
    return Split(a, count, b, max(instances, count + 1)) if a and b else None


def _matrices(menus: dict[int, list[Choice]], records: list[Record]) -> tuple[list[int], dict[int, list[list[int]]]]:
    """The measured peaks of every interval of every record, and per graph
    the change each option makes to each of them."""
    base = [i.peak for r in records for i in r.intervals]
    coef = {g: [[0] * len(base) for _ in m] for g, m in menus.items()}
    col = 0
    for r in records:
        runs = {g: ran(menus[g], r.running.get(g)) for g in menus}
        for iv in r.intervals:
            for g, options in menus.items():
                run = runs[g]
                if run is None:  # the graph did not run in this step, or ran a plan not among its options
                    continue
                alive, own = iv.alive.get(g, 0), iv.kind if iv.graph == g else ""
                ran_holds = run.holds(alive, own)
                for k, o in enumerate(options):
                    coef[g][k][col] = o.holds(alive, own) - ran_holds
            col += 1
    return base, coef


def interval_peaks(menus: dict[int, list[Choice]], records: list[Record], choice: dict[int, int]) -> list[int]:
    """The predicted peak of every interval of `records` under `choice` (graph -> option index)."""
    base, coef = _matrices(menus, records)
    return [b + sum(coef[g][k][i] for g, k in choice.items()) for i, b in enumerate(base)]


def solve(menus: dict[int, list[Choice]], records: list[Record], budget: int, weights: dict[int, int],
          only: Optional[dict[int, list[int]]] = None, method: str = "auto") -> Joint:
    """One option per graph of `menus` (graph -> options) such that every
    interval of every record fits `budget`, with the least extra time, each
    graph's weighted by how often it runs per step; the graphs of `only`
    choose among the options it lists. The core solves it
    (plan::compiled::solve_step); method "greedy" skips its exhaustive search."""
    only = only or {}
    graphs = sorted(menus)
    base, coef = _matrices(menus, records)
    allowed = [list(only[g]) if g in only else list(range(len(menus[g]))) for g in graphs]
    choice, peak, extra_ms, feasible, floor, floor_choice, how = call(
        ops().solve_step, base, [len(menus[g]) for g in graphs],
        [float(weights.get(g, 1) * o.extra_ms) for g in graphs for o in menus[g]],
        [v for g in graphs for row in coef[g] for v in row], [len(a) for a in allowed],
        [k for a in allowed for k in a], int(budget), method)
    return Joint(dict(zip(graphs, choice)), peak, extra_ms, feasible, floor, dict(zip(graphs, floor_choice)), how)
