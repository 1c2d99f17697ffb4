#!/usr/bin/env bash
# On the GPU machine: build mutwo against the machine's PyTorch libtorch (CUDA)
# and train the MLP on the GPU. Needs .deps from scripts/vendor-deps.sh when
# Debian's fmt/CLI11/nlohmann-json packages are absent. Output goes to $OUT if set.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build-cuda/out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/card.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/card.txt"
time scripts/build-cuda.sh ${MUTWO_CMAKE_ARGS:-}
build-cuda/src/cli/mutwo run --model mlp --batch 64 --steps 10 --device cuda --json | tee "$out/run_mlp_cuda.txt"
