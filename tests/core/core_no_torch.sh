#!/usr/bin/env bash
# CTest `core_no_torch`: the ATen-free core (src/aten_free.txt, the one list)
# stays free of libtorch.
#   core_no_torch.sh BUILD_DIR SOURCE_DIR BIN...
# Each BIN (mutwo_core_tests, and the fuzzer's loader mutwo_load) loads no
# libtorch or c10 (ldd); its link line in BUILD_DIR/build.ninja names none; no
# source the list names includes an ATen, c10 or torch header (a system
# libtorch, as Debian's, puts those on the default include path, so a compile
# here would not notice); and docs/layout.md names the list's targets, in its
# order. (CMake checks that each target's sources are listed and that it links
# nothing outside the list.)
set -euo pipefail
build=$1 src=$(realpath "$2")
shift 2
[ $# -gt 0 ] || { echo "usage: core_no_torch.sh BUILD_DIR SOURCE_DIR BIN..."; exit 2; }
fail() { echo "$@"; exit 1; }

for bin in "$@"; do
  bin=$(realpath "$bin") name=$(basename "$bin")
  found=$(ldd "$bin" | awk '{print $1}' | grep -Ei 'torch|c10' || true)  # the names, not the load addresses
  [ -z "$found" ] || fail "$bin loads libtorch: $found"
  if [ -f "$build/build.ninja" ]; then
    link=$(grep -A8 "^build tests/$name:" "$build/build.ninja" | grep -m1 'LINK_LIBRARIES' || true)
    [ -n "$link" ] || fail "no link line for $name in $build/build.ninja"
    ! grep -Eqi 'torch|c10' <<<"$link" || fail "$name's link line names libtorch: $link"
  fi
done

list="$src/src/aten_free.txt"
targets=$(grep -E '^[A-Za-z_]+:' "$list" | cut -d: -f1)
read -ra core <<<"$(grep -E '^[A-Za-z_]+:' "$list" | cut -d: -f2- | tr '\n' ' ')"
[ "${#core[@]}" -gt 0 ] || fail "$list lists no sources"
cd "$src/src"
for path in "${core[@]}"; do [ -e "$path" ] || fail "$list names src/$path, which does not exist"; done
includes=$(grep -rnE '^\s*#\s*include\s*[<"](ATen|c10|torch)/' "${core[@]}" || true)
[ -z "$includes" ] || fail "the ATen-free core includes libtorch headers: $includes"

# docs/layout.md's sentence "The core (`mutwo_support`, ...)" names the same targets in the same order.
documented=$(tr '\n' ' ' <"$src/docs/layout.md" | grep -o 'The core ([^)]*)' | grep -o '`mutwo_[a-z_]*`' | tr -d '`' || true)
[ "$documented" = "$targets" ] || fail "docs/layout.md's core ($(echo $documented)) is not src/aten_free.txt's ($(echo $targets))"

echo "$(for b in "$@"; do basename "$b"; done | paste -sd, -): no libtorch among their shared libraries; no source of" \
     "the $(wc -w <<<"$targets") core targets (src/aten_free.txt) includes its headers; docs/layout.md lists them"
