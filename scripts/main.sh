#!/usr/bin/env bash
# Fresh machine to first result: install dependencies, build, and run the main
# job on the CPU: train the MLP for 10 steps and print losses, peak memory and
# step time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh -DMUTWO_BUILD_TESTS=OFF
build/src/cli/mutwo run --model mlp --batch 64 --steps 10
