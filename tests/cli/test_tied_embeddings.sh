#!/usr/bin/env bash
# Tied embeddings across stages (docs/DESIGN.md section 2, "Tied embeddings"): the first part holds the matrix, the
# last part a copy; each sums its half of the gradient and the two add at the step (g = E + H), so:
# - every schedule (gpipe, 1f1b, zb-h1, zb-v, interleaved 1F1B, 2bw, pipedream) in one process and under mpirun
#   equals `nobubble reference` bit for bit (weights, optimizer state, validation loss, versions), with clipping
#   active (2bw and pipedream: the copy clipped by the first stage's norm); every optimizer and delay fix in one
#   process;
# - a synchronous run on 3 stages ends on the one-stage run's weights (the copy is checked equal to the matrix and
#   left out of the hash), also with D = 2, the distributed optimizer and Muon;
# - checkpoints hold the matrix once (the last part's file has none of the copy's state) and resume and reshard
#   P = 1 <-> P = 3 (and with D = 2, 3 stages -> 1) onto the uninterrupted run.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 6 --tie-embeddings --log-interval 100
       --train-iters 6 --num-microbatches 3 --clip-grad 0.05)
[ "$HAVE_MPI" = 1 ] || echo "skip: nobubble is built without MPI or mpirun is missing: in-process runs only"

check_against_reference gpipe 3 --schedule gpipe
check_against_reference 1f1b 3 --schedule 1f1b
check_against_reference zb-h1 3 --schedule zb-h1
check_against_reference zb-v 3 --schedule zb-v
check_against_reference interleaved 3 --schedule 1f1b --virtual-stages 2
check_against_reference 2bw 3 --schedule 2bw
check_against_reference pipedream 3 --schedule pipedream
check_against_reference 2bw_ef_muon 3 --schedule 2bw --delay-fix ef --optimizer muon

# In one process: every optimizer (1f1b) and every delay fix (2bw; pipedream takes predict alone): the shared
# matrix is one parameter, stepped the same on both ends.
names_into optimizers optimizers
names_into fixes delay-fixes
check_in_process() {  # check_in_process ID FLAGS...
  local id=$1
  shift
  run_logged 60 "ref_$id" "$NB" reference "${FLAGS[@]}" "$@" --stages 3
  run_logged 60 "inproc_$id" "$NB" train "${FLAGS[@]}" "$@" --stages 3
  equal "in-process $id" "$WORK/ref_$id.log" "$WORK/inproc_$id.log"
}
for opt in "${optimizers[@]}"; do check_in_process "1f1b_$opt" --optimizer "$opt"; done
for fix in "${fixes[@]}"; do [ "$fix" = none ] || check_in_process "2bw_$fix" --schedule 2bw --delay-fix "$fix"; done
check_in_process pipedream_predict --schedule pipedream --delay-fix predict

# Synchronous: the bits of the one-stage run, whatever the schedule and the cut.
run_logged 60 one_stage "$NB" train "${FLAGS[@]}"
for id in gpipe 1f1b zb-h1 zb-v interleaved; do
  [ "$(hash_of "$WORK/inproc_$id.log")" = "$(hash_of "$WORK/one_stage.log")" ] \
    && pass "$id on 3 stages ends on the one-stage weights" \
    || fail "$id: $(hash_of "$WORK/inproc_$id.log"), one stage $(hash_of "$WORK/one_stage.log")"
done

# Checkpoints: the matrix once, in stage 0's file; resumed and resharded onto the uninterrupted run.
run_logged 60 save_p3 "$NB" train "${FLAGS[@]}" --stages 3 --save "$WORK/p3" --save-interval 3 --exit-interval 3
[ -z "$(grep -a -l 'embedding.weight' "$WORK"/p3/step_3/stage_2.* 2>/dev/null)" ] \
  && grep -a -q 'embedding.weight' "$WORK"/p3/step_3/stage_0.* \
  && pass "the matrix is written once, by stage 0" || fail "the last part's file holds the copy's tensors"
run_logged 60 p3_to_p3 "$NB" train "${FLAGS[@]}" --stages 3 --load "$WORK/p3"
same_state "resumed on 3 stages" "$WORK/inproc_1f1b.log" "$WORK/p3_to_p3.log"
run_logged 60 p3_to_p1 "$NB" train "${FLAGS[@]}" --load "$WORK/p3"
[ "$(hash_of "$WORK/p3_to_p1.log")" = "$(hash_of "$WORK/one_stage.log")" ] && pass "resharded 3 stages -> 1" \
  || fail "3 -> 1: $(hash_of "$WORK/p3_to_p1.log"), want $(hash_of "$WORK/one_stage.log")"
run_logged 60 save_p1 "$NB" train "${FLAGS[@]}" --save "$WORK/p1" --save-interval 3 --exit-interval 3
run_logged 60 p1_to_p3 "$NB" train "${FLAGS[@]}" --stages 3 --load "$WORK/p1"
same_state "resharded 1 stage -> 3" "$WORK/inproc_1f1b.log" "$WORK/p1_to_p3.log"
for s in 2bw pipedream; do
  run_logged 60 "save_$s" "$NB" train "${FLAGS[@]}" --stages 3 --schedule "$s" --save "$WORK/$s" --save-interval 3 \
    --exit-interval 3
  run_logged 60 "res_$s" "$NB" train "${FLAGS[@]}" --stages 3 --schedule "$s" --load "$WORK/$s"
  same_state "$s resumed (the copy's older versions from its own file)" "$WORK/inproc_$s.log" "$WORK/res_$s.log"
done

if [ "$HAVE_MPI" = 1 ]; then
  D2=(--data-parallel-size 2 --use-distributed-optimizer --optimizer muon)
  run_logged 60 ref_d2 "$NB" reference "${FLAGS[@]}" "${D2[@]}" --stages 3
  run_logged 60 mpi_d2 mpirun --oversubscribe -np 6 "$NB" train "${FLAGS[@]}" "${D2[@]}" --save "$WORK/d2" \
    --save-interval 3
  equal "mpirun -np 6: D = 2, distributed Muon" "$WORK/ref_d2.log" "$WORK/mpi_d2.log"
  run_logged 60 mpi_d2_p1 mpirun --oversubscribe -np 2 "$NB" train "${FLAGS[@]}" "${D2[@]}"
  [ "$(hash_of "$WORK/mpi_d2_p1.log")" = "$(hash_of "$WORK/mpi_d2.log")" ] \
    && pass "D = 2 on 1 stage ends on D = 2 on 3 stages' weights" \
    || fail "D = 2: 1 stage $(hash_of "$WORK/mpi_d2_p1.log"), 3 stages $(hash_of "$WORK/mpi_d2.log")"
  run_logged 60 d2_to_d2_p1 mpirun --oversubscribe -np 2 "$NB" train "${FLAGS[@]}" "${D2[@]}" \
    --load "$WORK/d2/step_3"
  # (the optimizer state's hash is in stage order: another cut hashes it in another order)
  [ "$(hash_of "$WORK/d2_to_d2_p1.log")" = "$(hash_of "$WORK/mpi_d2.log")" ] \
    && pass "resharded D = 2 x 3 stages -> D = 2 x 1 stage" \
    || fail "D = 2 x 3 -> 1: $(hash_of "$WORK/d2_to_d2_p1.log"), want $(hash_of "$WORK/mpi_d2.log")"
fi
finish
