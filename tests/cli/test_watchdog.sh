#!/usr/bin/env bash
# The watchdog (--watchdog-s, src/run/watchdog.h) under mpirun: a rank whose stage made no progress for S
# seconds prints `nobubble: error: watchdog: rank R (stage R) made no progress for S s; it waits for ...` and
# aborts the job, so that no rank hangs on a dead or wedged peer.
# - a rank stalled by the test-only --stall-at-step N --stall-rank 1 (the middle of 3; it sleeps forever):
#   the other ranks' watchdogs end the job within a bound, each line naming the receive from stage 1 it waits
#   for. Every rank whose watchdog fires before the abort reaches it prints its own line (both neighbours
#   here, as a rule: their deadlines lie a few ms apart and the abort takes ~10 ms), so the test asserts one
#   or two lines, from the waiting ranks only, never from the stalled one;
# - a rank stopped with SIGSTOP mid-run: the same, and the stopped rank, continued by mpirun to be killed,
#   prints nothing (time it spent stopped is not waiting);
# - --watchdog-s 0: the stalled job hangs, with no watchdog line, until its `timeout` is told to end it;
# - usage errors: a negative --watchdog-s, --stall-at-step without --stall-rank, a stall without mpirun.
# Each case measures the time from the stall (the progress line of the step before it) or the SIGSTOP to the
# job's end, and prints it. Every process a case starts is killed at its end and on any exit (trap).
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --untie-embeddings-and-output-weights
       --num-microbatches 3)
WATCHDOG_S=3
BOUND_S=20  # the most a case may take from the stall to the job's end

expect_error 2 "watchdog-s must be a number of seconds >= 0 (0: off), got -1" "$NB" train "${FLAGS[@]}" --watchdog-s -1
expect_error 2 "stall-at-step and --stall-rank go together" "$NB" train "${FLAGS[@]}" --stages 3 --stall-at-step 1
expect_error 2 "stall-rank 3 is not a rank of 3 stages" "$NB" train "${FLAGS[@]}" --stages 3 --stall-at-step 1 \
  --stall-rank 3
expect_error 2 "in one process it would stall every stage forever" "$NB" train "${FLAGS[@]}" --stages 3 \
  --stall-at-step 1 --stall-rank 1

if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: nobubble is built without MPI or mpirun is missing: no mpirun checks"
  finish
  exit
fi

# Each rank writes its pid to $WORK/NAME.pid.RANK (the shell execs nobubble, which keeps the pid), so that a
# case can stop one rank and kill every one it started.
JOB=       # the running case's `timeout` (the parent of mpirun)
JOB_NAME=
kill_case() {
  local pids
  pids=$(cat "$WORK/$JOB_NAME".pid.* 2>/dev/null)
  # SIGKILL ends stopped processes too. mpirun (the child of timeout) first, then timeout, then the ranks.
  if [ -n "$JOB" ]; then
    pkill -KILL -P "$JOB" 2>/dev/null
    kill -KILL "$JOB" 2>/dev/null
  fi
  for pid in $pids; do kill -KILL "$pid" 2>/dev/null; done
  JOB=
}
trap 'kill_case' EXIT

# start_case NAME NP ARGS...: starts `mpirun -np NP nobubble train ARGS...` in the background, bounded by a
# timeout of 30 s; stdout in $WORK/NAME.out, stderr in $WORK/NAME.err.
start_case() {
  JOB_NAME=$1
  local np=$2
  shift 2
  rm -f "$WORK/$JOB_NAME".pid.*
  timeout -k 2 30 mpirun --oversubscribe -np "$np" bash -c \
    'echo $$ >"'"$WORK/$JOB_NAME"'.pid.$OMPI_COMM_WORLD_RANK"; exec "$0" "$@"' \
    "$NB" train "$@" >"$WORK/$JOB_NAME.out" 2>"$WORK/$JOB_NAME.err" &
  JOB=$!
}

# wait_for_line PATTERN: until the running case's stdout has a line matching PATTERN (at most 20 s).
wait_for_line() {
  local i
  for i in $(seq 1000); do
    grep -q -- "$1" "$WORK/$JOB_NAME.out" 2>/dev/null && return 0
    sleep 0.02
  done
  return 1
}

now_s() { date +%s.%N; }
seconds_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.2f", b - a }'; }

# end_case: waits for the running case's job; sets RC and TOOK_S (seconds since $T0), then kills what is left.
end_case() {
  RC=0
  wait "$JOB" || RC=$?
  TOOK_S=$(seconds_since "$T0")
  kill_case
}

watchdog_lines() { grep -c '^nobubble: error: watchdog: ' "$WORK/$JOB_NAME.err"; }

# check_watchdog_lines NAME: the job ended by itself (exit non-zero, not timeout's 124/137) within BOUND_S,
# with one or two watchdog lines and no other error line; every watchdog line comes from rank 0 or 2 and names a
# receive from stage 1 (the stalled or stopped rank), or the all-gather of the clip sums that stage 1 holds up.
check_watchdog_lines() {
  local name=$1 lines others wrong
  lines=$(watchdog_lines)
  others=$(grep '^nobubble: error: ' "$WORK/$JOB_NAME.err" | grep -vc '^nobubble: error: watchdog: ')
  wrong=$(grep '^nobubble: error: watchdog: ' "$WORK/$JOB_NAME.err" | grep -Evc \
    "^nobubble: error: watchdog: rank ([02]) \(stage \1\) made no progress for $WATCHDOG_S s; it waits for (recv_(activation|gradient) mb [0-9]+ from stage 1|optimizer_step [0-9]+ -> W[0-9]+: the all-gather of every stage's clip sums \(--clip-scope global\))$")
  if [ "$RC" != 0 ] && [ "$RC" != 124 ] && [ "$RC" != 137 ] && awk -v t="$TOOK_S" -v b="$BOUND_S" 'BEGIN { exit !(t < b) }' \
     && [ "$lines" -ge 1 ] && [ "$lines" -le 2 ] && [ "$others" = 0 ] && [ "$wrong" = 0 ]; then
    pass "$name: job ended ${TOOK_S}s after it (watchdog ${WATCHDOG_S}s), exit $RC, $lines watchdog line(s): $(grep '^nobubble: error: watchdog: ' "$WORK/$JOB_NAME.err" | sed 's/^nobubble: error: //' | paste -sd '|' -)"
  else
    fail "$name: exit $RC after ${TOOK_S}s (124: timed out), $lines watchdog lines, stderr: $(cat "$WORK/$JOB_NAME.err")"
  fi
}

# ---- (a) rank 1 of 3 stalls as step 2 begins; its neighbours' watchdogs end the job ----
start_case stall 3 "${FLAGS[@]}" --train-iters 6 --stall-at-step 2 --stall-rank 1 --watchdog-s "$WATCHDOG_S"
if wait_for_line '^step      2/6'; then
  T0=$(now_s)  # rank 1 stalls right after its report on iteration 2 (step 1, from 0) is in; +- 0.02 s
  end_case
  echo "measured: stall of rank 1 -> job end: ${TOOK_S} s (--watchdog-s $WATCHDOG_S)"
  check_watchdog_lines "stall at rank 1"
  ! grep -q '^step      3/6' "$WORK/stall.out" && pass "stall: no progress line after the stall" \
    || fail "stall: progress after the stall: $(tail -n 2 "$WORK/stall.out")"
else
  T0=$(now_s) && end_case
  fail "stall: no progress line for step 2: $(cat "$WORK/stall.out" "$WORK/stall.err")"
fi

# ---- (b) SIGSTOP of rank 1 mid-run ----
start_case sigstop 3 "${FLAGS[@]}" --train-iters 100000 --watchdog-s "$WATCHDOG_S"
if wait_for_line '^step      2/100000' && [ -s "$WORK/sigstop.pid.1" ]; then
  kill -STOP "$(cat "$WORK/sigstop.pid.1")"
  T0=$(now_s)
  end_case
  echo "measured: SIGSTOP of rank 1 -> job end: ${TOOK_S} s (--watchdog-s $WATCHDOG_S)"
  check_watchdog_lines "SIGSTOP of rank 1"
else
  T0=$(now_s) && end_case
  fail "sigstop: the run did not get to step 2: $(cat "$WORK/sigstop.out" "$WORK/sigstop.err")"
fi

# ---- (c) --watchdog-s 0: nothing ends the stalled job but timeout ----
# Once the stall has begun (the progress line before it, however long the start took), the job is watched for
# more than twice the watchdog limit of the other cases; then the timeout around it is told to end it (SIGTERM,
# as its own expiry would), and no rank may be left.
start_case off 3 "${FLAGS[@]}" --train-iters 6 --stall-at-step 2 --stall-rank 1 --watchdog-s 0
if wait_for_line '^step      2/6'; then
  T0=$(now_s)
  sleep $((2 * WATCHDOG_S + 1))
  if kill -0 "$JOB" 2>/dev/null && [ "$(watchdog_lines)" = 0 ]; then
    pass "--watchdog-s 0: the stalled job still runs $(seconds_since "$T0")s into the stall, no watchdog line"
  else
    fail "--watchdog-s 0: the stalled job ended or printed a watchdog line: $(cat "$WORK/off.err")"
  fi
  kill -TERM "$JOB" 2>/dev/null
  RC=0
  wait "$JOB" || RC=$?
  # timeout's SIGTERM reaches mpirun, which ends its ranks: none may be left (those that are get killed).
  left=
  for i in $(seq 50); do
    left=$(for pid in $(cat "$WORK"/off.pid.*); do [ -d "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null && echo "$pid"; done)
    [ -z "$left" ] && break
    sleep 0.1
  done
  [ "$RC" != 0 ] && [ -z "$left" ] && pass "--watchdog-s 0: ended by the timeout's SIGTERM (exit $RC), no rank left" \
    || fail "--watchdog-s 0: exit $RC after SIGTERM, ranks left: $left"
else
  T0=$(now_s) && end_case
  fail "--watchdog-s 0: no progress line for step 2: $(cat "$WORK/off.out" "$WORK/off.err")"
fi
JOB=
kill_case
finish
