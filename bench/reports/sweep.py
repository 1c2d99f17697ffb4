# `bench/run.py report sweep RESULTS... --out DIR [--format png]`: sweep's rows as the original study's
# figures: per model, peak memory and step time against batch size for PyTorch eager, PyTorch with
# per-block checkpointing and mutwo (unplanned, per-layer, the greedy at a percentage of each batch's
# unplanned peak and at the per-layer plan's peak), the percentage saved against eager on the peak
# plot: OUT/MODEL_peak.svg and OUT/MODEL_time.svg (gnuplot), one Markdown table per model on stdout.
from __future__ import annotations

import json
import subprocess
from collections import defaultdict

# (system, variant) -> legend, colour; the order is the legend's.
SERIES = [
    (("pytorch", "eager"), "PyTorch eager", "#7f7f7f"),
    (("pytorch", "ckpt"), "PyTorch per-block checkpoint", "#d62728"),
    (("mutwo", "baseline"), "mutwo unplanned", "#1f77b4"),
    (("mutwo", "per-layer"), "mutwo per-layer", "#ff7f0e"),
    (("mutwo", "mutwo"), "mutwo greedy at {budget} of unplanned", "#2ca02c"),
    (("mutwo", "mutwo@per-layer"), "mutwo greedy at the per-layer peak", "#9467bd"),
]
MIB = 2**20


def load(paths: list[str]) -> dict:
    """model -> (system, variant) -> batch -> row"""
    out: dict = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("peak_bytes"):
                    out[r["model"]][(r["system"], r["variant"])][int(r["batch"])] = r
    return out


def legend(label: str, rows: dict) -> str:
    budget = next((r.get("budget") for by in rows.values() for r in by.values() if r.get("budget")), "60%")
    return label.format(budget=budget)


def table(model: str, series: dict) -> str:
    batches = sorted({b for by in series.values() for b in by})
    present = [(k, legend(name, series)) for k, name, _ in SERIES if k in series]
    head = "| batch | " + " | ".join(name for _, name in present) + " |"
    lines = [f"### {model}: peak MiB / step ms (change against PyTorch eager)", "", head, "|---" * (len(present) + 1) + "|"]
    for b in batches:
        eager = series.get(("pytorch", "eager"), {}).get(b)
        cells = []
        for k, _ in present:
            r = series[k].get(b)
            if not r:
                cells.append("-")
                continue
            cell = f"{r['peak_bytes'] / MIB:.0f} / {r['step_ms']:.1f}"
            if eager and k != ("pytorch", "eager"):
                cell += f" ({100 * (r['peak_bytes'] / eager['peak_bytes'] - 1):+.0f}% memory, {100 * (r['step_ms'] / eager['step_ms'] - 1):+.0f}% time)"
            if r.get("feasible") is False:
                cell += " (missed its budget)"
            cells.append(cell)
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(model: str, series: dict, key: str, ylabel: str, path: str, card: str) -> None:
    batches = sorted({b for by in series.values() for b in by})
    data, cmds, labels = [], [], []
    eager = series.get(("pytorch", "eager"), {})
    for i, (k, name, colour) in enumerate(SERIES):
        if k not in series:
            continue
        pts = sorted(series[k].items())
        data.append(f"$s{i} << EOD\n" + "\n".join(f"{b} {r[key] / (MIB if key == 'peak_bytes' else 1):.3f}" for b, r in pts) + "\nEOD")
        cmds.append(f"$s{i} using 1:2 with linespoints lw 2 pt 7 lc rgb '{colour}' title \"{legend(name, series)}\"")
        if key == "peak_bytes" and k in (("pytorch", "ckpt"), ("mutwo", "mutwo")):
            for b, r in pts:  # the percentage saved against eager, beside the point
                if b in eager:
                    saved = 100 * (1 - r["peak_bytes"] / eager[b]["peak_bytes"])
                    dy = 0.7 if k == ("mutwo", "mutwo") else -0.9  # the two series' labels on either side
                    labels.append(f"set label '-{saved:.0f}%' at {b},{r['peak_bytes'] / MIB:.1f} offset 0.8,{dy} "
                                  f"textcolor rgb '{colour}' font ',9'")
    script = "\n".join(data + [
        "set terminal svg size 760,460 dynamic font 'sans,11'" if path.endswith(".svg") else "set terminal pngcairo size 760,460 font 'sans,10'",
        f"set output '{path}'",
        f"set title \"{model} on {card}: {ylabel.split(' (')[0]} against batch size"
        + (" (labels: saved against PyTorch eager)" if key == "peak_bytes" else "") + "\"",
        "set logscale x 2", f"set xtics ({', '.join(str(b) for b in batches)})",
        f"set xrange [{batches[0] / 1.3}:{batches[-1] * 1.3}]", "set yrange [0:*]",
        "set xlabel 'batch size'", f"set ylabel '{ylabel}'", "set grid", "set key top left",
        *labels, "plot " + ", ".join(cmds)])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def report(results: list[str], out: str, fmt: str = "svg") -> None:
    for model, series in load(results).items():
        card = next(r.get("card", "") for by in series.values() for r in by.values())
        print(table(model, series))
        plot(model, series, "peak_bytes", "peak memory (MiB, allocated)", f"{out}/{model}_peak.{fmt}", card)
        plot(model, series, "step_ms", "step time (ms, median)", f"{out}/{model}_time.{fmt}", card)
