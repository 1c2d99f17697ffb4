# The torch internals mutwo.capture leans on, in one place: AOTAutograd and
# its partitioner (torch._functorch), fake tensors, functionalised graphs that
# return new buffer values as extra forward outputs, nn_module_stack metadata,
# the recurrent ops' Python decompositions, torch.compile's backend registry.
# mutwo needs torch MIN_TORCH or later, checked here, on import of mutwo.capture
# or mutwo.torch (CMakeLists.txt's MUTWO_TORCH_MIN says the same).
from __future__ import annotations

import re

import operator
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

MIN_TORCH = (2, 11)


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


TORCH_RELEASE = _release(torch.__version__)  # (major, minor) of the torch in use
if TORCH_RELEASE < MIN_TORCH:
    raise ImportError(f"mutwo needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or later; this Python has torch "
                      f"{torch.__version__}: pip install -r requirements.txt (or scripts/install-deps.sh)")


def outside_dispatch_modes() -> Any:
    """A guard under which an op call skips every Python dispatch mode, such as
    the fake tensor mode torch.compile plans under (which would hash each list
    argument of an op before running it)."""
    return torch._C._DisableTorchDispatch()

import torch.fx  # noqa: E402

from torch._functorch.aot_autograd import aot_function, make_boxed_func
from torch._functorch.partitioners import default_partition

# Names of random ATen ops, added to the ops' `nondeterministic_seeded` tags
# (which changes nothing for a correctly tagged op).
_RANDOM_EXACT = {"bernoulli", "bernoulli_", "native_dropout", "multinomial", "randperm", "uniform_",
                 "exponential_", "dropout", "dropout_", "feature_dropout", "alpha_dropout",
                 "feature_alpha_dropout", "_fused_dropout", "cauchy_", "geometric_", "log_normal_",
                 "random_", "poisson", "rrelu_with_noise", "_standard_gamma", "normal_functional"}
_RANDOM_PREFIXES = ("rand", "normal")  # rand, rand_like, randn, randn_like, randint*, normal, normal_


def functional_call(module: torch.nn.Module, tensors: dict[str, torch.Tensor], args: tuple) -> Any:
    """module(*args) with its parameters and buffers replaced by `tensors`."""
    return torch.func.functional_call(module, tensors, args, tie_weights=False)


def partition(joint_module: torch.fx.GraphModule, joint_inputs: Any, kwargs: dict) -> Any:
    """Calls the default partitioner with what AOTAutograd gave our hook."""
    return default_partition(joint_module, joint_inputs, **kwargs)


def num_fwd_outputs(joint_module: torch.fx.GraphModule, kwargs: dict) -> int:
    """How many of the joint graph's outputs belong to the forward: AOTAutograd
    passes it to the partitioner (mutated inputs' new values, then the user's
    outputs, then bases of aliased outputs)."""
    return int(kwargs["num_fwd_outputs"])


def split_joint_inputs(joint_inputs: Any) -> tuple[list, list]:
    """(primals, tangents) as AOTAutograd hands them to the partitioner: fake tensors."""
    primals, tangents = joint_inputs
    return list(primals), list(tangents)


def primals_match(primals: Sequence[torch.Tensor], flat: Sequence[torch.Tensor]) -> bool:
    """Whether AOTAutograd's primals (fake tensors) are `flat`, in our order:
    the same dtype and shape, one by one."""
    if len(primals) != len(flat):
        return False
    return all(p.dtype == f.dtype and tuple(p.shape) == tuple(f.shape) for p, f in zip(primals, flat))


def run_fx(interpreter: torch.fx.Interpreter, flat_inputs: Sequence[Any]) -> list:
    """Runs a joint graph on flat inputs; returns its flat output list."""
    return list(interpreter.run(*flat_inputs, enable_io_processing=False))


def storage_ptr(t: torch.Tensor) -> int:
    """The address of a tensor's storage (0 for an empty one)."""
    st = t.untyped_storage()
    return st.data_ptr() if st.nbytes() else 0


def op_tags(op: torch._ops.OpOverload) -> set[str]:
    """`torch.Tag` names of an OpOverload."""
    return {getattr(t, "name", str(t).split(".")[-1]) for t in getattr(op, "tags", ())}


def is_random(op: torch._ops.OpOverload) -> bool:
    name = op._schema.name.split("::")[-1]
    return ("nondeterministic_seeded" in op_tags(op) or name in _RANDOM_EXACT
            or name.startswith(_RANDOM_PREFIXES))


@contextmanager
def module_scopes(root: torch.nn.Module) -> Iterator[None]:
    """While tracing, every node made inside a module's forward gets that
    module's path in meta["nn_module_stack"] (forward hooks keep the stack in
    torch.fx.traceback's current meta, which make_fx copies into each node
    while node meta is preserved; backward nodes get the forward op's seq_nr)."""
    import torch.fx.traceback as fxt
    paths = {id(m): (name, type(m)) for name, m in root.named_modules(remove_duplicate=False)}
    stack: list[tuple[int, tuple]] = []

    def publish() -> None:
        fxt.current_meta["nn_module_stack"] = {path: (path, ty) for _, (path, ty) in stack}

    def pre(module: torch.nn.Module, args: Any) -> None:
        if id(module) in paths:
            stack.append((id(module), paths[id(module)]))
            publish()

    def post(module: torch.nn.Module, args: Any, out: Any) -> None:
        if stack and stack[-1][0] == id(module):
            stack.pop()
            publish()

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
             torch.nn.modules.module.register_module_forward_hook(post)]
    try:
        with fxt.preserve_node_meta():
            yield
    finally:
        for h in hooks:
            h.remove()


@contextmanager
def real_tensors_as_constants() -> Iterator[None]:
    """AOTAutograd traces with fake tensors and refuses real ones that the step
    closes over (a loss's class weights, a plain tensor attribute, torch.tensor(...)
    in forward). With allow_non_fake_inputs on the fake mode AOTAutograd makes,
    they become graph constants."""
    import importlib
    aa = importlib.import_module("torch._functorch.aot_autograd")
    original = getattr(aa, "construct_fake_mode", None)
    if original is None:
        yield
        return

    def construct_fake_mode(*args: Any, **kwargs: Any) -> Any:
        fake_mode, shape_env = original(*args, **kwargs)
        fake_mode.allow_non_fake_inputs = True
        return fake_mode, shape_env

    aa.construct_fake_mode = construct_fake_mode
    try:
        yield
    finally:
        aa.construct_fake_mode = original


@contextmanager
def no_anomaly_warning() -> Iterator[None]:
    """AOTAutograd traces the backward in anomaly mode (for its nodes' stack
    traces), whose UserWarning "Error detected in XBackward0. Traceback of
    forward call that caused the error:" comes with an empty traceback when
    the backward fails: the error raised says it all, so the warning is left out."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Error detected in .* Traceback of forward call",
                                category=UserWarning)
        yield


# The recurrent layers' ops (nn.LSTM, GRU, RNN), which torch decomposes in
# Python while tracing (torch/_decomp/decompositions.py: one cell per time
# step, or oneDNN's inference-only kernel), where eager PyTorch runs their C++
# composite: cuDNN's _cudnn_rnn on CUDA, oneDNN's mkldnn_rnn_layer for an LSTM
# on the CPU (a GRU or RNN on the CPU runs cell by cell in eager too).
_RECURRENT = [getattr(getattr(torch.ops.aten, op), form)
              for op in ("lstm", "gru", "rnn_tanh", "rnn_relu") for form in ("input", "data")]
FUSED_RECURRENT = ("mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn")  # ATen names of the fused kernels
# Kernels that keep what their backward reads only under grad mode (oneDNN's
# RNN workspace): run with grad mode on and autograd below (GRAD_MODE_OPS in src/kernels/aten.cpp).
GRAD_MODE_OPS = ("aten::mkldnn_rnn_layer",)


@contextmanager
def eager_recurrent() -> Iterator[None]:
    """While tracing, the recurrent ops run their C++ composite, as eager
    PyTorch does, so the graph holds the fused kernel eager runs (one node per
    layer and direction, and its backward), not a cell per time step: the
    Python decompositions are taken off their dispatch keys, and put back."""
    from torch._C import DispatchKey
    keys = (DispatchKey.CompositeImplicitAutograd, DispatchKey.Autograd)
    taken = [(op, k, op.py_kernels.pop(k)) for op in _RECURRENT for k in keys if k in op.py_kernels]
    for op in _RECURRENT:
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, k, fn in taken:
            op.py_kernels[k] = fn
        for op in _RECURRENT:
            op._dispatch_cache.clear()


def needs_grad_mode(gm: torch.fx.GraphModule) -> bool:
    """Whether a graph holds an op of GRAD_MODE_OPS."""
    return any(isinstance(n.target, torch._ops.OpOverload) and n.target._schema.name in GRAD_MODE_OPS
               for n in gm.graph.nodes)


@contextmanager
def grad_mode_kernels(on: bool = True) -> Iterator[None]:
    """Grad mode on with autograd below (nothing recorded), for a real run of a
    graph whose kernels keep their backward's workspace only under grad mode."""
    if not on:
        yield
        return
    with torch.enable_grad(), torch._C._AutoDispatchBelowAutograd():
        yield


@contextmanager
def compiling() -> Iterator[None]:
    """torch.compiler.is_compiling() true while tracing, as torch.export's
    non-strict tracing sets it: libraries then take their traceable paths
    (Hugging Face's masks skip the data-dependent `.all()` that decides
    whether a padding mask may be dropped)."""
    compiler = torch.compiler
    if not hasattr(compiler, "_is_compiling_flag"):  # an older torch: nothing to set
        yield
        return
    old = compiler._is_compiling_flag
    compiler._is_compiling_flag = True
    try:
        yield
    finally:
        compiler._is_compiling_flag = old


_ROOT = re.compile(r"^(L\['[^']*'\]|L__self__|L__[a-z_]+__)\.?")
_INDEX = re.compile(r"\[\s*'?\"?([A-Za-z0-9_]+)'?\"?\s*\]")


def module_path(node: torch.fx.Node, wrapper_attr: str = "") -> Optional[str]:
    """The module path of the innermost entry of a node's nn_module_stack, as
    the user's model names it ("layers.3.mlp.act_fn"): Dynamo's root
    (L['self'], L__self__) dropped, indices written with dots, and
    `wrapper_attr.` stripped; "" for the root module itself (or the capture's
    wrapper and its loss function), None without a stack."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return None
    path = list(stack.values())[-1]
    path = str(path[0] if isinstance(path, (tuple, list)) else path)
    path = _INDEX.sub(r".\1", _ROOT.sub("", path, count=1)).strip(".")
    if wrapper_attr and path == wrapper_attr:
        return ""
    if wrapper_attr and path.startswith(wrapper_attr + "."):
        return path[len(wrapper_attr) + 1:]
    return path


def scopes(gm: torch.fx.GraphModule, wrapper_attr: str) -> dict[torch.fx.Node, str]:
    """Each node's module path (module_path), or, for a backward node without
    one, that of the forward node whose autograd node it differentiates (same
    seq_nr); a path outside the model (the capture wrapper, the loss
    function) gives ""."""
    def path_of(node: torch.fx.Node) -> Optional[str]:
        return module_path(node, wrapper_attr)

    by_seq: dict[int, str] = {}
    out: dict[torch.fx.Node, str] = {}
    for n in gm.graph.nodes:
        p = path_of(n)
        if p is not None:
            out[n] = p
            if "seq_nr" in n.meta:
                by_seq.setdefault(n.meta["seq_nr"], p)
    for n in gm.graph.nodes:
        if not out.get(n) and n.meta.get("seq_nr") in by_seq:
            out[n] = by_seq[n.meta["seq_nr"]]
    return out


# Functional ops whose outputs are new values of some arguments:
# {schema name: {output position: argument position}}.
_FUNCTIONAL_UPDATES = {
    "aten::_native_batch_norm_legit_functional": {3: 3, 4: 4},
}
# Out-of-place ops that functionalisation makes of `buffer.op_(...)`: the
# first argument is the old value of the buffer.
_FUNCTIONAL_OF_INPLACE = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::copy",
                          "aten::fill", "aten::zero", "aten::lerp", "aten::addcmul", "aten::addcdiv",
                          "aten::clamp", "aten::_to_copy"}

def _made_from(node: Any, ph: torch.fx.Node) -> bool:
    """`node` is the functional form of a chain of in-place ops on `ph`:
    `ph.mul_(0.9).add_(m)` becomes add(mul(ph, 0.9), m), each op's first
    argument the value before it, and the last one's result the new value."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and node.args:
        if node.args[0] is ph:
            return True
        node = node.args[0]
    return False


def _owner(key: Any) -> str:
    """"buffer ema of module block.norm" for a buffer's qualified name."""
    module, _, name = str(key).rpartition(".")
    return f"buffer {name} of {f'module {module}' if module else 'the model'}"


def match_buffer_updates(fwd_outputs: Sequence[Optional[torch.fx.Node]], mutated: Sequence[int],
                         placeholders: Sequence[torch.fx.Node], keys: Sequence[Any],
                         fail: Callable[[str], Exception]) -> list[tuple[int, torch.fx.Node]]:
    """Which forward output holds the new value of which mutated primal.

    Method: AOTAutograd puts the new values of the mutated inputs first among
    the forward outputs, in input order. `mutated` (primal positions, sorted)
    is found from the real run: the primals whose version counter moved while
    the compiled step ran its epilogue (copy_ back into the inputs), minus
    those a node of the graph writes itself. Each pairing is then confirmed
    from the graph where the producer says which input it updates:
    `_native_batch_norm_legit_functional` outputs 3 and 4 are the new
    running_mean and running_var of its arguments 3 and 4, and the functional
    form of an in-place op (`add(num_batches_tracked, 1)`) takes the old value
    as its first argument, and a chain of them the value before (_made_from).
    `keys` name the primals. The caller also checks dtype and shape.
    """
    pairs = []
    if len(mutated) > len(fwd_outputs) - 1:
        raise fail(f"{len(mutated)} buffers change but the graph returns only {len(fwd_outputs) - 1} "
                   "new values besides the loss")
    for k, p in enumerate(mutated):
        out = fwd_outputs[k]
        ph = placeholders[p]
        if not isinstance(out, torch.fx.Node) or out.op != "call_function":
            raise fail(f"the new value of {_owner(keys[p])} is not computed by a node")
        src, pos = out, None
        if out.target is operator.getitem:
            src, pos = out.args[0], out.args[1]
        if isinstance(src.target, torch._ops.OpOverload):
            name = src.target._schema.name
            if name in _FUNCTIONAL_UPDATES:
                arg = _FUNCTIONAL_UPDATES[name].get(pos)
                if arg is None or src.args[arg] is not ph:
                    raise fail(f"output {k} ({out.name}) does not update {ph.name}")
            elif name in _FUNCTIONAL_OF_INPLACE and pos is None and not _made_from(src, ph):
                raise fail(f"{_owner(keys[p])}: its new value, output {k} ({out.name}), is not its old value "
                           "changed by in-place ops; write the update as one in-place op on the buffer, e.g. "
                           "self.buffer.copy_(new_value) under torch.no_grad()")
        pairs.append((p, out))
    return pairs


def tangent_outputs(requires_grad: Sequence[bool], n_tangents: int) -> Optional[list[int]]:
    """Which module output each tangent of the joint graph belongs to:
    AOTAutograd makes one for each output that requires grad. None if the
    count does not fit that rule."""
    with_grad = [i for i, r in enumerate(requires_grad) if r]
    return with_grad if len(with_grad) == n_tangents else None


def name_backend(name: str, entry_point: str) -> None:
    """`name` known to torch.compile's backend registry as an entry point of
    the group torch_dynamo_backends, as an installed distribution's is, which
    torch loads at the first compile that names it; unless the name is known.
    (Torch discovers installed entry points only at such a compile, and sets
    the same one then.)"""
    from importlib.metadata import EntryPoint
    from torch._dynamo.backends import registry
    if name not in registry._BACKENDS and name not in registry._COMPILER_FNS:
        registry._BACKENDS[name] = EntryPoint(name=name, value=entry_point, group="torch_dynamo_backends")


def autocast_state() -> tuple:
    """Whether autocast is on, and at which dtype, for CPU and CUDA."""
    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda"))


@contextmanager
def no_autocast() -> Iterator[None]:
    """Autocast off on CPU and CUDA: a graph captured under autocast holds its casts as nodes."""
    with torch.autocast("cpu", enabled=False):
        if torch.cuda.is_available():
            with torch.autocast("cuda", enabled=False):
                yield
        else:
            yield
