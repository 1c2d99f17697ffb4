# Hugging Face transformers models at tiny sizes, built from their configs:
# random weights, nothing downloaded. One row per architecture: the model's
# class, its config and the batch it trains on; `factory(name)` gives what
# mutwo.capture and the tests take, (model, inputs, loss_fn), with the loss
# the model computes itself from its labels (Hugging Face's own loss code).
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

VOCAB, SEQ, BATCH = 96, 32, 8  # activations well above the parameters, so that 70% is reachable


@dataclass(frozen=True)
class Arch:
    model: str                       # the transformers class
    config: str                      # its config class
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: str = "causal"           # "causal", "masked" or "seq2seq": which labels the loss reads


_DECODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64)

ARCHS: dict[str, Arch] = {
    "bert": Arch("BertForMaskedLM", "BertConfig", dict(_DECODER), "masked"),
    "gpt2": Arch("GPT2LMHeadModel", "GPT2Config",
                 dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0,
                      eos_token_id=0)),
    "llama": Arch("LlamaForCausalLM", "LlamaConfig", dict(_DECODER, num_key_value_heads=1)),
    "t5": Arch("T5ForConditionalGeneration", "T5Config",
               dict(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                    decoder_start_token_id=0, pad_token_id=0), "seq2seq"),
}


def hf_loss(names: tuple[str, ...]) -> Callable:
    """loss_fn(model, *tensors): the loss Hugging Face's model computes itself
    from the labels among its keyword inputs, named by `names`."""
    def loss_fn(model: nn.Module, *tensors: torch.Tensor) -> torch.Tensor:
        return model(**dict(zip(names, tensors))).loss
    return loss_fn


def _inputs(kind: str, gen: torch.Generator, batch: int = BATCH, seq: int = SEQ) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (batch, seq), generator=gen)
    if kind == "causal":
        return {"input_ids": ids, "labels": ids.clone()}
    if kind == "masked":
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        # No attention_mask: transformers 5's masking_utils reads an all-ones mask's
        # value (`.all()`) to skip it, which tracing refuses (_local_scalar_dense).
        return {"input_ids": ids, "labels": labels}
    assert kind == "seq2seq", kind
    return {"input_ids": ids, "labels": torch.randint(1, VOCAB, (batch, seq // 2), generator=gen)}


def factory(name: str, batch: int = BATCH, seq: int = SEQ, **config_changes: Any) -> tuple[nn.Module, tuple, Callable]:
    """(model, input tensors, loss_fn) for one row of ARCHS, the same on every
    call; `config_changes` override the row's config (a larger vocabulary, no dropout)."""
    import transformers

    arch = ARCHS[name]
    torch.manual_seed(0)
    config = getattr(transformers, arch.config)(**{**arch.kwargs, **config_changes})
    config._attn_implementation = "sdpa"  # what Hugging Face picks by default, made explicit
    model = getattr(transformers, arch.model)(config).train()
    inputs = _inputs(arch.inputs, torch.Generator().manual_seed(1), batch, seq)
    return model, tuple(inputs.values()), hf_loss(tuple(inputs))
