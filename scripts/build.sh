#!/usr/bin/env bash
# Configures and builds mutwo (Release, Ninja) against the libtorch inside the
# PyTorch wheel, on every machine: the CPU machine's .venv/ (scripts/install-deps.sh)
# and the GPU machine's python3 alike (MUTWO_PYTHON overrides; CMakeLists.txt).
#   scripts/build.sh [--dir DIR] [--tests|--no-tests] [--cpu-only] [--quiet] [--target T]... [cmake args]
# --dir: the build folder (build/); --tests builds the tests (default: what the
# folder was configured with, ON when new); --cpu-only leaves CUDA's code paths
# out (the CUDA switch, -DMUTWO_CUDA=OFF; by default they are built whenever the
# wheel has CUDA, GPU or not); --quiet prints only a failure's tail; --target
# builds those targets alone. Without COIN-OR CBC the optimal planner is left out.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build quiet=0 targets=() args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift ;;
    --tests) args+=(-DMUTWO_BUILD_TESTS=ON) ;;
    --no-tests) args+=(-DMUTWO_BUILD_TESTS=OFF) ;;
    --cpu-only) args+=(-DMUTWO_CUDA=OFF) ;;
    --quiet) quiet=1 ;;
    --target) targets+=("$2"); shift ;;
    *) args+=("$1") ;;
  esac
  shift
done
[ -n "${MUTWO_PYTHON:-}" ] && args+=(-DMUTWO_PYTHON="$MUTWO_PYTHON")
if ! pkg-config --exists cbc 2>/dev/null; then
  echo "build: COIN-OR CBC not found (pkg-config cbc): the optimal planner is left out" >&2
  args+=(-DMUTWO_WITH_CBC=OFF)
fi
log="$dir.log"
run() {  # runs a step, its output in $log when quiet
  if [ "$quiet" = 1 ]; then "$@" >>"$log" 2>&1 || { tail -n 40 "$log"; exit 1; }; else "$@"; fi
}
: >"$log"
start=$(date +%s)
# -U SKBUILD*: scripts/test-install.sh's pip install . may have built in this
# folder (reusing its objects), which leaves scikit-build-core's settings cached.
run cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -U 'SKBUILD*' "${args[@]}"
run ninja -C "$dir" -j"$(nproc)" "${targets[@]}"
echo "build: $dir in $(( $(date +%s) - start )) s"
