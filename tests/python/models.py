# Small models outside mutwo's zoo for tests/python/test_capture.py (and for
# `python3 -m mutwo.capture models:unet --out step.json` run from this
# directory). Each factory returns (model, example_inputs, loss_fn) with a
# fixed seed, small enough that a capture and a step take well under a second
# or two on a 2-core CPU. Losses: cross entropy against integer labels that are
# part of example_inputs (next-token cross entropy for the language model).
from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.convnext import CNBlockConfig, ConvNeXt

from workloads.llama_decoder import Llama

Factory = tuple[nn.Module, tuple, Callable]


class Step(nn.Module):
    """A factory's model and loss in one module, so that one compiled graph holds the whole step."""

    def __init__(self, model: nn.Module, loss_fn: Callable) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.model, *inputs)


def classification_loss(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(images), labels)


def _images(batch: int, size: int, classes: int, channels: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch, channels, size, size), torch.randint(classes, (batch,))


# ---- U-Net with BatchNorm: 2 levels, per-pixel classes -------------------------------------------


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class UNet(nn.Module):
    def __init__(self, channels: int = 3, classes: int = 4, width: int = 8) -> None:
        super().__init__()
        self.down1 = _double_conv(channels, width)
        self.down2 = _double_conv(width, 2 * width)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec = _double_conv(2 * width, width)
        self.head = nn.Conv2d(width, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.down1(x)
        b = self.down2(F.max_pool2d(a, 2))
        return self.head(self.dec(torch.cat([a, self.up(b)], dim=1)))


def unet() -> Factory:
    torch.manual_seed(0)
    model = UNet()
    images = torch.randn(8, 3, 32, 32)
    labels = torch.randint(4, (8, 32, 32))
    return model, (images, labels), classification_loss


# ---- LLaMA-style decoder (python/workloads/llama_decoder.py, shared with bench/) -------------------------------------


def lm_loss(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def llama(dropout: float = 0.0, batch: int = 8) -> Factory:
    torch.manual_seed(0)
    model = Llama(dropout=dropout)
    text = torch.randint(128, (batch, 33))
    return model, (text[:, :-1].contiguous(), text[:, 1:].contiguous()), lm_loss


# ---- torchvision ---------------------------------------------------------------------------------


def vit() -> Factory:
    """vit_b_16 shrunk: 32x32 images, 8x8 patches, 2 layers, dropout 0.1."""
    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                                 hidden_dim=64, mlp_dim=128, dropout=0.1, num_classes=10)
    return model, _images(16, 32, 10), classification_loss


def mobilenet() -> Factory:
    """mobilenet_v3_small at 32x32 (BatchNorm, hardswish, squeeze-excitation, dropout)."""
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(num_classes=10)
    return model, _images(64, 32, 10), classification_loss


def convnext() -> Factory:
    """convnext_tiny shrunk: two stages (16 and 32 channels, 2 blocks each), stochastic depth 0.1."""
    torch.manual_seed(0)
    model = ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 2)], stochastic_depth_prob=0.1,
                     num_classes=10)
    return model, _images(8, 32, 10), classification_loss


def resnet18() -> Factory:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    return model, _images(2, 32, 10), classification_loss


class Ema(nn.Module):
    """A running average kept as a buffer by a chain of in-place ops, the usual EMA pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 32), nn.Linear(32, 4)
        self.register_buffer("ema", torch.zeros(32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
        return self.fc2(h)


def ema() -> Factory:
    torch.manual_seed(0)
    return Ema(), _images_flat(), classification_loss


FACTORIES: dict[str, Callable[[], Factory]] = {
    "unet": unet, "llama": llama, "vit": vit, "mobilenet": mobilenet, "convnext": convnext, "resnet18": resnet18,
}


# ---- What cannot be captured -----------------------------------------------------------------------


class ItemBranch(nn.Module):
    """Control flow on a tensor's value (.item())."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if y.sum().item() > 0:
            return y * 2
        return y


class Nonzero(nn.Module):
    """A shape that depends on data (torch.nonzero)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        keep = torch.nonzero(y[:, 0] > 0).flatten()
        return y.index_select(0, keep).sum(0, keepdim=True).expand(x.shape[0], 4)


def item_branch() -> Factory:
    torch.manual_seed(0)
    return ItemBranch(), _images_flat(), classification_loss


def nonzero() -> Factory:
    torch.manual_seed(0)
    return Nonzero(), _images_flat(), classification_loss


def _images_flat() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 8), torch.randint(4, (4,))


# ---- a small GPT-like LM: its vocabulary head and loss, as users write them ----------------------


class TinyGPT(nn.Module):
    """Embeddings, one pre-norm attention + MLP block, and an lm_head Linear (with a bias)."""

    def __init__(self, vocab: int = 512, dim: int = 32, seq: int = 32) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb(tokens) + self.pos[: tokens.shape[1]]
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(x)
        return self.lm_head(self.ln_f(x))


def gpt_head() -> Factory:
    torch.manual_seed(0)
    text = torch.randint(512, (8, 33))
    targets = text[:, 1:].contiguous()
    targets[0, :4] = -100  # ignored positions (F.cross_entropy's default ignore_index)
    return TinyGPT(), (text[:, :-1].contiguous(), targets), lm_loss
