#!/usr/bin/env bash
# One device call on a 4-GPU machine: issue 14's GPU batch sweeps
# (bench/sweep_gpu.sh), one model per card at once, and on the fourth card
# PyTorch's largest batches under an 8 GiB cap (bench/capped_peers.py, beside
# mutwo's max-batch answers of issue 13). Each job has its own card, so the
# numbers do not disturb each other; OMP threads are split between the jobs.
#
#   bench/sweep_4gpu.sh        (on nvidia-h100-x4; results under $OUT)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/sweep4}
mkdir -p "$out"
timeout -k 5 "${BUILD_TIMEOUT:-300}" scripts/build-cuda.sh >"$out/build.txt" 2>&1 || { tail -20 "$out/build.txt"; exit 1; }
echo "built in ${SECONDS}s"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-12}
job_timeout=${JOB_TIMEOUT:-480}
gpu=0
specs=${SWEEPS:-"resnet-152:8,16,32,64 bert-base:8,16,32 bert-large:8,16,32"}
for spec in $specs; do  # one sweep per card (the committed run of 2026-11-26 had them all on one: a quoting slip)
  CUDA_VISIBLE_DEVICES=$gpu MUTWO=build-cuda/src/cli/mutwo SWEEPS=$spec OUT="$out/${spec%%:*}" timeout -k 5 "$job_timeout" bench/sweep_gpu.sh >/dev/null 2>&1 &
  gpu=$((gpu + 1))
done
( export CUDA_VISIBLE_DEVICES=$gpu
  mkdir -p "$out/capped_peers"
  for hints in "resnet-152 ${RESNET_HINTS:-eager=40,ckpt=109}" "bert-base ${BERT_HINTS:-eager=58,ckpt=130}"; do
    set -- $hints
    timeout -k 5 $((job_timeout / 2 - 10)) python3 bench/capped_peers.py --cap 8GiB --models "$1" --variants eager,ckpt --hints "$2" \
      >>"$out/capped_peers/results.jsonl" 2>>"$out/capped_peers/log.txt"
  done ) &
wait
for f in "$out"/*/log.txt; do echo "== $f"; tail -n 4 "$f"; done
echo "done in ${SECONDS}s"
