#!/usr/bin/env bash
# One device call (after scripts/build-cuda.sh): the vocabulary chunks grown back after planning
# (plan::grow_chunks) against the same plan at choose_chunks' 32-row chunks,
# GPT-2 small at batch 8 at PyTorch's per-block checkpoint peak.
m=build-cuda/src/cli/mutwo
card=$(python3 -c "import torch;print(torch.cuda.get_device_name())")
$m profile --model gpt2-small --batch 8 --device cuda --quiet --out /tmp/pg >/dev/null 2>&1
$m plan --profile /tmp/pg/profile.json --budget 6400000000 --no-swap --out /tmp/pg/plan_new.json >/dev/null 2>&1
python3 - <<'PY'
import json
p = json.load(open("/tmp/pg/plan_new.json"))
print("grown chunks", p["chunks"])
for c in p["chunks"]: c["chunk_rows"] = 32
json.dump(p, open("/tmp/pg/plan_32rows.json", "w"))
PY
for v in new-32rows new new-swap; do
  case $v in new-32rows) a="--plan /tmp/pg/plan_32rows.json";; new) a="--plan /tmp/pg/plan_new.json";; new-swap) a="--budget 6400000000";; esac
  $m optimize --model gpt2-small --batch 8 --device cuda $a --steps 5 --out /tmp/og_$v --json --quiet 2>>/tmp/og_err.txt | tail -1 | python3 -c "
import json,sys; j=json.loads(sys.stdin.read()); p=j['planned']; b=j['baseline']
print(json.dumps(dict(variant='$v', card='$card', date='$(date +%F)', model='gpt2-small', batch=8, budget_bytes=j['budget_bytes'], fits=j['fits'], peak_bytes=p['peak_bytes'], predicted_peak_bytes=p['predicted_peak_bytes'], step_ms=p['step_ms'], predicted_extra_ms=p['predicted_extra_ms'], baseline_step_ms=b['step_ms'], dropped=p['dropped'], swapped=p['swapped'])))" | tee -a $OUT/chunks.jsonl
  python3 -c "import json; print(json.load(open('/tmp/og_$v/plan.json'))['chunks'])"
done
tail -c 1500 /tmp/og_err.txt | grep -v gnuplot
