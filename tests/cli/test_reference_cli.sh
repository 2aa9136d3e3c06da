#!/usr/bin/env bash
# `nobubble reference`, the single-process oracle of the pipeline schedules (docs/DESIGN.md section 2):
# - gpipe and 1f1b cut into p = 1..4 stages (5 layers: p = 2, 3, 4 cut unevenly), m in {p, 2p}, end with the
#   bits of `nobubble train` given the same flags;
# - 2bw differs from 1f1b (its gradients are one step stale, even on one stage);
# - pipedream on one stage over T iterations of m microbatches is 1f1b with one microbatch over T*m iterations;
# - metrics, --config, and every usage error of the new flags.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 5 --untie-embeddings-and-output-weights
       --log-interval 100)

run() {  # run NAME COMMAND [flags...]: the log lands in $WORK/NAME.log
  local name=$1 command=$2
  shift 2
  timeout 120 "$NB" "$command" "${FLAGS[@]}" "$@" >"$WORK/$name.log" 2>&1 \
    || fail "$command $* exited non-zero: $(tail -n 3 "$WORK/$name.log")"
}
optimizer_hash_of() { grep '^final optimizer state sha256 ' "$1" | awk '{print $5}'; }

# (1) synchronous schedules: the reference equals train, for every cut.
for m in 1 2 3 4 6 8; do run "train_m$m" train --num-microbatches "$m" --train-iters 6; done
for p in 1 2 3 4; do
  for m in "$p" $((2 * p)); do
    for schedule in gpipe 1f1b; do
      run "${schedule}_p${p}_m${m}" reference --schedule "$schedule" --stages "$p" --num-microbatches "$m" --train-iters 6
      got=$(hash_of "$WORK/${schedule}_p${p}_m${m}.log"); want=$(hash_of "$WORK/train_m$m.log")
      [[ "$want" =~ ^[0-9a-f]{64}$ ]] && [ "$got" = "$want" ] && pass "$schedule p=$p m=$m equals train" \
        || fail "$schedule p=$p m=$m: reference $got, train $want"
    done
    [ "$(optimizer_hash_of "$WORK/gpipe_p${p}_m${m}.log")" = "$(optimizer_hash_of "$WORK/1f1b_p${p}_m${m}.log")" ] \
      && pass "gpipe and 1f1b p=$p m=$m end with the same optimizer state" \
      || fail "gpipe and 1f1b p=$p m=$m: different optimizer state"
  done
done
grep -q '^nobubble reference: --schedule 1f1b on 3 stages (blocks 0-1 | 2-3 | 4)' "$WORK/1f1b_p3_m3.log" \
  && pass "the cut is printed" || fail "no cut line in 1f1b_p3_m3.log: $(head -n 1 "$WORK/1f1b_p3_m3.log")"

# (2) 2bw on one stage still delays by one step, so it differs from 1f1b.
run 2bw_p1 reference --schedule 2bw --stages 1 --num-microbatches 2 --train-iters 6
[ "$(hash_of "$WORK/2bw_p1.log")" != "$(hash_of "$WORK/train_m2.log")" ] && pass "2bw differs from 1f1b" \
  || fail "2bw p=1 gave the synchronous hash"
grep -q '^weight versions held at most, per stage: 2$' "$WORK/2bw_p1.log" && pass "2bw holds 2 versions" \
  || fail "2bw versions: $(grep 'weight versions' "$WORK/2bw_p1.log")"

# (3) pipedream on one stage: no delay, one step per microbatch, the LR schedule over T*m steps.
run pipedream_p1 reference --schedule pipedream --stages 1 --num-microbatches 3 --train-iters 4 --lr-warmup-iters 5
run 1f1b_m1_t12 reference --schedule 1f1b --stages 1 --num-microbatches 1 --train-iters 12 --lr-warmup-iters 5
run train_m1_t12 train --num-microbatches 1 --train-iters 12 --lr-warmup-iters 5
a=$(hash_of "$WORK/pipedream_p1.log"); b=$(hash_of "$WORK/1f1b_m1_t12.log"); c=$(hash_of "$WORK/train_m1_t12.log")
[[ "$a" =~ ^[0-9a-f]{64}$ ]] && [ "$a" = "$b" ] && [ "$b" = "$c" ] \
  && pass "pipedream p=1, 4 x 3 microbatches = 1f1b and train with 1 microbatch x 12" \
  || fail "pipedream p=1 $a, 1f1b m=1 $b, train m=1 $c"
grep -q '12 optimizer steps' "$WORK/pipedream_p1.log" && pass "pipedream counts 12 optimizer steps" \
  || fail "pipedream header: $(head -n 1 "$WORK/pipedream_p1.log")"
run pipedream_p3 reference --schedule pipedream --stages 3 --num-microbatches 2 --train-iters 3
grep -q '^weight versions held at most, per stage: 3 2 1$' "$WORK/pipedream_p3.log" \
  && pass "pipedream p=3 holds 3 2 1 versions" \
  || fail "pipedream versions: $(grep 'weight versions' "$WORK/pipedream_p3.log")"

# Metrics and --config work as for train.
run metrics reference --schedule 2bw --stages 2 --num-microbatches 2 --train-iters 3 --metrics "$WORK/m.jsonl"
[ "$(wc -l <"$WORK/m.jsonl")" = 3 ] && grep -q '"step": 3, "loss": ' "$WORK/m.jsonl" && pass "3 metrics lines" \
  || fail "metrics: $(cat "$WORK/m.jsonl")"
printf 'schedule = "gpipe"\nstages = 3\nnum-microbatches = 3\ntrain-iters = 6\n' >"$WORK/ref.toml"
run config reference --config "$WORK/ref.toml"
[ "$(hash_of "$WORK/config.log")" = "$(hash_of "$WORK/gpipe_p3_m3.log")" ] && pass "--config run equals the flags run" \
  || fail "--config gave $(hash_of "$WORK/config.log")"

# (6) usage errors: one line, exit 2.
R=("$NB" reference "${FLAGS[@]}" --train-iters 2)
expect_error 2 "unknown --schedule 'zb' (valid: gpipe, 1f1b, 2bw, pipedream, zb-h1, zb-v)" "${R[@]}" --schedule zb
expect_error 2 "stages must be positive, got 0" "${R[@]}" --stages 0
expect_error 2 "6 pipeline stages but the model has only 5 layers" "${R[@]}" --stages 6
expect_error 2 "schedule 2bw needs --num-microbatches >= the number of stages (P): got --num-microbatches 2 with 3 stages" "${R[@]}" --schedule 2bw --stages 3 --num-microbatches 2
expect_error 2 "clip-scope stage does not fit --schedule 1f1b" "${R[@]}" --clip-scope stage
expect_error 2 "clip-scope stage does not fit --schedule gpipe" "${R[@]}" --schedule gpipe --clip-scope stage
expect_error 2 "clip-scope global does not fit --schedule 2bw: an asynchronous schedule clips each stage by its own norm" "${R[@]}" --schedule 2bw --clip-scope global
expect_error 2 "unknown --clip-scope 'layer' (valid: global, stage)" "${R[@]}" --clip-scope layer
expect_error 2 "data is required" "$NB" reference "${TINY_FLAGS[@]}" --schedule 2bw
expect_error 1 "$WORK/missing.txt" "${R[@]}" --data "$WORK/missing.txt"
# train takes the same flags (it runs every schedule on the pipeline executor: test_pipeline_equality.sh).
T=("$NB" train "${FLAGS[@]}" --train-iters 2)
expect_error 2 "unknown --schedule 'zb'" "${T[@]}" --schedule zb
expect_error 2 "clip-scope stage does not fit --schedule 1f1b: a synchronous schedule clips by the global norm" "${T[@]}" --clip-scope stage
finish
