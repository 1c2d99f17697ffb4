# What a new user of mutwo.torch.wrap meets first (issue 48, items 5 and 6):
# no budget runs the module as it is; an nn.LSTM stays one fused op per layer
# in the captured graph, trains as eager PyTorch, and a lost fused kernel is
# warned of; report() after an epoch with a short last batch gives every
# shape's plan, the most used first, with the median of its measured steps.
from __future__ import annotations

import contextlib
import csv
import statistics
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mutwo.torch as mt
from mutwo import _compat, capture
from mutwo.capture import CaptureError


class _LM(nn.Module):
    """A small recurrent language model: embedding, two recurrent layers, head."""

    def __init__(self, kind: type = nn.LSTM) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.rnn = kind(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 50)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(self.embed(x))[0])


def _loop(model: nn.Module, run: nn.Module, batches: list) -> tuple[list[float], list[torch.Tensor]]:
    """A plain SGD loop of `run` (the model or its wrap): losses and the parameters after."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in batches:
        loss = F.cross_entropy(run(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()]


def _tokens(batch: int, seq: int, steps: int = 3) -> list:
    g = torch.Generator().manual_seed(1)
    return [(torch.randint(0, 50, (batch, seq), generator=g), torch.randint(0, 50, (batch, seq), generator=g))
            for _ in range(steps)]


def test_no_budget_runs_the_module_as_it_is(monkeypatch, tmp_path) -> None:
    """wrap(model) with no budget captures, profiles and plans nothing."""
    def no_capture(*args, **kwargs):
        raise AssertionError("wrap(model) with no budget captured the step")
    monkeypatch.setattr(mt, "trace", no_capture)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    plain = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    plain.load_state_dict(model.state_dict())
    w = mt.wrap(model)
    for _ in range(3):
        x = torch.randn(5, 8)
        assert torch.equal(w(x), plain(x))
        w(x).sum().backward()
    r = mt.report(w)
    assert r["unplanned"] and r["steps"] == 6 and r["plans"] == 0, r
    assert "runs as it is" in str(r) and 'budget="60%"' in str(r), str(r)
    with pytest.raises(mt.MutwoError, match="no plan to write"):
        mt.report(w, str(tmp_path))
    with pytest.raises(mt.MutwoError, match="with no budget"):
        mt.wrap(model, report=str(tmp_path))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN: eager runs an LSTM cell by cell too")
def test_an_lstm_stays_one_fused_op_per_layer() -> None:
    """The captured step of a two-layer LSTM holds oneDNN's kernel once per
    layer and its backward, as eager runs it: its size does not grow with the
    sequence (before: a cell per time step, 2.1 to 2.4 times slower)."""
    def ops(seq: int) -> list[str]:
        torch.manual_seed(0)
        joint = capture.trace(_LM(), (torch.randint(0, 50, (2, seq)),), None, [])
        return [str(n.target) for n in joint.gm.graph.nodes if n.op == "call_function"]
    short, long_ = ops(4), ops(24)
    assert short.count("aten.mkldnn_rnn_layer.default") == 2, short
    assert short.count("aten.mkldnn_rnn_layer_backward.default") == 2, short
    assert len(short) == len(long_), (len(short), len(long_))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN: eager runs an LSTM cell by cell too")
def test_an_lstm_layer_is_priced_by_its_matmuls(tmp_path) -> None:
    """profile="flops" prices each fused layer by its input and hidden
    matmuls, 2 T B 4H (I + H), twice that for its backward."""
    torch.manual_seed(0)
    model = _LM()
    w = mt.wrap(model, "100%", profile="flops")
    x = torch.randint(0, 50, (4, 12))
    F.cross_entropy(w(x).flatten(0, 1), x.flatten()).backward()
    mt.report(w, str(tmp_path))
    rows = list(csv.DictReader(open(tmp_path / "nodes.csv")))
    forward = [int(r["flops"]) for r in rows if r["op"] == "aten::mkldnn_rnn_layer"]
    backward = [int(r["flops"]) for r in rows if r["op"] == "aten::mkldnn_rnn_layer_backward"]
    steps, hidden = 4 * 12, 32
    assert forward == [2 * steps * 4 * hidden * (16 + hidden), 2 * steps * 4 * hidden * (hidden + hidden)], forward
    assert sorted(backward) == sorted(2 * f for f in forward), backward


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
def test_a_recurrent_model_trains_as_eager(kind: type) -> None:
    """Losses and parameters bit for bit eager PyTorch's, with a plan."""
    torch.manual_seed(0)
    eager_model = _LM(kind)
    torch.manual_seed(0)
    model = _LM(kind)
    batches = _tokens(4, 12)
    eager = _loop(eager_model, eager_model, batches)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fused kernel lost
        planned = _loop(model, mt.wrap(model, "lowest"), batches)
    assert planned[0] == eager[0]
    assert all(torch.equal(a, b) for a, b in zip(planned[1], eager[1]))


def test_a_lost_fused_kernel_warns_and_says_what_it_costs(monkeypatch) -> None:
    """Where the fused kernel cannot be traced (a torch without its fake
    kernel), the capture falls back to torch's decomposition and says so."""
    @contextlib.contextmanager
    def untraceable():
        raise CaptureError("tracing failed: no fake kernel for aten::_cudnn_rnn_backward")
        yield
    monkeypatch.setattr(_compat, "eager_recurrent", untraceable)
    torch.manual_seed(0)
    with pytest.warns(UserWarning) as got:
        joint = capture.trace(_LM(), (torch.randint(0, 50, (2, 6)),), None, [])
    text = str(got[0].message)
    assert "LSTM rnn (" in text and "ops)" in text and "cell by cell" in text and "slower" in text, text
    assert "_cudnn_rnn_backward" in text, text
    assert not any("rnn_layer" in str(n.target) for n in joint.gm.graph.nodes)


def test_report_after_an_epoch_with_a_short_last_batch() -> None:
    """An epoch of 128, 128, 64: the batch-128 plan first, with its 2 steps,
    then the batch-64 one; the step time the median of the steps measured."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    data = torch.utils.data.TensorDataset(torch.randn(320, 64), torch.randint(0, 10, (320,)))
    w = mt.wrap(model, "60%", profile="flops")
    for x, y in torch.utils.data.DataLoader(data, batch_size=128):
        F.cross_entropy(w(x), y).backward()
    r = mt.report(w)
    assert r["inputs"] == "[128, 64]" and r["steps"] == 2 and r["plans"] == 2, r
    assert [s["inputs"] for s in r["shapes"]] == ["[128, 64]", "[64, 64]"], r["shapes"]
    assert [s["steps"] for s in r["shapes"]] == [2, 1] and r["dropped"], r["shapes"]
    session = next(s for s in w._sessions.values() if s.inputs == "[128, 64]")
    times = session.clock.times_ms()
    assert len(times) == 2 and r["measured_steps"] == 2 and r["step_ms"] == statistics.median(times), r
    text = str(r)
    assert "inputs [128, 64]: 2 steps, the most used of 2 input shapes" in text, text
    assert "other input shapes, by use:" in text and "- inputs [64, 64]: 1 step;" in text, text
    assert "the median of 2 steps run" in text and "steps run: 3" in text, text


class _Router(nn.Module):
    """A mixture-of-experts layer: each token to its top-2 experts, chosen by the data."""

    def __init__(self, d: int = 16, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, experts)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, chosen = self.router(x).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == i)
            out = out.index_add(0, token, expert(x[token]) * weight[token, slot, None])
        return out


def test_a_router_names_the_compiled_route_which_trains_it(monkeypatch, tmp_path) -> None:
    """wrap refuses a router (one joint graph cannot hold a shape the data
    decides) naming the compiled route, and that route trains this same model
    with eager's gradients."""
    monkeypatch.setenv("MUTWO_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model, x = _Router(), torch.randn(8, 16)
    with pytest.raises(CaptureError) as e:
        mt.wrap(model, "60%")(x).sum().backward()
    assert "aten::nonzero" in str(e.value) and "trains such a model, this same one" in str(e.value), str(e.value)
    assert "mutwo.torch.backend(budget)" in str(e.value)
    torch.compile(model, backend=mt.backend("lowest"))(x).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    assert all(torch.allclose(a, p.grad, rtol=1e-5, atol=1e-6) for a, p in zip(got, model.parameters()))
