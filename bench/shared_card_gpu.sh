#!/usr/bin/env bash
# One device call for issues 24 and 27 (real setups): the GPU machine builds
# with the same script as CI (scripts/build.sh, through build-cuda.sh), then,
# while a second process holds all but KEEP (12 GiB) of the card:
#   1. run: device_peak_bytes is this process's, not the card's;
#   2. max-batch --device cuda without --memory (what is free) and --json, each
#      answer's rewritten step trained 10 steps with run --graph;
#   3. a Hugging Face LLaMA captured and optimized with --check on CUDA
#      (cuDNN's attention backward has no deterministic implementation);
#   4. mutwo.torch.wrap on Hugging Face T5 (0-dim CPU tensors) two steps;
#   5. the CUDA-only pytest cases.
# JSON lines in $OUT/results.jsonl with card, torch and date; log in $OUT/log.txt.
#   6. PyTorch eager and per-block checkpointing's largest batches on the
#      same shared card (bench/capped_peers.py --cap free, bisection).
# SECTIONS picks some (default "1 2 3 4 5"; 6 only when named).
#   SECTIONS="1 3 4 5" bench/shared_card_gpu.sh
#   SECTIONS=2 MODELS=resnet-152 LIMIT=512 MB_TIMEOUT=450 bench/shared_card_gpu.sh
#   SECTIONS=6 MODELS=resnet-152 HINTS=eager=64,ckpt=180 bench/shared_card_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/shared}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
res="$out/results.jsonl"
keep=${KEEP:-12}
sections=" ${SECTIONS:-1 2 3 4 5} "
on() { [[ "$sections" == *" $1 "* ]]; }
timeout -k 5 "${BUILD_TIMEOUT:-300}" scripts/build-cuda.sh || { echo "build failed or timed out"; tail -30 build-cuda.log; exit 1; }
m=$PWD/build-cuda/src/cli/mutwo
card=$(python3 -c 'import torch; print(torch.cuda.get_device_name())'); torchv=$(python3 -c 'import torch; print(torch.__version__)')
echo "built with scripts/build-cuda.sh in ${SECONDS}s; $card; torch $torchv"
tag() { python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(card=sys.argv[2], torch=sys.argv[3], date=sys.argv[4], case=sys.argv[5]); print(json.dumps(r))' "$1" "$card" "$torchv" "$(date +%F)" "$2" | tee -a "$res"; }

python3 - "$keep" <<'PY' &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
hold = torch.empty(free - int(sys.argv[1]) * 2**30, dtype=torch.uint8, device="cuda")
print(f"hog: holds {hold.numel() / 2**30:.1f} GiB of {total / 2**30:.1f}", flush=True)
time.sleep(3600)
PY
hog=$!
trap 'kill $hog 2>/dev/null' EXIT
sleep 15
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader

echo "== 1. run on the shared card (${SECONDS}s)"
on 1 && tag "$($m run --model resnet-50 --batch 32 --steps 3 --device cuda --json | tail -n 1)" run-resnet-50
echo "== 2. max-batch without --memory (${SECONDS}s)"
on 2 && for model in ${MODELS:-resnet-152 bert-base}; do
  j=$(timeout "${MB_TIMEOUT:-200}" $m max-batch --model $model --device cuda --planners ${PLANNERS:-none,per-layer,mutwo} \
    --limit "${LIMIT:-4096}" --out "$out/mb_$model" --json --quiet | tail -n 1)
  tag "$j" "max-batch-$model"
  for p in none per-layer mutwo; do
    [ -f "$out/mb_$model/$p.ir" ] || continue
    r=$(timeout 60 $m run --graph "$out/mb_$model/$p.ir" --steps 10 --device cuda --json 2>&1 | tail -n 1)
    tag "$(python3 -c 'import json,sys; print(json.dumps({"trained": sys.argv[1].startswith("{"), "out": sys.argv[1][:300]}))' "$r")" "train-$model-$p"
  done
done
echo "== 3. captured LLaMA, optimize --check on CUDA (${SECONDS}s)"
on 3 && PYTHONPATH=python:tests/python timeout 120 python3 - "$out/llama" <<'PY'
import sys, torch, hf_models
from mutwo.capture import capture
model, inputs, loss = hf_models.factory("llama")
model = model.cuda(); inputs = tuple(t.cuda() for t in inputs)
capture(model, inputs, loss, sys.argv[1] + "/step.json")
PY
on 3 && tag "$(timeout 120 $m optimize --graph "$out/llama/step.json" --device cuda --budget 70% --check --json --quiet --out "$out/llama/o" | tail -n 1)" optimize-llama-check
echo "== 4. wrap T5 on CUDA (${SECONDS}s)"
on 4 && PYTHONPATH=python:tests/python MUTWO_LIBRARY=$PWD/build-cuda/src/torchext/libmutwo_torch.so timeout 120 python3 - <<'PY' | tail -n 1 > "$out/t5.json"
import json, torch, hf_models, mutwo.torch
model, inputs, loss = hf_models.factory("t5")
w = mutwo.torch.wrap(model.cuda(), "70%")
inputs = tuple(t.cuda() for t in inputs)
losses = []
for _ in range(2):
    l = loss(w, *inputs); l.backward(); losses.append(l.item())
info = mutwo.torch.report(w)
print(json.dumps({"losses": losses, "feasible": info["feasible"], "measured_peak_bytes": info["measured_peak_bytes"], "budget_bytes": info["budget_bytes"]}))
PY
on 4 && tag "$(cat "$out/t5.json" 2>/dev/null || echo '{"error": "wrap failed"}')" wrap-t5
echo "== 6. PyTorch's largest batches on the same card (${SECONDS}s)"
on 6 && for model in ${MODELS:-resnet-152 bert-base}; do  # HINTS: where to start, e.g. eager=64,ckpt=180
  timeout "${PEERS_TIMEOUT:-400}" python3 bench/capped_peers.py --cap free --models $model --variants eager,ckpt \
    --hints "${HINTS:-}" --timeout 90 | tee -a "$res"
done
kill $hog; wait $hog 2>/dev/null
echo "== 5. CUDA pytest cases, card free again (${SECONDS}s)"
on 5 && MUTWO_BIN=$m MUTWO_LIBRARY=$PWD/build-cuda/src/torchext/libmutwo_torch.so PYTHONPATH=python:tests/python \
  timeout 150 python3 -m pytest tests/python -q -p no:cacheprovider -k "cuda" 2>&1 | tail -n 5
echo "done in ${SECONDS}s"
