#!/usr/bin/env bash
# `nobubble info`: moe-10b's total and active parameters and FLOPs per token, its per-stage plan (shares of
# parameters and active FLOPs, optimizer state per optimizer, and per schedule the weight versions and microbatches
# in flight: gpipe/1f1b 1 version, 2bw 2, pipedream p - s; gpipe all m microbatches, the others p - s), activations
# that grow with top-k, a dense model's plan without MoE figures, and bad input.
source "$(dirname "$0")/lib.sh"
run_logged 60 moe "$NB" info --model moe-10b --stages 4 --num-microbatches 8
log="$WORK/moe.log"
grep -qx 'model moe-10b: 10,165,757,952 parameters, 1,636,116,480 active per token (16.1%)' "$log" \
  && pass "total and active parameters" || fail "counts: $(head -n 1 "$log")"
grep -qE '^  moe: blocks 1,2,3,.*,17 experts 64 topk 6 ffn 1408 shared 2816 ' "$log" && pass "the MoE blocks and shape" \
  || fail "moe line: $(cat "$log")"
grep -qE '^  FLOPs per token at seq 256: forward [0-9.]+ GFLOP, forward \+ backward [0-9.]+ GFLOP \(active: .*router \+ 6 routed experts \+ shared expert' \
  "$log" && pass "FLOPs per token, active" || fail "flops: $(cat "$log")"
# The stage table (each byte figure is two fields, number and unit): four rows whose parameter and FLOP shares each add up to 100%.
awk '/^  stage +bound +layers/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { n++; p += $(NF - 11); f += $(NF - 10) } on && /^[a-z]/ { on = 0 }
     END { exit (n == 4 && p > 99.8 && p < 100.2 && f > 99.8 && f < 100.2) ? 0 : 1 }' "$log" \
  && pass "per stage, shares of parameters and of active FLOPs" || fail "stage table: $(cat "$log")"
grep -qE '^  stage +adamw +muon +lion +adan +mars +soap$' "$log" && pass "optimizer state per optimizer" \
  || fail "optimizer table: $(cat "$log")"
# Per schedule: "V v M mb TOTAL UNIT" (6 fields) for gpipe, 1f1b, 2bw, pipedream, zb-h1 (p in flight everywhere:
# a stash lives until its W), zb-v (2p chunk stashes: p stages' worth).
awk '/^  stage +gpipe +1f1b +2bw +pipedream +zb-h1 +zb-v$/ { on = 1; next }
     on && $1 ~ /^[0-9]+$/ { s = $1; ok += ($2 == 1 && $4 == 8 && $8 == 1 && $10 == 4 - s && $14 == 2 && $16 == 4 - s \
                                           && $20 == 4 - s && $22 == 4 - s && $26 == 1 && $28 == 4 && $32 == 1 && $34 == 8); n++ }
     END { exit (n == 4 && ok == 4) ? 0 : 1 }' "$log" \
  && pass "versions and microbatches in flight per schedule" || fail "schedule table: $(cat "$log")"
# The predicted bubble per schedule, and zb-v's own cut into 8 parts, rank 0 holding parts 0 and 7.
grep -qE '^  bubble( +[0-9.]+%){6}$' "$log" && grep -qE 'zb-v blocks [0-9-]+( \| [0-9-]+){7}, rank 0 parts 0 \+ 7, rank 1 parts 1 \+ 6' "$log" \
  && pass "the predicted bubble of every schedule, zb-v on its own cut" || fail "bubble row: $(tail -n 3 "$log")"
run_logged 60 interleaved "$NB" info --model moe-10b --stages 4 --num-microbatches 8 --virtual-stages 2
grep -qE '^  stage +gpipe +1f1b +2bw +pipedream +zb-h1 +zb-v +1f1b-v2$' "$WORK/interleaved.log" \
  && grep -qE '^  bubble( +[0-9.]+%){7}$' "$WORK/interleaved.log" \
  && grep -qE '1f1b-v2 blocks [0-9-]+( \| [0-9-]+){7}, rank 0 parts 0 \+ 4, ' "$WORK/interleaved.log" \
  && pass "--virtual-stages 2: an interleaved column on its own cut" || fail "interleaved: $(tail -n 8 "$WORK/interleaved.log")"
# Activations: the routed experts' stash grows with k (stage 1 holds MoE blocks only).
act() { "$NB" info --model moe-10b --stages 4 "$@" | awk '/^  stage +bound +layers/ { on = 1; next } on && $1 == "1" { print $(NF - 3) " " $(NF - 2); exit }'; }
a2=$(act --moe-router-topk 2) a6=$(act)
awk -v a="$a2" -v b="$a6" 'BEGIN { split(a, x, " "); split(b, y, " ");
  u["kB"] = 1e3; u["MB"] = 1e6; u["GB"] = 1e9; u["TB"] = 1e12
  exit (x[1] * u[x[2]] < y[1] * u[y[2]]) ? 0 : 1 }' && pass "activations per microbatch grow with top-k ($a2 < $a6)" \
  || fail "activations: top-2 $a2, top-6 $a6"
run_logged 60 few "$NB" info --model moe-10b --stages 4 --num-microbatches 1
grep -qE '^      0 .*needs m >= p' "$WORK/few.log" && pass "2bw with m < p says why it has no plan" \
  || fail "2bw m < p: $(cat "$WORK/few.log")"
# One microbatch per iteration: pipedream still reaches its steady state (p - s versions) over enough iterations.
grep -qE '^      0 .* 4 v +4 mb +[0-9.]+ [kMGT]?B +1 v +1 mb +[0-9.]+ [kMGT]?B +1 v +2 mb +[0-9.]+ [kMGT]?B$' "$WORK/few.log" && pass "pipedream at m = 1 holds p versions on stage 0" \
  || fail "pipedream m = 1: $(cat "$WORK/few.log")"
run_logged 60 dense "$NB" info --model tiny --stages 2
grep -qx 'model tiny: 3,279,104 parameters' "$WORK/dense.log" && grep -qx '  moe: none' "$WORK/dense.log" \
  && pass "a dense model: no active count, moe: none" || fail "dense: $(head -n 3 "$WORK/dense.log")"
# Data parallel: each rank holds its stage whole; with the distributed optimizer, AdamW's state per rank is 1/D.
run_logged 60 dp "$NB" info --model smollm-360m --stages 4 --data-parallel-size 8
run_logged 60 zero "$NB" info --model smollm-360m --stages 4 --data-parallel-size 8 --use-distributed-optimizer
adamw_of() { awk '/^optimizer state per/ { on = 1; next } on && $1 == "1" { print $2 " " $3; exit }' "$1"; }
bytes() { awk -v x="$1" 'BEGIN { split(x, a, " "); u["kB"] = 1e3; u["MB"] = 1e6; u["GB"] = 1e9; print a[1] * u[a[2]] }'; }
full=$(bytes "$(adamw_of "$WORK/dp.log")") shard=$(bytes "$(adamw_of "$WORK/zero.log")")
grep -q '^  data parallel: 8 replicas of every stage, 32 ranks' "$WORK/dp.log" \
  && awk -v f="$full" -v s="$shard" 'BEGIN { r = f / s; exit (r > 7.9 && r < 8.1) ? 0 : 1 }' \
  && grep -q '^optimizer state per rank (the largest of the stage' "$WORK/zero.log" \
  && pass "--data-parallel-size 8 --use-distributed-optimizer: AdamW state per rank 1/8 ($full -> $shard bytes)" \
  || fail "distributed optimizer: $full -> $shard: $(grep -A 3 '^optimizer state per' "$WORK/zero.log")"
expect_error 2 "use-distributed-optimizer shards the state over the replicas" "$NB" info --model tiny \
  --use-distributed-optimizer
expect_error 2 "data-parallel-size must be positive, got 0" "$NB" info --model tiny --data-parallel-size 0
expect_error 2 "num-microbatches" "$NB" info --model tiny --num-microbatches 0
expect_error 2 "9 pipeline stages but the model has only 4 layers" "$NB" info --model tiny --stages 9
finish
