# What every benchmark of bench/run.py shares: the one result tagger (card, torch, date, commit,
# what on every JSON line of $OUT/results.jsonl), the one build preamble (scripts/build-cuda.sh
# under a timeout, "built in N s"), and commands run under timeouts cut to a deadline, each in its
# own process group (killed whole when it runs over), its output kept in $OUT/log.txt.
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
TAG_KEYS = ("card", "torch", "date", "commit", "what")


@dataclass
class Done:
    """A finished (or skipped) command: its exit status, output and time."""
    argv: list[str]
    rc: int
    out: str = ""
    err: str = ""
    seconds: float = 0.0

    @property
    def timed_out(self) -> bool:
        return self.rc in (124, 137)

    def json(self) -> Optional[dict]:
        """Its last stdout line that is a JSON object, or None."""
        for line in reversed(self.out.splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    return None
        return None

    def lines(self) -> list[dict]:
        """Every stdout line that is a JSON object."""
        out = []
        for line in self.out.splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def why(self) -> str:
        """Why it gave no row: its exit status and last line of output."""
        tail = [line for line in (self.err + "\n" + self.out).splitlines() if line.strip() and not line.startswith("{")]
        state = " (timed out)" if self.timed_out else ""
        return f"exit status {self.rc}{state}: {tail[-1][:300] if tail else 'no output'}"


Call = Callable[[list[str], float, dict[str, str]], Done]


def python_path() -> str:
    """PYTHONPATH for every command a suite starts: python/ (mutwo, and the models tests/ train too:
    python/workloads) and bench/ (peers.py's modules, for `python -c` children), then the caller's."""
    given = os.environ.get("PYTHONPATH")
    return os.pathsep.join([os.path.join(ROOT, "python"), BENCH] + ([given] if given else []))


def run_process(argv: list[str], timeout: float, env: dict[str, str]) -> Done:
    """argv in its own process group, killed whole after `timeout` seconds (exit status 124 then)."""
    t0 = time.monotonic()
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, **env}, start_new_session=True)
    except OSError as e:
        return Done(argv, 127, err=f"{argv[0]}: {e}")
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            out, err = p.communicate(timeout=5)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = p.communicate()
        rc = 124
    return Done(argv, rc, out or "", err or "", time.monotonic() - t0)


# ---------------------------------------------------------------------------------------------
# The tagger.


def git_commit(root: str = ROOT) -> Optional[str]:
    """`git rev-parse --short HEAD` in root, or None outside a git tree."""
    try:
        p = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def commit_of(root: str = ROOT, env: Optional[dict[str, str]] = None) -> str:
    """The commit measured: $MUTWO_COMMIT where given (the hash this side printed for the device
    machine, whose copy of the tree may carry a stale .git: on 2026-11-27 its git named the commit
    the copy started from, not the tree that ran), else git's, else "unknown"."""
    env = os.environ if env is None else env
    given, found = env.get("MUTWO_COMMIT", "").strip(), git_commit(root)
    if found and given and not found.startswith(given) and not given.startswith(found):
        print(f"warning: MUTWO_COMMIT={given} but git says {found}; recording {given}", file=sys.stderr)
    return given or found or "unknown"


PROBE = """import sys, torch
print(torch.cuda.get_device_name() if sys.argv[1].startswith("cuda") else "cpu")
print(torch.__version__)
try:
    import transformers; print(transformers.__version__)
except ImportError:
    print("none")"""


def probe(python: str, device: str, timeout: float = 120) -> dict[str, str]:
    """The card's name and the torch version, asked in a child process (the runner itself never holds a
    CUDA context, which would count against the caps and shared cards it measures)."""
    done = run_process([python, "-c", PROBE, device], timeout, {})
    lines = done.out.splitlines()
    if done.rc != 0 or len(lines) < 3:
        raise SystemExit(f"no torch on {device} for {python}: {done.why()}")
    return dict(card=lines[0], torch=lines[1], transformers=lines[2])


def tag(row: dict, what: str, tags: dict[str, str], **fields: Any) -> dict:
    """row with `fields` set where it has none of its own, then card, torch, date, commit and what."""
    out = dict(row)
    for k, v in fields.items():
        out.setdefault(k, v)
    out.update({k: tags[k] for k in ("card", "torch", "date", "commit")}, what=what)
    return out


# ---------------------------------------------------------------------------------------------
# The context a suite runs in.


@dataclass
class Context:
    out: str  # $OUT: results.jsonl, log.txt and what the suites copy there
    work: str  # plans, profiles and captured steps (large; not brought back)
    device: str = "cuda"
    mutwo: str = "build-cuda/src/cli/mutwo"
    python: str = sys.executable
    deadline_s: float = 0  # 0: none; else every timeout is cut to what is left of it
    tags: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # set for every command
    call: Call = run_process  # tests and --dry-run replace it
    quiet: bool = False
    dry: bool = False  # a dry run: rows are shown, not written
    round: int = 1  # the round now running (rounds()): every row written gets it
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        os.makedirs(self.out, exist_ok=True)
        self.results = os.path.join(self.out, "results.jsonl")
        self.env.setdefault("BENCH_PARTIAL", os.path.join(self.out, "partial.jsonl"))
        self.env.setdefault("PYTHONPATH", python_path())
        self.log_path = os.path.join(self.out, "log.txt")

    def elapsed(self) -> int:
        return int(time.monotonic() - self.started)

    def say(self, text: str) -> None:
        """A line on stdout and in $OUT/log.txt."""
        if not self.quiet:
            print(text, flush=True)
        self.log(text)

    def log(self, text: str) -> None:
        with open(self.log_path, "a") as f:
            f.write(text.rstrip("\n") + "\n")

    def left(self) -> float:
        return float("inf") if not self.deadline_s else self.deadline_s - (time.monotonic() - self.started)

    def run(self, argv: list[str], timeout: float, env: Optional[dict[str, str]] = None) -> Done:
        """argv under min(timeout, what is left of the deadline less 15 s); skipped (exit status 124)
        when under 10 s are left. Its output goes to the log."""
        t = min(timeout, self.left() - 15)
        if t < 10:
            self.say(f"skipped, out of time: {' '.join(argv)[:200]}")
            return Done(argv, 124, err=f"skipped: out of time (deadline {self.deadline_s:g} s)")
        self.log(f"$ {' '.join(argv)}   # timeout {t:.0f} s, at {self.elapsed()} s")
        done = self.call(argv, t, {**self.env, **(env or {})})
        text = "\n".join(line for line in (done.out + done.err).splitlines() if not line.startswith("{"))
        if text.strip():
            self.log(text[-20000:])
        self.log(f"# exit status {done.rc} after {done.seconds:.1f} s")
        return done

    def mutwo_run(self, *args: str, timeout: float = 300) -> Done:
        """The mutwo CLI: `mutwo ARGS...`."""
        return self.run([self.mutwo, *args], timeout)

    def peers(self, *args: str, timeout: float, env: Optional[dict[str, str]] = None) -> Done:
        """bench/peers.py ARGS... (`measure`, `capture`, `largest`)."""
        return self.run([self.python, os.path.join(BENCH, "peers.py"), *args], timeout, env)

    def emit(self, row: dict, what: str, **fields: Any) -> dict:
        """Tags row (bench/runner.py's tag) and its round, and appends it to $OUT/results.jsonl; prints it."""
        r = tag(row, what, self.tags, **{"round": self.round, **fields})
        line = json.dumps(r)
        if self.dry:
            return r
        with open(self.results, "a") as f:
            f.write(line + "\n")
        if not self.quiet:
            print(line[:400], flush=True)
        return r

    def emit_all(self, done: Done, what: str, **fields: Any) -> list[dict]:
        """Every JSON line of done's stdout, tagged and appended."""
        return [self.emit(r, what, **fields) for r in done.lines()]

    def emit_json(self, done: Done, what: str, **fields: Any) -> Optional[dict]:
        """done's last JSON line, tagged; or an error row saying why there was none (None when skipped)."""
        j = done.json()
        if j is not None:
            return self.emit(j, what, **fields)
        self.say(f"no row: {done.why()}")
        return self.emit({"error": done.why()}, what, **fields)

    def rows(self) -> list[dict]:
        """The rows of $OUT/results.jsonl so far."""
        if not os.path.exists(self.results):
            return []
        with open(self.results) as f:
            return [json.loads(line) for line in f if line.startswith("{")]

    def find(self, key: str, **match: Any) -> Any:
        """`key` of the latest row matching every key=value in match (and having key), or None."""
        for r in reversed(self.rows()):
            if r.get(key) is not None and all(r.get(k) == v for k, v in match.items()):
                return r[key]
        return None

    def spawn(self, argv: list[str]) -> Optional[subprocess.Popen]:
        """argv in the background, in its own process group (only logged on a dry run)."""
        self.log(f"$ {' '.join(argv)} &")
        if self.call is not run_process:
            return None
        return subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **self.env}, start_new_session=True)

    def stop(self, p: Optional[subprocess.Popen]) -> None:
        """Ends what spawn started (its whole process group)."""
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def sleep(self, seconds: float) -> None:
        if self.call is run_process:
            time.sleep(seconds)

    def workdir(self, *parts: str) -> str:
        path = os.path.join(self.work, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path


def build(ctx: Context, timeout: float) -> str:
    """scripts/build-cuda.sh (the CLI and the extension into build-cuda/), its output in $OUT/build.txt;
    exits when it fails. Returns the CLI's path."""
    t0 = time.monotonic()
    done = ctx.run([os.path.join(ROOT, "scripts", "build-cuda.sh")], timeout)
    with open(os.path.join(ctx.out, "build.txt"), "w") as f:
        f.write(done.out + done.err)
    if done.rc != 0:
        print("\n".join((done.out + done.err).splitlines()[-20:]), file=sys.stderr)
        raise SystemExit(f"build failed ({done.why()}); the whole output is in {ctx.out}/build.txt")
    ctx.say(f"built in {time.monotonic() - t0:.0f}s")
    return os.path.join(ROOT, "build-cuda", "src", "cli", "mutwo")


def earlier_peaks(model: str, batch: int, autocast: Optional[str], on_card: bool, **match: Any) -> dict[str, int]:
    """Peaks an earlier call measured, by variant, for X@V when V ran there: the rows of $BENCH_PEAKS (a
    results.jsonl) of this model, batch and autocast, on a card if this runs on one, with every key=value
    of match, without error (one device call cannot run a whole frontier: the peers in one call, mutwo's
    backend at their peaks in the next)."""
    path = os.environ.get("BENCH_PEAKS")
    if not path:
        return {}
    peaks = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            same = r.get("model") == model and r.get("batch") == batch and r.get("autocast") == autocast and \
                ("card" in r) == on_card and all(r.get(k) == v for k, v in match.items())
            if same and r.get("peak_bytes") and not r.get("error"):
                peaks[r["variant"]] = int(r["peak_bytes"])
    return peaks


def cold_env() -> dict[str, str]:
    """A run's own Inductor and mutwo caches, in a fresh folder: it compiles cold and plans as a first run,
    so compile times compare and no run is served what another compiled. $BENCH_INDUCTOR_CACHE (the
    setting warm_inductor) shares one Inductor cache across the call's processes; mutwo's stays fresh."""
    scratch = tempfile.mkdtemp(prefix="mutwo-peer-")
    inductor = os.environ.get("BENCH_INDUCTOR_CACHE") or os.path.join(scratch, "inductor")  # settings.warm_inductor
    return {"TORCHINDUCTOR_CACHE_DIR": inductor, "MUTWO_CACHE_DIR": os.path.join(scratch, "mutwo")}


def rounds(ctx: Context, n: int) -> Iterator[int]:
    """1..n, ctx.round set to each while the caller runs that round's variants (each once, each in its own
    process: A B A B ...), so that no variant has all its processes in one stretch of the card's clocks,
    heat or neighbours (issue 47, item 5; noise.py sums them up)."""
    try:
        for k in range(1, max(1, n) + 1):
            ctx.round = k
            if n > 1:
                ctx.say(f"-- round {k} of {n} ({ctx.elapsed()}s)")
            yield k
    finally:
        ctx.round = 1


def measure_peers(ctx: Context, what: str, model: str, batch: int, variants: list[str], steps: int,
                  per_variant: float, flags: Sequence[str] = (), env: Optional[dict[str, str]] = None) -> list[dict]:
    """bench/peers.py measure: each variant in its own process, one row each, of ctx.round; a variant left
    without a row (the whole call cut off) gets an error row."""
    if not variants:
        return []
    done = ctx.peers("measure", "--model", model, "--batch", str(batch), "--variants", ",".join(variants),
                     "--steps", str(steps), "--device", ctx.device, "--timeout", str(per_variant), "--round",
                     str(ctx.round), *flags, timeout=per_variant * len(variants) + 60, env=env)
    rows = ctx.emit_all(done, what)
    got = {r.get("variant") for r in rows}
    # The call's time ran out (the variants before took it), or the runner itself failed: not the variant's doing.
    why = "not run: out of the call's time" if done.timed_out else f"not run: bench/peers.py measure ended, {done.why()}"
    return rows + [ctx.emit(dict(model=model, batch=batch, system=system_of(v), variant=v, error=why), what)
                   for v in variants if v not in got]


def system_of(variant: str) -> str:
    """mutwo for mutwo.torch's variants (wrap, backend, inductor), else pytorch."""
    return "mutwo" if variant.startswith(("wrap:", "backend:", "inductor")) else "pytorch"
