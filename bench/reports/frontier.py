# `bench/run.py report frontier RESULTS --out DIR`: frontier's rows: per model, torch.compile's
# activation_memory_budget points and mutwo's backend held to each point's measured peak, peak memory
# against step time, as frontier_MODEL.svg/.png (gnuplot, where installed; the data and script are
# written anyway), and the Markdown table of docs/results.md on stdout. Where a variant ran in several
# rounds (bench/run.py --rounds), its step is the median of its processes' medians with their min-max and
# n, mutwo's ratio to compile's carries its spread and says "within noise" where the spreads overlap
# (noise.py); the plot takes the medians, the other columns the variant's last row that ran.
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess

from noise import Spread, compare, spread


def mib(b: float) -> str:
    return f"{b / 2**20:.0f}"


def load(path: str) -> tuple[dict, str]:
    """model -> {variant: its row, the summary of its rounds' rows (merged)}, and the card."""
    rounds: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    card = ""
    for line in open(path):
        r = json.loads(line)
        card = r.get("card", card)
        if r.get("variant"):
            rounds[r["model"]][r["variant"]].append(r)
    return {m: {v: merged(rs) for v, rs in by.items()} for m, by in rounds.items()}, card


def merged(rows: list[dict]) -> dict:
    """One variant's rows, one per round: its last row that ran (else its last), with step_ms the median of
    the rounds' and `step_ms_all` every round's step medians."""
    ran = [r for r in rows if r.get("step_ms") and "error" not in r]
    out = dict((ran or rows)[-1])
    if ran:
        out["step_ms_all"] = [r["step_ms"] for r in ran]
        out["step_ms"] = spread(out["step_ms_all"]).median
    return out


def steps_of(r: dict) -> list[float]:
    """A merged row's step medians, one per round."""
    return r.get("step_ms_all") or [r["step_ms"]]


def step(r: dict) -> Spread:
    return spread(steps_of(r))


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
        ratio = compare(steps_of(m), steps_of(c)) if m.get("step_ms") else None
        mutwo = (f"{mib(m['peak_bytes'])} | {step(m).text()} | {ratio.text() if ratio else ''} | {m.get('compiles')} | "
                 f"{m.get('first_step_s')} | {m.get('chosen')} | {predicted_measured(m)}" if m.get("peak_bytes") else
                 f"{m.get('error', 'not run')[:80]} | | | | | | ")
        out.append(f"| {x} | {mib(c['peak_bytes'])} | {step(c).text()} | {c.get('first_step_s')} | {mutwo} |")
    for variant, label in LOWEST.items():
        low = rows.get(variant)
        if low and low.get("peak_bytes"):
            out.append(f"| {label} | | | | {mib(low['peak_bytes'])} | {step(low).text()} | | {low.get('compiles')} | "
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
