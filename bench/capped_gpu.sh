#!/usr/bin/env bash
# One device call: mutwo on a capped card (--device-memory stands in for a
# smaller GPU on a large one, the CUDA context counted). Per model: max-batch
# --memory BUDGET under the cap for each planner (batch+1 refused by its
# bisection), then every answer's own rewritten step (max-batch --out)
# trained 10 steps under the same cap with run --graph: it must not run out
# of memory; max-batch also tries the batch 5% above each answer on its own.
# With PEERS=1, PyTorch eager and per-block checkpointing's largest batches
# under the same cap follow in the same call (bench/capped_peers.py, by
# bisection around mutwo's none and per-layer answers). JSON lines in
# $OUT/results.jsonl with card and date; a table at the end.
#
#   CAPS="8GiB 16GiB" MODELS="resnet-152 bert-base" PEERS=1 bench/capped_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/capped}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
caps=${CAPS:-${CAP:-8GiB}}
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
echo "built in ${SECONDS}s; $card; caps $caps"

row() { python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(card=sys.argv[2], date=sys.argv[3], cap=sys.argv[4], budget=sys.argv[5]); print(json.dumps(r))' "$1" "$card" "$date" "$cap" "$budget_text" | tee -a "$res"; }

for cap in $caps; do
budget_text=${BUDGET:-$cap}  # what max-batch plans against (below the cap: headroom for context and workspaces)
for model in $models; do
  echo "== $model under $cap (${SECONDS}s)"
  dir="${WORK:-build-cuda}/capped_${model}_$cap"
  for p in ${planners//,/ }; do
    # One planner per max-batch run, so that a run cut off by its timeout loses only its own answer.
    t0=$SECONDS
    line=$(timeout -k 5 "${MAXBATCH_TIMEOUT:-240}" $m max-batch --model "$model" --device "$device" --memory "$budget_text" \
           --device-memory "$cap" --planners "$p" --limit 1024 --out "$dir" --json | tail -n 1)
    echo "$line" | grep -q '^{' || { echo "max-batch $model $p failed or timed out after $((SECONDS - t0))s: $line"; continue; }
    batch=$(python3 -c 'import json, sys; print(next(r["max_batch"] for r in json.loads(sys.argv[1])["results"] if r["planner"] == sys.argv[2]))' "$line" "$p")
    # The answer's own rewritten step, trained 10 steps under the cap; batch+1 was refused by max-batch's bisection.
    r=$(timeout -k 5 "${TRAIN_TIMEOUT:-120}" $m run --graph "$dir/$p.ir" --device "$device" --device-memory "$cap" \
        --steps 10 --json 2>"$out/err.txt")
    rc=$?
    j=$(tail -n 1 <<<"$r"); grep -q '^{' <<<"$j" || j='{}'
    row "$(python3 -c 'import json, sys; j = json.loads(sys.argv[1]); mb = json.loads(sys.argv[7])
a = next(r for r in mb["results"] if r["planner"] == sys.argv[3])
print(json.dumps(dict(model=sys.argv[2], planner=sys.argv[3], batch=int(sys.argv[4]), refused_batch=int(sys.argv[4]) + 1,
                      above_batch=a.get("above_batch"), above_fits=a.get("above_fits"), seconds=int(sys.argv[8]),
                      trained_steps=len(j.get("losses", [])), exit=int(sys.argv[5]),
                      max_batch_peak_bytes=a["peak_bytes"], max_batch_device_peak_bytes=a["device_peak_bytes"],
                      peak_bytes=j.get("peak_bytes"), reserved_peak_bytes=j.get("reserved_peak_bytes"),
                      device_peak_bytes=j.get("device_peak_bytes"), step_ms=j.get("step_ms"),
                      error=open(sys.argv[6]).read().strip()[-200:] or None)))' "$j" "$model" "$p" "$batch" "$rc" "$out/err.txt" "$line" "$((SECONDS - t0))")"
  done
  if [ "${PEERS:-0}" = 1 ]; then  # PyTorch under the same cap, around mutwo's none and per-layer answers
    hint() { python3 -c 'import json, sys; print(next((r["max_batch"] for r in json.loads(sys.argv[1])["results"] if r["planner"] == sys.argv[2]), 0))' "$line" "$1"; }
    timeout -k 5 "${PEERS_TIMEOUT:-400}" python3 bench/capped_peers.py --cap "$cap" --models "$model" --variants eager,ckpt \
      --hints "eager=$(hint none),ckpt=$(hint per-layer)" | tee -a "$res"
  fi
done
done

python3 - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"\n{'cap':<6} {'model':<11} {'planner':<10} {'batch':>6} {'trained':>7} {'exit':>4} {'+5%':>5} {'fits':>5} {'alloc MiB':>9} {'reserved':>9} {'device':>9} {'ms':>8}")
for r in rows:
    f = lambda k: f"{r[k] / 2**20:.0f}" if r.get(k) else "-"
    if r.get("system") == "pytorch":
        print(f"{r['cap']:<6} {r['model']:<11} {r['variant']:<10} {r.get('max_batch', r.get('max_batch_at_least')):>6} (PyTorch, 10 steps by bisection)")
        continue
    print(f"{r['cap']:<6} {r['model']:<11} {r['planner']:<10} {r['batch']:>6} {r['trained_steps']:>7} {r['exit']:>4} "
          f"{r.get('above_batch') or '-':>5} {str(r.get('above_fits')):>5} {f('peak_bytes'):>9} "
          f"{f('reserved_peak_bytes'):>9} {f('device_peak_bytes'):>9} {r.get('step_ms') or '-':>8}")
PY
echo "done in ${SECONDS}s"
