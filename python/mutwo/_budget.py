# A memory budget as mutwo.torch takes it (docs/budgets.md), parsed once,
# when wrap() or backend() is called, by the core's own parser (the CLI's
# --budget: src/support/units.h, parse_budget, called through the extension):
# - bytes: "6GiB", "1500MiB", or a number of at least 1 MiB: a bound on the peak;
# - a fraction: "60%", or in Python a float in (0, 1]: of the activation memory
#   the plan can free, resolved by the core's budget_of_fraction;
# - "lowest": the lowest peak the planner reaches, never refused;
# - None: no budget.
# What is Python's alone is which Python values are budgets: a str is the
# grammar's, an int bytes, a float in (0, 1] a fraction. Errors are
# ValueError, one line saying what to write instead.
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional

from mutwo._ext import MutwoError, call, ops


@dataclass(frozen=True)
class Budget:
    """A parsed budget other than None (no budget)."""
    kind: Literal["bytes", "fraction", "lowest"]
    bytes: int = 0  # kind "bytes"
    fraction: float = 0.0  # kind "fraction": 0.6 for "60%"

    @property
    def whole(self) -> bool:
        """A fraction of 100% (or more): no less memory than the unplanned step's,
        which the compiled route meets with plain compile's own plan."""
        return self.kind == "fraction" and self.fraction >= 1

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


def _core(text: str, what: str) -> Budget:
    try:
        kind, size, fraction = call(ops().parse_budget, text)
    except MutwoError as e:
        said, echo = str(e), f"'{text}' "
        raise ValueError(f"{what} {said[len(echo):]}" if said.startswith(echo) else f"{what}: {said}") from None
    return Budget(kind, bytes=int(size), fraction=float(fraction))


def parse(value: object, name: str = "budget") -> Optional[Budget]:
    """`value` as a Budget, None for no budget; ValueError naming `name` and what to write."""
    what = f"{name}={value!r}"
    if value is None or isinstance(value, Budget):
        return value
    if isinstance(value, str):
        return _core(value.strip(), what)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what}: a budget is a size (\"6GiB\"), a fraction of the activation memory (0.6 or "
                         f"\"60%\"), \"lowest\" or None, not a {type(value).__name__}")
    if isinstance(value, float) and 0 < value <= 1:
        return Budget("fraction", fraction=float(value))
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        value = int(value)
    return _core(f"{value}", what)  # a bare number: bytes, as the grammar reads it


def resolve(budget: Optional[Budget], fixed_bytes: int, activation_bytes: int) -> int:
    """The bytes `budget` stands for on a step whose unplanned peak is
    fixed_bytes + activation_bytes, of which activation_bytes are activations
    (the core's budget_of_fraction): a fraction f is fixed_bytes + f *
    activation_bytes, bytes are themselves, no budget is the unplanned peak.
    "lowest" has no bytes before planning: ValueError."""
    if budget is None:
        return fixed_bytes + activation_bytes
    if budget.kind == "bytes":
        return budget.bytes
    if budget.kind == "fraction":
        return int(call(ops().budget_of_fraction, budget.fraction, fixed_bytes, activation_bytes))
    raise ValueError("budget \"lowest\" is the lowest peak the planner reaches: plan for it, it has no bytes before")


def check_planner(planner: object, planners: list[str]) -> str:
    """`planner` if it is one of `planners`; ValueError naming them."""
    if not isinstance(planner, str) or planner not in planners:
        raise ValueError(f"planner={planner!r}: unknown planner; planners: {', '.join(planners)}")
    return planner
