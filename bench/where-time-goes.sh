#!/usr/bin/env bash
# One device call: where mutwo's CUDA step spends its time next to PyTorch
# eager's, op by op (mutwo profile's nodes.csv summed by bench/ops_time.py;
# torch.profiler for eager via bench/peers.py --trace), plus step times at a
# small batch where launch overhead shows.
#   MODELS="resnet-152 bert-base" BATCH=32 SMALL=8 bench/where-time-goes.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
exec > >(tee -a "$out/where-time-goes.txt") 2>&1
models=${MODELS:-"resnet-152 bert-base"}
batch=${BATCH:-32}
small=${SMALL:-8}
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1); $(python3 -c 'import torch; print("torch", torch.__version__)')"
scripts/build-cuda.sh || exit 1
m=build-cuda/src/cli/mutwo
for model in $models; do
  $m profile --model "$model" --batch "$batch" --device cuda --out "build-cuda/wtg_$model" --json --quiet | tail -n 1
  python3 bench/ops_time.py "build-cuda/wtg_$model/nodes.csv"
  for b in $small $batch; do $m run --model "$model" --batch "$b" --steps 10 --device cuda --json | tail -n 1; done
done
PYTHONUNBUFFERED=1 python3 bench/peers.py --models "$(echo $models | tr ' ' ',')" --batches "$small,$batch" --variants eager --trace
echo "done in ${SECONDS}s"
