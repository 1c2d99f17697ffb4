#!/usr/bin/env bash
# One device call: swapping beside recomputation (issue 16), with the PyTorch
# peers, on one card. Per model and batch:
#   1. PyTorch eager, per-block checkpointing, save_on_cpu per block and
#      selective checkpointing with CPU offload (bench/peers.py), each in its
#      own process;
#   2. mutwo profile (the copy bandwidth measured at start-up is in it), then
#      the lowest peak the greedy reaches with recomputation only (--no-swap)
#      and with swapping (plan --budget 1B);
#   3. optimize under a budget between the two floors (below the recompute
#      floor), with --check: fits, passes, runs;
#   4. optimize with and without swapping at the per-block checkpoint's peak:
#      the extra time of each over the unplanned step;
#   5. optimize at each offloading peer's peak.
# GRAPH=1: step 3 also as a captured CUDA graph (--cuda-graph). PEERS="": no
# PyTorch peers (and so no step 4 or 5).
# JSON lines in $OUT/results.jsonl, each with card and date.
#
#   SPECS="resnet-152:32 resnet-152:64 bert-large:32 gpt2-small:8" bench/swap_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/swap}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
specs=${SPECS:-"resnet-152:32 bert-large:32 gpt2-small:8 resnet-152:64"}
steps=${STEPS:-5}
res="$out/results.jsonl"
if [ -n "${MUTWO:-}" ]; then
  m=$MUTWO
else
  timeout -k 5 "${BUILD_TIMEOUT:-400}" scripts/build-cuda.sh || { echo "build failed or timed out"; exit 1; }
  m=build-cuda/src/cli/mutwo
fi
device=${DEVICE:-cuda}
card=$([ "$device" = cpu ] && echo cpu || python3 -c 'import torch; print(torch.cuda.get_device_name())'); date=$(date +%F)
echo "built in ${SECONDS}s; $card"
tag() { python3 -c 'import json, sys
for line in sys.stdin:
    if line.startswith("{"):
        r = json.loads(line); r.update(json.loads(sys.argv[1])); print(json.dumps(r), flush=True)' \
  "{\"card\": \"$card\", \"date\": \"$date\", $1}" | tee -a "$res"; }
field() { python3 -c 'import json, sys
try: j = json.loads(sys.stdin.read().strip().splitlines()[-1])
except Exception: sys.exit(1)
for k in sys.argv[1].split("."): j = j.get(k) if isinstance(j, dict) else None
print("" if j is None else j)' "$1"; }
optimize() {  # label budget extra-args...
  local label=$1 budget=$2; shift 2
  timeout -k 5 "${OPT_TIMEOUT:-240}" $m optimize --model "$model" --batch "$b" --budget "$budget" --device "$device" \
    --steps "$steps" --out "$out/${model}_${b}_$label" --json --quiet "$@" 2>>"$out/err.txt" | tail -n 1 \
    | python3 -c 'import json, sys
for line in sys.stdin:
    if not line.startswith("{"): continue
    j = json.loads(line); p, base = j["planned"], j["baseline"]
    print(json.dumps(dict(variant=sys.argv[1], budget_bytes=j["budget_bytes"], fits=j["fits"], feasible=j["feasible"],
                          check=j["check"], peak_bytes=p["peak_bytes"], predicted_peak_bytes=p["predicted_peak_bytes"],
                          device_peak_bytes=p["device_peak_bytes"], step_ms=p["step_ms"],
                          predicted_extra_ms=p["predicted_extra_ms"], predicted_swap_ms=p["predicted_swap_ms"],
                          dropped=p["dropped"], swapped=p["swapped"], swapped_bytes=p["swapped_bytes"],
                          host_peak_bytes=p["host_peak_bytes"], baseline_step_ms=base["step_ms"],
                          baseline_peak_bytes=base["peak_bytes"])))' "$label" \
    | tag "\"system\": \"mutwo\", \"model\": \"$model\", \"batch\": $b"
}

for spec in $specs; do
  model=${spec%%:*}; b=${spec#*:}
  echo "== $model batch $b (${SECONDS}s)"
  if [ -n "${PEERS-eager,ckpt,offload,sac-offload}" ]; then
    for v in ${PEERS-eager,ckpt,offload,sac-offload}; do
      PYTHONUNBUFFERED=1 timeout -k 5 "${PEER_TIMEOUT:-150}" python3 bench/peers.py --models "$model" --batches "$b" \
        --variants "$v" --steps "$steps" 2>>"$out/err.txt" | tag "\"system\": \"pytorch\""
    done
  fi
  prof="$out/${model}_${b}_profile"
  timeout -k 5 "${OPT_TIMEOUT:-240}" $m profile --model "$model" --batch "$b" --device "$device" --quiet --out "$prof" \
    >/dev/null 2>>"$out/err.txt" || { echo "profile failed"; continue; }
  python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))
print(json.dumps(dict(variant="bandwidth", h2d_gbps=p["h2d_gbps"], d2h_gbps=p["d2h_gbps"], unplanned_peak_bytes=p["peak_bytes"])))' \
    "$prof/profile.json" | tag "\"system\": \"mutwo\", \"model\": \"$model\", \"batch\": $b"
  for mode in recompute hybrid; do
    flag=$([ $mode = recompute ] && echo --no-swap)
    $m plan --profile "$prof/profile.json" --budget 1 $flag --json --out "$prof/floor_$mode.json" 2>/dev/null | tail -n 1 \
      | python3 -c 'import json, sys
j = json.loads(sys.stdin.read()); print(json.dumps(dict(variant="floor-" + sys.argv[1], predicted_peak_bytes=j["predicted_peak_bytes"],
      predicted_extra_ms=j["predicted_extra_ms"], swapped=j.get("swapped"), dropped=j["dropped"], planning_ms=j["planning_ms"])))' "$mode" \
      | tag "\"system\": \"mutwo\", \"model\": \"$model\", \"batch\": $b"
  done
  rfloor=$(grep "\"model\": \"$model\", \"batch\": $b" "$res" | grep '"floor-recompute"' | tail -n 1 | field predicted_peak_bytes)
  hfloor=$(grep "\"model\": \"$model\", \"batch\": $b" "$res" | grep '"floor-hybrid"' | tail -n 1 | field predicted_peak_bytes)
  if [ -n "$rfloor" ] && [ -n "$hfloor" ] && [ "$hfloor" -lt "$rfloor" ]; then
    optimize below-floor $(( (hfloor + rfloor) / 2 )) --check
    [ -n "${GRAPH:-}" ] && optimize below-floor-cuda-graph $(( (hfloor + rfloor) / 2 )) --cuda-graph
    optimize hybrid-floor $(( hfloor * 101 / 100 )) --check
  fi
  ckpt=$(grep "\"model\": \"$model\", \"batch\": $b" "$res" | grep '"variant": "ckpt"' | tail -n 1 | field peak_bytes)
  if [ -n "$ckpt" ]; then
    optimize at-ckpt-recompute "$ckpt" --no-swap
    optimize at-ckpt-hybrid "$ckpt"
  fi
  for v in offload sac-offload; do
    peak=$(grep "\"model\": \"$model\", \"batch\": $b" "$res" | grep "\"variant\": \"$v\"" | tail -n 1 | field peak_bytes)
    [ -n "$peak" ] && optimize "at-$v" "$peak"
  done
done
echo "done in ${SECONDS}s"
