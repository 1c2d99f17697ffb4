"""What a block is, for the PyTorch peers that checkpoint, offload or shard
block by block: mutwo's own definition (plan::block_of, src/plan/plan.h), so
the peers and mutwo's per-layer planner split a model alike. A scope's block
is the scope up to and including its first all-digit component
("layer1.0.conv1" -> "layer1.0", "bert.encoder.layer.3.attention" ->
"bert.encoder.layer.3", "transformer.h.5.attn" -> "transformer.h.5"); a
module is a block when its path is its own block."""
from __future__ import annotations

import torch


def block_of(scope: str) -> str:
    parts = scope.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:i + 1])
    return ""


def blocks(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(path, module) of every block, in module order: ResNet's bottlenecks,
    BERT's and GPT-2's layers."""
    return [(name, m) for name, m in model.named_modules() if name and block_of(name) == name]

