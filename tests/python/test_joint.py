# The step-wide choice of the compiled route on plain data, in milliseconds
# (python/mutwo/compiled/_joint.py, _step.py; docs/compiled.md, "Several graphs"):
# - the Tracker turns the allocator's readings at each compiled call's
#   boundaries into a Record: intervals, which graphs await their backward,
#   per-graph forward, backward and retained bytes;
# - solve() on synthetic steps: a plan that ran is predicted as measured; the
#   chosen plan fits every interval of every record; a smaller budget never
#   costs less time; the greedy never beats the exhaustive search; the floor
#   is the lowest any choice reaches.
from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from mutwo.compiled import _joint, _step
from mutwo.compiled._joint import Interval, Option, Record


class FakeMemory:
    """An allocator's counters, driven by hand: (current, peak since reset)."""

    def __init__(self) -> None:
        self.current = self.peak = 0

    def __call__(self, device: str, reset: bool) -> tuple[int, int]:
        if reset:
            self.peak = self.current
        return self.current, self.peak

    def alloc(self, n: int) -> None:
        self.current += n
        self.peak = max(self.peak, self.current)

    def free(self, n: int) -> None:
        self.current -= n


def test_tracker_records_two_blocks_of_one_graph() -> None:
    mem = FakeMemory()
    t = _step.Tracker(mem, "cpu")
    mem.alloc(1000)  # parameters: before the step, not its
    for _ in range(2):  # one graph, two blocks: each forward adds 300 for a while and keeps 100
        t.forward_begins(0, "a")
        mem.alloc(400)
        mem.free(300)
        t.forward_ends(0, trains=True)
    mem.alloc(50)  # the loss, between the graphs
    mem.free(50)
    records = []
    for _ in range(2):  # each backward: 70 more at its peak, then its block's 100 freed
        t.backward_begins(0)
        mem.alloc(70)
        mem.free(170)
        records.append(t.backward_ends(0))
    assert records[0] is None and records[1] is not None
    r = records[1]
    assert r.instances == {0: 2} and r.retained == {0: 100} and r.fwd == {0: 400} and r.bwd == {0: 70}
    assert [i.label() for i in r.intervals] == ["fwd 0", "gap", "fwd 0", "gap", "bwd 0", "gap", "bwd 0"]
    assert [i.alive for i in r.intervals if i.kind == "bwd"] == [{0: 1}, {}]
    assert r.peak == 500 and r.at_peak().label() == "fwd 0"  # the second forward: 100 kept and 400


def test_tracker_leaves_the_allocator_alone_once_settled() -> None:
    """A step that starts while nothing is to be measured reads nothing and
    resets nothing (the user's max_memory_allocated stays theirs); the next
    step after a replan is measured again, from its start."""
    resets = []

    class Counting(FakeMemory):
        def __call__(self, device: str, reset: bool) -> tuple[int, int]:
            resets.append(reset)
            return super().__call__(device, reset)

    mem, wanted = Counting(), [False]
    t = _step.Tracker(mem, "cpu", lambda: wanted[0])

    def step() -> object:
        t.forward_begins(0, "a")
        mem.alloc(400)
        mem.free(300)
        t.forward_ends(0, trains=True)
        wanted[0] = True  # a replan within the step: measured from the next step's start
        t.backward_begins(0)
        mem.alloc(70)
        mem.free(170)
        return t.backward_ends(0)

    assert step() is None and not any(resets) and t.quiet
    assert mem.peak == 400, "the peak statistic saw the whole step"
    r = step()
    assert r is not None and not t.quiet and any(resets)
    assert r.fwd == {0: 400} and r.bwd == {0: 70} and r.retained == {0: 100}


def test_tracker_record_contents() -> None:
    mem = FakeMemory()
    t = _step.Tracker(mem, "cpu")
    t.forward_begins(0, "a")
    mem.alloc(400)
    mem.free(300)
    t.forward_ends(0, trains=True)
    t.forward_begins(1, "b")
    mem.alloc(60)
    t.forward_ends(1, trains=True)
    mem.alloc(500)  # code between: the peak of the step
    mem.free(500)
    t.backward_begins(1)
    mem.free(60)
    assert t.backward_ends(1) is None
    t.backward_begins(0)
    mem.alloc(20)
    mem.free(120)
    record = t.backward_ends(0)
    assert record is not None
    assert record.signature() == (("fwd", 0), ("fwd", 1), ("bwd", 1), ("bwd", 0))
    assert record.peak == 660 and record.at_peak().kind == "gap" and record.at_peak().alive == {0: 1, 1: 1}
    assert record.fwd == {0: 400, 1: 60} and record.retained == {0: 100, 1: 60}
    assert record.bwd == {0: 20, 1: 0} and record.running == {0: "a", 1: "b"} and record.instances == {0: 1, 1: 1}
    bwd0 = [i for i in record.intervals if i.label() == "bwd 0"][0]
    assert bwd0.alive == {} and bwd0.start == 100 and bwd0.peak == 120


def test_tracker_ignores_evaluation_and_compiles() -> None:
    mem = FakeMemory()
    t = _step.Tracker(mem, "cpu")
    t.forward_begins(0, "a")
    mem.alloc(10)
    t.forward_ends(0, trains=False)  # no_grad: no step
    assert t.open is None and not t.intervals
    t.forward_begins(0, "a")
    mem.alloc(10)
    t.forward_ends(0, trains=True)
    with t.compiling():  # what a compile allocates and frees is not the step's
        mem.alloc(10_000)
        mem.free(10_000)
    t.backward_begins(0)
    mem.free(10)
    record = t.backward_ends(0)
    assert record is not None and record.peak == 10


def _options(rng: random.Random, n: int) -> list[Option]:
    """n candidates: the first plain compile's; each later saves less and costs more."""
    out, retained, ms = [], rng.randint(500, 1000), 0.0
    for k in range(n):
        out.append(Option(f"c{k}", f"k{k}", fwd=retained + rng.randint(0, 200), bwd=retained + rng.randint(50, 300),
                          retained=retained, extra_ms=ms))
        retained = max(50, retained - rng.randint(30, 200))
        ms += rng.uniform(0.1, 2.0)
    return out


def _stack_record(menus: dict[int, list[Option]], running: dict[int, int], rng: random.Random) -> Record:
    """A step measured under `running`: forwards in order, backwards reversed,
    its peaks as the options say plus some code between."""
    graphs = sorted(menus)
    ivs, alive, level = [], {}, 0
    for g in graphs:
        o = menus[g][running[g]]
        ivs.append(Interval("fwd", g, level, dict(alive), level + o.fwd))
        level += o.retained
        alive[g] = alive.get(g, 0) + 1
        ivs.append(Interval("gap", None, level, dict(alive), level + rng.randint(0, 100)))
    for g in reversed(graphs):
        o = menus[g][running[g]]
        alive[g] -= 1
        ivs.append(Interval("bwd", g, level, {k: n for k, n in alive.items() if n}, level - o.retained + o.bwd))
        level -= o.retained
    return Record(ivs, {g: menus[g][running[g]].key for g in graphs})


def test_a_plan_that_ran_is_predicted_as_measured() -> None:
    rng = random.Random(0)
    menus = {g: _options(rng, 5) for g in range(3)}
    running = {0: 1, 1: 0, 2: 3}
    record = _stack_record(menus, running, rng)
    peaks = _joint.interval_peaks(menus, [record], running)
    assert [int(p) for p in peaks] == [i.peak for i in record.intervals]
    # and any other plan as the step would measure it
    other = {0: 4, 1: 2, 2: 0}
    again = _stack_record(menus, other, random.Random(0))
    assert max(_joint.interval_peaks(menus, [record], other)) == pytest.approx(again.peak, abs=100)


@pytest.mark.parametrize("seed", range(6))
def test_the_choice_fits_costs_least_and_tightens_monotonically(seed: int) -> None:
    rng = random.Random(seed)
    menus = {g: _options(rng, rng.randint(2, 6)) for g in range(3)}
    record = _stack_record(menus, {g: 0 for g in menus}, rng)
    weights = {g: rng.randint(1, 3) for g in menus}
    floor = _joint.solve(menus, [record], -1, weights).floor
    previous = -1.0
    for budget in sorted({record.peak, floor, (floor + record.peak) // 2, floor + (record.peak - floor) // 4},
                         reverse=True):
        j = _joint.solve(menus, [record], budget, weights)
        assert j.feasible and j.method == "exhaustive"
        assert max(_joint.interval_peaks(menus, [record], j.choice)) <= budget
        # least time among all fitting choices
        best = min(sum(weights[g] * menus[g][c[i]].extra_ms for i, g in enumerate(sorted(menus)))
                   for c in itertools.product(*(range(len(menus[g])) for g in sorted(menus)))
                   if max(_joint.interval_peaks(menus, [record], dict(zip(sorted(menus), c)))) <= budget)
        assert j.extra_ms == pytest.approx(best)
        assert j.extra_ms >= previous - 1e-9  # a smaller budget never costs less
        previous = j.extra_ms
    assert not _joint.solve(menus, [record], floor - 1, weights).feasible


@pytest.mark.parametrize("seed", range(6))
def test_the_greedy_fits_and_never_beats_the_exhaustive(seed: int) -> None:
    rng = random.Random(100 + seed)
    menus = {g: _options(rng, 6) for g in range(4)}
    record = _stack_record(menus, {g: 0 for g in menus}, rng)
    weights = {g: 1 for g in menus}
    exact = _joint.solve(menus, [record], -1, weights)
    budget = (exact.floor + record.peak) // 2
    exact = _joint.solve(menus, [record], budget, weights)
    greedy = _joint.solve(menus, [record], budget, weights, method="greedy")
    assert greedy.method == "greedy" and exact.method == "exhaustive"
    if greedy.feasible:
        assert max(_joint.interval_peaks(menus, [record], greedy.choice)) <= budget
        assert greedy.extra_ms >= exact.extra_ms - 1e-9
    assert greedy.floor >= exact.floor


def test_fixed_graphs_keep_their_option() -> None:
    rng = random.Random(7)
    menus = {g: _options(rng, 4) for g in range(2)}
    record = _stack_record(menus, {0: 0, 1: 0}, rng)
    j = _joint.solve(menus, [record], -1, {0: 1, 1: 1}, only={0: [2]})
    assert j.floor_choice[0] == 2 and j.choice[0] == 2


class FakeGraph:
    """What Step asks of a CompiledGraph, on plain data: a menu of options and
    the plan running (its compiles), a candidate or a Split of two."""

    def __init__(self, step: _step.Step, options: list[Option]) -> None:
        self.menu, self.names = options, [options[0].name]
        self.step, self.index, self.key = step, step.add(self), f"graph{len(step.graphs)}"
        self.attempts = [options[0].name]  # each candidate compiled
        self.seen = ""  # the running key a measured step ran

    def options_for_step(self) -> list[Option]:
        return self.menu

    def running_name(self) -> str:
        return self.names[-1]

    def option(self, name: str) -> Option:
        return next(o for o in self.menu if o.name == name)

    def running_key(self) -> str:
        first, count, then = _joint.parse(self.running_name())
        if count:
            return _joint.split_name(self.option(first).key, count, self.option(then).key)
        return self.option(first).key

    def call(self, instance: int) -> Option:
        """The candidate the call of this instance runs."""
        first, count, then = _joint.parse(self.running_name())
        return self.option(first if not count or instance < count else then)

    def measured(self, running: str, by_plan: dict) -> bool:
        self.seen = running
        return False

    def unsettled(self) -> bool:
        return self.seen != self.running_key()

    def missing(self, name: str) -> int:
        return sum(n not in self.attempts for n in _joint.candidates(name))

    def remember(self) -> None:
        self.remembered = self.running_name()

    def retarget(self, name: str) -> None:  # compiled at once here
        self.attempts += [n for n in _joint.candidates(name) if n not in self.attempts]
        self.names.append(name)


def _run_step(step: _step.Step, mem: FakeMemory, graphs: list[FakeGraph]) -> None:
    """Forwards in order, backwards reversed, each as its running option says
    (a graph listed n times is called n times, a Split's first instances first)."""
    t = step.tracker("cpu")
    calls = []
    for g in graphs:
        o = g.call(t.alive[g.index])
        calls.append(o)
        t.forward_begins(g.index, g.running_key(), o.key)
        mem.alloc(o.fwd)
        mem.free(o.fwd - o.retained)
        t.forward_ends(g.index, trains=True)
    for g, o in reversed(list(zip(graphs, calls))):
        t.backward_begins(g.index)
        mem.alloc(o.bwd - o.retained)
        mem.free(o.bwd)
        record = t.backward_ends(g.index)
        if record is not None:
            step.done(record)


K = 2**10


def _menu(prefix: str) -> list[Option]:
    """Three plans: plain compile's, one saving half, one saving a tenth (slower each)."""
    return [Option(f"{prefix}:1", f"{prefix}-a", 1000 * K, 1200 * K, 1000 * K, 0.0),
            Option(f"{prefix}:0.5", f"{prefix}-b", 1000 * K, 700 * K, 500 * K, 1.0),
            Option(f"{prefix}:0.1", f"{prefix}-c", 1000 * K, 400 * K, 100 * K, 3.0)]


def test_the_step_replans_its_graphs_together_and_a_later_graph_with_them() -> None:
    mem = FakeMemory()
    step = _step.Step(1500 * K, mem, RuntimeError)
    a = FakeGraph(step, _menu("a"))
    _run_step(step, mem, [a])  # alone it fits (1200): nothing changes
    assert a.names == ["a:1"] and step.last is not None and step.last.peak == 1200 * K
    b = FakeGraph(step, _menu("b"))  # a graph that appears later: the step is now a, b
    _run_step(step, mem, [a, b])
    assert step.last.peak == 2200 * K  # measured over: a's 1000 retained under b's 1200
    # both replanned, together: the least time that fits (a:0.1 with b:1 fits too, slower)
    assert a.names == ["a:1", "a:0.5"] and b.names == ["b:1", "b:0.5"] and step.error is None
    _run_step(step, mem, [a, b])
    assert step.last.peak == 1500 * K and step.joint is not None and step.joint.peak == step.last.peak


def test_the_step_names_its_floor() -> None:
    mem = FakeMemory()
    step = _step.Step(600 * K, mem, RuntimeError)
    graphs = [FakeGraph(step, _menu("a")), FakeGraph(step, _menu("b"))]
    _run_step(step, mem, graphs)
    assert step.error is not None and "the 2 compiled graphs of this step together" in step.error, step.error
    assert "lowest predicted added peak is 1.1 MiB" in step.error  # a's 100 KiB under b's 1000 KiB forward
    with pytest.raises(RuntimeError, match=r"lowest predicted added peak is [0-9.]+ MiB.*try budget="):
        step.check()


def test_a_graph_compiled_three_times_keeps_its_plan() -> None:
    mem = FakeMemory()
    step = _step.Step(1100 * K, mem, RuntimeError)
    a = FakeGraph(step, _menu("a"))
    a.attempts = ["a:1", "x", "y"]  # at _step.MAX_COMPILES, a:0.5 not compiled: its plan stands, though a:0.5 would fit
    _run_step(step, mem, [a])
    assert a.names == ["a:1"]
    with pytest.raises(RuntimeError, match=r"lowest measured added peak is 1.2 MiB after 3 compiles"):
        step.check()


def test_a_graph_called_eight_times_splits_between_two_candidates() -> None:
    # One graph per identical block, called 8 times a step (per-block
    # compile). Uniformly, a:1 peaks at 7 x 1000 + 1200 = 8200 KiB and a:0.5
    # at 7 x 500 + 1000 = 4500 KiB (the last forward): at 6000 KiB only a:0.5
    # fits uniformly, at 8 x 1.0 ms. Some instances on a:1 fit too, for less.
    mem = FakeMemory()
    step = _step.Step(6000 * K, mem, RuntimeError)
    a = FakeGraph(step, _menu("a"))
    _run_step(step, mem, [a] * 8)
    assert step.last is not None and step.last.peak == 8200 * K and step.last.instances == {0: 8}
    first, count, then = _joint.parse(a.running_name())
    assert 0 < count < 8 and {first, then} <= {"a:1", "a:0.5", "a:0.1"}, a.running_name()
    assert step.joint is not None and step.joint.peak <= 6000 * K and step.joint.extra_ms < 8.0
    assert a.attempts == ["a:1"] + [n for n in ("a:0.5", "a:0.1") if n in (first, then)]  # one compile per candidate
    _run_step(step, mem, [a] * 8)
    assert step.last.peak == step.joint.peak <= 6000 * K  # the Split's step, predicted as measured
    assert set(step.last.by_plan[0]) == {a.option(first).key, a.option(then).key}


def test_splits_pair_only_candidates_no_other_beats() -> None:
    menu = _menu("a") + [Option("a:0.4", "a-d", 1000 * K, 700 * K, 600 * K, 2.0),  # a:0.5 is as fast, smaller
                         Option("a:0.5b", "a-b", 1000 * K, 700 * K, 500 * K, 1.0)]  # a:0.5's partition again
    assert _joint.with_splits(menu, 1) == menu
    splits = [o for o in _joint.with_splits(menu, 4) if isinstance(o, _joint.Split)]
    assert {(s.first.name, s.then.name) for s in splits} == {(x, y) for x in ("a:1", "a:0.5", "a:0.1")
                                                             for y in ("a:1", "a:0.5", "a:0.1") if x != y}
    assert sorted({s.count for s in splits}) == [1, 2, 3]
    s = next(s for s in splits if (s.first.name, s.count, s.then.name) == ("a:0.1", 1, "a:1"))
    assert _joint.parse(s.name) == ("a:0.1", 1, "a:1") and _joint.parse("compile:0.5") == ("compile:0.5", 0, "")
    assert s.extra_ms == pytest.approx(3.0 / 4)
    # awaiting their backward: the first instance on a:0.1, two more on a:1; the call is the fourth's, on a:1
    assert s.holds(3, "bwd") == 100 * K + 2 * 1000 * K + 1200 * K


def test_a_split_that_ran_is_found_by_its_key_over_the_steps_calls() -> None:
    menu = _menu("a")  # a Split of a:0.1 and a:1 not in the menu: found from its key
    found = _joint.ran(menu, _joint.split_name("a-c", 1, "a-a"), 4)
    assert isinstance(found, _joint.Split) and (found.first.name, found.count, found.then.name) == ("a:0.1", 1, "a:1")
    assert found.extra_ms == pytest.approx(3.0 / 4)  # one call of four on a:0.1
    assert _joint.ran(menu, "a-b") is menu[1] and _joint.ran(menu, "unknown") is None


def test_a_later_step_over_the_budget_is_never_silent() -> None:
    """The same step, measured within its budget and then over it (a plan's
    miss grew): the second is not silence, the step plans again."""
    mem = FakeMemory()
    step = _step.Step(1300 * K, mem, RuntimeError)
    a = FakeGraph(step, _menu("a"))
    _run_step(step, mem, [a])
    assert a.names == ["a:1"] and step.last.peak == 1200 * K  # within 1300
    a.menu[0] = dataclasses.replace(a.menu[0], fwd=1400 * K)  # the same plan now measures 1400
    a.seen = ""  # the step is still measured (as while any graph of it is unsettled)
    _run_step(step, mem, [a])
    assert step.last.peak == 1400 * K
    assert a.names == ["a:1", "a:0.5"] or step.error is not None, (a.names, step.error)
