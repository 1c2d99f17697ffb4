#!/usr/bin/env bash
# Fresh machine to first result: install dependencies, build, and run the main
# job on the CPU: plan, rewrite and run the transformer LM's training step under
# 60% of its peak memory, and print the before/after table with the bitwise check.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh --no-tests
build/src/cli/mutwo optimize --model transformer-lm --budget 60% --check --out out/optimize
