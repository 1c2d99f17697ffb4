#!/usr/bin/env bash
# One device call: mutwo on user models captured with python/mutwo/capture.py
# (bench/graph_models.py) against the PyTorch peers (bench/graph_peers.py) on
# the same card. JSON lines in $OUT/results.jsonl, each with card, torch and
# date; a compact table at the end. Carry .deps (scripts/vendor-deps.sh).
#
#   CONFIGS="vit_b_16:64 llama:8 bert:32 gpt2:8" COMPILE_PEERS=1 bench/graph_gpu.sh
#
# Per name:batch in CONFIGS: the peers eager and checkpoint (one subprocess
# each); the step captured to $WORK/NAME.json (+ .safetensors, which stays
# there; the JSON is copied to $OUT); `mutwo optimize --graph` at 100% (mutwo's
# captured baseline) and at the checkpoint peer's peak, both with --check, their
# output dirs in $WORK. $OUT gets only results.jsonl, log.txt (every step's
# output) and the step JSONs: the device tool brings back 8 files at most.
# SDPA=math holds scaled_dot_product_attention to its math backend, in the
# peers and the capture alike (plain ATen ops instead of fused kernels).
# Then, for every config, the compile peers (COMPILE_PEERS=1: compile:0.5, or
# a list such as compile,compile:0.5), last because compiling is slow.
# Every step runs under `timeout`, cut to what is left of DEADLINE seconds
# (default 560), so one hang cannot eat the call; a step that fails or is
# skipped leaves an error row and the rest goes on.
# CPU test: DEVICE=cpu SMALL=1 MUTWO=build/src/cli/mutwo PYTHON=/usr/bin/python3 FALLBACK_BUDGET=80% WORK=/tmp/w
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/graph}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
configs=${CONFIGS:-"vit_b_16:64 llama:8 bert:32 gpt2:8"}
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
steps=${STEPS:-10}
deadline=${DEADLINE:-560}
work=${WORK:-build-cuda/graph_work}
sdpa=${SDPA:-auto}
small=""; [ "${SMALL:-0}" = 1 ] && small=--small
case ${COMPILE_PEERS:-0} in 0 | "") compile_peers="" ;; 1) compile_peers=compile:0.5 ;; *) compile_peers=$COMPILE_PEERS ;; esac
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS for optimize --check
res="$out/results.jsonl"
mkdir -p "$work"

# bounded SECONDS CMD...: CMD under timeout, cut to what is left before the deadline (15 s kept for the table).
bounded() {
  local t=$1 left=$((deadline - SECONDS - 15)); shift
  ((left < t)) && t=$left
  if ((t < 10)); then echo "skipped: out of time (DEADLINE=$deadline s)" >&2; return 124; fi
  timeout -k 5 "$t" "$@"
}

info=$(bounded 60 "$py" -c 'import sys, torch
print(torch.cuda.get_device_name() if sys.argv[1].startswith("cuda") else "cpu"); print(torch.__version__)
try:
    import transformers; print(transformers.__version__)
except ImportError:
    print("none")' "$device") || { echo "no torch on $device: $info"; exit 1; }
card=$(sed -n 1p <<<"$info"); torch_version=$(sed -n 2p <<<"$info"); date=$(date +%F)
echo "card: $card; torch $torch_version; transformers $(sed -n 3p <<<"$info"); device $device; sdpa $sdpa; configs: $configs"

if [ -n "${MUTWO:-}" ]; then
  m=$MUTWO
else
  bounded "${BUILD_TIMEOUT:-420}" scripts/build-cuda.sh || { echo "build failed or timed out"; exit 1; }
  m=build-cuda/src/cli/mutwo
  echo "built in ${SECONDS}s"
fi

peers() {  # peers MODEL BATCH VARIANTS PER-VARIANT-TIMEOUT
  local n=$(($(tr -cd , <<<"$3" | wc -c) + 1))
  PYTHONUNBUFFERED=1 bounded $(($4 * n + 30)) "$py" bench/graph_peers.py --model "$1" --batch "$2" --device "$device" \
    --steps "$steps" --variants "$3" --timeout "$4" --sdpa "$sdpa" --out "$res" $small \
    || echo "peers $1:$2 $3: failed or timed out"
}

# emit VARIANT MODEL BATCH LINE: mutwo optimize's JSON line (or an error text) as a row of results.jsonl.
emit() {
  "$py" - "$@" "$card" "$torch_version" "$date" "$res" <<'PY' | tee -a "$res"
import json, sys
variant, model, batch, line, card, torch, date, res = sys.argv[1:9]
r = dict(system="mutwo", model=model, batch=int(batch), variant=variant)
try:
    j = json.loads(line)
except ValueError:
    j = None
if not isinstance(j, dict) or "planned" not in j:
    r["error"] = line.strip()[:300] or "no output"
else:
    part = j["baseline"] if variant == "graph baseline" else j["planned"]
    r.update(peak_bytes=part["peak_bytes"], step_ms=round(part["step_ms"], 3), budget_bytes=j["budget_bytes"],
             check=j["check"], fits=j["fits"], feasible=j["feasible"], predicted_peak_bytes=part["predicted_peak_bytes"],
             dropped=part.get("dropped", 0), dropped_bytes=part.get("dropped_bytes", 0),
             baseline_peak_bytes=j["baseline"]["peak_bytes"], baseline_step_ms=round(j["baseline"]["step_ms"], 3))
    eager = [x.get("step_ms") for x in map(json.loads, open(res)) if x.get("system") == "pytorch"
             and x.get("model") == model and x.get("batch") == int(batch) and x.get("variant") == "eager"]
    if eager and eager[-1]:
        r["extra_vs_eager_pct"] = round(100 * (r["step_ms"] / eager[-1] - 1), 1)
r.update(card=card, torch=torch, date=date)
print(json.dumps(r))
PY
}

# optimize VARIANT MODEL BATCH BUDGET DIR: mutwo optimize --graph, its output into the log, then its row.
optimize() {
  local log="$work/optimize.txt" rc line
  bounded "${MUTWO_TIMEOUT:-120}" "$m" optimize --graph "$work/$2.json" --device "$device" --budget "$4" \
    --steps "$steps" --check --json --out "$5" ${MUTWO_FLAGS:-} >"$log" 2>&1
  rc=$?
  grep -v '^{' "$log"
  line=$(grep '^{' "$log" | tail -n 1)
  [ -n "$line" ] || line="exit status $rc$( ((rc == 124)) && echo ' (timed out)'): $(grep -v '^\s*$' "$log" | tail -n 1)"
  emit "$1" "$2" "$3" "$line"
  return $rc
}

for cfg in $configs; do
  model=${cfg%%:*}; batch=${cfg##*:}
  echo "== $model batch $batch (${SECONDS}s)"
  peers "$model" "$batch" eager,checkpoint "${PEER_TIMEOUT:-150}"
  step="$work/$model.json" log="$work/capture.txt"
  rm -f "$step"
  PYTHONUNBUFFERED=1 bounded "${CAPTURE_TIMEOUT:-240}" "$py" bench/graph_peers.py --model "$model" --batch "$batch" \
    --device "$device" --sdpa "$sdpa" --capture "$step" $small >"$log" 2>&1
  rc=$?
  if grep '^{' "$log" | tail -n 1 | tee -a "$res" | grep -q . && [ -f "$step" ]; then
    grep -v '^{' "$log" | tail -n 5
    cp "$step" "$out/$model.json"
  else
    cat "$log"
    why=$(grep -v '^\s*$' "$log" | tail -n 1)
    ((rc == 124)) && why="timed out; $why"
    emit capture "$model" "$batch" "capture: exit status $rc: $why"
    continue
  fi
  optimize "graph baseline" "$model" "$batch" 100% "$work/${model}_base"
  if (($? == 124)); then  # a hang: the second run would hang too
    emit "graph mutwo@checkpoint-peak" "$model" "$batch" "skipped: mutwo's baseline run timed out"
    continue
  fi
  peak=$("$py" -c 'import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("system") == "pytorch" and r.get("model") == sys.argv[2]
        and str(r.get("batch")) == sys.argv[3] and r.get("variant") == "checkpoint" and r.get("peak_bytes")]
print(rows[-1]["peak_bytes"] if rows else "")' "$res" "$model" "$batch")
  if [ -n "$peak" ]; then
    optimize "graph mutwo@checkpoint-peak" "$model" "$batch" "${peak}B" "$work/${model}_opt"
  elif [ -n "${FALLBACK_BUDGET:-}" ]; then
    optimize "graph mutwo@$FALLBACK_BUDGET" "$model" "$batch" "$FALLBACK_BUDGET" "$work/${model}_opt"
  else
    emit "graph mutwo@checkpoint-peak" "$model" "$batch" "no checkpoint peak to use as the budget"
  fi
done

if [ -n "$compile_peers" ]; then
  for cfg in $configs; do
    echo "== compile peers: $cfg (${SECONDS}s)"
    peers "${cfg%%:*}" "${cfg##*:}" "$compile_peers" "${COMPILE_TIMEOUT:-300}"
  done
fi

"$py" - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
order = {}
for r in rows:
    order.setdefault((r.get("model"), r.get("batch")), len(order))
rows.sort(key=lambda r: order[(r.get("model"), r.get("batch"))])  # stable: each config's rows together
eager = {(r["model"], r["batch"]): r.get("step_ms") for r in rows if r.get("variant") == "eager" and r.get("step_ms")}
print(f"\n{'model':<9} {'batch':>5} {'system':<8} {'variant':<28} {'peak MiB':>9} {'step ms':>9} {'vs eager':>8}  notes")
for r in rows:
    peak, ms = r.get("peak_bytes"), r.get("step_ms")
    e = eager.get((r.get("model"), r.get("batch")))
    vs = f"{100 * (ms / e - 1):+.0f}%" if ms and e else ""
    if "error" in r:
        note = "ERROR " + r["error"][:70]
    elif r.get("variant") == "capture":
        note = f"{r['nodes']} nodes in {r['capture_s']} s"
    elif r.get("system") == "mutwo":
        note = f"check {r['check']}, {'fits' if r['fits'] else 'EXCEEDS'} budget {r['budget_bytes'] / 2**20:.0f} MiB"
    else:
        note = ""
    print(f"{r.get('model', ''):<9} {r.get('batch', ''):>5} {r.get('system', ''):<8} {r.get('variant', ''):<28} "
          f"{f'{peak / 2**20:.0f}' if peak else '-':>9} {f'{ms:.1f}' if ms else '-':>9} {vs:>8}  {note}")
PY
echo "done in ${SECONDS}s; rows in $res"
