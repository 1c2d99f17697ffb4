# Step times that survive noise (issue 47, item 5): a variant runs once per round, each time in its own
# process, and each process gives the median of its timed steps. A variant's figure is the median of those
# process medians, with their min-max and n; a ratio against a peer carries the range the two spreads
# allow, and is "within noise" where the spreads overlap (the ratio's range holds 1).
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class Spread:
    """The median of n process medians and their min-max."""
    median: float
    lo: float
    hi: float
    n: int

    def text(self, digits: int = 1) -> str:
        """"31.2" for one process, else "31.2 (29.8-33.0, n=3)"."""
        if self.n < 2:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.lo:.{digits}f}-{self.hi:.{digits}f}, n={self.n})"


@dataclass(frozen=True)
class Ratio:
    """ours / peer: the medians' ratio, the range the spreads allow, and whether the spreads overlap
    (None where either side has one process only: no spread to judge by)."""
    value: float
    lo: float
    hi: float
    within_noise: Optional[bool]

    def text(self, digits: int = 3) -> str:
        """"1.100" for one process a side, else "1.100 (1.05-1.16)" and ", within noise" where it is."""
        if self.within_noise is None:
            return f"{self.value:.{digits}f}"
        noise = ", within noise" if self.within_noise else ""
        return f"{self.value:.{digits}f} ({self.lo:.{digits - 1}f}-{self.hi:.{digits - 1}f}){noise}"


def spread(values: Sequence[float]) -> Optional[Spread]:
    """The process medians' median, min, max and count; None for none."""
    if not values:
        return None
    return Spread(statistics.median(values), min(values), max(values), len(values))


def compare(ours: Sequence[float], peer: Sequence[float]) -> Optional[Ratio]:
    """ours against the peer, from each side's process medians (ms): None where a side has none."""
    a, b = spread(ours), spread(peer)
    if a is None or b is None or b.lo <= 0:
        return None
    judged = a.n >= 2 and b.n >= 2
    return Ratio(a.median / b.median, a.lo / b.hi, a.hi / b.lo,
                 (a.lo <= b.hi and b.lo <= a.hi) if judged else None)
