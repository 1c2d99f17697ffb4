#!/usr/bin/env bash
# Fresh machine to green: install dependencies, build everything, run every
# test (build/: unit, core, CLI errors, the fuzzer, pytest), then the sanitizer
# job (scripts/test-sanitize.sh: build-asan/, ASan + UBSan). What CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
scripts/build.sh -DMUTWO_BUILD_TESTS=ON
ctest --test-dir build --output-on-failure
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s; now the sanitizer job"
scripts/test-sanitize.sh
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
