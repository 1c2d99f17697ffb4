"""Docs that run: the shell and Python blocks of README.md and docs/*.md that
are marked runnable, run in document order, and the sample outputs shown after
them checked against what they print (CTest `docs_run`: tests/docs/test_docs_run.py).

The markers are HTML comments on the line right before a fenced block, so a
rendered page shows nothing of them:

  <!-- run -->                 the next ```sh or ```python block runs
  <!-- run exit=3 -->          ... and must exit with code 3 (default 0)
  <!-- run timeout=120 -->     ... within that many seconds (default 90)
  <!-- run                     a Python block's hidden set-up: the lines up
  import torch                 to `-->` run before the block, in the same
  model = torch.nn.Linear(8, 8)   process (for a shell block, before it in
  -->                          the same shell)
  <!-- output -->              the next fenced block is a sample of what the
                               nearest runnable block above printed
  <!-- output mask=ms,tokens/s -->  ... where a number before one of these
                               units may differ (times); `%` masks percentages
  <!-- output wrapped -->      ... whose lines are one output line, wrapped
  <!-- output skip="a b" -->   ... whose lines holding `a b` are shown, not
                               checked (a value that varies from run to run)

A sample matches when each of its lines, in order, equals a line of the real
output (stdout and stderr as one stream), whitespace runs counting as one
space; lines the sample leaves out are skipped, a sample line `...` stands for
any lines, and `...` inside a line for any text. So a sample shows the stable
lines of an output and is checked on each of them.

Every document's blocks share one scratch folder, in order (a block may read
what an earlier one wrote). There `build/src/cli/mutwo` and `mutwo` (on PATH)
are the binary under test ($MUTWO_BIN, else this tree's build), `.venv/bin/python`
is this Python, `data/`, `examples/` and `python/` are the repository's, and
PYTHONPATH holds the repository's `python/`.

  python3 tests/docs/doc_blocks.py [--list] [DOC...]   runs (or lists) the blocks
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!--\s*(run|output)\b(.*?)(-->)?\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")
DEFAULT_TIMEOUT = 90


@dataclasses.dataclass
class Sample:
    line: int               # the sample's first line in the document
    text: list[str]
    masks: list[str]
    wrapped: bool
    skip: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Block:
    doc: str                # relative to ROOT
    line: int               # the fence's line, 1-based
    lang: str               # sh or python
    code: str
    setup: str = ""
    exit: int = 0
    timeout: int = DEFAULT_TIMEOUT
    samples: list[Sample] = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def documents(root: pathlib.Path = ROOT) -> list[str]:
    """README.md and docs/*.md, as paths relative to root."""
    return ["README.md"] + sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))


def _fence(lines: list[str], start: int) -> tuple[str, list[str], int]:
    """The fenced block opening at lines[start]: its info string, its lines and
    the index just past its closing fence."""
    m = FENCE.match(lines[start])
    assert m, f"line {start + 1}: a marker must stand right before a fenced block"
    end = start + 1
    while end < len(lines) and not lines[end].startswith("```"):
        end += 1
    return m.group(1), lines[start + 1:end], end + 1


def _options(text: str) -> dict[str, str]:
    return dict(kv.split("=", 1) if "=" in kv else (kv, "") for kv in shlex.split(text))


def parse(doc: str, root: pathlib.Path = ROOT) -> list[Block]:
    """The runnable blocks of one document, with the samples that follow each."""
    lines = (root / doc).read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        kind, opts, closed = m.group(1), _options(m.group(2)), m.group(3)
        i += 1
        setup: list[str] = []
        if not closed:  # a set-up body up to -->
            while not lines[i].strip().startswith("-->"):
                setup.append(lines[i])
                i += 1
            i += 1
        where = f"{doc}:{i + 1}"
        lang, body, after = _fence(lines, i)
        if kind == "run":
            assert lang in ("sh", "python"), f"{where}: only sh and python blocks run, not {lang!r}"
            blocks.append(Block(doc, i + 1, lang, "\n".join(body) + "\n", "\n".join(setup) + "\n" if setup else "",
                                int(opts.get("exit", 0)), int(opts.get("timeout", DEFAULT_TIMEOUT))))
        else:
            assert blocks, f"{where}: a sample output needs a runnable block above it"
            masks = [u for u in opts.get("mask", "").split(",") if u]
            skip = [opts["skip"]] if "skip" in opts else []
            blocks[-1].samples.append(Sample(i + 2, body, masks, "wrapped" in opts, skip))
        i = after
    return blocks


def all_blocks(root: pathlib.Path = ROOT) -> list[Block]:
    return [b for doc in documents(root) for b in parse(doc, root)]


def _normal(line: str, masks: list[str]) -> str:
    for unit in masks:
        line = re.sub(r"[-+]?\d[\d.,]*\s?" + re.escape(unit) + r"(?!\w)", "<n>" + unit, line)
    return " ".join(line.split())


def _matches(sample: str, real: str) -> bool:
    if "..." not in sample:
        return sample == real
    parts = [re.escape(p.strip()) for p in sample.split("...")]
    return re.fullmatch(r"\s*.*?\s*".join(parts), real) is not None


def mismatch(sample: Sample, output: str) -> str | None:
    """None when the sample's lines appear in the output in order, else what
    did not (the first sample line not found, and the output)."""
    real = [_normal(r, sample.masks) for r in output.splitlines()]
    want = [_normal(s, sample.masks) for s in sample.text if not any(k in s for k in sample.skip)]
    if sample.wrapped:
        want = [" ".join(want)]
    at = 0
    for w in want:
        if w in ("", "...", "…"):
            continue
        while at < len(real) and not _matches(w, real[at]):
            at += 1
        if at == len(real):
            return f"sample line not found in order: {w!r}"
        at += 1
    return None


class Workspace:
    """One document's scratch folder, set up as the module docstring says."""

    def __init__(self, doc: str, base: pathlib.Path) -> None:
        self.dir = base / re.sub(r"\W", "_", doc)
        bin_dir = self.dir / ".bin"
        (self.dir / "build/src/cli").mkdir(parents=True)
        (self.dir / ".venv/bin").mkdir(parents=True)
        bin_dir.mkdir()
        mutwo = os.path.abspath(os.environ.get("MUTWO_BIN", str(ROOT / "build/src/cli/mutwo")))
        (self.dir / "build/src/cli/mutwo").symlink_to(mutwo)
        (bin_dir / "mutwo").symlink_to(mutwo)
        python = self.dir / ".venv/bin/python"
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        (bin_dir / "python").symlink_to(python)
        (bin_dir / "python3").symlink_to(python)
        for shared in ("data", "examples", "python"):
            (self.dir / shared).symlink_to(ROOT / shared)
        self.env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "python"), os.environ.get("PYTHONPATH")]))}
        self.done: dict[int, subprocess.CompletedProcess] = {}

    def run(self, block: Block, index: int) -> subprocess.CompletedProcess:
        """Runs the block (once): stdout and stderr as one stream."""
        if index not in self.done:
            if block.lang == "python":
                script = self.dir / f".block_{block.line}.py"
                script.write_text(block.setup + block.code)
                cmd = [sys.executable, str(script)]
            else:
                cmd = ["bash", "-e", "-o", "pipefail", "-c", block.setup + block.code]
            try:
                self.done[index] = subprocess.run(cmd, cwd=self.dir, env=self.env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True, timeout=block.timeout)
            except subprocess.TimeoutExpired as e:
                out = e.output.decode() if isinstance(e.output, bytes) else (e.output or "")
                self.done[index] = subprocess.CompletedProcess(cmd, -1, out + f"\n(timed out after {block.timeout} s)")
        return self.done[index]


def failure(block: Block, result: subprocess.CompletedProcess) -> str | None:
    """What is wrong with a block's run, or None."""
    if result.returncode != block.exit:
        return f"{block.name}: exit {result.returncode}, expected {block.exit}\n{block.code}\n{result.stdout}"
    for s in block.samples:
        why = mismatch(s, result.stdout)
        if why:
            return f"{block.name}: the sample at line {s.line} does not match: {why}\nreal output:\n{result.stdout}"
    return None


def main(argv: list[str]) -> int:
    listing = "--list" in argv
    docs = [a for a in argv if not a.startswith("--")] or documents()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="mutwo-docs-") as base:
        for doc in docs:
            blocks = parse(doc)
            ws = None if listing else Workspace(doc, pathlib.Path(base))
            for i, b in enumerate(blocks):
                if listing:
                    print(f"{b.name} {b.lang}, {len(b.samples)} sample(s): {b.code.splitlines()[0]}")
                    continue
                start = time.time()
                why = failure(b, ws.run(b, i))
                failed += why is not None
                print(why or f"{b.name}: ok ({time.time() - start:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
