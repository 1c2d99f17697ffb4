#!/usr/bin/env python3
"""A mutation fuzzer for the files mutwo reads, driving the CLI binary.

For each parser (profile.json, plan.json, IR text, step file, tensor file)
it makes a fixed number of mutations of the committed seed in
tests/fuzz/seeds/, from a fixed random seed, runs the command that reads the
file, and checks the CLI's contract on every run:

- no signal (crash) and no timeout;
- an exit code of 0, 2 or 3 (1 is an internal error: never for bad input);
- exit 2 prints one line on stderr, starting with "mutwo";
- a mutation known to make the file inconsistent (not JSON, NaN or Infinity,
  a number beyond a double's range such as 1e400, nested past the bound, a
  record duplicated, dropped or moved, an integer field given a fraction or a
  value out of its range) exits 2, never 0.

The unmutated seeds must run (exit 0) first: a stale seed would make every
mutation fail for the wrong reason (tests/fuzz/make_seeds.sh remakes them).

    python3 tests/fuzz/fuzz.py build/src/cli/mutwo --mutations 100 --seed 1
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
# beyond a double's range (issue 27), and valid spellings of zero.
RAW_TOKENS = {"NaN": True, "Infinity": True, "-Infinity": True, "1e400": True, "-1e400": True,
              "1" + "0" * 400: True, "-0": False, "-0.0": False, "0e0": False, "1e-400": False}


@dataclass
class Mutation:
    """A mutated file: its bytes, what was done, and whether mutwo must refuse it."""
    data: bytes
    what: str
    must_refuse: bool


@dataclass
class Result:
    parser: str
    index: int
    mutation: Mutation
    code: int
    stderr: str
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
    if kind == "attr":  # an attribute dropped, or given a value of another type (issue 27)
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


@dataclass
class Parser:
    name: str
    seed: str  # file in SEEDS that is mutated
    mutate: Callable[[random.Random, bytes], Mutation]
    command: Callable[[Path, Path], list[str]]  # (mutated file, scratch folder) -> mutwo's arguments
    beside: list[str] = field(default_factory=list)  # seed files copied next to the mutated one


PARSERS = [
    Parser("profile", "profile.json", lambda r, d: mutate_json_file(r, d, PROFILE_RULES),
           lambda f, d: ["plan", "--profile", str(f), "--budget", "100%", "--out", str(d / "plan.json")]),
    Parser("plan", "plan.json", lambda r, d: mutate_json_file(r, d, PLAN_RULES),
           lambda f, d: ["optimize", "--plan", str(f), "--model", "transformer-lm", "--batch", "2", "--steps", "1",
                         "--quiet",
                         "--out", str(d / "opt")]),
    Parser("ir", "mlp.ir", mutate_ir, lambda f, d: ["run", "--graph", str(f), "--steps", "1"]),
    Parser("step", "step.json", lambda r, d: mutate_json_file(r, d, STEP_RULES),
           lambda f, d: ["run", "--graph", str(f), "--steps", "1"], beside=["step.safetensors"]),
    Parser("tensors", "step.safetensors", mutate_tensor_file,
           lambda f, d: ["run", "--graph", str(d / "step.json"), "--steps", "1"], beside=["step.json"]),
]


def run_one(mutwo: str, parser: Parser, index: int, m: Optional[Mutation], timeout: float,
            keep: Optional[Path]) -> Result:
    with tempfile.TemporaryDirectory(prefix=f"mutwo-fuzz-{parser.name}-") as tmp:
        d = Path(tmp)
        for b in parser.beside:
            shutil.copy(SEEDS / b, d / b)
        f = d / parser.seed
        if m is None:
            shutil.copy(SEEDS / parser.seed, f)
            m = Mutation(f.read_bytes(), "the seed itself", False)
        else:
            f.write_bytes(m.data)
        try:
            p = subprocess.run([mutwo] + parser.command(f, d), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
            code, err = p.returncode, p.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired:
            code, err = -999, f"timed out after {timeout} s"
        r = Result(parser.name, index, m, code, err)
        lines = err.rstrip("\n").split("\n") if err.strip() else []
        if code == -999:
            r.problems.append("timeout")
        elif code < 0:
            r.problems.append(f"killed by signal {-code}")
        elif code not in (0, 2, 3):
            r.problems.append(f"exit {code}")
        if code == 2 and not (len(lines) == 1 and lines[0].startswith("mutwo")):
            r.problems.append(f"exit 2 with {len(lines)} lines on stderr, not one line starting with 'mutwo'")
        if m.must_refuse and code in (0, 3):
            r.problems.append(f"exit {code} on an inconsistent file")
        if r.problems and keep:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{parser.name}-{index}-{parser.seed}").write_bytes(m.data)
        return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mutwo", help="path to the mutwo binary")
    ap.add_argument("--mutations", type=int, default=100, help="mutations per parser")
    ap.add_argument("--seed", type=int, default=1, help="random seed (the same seed makes the same inputs)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", help="comma-separated parsers: " + ",".join(p.name for p in PARSERS))
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    ap.add_argument("--keep", type=Path, help="write each failing input into this folder")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every run")
    a = ap.parse_args()
    parsers = [p for p in PARSERS if not a.only or p.name in a.only.split(",")]
    jobs: list[tuple[Parser, int, Optional[Mutation]]] = []
    for p in parsers:
        rng = random.Random(f"{a.seed}:{p.name}")
        seed = (SEEDS / p.seed).read_bytes()
        jobs.append((p, -1, None))
        jobs += [(p, i, p.mutate(rng, seed)) for i in range(a.mutations)]
    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        results = list(pool.map(lambda j: run_one(a.mutwo, j[0], j[1], j[2], a.timeout, a.keep), jobs))
    failures = 0
    for r in results:
        if r.index < 0 and r.code != 0:
            print(f"FAIL {r.parser}: the seed {r.parser}'s file does not run (exit {r.code}: {r.stderr.strip()}); "
                  f"remake the seeds with tests/fuzz/make_seeds.sh")
            failures += 1
        elif r.problems:
            print(f"FAIL {r.parser}[{r.index}] ({r.mutation.what}): {'; '.join(r.problems)}: {r.stderr.strip()[:2000]}")
            failures += 1
        elif a.verbose:
            print(f"ok {r.parser}[{r.index}] ({r.mutation.what}): exit {r.code} {r.stderr.strip()[:300]}")
    for p in parsers:
        rs = [r for r in results if r.parser == p.name and r.index >= 0]
        codes = {c: sum(r.code == c for r in rs) for c in sorted({r.code for r in rs})}
        sure = sum(r.mutation.must_refuse for r in rs)
        print(f"{p.name}: {len(rs)} mutations, exit codes {codes}, {sure} sure to be inconsistent")
    print(f"fuzz: {failures} failures in {len(results)} runs (seed {a.seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
