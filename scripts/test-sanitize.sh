#!/usr/bin/env bash
# The sanitizer job (CI runs it after scripts/test.sh): what parses input,
# built with AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/
# (-O1, MUTWO_SANITIZE), without libtorch: the ATen-free core
# (src/aten_free.txt: every loader of step files and their tensor files'
# index, IR, profiles and plans), its tests (mutwo_core_tests) and the
# fuzzer's loader (mutwo_load, tests/fuzz/load.cpp); then those tests and
# FUZZ_MUTATIONS (500) seeded mutations per parser through the sanitized
# loader, in process (tests/fuzz/fuzz.py). Any sanitizer report, a leak
# included, fails the job.
# SANITIZE_UNIT=1 adds what links libtorch, the second build of most of
# mutwo that CI leaves out (too slow for every push): the CLI, whose own argument parsing
# and runs the fuzzer then drives on the seeds and FUZZ_CLI_MUTATIONS (20)
# mutations per parser, and the unit tests but the slowest (UNIT_FILTER).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
unit=${SANITIZE_UNIT:-0}
# Not the Python extension (loading an ASan library into python needs LD_PRELOAD).
# CPU paths only: the main build compiles CUDA's, and nothing runs them here.
targets=(--target mutwo_core_tests --target mutwo_load)
[ "$unit" = 1 ] && targets+=(--target mutwo --target mutwo_tests)
scripts/build.sh --dir build-asan --tests --cpu-only --quiet -DMUTWO_SANITIZE=ON "${targets[@]}"
echo "test-sanitize.sh: built in $(( $(date +%s) - start )) s"

# Leaks are reported in the core's processes, which load no libtorch. With
# SANITIZE_UNIT=1, detect_leaks=0: libtorch (not instrumented) keeps its
# operator registry and thread pools alive until exit, which LeakSanitizer
# reports as leaks in every process that loads it.
# On a CUDA machine add protect_shadow_gap=0 (the driver maps memory where
#   ASan keeps its shadow gap); CI runs on the CPU.
export ASAN_OPTIONS=detect_leaks=$(( 1 - unit )):exitcode=86
# Every UBSan report is fatal (the build uses -fno-sanitize-recover).
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87
export OMP_NUM_THREADS=1

# The core tests but the planners' searches (the main job runs them): they read
# no input, and the optimal planner's MILPs take minutes under ASan.
build-asan/tests/mutwo_core_tests --gtest_brief=1 --gtest_filter="${CORE_FILTER:--PlannerProperties.*:Optimal.*}"
fuzz=(--load build-asan/tests/mutwo_load --mutations "${FUZZ_MUTATIONS:-500}" --seed 7)
if [ "$unit" = 1 ]; then
  # The unit tests but three slow suites (the main job runs them): ResnetOracle runs torchvision in Python
  # beside ResNet-18/50, LmTraining takes 200 Adam steps, ResnetMemory a ResNet-18 step (19, 13 and 5 s under ASan).
  build-asan/tests/mutwo_tests --gtest_brief=1 --gtest_filter="${UNIT_FILTER:--ResnetOracle.*:LmTraining.*:ResnetMemory.*}"
  fuzz+=(--cli build-asan/src/cli/mutwo --cli-mutations "${FUZZ_CLI_MUTATIONS:-20}")
fi
"${MUTWO_PYTHON:-.venv/bin/python}" tests/fuzz/fuzz.py "${fuzz[@]}"
echo "test-sanitize.sh: passed in $(( $(date +%s) - start )) s"
