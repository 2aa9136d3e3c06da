#!/usr/bin/env bash
# The fault matrix (issue 11, item 6; issue 37, item 3; docs/DESIGN.md section 9): under `mpirun -np 3` (ranks
# oversubscribed), one rank dies by SIGKILL (the test-only --kill-at-step 5 --kill-rank R --kill-during POINT) while
# the job saves every 2 iterations. For the first, the middle and the last stage, and for each point (as a forward
# begins, at a receive, inside the optimizer step, halfway through writing its checkpoint file), and for rank 0's
# points of completing a save (halfway through the manifest, between the switch's two renames, halfway through
# --save-keep's pruning), the job must end within 15 s (it never hangs), its newest complete checkpoint must verify
# (resuming checks every file's size and sha256) and the resume must reach the uninterrupted run's weights and
# optimizer state. A half-written file leaves its step's staging folder without a manifest, so that step is no
# checkpoint and the resume takes the one before.
# Re-saves: a job saved steps 2, 4 and 6; a second job resumes from step_4 into the same --save DIR (once resharded
# to 2 stages) and is killed at each point while saving step 6 again. `--load DIR` must then find a complete step 6
# (the old or the new one, never less), the resume must reach the uninterrupted state, and that resume, saving into
# DIR, must leave no temporaries of the killed save behind.
# And SIGSTOP of a rank (a wedged node: nothing dies, nothing arrives) is ended by the other ranks' watchdogs
# (--watchdog-s 3). Each case prints its time to exit. No check depends on how far a job got before its fault: the
# SIGSTOP case waits for a complete checkpoint (not a printed line), and its resume is compared with the oracle at
# an iteration computed from the newest complete checkpoint.
source "$(dirname "$0")/lib.sh"
if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: this nobubble has no MPI or mpirun is missing: no fault matrix"
  finish
  exit
fi
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --untie-embeddings-and-output-weights
       --train-iters 8 --lr-warmup-iters 3 --log-interval 1 --schedule 2bw --num-microbatches 3 --optimizer muon
       --delay-fix ef --clip-grad 0)
# --clip-grad 0: 2bw clips each stage by its own norm, so only without clipping does a run resharded to 2 stages (a
# re-save case below) continue bit-equal to the uninterrupted run on 3 (docs/errors.md, "Another number of stages").
run_logged 120 full "$NB" reference "${FLAGS[@]}" --stages 3

RESUME_ARGS=()  # what fault_case's resume adds

# The newest step under $1 with a complete checkpoint (what --load DIR takes): step_<t>, or its staging folder
# step_<t>.saving where a save was killed between its renames.
newest_complete() {
  ls -d "$1"/step_*/manifest.json 2>/dev/null | sed 's|.*/step_\([0-9]*\)\(\.saving\)\{0,1\}/manifest.json|\1|' \
    | sort -n | tail -n 1
}

# fault_case NAME MPI-ARGS... : the job must fail within 15 s, then resume from its newest complete checkpoint, at
# least step $MIN_STEP (default 0). $NP ranks (default 3); $CASE_DIR the --save DIR (default $WORK/ck_NAME).
fault_case() {
  local name=$1 rc=0 t0 dir=${CASE_DIR:-$WORK/ck_$1}
  shift
  t0=$(date +%s%N)
  timeout -k 2 30 "${MPI[@]}" -np "${NP:-3}" "$NB" train "${FLAGS[@]}" --save "$dir" --save-interval 2 "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  local t1 ms killed_ns after_kill_ms=?
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  killed_ns=$(grep -o 'test fault: SIGKILL at [0-9]*' "$WORK/$name.err" | awk '{print $NF}')
  [ -n "$killed_ns" ] && after_kill_ms=$(( (t1 - killed_ns) / 1000000 ))
  [ -n "$killed_ns" ] || fail "$name: the rank did not kill itself"
  local step
  step=$(newest_complete "$dir")
  echo "fault matrix: $name: exit $rc ${after_kill_ms} ms after the SIGKILL (${ms} ms in all), newest complete checkpoint step_${step:-none}"
  # mpirun exits 137 (128 + SIGKILL) for the killed rank; `timeout` would end a hung job only after 30 s.
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$ms" -lt 15000 ]; then
    pass "$name: the job ended (exit $rc) ${ms} ms after it started"
  else
    fail "$name: exit $rc after ${ms} ms (124: timed out): $(tail -n 3 "$WORK/$name.err")"
  fi
  if [ -z "$step" ] || [ "$step" -lt "${MIN_STEP:-0}" ]; then
    fail "$name: newest complete checkpoint step_${step:-none}, older than step_${MIN_STEP:-0}"; return
  fi
  run_logged 120 "res_$name" "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" --load "$dir" \
    ${RESUME_ARGS[@]+"${RESUME_ARGS[@]}"}
  grep -Eq "^resumed from .*/step_$step(\.saving)? \(after step $step\)" "$WORK/res_$name.log" \
    || fail "$name: did not resume from step_$step: $(head -n 1 "$WORK/res_$name.log")"
  same_state "$name: resumed from step_$step, ends on the uninterrupted state" "$WORK/full.log" "$WORK/res_$name.log"
}

for rank in 0 1 2; do
  for point in forward receive optimizer checkpoint; do
    fault_case "kill_rank${rank}_$point" --kill-at-step 5 --kill-rank "$rank" --kill-during "$point"
  done
  # The half-written file: its step's staging folder has no manifest, and only the temporary name is there.
  ls "$WORK/ck_kill_rank${rank}_checkpoint/step_6.saving/" 2>/dev/null | grep -q "stage_$rank.safetensors.tmp" \
    && [ ! -f "$WORK/ck_kill_rank${rank}_checkpoint/step_6.saving/manifest.json" ] \
    && [ ! -e "$WORK/ck_kill_rank${rank}_checkpoint/step_6" ] \
    && pass "rank $rank killed mid-write: step_6.saving has its temporary file and no manifest, no step_6" \
    || fail "rank $rank mid-write: $(ls -R "$WORK/ck_kill_rank${rank}_checkpoint/" 2>&1 | tr '\n' ' ')"
done
# Rank 0 completing the save of step 6: mid-manifest (step 4 is the newest), between the renames (step 6, in its
# staging folder), mid-prune (step 6).
MIN_STEP=4 fault_case kill_rank0_manifest --kill-at-step 5 --kill-rank 0 --kill-during manifest
MIN_STEP=6 fault_case kill_rank0_switch --kill-at-step 5 --kill-rank 0 --kill-during switch
MIN_STEP=6 fault_case kill_rank0_prune --kill-at-step 5 --kill-rank 0 --kill-during prune --save-keep 2

# Re-saves of step 6 after a resume from step_4 into the same DIR. The first job: steps 2, 4, 6 saved.
run_logged 120 prefix "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" --save "$WORK/prefix" --save-interval 2 \
  --exit-interval 6
[ "$(newest_complete "$WORK/prefix")" = 6 ] || fail "prefix: no step_6: $(ls "$WORK/prefix" | tr '\n' ' ')"
# resave_case NAME NP KILL-RANK POINT [ARGS...]: step 6 saved again by NP ranks, killed at POINT of rank KILL-RANK.
resave_case() {
  local name=$1 np=$2 rank=$3 point=$4
  shift 4
  rm -rf "$WORK/ck_$name"
  cp -r "$WORK/prefix" "$WORK/ck_$name"
  RESUME_ARGS=(--save "$WORK/ck_$name" --save-interval 2)
  NP=$np MIN_STEP=6 fault_case "$name" \
    --stages "$np" --load "$WORK/ck_$name/step_4" --kill-at-step 5 --kill-rank "$rank" --kill-during "$point" "$@"
  RESUME_ARGS=()
  # The resume saved into DIR too: nothing of the killed save is left there.
  local left
  left=$(ls -A "$WORK/ck_$name" | grep -v -E '^(\.lock|step_[0-9]+)$' | tr '\n' ' ')
  left+=$(find "$WORK/ck_$name" -name '*.tmp.*' | tr '\n' ' ')
  [ -z "$left" ] && pass "$name: the next run removed the killed save's temporaries" \
    || fail "$name: left in DIR after the next run: $left"
}
resave_case resave_rank1_checkpoint 3 1 checkpoint
resave_case resave_rank0_manifest 3 0 manifest
resave_case resave_rank0_switch 3 0 switch
resave_case resave_rank0_prune 3 0 prune --save-keep 2
resave_case resave_reshard_switch 2 0 switch
resave_case resave_reshard_rank1_checkpoint 2 1 checkpoint

# SIGSTOP of the middle rank once the job has a complete checkpoint: the watchdogs end the job.
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; true' EXIT
"${MPI[@]}" -np 3 bash -c 'echo $$ >"'"$WORK"'/pid.$OMPI_COMM_WORLD_RANK"; exec "$0" "$@"' "$NB" train "${FLAGS[@]}" \
  --train-iters 400 --save "$WORK/ck_stop" --save-interval 2 --watchdog-s 3 >"$WORK/stop.out" 2>"$WORK/stop.err" &
MP=$!
PIDS+=("$MP")
( sleep 60; kill -KILL "$MP" 2>/dev/null ) & PIDS+=("$!")
for _ in $(seq 1 600); do [ -n "$(newest_complete "$WORK/ck_stop")" ] && break; sleep 0.05; done
STOPPED=$(cat "$WORK/pid.1")
PIDS+=("$STOPPED")
t0=$(date +%s%N)
kill -STOP "$STOPPED"
rc=0
wait "$MP" || rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "fault matrix: sigstop_rank1: exit $rc ${ms} ms after the SIGSTOP"
[ "$rc" != 0 ] && [ "$ms" -lt 15000 ] && grep -q 'watchdog: rank [02] (stage [02]) made no progress' "$WORK/stop.err" \
  && pass "SIGSTOP of rank 1: the watchdogs ended the job (exit $rc) ${ms} ms later" \
  || fail "SIGSTOP: exit $rc after ${ms} ms: $(head -n 3 "$WORK/stop.err")"
kill -CONT "$STOPPED" 2>/dev/null; kill -KILL "$STOPPED" 2>/dev/null
step=$(newest_complete "$WORK/ck_stop")
# However far the job got: resume from its newest complete checkpoint and stop 2 iterations later, at an
# iteration that is a multiple of the exit (and save) interval, where the oracle saves as well.
target=$(( ${step:-0} + 2 ))
run_logged 120 res_stop "$NB" train "${FLAGS[@]}" --stages 3 --train-iters 400 --load "$WORK/ck_stop" \
  --exit-interval "$target" --save "$WORK/ck_stop2" --save-interval "$target"
run_logged 120 full_stop "$NB" reference "${FLAGS[@]}" --stages 3 --train-iters 400 --exit-interval "$target" --save \
  "$WORK/ck_ref" --save-interval "$target"
[ -n "$step" ] && [ -f "$WORK/ck_stop2/step_$target/manifest.json" ] \
  && [ "$(grep -o '"sha256": "[0-9a-f]*"' "$WORK/ck_stop2/step_$target/manifest.json")" = \
       "$(grep -o '"sha256": "[0-9a-f]*"' "$WORK/ck_ref/step_$target/manifest.json")" ] \
  && pass "SIGSTOP: resumed from step_$step, its checkpoint of step $target is the uninterrupted oracle's" \
  || fail "SIGSTOP resume from step_${step:-none}: checkpoints of step $target differ or are missing"
finish
