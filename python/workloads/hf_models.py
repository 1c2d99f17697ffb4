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
IMAGE, CLASSES = 32, 10        # vision: 32x32 RGB images, 10 classes


@dataclass(frozen=True)
class Arch:
    model: str                       # the transformers class
    config: str                      # its config class
    kwargs: dict[str, Any] = field(default_factory=dict)
    inputs: str = "causal"           # which inputs and labels the loss reads: a key of _INPUTS
    kind: str = "decoder"            # encoder, decoder, encoder-decoder, vision or speech (docs/huggingface.md)
    attention: str = "sdpa"          # Hugging Face's default, or "eager" (its own) where SDPA's masks do not fit


_DECODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64)
_SEQ2SEQ = dict(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                decoder_start_token_id=2, pad_token_id=1, bos_token_id=0, eos_token_id=2)
_T5 = dict(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0,
           pad_token_id=0)
_VISION = dict(image_size=IMAGE, num_channels=3, num_labels=CLASSES)
_VIT = dict(_VISION, patch_size=4, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)

ARCHS: dict[str, Arch] = {
    # encoders (masked language models)
    "albert": Arch("AlbertForMaskedLM", "AlbertConfig", dict(_DECODER, embedding_size=16), "masked", "encoder"),
    "bert": Arch("BertForMaskedLM", "BertConfig", dict(_DECODER), "masked", "encoder"),
    "deberta-v2": Arch("DebertaV2ForMaskedLM", "DebertaV2Config", dict(_DECODER), "masked", "encoder"),
    "distilbert": Arch("DistilBertForMaskedLM", "DistilBertConfig",
                       dict(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                            max_position_embeddings=64), "masked", "encoder"),
    "electra": Arch("ElectraForMaskedLM", "ElectraConfig", dict(_DECODER, embedding_size=16), "masked", "encoder"),
    "roberta": Arch("RobertaForMaskedLM", "RobertaConfig", dict(_DECODER, pad_token_id=0), "masked", "encoder"),
    # decoders (causal language models)
    "bloom": Arch("BloomForCausalLM", "BloomConfig", dict(vocab_size=VOCAB, hidden_size=32, n_layer=4, n_head=2)),
    "falcon": Arch("FalconForCausalLM", "FalconConfig",
                   dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2)),
    "gemma": Arch("GemmaForCausalLM", "GemmaConfig", dict(_DECODER, num_key_value_heads=1, head_dim=16)),
    "gpt2": Arch("GPT2LMHeadModel", "GPT2Config",
                 dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0,
                      eos_token_id=0)),
    "gpt-neox": Arch("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(_DECODER)),
    "llama": Arch("LlamaForCausalLM", "LlamaConfig", dict(_DECODER, num_key_value_heads=1)),
    "mistral": Arch("MistralForCausalLM", "MistralConfig", dict(_DECODER, num_key_value_heads=1)),
    "opt": Arch("OPTForCausalLM", "OPTConfig",
                dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                     max_position_embeddings=64, word_embed_proj_dim=32)),
    "phi": Arch("PhiForCausalLM", "PhiConfig", dict(_DECODER)),
    "qwen2": Arch("Qwen2ForCausalLM", "Qwen2Config", dict(_DECODER, num_key_value_heads=1)),
    # encoder-decoders
    "bart": Arch("BartForConditionalGeneration", "BartConfig", dict(_SEQ2SEQ), "seq2seq", "encoder-decoder"),
    "t5": Arch("T5ForConditionalGeneration", "T5Config", dict(_T5), "seq2seq", "encoder-decoder"),
    # UMT5's attention adds the mask to its scores; transformers 5 builds SDPA's boolean masks only while
    # tracing (eagerly it skips them), so under SDPA a traced UMT5 (mutwo's capture, torch.compile) computes
    # another loss than eager UMT5. Its own attention's masks are additive.
    "umt5": Arch("UMT5ForConditionalGeneration", "UMT5Config", dict(_T5), "seq2seq", "encoder-decoder", "eager"),
    # vision
    "clip": Arch("CLIPModel", "CLIPConfig",
                 dict(text_config=dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, max_position_embeddings=64),
                      vision_config=dict(image_size=IMAGE, patch_size=8, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=2),
                      projection_dim=16), "clip", "vision"),
    "convnext": Arch("ConvNextForImageClassification", "ConvNextConfig",
                     dict(_VISION, num_stages=2, patch_size=2, hidden_sizes=[16, 32], depths=[2, 2]), "image", "vision"),
    "swin": Arch("SwinForImageClassification", "SwinConfig",
                 dict(_VISION, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4),
                 "image", "vision"),
    "vit": Arch("ViTForImageClassification", "ViTConfig", dict(_VIT), "image", "vision"),
    # speech
    "audio-spectrogram-transformer": Arch(
        "ASTForAudioClassification", "ASTConfig",
        dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=4,
             frequency_stride=4, time_stride=4, num_mel_bins=16, max_length=SEQ, num_labels=CLASSES),
        "audio", "speech"),
    "wav2vec2": Arch("Wav2Vec2ForCTC", "Wav2Vec2Config",
                     dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3),
                          num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, mask_time_prob=0.0,
                          pad_token_id=0), "ctc", "speech"),
    "whisper": Arch("WhisperForConditionalGeneration", "WhisperConfig",
                    dict(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=2, decoder_layers=2,
                         encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                         decoder_ffn_dim=64, max_source_positions=SEQ // 2, max_target_positions=64,
                         decoder_start_token_id=0, pad_token_id=0), "speech2seq", "speech"),
}


def hf_loss(names: tuple[str, ...], **constant: Any) -> Callable:
    """loss_fn(model, *tensors): the loss Hugging Face's model computes itself
    from the labels among its keyword inputs, named by `names` (and `constant`
    keywords such as CLIP's return_loss)."""
    def loss_fn(model: nn.Module, *tensors: torch.Tensor) -> torch.Tensor:
        return model(**dict(zip(names, tensors)), **constant).loss
    return loss_fn


def _inputs(kind: str, gen: torch.Generator, batch: int = BATCH, seq: int = SEQ) -> dict[str, Any]:
    ids = torch.randint(1, VOCAB, (batch, seq), generator=gen)
    if kind == "causal":
        return {"input_ids": ids, "labels": ids.clone()}
    if kind == "masked":
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        # No attention_mask: transformers 5's masking_utils reads an all-ones mask's
        # value (`.all()`) to skip it, which tracing refuses (_local_scalar_dense).
        return {"input_ids": ids, "labels": labels}
    if kind == "seq2seq":
        return {"input_ids": ids, "labels": torch.randint(3, VOCAB, (batch, seq // 2), generator=gen)}
    if kind in ("image", "clip"):
        pixels = torch.randn(batch, 3, IMAGE, IMAGE, generator=gen)
        if kind == "clip":
            return {"input_ids": ids, "pixel_values": pixels}
        return {"pixel_values": pixels, "labels": torch.randint(0, CLASSES, (batch,), generator=gen)}
    if kind == "audio":  # a spectrogram: `seq` frames of 16 mel bins, one class each
        return {"input_values": torch.randn(batch, seq, 16, generator=gen),
                "labels": torch.randint(0, CLASSES, (batch,), generator=gen)}
    if kind == "ctc":  # 1600 samples: 159 frames after the convolutions, 8 labels each
        return {"input_values": torch.randn(batch, 1600, generator=gen),
                "labels": torch.randint(1, VOCAB, (batch, 8), generator=gen)}
    assert kind == "speech2seq", kind  # Whisper: mel features of twice the encoder's positions
    return {"input_features": torch.randn(batch, 8, seq, generator=gen),
            "labels": torch.randint(1, VOCAB, (batch, seq // 2), generator=gen)}


def factory(name: str, batch: int = BATCH, seq: int = SEQ, **config_changes: Any) -> tuple[nn.Module, tuple, Callable]:
    """(model, input tensors, loss_fn) for one row of ARCHS, the same on every
    call; `config_changes` override the row's config (a larger vocabulary, no dropout)."""
    import transformers

    arch = ARCHS[name]
    torch.manual_seed(0)
    config = getattr(transformers, arch.config)(**{**arch.kwargs, **config_changes})
    cls = getattr(transformers, arch.model)
    try:  # what Hugging Face picks by default, made explicit; its own attention where it has no SDPA
        model = cls._from_config(config, attn_implementation=arch.attention)
    except ValueError:
        model = cls._from_config(config, attn_implementation="eager")
    model.train()
    inputs = _inputs(arch.inputs, torch.Generator().manual_seed(1), batch, seq)
    constant = {"return_loss": True} if arch.inputs == "clip" else {}
    return model, tuple(inputs.values()), hf_loss(tuple(inputs), **constant)
