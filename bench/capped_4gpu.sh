#!/usr/bin/env bash
# One device call on a 4-GPU machine: issue 13's capped-card comparison, every
# cap and model on its own card at once (the cap is per process, so the cards
# do not disturb each other): bench/capped_gpu.sh with PEERS=1 for each of
# 8GiB and 16GiB x ResNet-152 and BERT-base. Results gathered into
# $OUT/results.jsonl.
#
#   bench/capped_4gpu.sh        (on nvidia-h100-x4)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/capped4}
mkdir -p "$out"
timeout -k 5 "${BUILD_TIMEOUT:-300}" scripts/build-cuda.sh >"$out/build.txt" 2>&1 || { tail -20 "$out/build.txt"; exit 1; }
echo "built in ${SECONDS}s"
gpu=0
for cap in 8GiB 16GiB; do
  for model in resnet-152 bert-base; do
    CUDA_VISIBLE_DEVICES=$gpu OUT="$out/$cap-$model" CAPS=$cap MODELS=$model PEERS=1 DEVICE=cuda \
      MUTWO=build-cuda/src/cli/mutwo WORK="$out/work" bench/capped_gpu.sh >/dev/null 2>&1 &
    gpu=$((gpu + 1))
  done
done
wait
cat "$out"/*/results.jsonl > "$out/results.jsonl"
for f in "$out"/*/log.txt; do echo "== $f"; grep -v "^  " "$f" | tail -n 12; done
echo "done in ${SECONDS}s"
