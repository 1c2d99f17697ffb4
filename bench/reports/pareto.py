# `bench/run.py report pareto RESULTS --out DIR`: zoo's rows as Pareto plots (peak memory against step
# time, every system and variant of a model and batch on one plot) and the Markdown tables of docs/gpu.md.
# Rendered with gnuplot where it is installed (the data and script are written anyway).
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess

# Distinct colours for the points of one plot (the most any plot has is 16).
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#000000", "#637939", "#ff1493", "#e7ba52", "#00ff7f",
           "#a0522d", "#4682b4", "#7b4173", "#ad494a"]


def mib1(b: float) -> str:
    return f"{b / 2**20:.1f}"


def pareto(results: str, out: str) -> None:
    """`zoo`'s rows: per model and batch, peak memory against step time, every system and variant on one
    plot (pareto_MODEL_BATCH.svg/.png; a saved graph rerun in a fresh process left out, being the same
    step) with its points (.dat), and the Markdown table: budget, measured and predicted peak, step time,
    extra time (a plan's against mutwo's baseline in the same optimize run; PyTorch's checkpoint and
    compile against eager in the same call)."""
    points = collections.defaultdict(list)  # (model, batch) -> [(label, peak MiB, step ms)]
    table = collections.defaultdict(list)   # (model, batch) -> Markdown rows
    eager_ms = {}
    card = ""
    last_batch = {}  # model -> batch of its latest row: a fresh-process run of a saved graph has none of its own
    for line in open(results):
        r = json.loads(line)
        card = r.get("card", card)
        if r.get("batch") is not None:
            last_batch[r.get("model")] = r["batch"]
        key = (r.get("model"), r.get("batch") or last_batch.get(r.get("model")))
        if r.get("system") == "pytorch" and "peak_bytes" in r:
            points[key].append((f"PyTorch {r['variant']}", r["peak_bytes"], r["step_ms"]))
            if r["variant"] == "eager":
                eager_ms[key] = r["step_ms"]
            extra = f"{100 * (r['step_ms'] / eager_ms[key] - 1):+.1f}% over eager" if key in eager_ms and r["variant"] != "eager" else ""
            table[key].append(f"| PyTorch | {r['variant']} | | {mib1(r['peak_bytes'])} | | {r['step_ms']:.1f} | {extra} |")
        elif r.get("command") == "run" and not r["variant"].endswith("-fresh-process"):  # same step, in the JSON
            points[key].append((f"mutwo {r['variant']}", r["peak_bytes"], r["step_ms"]))
            table[key].append(f"| mutwo | {r['variant']} | | {mib1(r['peak_bytes'])} | | {r['step_ms']:.1f} | |")
        elif r.get("command") == "optimize":
            graph = " (CUDA graph)" if r.get("cuda_graph") else ""
            p = r["planned"]
            points[key].append((f"mutwo {r['variant']}{graph}", p["peak_bytes"], p["step_ms"]))
            extra = 100 * (p["step_ms"] / r["baseline"]["step_ms"] - 1)
            table[key].append(f"| mutwo | {r['variant']}{graph} | {mib1(r['budget_bytes'])} | {mib1(p['peak_bytes'])} | "
                              f"{mib1(p['predicted_peak_bytes'])} | {p['step_ms']:.1f} | {extra:+.1f}% (predicted "
                              f"{100 * p['predicted_extra_ms'] / r['baseline']['step_ms']:+.1f}%){'' if r.get('fits') else ', over budget'} |")

    for (model, batch), pts in sorted(points.items(), key=lambda kv: str(kv[0])):
        if not model or len(pts) < 2:
            continue
        name = f"pareto_{model}_{batch}"
        with open(os.path.join(out, name + ".dat"), "w") as f:
            f.write("# label\tpeak_MiB\tstep_ms (one block per point)\n")
            for label, peak, ms in pts:
                f.write(f'"{label}"\t{mib1(peak)}\t{ms:.2f}\n\n\n')
        # One series per point, in the key: PyTorch in squares, mutwo in circles,
        # each in its own colour (gnuplot's default cycle repeats after 8).
        assert len(pts) <= len(COLOURS), f"{name}: {len(pts)} points, {len(COLOURS)} distinct colours"
        series = ", ".join(
            f"'{name}.dat' index {i} using 3:2 with points pt {5 if label.startswith('PyTorch') else 7} ps 1.6 "
            f"lc rgb '{COLOURS[i]}' title '{label} ({peak / 2**20:.0f} MiB, {ms:.1f} ms)'" for i, (label, peak, ms) in enumerate(pts))
        body = (f"set title '{model}, batch {batch}: peak memory against step time ({card})' noenhanced\n"
                "set xlabel 'step time (ms)'\nset ylabel 'peak allocated (MiB)'\nset grid\n"
                "set key outside right top vertical maxrows 60 font ',10' noenhanced\nset offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1\n"
                f"plot {series}\n")
        gp = (f"set terminal svg size 1400,650 dynamic background rgb 'white'\nset output '{name}.svg'\n{body}"
              f"set terminal pngcairo size 1400,650 background rgb 'white'\nset output '{name}.png'\n{body}")
        with open(os.path.join(out, name + ".gp"), "w") as f:
            f.write(gp)
        if shutil.which("gnuplot"):
            subprocess.run(["gnuplot", name + ".gp"], cwd=out, check=True)
        print(os.path.join(out, name + ".svg"))

    for (model, batch), rows in sorted(table.items(), key=lambda kv: str(kv[0])):
        if not model:
            continue
        print(f"\n{model}, batch {batch} ({card})\n")
        print("| system | variant | budget MiB | peak MiB | predicted MiB | step ms | extra time |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))


def report(results: list[str], out: str) -> None:
    for path in results:
        pareto(path, out)
