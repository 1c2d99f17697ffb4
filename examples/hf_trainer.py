# The Hugging Face Trainer under mutwo's plan: a small LLaMA built from its
# config (random weights, nothing is downloaded) trained on random tokens.
# mutwo's lines are the import of mutwo.trainer and TrainingArguments'
# torch_compile_backend="mutwo"; the budget comes from MUTWO_BUDGET, or from
# --budget through mutwo.trainer.MutwoCallback (docs/python.md).
#
#   MUTWO_BUDGET=80% python examples/hf_trainer.py --steps 5
#   python examples/hf_trainer.py --steps 5 --budget 80%
#   python examples/hf_trainer.py --steps 5 --plain        # the same Trainer without mutwo
from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any, Optional, Sequence

import torch
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

import mutwo.trainer  # lets the Trainer (through accelerate) take torch_compile_backend="mutwo"


class Tokens(Dataset):
    """Random token sequences, each its own label (a causal language model's loss)."""

    def __init__(self, count: int, seq: int, vocab: int) -> None:
        self.ids = torch.randint(1, vocab, (count, seq), generator=torch.Generator().manual_seed(1))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class LossTrainer(Trainer):
    """A Trainer that keeps each step's loss at full precision (its log rounds it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.losses: list[float] = []

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss.item())
        return loss


def train(steps: int = 10, batch: int = 8, seq: int = 128, hidden: int = 256, layers: int = 4, plain: bool = False,
          callbacks: Sequence[TrainerCallback] = (), use_cpu: bool = False,
          output_dir: Optional[str] = None) -> list[float]:
    """Trains for `steps` and returns each step's loss."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=seq)
    model = LlamaForCausalLM(config)
    with tempfile.TemporaryDirectory() as scratch:
        args = TrainingArguments(
            output_dir=output_dir or scratch, max_steps=steps, per_device_train_batch_size=batch,
            learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
            seed=0, use_cpu=use_cpu,
            torch_compile=not plain, torch_compile_backend=None if plain else "mutwo")  # mutwo's line
        trainer = LossTrainer(model=model, args=args, train_dataset=Tokens(steps * batch, seq, config.vocab_size),
                              callbacks=list(callbacks))
        trainer.train()
    return trainer.losses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--budget", help="mutwo's budget (else MUTWO_BUDGET, else the default: docs/python.md)")
    ap.add_argument("--compiler", help="inductor (the default: mutwo plans, Inductor compiles) or mutwo")
    ap.add_argument("--plain", action="store_true", help="the same Trainer without mutwo")
    ap.add_argument("--cpu", action="store_true", help="train on the CPU even where CUDA is")
    args = ap.parse_args()
    callback = mutwo.trainer.MutwoCallback(budget=args.budget, compiler=args.compiler)
    losses = train(args.steps, args.batch, args.seq, plain=args.plain, callbacks=[callback], use_cpu=args.cpu)
    for step, loss in enumerate(losses, 1):
        print(f"step {step}: loss {loss:.6f}")
    if callback.report:
        keys = ("compiler", "device", "budget_source", "budget_bytes", "predicted_peak_bytes", "measured_peak_bytes")
        print(json.dumps({k: callback.report.get(k) for k in keys}))


if __name__ == "__main__":
    main()
