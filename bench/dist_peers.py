"""PyTorch's data-parallel peers of `mutwo ... --shard-optimizer` on several GPUs.

One training step per rank (forward, loss, backward, SGD with momentum 0.9) of
the models bench/peers.py builds, under torchrun, as
  ddp       DistributedDataParallel
  ddp_ckpt  DDP with torch.utils.checkpoint around every block (HF gradient checkpointing)
  fsdp_ckpt FSDP2 (fully_shard per block and on the root) with the same checkpointing
Rank 0 prints one JSON line: peak_bytes = the largest torch.cuda.max_memory_allocated
of any rank over the measured steps, step_ms = median of rank 0's CUDA-event-timed
steps after 2 warm-up steps, and the card and date.
  torchrun --nproc-per-node 2 bench/dist_peers.py --model bert-large --batch 32 --variant ddp_ckpt
"""
import argparse, json, os, sys, time
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blocks import blocks  # noqa: E402
from peers import build, sgd_step, timed_steps  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert-large")
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--variant", default="ddp_ckpt", choices=["ddp", "ddp_ckpt", "fsdp_ckpt"])
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    m, inputs, loss_fn, ckpt = build(a.model, a.batch)
    if a.variant != "ddp":
        ckpt(m)
    dev = torch.device("cuda", local)
    inputs = tuple(t.to(dev) for t in inputs)
    if a.variant == "fsdp_ckpt":
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            from torch.distributed._composable.fsdp import fully_shard
        m = m.to(dev).train()
        for _, blk in blocks(m):  # one FSDP unit per block (bench/blocks.py)
            fully_shard(blk)
        fully_shard(m)
        model = m
    else:
        m = m.to(dev).train()
        model = torch.nn.parallel.DistributedDataParallel(m, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    step = sgd_step(loss_fn, model, inputs, opt)
    step(); step()
    torch.cuda.synchronize()
    times, loss = timed_steps(step, a.steps)
    peak = torch.tensor([torch.cuda.max_memory_allocated()], device=dev)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps(dict(model=a.model, batch=a.batch, world_size=world, system="pytorch", variant=a.variant,
                              peak_bytes=int(peak.item()), step_ms=times[len(times) // 2], loss=float(loss.detach()),
                              card=torch.cuda.get_device_name(), torch=torch.__version__,
                              date=time.strftime("%Y-%m-%d"))), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
