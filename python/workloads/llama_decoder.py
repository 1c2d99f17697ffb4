# The LLaMA-style decoder bench/ and tests/ share (one definition): RMSNorm,
# rotary embeddings (halves rotated, as Hugging Face's LLaMA), SwiGLU, causal
# attention with q, k and v projected apart. tests/python/models.py's llama()
# trains it small (matmul+softmax attention, dropout, tied head);
# bench/models.py at LLaMA's sizes with scaled_dot_product_attention.
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float = 0.0, sdpa: bool = False) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.sdpa = sdpa
        self.dropout = nn.Dropout(dropout)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor]) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (w(x).view(b, t, self.heads, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if self.sdpa:  # one op, whose backend the caller picks (torch.nn.attention.sdpa_kernel)
            p = self.dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            return self.wo(y.transpose(1, 2).reshape(b, t, d))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        y = self.dropout(F.softmax(scores, dim=-1)) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int, dropout: float = 0.0, sdpa: bool = False) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads, dropout, sdpa)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                mask: Optional[torch.Tensor]) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.attention_norm(x), cos, sin, mask))
        return x + self.dropout(self.feed_forward(self.ffn_norm(x)))


class Llama(nn.Module):
    """Decoder-only LM. tests' default: small, attention as matmul and softmax
    under a causal mask, the output projection tied to the embedding. sdpa:
    attention as one scaled_dot_product_attention (bench/'s); tied=False: the
    output projection its own (bench/'s, as LLaMA's)."""

    def __init__(self, vocab: int = 128, dim: int = 64, layers: int = 2, heads: int = 4, hidden: int = 176,
                 max_seq: int = 32, dropout: float = 0.0, sdpa: bool = False, tied: bool = True) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, heads, hidden, dropout, sdpa) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        if tied:
            self.output.weight = self.tok_embeddings.weight
        self.sdpa = sdpa
        head_dim = dim // heads
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(max_seq).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        if not sdpa:
            self.register_buffer("mask", torch.ones(max_seq, max_seq, dtype=torch.bool).tril(), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        cos, sin, mask = self.cos[:t], self.sin[:t], None if self.sdpa else self.mask[:t, :t]
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.output(self.norm(x))
