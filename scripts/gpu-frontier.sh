#!/usr/bin/env bash
# On the GPU machine: one call of bench/run.py's frontier config (or CONFIG's:
# dist-compile, on the config's two ranks) for one model.
# The extension is built into build-cuda/ (a warm machine keeps it between
# calls): before the runs, or after them with BUILD=after (the ladder of
# compile:X needs no extension; building after it leaves its compile times
# undisturbed). The rows are kept in build-cuda/CONFIG-rows/ too, so that a
# following call on the same warm machine finds the peers' peaks
# (BENCH_PEAKS) even when they were not brought back.
#   [BUILD=first|after] [CONFIG=frontier|dist-compile] scripts/gpu-frontier.sh COMMIT MODEL VARIANTS [SECONDS]
# SECONDS (default 570) bounds the whole call, the build included.
set -euo pipefail
cd "$(dirname "$0")/.."
commit=$1 model=$2 variants=$3 seconds=${4:-570} config=${CONFIG:-frontier}
rows=build-cuda/$config-rows
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
mkdir -p "$rows"
if [ -z "${BENCH_PEAKS:-}" ] && ls "$rows"/*.jsonl >/dev/null 2>&1; then
    cat "$rows"/*.jsonl > build-cuda/peaks.jsonl
    export BENCH_PEAKS=$PWD/build-cuda/peaks.jsonl
fi
echo "BENCH_PEAKS=${BENCH_PEAKS:-}"
MUTWO_COMMIT=$commit PYTHONUNBUFFERED=1 python3 bench/run.py "$config" --mutwo /bin/true --device cuda \
    --models "$model" --variants "$variants" --deadline "$(left)" --out "$OUT" || true
if [ -e "$OUT/results.jsonl" ]; then cp "$OUT/results.jsonl" "$rows/$(date +%s).jsonl"; fi
[ "${BUILD:-first}" = after ] && [ "$(left)" -gt 60 ] && build
echo "call done, $(left) s left of $seconds"
