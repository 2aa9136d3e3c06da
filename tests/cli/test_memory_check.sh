#!/usr/bin/env bash
# A model that cannot fit is refused before anything is allocated (pipeline/stage/stage_memory.h): one line naming the
# stage(s), the bytes needed part by part and the memory available, exit 2, within seconds (before the check, a
# 100000-layer `tiny` was killed by the kernel's OOM killer after a minute of silence). Normal runs pass it.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
C="$WORK/corpus.txt"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HUGE=(--data "$C" --lr 1e-3 --num-layers 100000 --untie-embeddings-and-output-weights)
PARTS="(weights [0-9.]* [kMGT]\?B, weight versions [0-9.]* [kMGT]\?B, gradients [0-9.]* [kMGT]\?B, optimizer state [0-9.]* [kMGT]\?B, activations [0-9.]* [kMGT]\?B)"
HOST="but [0-9.]* [kMGT]\?B of host memory is available (MemAvailable)$"

# expect_refused SECONDS PATTERN CMD...: exit 2 and one line matching PATTERN (expect_error), within SECONDS.
expect_refused() {
  local seconds=$1 t0=$SECONDS
  shift
  expect_error 2 "$@"
  local took=$((SECONDS - t0))
  [ "$took" -le "$seconds" ] && pass "refused after ${took}s" || fail "refused only after ${took}s (> ${seconds}s)"
}

# The plain loop, the pipeline in one process (its stages' sum), the oracle.
expect_refused 10 "^nobubble: error: stage 0 needs [0-9.]* TB $PARTS $HOST" "$NB" train "${HUGE[@]}"
expect_refused 10 "^nobubble: error: stages 0-1 need [0-9.]* TB $PARTS $HOST" "$NB" train "${HUGE[@]}" --stages 2 \
  --schedule 2bw --num-microbatches 2
expect_refused 10 "^nobubble: error: stage 0 needs [0-9.]* TB $PARTS $HOST" "$NB" reference "${HUGE[@]}"
# 2bw holds a second weight version: the line says how much.
expect_error 2 "stages 0-1 need .*weight versions 315 GB" "$NB" train "${HUGE[@]}" --stages 2 --schedule 2bw \
  --num-microbatches 2

# Normal runs are not refused: the tiny test model and the main job's config (`make run`), one step each.
timeout 60 "$NB" train --data "$C" "${TINY_FLAGS[@]}" --train-iters 1 >"$WORK/tiny.log" 2>&1 \
  && pass "a tiny run passes the check" || fail "tiny run: $(tail -n 3 "$WORK/tiny.log")"
timeout 120 "$NB" train --config "$ROOT/run/configs/tiny_fortunes.toml" --data "$C" --train-iters 1 \
  --lr-warmup-iters 0 --eval-iters 1 >"$WORK/main_job.log" 2>&1 && pass "the main job's config passes the check" \
  || fail "main job's config: $(tail -n 3 "$WORK/main_job.log")"

if [ "$HAVE_MPI" != 1 ]; then
  echo "skip: nobubble is built without MPI or mpirun is missing: no mpirun checks"
  finish
  exit
fi
# Under mpirun each rank checks its own stage before any rank allocates; all agree, rank 0 prints, all exit 2.
expect_mpi_usage_error huge_mpi 2 "^nobubble: error: rank 0 (stage 0): stage 0 needs [0-9.]* TB $PARTS $HOST" "${HUGE[@]}"
finish
