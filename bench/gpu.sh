#!/usr/bin/env bash
# One device call: build mutwo against the machine's PyTorch libtorch (CUDA),
# run the PyTorch peers (bench/peers.py) and mutwo side by side on the same GPU,
# and collect every result as JSON lines in $OUT/results.jsonl, each tagged
# with the card, torch version and date. Plots: bench/pareto.sh, afterwards.
#
#   CONFIGS="resnet-152:8 resnet-152:32 bert-base:8 bert-base:32" bench/gpu.sh
#
# Per model:batch in CONFIGS: the peers (PEERS, default eager,ckpt; add
# compile,compile:0.5 for torch.compile), mutwo's baseline step node by node
# and, with GRAPH=1 (default), as a replayed CUDA graph; the per-layer plan and
# mutwo's greedy at per-layer's predicted peak or PyTorch's per-block checkpoint
# peak, whichever is lower (target T2), with --check when
# CHECK=1 (default); each plan's rewritten step is also run alone in a fresh
# process. Then, optionally: SWEEP="90 75 60" (budget sweep of the greedy for
# each config, or only those in SWEEP_ONLY; targets T3/T4), MAXBATCH=8GiB
# (largest batch for each model, T7). A step that fails is logged and the rest
# goes on.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/out}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
configs=${CONFIGS:-"resnet-152:8 resnet-152:32 bert-base:8 bert-base:32"}
peers=${PEERS:-eager,ckpt}
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

# A captured graph replays the same numbers as the node-by-node step (dropout off).
a=$($m run --model mlp --batch 256 --dropout 0 --steps 6 --device cuda --json | last_json)
b=$($m run --model mlp --batch 256 --dropout 0 --steps 6 --device cuda --cuda-graph --json | last_json)
python3 -c "import json,sys; a,b=(json.loads(x)['losses'] for x in sys.argv[1:]); print('cuda-graph losses equal to node-by-node:', a==b, a[-1], b[-1])" "$a" "$b"

for cfg in $configs; do
  model=${cfg%%:*}; batch=${cfg##*:}
  echo "== $model batch $batch (${SECONDS}s)"
  PYTHONUNBUFFERED=1 python3 bench/peers.py --models "$model" --batches "$batch" --variants "$peers" | tee -a "$res"
  line=$($m run --model "$model" --batch "$batch" --steps 10 --device cuda --json | last_json) && emit baseline "$line"
  if [ "$graph" = 1 ]; then
    line=$($m run --model "$model" --batch "$batch" --steps 10 --device cuda --cuda-graph --json | last_json) \
      && emit baseline-cuda-graph "$line"
  fi
  prof="build-cuda/prof_${model}_$batch"
  line=$($m profile --model "$model" --batch "$batch" --device cuda --out "$prof" --json --quiet | last_json) \
    && emit profile "$line"
  pl=$($m plan --profile "$prof/profile.json" --planner per-layer --budget 100% --out "$prof/plan_pl.json" --json | last_json)
  # The budget for T2: per-layer's predicted peak, or PyTorch's per-block checkpoint peak if lower.
  budget=$(python3 - "$pl" "$res" "$model" "$batch" <<'PY'
import json, sys
budget = json.loads(sys.argv[1])["predicted_peak_bytes"]
for line in open(sys.argv[2]):
    r = json.loads(line)
    if r.get("system") == "pytorch" and r.get("variant") == "ckpt" and r.get("model") == sys.argv[3] \
            and str(r.get("batch")) == sys.argv[4] and "peak_bytes" in r:
        budget = min(budget, r["peak_bytes"])
print(budget)
PY
) || continue
  flags=""; [ "$check" = 1 ] && flags="$flags --check"; [ "$graph" = 1 ] && flags="$flags --cuda-graph"
  for planner in per-layer mutwo; do
    dir="build-cuda/opt_${planner}_${model}_$batch"
    line=$($m optimize --model "$model" --batch "$batch" --device cuda --planner $planner --budget "$budget" \
           --steps 5 $flags --out "$dir" --json --quiet | last_json) && emit "$planner" "$line"
    # The rewritten step again in a fresh process, as a user would train with it.
    line=$($m run --graph "$dir/rewritten.ir" --steps 5 --device cuda --json | last_json) \
      && emit "$planner-fresh-process" "$line"
  done
  case " ${SWEEP_ONLY:-$cfg} " in *" $cfg "*) sweep=${SWEEP:-} ;; *) sweep="" ;; esac
  for pct in $sweep; do
    dir="build-cuda/sweep_${model}_${batch}_$pct"
    line=$($m optimize --model "$model" --batch "$batch" --device cuda --planner mutwo --budget "$pct%" \
           --steps 3 --out "$dir" --json --quiet | last_json) && emit "sweep-$pct" "$line"
    line=$($m run --graph "$dir/rewritten.ir" --steps 3 --device cuda --json | last_json) \
      && emit "sweep-$pct-fresh-process" "$line"
  done
done
if [ -n "${MAXBATCH:-}" ]; then
  for model in $(for cfg in $configs; do echo "${cfg%%:*}"; done | sort -u); do
    line=$($m max-batch --model "$model" --memory "$MAXBATCH" --planners none,per-layer,mutwo --device cuda --json --quiet \
           | last_json) && emit max-batch "$line"
  done
fi
echo "done in ${SECONDS}s"
