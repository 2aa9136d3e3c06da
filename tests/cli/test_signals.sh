#!/usr/bin/env bash
# Stop signals (src/core/stop_signal.h, pipeline/stage/stop_vote.h; docs/DESIGN.md section 9): with --save, SIGTERM or SIGUSR1
# makes every stage save a checkpoint at an iteration all of them agree on and the job exit 0; resuming from
# it ends on the uninterrupted run's weights and optimizer state.
# - injected (--signal-at-step) in one process, pipeline and plain loop, and under mpirun on a middle rank;
# - a real SIGINT (Ctrl-C) to the single process of an in-process pipeline: the same stop, exit 0;
# - a real SIGUSR1 to mpirun (which forwards it to every rank), a real SIGTERM and a real SIGINT to one rank
#   (what Slurm's scancel and srun deliver to each task), and SIGTERM sent again and again to every rank until
#   the job ends (a second signal during the save must not corrupt it);
# - SIGTERM and SIGINT to mpirun itself: Open MPI 4's mpirun does not forward them; it sends each rank SIGCONT at
#   once, SIGTERM odls_base_sigkill_timeout seconds later (1 by default) and SIGKILL as long again after that, and
#   exits 1 whatever the ranks did. The ranks take that SIGTERM as any other: they save and exit 0 (their save
#   fits the second window here), and the checkpoint resumes exactly; mpirun's exit is 1;
# - without --save a signal keeps its default meaning: the job ends, non-zero.
# Each prints its time from the signal to the job's exit; every job is bounded (killed after 60 s).
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --untie-embeddings-and-output-weights
       --lr-warmup-iters 3 --log-interval 1 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef)

# Injected, in one process: the stop is agreed within max(P, 2) iterations of the step the signal came in.
S=(--train-iters 12 --stages 3)
run_logged 120 full12 "$NB" reference "${FLAGS[@]}" "${S[@]}"
run_logged 120 inj "$NB" train "${FLAGS[@]}" "${S[@]}" --save "$WORK/inj" --save-interval 100 --signal-at-step 3
grep -q '^stopped by SIGTERM after step [4-7]; checkpoint saved$' "$WORK/inj.log" && [ -f "$WORK"/inj/step_*/manifest.json ] \
  && pass "in one process: $(grep '^stopped by' "$WORK/inj.log")" || fail "injected stop: $(tail -n 4 "$WORK/inj.log")"
run_logged 120 inj_res "$NB" train "${FLAGS[@]}" "${S[@]}" --load "$WORK/inj"
same_state "in one process: resumed after the signal's checkpoint" "$WORK/full12.log" "$WORK/inj_res.log"
# A real SIGINT (Ctrl-C) to the single process, once iteration 20 of 300 is printed. A background job of a script
# starts with SIGINT ignored (and nobubble leaves it so): env gives it the default a terminal's job has.
L=(--train-iters 300 --log-interval 10)
run_logged 120 full300 "$NB" reference "${FLAGS[@]}" "${L[@]}" --stages 3
env --default-signal=INT "$NB" train "${FLAGS[@]}" "${L[@]}" --stages 3 --save "$WORK/int1" --save-interval 1000 \
  >"$WORK/int1.log" 2>&1 &
one=$!
( sleep 60; kill -KILL "$one" 2>/dev/null ) & one_guard=$!
for _ in $(seq 1 300); do grep -q '^step     20/' "$WORK/int1.log" 2>/dev/null && break; sleep 0.05; done
kill -INT "$one"
rc=0
wait "$one" || rc=$?
kill "$one_guard" 2>/dev/null
step=$(grep -o '^stopped by SIGINT after step [0-9]*' "$WORK/int1.log" | awk '{print $NF}')
if [ "$rc" = 0 ] && [ -n "$step" ] && [ -f "$WORK/int1/step_$step/manifest.json" ]; then
  pass "SIGINT to one process: exit 0, $(grep '^stopped by' "$WORK/int1.log")"
  run_logged 120 int1_res "$NB" train "${FLAGS[@]}" "${L[@]}" --stages 3 --load "$WORK/int1"
  same_state "SIGINT to one process: resumed from step $step" "$WORK/full300.log" "$WORK/int1_res.log"
else
  fail "SIGINT to one process: exit $rc, $(tail -n 2 "$WORK/int1.log")"
fi

P=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --train-iters 12 --optimizer adamw)
run_logged 120 plain_full "$NB" train "${P[@]}"
run_logged 120 plain_inj "$NB" train "${P[@]}" --save "$WORK/plain" --save-interval 100 --signal-at-step 5
run_logged 120 plain_res "$NB" train "${P[@]}" --load "$WORK/plain"
grep -q '^stopped by SIGTERM after step 6; checkpoint saved$' "$WORK/plain_inj.log" \
  && [ "$(hash_of "$WORK/plain_res.log")" = "$(hash_of "$WORK/plain_full.log")" ] \
  && pass "plain loop: stops after the signal's step, resumes onto the uninterrupted weights" \
  || fail "plain loop signal: $(grep -E '^stopped|^final weights' "$WORK"/plain_*.log)"

if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: mpirun cases (this nobubble has no MPI)"
  finish
  exit
fi

run_logged 120 mpi_inj "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" "${S[@]}" --save "$WORK/mpi_inj" --save-interval 100 \
  --signal-at-step 3 --signal-rank 1
run_logged 120 mpi_inj_res "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" "${S[@]}" --load "$WORK/mpi_inj"
grep -q '^stopped by SIGTERM after step [4-7]; checkpoint saved$' "$WORK/mpi_inj.log" \
  && pass "mpirun, signal on rank 1: $(grep '^stopped by' "$WORK/mpi_inj.log")" || fail "mpi injected: $(tail -n 3 "$WORK/mpi_inj.log")"
same_state "mpirun: resumed after the signal's checkpoint" "$WORK/full12.log" "$WORK/mpi_inj_res.log"

# Real signals into a longer run (300 iterations of ~10 ms: L, full300 above), sent once iteration 20 is printed.
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; pkill -KILL -f "$WORK/sig_" 2>/dev/null; true; }
trap cleanup EXIT

# signal_case NAME HOW EXPECT_RC: starts the job, waits for iteration 20, signals it (HOW: usr1_mpirun,
# term_mpirun, int_mpirun, term_rank, int_rank, term_repeated), waits for it (at most 60 s) and checks its exit code.
signal_case() {
  local name=$1 how=$2 want_rc=$3 save=(--save "$WORK/sig_$1" --save-interval 1000)
  [ "$how" = term_nosave ] && save=(--metrics "$WORK/sig_$1.jsonl")
  "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" "${L[@]}" "${save[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local mp=$!
  PIDS+=("$mp")
  ( sleep 60; kill -KILL "$mp" 2>/dev/null ) & PIDS+=("$!")
  for _ in $(seq 1 300); do grep -q '^step     20/' "$WORK/$name.out" 2>/dev/null && break; sleep 0.05; done
  local ranks
  ranks=$(pgrep -f "nobubble train.*$WORK/sig_$name" | grep -vx "$mp")
  local t0
  t0=$(date +%s%N)
  case $how in
    usr1_mpirun) kill -USR1 "$mp" ;;
    term_mpirun) kill -TERM "$mp" ;;
    int_mpirun) kill -INT "$mp" ;;
    term_rank|term_nosave) kill -TERM $(echo "$ranks" | sed -n 2p) ;;
    int_rank) kill -INT $(echo "$ranks" | sed -n 2p) ;;
    term_repeated) ( while kill -0 "$mp" 2>/dev/null; do kill -TERM $ranks 2>/dev/null; sleep 0.02; done ) & ;;
  esac
  local rc=0
  wait "$mp" || rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "time from the signal to the job's exit: $name ${ms} ms"
  [ "$rc" = "$want_rc" ] && [ "$ms" -lt 15000 ] && pass "$name: exit $rc ${ms} ms after the signal" \
    || fail "$name: exit $rc (want $want_rc) after ${ms} ms: $(tail -n 3 "$WORK/$name.err")"
}

# mpirun exits 1 after a TERM or INT of its own (Open MPI), whatever its ranks did; the ranks' stop is checked below.
for how in usr1_mpirun term_rank int_rank term_repeated term_mpirun int_mpirun; do
  case $how in *_mpirun) want_rc=1 ;; *) want_rc=0 ;; esac
  [ "$how" = usr1_mpirun ] && want_rc=0
  signal_case "$how" "$how" "$want_rc"
  step=$(grep -o '^stopped by SIG[A-Z0-9]* after step [0-9]*' "$WORK/$how.out" | awk '{print $NF}')
  if [ -n "$step" ] && [ -f "$WORK/sig_$how/step_$step/manifest.json" ] && [ "$how" = int_rank ]; then
    pass "$how: $(grep '^stopped by' "$WORK/$how.out")"  # its save is term_rank's, resumed there
  elif [ -n "$step" ] && [ -f "$WORK/sig_$how/step_$step/manifest.json" ]; then
    pass "$how: $(grep '^stopped by' "$WORK/$how.out")"
    run_logged 120 "res_$how" "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" "${L[@]}" --load "$WORK/sig_$how"
    same_state "$how: resumed from step $step" "$WORK/full300.log" "$WORK/res_$how.log"
  else
    fail "$how: no stop line or checkpoint: $(tail -n 2 "$WORK/$how.out") $(ls "$WORK/sig_$how" 2>&1)"
  fi
done
signal_case term_nosave term_nosave 143
grep -q '^stopped by' "$WORK/term_nosave.out" && fail "stopped without --save" || true
finish
