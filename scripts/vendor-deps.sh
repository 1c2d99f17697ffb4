#!/usr/bin/env bash
# Copies the headers of CLI11 and nlohmann-json from this Debian machine
# into .deps/include (git-ignored), for machines without those packages: the
# GPU machine, which gets .deps through the device tool's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
rm -rf .deps && mkdir -p .deps/include
cp -r /usr/include/CLI /usr/include/nlohmann .deps/include/
echo "vendor-deps: $(du -sh .deps | cut -f1) of headers in .deps/include"
