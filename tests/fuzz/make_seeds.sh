#!/usr/bin/env bash
# Remakes the fuzz seeds in tests/fuzz/seeds/ (committed; fuzz.py checks that
# each still runs): the mlp at batch 8 (its profile and its step as IR text),
# a plan of transformer-lm at batch 2 that recomputes activations, and a tiny
# captured module with a conv, batch norm, dropout and a linear layer
# (step.json and step.safetensors, through Debian's python3-torch).
set -euo pipefail
mutwo=$(realpath "${1:?usage: make_seeds.sh path/to/mutwo}")
here=$(cd "$(dirname "$0")" && pwd)
seeds=$here/seeds
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$seeds"
"$mutwo" profile --model mlp --batch 8 --iters 1 --warmup 0 --out "$tmp/prof" --quiet >/dev/null
cp "$tmp/prof/profile.json" "$seeds/profile.json"
"$mutwo" profile --model transformer-lm --batch 2 --iters 1 --warmup 0 --out "$tmp/lm" --quiet >/dev/null
"$mutwo" plan --profile "$tmp/lm/profile.json" --budget 90% --out "$tmp/plan.json" >/dev/null
cp "$tmp/plan.json" "$seeds/plan.json"
"$mutwo" show --model mlp --batch 8 >"$seeds/mlp.ir"
PYTHONPATH="$here/../../python" /usr/bin/python3 - "$seeds" <<'PY'
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F
from mutwo.capture import capture

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Dropout(0.1), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
images, labels = torch.randn(2, 1, 6, 6), torch.tensor([0, 2])
capture(model, (images, labels), lambda m, x, y: F.cross_entropy(m(x), y), f"{sys.argv[1]}/step.json")
PY
ls -l "$seeds"
