#!/usr/bin/env bash
# One device call: mutwo from the user's own loop (mutwo.torch.wrap and the
# torch.compile backend) beside PyTorch's peers on the same card: eager,
# per-block torch.utils.checkpoint, selective activation checkpointing and
# torch.compile's activation_memory_budget (bench/graph_peers.py, one
# subprocess per variant). JSON lines with card, torch and date in
# $OUT/results.jsonl, a table at the end. Carry .deps (scripts/vendor-deps.sh).
#
#   CONFIGS="vit_b_16:64 llama:8:bf16 bert:32 gpt2:8" bench/wrap_gpu.sh
#
# A config is MODEL:BATCH or MODEL:BATCH:bf16 (forward under torch.autocast).
# VARIANTS overrides the list below; DEADLINE (s, default 560) bounds the call.
# SDPA=efficient_attention (or math, ...) holds scaled_dot_product_attention to
# one backend: capture refuses cuDNN's and flash's, whose outputs include ints.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-bench/out/wrap}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
configs=${CONFIGS:-"vit_b_16:64 llama:8:bf16 bert:32 gpt2:8"}
variants=${VARIANTS:-"eager,checkpoint,sac,compile:0.5,compile:0.2,wrap:80%,wrap:60%,backend:60%"}
py=${PYTHON:-python3}
steps=${STEPS:-10}
deadline=${DEADLINE:-560}
res="$out/results.jsonl"

timeout -k 5 "${BUILD_TIMEOUT:-420}" scripts/build-cuda.sh || { echo "build failed or timed out"; exit 1; }
echo "built in ${SECONDS}s; $("$py" -c 'import torch; print(torch.cuda.get_device_name(), "torch", torch.__version__)')"

for cfg in $configs; do
  IFS=: read -r model batch autocast <<<"$cfg"
  left=$((deadline - SECONDS - 20))
  if ((left < 30)); then echo "== $cfg skipped: out of time"; continue; fi
  echo "== $cfg (${SECONDS}s)"
  PYTHONUNBUFFERED=1 timeout -k 5 "$left" "$py" bench/graph_peers.py --model "$model" --batch "$batch" --device cuda \
    --steps "$steps" --variants "$variants" --timeout "${VARIANT_TIMEOUT:-150}" --out "$res" --sdpa "${SDPA:-auto}" \
    ${autocast:+--autocast "$autocast"} | cut -c1-400
done

"$py" - "$res" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"\n{'model':<9} {'batch':>5} {'variant':<14} {'peak MiB':>9} {'step ms':>9}  notes")
for r in rows:
    peak, ms = r.get("peak_bytes"), r.get("step_ms")
    note = "ERROR " + r["error"][:90] if "error" in r else (
        f"predicted {r['predicted_peak_bytes'] / 2**20:.0f} MiB, budget {r['budget_bytes'] / 2**20:.0f} MiB, "
        f"{r.get('dropped', r.get('recomputed'))} dropped, {r.get('recompilations', 0)} recompilations"
        if "budget_bytes" in r else "")
    print(f"{r['model']:<9} {r['batch']:>5} {r['variant']:<14} {f'{peak / 2**20:.0f}' if peak else '-':>9} "
          f"{f'{ms:.1f}' if ms else '-':>9}  {note}")
PY
echo "done in ${SECONDS}s; rows in $res"
