#!/usr/bin/env bash
# run/slurm/train.sbatch on a real single-node Slurm (run/slurm/local_slurm.sh), CPU backend, 2 ranks on this
# machine's 2 cores (a CPU each: with -O both ranks got one CPU, and a resumed mpirun job whose two spinning ranks
# shared it once took 230 s instead of 4):
# - a job under srun --mpi=pmix ends on the same `final weights sha256` as the same run under plain mpirun;
# - a job under mpirun preempted mid-run (`scontrol requeue`) comes back, resumes from its checkpoint, same hash;
# - a job under srun hit by its time-limit signal (USR1 to the batch script, as --signal=B:USR1@N sends it) saves,
#   requeues itself, resumes from that save, same hash;
# - a cancelled job (scancel) saves on Slurm's TERM and is not requeued;
# - REPLICAS=2 (data parallelism, 1 stage x 2 replicas) ends on the hash of the same run under plain mpirun;
# - an impossible layout (ranks != STAGES x REPLICAS; DEVICE=cuda without GPUs) fails before training with one error
#   line.
# Prints the preemption timings. Every wait is bounded; the daemons and scratch go away on any exit (trap).
# - run/slurm/compare.sbatch runs run/compare.sh's smoke grid (a point larger than the allocation skipped) into
#   its run directory: the CSV and the report's charts; on DEVICE=cuda without GPUs it fails before starting.
# Slurm and munge come from Debian (`make test` and `make test-slurm` install them); CI=true installs them when
# missing, elsewhere the test skips (exit 77). ctest runs it alone (RUN_SERIAL): its jobs share 2 cores with
# nothing else, which is what its waits are sized for.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SBATCH="$ROOT/run/slurm/train.sbatch"
LOCAL_SLURM="$ROOT/run/slurm/local_slurm.sh"
# A run of this test that was killed (ctest's timeout) left its daemons: their pid files are in WORK, which
# lib.sh is about to remove.
"$LOCAL_SLURM" down "${2:?usage: test.sh NOBUBBLE WORKDIR}/slurm"
# The test's own polls (wait_until below) must see a job's progress while it runs: on some machines this shell
# stalls for 2-4 s at a time while the jobs' ranks run under srun (seen: a poll at step 50, the next at step 2000 of
# 3000). It runs ahead of them where it may (root), and the signalled jobs run long enough (LONG_ARGS, below).
renice -n -15 -p $$ >/dev/null 2>&1 || true
source "$(dirname "$0")/../cli/lib.sh"
JOB_TIMEOUT_S=180 # the most any one job may take, requeues included (~10 s here when alone; a loaded machine is slower)

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  if [ "${CI:-}" = true ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
  else
    echo "skip: slurm-wlm and munge are not installed (make test and make test-slurm install them)"
    exit 77
  fi
fi
if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: this nobubble has no MPI"
  exit 77
fi

cleanup() {
  "$LOCAL_SLURM" down "$WORK/slurm" # cancels the jobs first
  cp "$WORK/slurm/slurmctld.log" "$WORK/slurm/slurmd.log" "$WORK/" 2>/dev/null # kept for a failure's reading
  rm -rf "$WORK/runs" "$WORK/slurm"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
eval "$("$LOCAL_SLURM" up "$WORK/slurm")" || { fail "local_slurm.sh up: $(tail -n 5 "$WORK"/slurm/*.log)"; finish; exit 1; }

make_corpus "$WORK/corpus.txt"
TRAIN_ARGS="${TINY_FLAGS[*]} --log-interval 50 --data $WORK/corpus.txt --schedule 1f1b --num-microbatches 2 --train-iters 3000"
export TRAIN_ARGS NOBUBBLE="$NB" DEVICE=cpu SAVE_INTERVAL=100 MPIRUN_FLAGS=
# Waiting ranks yield the core: 2 ranks share 2 cores with whatever else runs here, and a rank that spins on its
# receive while its sender is descheduled slowed one run past its 90 s (the bits do not depend on it).
export OMPI_MCA_mpi_yield_when_idle=1
run_logged 120 mpirun "${MPI[@]}" -np 2 "$NB" train --device cpu --stages 2 $TRAIN_ARGS
WANT=$(hash_of "$WORK/mpirun.log")
# The signalled jobs (time limit, cancel) run 4x longer (~30 s): the signal must come while they train, and this
# shell's polls have been seen to stall for 4 s while srun's ranks run (above), past a 7 s run's end.
LONG_ARGS=${TRAIN_ARGS/--train-iters 3000/--train-iters 12000}
run_logged 180 mpirun_long "${MPI[@]}" -np 2 "$NB" train --device cpu --stages 2 $LONG_ARGS
WANT_LONG=$(hash_of "$WORK/mpirun_long.log")

# submit NAME SBATCH_FLAGS... (knobs in the environment): the job id; its log is $WORK/NAME-<id>.out.
submit() {
  local name=$1
  shift
  sbatch --parsable -D "$WORK" -J "$name" --ntasks-per-node=2 --gpus-per-task=0 --export=ALL "$@" "$SBATCH"
}
# state_of ID: squeue's state (R, PD, CG...), empty once the job has ended, `?` when squeue failed (a busy
# controller times out): a failed query must not read as an ended job.
state_of() { squeue -h -j "$1" -o %t 2>/dev/null || echo '?'; }
# wait_until SECONDS COMMAND...: polls COMMAND every 0.2 s; false when it never succeeds in time.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do [ "$SECONDS" -lt "$deadline" ] || return 1; sleep 0.2; done
}
gone() { [ -z "$(state_of "$1")" ]; }
# release_when_requeued ID [SCONTROL_UPDATE...]: true once the job is gone. A requeued job waits ~2 minutes (its
# BeginTime) before it may start again: make it eligible in a second (and apply the updates), once the node is
# idle: a start while slurmd still cleans up the previous one fails at once (seen: exit 1 in 8 ms).
release_when_requeued() {
  local id=$1
  shift
  [ "$(squeue -h -j "$id" -o %t:%r 2>/dev/null)" = PD:BeginTime ] && [ "$(sinfo -h -o %t 2>/dev/null)" = idle ] \
    && scontrol update jobid="$id" StartTime=now+1 "$@"
  gone "$id"
}
# trained_past RUN N: the run's first start has done N iterations (rank 0 writes and flushes one metrics line each).
trained_past() { [ "$(cat "$WORK/runs/$1/metrics.jsonl" 2>/dev/null | wc -l)" -ge "$2" ]; }
epoch_of() { grep "$2" "$1" | head -n 1 | grep -o '[0-9]*\.[0-9]*' | tail -n 1; }
ms_between() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'; }

# check_job NAME ID RESTARTS [WANT]: finished within time, on the mpirun run's hash (WANT: another's), resumed
# RESTARTS times.
check_job() {
  local name=$1 id=$2 restarts=$3 log="$WORK/$1-$2.out" run="$WORK/runs/$1-$2/train.log" WANT=${4:-$WANT}
  local resumed
  resumed=$(grep -c '^resumed from ' "$run" 2>/dev/null)
  if [ "$(grep '^train.sbatch: finished: ' "$log" | awk '{print $6}')" = "$WANT" ] && [ "$(hash_of "$run" | tail -n 1)" = "$WANT" ] \
     && [ "$resumed" = "$restarts" ] && [ "$(grep -c ' restart [0-9]* at ' "$log")" = $((restarts + 1)) ]; then
    pass "$name: $((restarts + 1)) start(s), $resumed resume(s): $(grep '^resumed from ' "$run" | sed "s|$WORK/runs/||" | tr '\n' ' ')ends on the mpirun run's hash"
  else
    fail "$name: want $WANT after $restarts resume(s), got $resumed resume(s); job log: $(tail -n 6 "$log"); run log: $(grep -E '^(resumed|stopped|final weights|nobubble: error)' "$run")"
  fi
}

# 1. Plain: srun --mpi=pmix.
j=$(LAUNCHER=srun submit plain)
wait_until "$JOB_TIMEOUT_S" gone "$j" || fail "plain: job $j still $(state_of "$j") after ${JOB_TIMEOUT_S}s"
check_job plain "$j" 0

# 1b. Data parallel: REPLICAS=2 on the 2 ranks (1 stage x 2 replicas), srun; the hash of plain mpirun's D = 2 run.
run_logged 120 mpirun_dp "${MPI[@]}" -np 2 "$NB" train --device cpu --stages 1 --data-parallel-size 2 $TRAIN_ARGS
j=$(LAUNCHER=srun REPLICAS=2 submit dp)
wait_until "$JOB_TIMEOUT_S" gone "$j" || fail "dp: job $j still $(state_of "$j") after ${JOB_TIMEOUT_S}s"
want_dp=$(hash_of "$WORK/mpirun_dp.log")
[[ "$want_dp" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/runs/dp-$j/train.log" | tail -n 1)" = "$want_dp" ] \
  && grep -q '1 stages x 2 replicas' "$WORK/runs/dp-$j/train.log" \
  && pass "dp: REPLICAS=2, 1 stage x 2 replicas under srun, ends on mpirun's D = 2 hash" \
  || fail "dp: want $want_dp, job log: $(tail -n 4 "$WORK/dp-$j.out")"

# 2. Preempted: mpirun, `scontrol requeue` after iteration 100 (a checkpoint at 100; the run is ~4 s, and its
# ranks may go on ~1.5 s before they stop: early enough that the job is still running then).
j=$(LAUNCHER=mpirun submit requeue)
if wait_until 60 trained_past "requeue-$j" 100; then
  t0=$(date +%s.%N)
  scontrol requeue "$j"
  wait_until "$JOB_TIMEOUT_S" release_when_requeued "$j" || fail "requeue: job $j still $(state_of "$j") after ${JOB_TIMEOUT_S}s"
  log="$WORK/requeue-$j.out"
  echo "timing: requeue: requeue to the launcher's exit $(ms_between "$t0" "$(epoch_of "$log" 'launcher exited')") ms," \
    "to the restart $(ms_between "$t0" "$(epoch_of "$log" 'restart 1 at')") ms" \
    "($(grep -E '^(stopped by|resumed from)' "$WORK/runs/requeue-$j/train.log" | sed "s|$WORK/runs/||" | tr '\n' ' '))"
  check_job requeue "$j" 1
else
  fail "requeue: job $j never reached step 100: $(tail -n 3 "$WORK/requeue-$j.out")"
fi

# 3. The time limit: the job asks for USR1 to its batch script ahead of its limit (--signal=B:USR1@50); Slurm sends
# it on a ~30 s periodic check, anywhere up to 30 s early, too loose for a run of seconds, so the test sends the
# same signal the same way (`scancel --batch --signal=USR1`) after iteration 300. Only the signal's
# checkpoint exists (SAVE_INTERVAL=1000), so the resume is from it.
j=$(TRAIN_ARGS=$LONG_ARGS LAUNCHER=srun SAVE_INTERVAL=1000 submit timelimit --time=10 --signal=B:USR1@50)
log="$WORK/timelimit-$j.out"
if wait_until 60 trained_past "timelimit-$j" 300; then
  scancel --batch --signal=USR1 "$j"
  wait_until "$JOB_TIMEOUT_S" release_when_requeued "$j" || fail "timelimit: job $j still $(state_of "$j") after ${JOB_TIMEOUT_S}s"
  t_sig=$(epoch_of "$log" 'got USR1')
  echo "timing: time-limit signal: USR1 to the launcher's exit (saved) $(ms_between "$t_sig" "$(epoch_of "$log" 'launcher exited')") ms," \
    "to the restart $(ms_between "$t_sig" "$(epoch_of "$log" 'restart 1 at')") ms" \
    "($(grep -E '^(stopped by|resumed from)' "$WORK/runs/timelimit-$j/train.log" | sed "s|$WORK/runs/||" | tr '\n' ' '))"
  grep -q '^stopped by SIGUSR1 after step [0-9]*; checkpoint saved$' "$WORK/runs/timelimit-$j/train.log" \
    && pass "timelimit: the ranks saved on the forwarded USR1" || fail "timelimit: no save on USR1: $(tail -n 4 "$log")"
else
  fail "timelimit: job $j never reached step 300: $(tail -n 3 "$log")"
fi
check_job timelimit "$j" 1 "$WANT_LONG"

# 4. Cancelled: the ranks get Slurm's TERM (and the trap's USR1, whichever srun passes first), save and stop;
# the job stays cancelled (no requeue).
j=$(TRAIN_ARGS=$LONG_ARGS LAUNCHER=srun SAVE_INTERVAL=1000 submit cancel)
if wait_until 60 trained_past "cancel-$j" 300; then
  scancel "$j"
  wait_until 30 gone "$j" || fail "cancel: job $j still $(state_of "$j") 30 s after scancel"
  sleep 2 # a wrong requeue would show the job again by now
  if [ -z "$(state_of "$j")" ] && [ "$(grep -c ' restart [0-9]* at ' "$WORK/cancel-$j.out")" = 1 ] \
     && grep -Eq '^stopped by SIG(TERM|USR1) after step [0-9]+; checkpoint saved$' "$WORK/runs/cancel-$j/train.log"; then
    pass "cancel: $(grep '^stopped by' "$WORK/runs/cancel-$j/train.log"), not requeued"
  else
    fail "cancel: want one start and a save on TERM; job log: $(tail -n 4 "$WORK/cancel-$j.out"); state $(state_of "$j")"
  fi
else
  fail "cancel: job $j never reached step 300: $(tail -n 3 "$WORK/cancel-$j.out")"
fi

# 5. Impossible layouts: one error line in the job's log, nothing trained.
# expect_job_error NAME PATTERN SBATCH_FLAGS...
expect_job_error() {
  local name=$1 pattern=$2 id
  shift 2
  id=$(submit "$name" "$@")
  wait_until 30 gone "$id" || fail "$name: job $id still $(state_of "$id") after 30s"
  local log="$WORK/$name-$id.out"
  if [ "$(grep -c '^nobubble: error: ' "$log")" = 1 ] && grep '^nobubble: error: ' "$log" | grep -q -- "$pattern" \
     && [ ! -e "$WORK/runs/$name-$id" ]; then
    pass "$name: $(grep '^nobubble: error: ' "$log")"
  else
    fail "$name: want one error line matching '$pattern' and no run directory; got: $(cat "$log")"
  fi
}
STAGES=3 expect_job_error stages 'the job has 2 ranks but STAGES=3'
REPLICAS=3 expect_job_error replicas 'the job has 2 ranks but STAGES=0 x REPLICAS=3'
DEVICE=cuda expect_job_error gpus '2 ranks per node but 0 GPUs'

# 6. The comparison template: run/compare.sh's smoke grid (bench and train points, srun per point) on the
# allocation's 2 ranks, a 3-stage point skipped for want of ranks; its CSV and the report's charts in RUN_DIR.
# (TRAIN_ARGS and SAVE_INTERVAL above are train.sbatch's; compare.sh has a TRAIN_ARGS of its own)
j=$(env -u TRAIN_ARGS -u SAVE_INTERVAL sbatch --parsable -D "$WORK" -J compare --ntasks-per-node=2 --gpus-per-task=0 \
      --export=ALL,DEVICE=cpu,GRID=smoke,RUNS="$WORK/runs",NOBUBBLE="$NB",COMPARE="$ROOT/run/compare.sh",DATA="$WORK/corpus.txt",BENCH_STAGES="2 3",BENCH_MICROBATCHES=P \
      "$ROOT/run/slurm/compare.sbatch")
wait_until "$JOB_TIMEOUT_S" gone "$j" || fail "compare: job $j still $(state_of "$j") after ${JOB_TIMEOUT_S}s"
dir="$WORK/runs/compare-$j"
ok_rows=$(grep -c ',ok,' "$dir/grid.csv" 2>/dev/null)
charts=$(ls "$dir"/report/{tokens_per_s,bubble,val_loss,stage_busy}.png 2>/dev/null | wc -l)
if [ "$ok_rows" = 4 ] && [ "$charts" = 4 ] && grep -q '^compare: skip 1f1b_p3_m3: needs 3 ranks but the allocation has 2' "$WORK/compare-$j.out" \
   && grep -q "^compare.sbatch: finished with exit 0: " "$WORK/compare-$j.out"; then
  pass "compare: grid.csv with 4 points run and the 3-stage ones skipped, $charts charts, $(grep -c . "$dir/grid.csv") lines"
else
  fail "compare: want 4 ok rows and 4 charts, got $ok_rows and $charts; job log: $(tail -n 8 "$WORK/compare-$j.out")"
fi
id=$(sbatch --parsable -D "$WORK" -J compare_gpus --ntasks-per-node=2 --gpus-per-task=0 \
       --export=ALL,DEVICE=cuda,RUNS="$WORK/runs",NOBUBBLE="$NB",COMPARE="$ROOT/run/compare.sh" "$ROOT/run/slurm/compare.sbatch")
wait_until 30 gone "$id" || fail "compare_gpus: job $id still $(state_of "$id") after 30s"
log="$WORK/compare_gpus-$id.out"
[ "$(grep -c '^nobubble: error: ' "$log")" = 1 ] && grep -q '^nobubble: error: 2 ranks per node but 0 GPUs' "$log" \
  && [ ! -e "$WORK/runs/compare_gpus-$id" ] && pass "compare_gpus: $(grep '^nobubble: error: ' "$log")" \
  || fail "compare_gpus: want one error line and no run directory; got: $(cat "$log")"
finish
