#!/usr/bin/env bash
# The sanitizer job (CI runs it after scripts/test.sh): what parses input,
# built with AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/
# (-O1, MUTWO_SANITIZE): the CLI (every loader: step files, IR, profiles,
# plans) and the ATen-free core's tests; then those tests and a fuzz corpus of
# FUZZ_MUTATIONS (70) mutations per parser (seeded) over the sanitized CLI.
# SANITIZE_UNIT=1 adds the unit tests but the slowest (UNIT_FILTER), a second
# build of most of mutwo that CI leaves out to stay in time (issue 28). Any
# sanitizer report fails the job.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# The CLI and the tests; not the Python extension (loading an ASan library into python needs LD_PRELOAD).
# CPU paths only: the main build compiles CUDA's, and nothing runs them here.
targets=(--target mutwo --target mutwo_core_tests)
[ "${SANITIZE_UNIT:-0}" = 1 ] && targets+=(--target mutwo_tests)
scripts/build.sh --dir build-asan --tests --cpu-only --quiet -DMUTWO_SANITIZE=ON "${targets[@]}"
echo "test-sanitize.sh: built in $(( $(date +%s) - start )) s"

# detect_leaks=0: libtorch (not instrumented) keeps its operator registry and
#   thread pools alive until exit, which LeakSanitizer reports as leaks in
#   every process; leaks in mutwo's own code are not what this job checks.
# On a CUDA machine add protect_shadow_gap=0 (the driver maps memory where
#   ASan keeps its shadow gap); CI runs on the CPU.
export ASAN_OPTIONS=detect_leaks=0:exitcode=86
# Every UBSan report is fatal (the build uses -fno-sanitize-recover).
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=87
export OMP_NUM_THREADS=1

build-asan/tests/mutwo_core_tests --gtest_brief=1
# The unit tests but three slow suites (the main job runs them): ResnetOracle runs torchvision in Python
# beside ResNet-18/50, LmTraining takes 200 Adam steps, ResnetMemory a ResNet-18 step (19, 13 and 5 s under ASan).
if [ "${SANITIZE_UNIT:-0}" = 1 ]; then
  build-asan/tests/mutwo_tests --gtest_brief=1 --gtest_filter="${UNIT_FILTER:--ResnetOracle.*:LmTraining.*:ResnetMemory.*}"
fi
"${MUTWO_PYTHON:-.venv/bin/python}" tests/fuzz/fuzz.py build-asan/src/cli/mutwo --mutations "${FUZZ_MUTATIONS:-70}" --seed 7
echo "test-sanitize.sh: passed in $(( $(date +%s) - start )) s"
