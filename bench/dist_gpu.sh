#!/usr/bin/env bash
# One device call on a machine with several GPUs: mutwo data-parallel under
# torchrun beside PyTorch's DDP with per-block checkpointing and FSDP2
# (fully_shard) with checkpointing (bench/dist_peers.py), on BERT-large at
# batch 32 per GPU and GPT-2 medium. For mutwo: the unplanned step (all-reduce
# buckets), the sharded one (--shard-optimizer), and plans under per-rank
# budgets (--budget, relative to each step's own unplanned peak), each with
# --check; plus one GPU (the scaling's base). JSON lines (rank 0's, with
# rank/world_size, card and date) in $OUT/results.jsonl.
#
#   NPROC=2 MODELS="bert-large gpt2-medium" BUDGETS="60% 40%" bench/dist_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/dist}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
nproc=${NPROC:-2}
models=${MODELS:-"bert-large gpt2-medium"}
budgets=${BUDGETS:-"60% 40%"}
steps=${STEPS:-5}
res="$out/results.jsonl"
timeout -k 5 "${BUILD_TIMEOUT:-400}" scripts/build-cuda.sh || { echo "build failed or timed out"; exit 1; }
m=$PWD/build-cuda/src/cli/mutwo
card=$(python3 -c 'import torch; print(torch.cuda.get_device_name())'); date=$(date +%F)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "built in ${SECONDS}s; $card x $nproc"
trun=(python3 -m torch.distributed.run --standalone --nproc-per-node)  # an array: `timeout` runs no shell function

row() {  # row JSON_LINE EXTRA_JSON: adds card, date and the extra keys; appends to results
  python3 -c 'import json, sys; r = json.loads(sys.argv[1]); r.update(json.loads(sys.argv[2])); r.update(card=sys.argv[3], date=sys.argv[4]); print(json.dumps(r))' \
    "$1" "$2" "$card" "$date" | tee -a "$res"
}
last_json() { grep '^{' | tail -n 1; }

batch_of() { case $1 in bert-large) echo "${BERT_BATCH:-32}";; gpt2-medium) echo "${GPT_BATCH:-8}";; *) echo 8;; esac; }

for model in $models; do
  b=$(batch_of "$model")
  for n in 1 "$nproc"; do
    for shard in "" "--shard-optimizer"; do
      [ "$n" = 1 ] && [ -n "$shard" ] && continue
      t0=$SECONDS
      echo "== mutwo $model batch $b x $n GPUs ${shard:-all-reduce} (${SECONDS}s)"
      j=$(timeout -k 5 "${RUN_TIMEOUT:-300}" "${trun[@]}" "$n" --no-python "$m" run --model "$model" --batch "$b" --device cuda \
          --steps "$steps" $shard --json | last_json)
      [ -n "$j" ] && row "$j" "{\"system\": \"mutwo\", \"variant\": \"run${shard:+ sharded}\", \"nproc\": $n, \"seconds\": $((SECONDS - t0))}" \
        || echo "mutwo run $model x $n $shard failed or timed out"
      for budget in $budgets; do
        t0=$SECONDS
        j=$(timeout -k 5 "${OPT_TIMEOUT:-400}" "${trun[@]}" "$n" --no-python "$m" optimize --model "$model" --batch "$b" --device cuda \
            --budget "$budget" --steps "$steps" --check --quiet $shard --out "$out/${model}_${n}_${budget%\%}${shard:+_zero}" --json | last_json)
        [ -n "$j" ] && row "$j" "{\"system\": \"mutwo\", \"variant\": \"optimize $budget${shard:+ sharded}\", \"nproc\": $n, \"seconds\": $((SECONDS - t0))}" \
          || echo "mutwo optimize $model x $n $budget $shard failed or timed out"
      done
    done
  done
  for v in ddp ddp_ckpt fsdp_ckpt; do
    for n in 1 "$nproc"; do
      echo "== pytorch $model $v x $n (${SECONDS}s)"
      j=$(timeout -k 5 "${PEER_TIMEOUT:-300}" "${trun[@]}" "$n" bench/dist_peers.py --model "$model" --batch "$b" --variant "$v" \
          --steps "$steps" | last_json)
      [ -n "$j" ] && row "$j" "{\"nproc\": $n}" || echo "peer $model $v x $n failed or timed out"
    done
  done
done
echo "done in ${SECONDS}s; $res"
