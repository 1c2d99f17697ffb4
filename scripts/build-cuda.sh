#!/usr/bin/env bash
# On the GPU machine: scripts/build.sh into build-cuda/, the CLI and the
# extension alone, quiet unless it fails (what the bench scripts call).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/build.sh --dir build-cuda --no-tests --quiet --target mutwo --target mutwo_torch "$@"
