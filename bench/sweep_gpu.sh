#!/usr/bin/env bash
# One device call: the original study's batch sweeps on the GPU (issue 14).
# Per model, `mutwo sweep` over its batches (unplanned, per-layer, and the
# greedy at BUDGET of each batch's unplanned peak), the greedy again at the
# per-layer plan's predicted peak (mutwo optimize), and PyTorch eager and
# per-block checkpointing (bench/peers.py) at the same batches, all in this
# call on this card. JSON lines in $OUT/results.jsonl, each with card and
# date; bench/sweep_report.py turns them into tables and plots.
#
#   SWEEPS="resnet-152:8,16,32,64 bert-base:8,16,32 bert-large:8,16,32" bench/sweep_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/sweep}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
sweeps=${SWEEPS:-"resnet-152:8,16,32,64 bert-base:8,16,32 bert-large:8,16,32"}
budget=${BUDGET:-60%}
steps=${STEPS:-5}
res="$out/results.jsonl"
device=${DEVICE:-cuda}
if [ -n "${MUTWO:-}" ]; then  # already built (CPU test: DEVICE=cpu PEERS= MUTWO=build/src/cli/mutwo SWEEPS=mlp:8,16)
  m=$MUTWO
else
  timeout -k 5 "${BUILD_TIMEOUT:-400}" scripts/build-cuda.sh || { echo "build failed or timed out"; exit 1; }
  m=build-cuda/src/cli/mutwo
fi
card=$([ "$device" = cpu ] && echo cpu || python3 -c 'import torch; print(torch.cuda.get_device_name())'); date=$(date +%F)
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
echo "built in ${SECONDS}s; $card"
tag() { python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line); r.update(json.loads(sys.argv[1])); print(json.dumps(r), flush=True)' \
  "{\"card\": \"$card\", \"date\": \"$date\", \"torch\": \"$torch_version\", $1}" | tee -a "$res"; }

for spec in $sweeps; do
  model=${spec%%:*}; batches=${spec#*:}
  echo "== $model at $batches (${SECONDS}s)"
  # PyTorch first, each configuration in its own process (a clean allocator).
  for b in ${batches//,/ }; do
    [ -n "${PEERS-eager,ckpt}" ] || break
    PYTHONUNBUFFERED=1 timeout -k 5 "${PEER_TIMEOUT:-120}" python3 bench/peers.py --models "$model" --batches "$b" \
      --variants "${PEERS-eager,ckpt}" --steps "$steps" | tag "\"system\": \"pytorch\""
  done
  line=$(timeout -k 5 "${SWEEP_TIMEOUT:-300}" $m sweep --model "$model" --batches "$batches" --budget "$budget" \
         --device "$device" --steps "$steps" --out "$out/sweep_$model" --json --quiet | tail -n 1)
  if ! grep -q '^{' <<<"$line"; then echo "sweep $model failed: $line"; continue; fi
  python3 -c 'import json, sys
for p in json.loads(sys.argv[1])["points"]: print(json.dumps(p))' "$line" \
    | tag "\"system\": \"mutwo\", \"model\": \"$model\", \"budget\": \"$budget\""
  # The greedy at the per-layer plan's predicted peak: what μ-TWO adds at equal memory.
  for b in ${batches//,/ }; do
    pl=$(python3 -c 'import json, sys
print(next(p["predicted_peak_bytes"] for p in json.loads(sys.argv[1])["points"] if p["batch"] == int(sys.argv[2]) and p["variant"] == "per-layer"))' "$line" "$b")
    timeout -k 5 "${OPT_TIMEOUT:-120}" $m optimize --model "$model" --batch "$b" --budget "$pl" --device "$device" \
      --steps "$steps" --out "$out/opt_${model}_$b" --json --quiet 2>>"$out/err.txt" | tail -n 1 \
      | python3 -c 'import json, sys
for line in sys.stdin:
    if not line.startswith("{"): continue
    j = json.loads(line); p = j.get("planned", {})
    print(json.dumps(dict(batch=int(sys.argv[1]), variant="mutwo@per-layer", budget_bytes=int(sys.argv[2]),
                          peak_bytes=p.get("peak_bytes"), predicted_peak_bytes=p.get("predicted_peak_bytes"),
                          step_ms=p.get("step_ms"), feasible=j.get("feasible"))))' "$b" "$pl" \
      | tag "\"system\": \"mutwo\", \"model\": \"$model\""
  done
done
echo "done in ${SECONDS}s"
