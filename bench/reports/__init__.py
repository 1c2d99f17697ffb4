# `bench/run.py report KIND RESULTS... [--out DIR]`: plots and Markdown tables from the rows a config
# wrote (a results.jsonl): pareto (zoo's, docs/gpu.md), sweep (sweep's, docs/results.md), frontier
# (frontier's, docs/results.md). Plots need gnuplot; without it the data and scripts are still written.
from __future__ import annotations

import argparse
import os
from typing import Optional

from reports import frontier, pareto, sweep


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(prog="bench/run.py report", description="plots and tables from a config's rows")
    ap.add_argument("kind", choices=["pareto", "sweep", "frontier"])
    ap.add_argument("results", nargs="+", help="results.jsonl files (bench/results/, or a run's $OUT)")
    ap.add_argument("--out", default="bench/out/plots", help="where the plots go")
    ap.add_argument("--format", default="svg", choices=["svg", "png"], help="sweep's plots")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    if a.kind == "sweep":
        sweep.report(a.results, a.out, a.format)
    else:
        {"pareto": pareto, "frontier": frontier}[a.kind].report(a.results, a.out)
