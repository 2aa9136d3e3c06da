# Shared by the command-line tests: counting checks and running the program with a time limit.
# Usage in a test: source lib.sh; NB=$1; WORK=$2; ...checks...; finish
set -u
NB=${1:?usage: test.sh NOBUBBLE WORKDIR}
WORK=${2:?usage: test.sh NOBUBBLE WORKDIR}
rm -rf "$WORK" && mkdir -p "$WORK"
PASSED=0
FAILED=0

pass() { PASSED=$((PASSED + 1)); echo "ok: $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $1"; }

# expect_error CODE PATTERN CMD...: exit code CODE, stderr exactly one line `nobubble: error: ...PATTERN...`.
expect_error() {
  local code=$1 pattern=$2
  shift 2
  local err="$WORK/stderr" rc=0
  timeout 60 "$@" >/dev/null 2>"$err" || rc=$?
  local lines first
  lines=$(wc -l <"$err")
  first=$(head -n 1 "$err")
  if [ "$rc" = "$code" ] && [ "$lines" = 1 ] && [[ "$first" == "nobubble: error: "* ]] && grep -q -- "$pattern" "$err"; then
    pass "exit $code, '$first'"
  else
    fail "expected exit $code and one line matching '$pattern' from: $* ; got exit $rc and: $(cat "$err")"
  fi
}

# A tiny model that trains in well under a second per step.
TINY_FLAGS=(--model tiny --num-layers 2 --hidden-size 64 --ffn-hidden-size 96 --num-attention-heads 4
            --num-query-groups 2 --micro-batch-size 2 --seq-length 32 --lr 1e-3 --eval-iters 1 --log-interval 1)

# A small text corpus made here, deterministic.
make_corpus() {
  local out=$1
  for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000))"; done >"$out"
}

# MPI as root (more ranks than cores need --oversubscribe on the command line).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# HAVE_MPI=1 when this nobubble can run under mpirun (built with MPI, and mpirun is present).
HAVE_MPI=0
if command -v mpirun >/dev/null && ldd "$NB" 2>/dev/null | grep -q libmpi; then HAVE_MPI=1; fi

# run_logged SECONDS NAME COMMAND...: runs COMMAND with a time limit, its output in $WORK/NAME.log; a non-zero
# exit is a failed check.
run_logged() {
  local seconds=$1 name=$2
  shift 2
  timeout -k 5 "$seconds" "$@" >"$WORK/$name.log" 2>&1 || fail "$name exited non-zero: $(tail -n 3 "$WORK/$name.log")"
}

# Under mpirun, what counts is nobubble's own lines (mpirun adds its banner about the failed rank).
MPI=(mpirun --oversubscribe)
error_lines() { grep -c '^nobubble: error: ' "$1"; }

# expect_mpi_failure NAME NP PATTERN ARGS...: `mpirun -np NP nobubble train ARGS...` exits non-zero within 20 s
# with exactly one nobubble error line, matching PATTERN.
expect_mpi_failure() {
  local name=$1 np=$2 pattern=$3 rc=0 t0=$SECONDS
  shift 3
  timeout -k 5 20 "${MPI[@]}" -np "$np" "$NB" train "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  local took=$((SECONDS - t0))
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && [ "$(error_lines "$WORK/$name.err")" = 1 ] \
     && grep '^nobubble: error: ' "$WORK/$name.err" | grep -q -- "$pattern"; then
    pass "$name: exit $rc after ${took}s, '$(grep '^nobubble: error: ' "$WORK/$name.err")'"
  else
    fail "$name: exit $rc after ${took}s (124: timed out), stderr: $(cat "$WORK/$name.err")"
  fi
}

# expect_mpi_usage_error NAME NP PATTERN ARGS...: `mpirun -np NP nobubble train ARGS...` ends within 20 s, every
# rank exits 2 (each rank's exit code is written by a shell around it) and stderr holds one error line in all,
# matching PATTERN. Logs: $WORK/NAME.out, .err, .codes.
expect_mpi_usage_error() {
  local name=$1 np=$2 pattern=$3 rc=0 t0=$SECONDS
  shift 3
  rm -f "$WORK/$name.codes"
  timeout -k 5 20 "${MPI[@]}" -np "$np" bash -c \
    '"$0" "$@"; echo "rank $OMPI_COMM_WORLD_RANK exit $?" >>"'"$WORK/$name.codes"'"' \
    "$NB" train "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  local codes lines
  codes=$(grep -c ' exit 2$' "$WORK/$name.codes" 2>/dev/null)
  lines=$(error_lines "$WORK/$name.err")
  if [ "$rc" != 124 ] && [ "$codes" = "$np" ] && [ "$lines" = 1 ] \
     && grep '^nobubble: error: ' "$WORK/$name.err" | grep -q -- "$pattern"; then
    pass "$name: all $np ranks exit 2 after $((SECONDS - t0))s, one line '$(grep '^nobubble: error: ' "$WORK/$name.err")'"
  else
    fail "$name: mpirun exit $rc, ranks: $(cat "$WORK/$name.codes" 2>/dev/null | tr '\n' ' '), stderr: $(cat "$WORK/$name.err")"
  fi
}

hash_of() { grep '^final weights sha256 ' "$1" | awk '{print $4}'; }

# The pipeline's oracle checks (test_pipeline_equality*.sh): what a run's log says it ended with.
val_of() { grep '^final val_loss ' "$1"; }
opt_of() { grep '^final optimizer state sha256 ' "$1" | awk '{print $5}'; }
versions_of() { grep '^weight versions held at most' "$1"; }

# same_state NAME WANT_LOG GOT_LOG: the final weights and optimizer state hashes agree (a resumed run against the
# uninterrupted one: test_pipeline_resume.sh, test_signals.sh, test_fault_matrix.sh).
same_state() {
  local h o
  h=$(hash_of "$2"); o=$(opt_of "$2")
  if [[ "$h" =~ ^[0-9a-f]{64}$ ]] && [[ "$o" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$3")" = "$h" ] \
     && [ "$(opt_of "$3")" = "$o" ]; then pass "$1"
  else fail "$1: want $h / $o, got $(hash_of "$3") / $(opt_of "$3")"; fi
}

# equal NAME WANT_LOG GOT_LOG: weights hash, optimizer state hash, validation loss and versions line agree.
equal() {
  local name=$1 want=$2 got=$3 h o
  h=$(hash_of "$want")
  o=$(opt_of "$want")
  if [[ "$h" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$got")" = "$h" ] && [[ "$o" =~ ^[0-9a-f]{64}$ ]] \
     && [ "$(opt_of "$got")" = "$o" ] && [ "$(val_of "$got")" = "$(val_of "$want")" ] \
     && [ -n "$(versions_of "$got")" ] && [ "$(versions_of "$got")" = "$(versions_of "$want")" ]; then
    pass "$name equals reference ($(versions_of "$got" | sed 's/.*: //') versions)"
  else
    fail "$name: reference $h opt $o $(val_of "$want") [$(versions_of "$want")], got $(hash_of "$got") opt $(opt_of "$got") $(val_of "$got") [$(versions_of "$got")]"
  fi
}

# check_against_reference ID P FLAGS...: `nobubble reference`, the in-process pipeline (`train --stages P`) and,
# with MPI, `mpirun -np P nobubble train` run the caller's FLAGS plus FLAGS...; both pipelines must equal the
# reference. Logs: $WORK/ref_ID.log, inproc_ID.log, mpi_ID.log.
check_against_reference() {
  local id=$1 p=$2
  shift 2
  run_logged 120 "ref_$id" "$NB" reference "${FLAGS[@]}" "$@" --stages "$p"
  run_logged 120 "inproc_$id" "$NB" train "${FLAGS[@]}" "$@" --stages "$p"
  equal "in-process $id" "$WORK/ref_$id.log" "$WORK/inproc_$id.log"
  if [ "$HAVE_MPI" = 1 ]; then
    run_logged 120 "mpi_$id" mpirun --oversubscribe -np "$p" "$NB" train "${FLAGS[@]}" "$@"
    equal "mpirun -np $p $id" "$WORK/ref_$id.log" "$WORK/mpi_$id.log"
  fi
}

# enough_layers SCHEDULE P N: the --num-layers a run of SCHEDULE on P stages needs when the test's model has N
# layers: N, or 2P for zb-v, which cuts the model into two parts per stage (each needs a block).
enough_layers() {
  if [ "$1" = zb-v ] && [ $((2 * $2)) -gt "$3" ]; then echo $((2 * $2)); else echo "$3"; fi
}

# names_into ARRAY KIND: ARRAY gets `nobubble --list KIND`, the names the command line accepts (optimizers,
# schedules, delay-fixes, ...), so that a test covers every one without listing them. An empty list would make
# the test check nothing: a failed check that ends the test.
names_into() {
  local -n names=$1
  mapfile -t names < <("$NB" --list "$2")
  if [ "${#names[@]}" = 0 ]; then
    fail "nobubble --list $2 printed no names"
    finish
    exit 1
  fi
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}
