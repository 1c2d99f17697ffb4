#!/usr/bin/env python3
"""A mutation fuzzer for the files mutwo reads: in process, then through the CLI.

For each parser (profile.json, plan.json, IR text, step file, tensor file)
it makes a fixed number of mutations of the committed seed in
tests/fuzz/seeds/, from a fixed random seed, writes each into a folder of its
own (with the seed files it needs beside it) and loads them all in the
loader, mutwo_load (tests/fuzz/load.cpp: what the CLI runs on each file
before any tensor exists), --jobs processes of it sharing the files. Every
load must keep the CLI's contract:

- no crash, no timeout, no other exception than a user error (the CLI's exit
  1, an internal error, is never right for bad input);
- a user error is one line starting with "mutwo" (the line the CLI prints);
- a mutation known to make the file inconsistent (not JSON, NaN or Infinity,
  a number beyond a double's range such as 1e400, nested past the bound, a
  record duplicated, dropped or moved, an integer field given a fraction or a
  value out of its range) is a user error, never accepted.

Then the CLI (--cli) runs the command that reads the file on the unmutated
seeds and on --cli-mutations of each parser's mutations (half of them ones
the loader refused, half ones it accepted, which the CLI goes on to run):
each must exit 0, 2 or 3 (never 1, no signal, no timeout), exit 2 with one
line on stderr starting with "mutwo", an inconsistent file 2; a file the
loader refused, 2 with the loader's very line (the loader follows the CLI's
code path). Without --load, the CLI runs the first --cli-mutations.

The unmutated seeds must load (and run: exit 0) first: a stale seed would
make every mutation fail for the wrong reason (tests/fuzz/make_seeds.sh
remakes them).

    python3 tests/fuzz/fuzz.py --load build/tests/mutwo_load --cli build/src/cli/mutwo \
        --mutations 300 --cli-mutations 4 --seed 1
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

SEEDS = Path(__file__).resolve().parent / "seeds"
MAX_DEPTH = 64  # support/json_input.h
MAX_BYTES = 1 << 50  # support/units.h: 1 PiB
INT64_MAX = (1 << 63) - 1

# Numbers put in place of a number of the seed.
EXTREMES: list[Any] = [0, -1, -2, -(1 << 63), INT64_MAX, 1 << 63, 1 << 64, MAX_BYTES + 1, 0.5, 1.5, -0.0,
                       1e308, -1e308, 5e-324, 7]
# Raw tokens put in place of a number of the seed, as text (Python's json
# cannot write them all), and whether every reader must refuse them: literals
# that are not JSON (Python's json writes NaN and Infinity by default), numbers
# beyond a double's range (which nlohmann's parser reads as infinity), and valid
# spellings of zero.
RAW_TOKENS = {"NaN": True, "Infinity": True, "-Infinity": True, "1e400": True, "-1e400": True,
              "1" + "0" * 400: True, "-0": False, "-0.0": False, "0e0": False, "1e-400": False}


@dataclass
class Mutation:
    """A mutated file: its bytes, what was done, and whether mutwo must refuse it."""
    data: bytes
    what: str
    must_refuse: bool


@dataclass
class Case:
    """A file loaded: the seed (index -1) or a mutation, and what the loader and the CLI made of it."""
    parser: "Parser"
    index: int
    mutation: Mutation
    folder: Path
    outcome: str = ""  # the loader's: ok, user_error, error; "" when it did not load it
    message: str = ""
    code: Optional[int] = None  # the CLI's exit code, when it ran
    stderr: str = ""
    problems: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- byte level

def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    kind = rng.choice(["flip", "truncate", "insert", "delete", "duplicate"])
    if kind == "flip" or not b:
        n = rng.randint(1, 8)
        for _ in range(n):
            if not b:
                break
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b), f"{n} bit flips"
    if kind == "truncate":
        i = rng.randrange(len(b))
        return bytes(b[:i]), f"truncated at byte {i}"
    i = rng.randrange(len(b))
    if kind == "insert":
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return bytes(b[:i] + junk + b[i:]), f"{len(junk)} bytes inserted at {i}"
    j = min(len(b), i + rng.randint(1, 64))
    if kind == "delete":
        return bytes(b[:i] + b[j:]), f"bytes {i}..{j} deleted"
    return bytes(b[:j] + b[i:j] + b[j:]), f"bytes {i}..{j} duplicated"


# ---------------------------------------------------------------- JSON level

Path_ = tuple  # a path into a JSON document: keys and indices


def walk(doc: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    out = [(path, doc)]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += walk(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += walk(v, path + (i,))
    return out


def get(doc: Any, path: Path_) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def put(doc: Any, path: Path_, value: Any) -> Any:
    if not path:
        return value
    get(doc, path[:-1])[path[-1]] = value
    return doc


@dataclass
class Rules:
    """What makes a mutated JSON document of one format inconsistent for sure."""
    # Arrays of records (by path without indices) whose elements may not be
    # duplicated, dropped or reordered.
    records: set[tuple] = field(default_factory=set)
    # Arrays of records that may not be duplicated or dropped (their order is free).
    unordered_records: set[tuple] = field(default_factory=set)
    # Whether an integer at this path (indices left out) must stay an integer
    # in [lowest, MAX_BYTES]: None where the number is free (arguments).
    int_range: Callable[[tuple], Optional[int]] = lambda key: None
    # Whether a non-integer number at this path must be finite and non-negative.
    float_checked: Callable[[tuple], bool] = lambda key: False


def shape_of(path: Path_) -> tuple:
    return tuple(p for p in path if not isinstance(p, int))


def mutate_json(rng: random.Random, doc: Any, rules: Rules) -> Mutation:
    doc = copy.deepcopy(doc)
    nodes = walk(doc)
    kind = rng.choice(["number", "number", "type", "nest", "duplicate", "reverse", "remove", "swap", "raw", "key"])
    if kind == "raw":
        numbers = [(p, v) for p, v in nodes if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            p, _ = rng.choice(numbers)
            token = rng.choice(sorted(RAW_TOKENS))
            text = json.dumps(put(doc, p, "@@TOKEN@@")).replace('"@@TOKEN@@"', token)
            return Mutation(text.encode(), f"{'/'.join(map(str, p))} = {token[:24]}", RAW_TOKENS[token])
        kind = "number"
    if kind == "number":
        numbers = [(p, v) for p, v in nodes if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers:
            p, old = rng.choice(numbers)
            new = rng.choice(EXTREMES)
            put(doc, p, new)
            key = shape_of(p)
            refuse = False
            if isinstance(old, int):
                lowest = rules.int_range(key)
                if lowest is not None:
                    refuse = not isinstance(new, int) or new < lowest or new > MAX_BYTES
            elif rules.float_checked(key):
                refuse = new < 0 or new > 1e12
            return Mutation(json.dumps(doc).encode(), f"{'/'.join(map(str, p))}: {old!r} -> {new!r}", refuse)
        kind = "type"
    if kind == "type":
        p, old = rng.choice(nodes[1:] or nodes)
        choices = [v for v in ["x", 3, None, [], {}, True, "%x", -1.5] if type(v) is not type(old)]
        new = rng.choice(choices)
        put(doc, p, new)
        return Mutation(json.dumps(doc).encode(), f"{'/'.join(map(str, p))}: {type(old).__name__} -> {new!r}", False)
    if kind == "nest":
        p, _ = rng.choice(nodes)
        depth = rng.choice([10, MAX_DEPTH + 5, 1000, 100000])
        text = json.dumps(put(doc, p, "@@NEST@@")).replace('"@@NEST@@"', "[" * depth + "]" * depth)
        # The whole document must nest deeper than the bound for a sure refusal.
        return Mutation(text.encode(), f"{'/'.join(map(str, p))} nested {depth} deep", len(p) + depth > MAX_DEPTH + 1)
    if kind == "key":
        objects = [(p, v) for p, v in nodes if isinstance(v, dict) and v]
        p, obj = rng.choice(objects)
        k = rng.choice(list(obj))
        del obj[k]
        return Mutation(json.dumps(doc).encode(), f"{'/'.join(map(str, p + (k,)))} removed", False)
    arrays = [(p, v) for p, v in nodes if isinstance(v, list) and v]
    if not arrays:
        return Mutation(json.dumps(doc).encode(), "unchanged (no arrays)", False)
    p, arr = rng.choice(arrays)
    key = shape_of(p)
    where = "/".join(map(str, p))
    distinct = len({json.dumps(e, sort_keys=True) for e in arr}) == len(arr)
    records = key in rules.records
    if kind == "duplicate":
        i = rng.randrange(len(arr))
        arr.insert(rng.randrange(len(arr) + 1), copy.deepcopy(arr[i]))
        return Mutation(json.dumps(doc).encode(), f"{where}[{i}] duplicated", records or key in rules.unordered_records)
    if kind == "remove":
        i = rng.randrange(len(arr))
        del arr[i]
        return Mutation(json.dumps(doc).encode(), f"{where}[{i}] removed", records or key in rules.unordered_records)
    if kind == "reverse":
        arr.reverse()
        return Mutation(json.dumps(doc).encode(), f"{where} reversed", records and distinct and len(arr) > 1)
    i, j = rng.randrange(len(arr)), rng.randrange(len(arr))
    arr[i], arr[j] = arr[j], arr[i]
    changed = json.dumps(arr[i], sort_keys=True) != json.dumps(arr[j], sort_keys=True)
    return Mutation(json.dumps(doc).encode(), f"{where}[{i}] and [{j}] swapped", records and changed)


def mutate_json_file(rng: random.Random, data: bytes, rules: Rules) -> Mutation:
    if rng.random() < 0.25:
        b, what = mutate_bytes(rng, data)
        try:
            json.loads(b.decode("utf-8"), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
            sure = False
        except (ValueError, UnicodeDecodeError):
            sure = True  # not JSON (or not UTF-8): nothing to read
        return Mutation(b, what, sure)
    return mutate_json(rng, json.loads(data), rules)


# ---------------------------------------------------------------- IR text

def mutate_ir(rng: random.Random, data: bytes) -> Mutation:
    if rng.random() < 0.3:
        b, what = mutate_bytes(rng, data)
        return Mutation(b, what, False)
    lines = data.decode().split("\n")
    body = [i for i, l in enumerate(lines) if l and not l.startswith("graph ")]
    kind = rng.choice(["dup", "delete", "swap", "reverse", "number", "name", "long", "attr"])
    i = rng.choice(body)
    if kind == "dup":
        lines.insert(i, lines[i])
        # A line declaring or defining a value, twice, defines it twice.
        return Mutation("\n".join(lines).encode(), f"line {i + 1} duplicated", lines[i].startswith("%"))
    if kind == "delete":
        del lines[i]
        return Mutation("\n".join(lines).encode(), f"line {i + 1} deleted", False)
    if kind == "swap":
        j = rng.choice(body)
        lines[i], lines[j] = lines[j], lines[i]
        return Mutation("\n".join(lines).encode(), f"lines {i + 1} and {j + 1} swapped", False)
    if kind == "reverse":
        head = [l for l in lines if l.startswith("graph ")]
        rest = [l for l in lines if not l.startswith("graph ")]
        return Mutation("\n".join(head + rest[::-1]).encode(), "lines reversed", True)  # uses before definitions
    words = lines[i].replace("(", " ").replace(")", " ").replace(",", " ").replace("[", " ").replace("]", " ").split()
    if kind == "number":
        nums = [w for w in words if w.lstrip("-").replace(".", "", 1).isdigit()]
        if nums:
            old = rng.choice(nums)
            new = str(rng.choice([-1, 0, 1 << 62, 1 << 64, "1e308", "1e400", "-1e400", "-0", "nan", "inf", "NaN",
                                  "Infinity", -(1 << 63), 3]))
            lines[i] = lines[i].replace(old, new, 1)
            return Mutation("\n".join(lines).encode(), f"line {i + 1}: {old} -> {new}", False)
    if kind == "attr":  # an attribute dropped, or given a value of another type: a user error, never a crash
        attrs = [(i, m) for i, l in enumerate(lines) for m in [re.search(r"\{([^}]*)\}", l)] if m]
        if attrs:
            i, m = rng.choice(attrs)
            entries = re.split(r", (?=[A-Za-z_]+=)", m.group(1))
            k = rng.randrange(len(entries))
            key = entries[k].split("=", 1)[0]
            new = rng.choice([None, '"x"', "[1]", "1.5", "7"])
            if new is None:
                del entries[k]
            else:
                entries[k] = f"{key}={new}"
            lines[i] = lines[i][:m.start()] + "{" + ", ".join(entries) + "}" + lines[i][m.end():]
            return Mutation("\n".join(lines).encode(), f"line {i + 1}: {key} {'dropped' if new is None else '= ' + new}",
                            False)
    if kind == "long":
        lines[i] = lines[i] + " " + "x" * rng.choice([10, 100000])
        return Mutation("\n".join(lines).encode(), f"line {i + 1} lengthened", True)
    names = [w for w in " ".join(lines).split() if w.startswith("%")]
    refs = [w for w in words if w.startswith("%")]
    if refs and names:
        old, new = rng.choice(refs), rng.choice(names)
        lines[i] = lines[i].replace(old, new, 1)
        return Mutation("\n".join(lines).encode(), f"line {i + 1}: {old} -> {new}", False)
    b, what = mutate_bytes(rng, data)
    return Mutation(b, what, False)


# ---------------------------------------------------------------- tensor file

def split_tensor_file(data: bytes) -> tuple[dict, bytes]:
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def mutate_tensor_file(rng: random.Random, data: bytes) -> Mutation:
    r = rng.random()
    if r < 0.3:
        b, what = mutate_bytes(rng, data)
        return Mutation(b, what, False)
    header, body = split_tensor_file(data)
    if r < 0.4:
        old = struct.unpack("<Q", data[:8])[0]
        n = rng.choice([0, 7, old - 1, old + 1, old + 64, len(data), 1 << 40, (1 << 64) - 1])
        # Another length reads a header cut short, or one with data bytes after it.
        sure = n < old or n > len(data) - 8 or data[8 + old:8 + n].strip(b" \t\r\n") != b""
        return Mutation(struct.pack("<Q", n) + data[8:], f"header length {old} -> {n}", sure)
    if r < 0.5:
        cut = rng.randrange(len(body))
        return Mutation(data[:len(data) - len(body)] + body[:cut], f"data section cut at {cut}", True)
    rules = Rules(int_range=lambda key: 0 if key and key[-1] in ("shape", "data_offsets") else None)
    m = mutate_json(rng, header, rules)
    return Mutation(struct.pack("<Q", len(m.data)) + m.data + body, "header: " + m.what, m.must_refuse)


# ---------------------------------------------------------------- parsers

PROFILE_RANKS = {"def", "last_fwd", "first_bwd", "last_bwd", "peak_node"}
TIMES = {"ms", "idle_ms", "step_ms", "node_ms_sum", "planning_ms", "predicted_extra_ms"}  # at most 1e12 ms


def profile_int_range(key: tuple) -> Optional[int]:
    """Every integer of a profile is a size, a count or a rank (-1: none) of at most 1 PiB."""
    if not key or key[-1] in TIMES or key[-1] == "flops":
        return None
    if key[-1] == "workspace_bytes":
        return -MAX_BYTES  # measured: may be negative
    return -1 if key[-1] in PROFILE_RANKS else 0


# Value records are matched to the graph's values by name: their order is free.
PROFILE_RULES = Rules(records={("nodes",)}, unordered_records={("values",)}, int_range=profile_int_range,
                      float_checked=lambda key: bool(key) and key[-1] in TIMES)
PLAN_RULES = Rules(records={("activations",)}, int_range=lambda key: None if key and key[-1] in TIMES else 0,
                   float_checked=lambda key: bool(key) and key[-1] in TIMES)
STEP_RULES = Rules(records={("nodes",)}, unordered_records={("values",)},
                   int_range=lambda key: 0 if key and key[-1] in ("shape", "index") else None)


PLAN_STEP = ["--model", "transformer-lm", "--batch", "2"]  # the step plan.json was made for


@dataclass
class Parser:
    name: str
    seed: str  # file in SEEDS that is mutated
    mutate: Callable[[random.Random, bytes], Mutation]
    command: Callable[[Path, Path], list[str]]  # (mutated file, its folder) -> mutwo's arguments
    load: Callable[[Path, Path], str]  # (mutated file, its folder) -> the loader's manifest line
    beside: list[str] = field(default_factory=list)  # seed files copied next to the mutated one


PARSERS = [
    Parser("profile", "profile.json", lambda r, d: mutate_json_file(r, d, PROFILE_RULES),
           lambda f, d: ["plan", "--profile", str(f), "--budget", "100%", "--out", str(d / "plan.json")],
           lambda f, d: f"profile {f}"),
    Parser("plan", "plan.json", lambda r, d: mutate_json_file(r, d, PLAN_RULES),
           lambda f, d: ["optimize", "--plan", str(f), *PLAN_STEP, "--steps", "1", "--quiet", "--out", str(d / "opt")],
           lambda f, d: f"plan {f}"),
    Parser("ir", "mlp.ir", mutate_ir, lambda f, d: ["run", "--graph", str(f), "--steps", "1"],
           lambda f, d: f"graph {f}"),
    Parser("step", "step.json", lambda r, d: mutate_json_file(r, d, STEP_RULES),
           lambda f, d: ["run", "--graph", str(f), "--steps", "1"], lambda f, d: f"graph {f}",
           beside=["step.safetensors"]),
    Parser("tensors", "step.safetensors", mutate_tensor_file,
           lambda f, d: ["run", "--graph", str(d / "step.json"), "--steps", "1"],
           lambda f, d: f"graph {d / 'step.json'}", beside=["step.json"]),
]


def make_case(parser: Parser, index: int, m: Mutation, root: Path) -> Case:
    d = root / f"{parser.name}-{'seed' if index < 0 else index}"
    d.mkdir()
    for b in parser.beside:
        shutil.copy(SEEDS / b, d / b)
    (d / parser.seed).write_bytes(m.data)
    return Case(parser, index, m, d)


def load_line(c: Case) -> str:
    return c.parser.load(c.folder / c.parser.seed, c.folder)


# ---------------------------------------------------------------- in process

def run_loader(load: str, cases: list[Case], scratch: Path, timeout: float) -> None:
    """Loads `cases` in one process of the loader, again after the file it crashed on, if it does."""
    scratch.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    while cases:
        manifest = "".join(load_line(c) + "\n" for c in cases)
        limit = timeout * (1 + len(cases) / 100)
        try:
            p = subprocess.run([load, *PLAN_STEP, "--out", str(scratch)], input=manifest.encode(),
                               capture_output=True, timeout=limit, env=env)
            code, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            code, out, err = None, e.stdout or b"", e.stderr or b""
        done = [json.loads(l) for l in out.decode(errors="replace").splitlines() if l.endswith("}")]
        for c, r in zip(cases, done):
            if r["path"] != load_line(c).split(" ", 1)[1]:
                raise SystemExit(f"fuzz: the loader answered for {r['path']}, not {load_line(c)}")
            c.outcome, c.message = r["outcome"], r["message"]
        tail = err.decode(errors="replace").strip()[-3000:]
        if len(done) >= len(cases):
            if code not in (0, 1):  # 1: an "error" line, checked with its file
                cases[-1].problems.append(f"the loader exited {code} after its last file" + (f": {tail}" if tail else ""))
            return
        how = f"timed out after {limit:.0f} s" if code is None else (
            f"was killed by signal {-code}" if code < 0 else f"exited {code}")
        cases[len(done)].problems.append(f"the loader {how} while loading it" + (f": {tail}" if tail else ""))
        cases = cases[len(done) + 1:]


def check_loaded(c: Case) -> None:
    if c.problems:  # the loader crashed or timed out on it
        return
    if c.outcome == "error":
        c.problems.append(f"an internal error (the CLI's exit 1): {c.message}")
    elif c.outcome == "user_error" and not ("\n" not in c.message and c.message.startswith("mutwo")):
        c.problems.append("a user error that is not one line starting with 'mutwo'")
    elif c.outcome == "ok" and c.mutation.must_refuse:
        c.problems.append("accepted an inconsistent file")
    elif c.outcome not in ("ok", "user_error"):
        c.problems.append(f"the loader's outcome is {c.outcome!r}")


# ---------------------------------------------------------------- through the CLI

def pick_for_cli(cases: list[Case], n: int) -> list[Case]:
    """The seed and n mutations: half of them ones the loader refused, half ones it accepted (the CLI runs those)."""
    mutations = [c for c in cases if c.index >= 0]
    if not any(c.outcome for c in mutations):  # no loader: the first n
        return [c for c in cases if c.index < 0] + mutations[:n]
    refused = [c for c in mutations if c.outcome == "user_error"]
    accepted = [c for c in mutations if c.outcome == "ok" and c.mutation.data != cases[0].mutation.data]
    k = min(len(refused), max(n - len(accepted), (n + 1) // 2))
    return [c for c in cases if c.index < 0] + refused[:k] + accepted[:n - k]


def run_cli(mutwo: str, c: Case, timeout: float) -> None:
    f = c.folder / c.parser.seed
    try:
        p = subprocess.run([mutwo] + c.parser.command(f, c.folder), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
        c.code, c.stderr = p.returncode, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        c.code, c.stderr = -999, f"timed out after {timeout} s"
    code = c.code
    lines = c.stderr.rstrip("\n").split("\n") if c.stderr.strip() else []
    if code == -999:
        c.problems.append("the CLI timed out")
    elif code < 0:
        c.problems.append(f"the CLI was killed by signal {-code}")
    elif code not in (0, 2, 3):
        c.problems.append(f"the CLI exited {code}")
    if code == 2 and not (len(lines) == 1 and lines[0].startswith("mutwo")):
        c.problems.append(f"the CLI exited 2 with {len(lines)} lines on stderr, not one line starting with 'mutwo'")
    if c.mutation.must_refuse and code in (0, 3):
        c.problems.append(f"the CLI exited {code} on an inconsistent file")
    # The same line, but for how each side spelled bytes that are not UTF-8.
    if c.outcome == "user_error" and (code != 2 or [printable(l) for l in lines] != [printable(c.message)]):
        c.problems.append(f"the loader refused it with '{c.message}', the CLI exited {code}")


def printable(text: str) -> str:
    return re.sub(r"[^\x20-\x7e]+", "?", text)


# ---------------------------------------------------------------- the run

def report(a: argparse.Namespace, parsers: list[Parser], cases: list[Case]) -> int:
    failures = 0
    for c in cases:
        where = f"{c.parser.name}[{c.index}] ({c.mutation.what})"
        cli = "" if c.code is None else f"; CLI exit {c.code}: {c.stderr.strip()[:2000]}"
        if c.index < 0 and (c.problems or c.outcome not in ("", "ok") or c.code not in (None, 0)):
            print(f"FAIL {c.parser.name}: the seed {c.parser.seed} does not load or run ({c.outcome} {c.message}"
                  f"{cli}; {'; '.join(c.problems)}); remake the seeds with tests/fuzz/make_seeds.sh")
        elif c.problems:
            print(f"FAIL {where}: {'; '.join(c.problems)}: loader {c.outcome or '-'} {c.message[:2000]}{cli}")
        else:
            if a.verbose:
                print(f"ok {where}: loader {c.outcome or '-'} {c.message[:300]}{cli[:300]}")
            continue
        failures += 1
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            (a.keep / f"{c.parser.name}-{c.index}-{c.parser.seed}").write_bytes(c.mutation.data)
    for p in parsers:
        cs = [c for c in cases if c.parser is p and c.index >= 0]
        outcomes = {o: sum(c.outcome == o for c in cs) for o in sorted({c.outcome for c in cs if c.outcome})}
        codes = {k: sum(c.code == k for c in cs) for k in sorted({c.code for c in cs if c.code is not None})}
        sure = sum(c.mutation.must_refuse for c in cs)
        print(f"{p.name}: {len(cs)} mutations ({sure} sure to be inconsistent), loaded {outcomes}, "
              f"{sum(c.code is not None for c in cs)} through the CLI, exit codes {codes}")
    loads = sum(bool(c.outcome) or any("loader" in x for x in c.problems) for c in cases)
    print(f"fuzz: {failures} failures in {loads} loads and {sum(c.code is not None for c in cases)} CLI runs "
          f"(seed {a.seed})")
    return 1 if failures else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", help="path to the loader, mutwo_load (tests/fuzz/load.cpp): every mutation in process")
    ap.add_argument("--cli", help="path to the mutwo binary: the seeds and --cli-mutations per parser")
    ap.add_argument("--mutations", type=int, default=300, help="mutations per parser")
    ap.add_argument("--cli-mutations", type=int, default=4, help="of those, how many per parser the CLI runs")
    ap.add_argument("--seed", type=int, default=1, help="random seed (the same seed makes the same inputs)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="loader processes and CLI runs at once")
    ap.add_argument("--only", help="comma-separated parsers: " + ",".join(p.name for p in PARSERS))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per CLI run, and per 100 files loaded")
    ap.add_argument("--keep", type=Path, help="write each failing input into this folder")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every file")
    a = ap.parse_args()
    if not a.load and not a.cli:
        ap.error("give --load, --cli or both")
    for exe in (a.load, a.cli):
        if exe and not os.access(exe, os.X_OK):
            ap.error(f"{exe} is not an executable (build it: mutwo_load is a CTest target, mutwo the CLI)")
    parsers = [p for p in PARSERS if not a.only or p.name in a.only.split(",")]
    with tempfile.TemporaryDirectory(prefix="mutwo-fuzz-") as tmp:
        root = Path(tmp)
        by_parser: list[list[Case]] = []
        for p in parsers:
            rng = random.Random(f"{a.seed}:{p.name}")
            seed = (SEEDS / p.seed).read_bytes()
            mutations = [Mutation(seed, "the seed itself", False)] + [p.mutate(rng, seed) for _ in range(a.mutations)]
            by_parser.append([make_case(p, i - 1, m, root) for i, m in enumerate(mutations)])
        cases = [c for cs in by_parser for c in cs]
        if a.load:
            jobs = max(1, a.jobs)
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(lambda k: run_loader(a.load, cases[k::jobs], root / f"out-{k}", a.timeout), range(jobs)))
            for c in cases:
                check_loaded(c)
        if a.cli:
            picked = [c for cs in by_parser for c in pick_for_cli(cs, a.cli_mutations)]
            with ThreadPoolExecutor(max_workers=a.jobs) as pool:
                list(pool.map(lambda c: run_cli(a.cli, c, a.timeout), picked))
        return report(a, parsers, cases)


if __name__ == "__main__":
    sys.exit(main())
