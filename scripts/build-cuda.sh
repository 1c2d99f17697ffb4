#!/usr/bin/env bash
# On the GPU machine: configure and build mutwo in build-cuda/ against the
# machine's PyTorch libtorch (CUDA). fmt, CLI11 and nlohmann-json come from
# Debian or from .deps (scripts/vendor-deps.sh, carried to the machine); no CBC
# there. Extra arguments go to cmake. Quiet unless the build fails.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DMUTWO_BUILD_TESTS=OFF -DMUTWO_FMT_HEADER_ONLY=ON -DMUTWO_WITH_CBC=OFF "$@" >build-cuda.log 2>&1 \
  || { tail -n 30 build-cuda.log; exit 1; }
ninja -C build-cuda -j"$(nproc)" mutwo mutwo_torch >>build-cuda.log 2>&1 || { tail -n 40 build-cuda.log; exit 1; }
