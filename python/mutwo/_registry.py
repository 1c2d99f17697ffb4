# Which mutwo backend compiled a module: the named backends' entries (one per
# torch.compile(backend="mutwo") call, made by _named.py) and the lookup
# mutwo.torch.report() does for a compiled module; the name registered in a
# source tree. Below both: _named.py writes here, torch.py reads.
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from mutwo import _compat
from mutwo._ext import MutwoError

# The named backend's entry point, as pyproject.toml declares it.
ENTRY_POINT = "mutwo._named:mutwo"


@dataclass
class Entry:
    """The mutwo backend of one torch.compile call."""
    backend: Optional[Callable] = None  # mutwo.torch.backend(...)
    source: str = ""                    # where the budget came from
    error: Optional[Exception] = None   # bad options: every graph's call raises it
    compiler: str = "inductor"


# By id of torch's wrapper (one per torch.compile call), dropped with it; the
# wrapper too, weakly: Dynamo serves a model from the code another compile
# made where their wrappers are equal (the same options), and report() then
# finds that compile's entry.
entries: dict[Any, tuple[Any, Entry]] = {}
latest: Optional[Entry] = None
named: Optional[Callable] = None  # _named.mutwo, once _named is imported (torch's registry imports it)


def entry_of(compiled: Any) -> Entry:
    """The mutwo backend behind a module compiled with backend="mutwo" or
    backend=mutwo.torch.backend(...); with None, the latest named one's."""
    if compiled is None:
        if latest is None:
            raise MutwoError("no torch.compile(backend=\"mutwo\") has compiled a graph yet: call the compiled "
                             "model first, or pass report() the module wrap() returned")
        return latest
    from torch._dynamo.eval_frame import innermost_backend
    wrapper = innermost_backend(compiled.dynamo_ctx.callback)
    fn = getattr(wrapper, "compiler_fn", wrapper)
    if fn is named and named is not None:
        if id(wrapper) in entries:
            return entries[id(wrapper)][1]
        for ref, entry in list(entries.values()):  # served by an equal compile's code
            if ref is not None and ref() == wrapper:
                return entry
        raise MutwoError("this model compiled with backend=\"mutwo\" has not run yet: call it on a batch first")
    if hasattr(fn, "graphs"):  # backend=mutwo.torch.backend(...)
        return Entry(backend=fn, source="backend()")
    raise MutwoError(f"this model was compiled with backend={getattr(wrapper, 'compiler_name', fn)!r}, not mutwo's")


def compiled(module: Any) -> bool:
    """A torch.compile'd module (what entry_of reads)."""
    return hasattr(module, "dynamo_ctx") and hasattr(module, "_orig_mod")


def register() -> None:
    """Makes backend="mutwo" known to torch where pip install .'s entry point
    is not (a source tree, PYTHONPATH=python): the same entry point, so that
    torch imports mutwo._named only at a compile naming it. Done on import of
    mutwo.torch and mutwo.trainer; else nothing."""
    _compat.name_backend("mutwo", ENTRY_POINT)
