#!/usr/bin/env bash
# One device call per model: mutwo plans, Inductor compiles (issue 25),
# beside PyTorch's peers on the same card: eager, per-block checkpointing,
# selective activation checkpointing, plain torch.compile and torch.compile
# at activation_memory_budget 0.5 and 0.2; then mutwo's backend
# (mutwo.torch.backend, compiler="inductor") held to each compile point's
# measured peak and to checkpointing's (inductor@VARIANT in
# bench/graph_peers.py). JSON lines with card, torch and date in
# $OUT/results.jsonl and a table, as bench/wrap_gpu.sh (which this runs).
#
#   CONFIGS="gpt2:8" bench/compile_gpu.sh
#   CONFIGS="llama:8:bf16" bench/compile_gpu.sh
#   CONFIGS="bert:32" bench/compile_gpu.sh
#   CONFIGS="vit_b_16:64" bench/compile_gpu.sh
set -uo pipefail
export VARIANTS=${VARIANTS:-"eager,checkpoint,sac,compile,compile:0.5,compile:0.2,inductor@compile,inductor@compile:0.5,inductor@compile:0.2,inductor@checkpoint"}
export OUT=${OUT:-bench/out/compile}
export VARIANT_TIMEOUT=${VARIANT_TIMEOUT:-200}
exec "$(dirname "$0")/wrap_gpu.sh"
