# The command line of mutwo.capture: python3 -m mutwo.capture MODULE:FUNCTION
# --out step.json [--name NAME] imports MODULE, calls FUNCTION() for (model,
# example_inputs, loss_fn) and writes the step file (docs/step-file.md).
# Errors are one line on stderr and exit status 2. Progress (each stage, and
# what is left) goes to stderr unless --quiet (mutwo/_progress.py).
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Optional

from mutwo._progress import Progress
from mutwo.capture import CaptureError, capture


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        print(f"mutwo.capture: error: {message}", file=sys.stderr)
        sys.exit(2)


def main(argv: Optional[list[str]] = None) -> int:
    ap = _Parser(prog="python3 -m mutwo.capture",
                 usage="python3 -m mutwo.capture MODULE:FUNCTION --out step.json [--name NAME] [--quiet]",
                 description="Write a model's training step (forward, loss and backward, traced by AOTAutograd) "
                             "as a mutwo step file: OUT (JSON) and OUT's stem + .safetensors beside it.",
                 epilog="FUNCTION() takes no arguments and returns (model, example_inputs, loss_fn), where "
                        "loss_fn(model, *example_inputs) returns the scalar loss. MODULE is imported from the "
                        "current directory or PYTHONPATH. Errors: one line on stderr, exit status 2.")
    ap.add_argument("target", metavar="MODULE:FUNCTION", help="e.g. models:resnet18")
    ap.add_argument("--out", required=True, metavar="STEP.json", help="the step file to write")
    ap.add_argument("--name", help="the model's name in the file (default: the model's class name)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = ap.parse_args(argv)
    progress = Progress("mutwo.capture", ["importing the module", "building the model and inputs",
                                          "tracing the step (AOTAutograd)", "writing the step file"],
                        enabled=not a.quiet)
    try:
        module_name, sep, func_name = a.target.partition(":")
        if not sep or not module_name or not func_name:
            raise CaptureError(f"expected MODULE:FUNCTION, got {a.target!r}")
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        progress.stage(0, f" {module_name}")
        module = importlib.import_module(module_name)
        fn = getattr(module, func_name, None)
        if not callable(fn):
            raise CaptureError(f"{module_name} has no function {func_name}")
        progress.stage(1, f" ({func_name}())")
        got = fn()
        if not isinstance(got, tuple) or len(got) != 3:
            raise CaptureError(f"{a.target}() must return (model, example_inputs, loss_fn)")
        model, inputs, loss_fn = got
        doc = capture(model, inputs, loss_fn, a.out, a.name,
                      progress=lambda s: progress.stage(2 if s == "trace" else 3, "" if s == "trace" else f" {a.out}"))
    except Exception as e:  # one line, exit 2
        progress.done()
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        kind = "" if isinstance(e, CaptureError) else f"{type(e).__name__}: "
        print(f"mutwo.capture: error: {kind}{msg}", file=sys.stderr)
        return 2
    progress.done()
    print(f"wrote {a.out} ({len(doc['nodes'])} nodes, {len(doc['values'])} values) and {doc['data']}")
    return 0
