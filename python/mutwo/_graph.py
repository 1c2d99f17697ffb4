# The joint graph's types and the fx helpers that tracing (capture.py) and
# writing (_writing.py) share: what a traced step is (Joint, Primal), the step
# file's format constants, CaptureError, and small readers of fx nodes
# (arguments by schema, written arguments, tangents). It imports no other
# module of the package: the bottom layer, under capture.py and _writing.py.
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import torch
import torch.fx

FORMAT = "mutwo-step"
VERSION = 1
WRAPPER_ATTR = "mutwo_model"  # the model's attribute in the capture wrapper
MEMORY_FORMATS = {torch.contiguous_format: "contiguous", torch.preserve_format: "preserve",
                   torch.channels_last: "channels_last", torch.channels_last_3d: "channels_last_3d"}
LAYOUTS = {torch.strided: "strided"}

# Ops whose schema does not declare that they write their running statistics
# (arguments 3 and 4) when `training` (argument 5) is true.
_UNDECLARED_WRITES = {"aten::native_batch_norm": (3, 4), "aten::cudnn_batch_norm": (3, 4),
                      "aten::miopen_batch_norm": (3, 4), "aten::_batch_norm_impl_index": (3, 4)}
# Ops that read data out of a tensor or make shapes depend on it (besides those
# tagged data_dependent_output or dynamic_output_shape).
DATA_DEPENDENT = {"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::argwhere", "aten::sym_size",
                   "aten::sym_stride", "aten::sym_numel", "aten::sym_storage_offset", "aten::masked_select",
                   "aten::is_nonzero", "aten::equal", "aten::_unique", "aten::_unique2", "aten::unique_dim",
                   "aten::unique_consecutive", "aten::unique_dim_consecutive"}


class CaptureError(Exception):
    """A training step that cannot be written as a step file; the message is one line naming the node."""


class DataDependentError(CaptureError):
    """A step whose graph the data decides (a branch on a tensor's value, a
    shape torch.nonzero gives): one traced graph cannot hold it."""


@dataclass
class Primal:
    role: str  # parameter, buffer or input
    key: Any  # qualname (parameter, buffer) or position in example_inputs (input)
    tensor: torch.Tensor  # the value before the step (a copy, not the model's tensor)


@dataclass
class Joint:
    """The traced joint graph and what it needs to run.

    Two kinds: a training step (`loss` set, one tangent d(loss)/d(loss)), or a
    module's forward and backward for mutwo.torch (`loss` None; `outputs` are
    what the module returns, flattened, and tangent i is the gradient of the
    user's loss with respect to outputs[tangent_of[i]])."""
    gm: torch.fx.GraphModule
    primals: list[Primal]
    loss: Optional[torch.fx.Node]
    gradients: dict[int, torch.fx.Node]  # primal position -> node holding its gradient
    buffer_updates: list[tuple[int, torch.fx.Node]]  # (primal position, new value) on torch 2.x
    placeholders: list[torch.fx.Node]  # the primals' placeholders
    tangents: list[tuple]  # (shape, dtype, device) of each tangent
    outputs: list[torch.fx.Node]  # [loss], or the module's tensor outputs
    tangent_of: list[int]  # position in outputs of each tangent's output

    def inputs(self) -> list[torch.Tensor]:
        """Fresh copies of the graph's inputs: the primals, then each tangent as ones."""
        return [p.tensor.clone() for p in self.primals] + [torch.ones(shape, dtype=dtype, device=device)
                                                           for shape, dtype, device in self.tangents]


@contextmanager
def rng_preserved() -> Iterator[None]:
    """Restores torch's CPU and CUDA RNG states on exit."""
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def node_error(node: torch.fx.Node, why: str) -> CaptureError:
    return CaptureError(f"node {node.name} ({op_name(node)}): {why}")


def op_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return f"{t._schema.name}.{t._schema.overload_name or 'default'}"
    return getattr(t, "__name__", str(t))


def flatten(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [y for e in x for y in flatten(e)]
    return [x]


def normalize_args(node: torch.fx.Node) -> list:
    """One entry per schema argument: positional args, then kwargs by name, then defaults."""
    schema = node.target._schema
    args = list(node.args)
    if len(args) > len(schema.arguments):
        raise node_error(node, f"{len(args)} arguments for a schema of {len(schema.arguments)}")
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(args):
            out.append(args[i])
        elif a.name in node.kwargs:
            out.append(node.kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            raise node_error(node, f"argument {a.name} is missing")
    unknown = set(node.kwargs) - {a.name for a in schema.arguments}
    if unknown:
        raise node_error(node, f"unknown keyword arguments {sorted(unknown)}")
    return out


def mutated_positions(op: torch._ops.OpOverload, args: list) -> list[int]:
    schema = op._schema
    pos = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    undeclared = _UNDECLARED_WRITES.get(schema.name)
    if undeclared and args[5] is True:
        pos += [i for i in undeclared if args[i] is not None and i not in pos]
    return sorted(pos)


def is_tangent(node: torch.fx.Node) -> bool:
    """A placeholder AOTAutograd made for an output's gradient (named tangents_N)."""
    return node.op == "placeholder" and "tangents" in str(node.target)
