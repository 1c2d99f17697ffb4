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
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DMUTWO_BUILD_TESTS=OFF -DMUTWO_FMT_HEADER_ONLY=ON -DMUTWO_WITH_CBC=OFF ${MUTWO_CMAKE_ARGS:-} 2>&1 | grep -E "mutwo|Error|error|Found" || true
time ninja -C build-cuda -j"$(nproc)" mutwo
build-cuda/src/cli/mutwo run --model mlp --batch 64 --steps 10 --device cuda --json | tee "$out/run_mlp_cuda.txt"
