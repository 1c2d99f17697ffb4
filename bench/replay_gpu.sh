#!/usr/bin/env bash
# Issue 26's GPU benchmark (random nodes recomputed by replaying the
# generator's state): the zoo's GPT-2 small batch 8 and BERT-large batch 32 at
# their lowest peak (a 1-byte budget: the greedy's lowest plan is run and
# measured, exit 3; recomputation alone, then with swapping) and at 50% with
# --check; then captured Hugging Face models
# beside eager and per-block checkpointing (bench/graph_gpu.sh, --check on
# every mutwo run). JSON lines with card, torch and date in $OUT/results.jsonl.
#
#   ZOO=1 CONFIGS="gpt2:8" bench/replay_gpu.sh     # the zoo, then captured GPT-2
#   ZOO=0 CONFIGS="t5:16" bench/replay_gpu.sh      # captured T5 (t5-small's shape)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export OUT=${OUT:-bench/out/replay}
mkdir -p "$OUT"
timeout -k 5 "${BUILD_TIMEOUT:-300}" scripts/build-cuda.sh >"$OUT/build.txt" 2>&1 || { tail -20 "$OUT/build.txt"; exit 1; }
echo "built in ${SECONDS}s"
m=build-cuda/src/cli/mutwo
card=$(python3 -c 'import torch; print(torch.cuda.get_device_name())') date=$(date +%F)
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
tag() { python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line); r.update(card=sys.argv[1], torch=sys.argv[2], date=sys.argv[3], what=sys.argv[4])
        print(json.dumps(r), flush=True)' "$card" "$torch_version" "$date" "$1" | tee -a "$OUT/results.jsonl"; }
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS for --check
if [ "${ZOO:-1}" = 1 ]; then
  for mb in gpt2-small:8 bert-large:32; do
    name=${mb/:/-}
    timeout -k 5 150 $m optimize --model "${mb%%:*}" --batch "${mb#*:}" --budget 50% --device cuda --check --steps 3 \
      --quiet --out "$OUT/$name-50" --json 2>"$OUT/$name-50.err" | tail -n 1 | tag "zoo $mb at 50%, --check"
    tail -n 2 "$OUT/$name-50.err"
    for how in --no-swap ""; do  # recomputation alone (as the floors before replay were measured), then with swapping
      timeout -k 5 150 $m optimize --model "${mb%%:*}" --batch "${mb#*:}" --budget 1 --device cuda --steps 3 --quiet \
        $how --out "$OUT/$name-floor" --json 2>"$OUT/$name-floor.err" | tail -n 1 \
        | tag "zoo $mb ${how:-with swapping}: the lowest peak the planner reaches, exit 3 expected"
      tail -n 1 "$OUT/$name-floor.err"
    done
  done
  rm -rf "$OUT"/*-50 "$OUT"/*-floor  # plans and profiles: the rows above hold the figures
fi
[ -n "${CONFIGS:-}" ] || exit 0
DEADLINE=$((${DEADLINE:-560} - SECONDS)) SDPA=${SDPA:-math} MUTWO=$m PYTHON=python3 STEPS=${STEPS:-5} bench/graph_gpu.sh
