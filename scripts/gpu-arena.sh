#!/usr/bin/env bash
# On the GPU machine: the arena on CUDA (issue 36; docs/budgets.md, "The
# arena"), in one device call. Builds the CLI and the unit tests into
# build-cuda/, runs the arena's unit tests (Rewrite.ArenaStep*: the same bits
# with and without the arena, no storage missed), then `mutwo run` of each
# MODEL:BATCH with and without --arena, one JSON line each in
# $OUT/arena.jsonl (peak_bytes, reserved_peak_bytes, arena_bytes, the
# fallbacks): the reserve against the arena is what the issue asks about.
#   scripts/gpu-arena.sh [MODEL:BATCH ...]      (default: mlp:64 bert-base:8)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build-cuda}
mkdir -p "$out"
scripts/build-cuda.sh
# The unit tests need GoogleTest, which a GPU machine may not have: without it, the CLI runs alone.
# A failing test does not stop the runs below (the first call on a card lost them so); the script
# still exits non-zero at its end.
failed=0
if scripts/build.sh --dir build-cuda --tests --quiet --target mutwo_tests; then
    build-cuda/tests/mutwo_tests --gtest_filter='Rewrite.Arena*' || failed=1
else
    echo "gpu-arena: the unit tests did not build here (GoogleTest?); the CLI runs only"
fi
for entry in ${*:-mlp:64 bert-base:8}; do
    model=${entry%%:*} batch=${entry##*:}
    for arena in "" --arena; do
        build-cuda/src/cli/mutwo run --model "$model" --batch "$batch" --steps 3 --device cuda $arena --json |
            tail -n 1 | python3 -c 'import json, sys; r = json.loads(sys.stdin.read());
r.update(model=sys.argv[1], batch=int(sys.argv[2]), arena=sys.argv[3] == "--arena"); print(json.dumps(r))' \
            "$model" "$batch" "${arena:-none}" | tee -a "$out/arena.jsonl"
    done
done
exit "$failed"
