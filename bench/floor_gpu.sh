#!/usr/bin/env bash
# One device call: what this session's changes do on a GPU (issues 14 and 16).
# The chunked vocabulary loss on CUDA: BERT-base batch 32 planned at 60% and
# checked bit for bit; the lowest peak recomputation reaches (optimize at a
# 1-byte budget runs the greedy's lowest plan, then exits 3 naming it) for BERT-large batch 16 and 32 and GPT-2 small batch 8;
# and mutwo train on the GPU. JSON lines in $OUT/results.jsonl.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/floor}
mkdir -p "$out"
timeout -k 5 "${BUILD_TIMEOUT:-300}" scripts/build-cuda.sh >"$out/build.txt" 2>&1 || { tail -20 "$out/build.txt"; exit 1; }
echo "built in ${SECONDS}s"
m=build-cuda/src/cli/mutwo
card=$(python3 -c 'import torch; print(torch.cuda.get_device_name())'); date=$(date +%F)
tag() { python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line); r.update(card=sys.argv[1], date=sys.argv[2], what=sys.argv[3]); print(json.dumps(r), flush=True)' "$card" "$date" "$1" | tee -a "$out/results.jsonl"; }
timeout -k 5 150 $m optimize --model bert-base --batch 32 --budget 60% --device cuda --check --steps 3 --quiet \
  --out "$out/bert-base-32" --json | tail -n 1 | tag "bert-base 32 at 60%, --check"
for mb in bert-large:16 bert-large:32 gpt2-small:8; do
  # A 1-byte budget: the greedy goes as low as it can, that plan runs (measured), and the exit is 3.
  timeout -k 5 200 $m optimize --model "${mb%%:*}" --batch "${mb#*:}" --budget 1 --device cuda --steps 2 --quiet \
    --out "$out/floor-${mb/:/-}" --json 2>"$out/floor-${mb/:/-}.err" | tail -n 1 \
    | tag "the lowest peak recomputation reaches (chunked vocabulary loss), exit 3 expected"
  tail -n 1 "$out/floor-${mb/:/-}.err"
done
timeout -k 5 120 $m train --model transformer-lm --data data/english.txt --epochs 3 --budget 60% --device cuda --json --quiet \
  | tail -n 1 | tag "mutwo train transformer-lm, 3 epochs at 60%"
echo "done in ${SECONDS}s"
