#!/usr/bin/env bash
# One device call on a several-GPU machine: issue 13's capped-card comparison
# with every job on a card of its own at once (the cap is per process, and
# cudaMemGetInfo, which counts the context, sees only this process on its
# card). Jobs, per cap in CAPS and model in MODELS: mutwo's max-batch answers
# trained under the cap (bench/capped_gpu.sh), and PyTorch eager and per-block
# checkpointing's largest batches under the same cap (bench/capped_peers.py,
# started from HINTS). Jobs go round-robin to the GPUs; each GPU runs its own
# in turn. With CUDA_GRAPH_CHECK=1 the first GPU first measures --cuda-graph's
# reserved bytes beside a node-by-node run; WITH_PEERS=0 leaves PyTorch out.
# Results in $OUT/results.jsonl.
#
#   CAPS=16GiB bench/capped_4gpu.sh        (on nvidia-h100-x4)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/capped4}
mkdir -p "$out"
timeout -k 5 "${BUILD_TIMEOUT:-300}" scripts/build-cuda.sh >"$out/build.txt" 2>&1 || { tail -20 "$out/build.txt"; exit 1; }
echo "built in ${SECONDS}s"
m=build-cuda/src/cli/mutwo
gpus=$(nvidia-smi -L | wc -l)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-12}
declare -A hints=([8GiB-resnet-152]="eager=40,ckpt=109" [8GiB-bert-base]="eager=58,ckpt=130"
                  [16GiB-resnet-152]="eager=85,ckpt=230" [16GiB-bert-base]="eager=100,ckpt=270")
jobs=()
for cap in ${CAPS:-8GiB 16GiB}; do
  for model in ${MODELS:-resnet-152 bert-base}; do
    jobs+=("CAPS=$cap MODELS=$model PEERS=0 DEVICE=cuda MUTWO=$m WORK=$out/work OUT=$out/$cap-$model bench/capped_gpu.sh >/dev/null 2>&1")
    [ "${WITH_PEERS:-1}" = 1 ] && jobs+=("mkdir -p $out/peers-$cap-$model && timeout -k 5 ${PEERS_TIMEOUT:-400} python3 bench/capped_peers.py --cap $cap --models $model --hints ${hints[$cap-$model]:-} >$out/peers-$cap-$model/results.jsonl 2>$out/peers-$cap-$model/log.txt")
  done
done
for ((g = 0; g < gpus; g++)); do
  ( export CUDA_VISIBLE_DEVICES=$g
    if [ "$g" = 0 ] && [ "${CUDA_GRAPH_CHECK:-0}" = 1 ]; then
      for graph in "" --cuda-graph; do  # what the device holds for a replayed step, beside node by node
        $m run --model bert-base --batch 32 --device cuda --optimizer sgd --steps 5 $graph --json 2>/dev/null | tail -n 1 \
          | python3 -c 'import json, sys; j = json.loads(sys.stdin.read()); print(json.dumps({k: j.get(k) for k in ("cuda_graph", "peak_bytes", "reserved_peak_bytes", "device_peak_bytes", "step_ms")}))' \
          >>"$out/cuda_graph.jsonl"
      done
    fi
    for ((j = g; j < ${#jobs[@]}; j += gpus)); do eval "${jobs[$j]}"; done ) &
done
wait
cat "$out"/*/results.jsonl > "$out/results.jsonl" 2>/dev/null
cat "$out/cuda_graph.jsonl" 2>/dev/null
for f in "$out"/*/log.txt; do echo "== $f"; grep -v "^  \|max-batch: " "$f" | tail -n 8; done
echo "done in ${SECONDS}s"
