# The chunked vocabulary loss on the compiled route (docs/python.md, "The
# chunked loss"): a language model's last linear layer and its cross-entropy,
# found in the graph Dynamo hands the backend, become one operator that never
# holds the whole batch × sequence × vocabulary logits.
#
# The operator, mutwo::linear_cross_entropy, walks the rows in chunks. For each
# chunk it makes the logits (fp32 where the graph upcasts them), their
# log-sum-exp and the loss, and at once the gradient of the loss with respect
# to the chunk's logits, which it spends right away on the gradients of the
# hidden states and of the weight. The backward then only scales those by the
# loss's incoming gradient. No FLOP is added: the two gradient matmuls move
# from the backward into the forward. What is held from the forward to the
# backward is the hidden states' gradient and the weight's, instead of the
# logits; at its peak the operator holds a chunk's logits in two forms and
# the weight's fp32 gradient (`workspace_bytes`, measured in its test).
#
# The CLI's executor chunks the same loss its own way (docs/planners.md, "The
# vocabulary chunk: choose_chunks"); this is a torch operator, which Inductor runs as an
# extern kernel.
from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx as fx
import torch.nn.functional as F

from mutwo.compiled import _mincut

# Between the linear layer and the cross-entropy, the ops that only reshape or
# upcast its output (Dynamo's names: methods and functions).
_PASS_METHODS = {"reshape", "view", "flatten", "float", "contiguous"}
_PASS_FUNCTIONS = {torch.reshape, torch.flatten}


# -- the operator
def _chunks(h: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor,
            ignore_index: int, mean: bool, rows: int, upcast: bool,
            compute: Optional[torch.dtype]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    # Eleven kernels a chunk: the operator runs eagerly, chunk by chunk, so
    # what does not depend on the chunk (casts, the rows' weights in the
    # mean, the clamped targets) is made once, before the loop.
    n = h.shape[0]
    w = weight if compute is None else weight.to(compute)  # autocast's copy, as its linear makes one
    b = bias if compute is None or bias is None else bias.to(compute)
    hs = h if compute is None else h.to(compute)
    valid = target != ignore_index
    count = valid.sum().clamp(min=1).to(torch.float32) if mean else torch.ones((), device=h.device)
    scale = valid.to(torch.float32) / count  # d loss / d (each row's loss)
    y = target.clamp(min=0).unsqueeze(1)
    soft = torch.float32 if upcast else torch.result_type(hs, w)  # the dtype cross-entropy runs in
    minus_one = torch.full((min(rows, n), 1), -1.0, dtype=soft, device=h.device)
    picked = torch.empty(n, dtype=soft, device=h.device)  # each row's log-probability of its target
    grad_h = torch.empty_like(h)
    grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device)
    for start in range(0, n, rows):  # each chunk's temporaries freed before the next chunk's (workspace_bytes)
        end = min(start + rows, n)
        hc, yc = hs[start:end], y[start:end]
        z = F.linear(hc, w, b)
        z = z.to(soft)  # the upcast, the chunk's logits in the compute dtype freed
        logp = torch.log_softmax(z, dim=-1)
        del z
        torch.gather(logp, 1, yc, out=picked[start:end].unsqueeze(1))
        g = logp.exp_()  # softmax, in the log-probabilities' own memory
        g.scatter_add_(1, yc, minus_one[:end - start])  # less the target's one-hot
        g = g.mul_(scale[start:end].to(soft).unsqueeze(1)).to(w.dtype)
        del logp
        if grad_h.dtype == g.dtype:
            torch.mm(g, w, out=grad_h[start:end])
        else:
            grad_h[start:end] = g @ w
        grad_w += g.t() @ hc
        if bias is not None:
            grad_b += g.sum(0, dtype=torch.float32)
        del g
    loss = -(picked.float() * valid).sum()
    out_dtype = torch.float32 if upcast else h.dtype
    return (loss / count).to(out_dtype), grad_h, grad_w.to(weight.dtype), grad_b.to(weight.dtype)


@torch.library.custom_op("mutwo::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(h: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor,
                         ignore_index: int, mean: bool, rows: int, upcast: bool,
                         compute: Optional[torch.dtype]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """cross_entropy(linear(h, weight, bias), target), `rows` rows at a time,
    the linear in `compute` (autocast's dtype) when given; returns (loss,
    d loss/d h, d loss/d weight, d loss/d bias), each in its input's dtype."""
    return _chunks(h, weight, bias, target, ignore_index, mean, rows, upcast, compute)


@linear_cross_entropy.register_fake
def _(h: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor,
      ignore_index: int, mean: bool, rows: int, upcast: bool, compute: Optional[torch.dtype]) -> tuple[torch.Tensor, ...]:
    loss = h.new_empty((), dtype=torch.float32 if upcast else h.dtype)
    return loss, torch.empty_like(h), torch.empty_like(weight), weight.new_empty(weight.shape[0])


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    ctx.save_for_backward(*output[1:])
    ctx.has_bias = inputs[2] is not None
    ctx.mark_non_differentiable(*output[1:])


def _backward(ctx: Any, grad: torch.Tensor, *_: Any) -> tuple:
    grad_h, grad_w, grad_b = ctx.saved_tensors
    return (grad_h * grad, grad_w * grad, grad_b * grad if ctx.has_bias else None, None, None, None, None, None, None)


linear_cross_entropy.register_autograd(_backward, setup_context=_setup)
OP = torch.ops.mutwo.linear_cross_entropy.default


def chunk_rows(rows: int, vocab: int, dim: int) -> int:
    """Rows per chunk: a chunk's logits no larger than the hidden states'
    (rows × dim), as Liger's fused linear cross-entropy sizes them."""
    return max(1, math.ceil(rows / max(1, math.ceil(vocab / dim))))


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def workspace_bytes(node: fx.Node) -> int:
    """What the operator holds at its peak beyond its outputs, as _chunks
    allocates (tests/python/test_loss_op.py measures it on the CPU): its casts
    of the weight and the hidden states to the compute dtype, the fp32
    gradient accumulators, the rows' small vectors, and the largest of a
    chunk's moments: the logits and their upcast, the upcast and its
    log-softmax, the softmax and its cast, that cast and one gradient
    matmul's output (and, on the CPU, that output cast to fp32)."""
    if node.target is not OP:
        return 0
    h, weight = (a.meta["val"] for a in node.args[:2])
    bias, rows, upcast, compute = node.args[2], node.args[6], node.args[7], node.args[8]
    n, dim, vocab = h.shape[0], h.shape[1], weight.shape[0]
    sc = _size(compute) if compute is not None else weight.element_size()  # the matmuls' dtype
    ss = 4 if upcast else _size(torch.promote_types(compute or h.dtype, compute or weight.dtype))
    b = bias.meta["val"] if bias is not None else None
    copies = sum(t.numel() * sc for t in (weight, h, b) if t is not None and compute not in (None, t.dtype))
    small = n * (1 + 4 + 8 + ss) + min(rows, n) * ss  # valid, scale, clamped targets, picked; minus_one
    acc_w, acc_b = weight.numel() * 4, vocab * 4
    logits = min(rows, n) * vocab
    first = max(logits * (sc + ss), 2 * logits * ss)  # the upcast beside the logits; it and its log-softmax
    cast = logits * (ss + sc) if ss != sc else logits * ss
    # On the CPU, adding the weight's gradient of a chunk into the fp32
    # accumulator first casts it into a temporary (TensorIterator casts CPU
    # inputs ahead; CUDA's kernels cast as they read).
    promote = weight.numel() * 4 if h.device.type == "cpu" and sc != 4 else 0
    matmul = logits * sc + max(weight.numel() * sc + promote,
                               min(rows, n) * dim * sc if h.dtype != (compute or weight.dtype) else 0,
                               acc_b if bias is not None else 0)
    new_w = weight.numel() * weight.element_size() if weight.dtype != torch.float32 else 0
    new_b = vocab * weight.element_size() if weight.dtype != torch.float32 else 0
    during = copies + small + acc_w + acc_b + max(first, cast, matmul)
    end = copies + small + acc_w + acc_b + new_w + new_b
    outputs = (new_w or acc_w) + (new_b or acc_b)  # the gradients of the weight and bias the operator returns
    return max(during, end) - outputs


def pin(joint: fx.GraphModule) -> int:
    """Marks the operator MUST_SAVE in the joint graph: its gradients are
    saved, never made again by running the whole loss in the backward (which
    min-cut, seeing an operator whose inputs the backward holds anyway, would
    otherwise choose). Returns how many were marked."""
    return _mincut.pin(joint, lambda n: n.target is OP)


# -- the rewrite
@dataclass
class Site:
    """A linear layer whose output only a cross-entropy reads."""
    linear: fx.Node
    loss: fx.Node
    rows: int  # of the logits
    vocab: int
    dim: int
    upcast: bool
    compute: Optional[torch.dtype]  # autocast's dtype at the linear layer, if on


def _val(n: Any) -> Optional[torch.Tensor]:
    v = n.meta.get("example_value") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _is_linear(n: fx.Node) -> bool:
    return n.op == "call_function" and n.target in (F.linear, torch._C._nn.linear)


def _passes(n: fx.Node) -> bool:
    if n.op == "call_method":
        return n.target in _PASS_METHODS or (n.target == "to" and len(n.args) == 2 and n.args[1] == torch.float32
                                             and not n.kwargs)
    return n.op == "call_function" and n.target in _PASS_FUNCTIONS


def ambient_autocast(device: str) -> Optional[torch.dtype]:
    """The dtype of the autocast region the graph is compiled in (entered
    outside torch.compile, so not in the graph), or None. The compiled code
    runs with autocast off, its casts traced in; the operator must make its
    own."""
    kind = torch.device(device).type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None


def find(gm: fx.GraphModule, ambient: Optional[torch.dtype] = None) -> Optional[Site]:
    """The graph's vocabulary loss, if it has one the operator computes the
    same: cross_entropy(x, y) with no class weights or label smoothing, x 2-D
    and reached from a linear layer only by reshapes and an upcast, the
    linear's output read by nothing else. `ambient`: the autocast dtype the
    graph runs under from outside (ambient_autocast)."""
    autocast: list[Optional[torch.dtype]] = [ambient]  # the open autocast regions, innermost last
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.amp.autocast_mode._enter_autocast:
            enabled = n.args[2] if len(n.args) > 2 else True
            autocast.append(n.args[1] if enabled else None)
        elif n.op == "call_function" and n.target is torch.amp.autocast_mode._exit_autocast:
            autocast.pop()
        elif n.op == "call_function" and n.target is F.cross_entropy:
            site = _site(n, autocast[-1])
            if site is not None:
                return site
    return None


def _arguments(ce: fx.Node) -> dict:
    args = dict(zip(("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
                     "label_smoothing"), ce.args))
    args.update(ce.kwargs)
    return args


def _site(ce: fx.Node, compute: Optional[torch.dtype]) -> Optional[Site]:
    args = _arguments(ce)
    if args.get("weight") is not None or args.get("label_smoothing", 0.0) or args.get("size_average") is not None \
            or args.get("reduce") is not None or args.get("reduction", "mean") not in ("mean", "sum") \
            or not isinstance(args.get("ignore_index", -100), int):
        return None
    x, upcast = args["input"], False
    while isinstance(x, fx.Node) and _passes(x) and len(x.users) == 1:
        upcast = upcast or x.target in ("float", "to")
        x = x.args[0]
    if not isinstance(x, fx.Node) or not _is_linear(x) or len(x.users) != 1:
        return None
    logits, target, h, out = _val(args["input"]), _val(args["target"]), _val(x.args[0]), _val(x)
    if logits is None or target is None or h is None or out is None or logits.dim() != 2 or target.dim() != 1:
        return None
    rows, vocab = logits.shape
    dim = h.shape[-1]
    if not all(isinstance(s, int) for s in (rows, vocab, dim)) or target.shape[0] != rows:
        return None
    # Under autocast, cross_entropy runs in fp32 (autocast's fp32 list).
    return Site(x, ce, rows, vocab, dim, upcast or compute is not None or logits.dtype != out.dtype, compute)


def worth_it(site: Site, itemsize: int) -> bool:
    """Whether the operator holds less than the logits it replaces: the
    logits (and their upcast) against the hidden states' and weight's
    gradients it holds instead (`itemsize`: the weight's element size)."""
    size = itemsize if site.compute is None else _size(site.compute)
    logits = site.rows * site.vocab * (size + (4 if site.upcast else 0))
    held = (site.rows * site.dim + site.vocab * site.dim) * itemsize
    accumulator = site.vocab * site.dim * 4 if itemsize < 4 else 0  # the weight's gradient summed in fp32
    return logits > held + accumulator


def rewrite(gm: fx.GraphModule, site: Site) -> int:
    """Replaces the site by the operator, in place; returns its rows per chunk."""
    g = gm.graph
    ce = site.loss
    args = _arguments(ce)
    h, weight = site.linear.args[0], site.linear.args[1]
    bias = site.linear.args[2] if len(site.linear.args) > 2 else site.linear.kwargs.get("bias")
    rows = chunk_rows(site.rows, site.vocab, site.dim)
    with g.inserting_before(ce):
        h2 = g.call_method("reshape", (h, -1, site.dim))
        out = g.call_function(OP, (h2, weight, bias, args["target"], args.get("ignore_index", -100),
                                   args.get("reduction", "mean") == "mean", rows, site.upcast, site.compute))
        loss = g.call_function(operator.getitem, (out, 0))
    ce.replace_all_uses_with(loss)
    x = args["input"]
    g.erase_node(ce)
    while isinstance(x, fx.Node) and not x.users and x.op != "placeholder":  # the reshapes and the linear
        before = x.args[0] if x.args else None
        g.erase_node(x)
        x = before
    g.lint()
    gm.recompile()
    return rows
