# The models the PyTorch peers train and mutwo captures (bench/peers.py), in one place:
# - the zoo's, as `mutwo --model` builds them: mlp, resnet-N, bert-base, bert-large,
#   gpt2-small, gpt2-medium (the zoo and sweep benchmarks set them beside mutwo's own);
# - user models whose steps mutwo captures (CAPTURED: vit_b_16, llama, llama1b, decoder12, bert, bert-mini,
#   gpt2, t5, resnet18-32), the LLaMA-style decoder the one tests/ train (python/workloads/llama_decoder.py), at LLaMA's
#   sizes (llama: 12 layers, d=768, seq 1024; llama1b: 16 layers, d=2048, seq 2048, about 1 B
#   parameters) and small enough for a CPU (decoder12: 12 layers, d=64, seq 64, vocab 512);
#   bert-mini (4 layers, d=256, seq 128) and resnet18-32 (torchvision's ResNet-18 on 32x32 images,
#   10 classes) are the many-models benchmark's (issue 51).
# make(name, batch) -> Made: the model on its device in training mode, its inputs, the loss,
# its blocks (bench/blocks.py, mutwo's definition) and how it checkpoints them. fp32, seeded;
# small=True gives tiny captured models for CPU tests.
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from blocks import blocks as blocks_of_model
from configs import CAPTURED, is_captured

ZOO = ("mlp", "resnet-N", "bert-base", "bert-large", "gpt2-small", "gpt2-medium")
HF_ATTENTION = "eager"  # transformers' attention implementation, for every Hugging Face model here


@dataclass
class Made:
    model: nn.Module
    inputs: tuple[torch.Tensor, ...]
    loss_fn: Callable[..., torch.Tensor]  # loss_fn(model, *inputs) -> the scalar loss
    blocks: list[nn.Module]  # what per-block checkpointing, offloading and sharding wrap
    checkpoint: Optional[Callable[[nn.Module], None]] = None  # the model's own per-block checkpointing, if any
    lr: float = 0.01  # SGD's learning rate (momentum 0.9): the zoo's peers always trained at 1e-3


# ---------------------------------------------------------------------------------------------
# Losses: loss_fn(model, *inputs).


def _llm_loss(model: nn.Module, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(ids)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _classify_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def _hf_loss(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=labels).loss


def _hf_self_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


def _hf_masked_loss(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    # An explicit all-ones mask: without one, transformers' causal-mask code looks for packed sequences in
    # position_ids with a data-dependent .all(), which a traced capture cannot follow.
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def _blocks(model: nn.Module) -> list[nn.Module]:
    return [m for _, m in blocks_of_model(model)]


def _hf_model(cls: type, config: object) -> nn.Module:
    try:
        return cls._from_config(config, attn_implementation=HF_ATTENTION)
    except TypeError:  # older transformers
        return cls(config)


def _hf_checkpointing(model: nn.Module) -> None:
    """Hugging Face's own per-layer checkpointing (what users of those models do today)."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


# ---------------------------------------------------------------------------------------------
# The zoo's models, as mutwo's `--model` builds them (src/models).


def _zoo(name: str, batch: int) -> Made:
    fam, _, size = name.partition("-")
    if name == "mlp":  # 784-512-512-10, relu, dropout 0.1 (src/models/mlp.cpp)
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.ReLU(),
                              nn.Dropout(0.1), nn.Linear(512, 10))
        inputs = (torch.randn(batch, 784), torch.randint(0, 10, (batch,)))
        return Made(model, inputs, _classify_loss, _blocks(model), lr=1e-3)
    if fam == "resnet" and size.isdigit():
        import torchvision
        model = getattr(torchvision.models, "resnet" + size)(weights=None)
        inputs = (torch.randn(batch, 3, 224, 224), torch.randint(0, 1000, (batch,)))
        return Made(model, inputs, _classify_loss, _blocks(model), lr=1e-3)  # blocks: the bottlenecks
    if name in ("bert-base", "bert-large"):
        from transformers import BertConfig, BertForMaskedLM
        config = BertConfig() if size == "base" else BertConfig(hidden_size=1024, num_hidden_layers=24,
                                                                 num_attention_heads=16, intermediate_size=4096)
        model = _hf_model(BertForMaskedLM, config)
        inputs = (torch.randint(0, config.vocab_size, (batch, 128)),)
        return Made(model, inputs, _hf_self_loss, _blocks(model), _hf_checkpointing, lr=1e-3)
    if name in ("gpt2-small", "gpt2-medium"):
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config() if size == "small" else GPT2Config(n_embd=1024, n_layer=24, n_head=16)
        model = _hf_model(GPT2LMHeadModel, config)
        inputs = (torch.randint(0, config.vocab_size, (batch, 1024)),)
        return Made(model, inputs, _hf_self_loss, _blocks(model), _hf_checkpointing, lr=1e-3)
    raise ValueError(f"unknown model {name!r}: one of {', '.join(ZOO + CAPTURED)}")


# ---------------------------------------------------------------------------------------------
# User models for captured steps.


def _captured(name: str, batch: int, small: bool) -> Made:
    if name == "vit_b_16":
        import torchvision
        if small:
            model = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=2, num_heads=2,
                                                         hidden_dim=32, mlp_dim=64, num_classes=10)
        else:
            model = torchvision.models.vit_b_16(weights=None)
        size, classes = (32, 10) if small else (224, 1000)
        inputs = (torch.randn(batch, 3, size, size), torch.randint(0, classes, (batch,)))
        # torchvision names its layers encoder_layer_N: no all-digit component, so no block by
        # mutwo's definition (bench/blocks.py); its layers are listed by hand.
        return Made(model, inputs, _classify_loss, list(model.encoder.layers))
    if name in ("llama", "llama1b", "decoder12") or name.startswith("llama1b-"):
        from workloads.llama_decoder import Llama  # python/ (on PYTHONPATH): the decoder tests/ train too
        # vocab, dim, layers, heads, seq; llama1b: 953,223,168 parameters; decoder12: small at any size
        sizes = {"llama": (32000, 768, 12, 12, 1024), "llama1b": (32000, 2048, 16, 16, 2048),
                 "decoder12": (512, 64, 12, 4, 64)}[name.split("-")[0]]
        vocab, dim, layers, heads, seq = (256, 64, 2, 2, 32) if small and name != "decoder12" else sizes
        if name.startswith("llama1b-") and not small:  # llama1b-16k: 16384 tokens
            seq = int(name.split("-")[1][:-1]) * 1024
        hidden = 256 * math.ceil(2 * 4 * dim / 3 / 256)  # LLaMA's SwiGLU width: 2048 for dim 768
        hidden = 176 if name == "decoder12" else hidden
        model = Llama(vocab, dim, layers, heads, hidden, max_seq=seq, sdpa=True, tied=False)
        inputs = (torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq)))
        return Made(model, inputs, _llm_loss, _blocks(model))
    if name == "resnet18-32":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        inputs = (torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,)))
        return Made(model, inputs, _classify_loss, _blocks(model))
    if name in ("bert", "bert-mini"):
        from transformers import BertConfig, BertForMaskedLM
        tiny = dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
        mini = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024)
        config = BertConfig(**(tiny if small else mini if name == "bert-mini" else {}))
        seq = 32 if small else 128
        model = _hf_model(BertForMaskedLM, config)
        inputs = (torch.randint(0, config.vocab_size, (batch, seq)), torch.randint(0, config.vocab_size, (batch, seq)))
        return Made(model, inputs, _hf_loss, _blocks(model))
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        size = dict(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2, n_head=2) if small else {}
        config = GPT2Config(use_cache=False, **size)  # no KV cache in training (checkpoint would update it twice)
        seq = 32 if small else 1024
        model = _hf_model(GPT2LMHeadModel, config)
        ids = torch.randint(0, config.vocab_size, (batch, seq))
        return Made(model, (ids, torch.ones(batch, seq, dtype=torch.int64), ids.clone()), _hf_masked_loss,
                    _blocks(model))
    # t5: t5-small's shape (dropout in both stacks, for random nodes replayed): 6+6 layers, d_model 512, dropout 0.1; 256 source and 64 target tokens.
    from transformers import T5Config, T5ForConditionalGeneration
    size = dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=2) if small else {}
    config = T5Config(dropout_rate=0.1, use_cache=False, decoder_start_token_id=0, pad_token_id=0, **size)
    src, tgt = (32, 8) if small else (256, 64)
    model = _hf_model(T5ForConditionalGeneration, config)
    inputs = (torch.randint(1, config.vocab_size, (batch, src)), torch.randint(1, config.vocab_size, (batch, tgt)))
    return Made(model, inputs, _hf_loss, _blocks(model))


def make(name: str, batch: int, device: str = "cpu", small: bool = False) -> Made:
    """The model `name` (a zoo name or one of CAPTURED) at `batch` on `device`, fp32, training mode, seed 0."""
    torch.manual_seed(0)
    made = _captured(name, batch, small) if is_captured(name) else _zoo(name, batch)
    made.model = made.model.to(device=device, dtype=torch.float32).train()
    made.inputs = tuple(t.to(device) for t in made.inputs)
    return made
