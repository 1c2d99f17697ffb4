"""PyTorch's largest batches on a capped card, measured as mutwo's are
(bench/capped_gpu.sh): the process may hold CAP on the device, the CUDA
context counted (the caching allocator's memory fraction is CAP less what
the context and libraries hold), expandable segments on as in mutwo. A batch
fits when it trains 10 steps (bench/peers.py's step: SGD, momentum 0.9)
without running out of memory; the largest is found by doubling, then
bisection, each trial in its own process. One JSON line per model and variant.
`--cap free` sets no fraction: the limit is what the card has free (a card
another process shares, bench/shared_card_gpu.sh).
  python3 bench/capped_peers.py --cap 8GiB --models resnet-152,bert-base --variants eager,ckpt
"""
import argparse, json, os, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

TRIAL = """
import sys, torch
sys.path.insert(0, {here!r})
free, total = torch.cuda.mem_get_info()
torch.empty(1, device="cuda")
free, total = torch.cuda.mem_get_info()
outside = (total - free) - torch.cuda.memory_reserved()
if {cap} > 0:  # else (--cap free) what the card has free is the limit: a card another process shares
    torch.cuda.set_per_process_memory_fraction(({cap} - outside) / total)
import peers
try:
    r = peers.measure({model!r}, {batch}, {variant!r}, 10)
    print("FITS", r["peak_bytes"], torch.cuda.max_memory_reserved() + outside)
except torch.cuda.OutOfMemoryError:
    print("OOM")
"""


def fits(model: str, batch: int, variant: str, cap: int, timeout: float) -> bool:
    env = dict(os.environ)
    env.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    code = TRIAL.format(here=HERE, cap=cap, model=model, batch=batch, variant=variant)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    ok = "FITS" in p.stdout
    print(f"  {model} {variant} batch {batch}: {'fits' if ok else 'does not fit'}", file=sys.stderr, flush=True)
    return ok


def largest(model: str, variant: str, cap: int, limit: int, timeout: float, hint: int = 0) -> int:
    """The largest batch that fits: a bracket found by steps of x2 from 8, or of
    x1.25 up or down from `hint` (another system's answer, to save trials),
    then bisection."""
    if hint <= 0:
        lo, hi = 0, 8
        while hi <= limit and fits(model, hi, variant, cap, timeout):
            lo, hi = hi, hi * 2
    elif fits(model, hint, variant, cap, timeout):
        lo, hi = hint, max(hint + 1, hint * 5 // 4)
        while hi <= limit and fits(model, hi, variant, cap, timeout):
            lo, hi = hi, max(hi + 1, hi * 5 // 4)
    else:
        lo, hi = hint * 4 // 5, hint
        while lo > 0 and not fits(model, lo, variant, cap, timeout):
            lo, hi = lo * 4 // 5, lo
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(model, mid, variant, cap, timeout):
            lo = mid
        else:
            hi = mid
    return lo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cap", default="8GiB", help="what the process may hold (8GiB), or free: what the card has free")
    ap.add_argument("--models", default="resnet-152,bert-base")
    ap.add_argument("--variants", default="eager,ckpt")
    ap.add_argument("--limit", type=int, default=1024)
    ap.add_argument("--timeout", type=float, default=60, help="seconds per trial")
    ap.add_argument("--hints", default="", help="where to start, per variant: eager=40,ckpt=110")
    a = ap.parse_args()
    cap = 0 if a.cap == "free" else int(float(a.cap[:-3]) * UNITS[a.cap[-3:]]) if a.cap[-3:] in UNITS else int(a.cap)
    hints = {k: int(v) for k, v in (h.split("=") for h in a.hints.split(",") if h)}
    import torch
    card = torch.cuda.get_device_name()
    for model in a.models.split(","):
        for variant in a.variants.split(","):
            t0 = time.time()
            best = largest(model, variant, cap, a.limit, a.timeout, hints.get(variant, 0))
            print(json.dumps(dict(model=model, system="pytorch", variant=variant, max_batch=best, refused_batch=best + 1,
                                  cap=a.cap, seconds=round(time.time() - t0), card=card, torch=torch.__version__,
                                  date=time.strftime("%Y-%m-%d"))), flush=True)


if __name__ == "__main__":
    main()
