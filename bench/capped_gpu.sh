#!/usr/bin/env bash
# One device call: mutwo on a capped card (--device-memory stands in for a
# smaller GPU on a large one). Per model: max-batch under the cap for each
# planner, then every answer trained 10 steps under the same cap with
# optimize (it must not run out of memory) and the batch 5% above it tried
# (it must be refused: no plan fits, or out of memory). JSON lines in
# $OUT/results.jsonl with card and date; a table at the end.
#
#   CAP=8GiB MODELS="resnet-152 bert-base" bench/capped_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/capped}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
cap=${CAP:-8GiB}
budget_text=${BUDGET:-$cap}  # what max-batch and optimize plan against (below CAP: headroom for context and workspaces)
models=${MODELS:-"resnet-152 bert-base"}
planners=${PLANNERS:-none,per-layer,mutwo}
res="$out/results.jsonl"
device=${DEVICE:-cuda}
if [ -n "${MUTWO:-}" ]; then  # CPU test: DEVICE=cpu MUTWO=build/src/cli/mutwo CAP=2MiB MODELS=mlp
  m=$MUTWO
else
  timeout -k 5 "${BUILD_TIMEOUT:-400}" scripts/build-cuda.sh || { echo "build failed or timed out"; exit 1; }
  m=build-cuda/src/cli/mutwo
fi
card=$([ "$device" = cpu ] && echo cpu || python3 -c 'import torch; print(torch.cuda.get_device_name())'); date=$(date +%F)
echo "built in ${SECONDS}s; $card; cap $cap"

row() { python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(card=sys.argv[2], date=sys.argv[3], cap=sys.argv[4], budget=sys.argv[5]); print(json.dumps(r))' "$1" "$card" "$date" "$cap" "$budget_text" | tee -a "$res"; }

for model in $models; do
  echo "== $model (${SECONDS}s)"
  line=$(timeout -k 5 "${MAXBATCH_TIMEOUT:-240}" $m max-batch --model "$model" --device "$device" --memory "$budget_text" \
         --device-memory "$cap" --planners "$planners" --limit 1024 --json --quiet | tail -n 1)
  echo "$line" | grep -q '^{' || { echo "max-batch $model failed: $line"; continue; }
  for p in ${planners//,/ }; do
    batch=$(python3 -c 'import json, sys; print(next(r["max_batch"] for r in json.loads(sys.argv[1])["results"] if r["planner"] == sys.argv[2]))' "$line" "$p")
    over=$(( (batch * 105 + 99) / 100 )); ((over == batch)) && over=$((batch + 1))
    for b in "$batch" "$over"; do
      budget=$budget_text; [ "$p" = none ] && budget=100%
      r=$(timeout -k 5 "${TRAIN_TIMEOUT:-120}" $m optimize --model "$model" --batch "$b" --device "$device" --planner "$p" \
          --budget "$budget" --device-memory "$cap" --steps 10 --json --quiet --out "${WORK:-build-cuda}/capped_${model}_${p}_$b" 2>"$out/err.txt")
      rc=$?
      j=$(tail -n 1 <<<"$r")
      grep -q '^{' <<<"$j" || j='{}'
      row "$(python3 -c 'import json, sys; j = json.loads(sys.argv[1]); p = j.get("planned", {})
print(json.dumps(dict(model=sys.argv[2], planner=sys.argv[3], batch=int(sys.argv[4]), role=sys.argv[5], exit=int(sys.argv[6]),
                      peak_bytes=p.get("peak_bytes"), reserved_peak_bytes=p.get("reserved_peak_bytes"),
                      device_peak_bytes=p.get("device_peak_bytes"), step_ms=p.get("step_ms"), feasible=j.get("feasible"),
                      error=open(sys.argv[7]).read().strip()[-200:] or None)))' "$j" "$model" "$p" "$b" \
          "$([ "$b" = "$batch" ] && echo answer || echo answer+5%)" "$rc" "$out/err.txt")"
    done
  done
done

python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"\n{'model':<11} {'planner':<10} {'batch':>6} {'role':<10} {'exit':>4} {'alloc MiB':>9} {'reserved':>9} {'device':>9} {'ms':>8}")
for r in rows:
    f = lambda k: f"{r[k] / 2**20:.0f}" if r.get(k) else "-"
    print(f"{r['model']:<11} {r['planner']:<10} {r['batch']:>6} {r['role']:<10} {r['exit']:>4} {f('peak_bytes'):>9} "
          f"{f('reserved_peak_bytes'):>9} {f('device_peak_bytes'):>9} {r.get('step_ms') or '-':>8}")
PY
echo "done in ${SECONDS}s"
