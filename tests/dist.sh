#!/usr/bin/env bash
# Several ranks on the CPU (Gloo): two ranks at batch B each against one process
# at batch 2B, as torchrun would start them (RANK, WORLD_SIZE, MASTER_ADDR/PORT;
# Debian's torchrun 1.13 fails under Python 3.11, so this script is the launcher).
# Losses agree within a relative 1e-5 (the batch's sums run in another order);
# sharding the optimizer state changes no bit; plans pass --check on every rank.
# ResNet's batch norm normalises each rank's rows alone (DDP without
# SyncBatchNorm): there the ranks are checked against each other, not one process.
set -u
mutwo=${1:?usage: dist.sh path/to/mutwo}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# two NAME args...: two ranks; rank 0's last stdout line to $tmp/NAME.json, stderr of both to $tmp/NAME.err.
# Exit code 0 expected, or 3 (no plan fits: the plan ran anyway) with infeasible=ok.
two() {
  local name=$1; shift
  local p k; p=$(port)
  for k in 0 1; do
    RANK=$k LOCAL_RANK=$k WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p timeout 120 \
      "$mutwo" "$@" --json >"$tmp/$name.$k.out" 2>"$tmp/$name.$k.err" &
  done
  local c0 c1
  wait %1; c0=$?
  wait %2; c1=$?
  tail -n 1 "$tmp/$name.0.out" >"$tmp/$name.json"
  if [ "${infeasible:-}" = ok ] && [ "$c0" -eq 3 ] && [ "$c1" -eq 3 ]; then c0=0; c1=0; fi
  if [ "$c0" -ne 0 ] || [ "$c1" -ne 0 ]; then
    echo "FAIL: two ranks of mutwo $* exited $c0 and $c1:"; cat "$tmp/$name".*.err; fails=$((fails+1))
  fi
  if [ -s "$tmp/$name.1.out" ]; then echo "FAIL: rank 1 printed on stdout ($name)"; fails=$((fails+1)); fi
}
one() {
  local name=$1; shift
  if ! "$mutwo" "$@" --json 2>"$tmp/$name.err" | tail -n 1 >"$tmp/$name.json"; then
    echo "FAIL: mutwo $*:"; cat "$tmp/$name.err"; fails=$((fails+1))
  fi
}
# compare A B KEY TOLERANCE: the loss lists under KEY ("losses", "planned.losses") agree.
compare() {
  if /usr/bin/python3 - "$tmp/$1.json" "$tmp/$2.json" "$3" "$4" <<'PY'; then echo "ok: $1 ~ $2 ($3, tol $4)"; else fails=$((fails+1)); fi
import json, sys
def get(path, key):
    j = json.load(open(path))
    for k in key.split('.'): j = j[k]
    return j, json.load(open(path))
(a, ja), (b, jb) = get(sys.argv[1], sys.argv[3]), get(sys.argv[2], sys.argv[3])
tol = float(sys.argv[4])
for j in (ja, jb):
    if j.get('world_size', 1) > 1 and (j.get('rank') != 0 or j.get('check', 'passed') == 'failed'):
        sys.exit(f"FAIL: {j.get('rank')=} {j.get('check')=}")
ok = len(a) == len(b) and len(a) > 0 and all(abs(x - y) <= tol * max(1.0, abs(y)) for x, y in zip(a, b))
if not ok: sys.exit(f"FAIL: {sys.argv[1]} {a} vs {sys.argv[2]} {b}")
PY
}

m="--steps 3 --dropout 0"
# MLP: all-reduce in one bucket and in several, sharded SGD and Adam.
one mlp_one run --model mlp --batch 16 $m
two mlp_two run --model mlp --batch 8 $m
two mlp_zero run --model mlp --batch 8 $m --shard-optimizer --bucket-size 1MiB
compare mlp_two mlp_one losses 1e-5
compare mlp_zero mlp_two losses 0
one mlp_adam_one run --model mlp --batch 16 $m --optimizer adam
two mlp_adam_zero run --model mlp --batch 8 $m --optimizer adam --shard-optimizer --bucket-size 1MiB
compare mlp_adam_zero mlp_adam_one losses 1e-5

# transformer-lm planned under 70% of its per-rank peak, with and without sharding.
t="--model transformer-lm --dropout 0 --budget 70% --steps 2 --check --quiet"
one lm_one optimize $t --batch 16 --out "$tmp/lm_one"
two lm_two optimize $t --batch 8 --out "$tmp/lm_two"
two lm_zero optimize $t --batch 8 --out "$tmp/lm_zero" --shard-optimizer --bucket-size 256KiB
compare lm_two lm_one planned.losses 1e-5
compare lm_zero lm_two planned.losses 0
compare lm_two lm_one baseline.losses 1e-5
[ -f "$tmp/lm_two/rank1/plan.json" ] && echo "ok: rank 1 wrote under rank1/" || { echo "FAIL: no rank1/plan.json"; fails=$((fails+1)); }

# resnet-18 on 64x64 images: planned and sharded, against the unplanned ranks.
# Gloo's own buffers, allocated on its threads, make the measured (hence the
# planned) peak vary from run to run by a few MiB: whether 90% is reachable
# varies too, so exit 3 (the best plan ran and was checked) is accepted here.
rn="--model resnet-18 --image-size 64 --classes 10 --batch 4 --steps 2 --quiet --budget 90% --check --bucket-size 2MiB"
infeasible=ok two rn_two optimize $rn --out "$tmp/rn_two"
infeasible=ok two rn_zero optimize $rn --out "$tmp/rn_zero" --shard-optimizer
compare rn_zero rn_two planned.losses 0
/usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if j["planned"]["losses"]==j["baseline"]["losses"] and j["planned"]["dropped"]+j["planned"]["swapped"]>0 else 1)' "$tmp/rn_two.json" \
  && echo "ok: resnet-18 planned = unplanned on 2 ranks" || { echo "FAIL: resnet-18 plan changed the losses"; fails=$((fails+1)); }

# Errors: a command that runs in one process, sharding without ranks.
err=$(WORLD_SIZE=2 RANK=0 "$mutwo" show --model mlp 2>&1 >/dev/null); c=$?
[ $c -eq 2 ] && grep -q "runs in one process" <<<"$err" && echo "ok: show under WORLD_SIZE=2 -> $err" || { echo "FAIL: show under WORLD_SIZE=2: $c $err"; fails=$((fails+1)); }
err=$("$mutwo" run --model mlp --steps 1 --shard-optimizer 2>&1 >/dev/null); c=$?
[ $c -eq 2 ] && grep -q "needs several ranks" <<<"$err" && echo "ok: --shard-optimizer alone -> $err" || { echo "FAIL: --shard-optimizer alone: $c $err"; fails=$((fails+1)); }

[ "$fails" -eq 0 ] && echo "dist: all passed" || echo "dist: $fails failed"
exit $((fails > 0))
