#!/usr/bin/env bash
# Fresh machine to green: install dependencies (scripts/install-deps.sh: Debian
# packages and .venv/ with requirements.txt), build everything with the CUDA
# code paths compiled, run every test (build/: unit, core, CLI errors, the
# fuzzer, pytest), pip install . and use it from /tmp (scripts/test-install.sh),
# then the sanitizer job (scripts/test-sanitize.sh: build-asan/, ASan + UBSan).
# What CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
scripts/build.sh --tests
# CTest's entries are independent: as many at once as there are cores (the
# python entry, the longest, starts first once CTest has timed a run).
ctest --test-dir build --output-on-failure -j"$(nproc)"
echo "test.sh: all tests passed in $(( $(date +%s) - start )) s; now pip install ."
scripts/test-install.sh
echo "test.sh: installed and used in $(( $(date +%s) - start )) s; now the sanitizer job"
scripts/test-sanitize.sh
echo "test.sh: everything passed in $(( $(date +%s) - start )) s"
