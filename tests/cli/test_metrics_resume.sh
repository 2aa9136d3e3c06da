#!/usr/bin/env bash
# A resumed run's --metrics file holds each step once, and its elapsed_s never runs backwards
# (src/core/metrics_resume.h, src/run/run_log.h): the records a stopped run wrote after its checkpoint are dropped
# when the run resumes from that checkpoint, then written again.
# - the plain loop, `reference`, the in-process pipeline and (with MPI) `mpirun -np 3`: a 12-iteration run saving
#   every 4, then resumed from step_4 and again from step_8 into the same metrics file (what a job killed after
#   those checkpoints leaves): steps 1..12 once each, in order, elapsed_s non-decreasing, every loss the same as
#   the uninterrupted run's (bit for bit, as JSON writes it);
# - mpirun with a real kill (SIGKILL of rank 1 in iteration 11, after the checkpoint at 8), then --load DIR;
# - the stopped run's last line cut short (as a kill in the middle of a write leaves it) is dropped too;
# - a checkpoint whose clock lies below the file's record of its step (the file's record from a later timeline,
#   after a resume from an older checkpoint; made here by setting the manifest's elapsed_s to 0): the resumed
#   run's clock goes on from the record, not from the checkpoint.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --untie-embeddings-and-output-weights
       --num-microbatches 3 --train-iters 12 --eval-interval 5)

# check_metrics NAME FILE WANT: FILE holds steps 1..12 once each, in order, with elapsed_s non-decreasing, and
# each step's loss and val_loss equal WANT's (the uninterrupted run's records).
check_metrics() {
  local name=$1 file=$2 want=$3 out
  if out=$(/usr/bin/python3 - "$file" "$want" 2>&1 <<'PY'
import json, sys
got = [json.loads(l) for l in open(sys.argv[1])]
want = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}
steps = [r["step"] for r in got]
assert steps == list(range(1, 13)), f"steps {steps}"
times = [r["elapsed_s"] for r in got]
assert all(a <= b for a, b in zip(times, times[1:])), f"elapsed_s runs backwards: {times}"
for r in got:
    for k in ("loss", "val_loss"):
        assert r.get(k) == want[r["step"]].get(k), f"step {r['step']} {k}: {r.get(k)} != {want[r['step']].get(k)}"
print(f"{len(got)} records, elapsed_s {times[0]:.3f}..{times[-1]:.3f} s")
PY
  ); then pass "$name: $out"; else fail "$name: $(echo "$out" | tail -n 1)"; fi
}

# resume_twice NAME LAUNCH...: the run saving every 4 with --metrics, then resumed from step_4 and from step_8
# into the same metrics file; each time the file holds steps 1..12 once.
resume_twice() {
  local name=$1
  shift
  local m="$WORK/$name.jsonl" dir="$WORK/${name}_ckpt"
  run_logged 120 "${name}_full" "$@" "${FLAGS[@]}" --save "$dir" --save-interval 4 --metrics "$m"
  cp "$m" "$WORK/$name.want.jsonl"
  for step in 4 8; do
    run_logged 120 "${name}_from$step" "$@" "${FLAGS[@]}" --load "$dir/step_$step" --metrics "$m"
    grep -q "^metrics: dropped $((12 - step)) records after step $step from " "$WORK/${name}_from$step.log" \
      || fail "$name from step $step: no 'metrics: dropped' line: $(head -n 3 "$WORK/${name}_from$step.log")"
    check_metrics "$name resumed from step_$step" "$m" "$WORK/$name.want.jsonl"
  done
}

resume_twice plain "$NB" train
resume_twice reference "$NB" reference --stages 3
resume_twice inproc "$NB" train --stages 3

# A last line cut short: dropped with the records after the checkpoint.
printf '{"step": 13, "loss": 5.1' >>"$WORK/plain.jsonl"
run_logged 120 plain_cut "$NB" train "${FLAGS[@]}" --load "$WORK/plain_ckpt/step_8" --metrics "$WORK/plain.jsonl"
check_metrics "plain, a last line cut short" "$WORK/plain.jsonl" "$WORK/plain.want.jsonl"

# A checkpoint's clock below the kept record's: elapsed_s still does not run backwards.
mkdir -p "$WORK/clock0"
cp -r "$WORK/plain_ckpt/step_8" "$WORK/clock0/"
sed -i -E 's/"elapsed_s": [0-9.]+/"elapsed_s": 0.000000/' "$WORK/clock0/step_8/manifest.json"
grep -q '"elapsed_s": 0.000000' "$WORK/clock0/step_8/manifest.json" || fail "clock0: the manifest has no elapsed_s"
run_logged 120 plain_clock0 "$NB" train "${FLAGS[@]}" --load "$WORK/clock0/step_8" --metrics "$WORK/plain.jsonl"
check_metrics "plain, a checkpoint clock below the file's record" "$WORK/plain.jsonl" "$WORK/plain.want.jsonl"

if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: mpirun cases (this nobubble has no MPI)"
  finish
  exit
fi
resume_twice mpi "${MPI[@]}" -np 3 "$NB" train

# A real kill: rank 1 dies by SIGKILL in iteration 11 (optimizer step 10 from 0); the job fails, the checkpoint at
# 8 is the newest, and the metrics file holds records past it.
m="$WORK/killed.jsonl"
timeout -k 5 120 "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" --save "$WORK/killed_ckpt" --save-interval 4 \
  --metrics "$m" --kill-at-step 10 --kill-rank 1 >"$WORK/killed.log" 2>&1 && fail "the killed job exited 0"
past=$(grep -c '"step": \(9\|10\|11\|12\),' "$m")
[ -f "$WORK/killed_ckpt/step_8/manifest.json" ] && [ "$past" -ge 1 ] \
  && pass "killed in iteration 11: checkpoint step_8, $past record(s) past it" \
  || fail "killed run: no step_8 or no record past it ($past): $(tail -n 3 "$WORK/killed.log")"
run_logged 120 killed_res "${MPI[@]}" -np 3 "$NB" train "${FLAGS[@]}" --load "$WORK/killed_ckpt" --metrics "$m"
check_metrics "mpirun, killed then resumed" "$m" "$WORK/mpi.want.jsonl"
finish
