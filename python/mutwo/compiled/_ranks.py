# Ranks agree on the compiled route's plan (docs/python.md, "Under torchrun").
#
# Under torchrun every rank measures its own step and plans its own graphs.
# After each measured step the ranks exchange what they measured through the
# process group's key-value store (not a collective, so nothing is queued
# between DDP's or FSDP2's own collectives, and a rank that never arrives
# times out instead of hanging the others): every rank must have compiled the
# same graphs in the same order, and every rank adopts the decision of the
# rank with the highest measured peak, so they compile the same plans at the
# same step and each stays within its budget (one rank over replans all).
from __future__ import annotations

import itertools
import json
import os
from datetime import timedelta

TIMEOUT_S = 300.0  # MUTWO_RANK_TIMEOUT overrides
_serials = itertools.count()
_exchanges: dict[int, int] = {}


def serial() -> int:
    """A backend's number in this process: the same backend on every rank, if
    every rank makes its backends in the same order."""
    return next(_serials)


def _world() -> tuple[int, int]:
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def single() -> bool:
    """One process: no other rank to agree with."""
    return _world()[1] == 1


def agree(backend: int, signature: list, peak: int, proposal: dict) -> dict:
    """The decision every rank takes: the proposal of the rank whose measured
    step peak is highest (the lowest rank among equals). Raises MutwoError,
    naming the ranks, where a rank's graphs (`signature`: each compiled
    forward and backward in order, with its joint graph's hash) differ from
    rank 0's, or where a rank does not arrive within the timeout."""
    rank, world = _world()
    if world == 1:
        return proposal
    from torch.distributed import distributed_c10d
    from mutwo._ext import MutwoError
    store = distributed_c10d._get_default_store()
    count = _exchanges[backend] = _exchanges.get(backend, -1) + 1
    prefix = f"mutwo/{backend}/{count}"
    store.set(f"{prefix}/{rank}", json.dumps({"signature": signature, "peak": peak, "proposal": proposal}))
    timeout = float(os.environ.get("MUTWO_RANK_TIMEOUT", TIMEOUT_S))
    keys = [f"{prefix}/{r}" for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception:  # the store's timeout (its type differs between stores)
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        raise MutwoError(f"rank {rank}: rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
                         f"reach mutwo's plan exchange {count} of backend {backend} within {timeout:.0f} s: their "
                         "compiled graphs differ from this rank's, or they stopped; give every rank the same model, "
                         "input shapes and budget (MUTWO_RANK_TIMEOUT sets the wait)") from None
    sent = {r: json.loads(store.get(k)) for r, k in enumerate(keys)}
    differ = [r for r in range(world) if sent[r]["signature"] != sent[0]["signature"]]
    if differ:
        raise MutwoError(f"rank {rank}: rank{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} compiled "
                         f"other graphs than rank 0 ({_difference(sent[differ[0]]['signature'], sent[0]['signature'])})"
                         ": mutwo plans one step for every rank; give every rank the same model, input shapes and "
                         "budget")
    top = max(range(world), key=lambda r: (sent[r]["peak"], -r))
    return sent[top]["proposal"]


def _difference(theirs: list, ours: list) -> str:
    """Where a rank's compiled calls first differ from rank 0's."""
    for k, (a, b) in enumerate(zip(theirs, ours)):
        if a != b:
            return (f"its compiled call {k}, the {a[0]} of graph {a[1]}, has joint graph {str(a[2])[:12]}, rank 0's "
                    f"{b[0]} of graph {b[1]} has {str(b[2])[:12]}")
    return f"{len(theirs)} compiled calls per step against rank 0's {len(ours)}"
