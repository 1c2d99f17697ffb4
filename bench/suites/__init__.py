# The benchmarks bench/run.py runs, by name: each a function (Context, Settings) -> None that writes
# its rows through the Context (bench/runner.py). Each module's opening comment says what its suites
# measure and which settings (bench/configs.py) they read.
from __future__ import annotations

from typing import Callable

from configs import Settings
from runner import Context
from suites.captured import graph, wrap, wrap_check
from suites.cards import capped, shared_card
from suites.floors import replay, swap
from suites.scale import dist, dist_compiled, sweep
from suites.zoo import ops, zoo

Suite = Callable[[Context, Settings], None]

SUITES: dict[str, Suite] = {
    "zoo": zoo, "ops": ops, "graph": graph, "wrap": wrap, "wrap-check": wrap_check, "replay": replay, "swap": swap,
    "capped": capped, "shared-card": shared_card, "sweep": sweep, "dist": dist,
    "dist-compile": dist_compiled,
}
ROUNDS_SUITES = {"wrap", "graph"}  # suites that read --rounds (the others run each variant once)
RANKS = {"dist", "dist-compile"}  # suites whose --gpus is the ranks of one job; the others spread one-card jobs over --gpus cards
