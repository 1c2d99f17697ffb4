# mutwo::linear_cross_entropy, the chunked vocabulary loss of the compiled
# route (python/mutwo/compiled/_loss.py), against PyTorch's cross_entropy(linear(...)):
# the loss and the gradients of the hidden states, weight and bias, for mean
# and sum, ignored targets, a bias, an upcast from bf16, chunks that do not
# divide the rows; PyTorch's opcheck on its registrations; the memory the
# operator holds beyond its outputs, measured on the CPU against the model the
# compiled route's planner prices it with (workspace_bytes); and the rewrite
# finding the loss in a Dynamo graph, or leaving a graph it cannot match.
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mutwo import _ext
from mutwo.compiled import _loss


def _reference(h, w, b, y, reduction, upcast):
    logits = F.linear(h, w, b)
    return F.cross_entropy(logits.float() if upcast else logits, y, reduction=reduction, ignore_index=-100)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype,upcast", [(torch.float32, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("rows", [1, 7, 64])
def test_the_operator_is_cross_entropy_of_linear(reduction: str, bias: bool, dtype: torch.dtype, upcast: bool,
                                                 rows: int) -> None:
    torch.manual_seed(0)
    h = torch.randn(50, 16, dtype=dtype, requires_grad=True)
    w = (torch.randn(300, 16) / 4).to(dtype).requires_grad_()
    b = torch.randn(300, dtype=dtype, requires_grad=True) if bias else None
    y = torch.randint(300, (50,))
    y[::5] = -100
    want = _reference(h, w, b, y, reduction, upcast)
    grads = torch.autograd.grad(want * 3, [t for t in (h, w, b) if t is not None])
    got = _loss.OP(h, w, b, y, -100, reduction == "mean", rows, upcast, None)[0]
    got_grads = torch.autograd.grad(got * 3, [t for t in (h, w, b) if t is not None])
    assert got.dtype == want.dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    for g, r in zip(got_grads, grads):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol * float(r.abs().max()))


def test_opcheck() -> None:
    h, w, y = torch.randn(12, 8, requires_grad=True), torch.randn(40, 8, requires_grad=True), torch.randint(40, (12,))
    torch.library.opcheck(_loss.OP, (h, w, None, y, -100, True, 5, False, None))
    torch.library.opcheck(_loss.OP, (h, w, None, y, -100, False, 5, True, torch.bfloat16))


def test_under_autocast_the_linear_runs_in_its_dtype() -> None:
    """fp32 weights under bf16 autocast: the gradients come back in fp32, as
    autocast's linear gives them, and equal its own within bf16's rounding."""
    torch.manual_seed(0)
    h, w, y = torch.randn(40, 16, requires_grad=True), torch.randn(300, 16, requires_grad=True), torch.randint(300, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = F.cross_entropy(F.linear(h, w), y)
    grads = torch.autograd.grad(want, [h, w])
    got = _loss.OP(h, w, None, y, -100, True, 8, True, torch.bfloat16)[0]
    got_grads = torch.autograd.grad(got, [h, w])
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    for g, r in zip(got_grads, grads):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, r, rtol=2e-2, atol=2e-2 * float(r.abs().max()))


@pytest.mark.parametrize("h_dtype,w_dtype,upcast,compute,bias,rows", [
    (torch.float32, torch.float32, False, None, False, 128),
    (torch.float32, torch.float32, True, None, True, 100),  # chunks that do not divide the rows
    (torch.float32, torch.float32, True, torch.bfloat16, False, 128),  # autocast's copies
    (torch.bfloat16, torch.bfloat16, True, None, True, 128),  # the upcast
    (torch.bfloat16, torch.bfloat16, False, None, False, 128),
    (torch.float16, torch.float32, True, torch.bfloat16, False, 128),  # the hidden states' gradient cast
])
def test_the_operator_holds_what_the_planner_prices(h_dtype: torch.dtype, w_dtype: torch.dtype, upcast: bool,
                                                    compute: torch.dtype, bias: bool, rows: int) -> None:
    """The peak the operator reaches beyond its inputs and outputs, counted
    by mutwo's CPU allocator, equals workspace_bytes within 1%: a chunk's
    temporaries kept into the next chunk, or one the model misses, fails it."""
    torch.manual_seed(0)
    n, dim, vocab = 2048, 256, 8192
    h, w = torch.randn(n, dim, dtype=h_dtype), (torch.randn(vocab, dim) / 16).to(w_dtype)
    b, y = (torch.randn(vocab, dtype=w_dtype) if bias else None), torch.randint(vocab, (n,))
    start, _ = _ext.memory("cpu", True)
    outputs = _loss.OP(h, w, b, y, -100, True, rows, upcast, compute)
    _, peak = _ext.memory("cpu")
    held = peak - start - sum(t.numel() * t.element_size() for t in outputs)
    graph = torch.fx.Graph()
    args = [graph.placeholder(name) for name in ("h", "w", "b")]
    for a, val in zip(args, (h, w, b)):
        a.meta["val"] = val
    node = graph.call_function(_loss.OP, (args[0], args[1], args[2] if bias else None, None, -100, True,
                                          rows, upcast, compute))
    model = _loss.workspace_bytes(node)
    assert abs(held - model) <= 0.01 * model, (held, model)


def _graph(fn, *args) -> torch.fx.GraphModule:
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward
    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*args)
    return seen[0]


def test_the_rewrite_finds_the_loss_and_keeps_its_value() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(32, 2000, bias=False)
    h, y = torch.randn(4, 16, 32), torch.randint(2000, (4, 16))

    def step(h, y):
        logits = head(h)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
    gm = _graph(step, h, y)
    site = _loss.find(gm)
    assert site is not None and (site.rows, site.vocab, site.dim) == (64, 2000, 32) and site.upcast
    assert site.compute is None
    assert _loss.worth_it(site, 4)
    rows = _loss.rewrite(gm, site)
    assert rows == _loss.chunk_rows(64, 2000, 32) == 2  # 64 rows over ceil(2000 / 32) = 63 chunks
    assert not any(n.target is F.cross_entropy for n in gm.graph.nodes)
    torch.testing.assert_close(gm(*_inputs(gm, head, h, y))[0], step(h, y))


def _inputs(gm: torch.fx.GraphModule, head: torch.nn.Module, h: torch.Tensor, y: torch.Tensor) -> list:
    """The graph's placeholders in order: Dynamo lifts the weight to one."""
    by = {"weight": head.weight, "h": h, "y": y}
    return [next(v for k, v in by.items() if k in n.name) for n in gm.graph.nodes if n.op == "placeholder"]


@pytest.mark.parametrize("why", ["smoothing", "logits read twice", "class weights"])
def test_a_loss_it_cannot_match_is_left(why: str) -> None:
    head = torch.nn.Linear(32, 2000, bias=False)
    h, y = torch.randn(64, 32), torch.randint(2000, (64,))

    def step(h, y):
        logits = head(h)
        if why == "smoothing":
            return F.cross_entropy(logits, y, label_smoothing=0.1)
        if why == "class weights":
            return F.cross_entropy(logits, y, weight=torch.ones(2000))
        return F.cross_entropy(logits, y) + logits.mean()
    assert _loss.find(_graph(step, h, y)) is None


def test_the_rewrite_sees_autocast() -> None:
    head = torch.nn.Linear(32, 2000, bias=False)
    h, y = torch.randn(64, 32), torch.randint(2000, (64,))

    def step(h, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(head(h), y)
    gm = _graph(step, h, y)
    site = _loss.find(gm)
    assert site is not None and site.compute == torch.bfloat16 and site.upcast
    _loss.rewrite(gm, site)
    torch.testing.assert_close(gm(*_inputs(gm, head, h, y))[0], step(h, y), rtol=1e-2, atol=1e-2)


def test_the_rewrite_sees_autocast_entered_outside_the_graph() -> None:
    """torch.compile called inside autocast: the graph holds no autocast
    region, and its compiled code runs with autocast off. The operator must
    still compute the linear in bf16, as autocast would (an fp32 matmul here
    was 3x slower than plain compile on an H200)."""
    head = torch.nn.Linear(32, 2000, bias=False)
    h, y = torch.randn(64, 32), torch.randint(2000, (64,))
    gm = _graph(lambda h, y: F.cross_entropy(head(h), y), h, y)
    assert _loss.find(gm).compute is None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ambient = _loss.ambient_autocast("cpu")
    assert ambient == torch.bfloat16 and _loss.ambient_autocast("cpu") is None
    site = _loss.find(gm, ambient)
    assert site is not None and site.compute == torch.bfloat16 and site.upcast
    _loss.rewrite(gm, site)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = F.cross_entropy(head(h), y)
    torch.testing.assert_close(gm(*_inputs(gm, head, h, y))[0], expected, rtol=1e-2, atol=1e-2)
