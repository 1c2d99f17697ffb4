#!/usr/bin/env bash
# On the GPU machine: one call of bench/run.py's frontier config (or CONFIG's:
# dist-compile, on the config's two ranks) for one model.
# The extension is built into build-cuda/ (a warm machine keeps it between
# calls): before the runs, or after them with BUILD=after (the ladder of
# compile:X needs no extension; building after it leaves its compile times
# undisturbed). The rows are kept in build-cuda/CONFIG-rows/ too, so that a
# following call on the same warm machine finds the peers' peaks
# (BENCH_PEAKS) even when they were not brought back.
#   [BUILD=first|after] [CONFIG=frontier|dist-compile] [GPUS=N] scripts/gpu-frontier.sh COMMIT MODELS VARIANTS [SECONDS]
# MODELS is one model or several, space-separated. GPUS=N is bench/run.py's
# --gpus: for frontier each model on a card of its own, N at a time, its
# processes on its share of the cores (their log, $OUT/units-log.txt); for
# dist-compile the ranks (the config's 2 when not given).
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
# shellcheck disable=SC2086  # $model: one or several models, one argument each
MUTWO_COMMIT=$commit PYTHONUNBUFFERED=1 python3 bench/run.py "$config" --mutwo /bin/true --device cuda \
    --models $model ${GPUS:+--gpus "$GPUS"} --variants "$variants" --deadline "$(left)" --out "$OUT" || true
if [ -e "$OUT/results.jsonl" ]; then cp "$OUT/results.jsonl" "$rows/$(date +%s).jsonl"; fi
# The cards' own folders, each log in one file: what comes back from $OUT is a few files.
for unit in "$OUT"/unit*/; do
    [ -d "$unit" ] && { echo "== $unit"; cat "$unit/log.txt" 2>/dev/null; rm -rf "$unit"; } >> "$OUT/units-log.txt"
done
[ "${BUILD:-first}" = after ] && [ "$(left)" -gt 60 ] && build
echo "call done, $(left) s left of $seconds"
