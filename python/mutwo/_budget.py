# A memory budget as mutwo.torch takes it (docs/budgets.md), parsed once,
# when wrap() or backend() is called, in the language the CLI's --budget
# speaks (src/support/units.h, parse_budget):
# - bytes: "6GiB", "1500MiB", or a number of at least 1 MiB: a bound on the peak;
# - a fraction: a float in (0, 1], or "60%": of the activation memory the plan
#   can free. With A the activation bytes live at the unplanned peak and F the
#   rest of it (parameters, gradients, optimizer state, inputs, workspaces),
#   the budget is F + f * A (resolve): 100% is the unplanned peak, 0% every
#   recomputable activation recomputed;
# - "lowest": the lowest peak the planner reaches, never refused;
# - None: no budget.
# Errors are ValueError, one line saying what to write instead.
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Optional

MIB = 1 << 20
MAX_BYTES = 1 << 50  # as the CLI: more than any device holds
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": MIB, "mb": MIB, "mib": MIB,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}
_NUMBER = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_FORMS = "a size (\"6GiB\", \"1500MiB\"), a fraction of the activation memory (0.6 or \"60%\"), \"lowest\" or None"


@dataclass(frozen=True)
class Budget:
    """A parsed budget other than None (no budget)."""
    kind: Literal["bytes", "fraction", "lowest"]
    bytes: int = 0  # kind "bytes"
    fraction: float = 0.0  # kind "fraction": 0.6 for "60%"

    def text(self) -> str:
        """The form the extension reads (parse_budget): "6GiB", "60%", "lowest"."""
        if self.kind == "fraction":
            return f"{self.fraction * 100:.12g}%"
        if self.kind == "lowest":
            return "lowest"
        for shift, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
            if self.bytes % (1 << shift) == 0 and self.bytes:
                return f"{self.bytes >> shift}{unit}"
        return f"{self.bytes}B"


def _bare_hint(v: float) -> str:
    """What to write instead of a bare number below 1 MiB, as the CLI says it."""
    if v <= 0:
        return "a percentage (\"60%\"), a size (\"2GiB\") or \"lowest\""
    if v <= 1:
        return f"\"{v * 100:g}%\" or \"{v:g}MiB\""
    if v <= 1000:
        return f"\"{v:g}%\" or \"{v:g}MiB\""
    return f"\"{v:g}MiB\", or \"{v:g}B\" if bytes are meant"


def _of_bytes(v: float, what: str) -> Budget:
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} is not a size; write {_FORMS}")
    if v > MAX_BYTES:
        raise ValueError(f"{what} is more than 1 PiB; write {_FORMS}")
    return Budget("bytes", bytes=math.floor(v + 0.5))


def _parse_text(text: str, what: str) -> Budget:
    s = text.strip()
    if not s:
        raise ValueError(f"{what} is empty; write {_FORMS}")
    if s.lower() == "lowest":
        return Budget("lowest")
    m = _NUMBER.match(s)
    if m is None:
        raise ValueError(f"{what} is not a budget; write {_FORMS}")
    v, unit = float(m.group(0)), s[m.end():]
    if unit == "%":
        if not 0 < v <= 1000:
            raise ValueError(f"{what} is not a percentage in (0, 1000]; write one such as \"60%\" (of the activation "
                             "memory the plan can free: 100% is the unplanned peak)")
        return Budget("fraction", fraction=v / 100)
    scale = _UNITS.get(unit.lower())
    if scale is None:
        raise ValueError(f"{what}: unknown unit {unit!r}; write {_FORMS}")
    if not unit and v < MIB:
        raise ValueError(f"{what} is a bare number, which reads as bytes, and below 1 MiB; write {_bare_hint(v)}")
    return _of_bytes(v * scale, what)


def parse(value: object, name: str = "budget") -> Optional[Budget]:
    """`value` as a Budget, None for no budget; ValueError naming `name` and what to write."""
    what = f"{name}={value!r}"
    if value is None or isinstance(value, Budget):
        return value
    if isinstance(value, str):
        return _parse_text(value, what)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: a budget is {_FORMS}, not a {type(value).__name__}")
    if isinstance(value, float) and 0 < value <= 1:
        return Budget("fraction", fraction=float(value))
    if not math.isfinite(value) or value < MIB:
        hint = _bare_hint(float(value)) if math.isfinite(value) else _FORMS
        raise ValueError(f"{what} is a bare number, which reads as bytes (a float in (0, 1] is a fraction), and "
                         f"below 1 MiB; write {hint}")
    return _of_bytes(float(value), what)


def resolve(budget: Optional[Budget], fixed_bytes: int, activation_bytes: int) -> int:
    """The bytes `budget` stands for on a step whose unplanned peak is
    fixed_bytes + activation_bytes, of which activation_bytes are activations
    (as the extension computes it, src/plan/pipeline.cpp's budget_bytes): a
    fraction f is fixed_bytes + f * activation_bytes, bytes are themselves, no
    budget is the unplanned peak. "lowest" has no bytes before planning:
    ValueError."""
    if budget is None:
        return fixed_bytes + activation_bytes
    if budget.kind == "bytes":
        return budget.bytes
    if budget.kind == "fraction":
        return fixed_bytes + int(budget.fraction * activation_bytes)
    raise ValueError("budget \"lowest\" is the lowest peak the planner reaches: plan for it, it has no bytes before")


def percent(bytes_: int, fixed_bytes: int, activation_bytes: int) -> float:
    """What percentage budget `bytes_` is (resolve's inverse; below 0 under fixed_bytes)."""
    if activation_bytes <= 0:
        raise ValueError("the unplanned peak holds no activations: every percentage is the unplanned peak")
    return 100.0 * (bytes_ - fixed_bytes) / activation_bytes


def instead(lowest_bytes: int, fixed_bytes: int, activation_bytes: int) -> str:
    """The least whole percentage whose budget holds `lowest_bytes`: "93%"."""
    at = max(1, math.ceil(percent(lowest_bytes, fixed_bytes, activation_bytes))) if activation_bytes > 0 else 100
    while fixed_bytes + int(at / 100 * activation_bytes) < lowest_bytes:
        at += 1
    return f"{at}%"


def check_planner(planner: object, planners: list[str]) -> str:
    """`planner` if it is one of `planners`; ValueError naming them."""
    if not isinstance(planner, str) or planner not in planners:
        raise ValueError(f"planner={planner!r}: unknown planner; planners: {', '.join(planners)}")
    return planner
