#!/usr/bin/env bash
# CTest `core_no_torch`: the ATen-free core stays free of libtorch.
#   core_no_torch.sh BIN BUILD_DIR SOURCE_DIR
# BIN (mutwo_core_tests) loads no libtorch or c10 (ldd); its link line in
# BUILD_DIR/build.ninja names none; and no source of the core's folders
# includes an ATen, c10 or torch header (a system libtorch, as Debian's, puts those on
# the default include path, so a compile here would not notice).
set -euo pipefail
bin=$(realpath "$1") build=$2 src=$3
fail() { echo "$@"; exit 1; }

found=$(ldd "$bin" | awk '{print $1}' | grep -Ei 'torch|c10' || true)  # the names, not the load addresses
[ -z "$found" ] || fail "$bin loads libtorch: $found"

if [ -f "$build/build.ninja" ]; then
  link=$(grep -A8 "^build tests/mutwo_core_tests:" "$build/build.ninja" | grep -m1 'LINK_LIBRARIES' || true)
  [ -n "$link" ] || fail "no link line for mutwo_core_tests in $build/build.ninja"
  ! grep -Eqi 'torch|c10' <<<"$link" || fail "mutwo_core_tests' link line names libtorch: $link"
fi

cd "$src/src"
core=(support ir ops analysis autodiff dist models stepfile rewrite plan report
      profile/profile.h profile/profile_io.cpp profile/describe.cpp)
includes=$(grep -rnE '^\s*#\s*include\s*[<"](ATen|c10|torch)/' "${core[@]}" || true)
[ -z "$includes" ] || fail "the ATen-free core includes libtorch headers: $includes"

echo "$(basename "$bin"): $(ldd "$bin" | grep -c '=>') shared libraries, none of them libtorch; no core source includes its headers"
