#!/usr/bin/env bash
# The pipeline against its oracle for every optimizer and every delay mitigation (docs/DESIGN.md section 2, "The
# oracle"; test_pipeline_equality.sh does the same for the schedules with AdamW). On the 5-layer model, 6 iterations:
#   1. every optimizer under every schedule (as `nobubble --list` names them), P = 3, m = 3;
#   2. every --delay-fix but none (ef, taylor, predict, lookahead: 2bw only) for P in {2, 3, 4} and m in {P, 2P}, the
#      optimizer rotating so each one meets every fix; the lists ef,predict and taylor,predict at P in {2, 3};
#   3. --sync-start / --sync-cooldown with 2bw (with ef, and with ef,predict at P = 2) and pipedream, P in {2, 4};
#   4. pipedream with --delay-fix predict (each stage looks ahead as many updates as it lags) at P in {3, 4}, and
#      with --sync-start 2 and --sync-cooldown 2 at P = 3;
# each run as `nobubble reference`, as `nobubble train --stages P` (in-process) and, with MPI, as
# `mpirun -np P nobubble train`: the same final weights, optimizer state (delay-fix state included), validation
# loss and weight versions held. Then checks that the mitigations do something: none, ef, taylor, predict,
# ef,predict and lookahead end on six different weights; 2bw with every step synchronous (--sync-start = the run)
# is 1f1b's run exactly.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 5 --untie-embeddings-and-output-weights
       --log-interval 100 --train-iters 6)
[ "$HAVE_MPI" = 1 ] || echo "skip: nobubble is built without MPI or mpirun is missing: in-process runs only"
names_into OPTIMIZERS optimizers
names_into SCHEDULES schedules
names_into DELAY_FIXES delay-fixes

run() { run_logged 120 "$@"; }

start=$SECONDS
for opt in "${OPTIMIZERS[@]}"; do
  for schedule in "${SCHEDULES[@]}"; do
    check_against_reference "${opt}_${schedule}" 3 --optimizer "$opt" --schedule "$schedule" --num-microbatches 3 \
      --num-layers "$(enough_layers "$schedule" 3 5)"
  done
done

k=0
for fix in "${DELAY_FIXES[@]}"; do
  [ "$fix" = none ] && continue  # the plain runs above
  for p in 2 3 4; do
    for m in "$p" $((2 * p)); do
      opt=${OPTIMIZERS[$((k % ${#OPTIMIZERS[@]}))]}
      k=$((k + 1))
      check_against_reference "2bw_${fix}_${opt}_p${p}_m${m}" "$p" --schedule 2bw --delay-fix "$fix" --taylor-lambda 0.5 \
        --predict-lambda 0.5 --optimizer "$opt" --num-microbatches "$m"
    done
  done
done
for fixes in ef,predict taylor,predict; do
  for p in 2 3; do
    opt=${OPTIMIZERS[$((k % ${#OPTIMIZERS[@]}))]}
    k=$((k + 1))
    check_against_reference "2bw_${fixes/,/_}_${opt}_p${p}" "$p" --schedule 2bw --delay-fix "$fixes" \
      --taylor-lambda 0.5 --optimizer "$opt" --num-microbatches "$p"
  done
done

for p in 2 4; do
  for sync in "--sync-start 2" "--sync-cooldown 2" "--sync-start 1 --sync-cooldown 2"; do
    id=$(echo "$sync" | tr -d ' -')
    # shellcheck disable=SC2086
    check_against_reference "2bw_ef_${id}_p${p}" "$p" --schedule 2bw --delay-fix ef --num-microbatches "$p" $sync
    # shellcheck disable=SC2086
    [ "$p" = 2 ] && check_against_reference "2bw_ef_predict_${id}_p${p}" "$p" --schedule 2bw --delay-fix ef,predict \
      --num-microbatches "$p" $sync
    # shellcheck disable=SC2086
    check_against_reference "pipedream_${id}_p${p}" "$p" --schedule pipedream --optimizer lion --num-microbatches "$p" $sync
  done
done
for p in 3 4; do
  check_against_reference "pipedream_predict_p${p}" "$p" --schedule pipedream --delay-fix predict --predict-lambda 0.5 \
    --optimizer muon --num-microbatches "$p"
done
check_against_reference pipedream_predict_sync_p3 3 --schedule pipedream --delay-fix predict --optimizer adamw \
  --num-microbatches 3 --sync-start 2 --sync-cooldown 2
echo "matrix: $((SECONDS - start)) s"

# The fixes change the result: none, ef and taylor on the same run end on three different weights.
none=$(hash_of "$WORK/ref_adamw_2bw.log")
run ef_p3 "$NB" reference "${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --stages 3 --delay-fix ef
run taylor_p3 "$NB" reference "${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --stages 3 --delay-fix taylor
run predict_p3 "$NB" reference "${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --stages 3 --delay-fix predict
run ef_predict_p3 "$NB" reference "${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --stages 3 --delay-fix ef,predict
run lookahead_p3 "$NB" reference "${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --stages 3 --delay-fix lookahead
hashes=("$none" "$(hash_of "$WORK/ef_p3.log")" "$(hash_of "$WORK/taylor_p3.log")" "$(hash_of "$WORK/predict_p3.log")"
        "$(hash_of "$WORK/ef_predict_p3.log")" "$(hash_of "$WORK/lookahead_p3.log")")
distinct=$(printf '%s\n' "${hashes[@]}" | grep -c . | tr -d ' ')
unique=$(printf '%s\n' "${hashes[@]}" | grep . | sort -u | wc -l | tr -d ' ')
[ "$distinct" = 6 ] && [ "$unique" = 6 ] && pass "none, ef, taylor, predict, ef,predict and lookahead differ" \
  || fail "none, ef, taylor, predict, ef,predict, lookahead: ${hashes[*]}"

# Pipedream's prediction changes its run (the same optimizer, P and m as the plain one above).
predicted=$(hash_of "$WORK/ref_pipedream_predict_p3.log")
plain=$(hash_of "$WORK/ref_muon_pipedream.log")
[ -n "$predicted" ] && [ "$predicted" != "$plain" ] && pass "pipedream with predict differs from plain pipedream" \
  || fail "pipedream predict $predicted vs plain $plain"

# Every step synchronous: 2bw is 1f1b, and ef (which acts on asynchronous steps only) changes nothing. Without
# clipping, since 1f1b clips globally and 2bw per stage.
run all_sync "$NB" reference "${FLAGS[@]}" --clip-grad 0 --schedule 2bw --num-microbatches 3 --stages 3 \
  --sync-start 6 --delay-fix ef
run one_f_one_b "$NB" reference "${FLAGS[@]}" --clip-grad 0 --schedule 1f1b --num-microbatches 3 --stages 3
[ -n "$(hash_of "$WORK/all_sync.log")" ] && [ "$(hash_of "$WORK/all_sync.log")" = "$(hash_of "$WORK/one_f_one_b.log")" ] \
  && pass "2bw with --sync-start = every step is 1f1b" \
  || fail "all-sync 2bw $(hash_of "$WORK/all_sync.log") vs 1f1b $(hash_of "$WORK/one_f_one_b.log")"
finish
