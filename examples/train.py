# A PyTorch training loop: a small Transformer language model on random tokens.
# examples/train.py is plain PyTorch; examples/train_mutwo.py differs from it
# by mutwo's three lines (import, wrap, report).
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = ap.parse_args()


class Block(nn.Module):
    """Pre-norm causal self-attention and a GELU MLP, written out (no fused paths)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(0.1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5 + mask).softmax(-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 256, layers: int = 4, heads: int = 4, seq: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(seq, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("causal", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        for block in self.blocks:
            x = block(x, self.causal)
        return self.head(x)


torch.manual_seed(0)
model = LanguageModel().to(args.device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
text = torch.randint(0, 1000, (args.batch, 129), device=args.device)
inputs, targets = text[:, :-1], text[:, 1:]

for step in range(1, args.steps + 1):
    optimizer.zero_grad(set_to_none=True)
    logits = model(inputs)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
