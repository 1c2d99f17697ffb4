#!/usr/bin/env bash
# On the GPU machine: one call of bench/run.py's frontier config for one model.
# The extension is built into build-cuda/ (a warm machine keeps it between
# calls): before the runs, or after them with BUILD=after (the ladder of
# compile:X needs no extension; building after it leaves its compile times
# undisturbed). The rows are kept in build-cuda/frontier-rows/ too, so that a
# following call on the same warm machine finds the ladder's peaks
# (BENCH_PEAKS) even when they were not brought back.
#   [BUILD=first|after] [GPUS=N] scripts/gpu-frontier.sh COMMIT MODELS VARIANTS [SECONDS]
# MODELS is one model or several, space-separated; with GPUS=N (default 1)
# each model runs on a card of its own (bench/run.py --gpus), N at a time.
# SECONDS (default 570) bounds the whole call, the build included.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$1 model=$2 variants=$3 seconds=${4:-570}
start=$(date +%s)
left() { echo $(( seconds - ($(date +%s) - start) )); }
build() {
    local t0; t0=$(date +%s)
    if ! python3 -c "import sys; sys.path.insert(0, 'python'); from mutwo import _ext; _ext.ops()" 2>/dev/null; then
        timeout "$(left)" scripts/build.sh --dir build-cuda --no-tests --quiet --target mutwo_torch
    fi
    echo "extension ready in $(( $(date +%s) - t0 )) s"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
[ "${BUILD:-first}" = first ] && build
mkdir -p build-cuda/frontier-rows
if [ -z "${BENCH_PEAKS:-}" ] && ls build-cuda/frontier-rows/*.jsonl >/dev/null 2>&1; then
    cat build-cuda/frontier-rows/*.jsonl > build-cuda/peaks.jsonl
    export BENCH_PEAKS=$PWD/build-cuda/peaks.jsonl
fi
echo "BENCH_PEAKS=${BENCH_PEAKS:-}"
MUTWO_COMMIT=$commit PYTHONUNBUFFERED=1 python3 bench/run.py frontier --mutwo /bin/true --device cuda \
    --models $model --gpus "${GPUS:-1}" --variants "$variants" --deadline "$(left)" --out "$OUT" || true
if [ -e "$OUT/results.jsonl" ]; then cp "$OUT/results.jsonl" "build-cuda/frontier-rows/$(date +%s).jsonl"; fi
[ "${BUILD:-first}" = after ] && [ "$(left)" -gt 60 ] && build
echo "call done, $(left) s left of $seconds"
