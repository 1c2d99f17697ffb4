#!/usr/bin/env bash
# One device call: build mutwo against the machine's PyTorch libtorch (CUDA),
# run the PyTorch peers (bench/peers.py) and mutwo side by side on the same GPU,
# and collect every result as JSON lines in $OUT/results.jsonl, each tagged
# with the card, torch version and date. Plots: bench/pareto.sh, afterwards.
#
#   CONFIGS="resnet-152:8 resnet-152:32 bert-base:8 bert-base:32" bench/zoo_gpu.sh
#
# Per model:batch in CONFIGS:
# - the peers: PEERS (default eager,ckpt) first, and COMPILE_PEERS (such as
#   compile,compile:0.5, torch.compile) last, each under PEER_TIMEOUT seconds;
# - mutwo's baseline node by node and, with GRAPH=1 (default), as a replayed
#   CUDA graph, whose losses are compared with node-by-node ones (deterministic
#   kernels, 5 steps each);
# - the profile, copied to $OUT/profiles;
# - the per-layer plan and mutwo's greedy at per-layer's predicted peak, and
#   the greedy at PyTorch's per-block checkpoint peak (target T2), as CUDA
#   graphs with GRAPH=1, with --check when CHECK=1 (default); each plan's
#   rewritten step again alone in a fresh process;
# - optionally SWEEP="90 75 60": the greedy across budgets (percent of the
#   unplanned peak) for each config, or only those in SWEEP_ONLY (T3, T4).
# Then MAXBATCH=8GiB: the largest batch for each model (T7). A step that fails
# is logged and the rest goes on.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
configs=${CONFIGS:-"resnet-152:8 resnet-152:32 bert-base:8 bert-base:32"}
peers=${PEERS:-eager,ckpt}
COMPILE_PEERS=${COMPILE_PEERS:-}  # e.g. compile,compile:0.5: after mutwo's runs, each under PEER_TIMEOUT s
graph=${GRAPH:-1}
check=${CHECK:-1}
export CUBLAS_WORKSPACE_CONFIG=:4096:8  # deterministic cuBLAS for optimize --check
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
torch_version=$(python3 -c 'import torch; print(torch.__version__)')
date=$(date +%F)
echo "card: $card; torch $torch_version; configs: $configs"

scripts/build-cuda.sh || exit 1
echo "built in ${SECONDS}s"
m=build-cuda/src/cli/mutwo
res="$out/results.jsonl"

emit() {  # emit VARIANT JSON: one tagged row (system mutwo unless the row says otherwise)
  python3 -c "import json,sys; r=json.loads(sys.argv[2]); r.setdefault('system','mutwo'); r.setdefault('variant',sys.argv[1]); r.update(card=sys.argv[3], torch=sys.argv[4], date=sys.argv[5]); print(json.dumps(r))" \
    "$1" "$2" "$card" "$torch_version" "$date" | tee -a "$res"
}
last_json() { tail -n 1 | grep '^{' ; }
# mutwo optimize, where exit 3 (no plan fits the budget; the plan still ran) keeps its row.
optimize() { "$m" optimize "$@"; local rc=$?; ((rc == 3)) && return 0; return $rc; }

for cfg in $configs; do
  model=${cfg%%:*}; batch=${cfg##*:}
  echo "== $model batch $batch (${SECONDS}s)"
  PYTHONUNBUFFERED=1 python3 bench/peers.py --models "$model" --batches "$batch" --variants "$peers" | tee -a "$res"
  line=$($m run --model "$model" --batch "$batch" --steps 10 --device cuda --json | last_json) && emit baseline "$line"
  if [ "$graph" = 1 ]; then
    line=$($m run --model "$model" --batch "$batch" --steps 10 --device cuda --cuda-graph --json | last_json) \
      && emit baseline-cuda-graph "$line"
  fi
  # Replays compute what the node-by-node steps compute: 5 steps each with
  # deterministic kernels (steps 3-5 of the second are graph replays).
  a=$($m run --model "$model" --batch "$batch" --steps 5 --device cuda --deterministic --json | last_json)
  b=$($m run --model "$model" --batch "$batch" --steps 5 --device cuda --deterministic --cuda-graph --json | last_json)
  python3 -c "import json,sys; a,b=(json.loads(x)['losses'] for x in sys.argv[1:3]); print(json.dumps(dict(model=sys.argv[3], batch=int(sys.argv[4]), system='mutwo', variant='graph-check', losses_equal=a==b, losses_node=a, losses_graph=b)))" \
    "$a" "$b" "$model" "$batch" | { read -r row; emit graph-check "$row"; }
  prof="build-cuda/prof_${model}_$batch"
  line=$($m profile --model "$model" --batch "$batch" --device cuda --out "$prof" --json --quiet | last_json) \
    && emit profile "$line"
  mkdir -p "$out/profiles" && cp "$prof/profile.json" "$out/profiles/${model}_$batch.json"
  pl=$($m plan --profile "$prof/profile.json" --planner per-layer --budget 100% --out "$prof/plan_pl.json" --json | last_json)
  # Budgets: per-layer's predicted peak for per-layer and the greedy; for T2
  # also PyTorch's per-block checkpoint peak, where it differs by over 1%.
  budgets=$(python3 - "$pl" "$res" "$model" "$batch" <<'PY'
import json, sys
pl = json.loads(sys.argv[1])["predicted_peak_bytes"]
runs = [("per-layer", pl), ("mutwo", pl)]
for line in open(sys.argv[2]):
    r = json.loads(line)
    if r.get("system") == "pytorch" and r.get("variant") == "ckpt" and r.get("model") == sys.argv[3] \
            and str(r.get("batch")) == sys.argv[4] and "peak_bytes" in r and abs(r["peak_bytes"] - pl) > 0.01 * pl:
        runs.append(("mutwo-at-ckpt-peak", r["peak_bytes"]))
print(" ".join(f"{v}={b}" for v, b in runs))
PY
) || continue
  graph_flag=""; [ "$graph" = 1 ] && graph_flag=--cuda-graph
  flags="$graph_flag"; [ "$check" = 1 ] && flags="$flags --check"
  for run in $budgets; do
    variant=${run%%=*}; budget=${run##*=}; planner=${variant%%-at-*}
    dir="build-cuda/opt_${variant}_${model}_$batch"
    line=$(optimize --model "$model" --batch "$batch" --device cuda --planner "$planner" --budget "$budget" \
           --steps 5 $flags --out "$dir" --json --quiet | last_json) && emit "$variant" "$line"
    # The rewritten step again in a fresh process, as a user would train with it.
    line=$($m run --graph "$dir/rewritten.ir" --steps 5 --device cuda --json | last_json) \
      && emit "$variant-fresh-process" "$line"
  done
  case " ${SWEEP_ONLY:-$cfg} " in *" $cfg "*) sweep=${SWEEP:-} ;; *) sweep="" ;; esac
  for pct in $sweep; do
    dir="build-cuda/sweep_${model}_${batch}_$pct"
    line=$(optimize --model "$model" --batch "$batch" --device cuda --planner mutwo --budget "$pct%" \
           --steps 3 $graph_flag --out "$dir" --json --quiet | last_json) && emit "sweep-$pct" "$line"
    line=$($m run --graph "$dir/rewritten.ir" --steps 3 --device cuda --json | last_json) \
      && emit "sweep-$pct-fresh-process" "$line"
  done
  # torch.compile last: its compilation can take minutes, and a timeout then loses no mutwo row.
  for v in ${COMPILE_PEERS//,/ }; do
    PYTHONUNBUFFERED=1 timeout "${PEER_TIMEOUT:-300}" python3 bench/peers.py --models "$model" --batches "$batch" \
      --variants "$v" | tee -a "$res" \
      || emit "$v" "{\"model\": \"$model\", \"batch\": $batch, \"system\": \"pytorch\", \"error\": \"failed or timed out (${PEER_TIMEOUT:-300} s)\"}"
  done
done
if [ -n "${MAXBATCH:-}" ]; then
  for model in $(for cfg in $configs; do echo "${cfg%%:*}"; done | sort -u); do
    line=$($m max-batch --model "$model" --memory "$MAXBATCH" --planners none,per-layer,mutwo --device cuda --json --quiet \
           | last_json) && emit max-batch "$line"
  done
fi
echo "done in ${SECONDS}s"
