# Progress of long work on stderr (python3 -m mutwo.capture, wrap's first
# call of a shape, the compiled route's planning): which stage is
# running, how far along, and what is left. On a terminal it is one line
# redrawn in place; otherwise one line per stage. Silent when disabled
# (--quiet). Never writes to stdout. The C++ commands' src/support/progress.h
# is the same, smaller here: stages are counted, not timed, since capture's
# stages (importing, building, tracing, writing) take unrelated times.
from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO


def format_bytes(b: Optional[int]) -> str:
    """1.5 MiB, 12 KiB, 100 B; - for None."""
    if b is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


class Progress:
    """`every_stage` False: stages only as the live line of a terminal, and
    close()'s line either way (wrap's first call, as the compiled route's Ticker)."""

    def __init__(self, task: str, stages: list[str], enabled: bool = True, live: Optional[bool] = None,
                 out: Optional[TextIO] = None, every_stage: bool = True) -> None:
        self.task = task
        self.stages = stages
        self.enabled = enabled
        self.out = out if out is not None else sys.stderr
        self.live = self.out.isatty() if live is None else live
        self.t0 = time.monotonic()
        self.shown = False  # a live line is on screen
        self.every_stage = every_stage

    def stage(self, i: int, detail: str = "") -> None:
        """Stage i (0-based) of self.stages starts; `detail` adds to its name."""
        if not self.enabled or not (self.live or self.every_stage):
            return
        left = self.stages[i + 1:]
        line = (f"{self.task}: [{i + 1}/{len(self.stages)}] {self.stages[i]}{detail} "
                f"({time.monotonic() - self.t0:.0f} s; left: {', '.join(left) if left else 'nothing'})")
        if self.live:
            self.out.write("\r\033[K" + line)
            self.shown = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self) -> None:
        """Ends a live line (the last stage stays on screen)."""
        if self.enabled and self.live and self.shown:
            self.out.write("\n")
            self.out.flush()
        self.shown = False

    def close(self, summary: str) -> None:
        """One closing line, in place of the live one: what was done, in how long."""
        if self.enabled:
            start = "\r\033[K" if self.shown else ""
            self.out.write(f"{start}{self.task}: {summary} ({time.monotonic() - self.t0:.1f} s)\n")
            self.out.flush()
        self.shown = False


class Ticker:
    """Work of unknown length, counted as it goes (the compiled route's
    pricing of candidates): on a terminal one line redrawn in place, at most
    five times a second; either way one closing line. Silent when disabled
    (MUTWO_QUIET set, quiet())."""

    def __init__(self, task: str, enabled: bool = True, live: Optional[bool] = None,
                 out: Optional[TextIO] = None) -> None:
        self.task, self.enabled = task, enabled
        self.out = out if out is not None else sys.stderr
        self.live = self.out.isatty() if live is None else live
        self.t0 = self.drawn = time.monotonic()
        self.count = 0
        self.shown = False

    def tick(self, detail: str) -> None:
        self.count += 1
        now = time.monotonic()
        if not (self.enabled and self.live) or now - self.drawn < 0.2:
            return
        self.drawn = now
        self.out.write(f"\r\033[K{self.task}: {self.count} {detail} ({now - self.t0:.0f} s)")
        self.out.flush()
        self.shown = True

    def close(self, summary: str) -> None:
        if not self.enabled:
            return
        start = "\r\033[K" if self.shown else ""
        self.out.write(f"{start}{self.task}: {summary} ({self.count} in {time.monotonic() - self.t0:.1f} s)\n")
        self.out.flush()


def quiet() -> bool:
    """MUTWO_QUIET set (not empty, not 0): Python's progress lines off."""
    return os.environ.get("MUTWO_QUIET", "") not in ("", "0")
