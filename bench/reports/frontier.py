# `bench/run.py report frontier RESULTS --out DIR`: frontier's rows: per model, torch.compile's
# activation_memory_budget points and mutwo's backend held to each point's measured peak, peak memory
# against step time, as frontier_MODEL.svg/.png (gnuplot, where installed; the data and script are
# written anyway), and the Markdown table of docs/results.md on stdout.
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess


def mib(b: float) -> str:
    return f"{b / 2**20:.0f}"


def load(path: str) -> tuple[dict, str]:
    """model -> {variant: row}, and the card."""
    rows: dict = collections.defaultdict(dict)
    card = ""
    for line in open(path):
        r = json.loads(line)
        card = r.get("card", card)
        if r.get("variant"):
            rows[r["model"]][r["variant"]] = r
    return rows, card


LOWEST = {"inductor:lowest": "lowest", "inductor-unchunked:lowest": "lowest, loss whole"}  # variant: label


def predicted_measured(m: dict) -> str:
    """The chosen plan's added peak, "predicted / measured" MiB: its graph's last compile's prediction,
    made before it ran, where the row has it (one graph); else the row's step figures."""
    attempts = m.get("attempts") or []
    if len(attempts) == 1 and attempts[0] and attempts[0][-1].get("measured"):
        last = attempts[0][-1]
        return f"{mib(last['predicted'])} / {mib(last['measured'])}"
    return f"{mib(m['predicted_peak_bytes'])} / {mib(m['mutwo_step_peak_bytes'])}"


def table(model: str, rows: dict) -> list[str]:
    out = [f"\n{model}\n", "| X | compile:X peak MiB | step ms | first step s | mutwo peak MiB | step ms | "
           "× compile's | compiles | first step s | plan | predicted / measured added MiB |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for variant, c in rows.items():
        if not variant.startswith("compile"):
            continue
        x = variant.split(":", 1)[1] if ":" in variant else "1"
        m = rows.get(f"inductor@{variant}", {})
        if "error" in c:
            out.append(f"| {x} | {c['error'][:60]} | | | | | | | | | |")
            continue
        ratio = f"{m['step_ms'] / c['step_ms']:.3f}" if m.get("step_ms") else ""
        mutwo = (f"{mib(m['peak_bytes'])} | {m['step_ms']:.1f} | {ratio} | {m.get('compiles')} | "
                 f"{m.get('first_step_s')} | {m.get('chosen')} | {predicted_measured(m)}" if m.get("peak_bytes") else
                 f"{m.get('error', 'not run')[:80]} | | | | | | ")
        out.append(f"| {x} | {mib(c['peak_bytes'])} | {c['step_ms']:.1f} | {c.get('first_step_s')} | {mutwo} |")
    for variant, label in LOWEST.items():
        low = rows.get(variant)
        if low and low.get("peak_bytes"):
            out.append(f"| {label} | | | | {mib(low['peak_bytes'])} | {low['step_ms']:.1f} | | {low.get('compiles')} | "
                       f"{low.get('first_step_s')} | {low.get('chosen')} | {predicted_measured(low)} |")
    return out


def plot(model: str, rows: dict, card: str, out: str) -> None:
    series = {"torch.compile, activation_memory_budget X": [], "mutwo held to the compile:X peak": [], "mutwo, lowest": []}
    for variant, r in rows.items():
        if not r.get("peak_bytes"):
            continue
        if variant.startswith("compile"):
            series["torch.compile, activation_memory_budget X"].append((r, variant.split(":", 1)[1] if ":" in variant
                                                                          else "1"))
        elif variant.startswith("inductor@"):
            at = variant.split("@", 1)[1]
            series["mutwo held to the compile:X peak"].append((r, at.split(":", 1)[1] if ":" in at else "1"))
        elif variant in LOWEST:
            series["mutwo, lowest"].append((r, LOWEST[variant]))
    name = f"frontier_{model}"
    with open(os.path.join(out, name + ".dat"), "w") as f:
        for title, pts in series.items():
            f.write(f"# {title}: step_ms peak_MiB X\n")
            for r, x in sorted(pts, key=lambda p: p[0]["step_ms"]):
                f.write(f"{r['step_ms']:.3f}\t{r['peak_bytes'] / 2**20:.1f}\t{x}\n")
            f.write("\n\n")
    styles = ["p pt 5 ps 1.4 lc rgb '#d62728'", "p pt 7 ps 1.4 lc rgb '#1f77b4'", "p pt 9 ps 2 lc rgb '#2ca02c'"]
    plots = ", ".join(f"'{name}.dat' index {i} using 1:2 with {styles[i]} title '{t}', "
                      f"'' index {i} using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle"
                      for i, t in enumerate(series))
    body = (f"set title '{model}: peak against step time ({card})' noenhanced\nset xlabel 'step time (ms)'\n"
            "set ylabel 'peak allocated (MiB)'\nset grid\nset key top right noenhanced\n"
            f"set offsets graph 0.05, graph 0.05, graph 0.08, graph 0.08\nplot {plots}\n")
    with open(os.path.join(out, name + ".gp"), "w") as f:
        f.write(f"set terminal svg size 1000,600 dynamic background rgb 'white'\nset output '{name}.svg'\n{body}"
                f"set terminal pngcairo size 1000,600 background rgb 'white'\nset output '{name}.png'\n{body}")
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot", name + ".gp"], cwd=out, check=True)


def report(results: list[str], out: str) -> None:
    card = ""
    for path in results:
        rows, card = load(path)
        for model, by_variant in rows.items():
            plot(model, by_variant, card, out)
            print("\n".join(table(model, by_variant)))
    print(f"\n{card}")
