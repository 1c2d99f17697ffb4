# A PyTorch training loop: a small Transformer language model on random tokens.
# examples/train.py is plain PyTorch; examples/train_mutwo.py differs from it
# by mutwo's three lines (import, wrap, report).
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import mutwo.torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
args = ap.parse_args()


class LanguageModel(nn.Module):
    def __init__(self, vocab: int = 1000, dim: int = 256, layers: int = 4, heads: int = 4, seq: int = 128) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(seq, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("causal", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens) + self.position, mask=self.causal))


torch.manual_seed(0)
model = LanguageModel().to(args.device)
model = mutwo.torch.wrap(model, budget="60%")
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
print(mutwo.torch.report(model))
