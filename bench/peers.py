"""The PyTorch peers mutwo is measured against, on the GPU machine.

One training step (forward, loss, backward, SGD with momentum 0.9) of the same
models mutwo builds, in PyTorch eager mode, and with torch.utils.checkpoint
around every block ("ckpt", what users do today), and torch.compile ("compile",
or "compile:B" with the partitioner's activation_memory_budget B in [0, 1],
the peer of a memory budget). Offloading peers (issue 16): "offload", every
block's forward under torch.autograd.graph.save_on_cpu(pin_memory=True), its
saved tensors kept in pinned host memory; "sac-offload", every block
checkpointed with a selective policy that offloads the matmul and convolution
outputs to the CPU and recomputes the rest (torch.utils.checkpoint's
CheckpointPolicy offload value, where this torch has one; else the line
carries an error saying so). Prints one JSON line per
configuration: peak = torch.cuda.max_memory_allocated during the measured
steps, step_ms = median of CUDA-event-timed steps after 2 warm-up steps.
Written after ../shared/bench/torch_peers.py, so the comparison can be rerun
from this repository alone:
  python3 bench/peers.py --models resnet-152,bert-base --batches 32 --variants eager,ckpt
With --trace, also prints where one measured step spends its GPU time, by op
(torch.profiler), to set beside `mutwo profile`'s nodes.csv.
"""
import argparse, json, os, time
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from blocks import blocks, replace


class Ckpt(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *a):
        return checkpoint(self.m, *a, use_reentrant=False)


class Offload(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *a, **k):
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            return self.m(*a, **k)


def offload_policy():
    """The CheckpointPolicy value that offloads to the CPU, or None."""
    from torch.utils import checkpoint as cp
    policy = getattr(cp, "CheckpointPolicy", None)
    for name in ("PREFER_CPU_OFFLOAD", "MUST_CPU_OFFLOAD"):
        if policy is not None and hasattr(policy, name):
            return getattr(policy, name)
    return None


class SacOffload(torch.nn.Module):
    HEAVY = {"mm", "addmm", "bmm", "convolution", "_scaled_dot_product_efficient_attention"}

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *a, **k):
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
        off = offload_policy()

        def policy(ctx, op, *args, **kwargs):
            name = str(op).split(".")[-2] if "." in str(op) else str(op)
            return off if name in SacOffload.HEAVY else CheckpointPolicy.PREFER_RECOMPUTE
        return checkpoint(self.m, *a, use_reentrant=False,
                          context_fn=lambda: create_selective_checkpoint_contexts(policy), **k)


def wrap_blocks(model, wrapper):
    """Every block (bench/blocks.py, mutwo's definition) wrapped by `wrapper`."""
    for path, m in blocks(model):
        replace(model, path, wrapper(m))


def build(name, batch):
    fam, size = name.split("-", 1)
    if fam == "resnet":
        import torchvision
        m = getattr(torchvision.models, "resnet" + size)(weights=None)
        x, y = torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,))
        def ckpt(model):
            for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
                for i, blk in enumerate(layer):
                    layer[i] = Ckpt(blk)
        return m, (x, y), lambda model, x, y: F.cross_entropy(model(x), y), ckpt
    if fam == "bert":
        from transformers import BertConfig, BertForMaskedLM
        cfg = {"base": BertConfig(),
               "large": BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                   intermediate_size=4096)}[size]
        m = BertForMaskedLM._from_config(cfg, attn_implementation="eager")
        ids = torch.randint(0, cfg.vocab_size, (batch, 128))
        def ckpt(model):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return m, (ids,), lambda model, ids: model(input_ids=ids, labels=ids).loss, ckpt
    if fam == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = {"small": GPT2Config(), "medium": GPT2Config(n_embd=1024, n_layer=24, n_head=16)}[size]
        m = GPT2LMHeadModel._from_config(cfg, attn_implementation="eager")
        ids = torch.randint(0, cfg.vocab_size, (batch, 1024))
        def ckpt(model):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return m, (ids,), lambda model, ids: model(input_ids=ids, labels=ids).loss, ckpt
    raise SystemExit("unknown model " + name)


def trace(step, label):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step(); torch.cuda.synchronize()
    print(f"# {label}: one step, top ops by self CUDA time", flush=True)
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=48), flush=True)


def sgd_step(fn, model, inputs, opt):
    """One training step: loss, backward, optimizer step, gradients dropped."""
    def step():
        loss = fn(model, *inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def timed_steps(step, steps):
    """Peak statistics reset, then `steps` CUDA-event-timed steps: their sorted times (ms) and the last loss."""
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); loss = step(); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times), loss


def measure(name, batch, variant, steps, show_trace=False):
    torch.manual_seed(0)
    m, inputs, loss_fn, ckpt = build(name, batch)
    if variant == "ckpt":
        ckpt(m)
    elif variant == "offload":
        wrap_blocks(m, Offload)
    elif variant == "sac-offload":
        if offload_policy() is None:
            return dict(model=name, batch=batch, system="pytorch", variant=variant,
                        error="this torch's CheckpointPolicy has no CPU offload value")
        wrap_blocks(m, SacOffload)
    dev = torch.device("cuda")
    m = m.to(dev).train()
    inputs = tuple(t.to(dev) for t in inputs)
    opt = torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9)
    fn = loss_fn
    if variant.startswith("compile"):  # torch.compile; "compile:B" with activation_memory_budget B
        import torch._dynamo as dynamo
        import torch._functorch.config as fc
        dynamo.reset()
        fc.activation_memory_budget = float(variant.split(":")[1]) if ":" in variant else 1.0
        fn = torch.compile(loss_fn)

    step = sgd_step(fn, m, inputs, opt)
    step(); step()
    torch.cuda.synchronize()
    if show_trace:
        trace(step, f"{name} batch {batch} {variant}")
    times, loss = timed_steps(step, steps)
    return dict(model=name, batch=batch, system="pytorch", variant=variant,
                peak_bytes=torch.cuda.max_memory_allocated(), step_ms=times[len(times) // 2],
                loss=float(loss.detach()), card=torch.cuda.get_device_name(), torch=torch.__version__,
                date=time.strftime("%Y-%m-%d"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet-152,bert-base")
    ap.add_argument("--batches", default="32")
    ap.add_argument("--variants", default="eager,ckpt")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--trace", action="store_true", help="print a per-op GPU time table per configuration")
    a = ap.parse_args()
    for model in a.models.split(","):
        for b in a.batches.split(","):
            for v in a.variants.split(","):
                try:
                    r = measure(model, int(b), v, a.steps, a.trace)
                except torch.cuda.OutOfMemoryError:
                    r = dict(model=model, batch=int(b), system="pytorch", variant=v, error="out of memory")
                print(json.dumps(r), flush=True)
                torch.cuda.empty_cache()
