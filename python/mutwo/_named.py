# The named torch.compile backend (docs/python.md, "By name"):
#
#   torch.compile(model, backend="mutwo", options={"budget": "6GiB", "planner": "mutwo"})
#
# After pip install ., torch's backend registry finds `mutwo` through the entry
# point of the group torch_dynamo_backends (pyproject.toml), without importing
# mutwo first; in a source tree, import mutwo.torch declares the same entry
# point (_registry.register). torch passes options= to the backend with each graph
# (torch/__init__.py, _TorchCompileWrapper), so each torch.compile call gets its
# own mutwo.torch.backend(...), built at its first graph from, in this order:
# options=, mutwo.trainer.MutwoCallback's, MUTWO_BUDGET and MUTWO_PLANNER, the
# default budget (default_budget). Bad options raise MutwoError from the first
# call, not wrapped in Dynamo's BackendCompilerFailed.
from __future__ import annotations

import os
import sys
import weakref
from typing import Any, Callable, Optional, Sequence

import torch

from mutwo import _budget, _registry
from mutwo._ext import MutwoError

# The keys options= takes, with their forms: every error about options lists them.
KEYS = {
    "budget": 'bytes ("6GiB"), a fraction of the activation memory (0.6 or "60%", docs/budgets.md), "lowest" or None',
    "planner": "mutwo or none; with compiler mutwo also per-layer, sqrt-n, optimal",
    "compiler": "inductor (mutwo plans, Inductor compiles) or mutwo (mutwo's executor)",
    "profile": "measure or flops (compiler mutwo)",
    "report": "a directory for the plan's files (compiler mutwo)",
    "chunk_loss": "True (the default) or False: the vocabulary loss chunked where a budget needs it (compiler inductor)",
}
PLANNERS = ("mutwo", "per-layer", "sqrt-n", "optimal", "none")  # src/plan/planners.cpp's names
COMPILERS = ("inductor", "mutwo")
ENVIRONMENT = {"budget": "MUTWO_BUDGET", "planner": "MUTWO_PLANNER"}
# CUDA's default budget leaves unplanned this share of what is free (the
# caching allocator's rounding and fragmentation, which grow with what it
# holds, a loss computed outside the graph) and a fixed reserve (cuBLAS's
# workspaces for another thread or stream): docs/python.md, "By name".
CUDA_MARGIN = 0.05
CUDA_RESERVE = 512 << 20



def accepted() -> str:
    return "; ".join(f"{k}: {v}" for k, v in KEYS.items())


def _error(text: str) -> Exception:
    return MutwoError(f"{text}. backend=\"mutwo\" takes options={{...}} with the keys {accepted()}")


def _budget_problem(value: Any) -> Optional[str]:
    """Why `value` is no budget (the one language, _budget.parse), or None when it is one."""
    try:
        _budget.parse(value)
    except ValueError as e:
        return str(e)
    return None


def check(options: dict, where: str, compiler: str = "inductor") -> dict:
    """options with each key known and each value of its form under
    `compiler`; MutwoError naming the keys and forms otherwise. `where` says
    where they came from."""
    unknown = sorted(str(k) for k in options if k not in KEYS)
    if unknown:
        raise _error(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}")
    compiler = compiler if compiler in COMPILERS else "inductor"
    planners = PLANNERS if compiler == "mutwo" else ("mutwo", "none")
    out = {}
    for key, value in options.items():
        if value is None:
            continue
        if key == "budget":
            why = _budget_problem(value)
            if why:
                raise _error(f"{where}: {why}")
            value = value.strip() if isinstance(value, str) else value
        elif key == "compiler" and value not in COMPILERS:
            raise _error(f"{where}: compiler={value!r} is not one of {', '.join(COMPILERS)}")
        elif key == "planner" and value not in planners:
            raise _error(f"{where}: planner={value!r} is not one of {', '.join(planners)} (compiler {compiler})")
        elif key == "chunk_loss":
            if not isinstance(value, bool):
                raise _error(f"{where}: chunk_loss={value!r} is not True or False")
        elif not isinstance(value, str):
            raise _error(f"{where}: {key}={value!r} is not a string")
        out[key] = value
    return out


def default_budget(example_inputs: Sequence[Any], compiler: str) -> tuple[Any, str]:
    """The budget when none was given, and why (the report's `budget_source`).

    CUDA: what is free on the card now (the driver's free memory and what the
    caching allocator holds unused), less room for an Adam-style optimizer's
    state (two copies of the graph's trainable parameters, made at the first
    optimizer step, after this compile), less CUDA_MARGIN of what is free and
    CUDA_RESERVE: the promise is that the step fits. CPU: no budget, plain
    torch.compile's plan (compiler mutwo: 100%, every activation kept), since
    free host memory bounds nothing useful."""
    tensors = [a for a in example_inputs if isinstance(a, torch.Tensor)]
    cuda = next((a.device for a in tensors if a.device.type == "cuda"), None)
    if cuda is None:
        if compiler == "mutwo":
            return "100%", "default on the CPU: 100% (every activation kept)"
        return None, "default on the CPU: none (plain torch.compile's plan, measured and reported)"
    free = torch.cuda.mem_get_info(cuda)[0]
    unused = torch.cuda.memory_reserved(cuda) - torch.cuda.memory_allocated(cuda)
    trainable = sum(a.numel() * a.element_size() for a in tensors
                    if isinstance(a, torch.nn.Parameter) and a.requires_grad)
    held = sum(a.numel() * a.element_size() for a in tensors) if compiler == "mutwo" else 0  # its budget holds them
    margin = int((free + unused) * CUDA_MARGIN) + CUDA_RESERVE
    budget = free + unused + held - 2 * trainable - margin
    why = (f"default on CUDA: {free + unused} B free on the card, less {2 * trainable} B for optimizer state "
           f"(2 x the trainable parameters), less {margin} B ({CUDA_MARGIN:.0%} of that and "
           f"{CUDA_RESERVE >> 20} MiB)")
    if budget < 1 << 20:
        raise _error(f"no budget given and under 1 MiB left on {cuda} for one ({why}); give "
                     "options={\"budget\": ...} or MUTWO_BUDGET")
    return budget, why


# Set by mutwo.trainer.MutwoCallback for the compiles of its training run.
defaults: dict = {}


def _build(options: Optional[dict], mode: Optional[str], example_inputs: Sequence[Any]) -> _registry.Entry:
    import mutwo.torch as mt
    if mode is not None:
        raise _error(f"mode={mode!r} is Inductor's; torch.compile(backend=\"mutwo\") takes no mode")
    if options is not None and not isinstance(options, dict):
        raise _error(f"options={options!r} is not a dict")
    compiler = (options or {}).get("compiler") or defaults.get("compiler") or "inductor"  # the budget's forms
    compiler = compiler if compiler in COMPILERS else "inductor"  # check() names a bad one
    given = check(options or {}, "options", compiler)
    env = check({k: os.environ[v] for k, v in ENVIRONMENT.items() if os.environ.get(v)}, "the environment "
                f"({', '.join(ENVIRONMENT.values())})", compiler)
    callback = check(defaults, "mutwo.trainer.MutwoCallback", compiler)
    merged = {**env, **callback, **given}
    source = ("options" if "budget" in given else "MutwoCallback" if "budget" in callback
              else ENVIRONMENT["budget"] if "budget" in env else "")
    if not source:
        merged["budget"], source = default_budget(example_inputs, compiler)
    return _registry.Entry(mt.backend(merged.pop("budget"), **merged), source, compiler=compiler)


def _trains(example_inputs: Sequence[Any]) -> bool:
    """The graph has a backward: grad mode is on (Dynamo guards on it, so a
    graph compiled under no_grad runs only under no_grad) and an input needs
    a gradient."""
    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs)


def _unplanned(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], compiler: str) -> Callable:
    """A graph with no backward (evaluation, no_grad): nothing to plan, so
    Inductor compiles it as plain torch.compile would, or (compiler mutwo) it
    runs eagerly, as wrap() runs a module in evaluation."""
    if compiler == "inductor":
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, list(example_inputs))
    return gm.forward


def _compile_call() -> Any:
    """torch.compile's wrapper of this call (_TorchCompileWrapper, one per
    torch.compile), whose __call__ called mutwo(): the entry's key."""
    frame = sys._getframe(2)
    for _ in range(3):
        owner = frame.f_locals.get("self") if frame.f_code.co_name == "__call__" else None
        if getattr(owner, "compiler_fn", None) is mutwo:
            return owner
        frame = frame.f_back
        if frame is None:
            break
    return None


def mutwo(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, options: Optional[dict] = None,
          mode: Optional[str] = None) -> Callable:
    """The backend torch's registry loads for backend="mutwo"."""
    owner = _compile_call()  # None when called other than by torch.compile: one entry per options then
    key = id(owner) if owner is not None else repr((options, mode))
    entry = _registry.entries[key][1] if key in _registry.entries else None
    if entry is None:
        try:
            entry = _build(options, mode, example_inputs)
        except MutwoError as e:
            entry = _registry.Entry(error=e)
        _registry.entries[key] = (weakref.ref(owner) if owner is not None else None, entry)
        if owner is not None:
            weakref.finalize(owner, _registry.entries.pop, key, None)
    _registry.latest = entry
    if entry.error is None and not _trains(example_inputs):
        return _unplanned(gm, example_inputs, entry.compiler)
    if entry.error is None:
        try:
            return entry.backend(gm, example_inputs)
        except MutwoError as e:  # a second graph under a byte budget: raised from the call, as below
            error = e
    else:
        error = entry.error

    def refuse(*args: Any) -> Any:  # raised from the call: not wrapped in Dynamo's BackendCompilerFailed
        raise error
    return refuse


_registry.named = mutwo
