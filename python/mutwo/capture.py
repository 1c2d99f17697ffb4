# Writes a model's training step as a mutwo step file (docs/step-file.md):
# AOTAutograd traces the joint forward+backward graph of loss_fn(model, *inputs),
# each ATen call becomes a node, and the parameters, buffers and inputs go to a
# safetensors side file (written by _writing.py). Used as a library (capture())
# or from the command line:
#   python3 -m mutwo.capture MODULE:FUNCTION --out step.json [--name NAME]
from __future__ import annotations

import argparse
import copy
import importlib
import os
import re
import sys
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx

from mutwo import _compat
from mutwo._files import dumps, write_safetensors
from mutwo._graph import (FORMAT, VERSION, WRAPPER_ATTR, CaptureError, DataDependentError,  # noqa: F401 (re-exported)
                          Joint, Primal, flatten, is_tangent, mutated_positions, normalize_args, rng_preserved)
from mutwo._progress import Progress
from mutwo._writing import data_key, document  # noqa: F401 (data_key re-exported)

_HERE = os.path.dirname(os.path.abspath(__file__))



# ---------------------------------------------------------------------------------------------
# Tracing


class _Wrapper(torch.nn.Module):
    """forward(*inputs) = loss_fn(model, *inputs), so that the loss is part of the
    graph; model(*inputs) without a loss_fn."""

    def __init__(self, model: torch.nn.Module, loss_fn: Optional[Callable]) -> None:
        super().__init__()
        setattr(self, WRAPPER_ATTR, model)
        self.__dict__["loss_fn"] = loss_fn  # not a submodule: a loss module's tensors are graph constants

    def forward(self, *inputs: Any) -> Any:
        model = getattr(self, WRAPPER_ATTR)
        return model(*inputs) if self.loss_fn is None else self.loss_fn(model, *inputs)


_STDLIB = os.path.dirname(os.__file__)


def _users(filename: str) -> bool:
    """A frame of the user's code: not mutwo's, torch's or Python's own."""
    return not (filename.startswith((_HERE, _STDLIB, "<frozen"))
                or any(s in filename for s in (os.sep + "torch" + os.sep, os.sep + "functorch" + os.sep)))


def _user_frame(exc: BaseException) -> str:
    """file:line of the innermost traceback frame outside torch and mutwo."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _users(f.filename)]
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def _users_traceback(exc: BaseException) -> str:
    """The traceback of an exception the user's own code raised (its innermost
    frame is theirs; for a CaptureError, its cause's), with only their frames;
    "" for any other, whose one line says what mutwo or torch refused."""
    own = exc.__cause__ if isinstance(exc, CaptureError) else exc
    frames = traceback.extract_tb(own.__traceback__) if own is not None else []
    if not frames or not _users(frames[-1].filename):
        return ""
    return ("Traceback (most recent call last; torch's and mutwo's frames left out):\n" +
            "".join(traceback.format_list([f for f in frames if _users(f.filename)])) +
            "".join(traceback.format_exception_only(own)))


def _tracing_error(exc: Exception) -> CaptureError:
    """One line for an exception raised while tracing, naming the ATen op where known.

    Fake tensors raise DataDependentOutputException / DynamicOutputShapeException naming the
    op (aten._local_scalar_dense.default, aten.nonzero.default) or fail to guard
    on a data-dependent expression.
    """
    text = str(exc).strip()
    msg = text.splitlines()[0] if text else type(exc).__name__
    where = _user_frame(exc)
    at = f" at {where}" if where else ""
    op = re.search(r"aten[.:]{1,2}(\w+)", text)
    low = text.lower()
    if (op and op.group(1) in ("_local_scalar_dense", "item")) \
            or "data-dependent" in low or "data dependent" in low:
        return DataDependentError(f"node aten::_local_scalar_dense{at}: a tensor's value is read while tracing "
                                  "(.item(), bool(), int(), data-dependent control flow)")
    if op and "dynamicoutputshape" in (type(exc).__name__ + low).lower():
        return DataDependentError(f"node aten::{op.group(1)}{at}: data-dependent output shape")
    return CaptureError(f"tracing failed{at}: {type(exc).__name__}: {msg}")


@dataclass
class OutputSpec:
    """How a module's result is rebuilt from its flattened tensor outputs."""
    spec: Any  # torch.utils._pytree spec of the result
    leaves: list  # the result's leaves; None where a tensor output goes
    tensor_positions: list[int]  # leaf position of each tensor output


def named_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by qualified name, a tied tensor under every name it has."""
    out: dict[str, torch.Tensor] = {}
    for mname, m in module.named_modules(remove_duplicate=False):
        for n, t in list(m._parameters.items()) + list(m._buffers.items()):
            if t is not None:
                out[f"{mname}.{n}" if mname else n] = t
    return out


def trace(model: torch.nn.Module, example_inputs: Sequence[Any], loss_fn: Optional[Callable],
          out_spec: Optional[list] = None) -> Joint:
    """Traces loss_fn(model, *example_inputs) and its backward into one FX graph;
    without a loss_fn, model(*example_inputs) with a tangent for each output that
    requires grad (mutwo.torch), and `out_spec` (a list) receives its OutputSpec.

    Works on a deep copy of the model and restores torch's RNG, so neither the
    model (parameters, buffers) nor the RNG state changes.
    """
    recurrent = _recurrent(model)
    with rng_preserved(), torch.enable_grad():
        if not recurrent:
            return _traced(model, tuple(example_inputs), loss_fn, out_spec)
        lost = _cudnn_lost(model)
        if not lost:
            try:
                with _compat.eager_recurrent():  # an nn.LSTM as eager runs it: oneDNN's fused kernel on the CPU
                    return _traced(model, tuple(example_inputs), loss_fn, out_spec)
            except CaptureError as e:
                lost = f"their fused kernel could not be traced ({str(e).splitlines()[0]})"
        joint = _traced(model, tuple(example_inputs), loss_fn, out_spec)  # torch's decomposition, cell by cell
        warnings.warn(_cell_by_cell(joint, recurrent, lost), stacklevel=3)
        return joint


def _traced(model: torch.nn.Module, example_inputs: tuple, loss_fn: Optional[Callable],
            out_spec: Optional[list]) -> Joint:
    try:
        return _trace(model, example_inputs, loss_fn, out_spec)
    except _ViewedOutputs as e:  # trace again, those outputs made tensors of their own
        return _trace(model, example_inputs, loss_fn, out_spec, e.positions)


def _recurrent(model: torch.nn.Module) -> dict[str, str]:
    """The model's recurrent layers (nn.LSTM, GRU, RNN): path -> class name."""
    return {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, torch.nn.RNNBase)}


def _cudnn_lost(model: torch.nn.Module) -> str:
    """Why a recurrent layer that eager runs as cuDNN's fused kernel is traced
    cell by cell ("" where none is): its capture on CUDA is not yet run on a
    card, so torch's decomposition is traced there."""
    on_cuda = any(p.is_cuda for m in model.modules() if isinstance(m, torch.nn.RNNBase) for p in m.parameters())
    if not on_cuda or not torch.backends.cudnn.enabled:
        return ""
    return "mutwo does not yet capture cuDNN's fused kernel (_cudnn_rnn) on CUDA"


def _cell_by_cell(joint: Joint, recurrent: dict[str, str], why: str) -> str:
    """The warning when the recurrent layers are traced by torch's
    decomposition, one cell per time step, not as eager's fused kernel: why,
    and what it costs."""
    scope = _compat.scopes(joint.gm, WRAPPER_ATTR)
    counts = {path: sum(1 for n, p in scope.items() if n.op == "call_function" and
                        (p == path or p.startswith(path + "."))) for path in recurrent}
    layers = ", ".join(f"{kind} {path or '(the model)'} ({counts[path]} ops)" for path, kind in recurrent.items())
    return (f"mutwo: {layers} run cell by cell, one op per gate and time step, forward and backward, not as "
            f"eager's fused kernel: {why}. Expect the step to be slower than eager PyTorch (an LSTM language model "
            "ran 2.1 to 2.4 times slower per step this way on the CPU); to keep eager's speed, leave the recurrent "
            "layer out of the wrapped module")


class _ViewedOutputs(Exception):
    """Module outputs that are views of other outputs (CLIP's logits_per_text is
    logits_per_image.t()): AOTAutograd gives them no tangent of their own."""

    def __init__(self, positions: frozenset[int]) -> None:
        super().__init__(sorted(positions))
        self.positions = positions


def _viewed_outputs(results: Any) -> frozenset[int]:
    """Positions, among the tensor outputs of a real run, of those that share
    storage with an earlier one."""
    seen, viewed = set(), set()
    tensors = [x for x in torch.utils._pytree.tree_flatten(results)[0] if isinstance(x, torch.Tensor)]
    for k, t in enumerate(tensors):
        storage = t.untyped_storage().data_ptr()
        if storage in seen:
            viewed.add(k)
        seen.add(storage)
    return frozenset(viewed)


def _primals(wrapper: torch.nn.Module, example_inputs: tuple, loss_fn: Optional[Callable]) -> tuple:
    """The step's primals (parameters, buffers, then tensor inputs), the tensors
    given to AOTAutograd for them, the positions of the tensor inputs among
    `example_inputs`, and every name each parameter and buffer has."""
    prefix = WRAPPER_ATTR + "."
    named_params = list(wrapper.named_parameters())  # tied parameters once
    named_buffers = list(wrapper.named_buffers())
    all_names: dict[int, list[str]] = {id(t): [] for _, t in named_params + named_buffers}
    for n, t in named_state(wrapper).items():  # tied tensors under every name
        all_names[id(t)].append(n)
    for n, _ in named_params + named_buffers:
        if not n.startswith(prefix):
            raise CaptureError(f"loss_fn's own parameter or buffer {n} is not supported")

    primals: list[Primal] = []
    flat: list[torch.Tensor] = []
    for role, named in (("parameter", named_params), ("buffer", named_buffers)):
        for n, t in named:
            primals.append(Primal(role, n[len(prefix):], t.detach().clone()))
            flat.append(t)
    input_positions = []
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor):
            x = x.detach().clone().requires_grad_(loss_fn is None and x.requires_grad)
            primals.append(Primal("input", i, x.clone()))
            flat.append(x)
            input_positions.append(i)
    n_state = len(named_params) + len(named_buffers)
    owners = [all_names[id(t)] for t in flat[:n_state]]
    return primals, flat, input_positions, owners


def _forward_runner(gm: torch.fx.GraphModule, _: Any) -> Callable:
    """The partitioned forward, run once for real (AOTAutograd runs it without
    grad mode): with grad mode on where a kernel keeps its backward's workspace
    only then (oneDNN's LSTM)."""
    run = _compat.make_boxed_func(gm)
    if not _compat.needs_grad_mode(gm):
        return run

    def with_grad_mode(args: list) -> Any:
        with _compat.grad_mode_kernels():
            return run(args)
    with_grad_mode._boxed_call = True  # type: ignore[attr-defined]
    return with_grad_mode


def _run_joint(wrapper: torch.nn.Module, step: Callable, flat: list) -> tuple[dict, list[int], Any]:
    """Runs `step` through AOTAutograd once: the joint graph its partitioner saw
    (gm, inputs, kwargs), the positions in `flat` the real run wrote, and what
    the real run returned."""
    got: dict[str, Any] = {}

    def partition_fn(joint_module: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any) -> Any:
        got.update(gm=joint_module, inputs=joint_inputs, kwargs=kwargs)
        return _compat.partition(joint_module, joint_inputs, kwargs)

    versions = [t._version for t in flat]
    compiled = _compat.aot_function(step, fw_compiler=_forward_runner, partition_fn=partition_fn)
    try:
        with _compat.module_scopes(wrapper), _compat.real_tensors_as_constants(), _compat.compiling(), \
                _compat.no_anomaly_warning():
            results = compiled(*flat)  # traces, partitions (our hook records the joint graph), runs the forward
    except CaptureError:
        raise
    except Exception as e:  # graph breaks, data-dependent shapes, unsupported outputs
        raise _tracing_error(e) from e
    if "gm" not in got:
        raise CaptureError("AOTAutograd produced no joint graph (does the loss require grad?)")
    moved = [i for i, t in enumerate(flat) if t._version != versions[i]]  # written by the real run
    return got, moved, results


def _trace(model: torch.nn.Module, example_inputs: tuple, loss_fn: Optional[Callable],
           out_spec: Optional[list], cloned: frozenset[int] = frozenset()) -> Joint:
    wrapper = _Wrapper(copy.deepcopy(model), loss_fn)
    primals, flat, input_positions, owners = _primals(wrapper, example_inputs, loss_fn)
    _check_batch_norms(wrapper)
    n_state = len(owners)
    module_outputs: dict[str, Any] = {}

    def step(*args: torch.Tensor) -> tuple:
        tensors = {name: a for names, a in zip(owners, args[:n_state]) for name in names}
        inputs = list(example_inputs)
        for i, a in zip(input_positions, args[n_state:]):
            inputs[i] = a
        result = _compat.functional_call(wrapper, tensors, tuple(inputs))
        if loss_fn is not None:
            return (result,)
        leaves, spec = torch.utils._pytree.tree_flatten(result)
        positions = [k for k, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        outs = tuple(leaves[k].clone() if i in cloned else leaves[k] for i, k in enumerate(positions))
        module_outputs.update(spec=OutputSpec(spec, [None if k in positions else x for k, x in enumerate(leaves)],
                                              positions),
                              requires_grad=[o.requires_grad for o in outs])
        return outs

    got, moved, results = _run_joint(wrapper, step, flat)
    gm: torch.fx.GraphModule = got["gm"]
    primal_vals, tangent_vals = _compat.split_joint_inputs(got["inputs"])
    if not _compat.primals_match(primal_vals, flat):
        raise CaptureError("the joint graph's primals are not the parameters, buffers and inputs in order "
                           "(aliased inputs?)")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    prim_nodes = [n for n in placeholders if "tangents" not in str(n.target)]
    tangents = [n for n in placeholders if is_tangent(n)]
    if len(prim_nodes) != len(primals) or placeholders != prim_nodes + tangents:
        raise CaptureError(f"the joint graph has {len(prim_nodes)} primals for {len(primals)} tensors")
    if loss_fn is not None and (len(tangents) != 1 or len(tangent_vals) != 1):
        raise CaptureError(f"the joint graph has {len(tangents)} tangents; loss_fn must return one scalar")

    n_fwd = _compat.num_fwd_outputs(gm, got["kwargs"])
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = torch.utils._pytree.tree_flatten(output.args)[0]
    fwd, grads = outs[:n_fwd], outs[n_fwd:]
    if len(grads) != len(primals):
        raise CaptureError(f"the joint graph returns {len(grads)} gradients for {len(primals)} primals")

    written = _written_placeholders(gm)
    uncovered = [i for i in moved if prim_nodes[i] not in written]
    buffer_updates = _compat.match_buffer_updates(fwd, uncovered, prim_nodes, [p.key for p in primals],
                                                  CaptureError)
    first = len(uncovered)
    loss = fwd[first] if loss_fn is not None else None
    for i, node in buffer_updates:
        if primals[i].role != "buffer":
            raise CaptureError(f"the step writes {primals[i].role} {primals[i].key} in place")
    if loss_fn is not None and not isinstance(loss, torch.fx.Node):
        raise CaptureError("the loss is not computed by the graph")
    if loss_fn is None:
        n_out = len(module_outputs["requires_grad"])
        outputs = _own_outputs(gm, fwd[first:first + n_out])
        tangent_of = _compat.tangent_outputs(module_outputs["requires_grad"], len(tangents))
        viewed = _viewed_outputs(results) if tangent_of is None and not cloned else frozenset()
        if viewed:
            raise _ViewedOutputs(viewed)
        if tangent_of is None:
            raise CaptureError(f"the joint graph has {len(tangents)} tangents for {n_out} outputs "
                               f"({sum(module_outputs['requires_grad'])} requiring grad)")
        if out_spec is not None:
            out_spec.append(module_outputs["spec"])
    else:
        outputs, tangent_of = [loss], [0]

    for ph, p in zip(prim_nodes, primals):
        ph.meta["mutwo_primal"] = p
    differentiable = ("parameter",) if loss_fn is not None else ("parameter", "input")
    gradients = _own_gradients(gm, {i: g for i, g in enumerate(grads)
                                    if isinstance(g, torch.fx.Node) and primals[i].role in differentiable})
    gm.recompile()
    return Joint(gm, primals, loss, gradients, buffer_updates, prim_nodes,
                 [(tuple(t.shape), t.dtype, t.device) for t in tangent_vals], outputs, tangent_of)


def _own_outputs(gm: torch.fx.GraphModule, outs: list) -> list[torch.fx.Node]:
    """A module's outputs, each a value of its own made by a node: an output that
    is a graph input (the module returns a parameter or its input) or repeats
    another is returned as a clone."""
    seen: set = set()
    output = next(n for n in gm.graph.nodes if n.op == "output")
    result = []
    for o in outs:
        if not isinstance(o, torch.fx.Node):
            raise CaptureError("a module output is not computed by the graph")
        if o in seen or o.op != "call_function":
            with gm.graph.inserting_before(output):
                o = gm.graph.call_function(torch.ops.aten.clone.default, (o,))
        seen.add(o)
        result.append(o)
    return result


def _own_gradients(gm: torch.fx.GraphModule, grads: dict[int, torch.fx.Node]) -> dict[int, torch.fx.Node]:
    """Gives every parameter a gradient value of its own: where autograd hands two
    parameters the same tensor, or a gradient is not computed by a node, a clone is
    appended to the graph."""
    seen: set = set()
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for i, g in grads.items():
        if g in seen or g.op != "call_function":
            with gm.graph.inserting_before(output):
                grads[i] = gm.graph.call_function(torch.ops.aten.clone.default, (g,))
        seen.add(grads[i])
    return grads


def _check_batch_norms(wrapper: torch.nn.Module) -> None:
    for name, m in wrapper.named_modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.training and m.track_running_stats \
                and m.momentum is None:
            raise CaptureError(f"{name[len(WRAPPER_ATTR) + 1:]}: BatchNorm with momentum=None (a cumulative "
                               "average whose factor depends on num_batches_tracked's value) is not supported")


def _written_placeholders(gm: torch.fx.GraphModule) -> set:
    """Placeholders some node writes in place."""
    out = set()
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            args = normalize_args(n)
            for pos in mutated_positions(n.target, args):
                for a in flatten(args[pos]):
                    if isinstance(a, torch.fx.Node) and a.op == "placeholder":
                        out.add(a)
    return out


def _check_arguments(model: Any, example_inputs: Any, loss_fn: Any, path: Any, name: Any) -> None:
    """capture()'s arguments, each refused with what to pass instead."""
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"model: capture() takes an nn.Module, got {type(model).__name__}")
    if isinstance(example_inputs, (torch.Tensor, str)) or not isinstance(example_inputs, Sequence):
        raise CaptureError(f"example_inputs: a tuple or list of the model's inputs, got {type(example_inputs).__name__} "
                           "(one tensor: write (x,))")
    if not callable(loss_fn):
        raise CaptureError(f"loss_fn: a function loss_fn(model, *example_inputs) returning the loss, got "
                           f"{type(loss_fn).__name__}")
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path) or os.path.isdir(path):
        raise CaptureError(f"path {path!r}: give the step file to write, e.g. step.json")
    if name is not None and not isinstance(name, str):
        raise CaptureError(f"name: a string or None, got {type(name).__name__}")


def capture(model: torch.nn.Module, example_inputs: Sequence[Any], loss_fn: Callable, path: str,
            name: Optional[str] = None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Writes loss_fn(model, *example_inputs)'s training step to `path` (JSON) and
    `<stem>.safetensors` beside it; returns the JSON document. Its arguments
    are checked before anything is traced (CaptureError). `progress`, if
    given, is called with "trace" and then "write" as each stage starts."""
    _check_arguments(model, example_inputs, loss_fn, path, name)
    if progress:
        progress("trace")
    joint = trace(model, example_inputs, loss_fn)
    if progress:
        progress("write")
    stem = os.path.splitext(os.path.basename(path))[0]
    data = stem + ".safetensors"
    doc, tensors = document(joint, name or type(model).__name__, data)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    try:
        write_safetensors(os.path.join(directory, data), tensors)
    except ValueError as e:
        raise CaptureError(str(e)) from None
    text = dumps(doc)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return doc


# -- the command line: python3 -m mutwo.capture MODULE:FUNCTION --out step.json
# [--name NAME] imports MODULE, calls FUNCTION() for (model, example_inputs,
# loss_fn) and writes the step file. Errors are one line on stderr and exit
# status 2, below the traceback of an exception the user's code raised. Progress (each stage, and what is left) goes to stderr unless
# --quiet (mutwo/_progress.py).
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
                        "current directory or PYTHONPATH. Errors: one line on stderr (below the "
                        "traceback of an exception your code raised), exit status 2.")
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
        print(f"{_users_traceback(e)}mutwo.capture: error: {kind}{msg}", file=sys.stderr)
        return 2
    progress.done()
    print(f"wrote {a.out} ({len(doc['nodes'])} nodes, {len(doc['values'])} values) and {doc['data']}")
    return 0


if __name__ == "__main__":  # python -m mutwo.capture: run on the package's own module, not this __main__ copy
    from mutwo.capture import main as _main
    sys.exit(_main())
