#!/usr/bin/env bash
# Renders the example reports committed in docs/plots/ on the CPU (about a
# minute): a profile's timeline and peak breakdown, the peak by role against
# batch size, a plan's report.md (the greedy's reasoning), plan --sweep's
# trade-off and a sweep whose plans miss their budget at some batches.
# Usage: docs/plots/make.sh [path/to/mutwo]
set -euo pipefail
cd "$(dirname "$0")/../.."
m=${1:-build/src/cli/mutwo}
out=docs/plots
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model="--model transformer-lm"

"$m" profile $model --batch 32 --iters 3 --out "$tmp/profile" --quiet >/dev/null
"$m" plan --profile "$tmp/profile/profile.json" --budget 50% --out "$tmp/profile/plan.json" >/dev/null || true
"$m" report --profile "$tmp/profile/profile.json" --plan "$tmp/profile/plan.json" --out "$tmp/report" >/dev/null
"$m" plan --profile "$tmp/profile/profile.json" --sweep 100,80,60,50,40 --out "$tmp/tradeoff/plan.json" >/dev/null
"$m" profile $model --batches 8,16,32 --iters 1 --out "$tmp/batches" --quiet >/dev/null
"$m" sweep $model --batches 8,16,32 --budget 45% --steps 2 --out "$tmp/sweep" --quiet >/dev/null

rm -rf "$out/profile" "$out/tradeoff" "$out/batches" "$out/sweep"
mkdir -p "$out/profile" "$out/tradeoff" "$out/batches" "$out/sweep"
cp "$tmp"/report/{memory_timeline,peak_breakdown}.{svg,png} "$tmp/report/report.md" "$tmp/profile/plan.csv" "$out/profile/"
cp "$tmp"/tradeoff/tradeoff.{svg,png,csv} "$out/tradeoff/"
cp "$tmp"/batches/peak_vs_batch.{svg,png} "$out/batches/"
cp "$tmp"/sweep/{peak_vs_batch,time_vs_batch}.{svg,png} "$tmp"/sweep/{sweep.csv,report.md} "$out/sweep/"
sed -i "s#$tmp/#DIR/#g" "$out/sweep/report.md"  # its reproduce line, without this run's temporary folder
echo "wrote $out/{profile,tradeoff,batches,sweep}"
