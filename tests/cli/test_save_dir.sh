#!/usr/bin/env bash
# --save DIR before the first step (src/core/save_dir_lock.h):
# - a DIR that cannot be created (below a regular file), a read-only one, one whose file system has no room for the
#   checkpoints the run holds at its peak (--save-keep K: K + 1): one line, exit 2, no step run; for train (plain
#   loop and in-process pipeline) and reference;
# - one run per DIR: a second run while the first holds DIR gets one line naming the holder's host, pid and start
#   (exit 2, no step), and the first completes; a holder killed by SIGKILL leaves DIR free (its stale lock file
#   does not block), and the next run resumes from its checkpoint onto the uninterrupted weights; the lock file
#   confuses neither --load nor --save-keep;
# - under mpirun (2 ranks): rank 0 holds the lock, and a second job's every rank exits 2 with one line.
# The read-only and small file systems are tmpfs mounts (root only); without them those cases say "skip".
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --train-iters 8 --log-interval 1)
HOST=$(hostname)
STARTED='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z'

MOUNTS=()
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
  true
}
trap cleanup EXIT

# refused NAME PATTERN COMMAND...: `nobubble COMMAND...` exits 2 with exactly one line `nobubble: error: ...`
# matching PATTERN (extended regex), and prints no progress line (no step ran).
refused() {
  local name=$1 pattern=$2 rc=0
  shift 2
  timeout -k 5 60 "$NB" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <"$WORK/$name.err")" = 1 ] \
     && grep -Eq "^nobubble: error: .*$pattern" "$WORK/$name.err" && ! grep -q '^step ' "$WORK/$name.out"; then
    pass "$name: exit 2, no step: '$(cat "$WORK/$name.err")'"
  else
    fail "$name: exit $rc, $(grep -c '^step ' "$WORK/$name.out") progress lines, stderr: $(cat "$WORK/$name.err")"
  fi
}

# mount_tmpfs DIR OPTIONS: a tmpfs on DIR (unmounted at exit), or false where this user may not mount.
mount_tmpfs() {
  mkdir -p "$1"
  mount -t tmpfs -o "$2" tmpfs "$1" 2>/dev/null || return 1
  MOUNTS+=("$1")
}

# ---- DIR that cannot be used ----
: >"$WORK/a-file"
refused below_file "--save '$WORK/a-file/ck': cannot create the directory: Not a directory" \
  train "${FLAGS[@]}" --save "$WORK/a-file/ck" --save-interval 2
refused below_file_pipeline "cannot create the directory" \
  train "${FLAGS[@]}" --stages 2 --untie-embeddings-and-output-weights --save "$WORK/a-file/ck" --save-interval 2
refused below_file_reference "cannot create the directory" \
  reference "${FLAGS[@]}" --save "$WORK/a-file/ck" --save-interval 2
if mount_tmpfs "$WORK/ro" ro,size=1m; then
  refused read_only "--save '$WORK/ro' is not writable: cannot create '$WORK/ro/.lock': Read-only file system" \
    train "${FLAGS[@]}" --save "$WORK/ro" --save-interval 2
else
  # /proc/self is a directory in which even root cannot create a file.
  echo "skip: a read-only tmpfs (mount refused); /proc/self instead"
  refused read_only "--save '/proc/self' is not writable: cannot create" \
    train "${FLAGS[@]}" --save /proc/self --save-interval 2
fi
if mount_tmpfs "$WORK/small" size=64k; then
  SIZE='[0-9.]+ [kMG]?B'
  refused no_room \
    "--save '$WORK/small': 4 checkpoints of about $SIZE .* need $SIZE but its file system has $SIZE free" \
    train "${FLAGS[@]}" --save "$WORK/small" --save-interval 2
  refused no_room_pipeline "checkpoints of about" \
    train "${FLAGS[@]}" --stages 2 --untie-embeddings-and-output-weights --save "$WORK/small" --save-interval 2
else
  echo "skip: the free-space check (a 64 kB tmpfs needs mount, which this user may not do)"
fi
# --save-keep K holds K + 1 checkpoints while the next is written: a file system with room for two (each about
# 2.3 MB with its margin) takes --save-keep 1 and refuses --save-keep 2.
if mount_tmpfs "$WORK/two" size=6m; then
  refused keep_peak "--save '$WORK/two': 3 checkpoints of about" \
    train "${FLAGS[@]}" --save "$WORK/two" --save-interval 2 --save-keep 2
  run_logged 120 keep_peak_fits "$NB" train "${FLAGS[@]}" --save "$WORK/two" --save-interval 2 --save-keep 1
  [ "$(ls "$WORK/two")" = step_8 ] && pass "--save-keep 1 in room for two: runs, keeps step_8" \
    || fail "--save-keep 1 in room for two left: $(ls "$WORK/two" | tr '\n' ' ')"
else
  echo "skip: the free-space check of --save-keep's peak (a tmpfs needs mount, which this user may not do)"
fi

# ---- one run per DIR ----
# wait_for_line FILE PATTERN: until FILE has a line matching PATTERN (at most 60 s).
wait_for_line() {
  for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# The first run (long enough to be caught running) is held by SIGSTOP once it has written its name into the lock
# file, so that the others certainly start while it holds DIR.
LONG=(--train-iters 1000 --log-interval 250)
"$NB" train "${FLAGS[@]}" "${LONG[@]}" --save "$WORK/shared" --save-interval 500 >"$WORK/first.log" 2>&1 &
first=$!
PIDS+=("$first")
wait_for_line "$WORK/shared/.lock" '^host ' || fail "the first run wrote no lock file: $(cat "$WORK/first.log")"
kill -STOP "$first"
HOLDER="in use by another run \(host $HOST, pid $first, started $STARTED\)"
refused second_run "--save '$WORK/shared' is $HOLDER" train "${FLAGS[@]}" --save "$WORK/shared" --save-interval 2
refused second_pipeline "$HOLDER" train "${FLAGS[@]}" --stages 2 --untie-embeddings-and-output-weights \
  --save "$WORK/shared" --save-interval 2
refused second_reference "$HOLDER" reference "${FLAGS[@]}" --save "$WORK/shared" --save-interval 2
kill -CONT "$first"
rc=0
wait "$first" || rc=$?
[ "$rc" = 0 ] && grep -q '^final weights sha256 ' "$WORK/first.log" && [ -f "$WORK/shared/step_1000/manifest.json" ] \
  && pass "the first run completes (exit 0, its last checkpoint saved) while the others were refused" \
  || fail "the first run: exit $rc, $(tail -n 3 "$WORK/first.log")"

# A holder killed by SIGKILL (--kill-at-step: in step 7, after the checkpoint of step 4) leaves its line in the
# lock file; the next run gets the lock anyway and resumes onto the uninterrupted weights.
K=(--stages 2 --untie-embeddings-and-output-weights)
run_logged 120 full_p2 "$NB" train "${FLAGS[@]}" "${K[@]}"
# (In a subshell whose stderr, where the shell reports "Killed", is /dev/null.)
rc=$( (timeout -k 5 60 "$NB" train "${FLAGS[@]}" "${K[@]}" --save "$WORK/killed" --save-interval 4 --kill-at-step 6 \
  --kill-rank 0 >"$WORK/killed.log" 2>&1; echo $?) 2>/dev/null)
stale=$(cat "$WORK/killed/.lock" 2>/dev/null)
[ "$rc" = 137 ] && [[ "$stale" =~ ^host\ $HOST,\ pid\ [0-9]+,\ started\ ${STARTED}$ ]] \
  && pass "killed by SIGKILL (exit $rc), its lock file stays: '$stale'" \
  || fail "killed run: exit $rc, lock file '$stale'"
run_logged 120 after_kill "$NB" train "${FLAGS[@]}" "${K[@]}" --save "$WORK/killed" --save-interval 4 \
  --load "$WORK/killed"
grep -q '^resumed from .*/killed/step_4 (after step 4)$' "$WORK/after_kill.log" \
  && [ "$(hash_of "$WORK/after_kill.log")" = "$(hash_of "$WORK/full_p2.log")" ] \
  && [ "$(cat "$WORK/killed/.lock")" != "$stale" ] \
  && pass "after the SIGKILL a new run takes the lock, resumes from step 4 and ends on the uninterrupted weights" \
  || fail "after the kill: $(tail -n 3 "$WORK/after_kill.log"), lock file '$(cat "$WORK/killed/.lock")'"

# --save-keep prunes step directories only; --load picks the newest checkpoint with the lock file beside it.
run_logged 120 keep "$NB" train "${FLAGS[@]}" --save "$WORK/keep" --save-interval 2 --save-keep 2
[ "$(ls -A "$WORK/keep" | tr '\n' ' ')" = ".lock step_6 step_8 " ] && pass "--save-keep 2 keeps .lock, step_6, step_8" \
  || fail "--save-keep 2 left: $(ls -A "$WORK/keep" | tr '\n' ' ')"
run_logged 120 keep_load "$NB" train "${FLAGS[@]}" --load "$WORK/keep"
grep -q '^resumed from .*/keep/step_8 (after step 8)$' "$WORK/keep_load.log" && pass "--load beside the lock file" \
  || fail "--load: $(head -n 3 "$WORK/keep_load.log")"

if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: mpirun cases (this nobubble has no MPI)"
  finish
  exit
fi

# ---- under mpirun ----
M=(--untie-embeddings-and-output-weights --save "$WORK/mpi" --save-interval 500)
expect_mpi_usage_error mpi_below_file 2 "rank 0 (stage 0): --save '$WORK/a-file/ck': cannot create the directory" \
  "${FLAGS[@]}" --untie-embeddings-and-output-weights --save "$WORK/a-file/ck" --save-interval 2
"${MPI[@]}" -np 2 "$NB" train "${FLAGS[@]}" "${LONG[@]}" "${M[@]}" >"$WORK/mpi_first.log" 2>&1 &
mpi_first=$!
PIDS+=("$mpi_first")
wait_for_line "$WORK/mpi/.lock" '^host ' || fail "the first job wrote no lock file: $(cat "$WORK/mpi_first.log")"
holder=$(sed -n 's/^host .*, pid \([0-9]*\), started .*/\1/p' "$WORK/mpi/.lock")
if [ -n "$holder" ] && tr '\0' '\n' <"/proc/$holder/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then
  pass "under mpirun rank 0 (pid $holder) holds the lock"
else
  fail "lock holder '$holder' is not rank 0 of the job: $(cat "$WORK/mpi/.lock")"
fi
kill -STOP "$holder"  # the first job's rank 1 waits for rank 0 until it goes on
PIDS+=("$holder")
expect_mpi_usage_error mpi_second 2 "--save '$WORK/mpi' is in use by another run (host $HOST, pid $holder, started " \
  "${FLAGS[@]}" "${M[@]}"
kill -CONT "$holder"
rc=0
wait "$mpi_first" || rc=$?
[ "$rc" = 0 ] && grep -q '^final weights sha256 ' "$WORK/mpi_first.log" && pass "the first job completes" \
  || fail "the first job: exit $rc, $(tail -n 3 "$WORK/mpi_first.log")"
finish
