#!/usr/bin/env bash
# The CLI's bad inputs: each exits with code 2 and one clear line on stderr;
# and the good path ends with one JSON line holding losses, peak and step time.
set -u
mutwo=${1:?usage: cli_errors.sh path/to/mutwo}
fails=0

expect_error() {  # expect_error "needle" args...
  local needle=$1; shift
  local err code
  err=$("$mutwo" "$@" 2>&1 >/dev/null); code=$?
  if [ "$code" -ne 2 ]; then echo "FAIL: mutwo $* exited $code, expected 2 ($err)"; fails=$((fails+1)); return; fi
  if ! grep -qF -- "$needle" <<<"$err"; then echo "FAIL: mutwo $*: message lacks '$needle': $err"; fails=$((fails+1)); return; fi
  if [ "$(wc -l <<<"$err")" -ne 1 ]; then echo "FAIL: mutwo $*: message is not one line: $err"; fails=$((fails+1)); return; fi
  echo "ok: mutwo $* -> $err"
}

expect_error "unknown model 'nope'" run --model nope --steps 1
expect_error "--batch" run --batch abc
expect_error "--batch" run --batch -3
expect_error "--steps" run --steps 0
expect_error "unknown device 'tpu'" run --device tpu --steps 1
expect_error "--optimizer" run --optimizer rmsprop
expect_error "frobnicate" frobnicate
expect_error "--dropout" run --dropout 1.5
expect_error "--cuda-graph needs --device cuda" run --model mlp --cuda-graph --steps 1
expect_error "bias correction" run --model mlp --optimizer adam --cuda-graph --steps 1
expect_error "--no-fuse-loss requires --graph" run --model mlp --no-fuse-loss --steps 1
bad_ir=$(mktemp); echo "not a graph" >"$bad_ir"
expect_error "--graph $bad_ir: line 1" run --graph "$bad_ir" --steps 1
rm -f "$bad_ir"
if "$mutwo" run --device cuda --steps 1 >/dev/null 2>&1 || [ $? -ne 2 ]; then
  echo "note: this build has CUDA; skipping the no-CUDA check"
else
  expect_error "CUDA" run --device cuda --steps 1
fi

out=$("$mutwo" run --model mlp --batch 16 --steps 3 --json) || { echo "FAIL: mutwo run failed"; fails=$((fails+1)); }
last=$(tail -n 1 <<<"$out")
for key in '"losses":[' '"peak_bytes":' '"reserved_peak_bytes":' '"step_ms":'; do
  grep -qF "$key" <<<"$last" || { echo "FAIL: last line lacks $key: $last"; fails=$((fails+1)); }
done
# On CPU nothing is cached: reserved equals allocated.
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(r["reserved_peak_bytes"] != r["peak_bytes"])' "$last" \
  || { echo "FAIL: CPU reserved peak differs from the allocated peak: $last"; fails=$((fails+1)); }

info=$("$mutwo" info --model mlp --batch 8 --json | tail -n 1)
grep -qF '"parameters":669706' <<<"$info" || { echo "FAIL: info: $info"; fails=$((fails+1)); }
grep -qF '"nodes":' <<<"$info" || { echo "FAIL: info lacks nodes: $info"; fails=$((fails+1)); }
expect_error "--image-size" info --image-size 0
expect_error "--data" run --data /nonexistent/file.txt

# optimize measures the baseline and the plan each from an empty allocator
# (nothing the profile or the other measurement made is still allocated), and
# on CPU the plan's measured peak is its prediction, to the byte, so a plan
# fits exactly when it is feasible. (Whether the greedy reaches 60% here
# depends on the measured node times: under load it once missed by 0.8%.)
opt_dir=$(mktemp -d)
last=$("$mutwo" optimize --model transformer-lm --batch 8 --budget 60% --out "$opt_dir" --json --quiet | tail -n 1)
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); b,p=r["baseline"],r["planned"]
sys.exit(not (b["leftover_bytes"] == 0 == p["leftover_bytes"] and p["peak_bytes"] == p["predicted_peak_bytes"]
              and r["fits"] == r["feasible"]))' "$last" \
  || { echo "FAIL: optimize: $last"; fails=$((fails+1)); }
rm -rf "$opt_dir"

# Issue 16: bert-tiny at batch 16, whose 30,522-word head made 238.5 MiB of
# logits, fits 60% of its unplanned peak: its head is one linear_cross_entropy
# (the logits never whole), its chunk picked under the budget; --check passes
# (exit 0) and the measured peak is within the budget.
vocab_dir=$(mktemp -d)
last=$("$mutwo" optimize --model bert-tiny --batch 16 --budget 60% --steps 1 --check --out "$vocab_dir" --json --quiet | tail -n 1)
code=${PIPESTATUS[0]}
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); p=r["planned"]
sys.exit(not (r["fits"] and r["feasible"] and r["check"] == "passed" and p["peak_bytes"] <= r["budget_bytes"]))' "$last" \
  && [ "$code" -eq 0 ] && echo "ok: optimize bert-tiny --batch 16 --budget 60% --check fits" \
  || { echo "FAIL: optimize bert-tiny --batch 16 --budget 60% --check (exit $code): $last"; fails=$((fails+1)); }
rm -rf "$vocab_dir"

# No plan fits: plan and optimize exit 3 after writing the best plan, with one
# line naming the lowest reachable peak and what it holds.
inf_dir=$(mktemp -d)
"$mutwo" profile --model mlp --batch 8 --out "$inf_dir" --quiet >/dev/null 2>&1
for cmd in "plan --profile $inf_dir/profile.json --budget 1KiB --out $inf_dir/plan.json" \
           "optimize --model mlp --batch 8 --budget 1KiB --steps 1 --quiet --out $inf_dir/opt"; do
  err=$("$mutwo" $cmd 2>&1 >/dev/null); code=$?
  if [ "$code" -eq 3 ] && grep -q "no plan fits the budget 1.0 KiB: the lowest peak the mutwo planner reaches is [0-9.]* [KMG]*i*B = [0-9]* B (.*parameter.*working set of the peak node, [a-z_]*: its inputs, outputs and workspace, [0-9.]* [KMG]*i*B)" <<<"$err" \
     && [ "$(wc -l <<<"$err")" -eq 1 ]; then
    echo "ok: mutwo $cmd -> exit 3: $err"
  else
    echo "FAIL: mutwo $cmd exited $code, expected 3 with the floor named: $err"; fails=$((fails+1))
  fi
done
[ -s "$inf_dir/plan.json" ] && [ -s "$inf_dir/opt/plan.json" ] || { echo "FAIL: an infeasible plan was not written"; fails=$((fails+1)); }
rm -rf "$inf_dir"

# --device-memory stands in for a smaller card, on the CPU too: a step past
# the cap runs out of memory; optimize still plans and runs a step whose
# unplanned peak (1.4 MiB) does not fit 1.2 MiB, profiling it under the
# greedy's most recomputation, and checks it against that step.
err=$("$mutwo" run --model transformer-lm --batch 8 --steps 1 --device-memory 1200KiB 2>&1 >/dev/null); code=$?
if [ "$code" -eq 1 ] && grep -q "^mutwo: out of memory: .*--device-memory limit.*; plan the step under a budget" <<<"$err"; then
  echo "ok: run past --device-memory -> $err"
else
  echo "FAIL: run past --device-memory exited $code: $err"; fails=$((fails+1))
fi
cap_dir=$(mktemp -d)
last=$("$mutwo" optimize --model transformer-lm --batch 8 --budget 60% --device-memory 1200KiB --check --out "$cap_dir" --json --quiet | tail -n 1)
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); b,p=r["baseline"],r["planned"]
sys.exit(not (b["fits"] is False and b["peak_bytes"] is None and b["predicted_peak_bytes"] > 1200 * 1024
              and p["peak_bytes"] == p["predicted_peak_bytes"] <= r["budget_bytes"] and r["check"] == "passed"
              and r["check_reference"] == "most-recomputation"))' "$last" \
  && echo "ok: optimize under --device-memory below the unplanned peak" \
  || { echo "FAIL: optimize under --device-memory: $last"; fails=$((fails+1)); }
rm -rf "$cap_dir"

# sweep under a cap the unplanned step does not fit: the planned points only.
sw_dir=$(mktemp -d)
last=$("$mutwo" sweep --model transformer-lm --batches 8 --budget 60% --device-memory 1200KiB --steps 1 --quiet --json \
       --out "$sw_dir" 2>/dev/null | tail -n 1)
python3 -c 'import json,sys; v=[p["variant"] for p in json.loads(sys.argv[1])["points"]]; sys.exit(v != ["per-layer", "mutwo"])' "$last" \
  && echo "ok: sweep under --device-memory leaves out the baseline that does not fit" \
  || { echo "FAIL: sweep under --device-memory: $last"; fails=$((fails+1)); }
rm -rf "$sw_dir"

# max-batch under a cap: every answer's rewritten step (--out) trains 10 steps under that cap,
# and the batch 5% above each answer, tried on its own, does not fit.
mb_dir=$(mktemp -d)
if mb_json=$("$mutwo" max-batch --model mlp --memory 10MiB --device-memory 10MiB --quiet --out "$mb_dir" --json | tail -n 1); then
  /usr/bin/python3 -c 'import json, sys
rows = json.loads(sys.argv[1])["results"]
assert len(rows) == 3 and all(r["above_batch"] >= max(r["max_batch"] + 1, r["max_batch"] * 1.05) and r["above_fits"] is False for r in rows), rows' "$mb_json" \
    && echo "ok: max-batch refuses the batch 5% above each answer" \
    || { echo "FAIL: max-batch's batch 5% above: $mb_json"; fails=$((fails+1)); }
  for p in none per-layer mutwo; do
    "$mutwo" run --graph "$mb_dir/$p.ir" --steps 10 --device-memory 10MiB >/dev/null 2>&1 \
      && echo "ok: max-batch's $p answer trains under its cap" \
      || { echo "FAIL: max-batch's $p answer does not train under its cap"; fails=$((fails+1)); }
  done
else
  echo "FAIL: max-batch under --device-memory"; fails=$((fails+1))
fi
rm -rf "$mb_dir"

# An --out that cannot be a folder is exit 2 naming it (a file stands in the way).
blocker=$(mktemp)
expect_error "cannot make the folder $blocker/o" optimize --model mlp --batch 8 --budget 90% --steps 1 --quiet --out "$blocker/o"
expect_error "cannot make the folder $blocker/s" sweep --model mlp --batches 8 --steps 1 --quiet --out "$blocker/s"
expect_error "cannot make the folder $blocker/p" profile --model mlp --batch 8 --quiet --out "$blocker/p"
rm -f "$blocker"

# A loaded graph that recomputes a random op without its generator state, or
# names no outputs, is refused (issues 15 and 26).
ir_dir=$(mktemp -d)
"$mutwo" show --model mlp > "$ir_dir/mlp.ir" 2>/dev/null
python3 - "$ir_dir" <<'PY'
import sys
d = sys.argv[1]
lines = open(f"{d}/mlp.ir").read().split("\n")
i = next(k for k, l in enumerate(lines) if l.startswith("%loss.grad"))
lines.insert(i + 1, "%fc1.dropout_mask.rc : bool[64,512] other = dropout_mask(%fc1.relu) {p=0.1} recompute scope=fc1")
open(f"{d}/random.ir", "w").write("\n".join(lines))
open(f"{d}/no_outputs.ir", "w").write("\n".join(l for l in lines[:i + 1] + lines[i + 2:] if not l.startswith("outputs")))
PY
expect_error "dropout_mask may not be recomputed without its generator state: it is random" run --graph "$ir_dir/random.ir" --steps 1
expect_error "--model excludes --graph" run --graph "$ir_dir/mlp.ir" --model bert-base --steps 1
expect_error "--batch excludes --graph" run --graph "$ir_dir/mlp.ir" --batch 8 --steps 1
expect_error "/dev/zero is not a regular file" run --graph /dev/zero --steps 1
expect_error "unknown device 'cudax'" run --device cudax --steps 1
expect_error "more than 2^50 elements" info --batch 4611686018427387904
python3 -c "print('[' * 100000 + ']' * 100000)" > "$ir_dir/deep.json"
expect_error "nested deeper than 64 levels" plan --profile "$ir_dir/deep.json" --budget 60%
expect_error "nested deeper than 64 levels" run --graph "$ir_dir/deep.json" --steps 1
expect_error "the graph names no outputs" run --graph "$ir_dir/no_outputs.ir" --steps 1
rm -rf "$ir_dir"

# A profile is validated after parsing (issue 15): each mutation exits 2 naming the field, never a crash.
pf_dir=$(mktemp -d)
"$mutwo" profile --model mlp --batch 8 --out "$pf_dir" --quiet >/dev/null 2>&1
python3 - "$pf_dir" <<'PY'
import json, sys
d = sys.argv[1]
base = json.load(open(f"{d}/profile.json"))
def mutated(name, f):
    p = json.loads(json.dumps(base)); f(p); json.dump(p, open(f"{d}/{name}.json", "w"))
mutated("rank", lambda p: p["nodes"][3].update(rank=99999))
mutated("negative_ms", lambda p: p["nodes"][2].update(ms=-5))
mutated("reversed", lambda p: p.update(nodes=p["nodes"][::-1]))
mutated("fractional_batch", lambda p: p.update(batch=1.5))
mutated("fractional_version", lambda p: p.update(version=1.9))
mutated("value_rank", lambda p: p["values"][5].update(def_=0) or p["values"][5].update({"def": 100000}))
mutated("value_bytes", lambda p: p["values"][5].update(bytes=7))
mutated("node_name", lambda p: p["nodes"][5].update(name="zzz"))
PY
for m in rank:rank negative_ms:"must not be negative" reversed:rank fractional_batch:"'batch' must be an integer" \
         fractional_version:"'version' must be an integer" value_rank:"is not a node" value_bytes:"bytes" node_name:"zzz"; do
  expect_error "${m#*:}" plan --profile "$pf_dir/${m%%:*}.json" --budget 60% --out "$pf_dir/plan.json"
done
expect_error "more than 1 PiB" plan --profile "$pf_dir/profile.json" --budget 9223372036854775808 --out "$pf_dir/plan.json"
rm -rf "$pf_dir"

# mutwo train (issue 14, item 5): three epochs of transformer-lm over the
# shipped text in batches, the step planned under 60% of its peak so that the
# plan drops activations; the training loss falls epoch by epoch, the held-out
# loss is reported every epoch, and each epoch's measured peak is the plan's
# prediction to the byte (on the CPU), within the budget.
text=$(cd "$(dirname "$0")/.." && pwd)/data/english.txt
out=$("$mutwo" train --model transformer-lm --data "$text" --epochs 3 --batch 16 --budget 60% --no-swap --json --quiet) \
  || { echo "FAIL: mutwo train exited $?"; fails=$((fails+1)); }
python3 - "$out" <<'PY' && echo "ok: mutwo train: loss falls over 3 planned epochs" || { echo "FAIL: mutwo train: $out"; fails=$((fails+1)); }
import json, math, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
epochs, summary = lines[:-1], lines[-1]
keys = {"epoch", "train_loss", "heldout_loss", "tokens_per_s", "peak_bytes", "steps"}
assert [e["epoch"] for e in epochs] == [1, 2, 3], epochs
assert all(keys <= set(e) for e in epochs + [summary]), (epochs, summary)
train = [e["train_loss"] for e in epochs]
assert train[0] > train[1] > train[2], train
assert all(math.isfinite(e["heldout_loss"]) and 0 < e["heldout_loss"] < 6 for e in epochs), epochs
assert epochs[2]["heldout_loss"] < epochs[0]["heldout_loss"], epochs
assert summary["dropped"] > 0 and summary["planner"] == "mutwo", summary
assert all(e["peak_bytes"] == summary["predicted_peak_bytes"] <= summary["budget_bytes"] for e in epochs), (epochs, summary)
assert all(e["tokens_per_s"] > 0 and e["steps"] == 98 for e in epochs), epochs
assert summary["steps"] == 3 * 98 and summary["batch"] == 16 and summary["seq"] == 20, summary
PY
short=$(mktemp); head -c 300 "$text" >"$short"
expect_error "a file of at least 5688 bytes is needed" train --model transformer-lm --data "$short" --batch 256
rm -f "$short"
expect_error "train needs --data FILE" train --model transformer-lm --batch 8
expect_error "does not read text" train --model bert-tiny --data "$text" --batch 2
# transformer-lm's default batch is 256 (docs/transformers.md); the others keep 64.
for m in transformer-lm:256 mlp:64; do
  got=$("$mutwo" info --model "${m%%:*}" --json | tail -n 1)
  grep -qF "\"batch\":${m#*:}," <<<"$got" && echo "ok: ${m%%:*}'s default batch is ${m#*:}" \
    || { echo "FAIL: ${m%%:*}'s default batch is not ${m#*:}: $got"; fails=$((fails+1)); }
done

# BERT as the original study ran it: padded sequences with an attention mask,
# and the encoder alone (--head none, loss = last_hidden_state.sum()), planned,
# rewritten and checked bit for bit against the unplanned step.
bert_dir=$(mktemp -d)
last=$("$mutwo" optimize --model bert-tiny --head none --pad 32 --seq 128 --batch 8 --budget 90% --no-swap --check --steps 1 \
       --out "$bert_dir" --json --quiet | tail -n 1)
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(not (r["check"] == "passed" and r["planned"]["dropped"] > 0 and r["fits"] and r["feasible"]))' "$last" \
  && echo "ok: bert-tiny --head none --pad 32 plans, and the plan checks bit for bit" \
  || { echo "FAIL: bert-tiny --head none --pad 32: $last"; fails=$((fails+1)); }
grep -q "padding_mask_fill" "$bert_dir/rewritten.ir" && ! grep -q "cls.predictions" "$bert_dir/rewritten.ir" \
  || { echo "FAIL: bert-tiny --head none --pad 32: no padding mask, or an MLM head, in the step"; fails=$((fails+1)); }
rm -rf "$bert_dir"
expect_error "--pad 32 must leave at least one" info --model bert-tiny --seq 32 --pad 32
expect_error "--pad and --head are BERT options" info --model mlp --head none
# mutwo report writes a profile's files again from profile.json alone, byte for
# byte (issue 14), and a plan's report.md; a plan made from another profile is exit 2.
rp_dir=$(mktemp -d)
"$mutwo" profile --model mlp --batch 8 --iters 1 --warmup 0 --out "$rp_dir/p" --quiet >/dev/null 2>&1
mkdir "$rp_dir/saved"
generated="nodes.csv activations.csv trace.json memory_timeline.dat memory_timeline.gp peak_breakdown.dat peak_breakdown.gp"
for f in $generated; do mv "$rp_dir/p/$f" "$rp_dir/saved/$f"; done
rm -f "$rp_dir"/p/*.svg "$rp_dir"/p/*.png
"$mutwo" plan --profile "$rp_dir/p/profile.json" --budget 95% --out "$rp_dir/p/plan.json" >/dev/null 2>&1
if "$mutwo" report --profile "$rp_dir/p/profile.json" --plan "$rp_dir/p/plan.json" --out "$rp_dir/p" >/dev/null; then
  same=1
  for f in $generated; do cmp -s "$rp_dir/saved/$f" "$rp_dir/p/$f" || { same=0; echo "FAIL: mutwo report wrote $f differently"; }; done
  if command -v gnuplot >/dev/null; then
    for f in memory_timeline.svg memory_timeline.png peak_breakdown.svg peak_breakdown.png; do
      [ -s "$rp_dir/p/$f" ] || { same=0; echo "FAIL: mutwo report did not render $f"; }
    done
  fi
  grep -qF "| rank | activation |" "$rp_dir/p/report.md" || { same=0; echo "FAIL: report.md lacks the candidates table"; }
  [ "$same" -eq 1 ] && echo "ok: mutwo report writes the profile's files again, identical, and the plan's report.md"     || fails=$((fails+1))
else
  echo "FAIL: mutwo report"; fails=$((fails+1))
fi
"$mutwo" profile --model mlp --batch 16 --iters 1 --warmup 0 --out "$rp_dir/q" --quiet >/dev/null 2>&1
expect_error "pass the profile the plan was made from" report --profile "$rp_dir/q/profile.json" --plan "$rp_dir/p/plan.json" --out "$rp_dir/r"
expect_error "cannot read profile $rp_dir/none.json" report --profile "$rp_dir/none.json" --out "$rp_dir/r"
echo '{"format": "mutwo.plan", "version": 2}' > "$rp_dir/bad_plan.json"
expect_error "$rp_dir/bad_plan.json: missing field 'model'" report --profile "$rp_dir/p/profile.json" --plan "$rp_dir/bad_plan.json" --out "$rp_dir/r"

# sweep marks a point whose plan missed its budget: on the mlp, parameters,
# gradients and momentum alone are far above 10% of the peak.
out=$("$mutwo" sweep --model mlp --batches 8 --budget 10% --steps 1 --quiet --out "$rp_dir/s")
python3 - "$rp_dir/s/sweep.csv" <<'PY' && echo "ok: sweep.csv marks the plan that missed its budget" || { echo "FAIL: sweep.csv: $(cat "$rp_dir/s/sweep.csv")"; fails=$((fails+1)); }
import csv, sys
rows = {r["variant"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert rows["baseline"]["feasible"] == "", rows
assert rows["per-layer"]["feasible"] == "1", rows
m = rows["mutwo"]
assert m["feasible"] == "0" and int(m["predicted_peak_bytes"]) > int(m["budget_bytes"]), rows
PY
grep -qF "Missed its budget (1 of the planned points" <<<"$out" && grep -qF "| 8 | mutwo |" <<<"$out" \
  && [ -s "$rp_dir/s/peak_vs_batch_missed.dat" ] && grep -qF "peak_vs_batch_missed.dat" "$rp_dir/s/peak_vs_batch.gp" \
  && echo "ok: sweep's table and plot say which plan missed its budget" \
  || { echo "FAIL: sweep does not say the plan missed: $out"; fails=$((fails+1)); }
rm -rf "$rp_dir"

# --dump-ir-after: an unknown pass is refused naming the passes; the graph
# after a pass goes to stderr under a "# IR after" line and parses back as a
# step (run --graph reads it); a pass that changed nothing says "unchanged".
expect_error "unknown pass 'cse'; passes: autodiff, reinplace, data-parallel, recompute, update-early, swap, or all" show --model mlp --dump-ir-after reinplace,cse
dump_dir=$(mktemp -d)
"$mutwo" show --model mlp --batch 8 --dump-ir-after autodiff,reinplace >/dev/null 2>"$dump_dir/dump.txt"
grep -qxF "# IR after autodiff (mlp)" "$dump_dir/dump.txt" && grep -qxF "# IR after reinplace (mlp): unchanged" "$dump_dir/dump.txt" \
  && echo "ok: --dump-ir-after autodiff,reinplace" || { echo "FAIL: --dump-ir-after: $(head -c 300 "$dump_dir/dump.txt")"; fails=$((fails+1)); }
sed '/^# IR after reinplace/,$d' "$dump_dir/dump.txt" >"$dump_dir/autodiff.ir"
"$mutwo" run --graph "$dump_dir/autodiff.ir" --steps 1 >/dev/null 2>&1 \
  && echo "ok: the dumped graph runs" || { echo "FAIL: the graph --dump-ir-after printed does not run"; fails=$((fails+1)); }
"$mutwo" optimize --model mlp --batch 8 --budget 90% --steps 1 --quiet --out "$dump_dir/opt" --dump-ir-after recompute \
  >/dev/null 2>"$dump_dir/recompute.txt"
grep -q "^# IR after recompute (mlp)" "$dump_dir/recompute.txt" \
  && echo "ok: --dump-ir-after recompute" || { echo "FAIL: --dump-ir-after recompute: $(head -c 300 "$dump_dir/recompute.txt")"; fails=$((fails+1)); }
rm -rf "$dump_dir"
# A rewritten step that replays random nodes (issue 26: per-layer drops the
# dropout masks inside the blocks), saved as IR by optimize, runs again with
# run --graph as the graph it was planned from: the same losses and the same
# parameters after three steps, bit for bit.
rg_dir=$(mktemp -d)
"$mutwo" optimize --model transformer-lm --batch 4 --planner per-layer --budget 100% --no-swap --steps 1 --quiet \
  --out "$rg_dir/o" >/dev/null 2>&1
python3 -c 'import json,sys; open(sys.argv[2], "w").write(json.load(open(sys.argv[1]))["graph"])' \
  "$rg_dir/o/profile.json" "$rg_dir/unplanned.ir"
for g in unplanned o/rewritten; do
  "$mutwo" run --graph "$rg_dir/$g.ir" --steps 3 --seed 7 --json --save "$rg_dir/${g#o/}.safetensors" 2>/dev/null \
    | tail -n 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["losses"])' >"$rg_dir/${g#o/}.losses"
done
if grep -q "rng_replay=1" "$rg_dir/o/rewritten.ir" && [ -s "$rg_dir/unplanned.losses" ] \
   && cmp -s "$rg_dir/unplanned.losses" "$rg_dir/rewritten.losses" \
   && cmp -s "$rg_dir/unplanned.safetensors" "$rg_dir/rewritten.safetensors"; then
  echo "ok: a rewritten step with replayed masks runs from its IR as the unplanned step"
else
  echo "FAIL: the rewritten step with replayed masks differs from the unplanned one run from IR: $(cat "$rg_dir"/*.losses)"
  fails=$((fails+1))
fi
# A captured CUDA graph cannot replay a generator state: refused before anything runs.
expect_error "--cuda-graph: the step recomputes the random node %transformer.h.1.attn.attn_dropout_mask.recompute (dropout_mask) by replaying" \
  run --graph "$rg_dir/o/rewritten.ir" --cuda-graph --steps 1
rm -rf "$rg_dir"
# A saved plan is applied by optimize --plan (issue 15): bert-tiny's plan at
# batch 8 and 70% (activations dropped and the vocabulary loss chunked below
# its default) gives the same rewritten step as the optimize that made it, and is
# refused naming what differs for another batch, model or graph; a plan that
# lies about its activations is refused naming the field.
sp_dir=$(mktemp -d)
"$mutwo" optimize --model bert-tiny --batch 8 --budget 70% --no-swap --steps 1 --quiet --out "$sp_dir/a" >/dev/null 2>&1
if "$mutwo" optimize --plan "$sp_dir/a/plan.json" --model bert-tiny --batch 8 --steps 1 --quiet --out "$sp_dir/b" >/dev/null \
   && python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["dropped"] == 0)' "$sp_dir/a/plan.json" \
   && cmp -s "$sp_dir/a/rewritten.ir" "$sp_dir/b/rewritten.ir"; then
  echo "ok: optimize --plan gives the rewritten step of the optimize that made the plan"
else
  echo "FAIL: optimize --plan did not reproduce the rewritten step"; fails=$((fails+1))
fi
expect_error "it was made for batch 8, not 4" optimize --plan "$sp_dir/a/plan.json" --model bert-tiny --batch 4 --steps 1 --out "$sp_dir/c"
expect_error "it was made for model 'bert-tiny', not 'mlp'" optimize --plan "$sp_dir/a/plan.json" --model mlp --batch 8 --steps 1 --out "$sp_dir/c"
expect_error "it was made for another graph of bert-tiny" optimize --plan "$sp_dir/a/plan.json" --model bert-tiny --batch 8 --optimizer adam --steps 1 --out "$sp_dir/c"
expect_error "--budget excludes --plan" optimize --plan "$sp_dir/a/plan.json" --budget 50% --model bert-tiny --batch 8 --out "$sp_dir/c"
expect_error "--budget is required" optimize --model bert-tiny --batch 2 --out "$sp_dir/c"
python3 - "$sp_dir" <<'PY'
import json, sys
d = sys.argv[1]
base = json.load(open(f"{d}/a/plan.json"))
def mutated(name, f):
    p = json.loads(json.dumps(base)); f(p); json.dump(p, open(f"{d}/{name}.json", "w"))
def recompute_mask(p):  # a random value marked recompute, the summary made to agree, its replay not listed
    a = next(a for a in p["activations"] if a["name"].endswith("dropout_mask") and a["decision"] == "keep")
    a.update(decision="recompute", sources=[])
    p["dropped"] += 1; p["dropped_bytes"] += a["bytes"]
mutated("mask", recompute_mask)
mutated("count", lambda p: p.update(dropped=p["dropped"] + 1))
mutated("version", lambda p: p.update(version=1))
mutated("renamed", lambda p: p["activations"][0].update(name="zzz"))
mutated("budget", lambda p: p.update(budget_bytes=-1))
PY
for m in mask:"but its drops replay" count:"field 'dropped' is" version:"version 1 is not supported" \
         renamed:"the plan has %zzz" budget:"'budget_bytes' must not be negative"; do
  expect_error "${m#*:}" optimize --plan "$sp_dir/${m%%:*}.json" --model bert-tiny --batch 8 --steps 1 --quiet --out "$sp_dir/c"
done
rm -rf "$sp_dir"

# Below the recompute floor (issue 16): bert-tiny at batch 16 fits 60% and
# checks bit for bit; a budget under the recompute-only floor (--no-swap: exit 3,
# and the CPU's default, no host memory apart) fits by swapping (--host-memory), passes the bitwise check, and its plan.json, applied by
# optimize --plan, gives the same rewritten step; a plan swapping what the step
# lacks is refused naming it.
sw_dir=$(mktemp -d)
"$mutwo" optimize --model bert-tiny --batch 16 --budget 60% --check --steps 1 --quiet --out "$sw_dir/sixty" --json \
  | tail -n 1 | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); sys.exit(not (r["fits"] and r["check"] == "passed"))' \
  && echo "ok: bert-tiny batch 16 fits 60% and checks bit for bit" || { echo "FAIL: bert-tiny batch 16 at 60%"; fails=$((fails+1)); }
"$mutwo" profile --model bert-tiny --batch 16 --quiet --out "$sw_dir/p" >/dev/null 2>&1
floor=$("$mutwo" plan --profile "$sw_dir/p/profile.json" --budget 1MiB --no-swap --json --out "$sw_dir/p/r.json" 2>/dev/null | tail -n 1 \
        | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["predicted_peak_bytes"])')
below=$((floor * 97 / 100))
# Judged on the one profile the floor came from: the greedy's floor moves with
# measured node times (a fresh profile on a busy machine reached 3% lower).
code=0; "$mutwo" plan --profile "$sw_dir/p/profile.json" --budget "$below" --no-swap --out "$sw_dir/p/r2.json" >/dev/null 2>&1 || code=$?
# On the CPU swapping is off by default (its tensors are in host memory
# already): off at this budget, then on with --host-memory.
code_default=0; "$mutwo" plan --profile "$sw_dir/p/profile.json" --budget "$below" --out "$sw_dir/p/d.json" >/dev/null 2>&1 || code_default=$?
[ "$code_default" -eq 3 ] && echo "ok: no swapping on the CPU without --host-memory" \
  || { echo "FAIL: the CPU swapped without --host-memory (exit $code_default)"; fails=$((fails+1)); }
last=$("$mutwo" optimize --model bert-tiny --batch 16 --budget "$below" --host-memory 1GiB --check --steps 1 --quiet --out "$sw_dir/a" --json | tail -n 1)
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); p=r["planned"]
sys.exit(not (int(sys.argv[2]) == 3 and r["fits"] and r["feasible"] and r["check"] == "passed" and p["swapped"] > 0
              and p["peak_bytes"] == p["predicted_peak_bytes"] <= r["budget_bytes"]))' "$last" "$code" \
  && echo "ok: swapping fits bert-tiny batch 16 under its recompute-only floor, bit for bit" \
  || { echo "FAIL: swap below the recompute floor (no-swap exit $code): $last"; fails=$((fails+1)); }
"$mutwo" optimize --plan "$sw_dir/a/plan.json" --model bert-tiny --batch 16 --steps 1 --quiet --out "$sw_dir/b" >/dev/null \
  && cmp -s "$sw_dir/a/rewritten.ir" "$sw_dir/b/rewritten.ir" && grep -q "swap_in" "$sw_dir/b/rewritten.ir" \
  && echo "ok: optimize --plan reproduces a plan that swaps" || { echo "FAIL: optimize --plan with swaps"; fails=$((fails+1)); }
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); p["swapped"][0]["name"]="zzz"; json.dump(p, open(sys.argv[2], "w"))' \
  "$sw_dir/a/plan.json" "$sw_dir/bad.json"
expect_error "it swaps %zzz" optimize --plan "$sw_dir/bad.json" --model bert-tiny --batch 16 --steps 1 --quiet --out "$sw_dir/c"
expect_error "--host-memory lots" plan --profile "$sw_dir/p/profile.json" --budget 60% --host-memory lots --out "$sw_dir/c/plan.json"
rm -rf "$sw_dir"

# Files mutwo reads are bounded and regular: a character device is refused, as --data, as a step's tensor file.
expect_error "--data: /dev/zero is not a regular file" run --model transformer-lm --data /dev/zero --steps 1
dev_dir=$(mktemp -d)
seeds=$(dirname "$0")/fuzz/seeds
sed 's|"data": *"step.safetensors"|"data": "/dev/zero"|' "$seeds/step.json" >"$dev_dir/step.json"
expect_error "the tensor file /dev/zero is not a regular file" run --graph "$dev_dir/step.json" --steps 1
# An argument ATen's kernel divides by without checking (the fuzzer's SIGFPE): refused when the step loads.
cp "$seeds/step.safetensors" "$dev_dir/"
/usr/bin/python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); n = next(n for n in j["nodes"] if n["target"] == "aten::convolution_backward")
n["args"][9] = 0; json.dump(j, open(sys.argv[2], "w"))' "$seeds/step.json" "$dev_dir/groups.json"
expect_error "groups (argument 9) must be a positive integer, got 0" run --graph "$dev_dir/groups.json" --steps 1
cp "$seeds/step.json" "$seeds/step.safetensors" "$dev_dir/"
python3 - "$dev_dir/step.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
name = next(k for k in header if k != "__metadata__")
header[name]["data_offsets"][1] += 4  # one float more than its shape holds
text = json.dumps(header).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
PY
expect_error "bytes for" run --graph "$dev_dir/step.json" --steps 1
rm -rf "$dev_dir"

# Issue 27: a number no double holds (1e400, -1e400), NaN or Infinity in any
# JSON input is exit 2 naming the field, -0 is zero; an IR node without an
# attribute its op needs, or with one of another kind, is exit 2 naming the
# node, op and attribute; max-batch --json ends with one JSON object on failure.
num_dir=$(mktemp -d)
seeds=$(dirname "$0")/fuzz/seeds
cp "$seeds/step.safetensors" "$num_dir/"
python3 - "$seeds" "$num_dir" <<'PY'
import re, sys
seeds, d = sys.argv[1:]
def put(src, dst, key, token):  # src's first number of `key` written as `token`
    text, n = re.subn(r'("%s": *)-?[0-9][0-9.eE+-]*' % key, lambda m: m.group(1) + token,
                      open(f"{seeds}/{src}").read(), count=1)
    assert n == 1, (src, key)
    open(f"{d}/{dst}", "w").write(text)
for name, token in [("big", "1e400"), ("small", "-1e400"), ("nan", "NaN"), ("inf", "-Infinity"), ("zero", "-0")]:
    put("profile.json", f"profile_{name}.json", "step_ms", token)
put("profile.json", "profile_node.json", "ms", "Infinity")
put("plan.json", "plan_big.json", "budget_bytes", "1e400")
put("step.json", "step.json", "version", "-1e400")
import json  # a value the loss fusion removes, declared too large to hold (the fuzzer's seed 7 found it accepted)
step = json.load(open(f"{seeds}/step.json"))
next(v for v in step["values"] if v["name"] == "t_2")["shape"][0] = 2**63 - 1
json.dump(step, open(f"{d}/step_shape.json", "w"))
ir = open(f"{seeds}/mlp.ir").read()
open(f"{d}/no_dim.ir", "w").write(ir.replace(" {dim=1}", "", 1))
open(f"{d}/p_string.ir", "w").write(ir.replace("{p=0.1}", '{p="x"}', 1))
open(f"{d}/dim_huge.ir", "w").write(ir.replace("{dim=1}", "{dim=99999999999999999999}", 1))
PY
for m in big:"field 'step_ms' is 1e400, beyond the range of a double" small:"field 'step_ms' is -1e400" \
         nan:"field 'step_ms' is NaN" inf:"field 'step_ms' is -Infinity" node:"field 'nodes[0].ms' is Infinity"; do
  expect_error "${m#*:}" plan --profile "$num_dir/profile_${m%%:*}.json" --budget 100% --out "$num_dir/plan.json"
done
"$mutwo" plan --profile "$num_dir/profile_zero.json" --budget 100% --out "$num_dir/plan.json" >/dev/null 2>&1 \
  && echo "ok: a profile's -0 reads as 0" || { echo "FAIL: a profile's step_ms of -0 was refused"; fails=$((fails+1)); }
expect_error "plan_big.json: field 'budget_bytes' is 1e400" optimize --plan "$num_dir/plan_big.json" --model transformer-lm --batch 2 --steps 1 --out "$num_dir/opt"
expect_error "step.json: field 'version' is -1e400" run --graph "$num_dir/step.json" --steps 1
expect_error "value 't_2': field 'shape': a tensor of shape [9223372036854775807,2] has more than 2^50 elements" run --graph "$num_dir/step_shape.json" --steps 1
expect_error "op log_softmax needs the attribute 'dim' (an integer)" run --graph "$num_dir/no_dim.ir" --steps 1
expect_error "op dropout_mask: attribute 'p' must be a number, got a string" run --graph "$num_dir/p_string.ir" --steps 1
expect_error "integer out of range" run --graph "$num_dir/dim_huge.ir" --steps 1
out=$("$mutwo" max-batch --model mlp --memory 10MiB --planners none,nope --limit 4 --quiet --json 2>/dev/null); code=$?
if [ "$code" -eq 2 ] && python3 -c 'import json,sys; r=json.loads(sys.argv[1].splitlines()[-1])
sys.exit(not (r["command"] == "max-batch" and "nope" in r["error"] and [x["planner"] for x in r["results"]] == ["none"]))' "$out"; then
  echo "ok: max-batch --json ends with its JSON object and the error"
else
  echo "FAIL: max-batch --json on failure (exit $code) ended with: $(tail -n 1 <<<"$out")"; fails=$((fails+1))
fi
rm -rf "$num_dir"

# The model zoo's done-when runs: the largest models train on the CPU.
for args in "--model resnet-152 --batch 2 --image-size 64 --steps 2" "--model bert-base --batch 2 --steps 1"; do
  last=$("$mutwo" run $args --json | tail -n 1) || { echo "FAIL: mutwo run $args"; fails=$((fails+1)); continue; }
  grep -qF '"losses":[' <<<"$last" && echo "ok: mutwo run $args" || { echo "FAIL: mutwo run $args: $last"; fails=$((fails+1)); }
done

[ "$fails" -eq 0 ] && echo "cli_errors: all passed" || echo "cli_errors: $fails failed"
exit $((fails > 0))
