#!/usr/bin/env bash
# One device call: build mutwo against the machine's PyTorch libtorch (CUDA),
# run the PyTorch peers (bench/peers.py) and mutwo side by side on the same GPU,
# and collect every result as JSON lines in $OUT/results.jsonl (plus a few plots).
#   MODELS="resnet-152 bert-base" BATCH=32 bench/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
log="$out/log.txt"
exec > >(tee -a "$log") 2>&1
models=${MODELS:-"resnet-152 bert-base"}
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS for optimize --check
batch=${BATCH:-32}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
date=$(date +%F)
echo "card: $card; $(python3 -c 'import torch; print("torch", torch.__version__)')"

scripts/build-cuda.sh || exit 1
m=build-cuda/src/cli/mutwo
res="$out/results.jsonl"

tag() {  # adds card and date to a JSON line
  python3 -c "import json,sys; r=json.loads(sys.argv[1]); r.update(card=sys.argv[2], date=sys.argv[3], system=r.get('system','mutwo')); print(json.dumps(r))" "$1" "$card" "$date"
}

PYTHONUNBUFFERED=1 python3 bench/peers.py --models "$(echo $models | tr ' ' ',')" --batches "$batch" \
  --variants eager,ckpt | tee -a "$res"
for model in $models; do
  line=$($m run --model "$model" --batch "$batch" --steps 10 --device cuda --json | tail -n 1) && tag "$line" | tee -a "$res"
  line=$($m profile --model "$model" --batch "$batch" --device cuda --out "build-cuda/prof_$model" --json --quiet | tail -n 1) \
    && tag "$line" | tee -a "$res"
  cp "build-cuda/prof_$model/profile.json" "$out/profile_$model.json" 2>/dev/null
  # Checkpointing: per-layer, then mutwo's greedy at per-layer's predicted peak (target T2).
  pl=$($m plan --profile "build-cuda/prof_$model/profile.json" --planner per-layer --budget 100% \
        --out "build-cuda/plan_pl_$model.json" --json | tail -n 1)
  budget=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['predicted_peak_bytes'])" "$pl")
  for planner in per-layer mutwo; do
    line=$($m optimize --model "$model" --batch "$batch" --device cuda --planner $planner --budget "$budget" \
           --steps 5 --check --out "build-cuda/opt_${planner}_$model" --json --quiet | tail -n 1); tag "$line" | tee -a "$res"
  done
done
# A budget sweep with mutwo's greedy, measured at every point (targets T3, T4).
if [ -n "${SWEEP:-}" ]; then
  for model in $models; do
    for pct in $SWEEP; do
      line=$($m optimize --model "$model" --batch "$batch" --device cuda --planner mutwo --budget "$pct%" \
             --steps 3 --out "build-cuda/sweep_${model}_$pct" --json --quiet | tail -n 1); tag "$line" | tee -a "$res"
    done
  done
fi
# The planner's input for BERT-large at batch 32 (planning time, target T5, is measured on a CPU core).
if [ -n "${LARGE:-}" ]; then
  line=$($m profile --model bert-large --batch 32 --device cuda --out build-cuda/prof_bert-large --json --quiet | tail -n 1) \
    && tag "$line" | tee -a "$res"
  cp build-cuda/prof_bert-large/profile.json "$out/profile_bert-large.json"
fi
# The largest batch that fits a memory cap, without and with recomputation (target T7).
if [ -n "${MAXBATCH:-}" ]; then
  for model in $models; do
    line=$($m max-batch --model "$model" --memory "$MAXBATCH" --planners none,per-layer,mutwo --device cuda --json --quiet \
           | tail -n 1) && tag "$line" | tee -a "$res"
  done
fi
echo "done in ${SECONDS}s"
