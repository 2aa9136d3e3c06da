#!/usr/bin/env bash
# Some ranks fail, the others do not (src/core/job_failure.h, docs/errors.md "Partial failures"): MPMD jobs
# (`mpirun -np A nobubble ARGS : -np B nobubble ARGS BAD`) where rank 0 only, rank 1 only, or one of 4 ranks of a
# P x D job fails in parsing (a bad flag, a missing --config), in its set-up (a data file its node lacks) or by an
# allocation failure (the test-only --host-memory-limit: std::bad_alloc from the host allocator, at the set-up
# or in a step). Each job must end within BOUND_S of its launch, with exactly one `nobubble: error:` line naming
# the failing rank (rank 0's usage lines name none), the same exit code on every rank (2 usage, 1 runtime) and a
# non-zero exit of mpirun. Each case prints the time from launch to the last rank's exit. Before this, such jobs
# hung: the failing rank went into MPI_Finalize while the others waited in a collective.
source "$(dirname "$0")/lib.sh"
if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: nobubble is built without MPI or mpirun is missing"
  finish
  exit
fi
# Every rank's command line names $WORK: whatever a failed case left running is killed on exit.
trap 'pkill -KILL -f -- "$WORK/" 2>/dev/null' EXIT
make_corpus "$WORK/corpus.txt"
BASE=(train --data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --train-iters 6 --num-microbatches 2)
# Launch included (about 1 s here); the design's bound is 5 s after the failure (kAgreeMs + kFinalizeDeadlineMs).
BOUND_S=12

# The shell around each rank writes "rank R exit CODE" when its nobubble ends, so that every rank's code is seen,
# and passes the code on half a second later (mpirun ends the job's other processes at the first non-zero exit,
# and would end their shells before they wrote).
WRAP='"$0" "$@"; rc=$?; echo "rank $OMPI_COMM_WORLD_RANK exit $rc" >>"$CODES"; sleep 0.5; exit $rc'

# mpmd NAME NP_GOOD NP_BAD FIRST_BAD: runs NP_GOOD ranks with BASE + GOOD, NP_BAD with BASE + BAD; FIRST_BAD says
# which block comes first ("good" or "bad"). GOOD and BAD are arrays set by the caller.
mpmd() {
  local name=$1 np_good=$2 np_bad=$3 first=$4
  local good=(-np "$np_good" bash -c "$WRAP" "$NB" "${BASE[@]}" "${GOOD[@]}")
  local bad=(-np "$np_bad" bash -c "$WRAP" "$NB" "${BASE[@]}" "${BAD[@]}")
  export CODES="$WORK/$name.codes"
  rm -f "$CODES"
  local t0 rc=0
  t0=$(date +%s.%N)
  if [ "$first" = bad ]; then
    timeout -k 5 20 "${MPI[@]}" "${bad[@]}" : "${good[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  else
    timeout -k 5 20 "${MPI[@]}" "${good[@]}" : "${bad[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  fi
  MPMD_RC=$rc
  MPMD_S=$(echo "$(date +%s.%N) - $t0" | bc)
}

# expect_partial NAME NP_GOOD NP_BAD FIRST_BAD CODE PATTERN: the job ends within BOUND_S, every one of its ranks
# exits CODE, mpirun non-zero, and stderr holds exactly one error line, matching PATTERN.
expect_partial() {
  local name=$1 np_good=$2 np_bad=$3 first=$4 code=$5 pattern=$6
  mpmd "$name" "$np_good" "$np_bad" "$first"
  local ranks=$((np_good + np_bad)) same lines
  same=$(grep -c " exit $code\$" "$CODES" 2>/dev/null)
  lines=$(error_lines "$WORK/$name.err")
  if [ "$MPMD_RC" != 0 ] && [ "$MPMD_RC" != 124 ] && [ "$MPMD_RC" != 137 ] && [ "$same" = "$ranks" ] \
     && [ "$lines" = 1 ] && (($(echo "$MPMD_S <= $BOUND_S" | bc))) \
     && grep '^nobubble: error: ' "$WORK/$name.err" | grep -q -- "$pattern"; then
    pass "$name: all $ranks ranks exit $code, mpirun $MPMD_RC, ${MPMD_S}s from launch;" \
         "$(grep '^nobubble: error: ' "$WORK/$name.err")"
  else
    fail "$name: mpirun exit $MPMD_RC after ${MPMD_S}s (124: timed out), ranks: $(tr '\n' ' ' <"$CODES" 2>/dev/null), \
stderr: $(grep -v '^ \|^-\|^$' "$WORK/$name.err" | head -8)"
  fi
}

GOOD=()
# Parsing: a flag only one rank was given, a --config file one node lacks, a value only one rank rejects.
BAD=(--micro-batch-size 0)
expect_partial parse_rank0 1 1 bad 2 '^nobubble: error: --micro-batch-size must be positive'
expect_partial parse_rank1 1 1 good 2 'rank 1: --micro-batch-size must be positive'
BAD=(--config "$WORK/missing.toml")
expect_partial config_rank1 1 1 good 2 "rank 1: --config '.*missing.toml': cannot read the file"
BAD=(--lr nan)
expect_partial lr_rank0 1 1 bad 2 'lr nan must be a finite number'
# Set-up: a data file this rank cannot open.
BAD=(--data "$WORK/missing.txt")
expect_partial setup_rank0 1 1 bad 1 'rank 0 (stage 0): data .*missing.txt'
expect_partial setup_rank1 1 1 good 1 'rank 1 (stage 1): data .*missing.txt'
# Allocation: the first tensor of the set-up, or one of the first steps' activations.
BAD=(--host-memory-limit 4096)
expect_partial alloc_rank0 1 1 bad 1 'rank 0 (stage 0): out of memory (std::bad_alloc)'
expect_partial alloc_rank1 1 1 good 1 'rank 1 (stage 1): out of memory (std::bad_alloc)'
BAD=(--host-memory-limit 1000000)
expect_partial alloc_in_step_rank0 1 1 bad 1 'rank 0 (stage 0): out of memory (std::bad_alloc)'
# ... and that one failed in a step: the set-up was done (rank 0 printed the run's header).
if grep -q 'over MPI' "$WORK/alloc_in_step_rank0.out"; then pass "alloc_in_step_rank0 failed after the set-up"
else fail "alloc_in_step_rank0 failed before the run began: $(cat "$WORK/alloc_in_step_rank0.out")"; fi

# One of 4 ranks of a P x D job (P = 2, D = 2): rank 3 (stage 1 of replica 1), the last block of the command line.
BASE+=(--data-parallel-size 2)
BAD=(--micro-batch-size 0)
expect_partial pxd_parse_rank3 3 1 good 2 'rank 3: --micro-batch-size must be positive'
BAD=(--data "$WORK/missing.txt")
expect_partial pxd_setup_rank3 3 1 good 1 'rank 3 (stage 1 of replica 1): data .*missing.txt'
BAD=(--host-memory-limit 4096)
expect_partial pxd_alloc_rank3 3 1 good 1 'rank 3 (stage 1 of replica 1): out of memory (std::bad_alloc)'

finish
