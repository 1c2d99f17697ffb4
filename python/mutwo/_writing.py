# The step file's writer (docs/step-file.md): the joint graph mutwo.capture
# traced (capture.Joint) walked node by node, each ATen call a row with its
# arguments, values with dtype, shape and storage, and the tensors of the
# parameters, buffers and inputs for the safetensors side file. capture.py
# traces; this module writes; capture.py's main() is the command line.
from __future__ import annotations

import math
import operator
import platform
from typing import Any, Optional

import torch
import torch.fx

from mutwo import _compat
from mutwo._files import DTYPES
from mutwo._graph import (DATA_DEPENDENT, FORMAT, LAYOUTS, MEMORY_FORMATS, VERSION, WRAPPER_ATTR, CaptureError, Joint,
                          flatten, mutated_positions, node_error, normalize_args, rng_preserved)


def _alias_of(node: torch.fx.Node, shares: list[set[int]]) -> tuple[Optional[int], bool]:
    """(argument position every output aliases or None, whether that alias is written),
    from the schema, or from the real run (`shares`) where the schema declares no alias."""
    schema = node.target._schema
    if not schema.returns:
        return None, False
    if all(r.alias_info is None for r in schema.returns) and any(shares):
        found_pos = set().union(*shares)
        if len(found_pos) != 1 or not all(shares):
            raise node_error(node, f"outputs share storage with arguments {sorted(found_pos)} "
                                    "(undeclared aliasing mutwo cannot express)")
        pos = found_pos.pop()
        if pos != 0:
            raise node_error(node, f"its outputs alias argument {pos} ({schema.arguments[pos].name}); "
                                    "mutwo supports aliasing of the first argument only")
        return 0, False
    found = []
    for r in schema.returns:
        ai = r.alias_info
        if ai is None:
            found.append(None)
            continue
        sets = set(ai.before_set) | set(ai.after_set)
        if sets:
            match = [i for i, a in enumerate(schema.arguments) if a.alias_info is not None
                     and sets & (set(a.alias_info.before_set) | set(a.alias_info.after_set))]
        else:  # Tensor(a)[] of split/unbind/chunk: the list's elements alias `Tensor(a -> *) self`
            match = [i for i, a in enumerate(schema.arguments)
                     if a.alias_info is not None and "*" in set(a.alias_info.after_set)]
        if len(match) != 1:
            raise node_error(node, "an output aliases no single argument")
        found.append((match[0], ai.is_write))
    if all(f is None for f in found):
        return None, False
    if any(f is None for f in found) or len(set(found)) != 1:
        raise node_error(node, "only some outputs alias an argument (unsupported)")
    pos, write = found[0]
    if pos != 0:
        raise node_error(node, f"its outputs alias argument {pos} ({schema.arguments[pos].name}); "
                                "mutwo supports aliasing of the first argument only")
    return pos, write


# ---------------------------------------------------------------------------------------------
# Real run: every value's dtype, shape and strides


class _Recorder(torch.fx.Interpreter):
    """Runs the joint graph on real tensors and keeps, for each node, its result's
    metadata and which arguments each output shares storage with (schemas do not
    declare every alias: `_unsafe_view` returns a view of its input)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.meta: dict[torch.fx.Node, Any] = {}
        self.shares: dict[torch.fx.Node, list[set[int]]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        result = super().run_node(n)
        self.meta[n] = _describe(result)
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            storages = {}
            for pos, a in enumerate(normalize_args(n)):
                for x in flatten(a):
                    if isinstance(x, torch.fx.Node) and isinstance(self.env.get(x), torch.Tensor):
                        ptr = _compat.storage_ptr(self.env[x])
                        if ptr:
                            storages.setdefault(ptr, set()).add(pos)
            outs = result if isinstance(result, (tuple, list)) else [result]
            self.shares[n] = [storages.get(_compat.storage_ptr(o), set()) if isinstance(o, torch.Tensor) else set()
                              for o in outs]
        return result


def _describe(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (x.dtype, tuple(x.shape), tuple(x.stride()), x.layout)
    if isinstance(x, (tuple, list)):
        return [_describe(e) for e in x]
    if x is None:
        return None
    if isinstance(x, (bool, int, float)):  # an op's scalar output (cuDNN attention's max_q): its value, inlined
        return ("nontensor", type(x).__name__, x)
    return ("nontensor", type(x).__name__)


def _is_tensor_meta(m: Any) -> bool:
    return isinstance(m, tuple) and len(m) == 4 and isinstance(m[0], torch.dtype)


# ---------------------------------------------------------------------------------------------
# The document


class _Writer:
    namespaces: tuple[str, ...] = ("aten::",)  # the ops mutwo's executor runs

    def __init__(self, joint: Joint, recorded: dict, shares: dict) -> None:
        self.joint, self.rec, self.shares = joint, recorded, shares
        self.values: list[dict] = []
        self.names: set[str] = set()
        self.value_of: dict[torch.fx.Node, str] = {}  # FX node holding one tensor -> its value's name
        self.scopes: dict[torch.fx.Node, str] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        self.scalars: dict[torch.fx.Node, Any] = {}  # getitem of a scalar output -> its value in the real run

    def unique(self, base: str) -> str:
        name, i = base, 1
        while name in self.names:
            name, i = f"{base}_{i}", i + 1
        self.names.add(name)
        return name

    def add_value(self, node: torch.fx.Node, name: str, meta: Any, role: str,
                  extra: Optional[dict] = None) -> None:
        if not _is_tensor_meta(meta):
            raise node_error(node, f"output is not a tensor ({meta[1] if isinstance(meta, tuple) else meta})")
        dtype, shape, strides, layout = meta
        if dtype not in DTYPES:
            raise node_error(node, f"dtype {dtype} is not one of {' '.join(DTYPES.values())}")
        if layout != torch.strided:
            raise node_error(node, f"layout {layout} is not strided")
        self.values.append({"name": name, "role": role, "dtype": DTYPES[dtype], "shape": list(shape),
                            "strides": list(strides), **(extra or {})})

    def build(self) -> tuple[list[dict], list[dict]]:
        j = self.joint
        grad_of = {id(g): i for i, g in j.gradients.items()}
        for n in j.gm.graph.nodes:
            if n.op != "placeholder":
                continue
            name = self.unique(n.name)
            self.value_of[n] = name
            p = n.meta.get("mutwo_primal")
            if p is None:
                self.add_value(n, name, self.rec[n], "tangent")
            elif p.role == "input":
                self.add_value(n, name, self.rec[n], "input", {"index": p.key})
                self.tensors[data_key(self.values[-1])] = p.tensor
            else:
                self.add_value(n, name, self.rec[n], p.role, {"qualname": p.key})
                self.tensors[data_key(self.values[-1])] = p.tensor
        constants: dict[str, str] = {}  # attribute -> value name (forward and backward may both read it)
        for n in j.gm.graph.nodes:
            if n.op == "get_attr" and n.target in constants:
                self.value_of[n] = constants[n.target]
            elif n.op == "get_attr":
                t = getattr(j.gm, n.target)
                if not isinstance(t, torch.Tensor):
                    raise node_error(n, "a graph attribute that is not a tensor (a higher-order op?)")
                name = constants[n.target] = self.value_of[n] = self.unique(n.name)
                self.add_value(n, name, self.rec[n], "constant")
                self.tensors[data_key(self.values[-1])] = t.detach()
        ancestors = set().union(*(_ancestors(o) for o in j.outputs))
        self.scopes = _compat.scopes(j.gm, WRAPPER_ATTR)
        nodes = []
        for n in j.gm.graph.nodes:
            if n.op in ("placeholder", "get_attr", "output"):
                continue
            if n.op != "call_function":
                raise node_error(n, f"{n.op} nodes are not supported")
            if n.target is operator.getitem:
                continue  # folded into its producer's outputs
            nodes.append(self.node(n, n in ancestors, grad_of))
        if j.loss is None:  # each tangent names the output it is the gradient of
            tangents = [v for v in self.values if v["role"] == "tangent"]
            for v, k in zip(tangents, j.tangent_of):
                v["of"] = self.value_of[j.outputs[k]]
        return self.values, nodes

    def node(self, n: torch.fx.Node, forward: bool, grad_of: dict) -> dict:
        op = n.target
        if not isinstance(op, torch._ops.OpOverload):
            raise node_error(n, "not an ATen operator (a higher-order op or Python function)")
        schema = op._schema
        if not schema.name.startswith(self.namespaces):
            raise node_error(n, "not an ATen operator")
        args = normalize_args(n)
        if self.data_dependent(op, args):
            raise node_error(n, "data-dependent output (shape or value depends on tensor data)")
        mutates = mutated_positions(op, args)
        alias_of, written = _alias_of(n, self.shares.get(n, []))
        tags = []
        if _compat.is_random(op):
            tags.append("nondeterministic_seeded")
        if alias_of is not None:
            tags.append("inplace" if written else "view")

        meta = self.rec[n]
        if isinstance(meta, list):
            by_index = {u.args[1]: u for u in n.users if u.op == "call_function" and u.target is operator.getitem}
            if len(by_index) != len(n.users):
                raise node_error(n, "a multi-output op used other than through getitem")
            names: list[Optional[str]] = []
            for i, m in enumerate(meta):
                user = by_index.get(i)
                if isinstance(m, tuple) and len(m) == 3 and m[0] == "nontensor":
                    if user is not None:
                        self.scalars[user] = m[2]  # its readers get the value: shapes are static
                    names.append(None)
                    continue
                if m is None:
                    names.append(None)
                    continue
                name = self.unique(user.name if user is not None else f"{n.name}_out{i}")
                target = user if user is not None else n
                self.add_value(target, name, m, *self.role(user, grad_of))
                if user is not None:
                    self.value_of[user] = name
                names.append(name)
        elif meta is None:
            names = [] if not schema.returns else [None]
        else:
            name = self.unique(n.name)
            self.add_value(n, name, meta, *self.role(n, grad_of))
            self.value_of[n] = name
            names = [name]
        return {"target": schema.name, "overload": schema.overload_name or "default",
                "args": [self.encode(n, a, arg) for a, arg in zip(args, schema.arguments)],
                "outputs": names, "tags": tags, "mutates": mutates, "alias_of": alias_of,
                "scope": self.scopes.get(n, ""), "phase": "forward" if forward else "backward"}

    def data_dependent(self, op: torch._ops.OpOverload, args: list) -> bool:
        name, tags = op._schema.name, _compat.op_tags(op)
        if name in DATA_DEPENDENT or "data_dependent_output" in tags:
            return True
        if "dynamic_output_shape" not in tags:
            return False
        if name == "aten::index":  # dynamic for boolean masks only; integer indices are fine
            return any(isinstance(i, torch.fx.Node) and self.rec[i][0] in (torch.bool, torch.uint8)
                       for i in flatten(args[1]))
        if name == "aten::repeat_interleave":  # dynamic unless output_size is given
            return args[-1] is None
        return True

    def role(self, node: Optional[torch.fx.Node], grad_of: dict) -> tuple:
        if node is not None and id(node) in grad_of:
            i = grad_of[id(node)]
            return ("gradient", {"of": self.value_of[self.joint.placeholders[i]]})
        return ("intermediate", {})

    def encode(self, node: torch.fx.Node, x: Any, arg: Any) -> Any:
        ty = str(arg.type)
        if isinstance(x, torch.fx.Node) and x in self.scalars:
            return self.encode(node, self.scalars[x], arg)
        if isinstance(x, torch.fx.Node):
            if x not in self.value_of:
                raise node_error(node, f"argument {arg.name} reads {x.name}, which is not a single tensor value")
            return {"t": self.value_of[x]}
        if x is None or isinstance(x, bool):
            return x
        if isinstance(x, int):
            if ty in ("float", "Optional[float]", "List[float]", "Optional[List[float]]"):
                return _float(float(x))
            return x
        if isinstance(x, float):
            return _float(x)
        if isinstance(x, str):
            return {"s": x}
        if isinstance(x, torch.dtype):
            if x not in DTYPES:
                raise node_error(node, f"argument {arg.name}: dtype {x} is not supported")
            return {"dtype": DTYPES[x]}
        if isinstance(x, torch.device):
            return {"device": x.type}
        if isinstance(x, torch.layout):
            if x not in LAYOUTS:
                raise node_error(node, f"argument {arg.name}: layout {x} is not supported")
            return {"layout": LAYOUTS[x]}
        if isinstance(x, torch.memory_format):
            return {"memory_format": MEMORY_FORMATS[x]}
        if isinstance(x, (list, tuple)):
            return [self.encode(node, e, arg) for e in x]
        raise node_error(node, f"argument {arg.name}: cannot encode {type(x).__name__} {x!r}")


def data_key(value: dict) -> str:
    """A value's tensor name in the side file: the qualname of a parameter or
    buffer, input<index> for an input, the value's name for a constant."""
    if value["role"] in ("parameter", "buffer"):
        return value["qualname"]
    if value["role"] == "input":
        return f"input{value['index']}"
    return value["name"]


def _float(x: float) -> dict:
    if math.isnan(x):
        return {"f": "nan"}
    if math.isinf(x):
        return {"f": "inf" if x > 0 else "-inf"}
    return {"f": x}


def _ancestors(node: torch.fx.Node) -> set:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(n.all_input_nodes)
    return seen


def document(joint: Joint, name: str, data: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The step file's JSON document and the side file's tensors (by data_key)."""
    rec = _Recorder(joint.gm)
    with rng_preserved(), torch.no_grad(), _compat.grad_mode_kernels(_compat.needs_grad_mode(joint.gm)):
        _compat.run_fx(rec, joint.inputs())
    return written(_Writer(joint, rec.meta, rec.shares), name, data)


def written(w: _Writer, name: str, data: Optional[str]) -> tuple[dict, dict[str, torch.Tensor]]:
    """The document of a joint graph whose nodes' metadata `w` holds."""
    joint, meta = w.joint, w.rec
    values, nodes = w.build()
    if joint.loss is not None:
        loss_meta = meta[joint.loss]
        if not _is_tensor_meta(loss_meta) or loss_meta[1] != () or not loss_meta[0].is_floating_point:
            raise CaptureError(f"the loss ({joint.loss.name}) must be a floating-point scalar, not {loss_meta}")
    updates = []
    for i, node in joint.buffer_updates:
        ph = joint.placeholders[i]
        if meta[node][:2] != meta[ph][:2]:
            raise node_error(node, f"new value of {joint.primals[i].key} has the wrong dtype or shape")
        updates.append({"buffer": w.value_of[ph], "value": w.value_of[node]})
    doc = {"format": FORMAT, "version": VERSION, "name": name,
           "producer": {"torch": torch.__version__, "python": platform.python_version()},
           "data": data, "values": values, "nodes": nodes,
           "loss": w.value_of[joint.loss] if joint.loss is not None else None,
           "buffer_updates": updates}
    if joint.loss is None:
        doc["outputs"] = [w.value_of[o] for o in joint.outputs]
    return doc, w.tensors
