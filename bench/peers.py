# PyTorch's peers of mutwo, and mutwo from the user's own loop, on the models of bench/models.py: the
# command line every benchmark of bench/run.py starts (its runner sets PYTHONPATH to python/ and bench/;
# by hand, PYTHONPATH=python). Subcommands, each printing JSON lines (untagged: bench/run.py adds card,
# torch, date, commit and what):
#   measure  one training step per variant, each variant in its own process (measure.py; the variants:
#            variants.py);
#   capture  the model's step written for mutwo (measure.py);
#   largest  the largest batch a variant trains under a device-memory cap, or on a shared card (largest.py);
#   dist     one rank of DDP or FSDP2 under torchrun, plain, checkpointed or compiled (ranks.py).
#   python3 bench/peers.py measure --model llama --batch 8 --variants eager,checkpoint,compile:0.5
#   python3 bench/peers.py capture --model llama --batch 8 --out steps/llama.json
#   python3 bench/peers.py largest --cap 8GiB --models resnet-152,bert-base --variants eager,ckpt
#   torchrun --nproc-per-node 2 bench/peers.py dist --model bert-large --batch 32 --variant ddp_ckpt
#   torchrun --nproc-per-node 2 bench/peers.py dist --model llama1b --batch 4 --autocast bf16 --variant fsdp_compile:0.5
from __future__ import annotations

import argparse
import json

from largest import largest_all
from measure import Spec, capture_step, measure_all, measure_here
from ranks import DIST_VARIANTS, dist_step


def main() -> None:
    ap = argparse.ArgumentParser(description="PyTorch's peers of mutwo (bench/run.py runs them)")
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("measure", "capture"):
        p = sub.add_parser(name)
        p.add_argument("--model", help="a zoo name (resnet-152, bert-base, ...) or one of configs.CAPTURED (llama, decoder12, t5, ...)")
        p.add_argument("--batch", type=int)
        p.add_argument("--device", default="cuda")
        p.add_argument("--steps", type=int, default=10, help="measured steps, after 2 warm-up steps")
        p.add_argument("--sdpa", default="auto", help="attention backend: auto, or math, efficient_attention, ...")
        p.add_argument("--autocast", choices=["bf16", "f16"], help="run the forward under torch.autocast")
        p.add_argument("--small", action="store_true", help="tiny captured models, for CPU tests")
        p.add_argument("--spec", help=argparse.SUPPRESS)  # the child's Spec, as JSON
    m = sub.choices["measure"]
    m.add_argument("--variants", default="eager,ckpt")
    m.add_argument("--timeout", type=float, default=300, help="seconds per variant")
    m.add_argument("--trace", action="store_true", help="also print one step's GPU time by op")
    m.add_argument("--round", type=int, default=1, help="the round these processes are (bench/run.py --rounds): "
                   "every row says it")
    m.add_argument("--one", help=argparse.SUPPRESS)  # the child: measure this variant here
    sub.choices["capture"].add_argument("--out", required=True, metavar="STEP.json")
    p = sub.add_parser("largest")
    p.add_argument("--cap", default="8GiB", help="what the process may hold (8GiB), or free: what the card has free")
    p.add_argument("--models", default="resnet-152,bert-base")
    p.add_argument("--variants", default="eager,ckpt")
    p.add_argument("--limit", type=int, default=1024)
    p.add_argument("--timeout", type=float, default=60, help="seconds per trial")
    p.add_argument("--hints", default="", help="where to start, per variant: eager=40,ckpt=110")
    p = sub.add_parser("dist")
    p.add_argument("--model", default="bert-large")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--variant", default="ddp_ckpt", help=DIST_VARIANTS)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--device", default="cuda", help="cuda (NCCL) or cpu (Gloo)")
    p.add_argument("--autocast", choices=["bf16", "f16"], help="run the forward under torch.autocast")
    p.add_argument("--small", action="store_true", help="tiny captured models, for CPU tests")
    a = ap.parse_args()
    if a.command == "largest":
        return largest_all(a)
    if a.command == "dist":
        return dist_step(a)
    if a.spec:
        spec = Spec(**json.loads(a.spec))
    elif a.model and a.batch:
        spec = Spec(a.model, a.batch, a.device, a.steps, a.sdpa, a.autocast, a.small, getattr(a, "trace", False),
                    getattr(a, "round", 1))
    else:
        ap.error(f"{a.command} needs --model and --batch")
    if a.command == "capture":
        return capture_step(spec, a.out)
    if a.one:
        return measure_here(spec, a.one)
    measure_all(spec, a.variants.split(","), a.timeout)


if __name__ == "__main__":
    main()
