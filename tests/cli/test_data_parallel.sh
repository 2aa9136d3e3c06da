#!/usr/bin/env bash
# Data parallelism's oracle (`nobubble reference --data-parallel-size D`, docs/DESIGN.md section 2, "Data
# parallelism"): D replicas, replica r taking microbatches [r m, (r+1) m) of every global batch of D m, each stage
# adding its replicas' gradient sums in replica order and scaling by 1/(D m).
# - D = 2 with m = 2 and D = 1 with m = 4 (the same global batch) differ only in the order of the sum (D = 1 adds
#   each product onto the running sum, D = 2 sums each replica's from zero, then the two): every iteration's loss
#   and the final validation loss to within 3e-4 (printed to 1e-4), for every schedule whose step is the whole
#   global batch (not pipedream, which steps on each replica's microbatch); so do D = 2 x m = 1 and D = 1 x m = 2;
# - and they are not the same bits: the order shows;
# - repeatable, resumable (stopped after 2, resumed), and a checkpoint of another global batch is refused;
# - --global-batch-size is checked against D x m x B; D < 1 is a usage error.
# `train` with D > 1 against this oracle: test_data_parallel_train.sh.
source "$(dirname "$0")/lib.sh"
# Runs of one character, 5 to 59 long: windows that differ from one another, so that which microbatches a replica
# takes shows in every loss (make_corpus's repeated sentences would hide it).
/usr/bin/python3 -c '
import random, sys
r = random.Random(7)
sys.stdout.write("".join(chr(33 + r.randrange(90)) * r.randrange(5, 60) for _ in range(3000)))' >"$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 4 --untie-embeddings-and-output-weights
       --log-interval 100 --train-iters 6 --clip-grad 1)

# losses_close NAME A_LOG B_LOG: every iteration's loss and the final validation loss within 3e-4.
losses_close() {
  local a b
  a=$(sed -n 's/^step .*| loss \([0-9.]*\) .*/\1/p; s/^final val_loss //p' "$2" | tr '\n' ' ')
  b=$(sed -n 's/^step .*| loss \([0-9.]*\) .*/\1/p; s/^final val_loss //p' "$3" | tr '\n' ' ')
  if awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, " "); if (n < 2 || n != split(b, y, " ")) exit 1
       for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 3e-4) exit 1 } }'; then
    pass "$1 ($a)"
  else
    fail "$1: $a against $b"
  fi
}
FLAGS+=(--log-interval 1)
run_logged 120 d2_m1 "$NB" reference "${FLAGS[@]}" --stages 2 --data-parallel-size 2 --num-microbatches 1
run_logged 120 d1_m2 "$NB" reference "${FLAGS[@]}" --stages 2 --num-microbatches 2
losses_close "D = 2 x m = 1 and D = 1 x m = 2 agree" "$WORK/d2_m1.log" "$WORK/d1_m2.log"
grep -q 'on 2 stages x 2 replicas (blocks' "$WORK/d2_m1.log" && grep -q ' 128 tokens per iteration' "$WORK/d2_m1.log" \
  && pass "the header names the replicas and the global batch's tokens" || fail "header: $(head -n 1 "$WORK/d2_m1.log")"

names_into SCHEDULES schedules
for s in "${SCHEDULES[@]}"; do
  [ "$s" = pipedream ] && continue
  L=(--num-layers "$(enough_layers "$s" 2 4)")
  run_logged 120 "d2_$s" "$NB" reference "${FLAGS[@]}" "${L[@]}" --stages 2 --schedule "$s" --data-parallel-size 2 \
    --num-microbatches 2 --optimizer muon
  run_logged 120 "d1_$s" "$NB" reference "${FLAGS[@]}" "${L[@]}" --stages 2 --schedule "$s" --num-microbatches 4 \
    --optimizer muon
  losses_close "$s: D = 2 x m = 2 and D = 1 x m = 4 agree" "$WORK/d2_$s.log" "$WORK/d1_$s.log"
done
# Only where each replica adds several microbatches: with m = 1 a replica's sum is one gradient, and whether
# (0 + g1) + g2 rounds as a GEMM accumulating g2 onto g1 does depends on the CPU's sgemm kernel.
[ "$(hash_of "$WORK/d2_1f1b.log")" != "$(hash_of "$WORK/d1_1f1b.log")" ] \
  && pass "the sum's order shows: D = 2 x m = 2 is not D = 1 x m = 4 bit for bit" || fail "D = 2 and D = 1 had the same bits"
# pipedream with D = 2: each step is one microbatch per replica.
run_logged 120 d2_pd "$NB" reference "${FLAGS[@]}" --stages 2 --schedule pipedream --data-parallel-size 2 \
  --num-microbatches 1 --optimizer adamw
[[ "$(hash_of "$WORK/d2_pd.log")" =~ ^[0-9a-f]{64}$ ]] && pass "pipedream runs with D = 2" || fail "pipedream D = 2: $(tail -n 3 "$WORK/d2_pd.log")"

# Repeatable; resumed after 2 of 6 iterations; a D = 1 checkpoint refused.
R=("${FLAGS[@]}" --stages 2 --data-parallel-size 2 --num-microbatches 2 --optimizer adamw)
run_logged 120 again "$NB" reference "${R[@]}"
run_logged 120 again2 "$NB" reference "${R[@]}"
same_state "D = 2: the same bits twice" "$WORK/again.log" "$WORK/again2.log"
run_logged 120 stop "$NB" reference "${R[@]}" --save "$WORK/ck" --save-interval 2 --exit-interval 2
run_logged 120 rest "$NB" reference "${R[@]}" --load "$WORK/ck"
same_state "D = 2: stopped after 2, resumed" "$WORK/again.log" "$WORK/rest.log"
run_logged 120 d1_save "$NB" reference "${FLAGS[@]}" --stages 2 --num-microbatches 2 --save "$WORK/ck1" --save-interval 2 \
  --exit-interval 2
expect_error 1 "field 'identity.microbatches_per_iteration' is '2' there, '4' in this run" "$NB" reference "${R[@]}" \
  --load "$WORK/ck1"

run_logged 60 gbs "$NB" reference "${R[@]}" --global-batch-size 8 --train-iters 1
grep -q '^final weights sha256' "$WORK/gbs.log" && pass "--global-batch-size 8 = 2 x 2 x 2 is accepted" || fail "gbs: $(cat "$WORK/gbs.log")"
expect_error 2 "--global-batch-size 6 is not --data-parallel-size 2 x --num-microbatches 2 x --micro-batch-size 2 = 8" \
  "$NB" reference "${R[@]}" --global-batch-size 6
expect_error 2 "--data-parallel-size must be positive, got 0" "$NB" reference "${FLAGS[@]}" --data-parallel-size 0
finish
