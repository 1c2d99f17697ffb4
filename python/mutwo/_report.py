# What mutwo.torch.report() returns: a dict of the plan's fields (as before:
# r["predicted_peak_bytes"], json.dumps(r)) whose str() is a short summary for
# a person: peak before and after, the budget, the time it costs, what lowered
# the peak, what was dropped or swapped (by module and op), recompilations.
# Under wrap(): every input shape's plan, the most used first, and each plan's
# step times as measured while training (StepClock).
from __future__ import annotations

import statistics
import time
from typing import Any, Optional

import torch

from mutwo._progress import format_bytes as _bytes

_LISTED = 5  # activations named in the summary, the largest first


def _label(a: dict) -> str:
    """"layers.3.mlp.act_fn: silu", from an activation's module and op."""
    if a.get("label"):
        return a["label"]
    op, module = a.get("op") or a.get("name", "?"), a.get("module")
    return f"{module}: {op}" if module else op


def _named(acts: list[dict], what: str) -> list[str]:
    """'recomputed 3 activations (1.5 MiB): a: relu (1 MiB), ...', largest first."""
    if not acts:
        return []
    acts = sorted(acts, key=lambda a: -int(a.get("bytes") or 0))
    total = sum(int(a.get("bytes") or 0) for a in acts)
    names = ", ".join(f"{_label(a)} ({_bytes(a.get('bytes'))})" for a in acts[:_LISTED])
    more = f", and {len(acts) - _LISTED} more" if len(acts) > _LISTED else ""
    return [f"  {what} {len(acts)} activation{'s' if len(acts) != 1 else ''} ({_bytes(total)}): {names}{more}"]


def _spread_note(step_ms: Optional[float], low: Optional[float], high: Optional[float], shown: Optional[float],
                 steps: int) -> list[str]:
    """The step time with its spread, and a note when the spread is wider than `shown` (the difference reported)."""
    if not step_ms:
        return []
    if not steps or low is None or high is None or steps < 2:
        return [f"  step: {step_ms:.2f} ms (one step timed: no spread)"]
    return [f"  step: {step_ms:.2f} ms, {low:.2f} to {high:.2f} ms over {steps} profiled steps"] + \
        _noise(low, high, shown)


def _noise(low: float, high: float, shown: Optional[float]) -> list[str]:
    """A note when the step times' spread is wider than `shown` (the difference reported)."""
    if shown is None or high - low <= abs(shown):
        return []
    return [f"  note: the step times vary by {high - low:.2f} ms, more than the {abs(shown):.2f} ms extra time "
            "shown: it is within that noise"]


class StepClock:
    """The wall time of each step a plan runs, from its forward's start to its
    backward's end: perf_counter on the CPU, CUDA events on a card (read when
    report() asks, so a step never waits for the card)."""

    KEPT = 4096  # the latest steps' times, at most

    def __init__(self) -> None:
        self.steps: list[tuple[Any, Any]] = []
        self.started: Any = None

    @staticmethod
    def _now(device: torch.device) -> Any:
        if device.type != "cuda":
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self, device: torch.device) -> None:
        self.started = self._now(device)

    def stop(self, device: torch.device) -> None:
        if self.started is not None:
            self.steps = self.steps[-(self.KEPT - 1):] + [(self.started, self._now(device))]
            self.started = None

    def times_ms(self) -> list[float]:
        out = []
        for a, b in self.steps:
            if isinstance(a, float):
                out.append((b - a) * 1e3)
            else:
                b.synchronize()
                out.append(a.elapsed_time(b))
        return out

    def fields(self) -> dict:
        """step_ms (the median of the measured steps), step_ms_min, step_ms_max, measured_steps."""
        ms = self.times_ms()
        if not ms:
            return {"step_ms": None, "step_ms_min": None, "step_ms_max": None, "measured_steps": 0}
        return {"step_ms": statistics.median(ms), "step_ms_min": min(ms), "step_ms_max": max(ms),
                "measured_steps": len(ms)}


def by_use(plans: list[dict]) -> list[dict]:
    """The plans of a wrapped module's input shapes, the most used first (of equal use, the latest)."""
    order = sorted(range(len(plans)), key=lambda i: (-int(plans[i].get("steps") or 0), -i))
    return [plans[i] for i in order]


def _shape_line(p: dict) -> str:
    """One other input shape's plan, in a line."""
    steps = int(p.get("steps") or 0)
    measured = f", {_bytes(p['measured_peak_bytes'])} measured" if p.get("measured_peak_bytes") is not None else ""
    time_ = f"; step {p['step_ms']:.2f} ms (median)" if p.get("step_ms") else ""
    return (f"    - inputs {p.get('inputs', '?')}: {steps} step{'s' if steps != 1 else ''}; peak "
            f"{_bytes(p.get('unplanned_peak_bytes'))} unplanned -> {_bytes(p.get('predicted_peak_bytes'))} predicted"
            f"{measured}; {len(p.get('dropped') or [])} activations dropped ({_bytes(p.get('dropped_bytes'))}), "
            f"+{p.get('predicted_extra_ms') or 0:.3f} ms predicted{time_}")


def _step_time(r: dict) -> list[str]:
    """The step time: the median of the steps measured while training, else the profile's."""
    if r.get("step_ms"):
        n = int(r.get("measured_steps") or 0)
        low, high, shown = r["step_ms_min"], r["step_ms_max"], r.get("predicted_extra_ms")
        lines = [f"  step: {r['step_ms']:.2f} ms, the median of {n} step{'s' if n != 1 else ''} run"
                 + (f", {low:.2f} to {high:.2f} ms" if n > 1 else "")]
        return lines + (_noise(low, high, shown) if n > 1 else [])
    return _spread_note(r.get("profiled_step_ms"), r.get("profiled_step_ms_min"), r.get("profiled_step_ms_max"),
                        r.get("predicted_extra_ms"), int(r.get("profile_iterations") or 0))


def _unplanned_summary(r: dict) -> list[str]:
    """wrap() with no budget: the module ran as it is."""
    return [f"mutwo: {r.get('model', '?')} runs as it is (no budget: nothing captured, profiled or planned); "
            f"steps run: {r.get('steps', 0)}",
            "  to plan it, give a budget: wrap(model, budget=\"60%\") or \"2GiB\" lowers the peak; \"100%\" "
            "profiles the step and runs it on mutwo's executor, dropping nothing"]


def _session_summary(r: dict) -> list[str]:
    """wrap() and backend(compiler="mutwo"): one session's plan."""
    budget = f"budget {r['budget']} = {_bytes(r.get('budget_bytes'))}" if r.get("budget") else "no budget"
    measured = f", {_bytes(r['measured_peak_bytes'])} measured" if r.get("measured_peak_bytes") is not None else ""
    lines = [f"mutwo plan of {r.get('model', '?')} on {r.get('device', '?')} (planner {r.get('planner')}, {budget})",
             f"  peak: {_bytes(r.get('unplanned_peak_bytes'))} unplanned -> {_bytes(r.get('predicted_peak_bytes'))} "
             f"predicted{measured}"]
    if r.get("inputs"):
        n = len(r.get("shapes") or [])
        lines.insert(1, f"  inputs {r['inputs']}: {r.get('steps', 0)} steps" +
                     (f", the most used of {n} input shapes (each planned apart)" if n > 1 else ""))
    if r.get("predicted_peak_node"):
        lines.append(f"  peak node: {r['predicted_peak_node']}")
    lines.append(f"  time: +{r.get('predicted_extra_ms', 0):.3f} ms predicted for recomputation")
    lines += _step_time(r)
    decisions = r.get("decisions") or []
    lines.append("  what lowered the peak:" if decisions else "  what lowered the peak: nothing (the unplanned step)")
    lines += [f"    - {d['line']}" for d in decisions]
    moved = r.get("moved") or []
    lines += _named([a for a in moved if a.get("decision") == "recompute"], "recomputed")
    lines += _named([a for a in moved if a.get("decision") == "swap"], "swapped")
    shapes = r.get("shapes") or []
    if len(shapes) > 1:
        lines.append("  other input shapes, by use:")
        lines += [_shape_line(p) for p in shapes[1:]]
    lines.append(f"  plans: {r.get('plans', 1)} (one per input shape); steps run: "
                 f"{sum(int(p.get('steps') or 0) for p in shapes) if shapes else r.get('steps', 0)}")
    if r.get("note"):
        lines.append(f"  note: {r['note']}")
    return lines


def _compiled_summary(r: dict) -> list[str]:
    """backend() with Inductor: the latest graph's plan, and the step's."""
    graphs = r.get("graphs") or [r]
    budget = f"budget {r['budget']} = {_bytes(r.get('budget_bytes'))}" if r.get("budget") else "no budget"
    lines = [f"mutwo plan of a torch.compile step on {r.get('device', '?')} (Inductor, planner {r.get('planner')}, "
             f"{budget}; {len(graphs)} graph{'s' if len(graphs) != 1 else ''})"]
    step = r.get("step") or {}
    if step.get("measured_peak_bytes") is not None:
        plain = step.get("unplanned_peak_bytes")
        lines.append(f"  step peak: {_bytes(step['measured_peak_bytes'])} measured, "
                     f"{_bytes(step.get('predicted_peak_bytes'))} predicted"
                     + (f", {_bytes(plain)} as plain torch.compile would plan it" if plain is not None else "")
                     + (f", at {step['at_peak']}" if step.get("at_peak") else ""))
    for i, g in enumerate(graphs):  # numbered as the progress lines number them; a graph with no figure left out
        figures = [g.get(k) for k in ("unplanned_peak_bytes", "predicted_peak_bytes", "measured_peak_bytes")]
        if all(f is None for f in figures):
            continue
        lines.append(f"  graph {g.get('index', i)}: peak {_bytes(figures[0])} as plain torch.compile plans it -> "
                     f"{_bytes(figures[1])} predicted, {_bytes(figures[2])} "
                     f"measured; +{g.get('predicted_extra_ms') or 0:.3f} ms predicted ({g.get('chosen')}); "
                     f"{g.get('recompilations', 0)} recompilation{'s' if g.get('recompilations', 0) != 1 else ''}")
        lines += ["  " + line for line in _named([a for a in g.get("activations") or []
                                                  if a.get("decision") == "recompute"], "recomputed")]
    if r.get("error") or step.get("error"):
        lines.append(f"  error: {r.get('error') or step.get('error')}")
    return lines


class Report(dict):
    """report()'s answer: every field as a key (docs/python.md), and str() a summary."""

    def __str__(self) -> str:
        lines = (_compiled_summary(self) if self.get("compiler") == "inductor" else
                 _unplanned_summary(self) if self.get("unplanned") else _session_summary(self))
        if self.get("budget_source"):
            lines.append(f"  budget from: {self['budget_source']}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"{self}\n(a dict: {', '.join(sorted(map(str, self)))})"
