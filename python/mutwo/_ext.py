# The extension (libmutwo_torch.so, src/torchext) and mutwo's errors: found,
# loaded once and checked against the running torch; its ops called with their
# one-line errors turned into MutwoError and BudgetError; mutwo's memory
# counters. The bottom layer of mutwo.torch: every module that needs the
# extension or raises mutwo's errors imports them from here.
from __future__ import annotations

import os
from typing import Any, Callable

import torch

_LIBRARY_NAME = "libmutwo_torch.so"
_loaded = False


class MutwoError(RuntimeError):
    """A mistake mutwo can name: the message says what to do next."""


class BudgetError(MutwoError):
    """No plan fits the budget; the message names the lowest reachable peak and what it consists of."""


def library_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    # MUTWO_LIBRARY, else an installed mutwo's (pip install .: mutwo/lib/), else a source build's copy.
    path = os.environ.get("MUTWO_LIBRARY") or next(
        (p for p in (os.path.join(here, "lib", _LIBRARY_NAME), os.path.join(here, _LIBRARY_NAME)) if os.path.exists(p)),
        os.path.join(here, _LIBRARY_NAME))
    if not os.path.exists(path):
        raise MutwoError(f"{path} does not exist: build mutwo first (scripts/build.sh; the build copies the "
                         f"extension into python/mutwo/) or point MUTWO_LIBRARY at {_LIBRARY_NAME}")
    return path


def ops() -> Any:
    """torch.ops.mutwo, loading the extension on first use and checking that it
    was built against this torch."""
    global _loaded
    if not _loaded:
        torch.ops.load_library(library_path())
        built = torch.ops.mutwo.torch_version()
        running = ".".join(torch.__version__.split("+")[0].split(".")[:2])
        if built != running:
            raise MutwoError(f"{library_path()} was built against libtorch {built}, but this Python runs torch "
                             f"{torch.__version__}: rebuild mutwo against this torch (pip install . or "
                             "scripts/build.sh)")
        _loaded = True
    return torch.ops.mutwo


def call(op: Callable, *args: Any, tensors: bool = False) -> Any:
    """Calls an extension op, turning its one-line errors into MutwoError and
    BudgetError. An op on plain data (ints, lists, text: every op but the
    executor's, `tensors`) runs outside any dispatch mode: under torch.compile's
    fake tensor mode one phase_peak of 3,000 storages took 55 ms, against 0.8 ms."""
    from mutwo._compat import outside_dispatch_modes
    try:
        if tensors:
            return op(*args)
        with outside_dispatch_modes():
            return op(*args)
    except RuntimeError as e:
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        for prefix, cls in (("mutwo budget: ", BudgetError), ("mutwo: ", MutwoError)):
            at = text.find(prefix)
            if at >= 0:
                raise cls(text[at + len(prefix):]) from None
        raise


def memory(device: str = "cpu", reset: bool = False) -> tuple[int, int]:
    """(bytes allocated now, peak since the last reset) on `device`, as mutwo
    counts them: CPU tensors made after the extension loaded, CUDA's caching
    allocator. With reset=True the peak starts again from now."""
    extension = ops()
    if reset:
        call(extension.reset_peak, device)
    current, peak = call(extension.memory, device)
    return int(current), int(peak)
