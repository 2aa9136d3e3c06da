#!/usr/bin/env bash
# The NCCL transport (pipeline/transport/nccl_transport.h): `mpirun -np P nobubble train --device cuda`, one GPU per rank,
# activations and gradients moved GPU to GPU by NCCL between neighbouring stages.
#
# With >= 2 GPUs and mpirun:
#   - 1f1b and 2bw on 2 stages (both directions in flight at once; evaluation every 2 iterations, so the
#     eval_activation channel too) finish with a finite loss and equal, bit for bit, the same pipeline run in one
#     process (`train --stages 2`, the in-process transport): the transport moves exact bits, and the CUDA
#     kernels are deterministic on one GPU model (cuda/cuda_ops.h), which the GPUs of one node are;
#   - the 2-stage NCCL run's final train and validation losses are within 2% of the 1-stage run's (`train
#     --device cuda`, one process): bf16 keeps 8 significant bits (0.4% per rounding), and a different cut may
#     round differently; 2% is a few roundings' worth, far below what a wrong activation or gradient does;
#   - a rank failing mid-run ends the job with one error line (abort through NCCL and MPI), no hang;
#   - with >= 3 GPUs, 3 stages (the middle one has a link each way to each neighbour) equal the in-process run.
# With fewer GPUs it checks that the job fails cleanly instead (CudaOps: one GPU per local rank; no rank may
# enter NCCL when another failed to start its GPU), then exits 77 (skipped). Without mpirun (or MPI) it exits 77.
# Usage: test_nccl_transport.sh NOBUBBLE WORKDIR DEVICE_COUNT (tests/cuda/device_count.cpp)
source "$(dirname "$0")/../cli/lib.sh"
COUNT=${3:?usage: test_nccl_transport.sh NOBUBBLE WORKDIR DEVICE_COUNT}

skip() {
  echo "SKIP: $1"
  [ "$FAILED" = 0 ] || { finish; exit 1; }
  exit 77
}

[ "$HAVE_MPI" = 1 ] || skip "nobubble is built without MPI or mpirun is missing"
GPUS=$("$COUNT")
MPI=(mpirun --oversubscribe)
make_corpus "$WORK/corpus.txt"
FLAGS=(--device cuda --data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 4 --untie-embeddings-and-output-weights
       --train-iters 6 --eval-interval 2)

error_lines() { grep -c '^nobubble: error: ' "$1"; }

# expect_mpi_failure NAME NP PATTERN ARGS...: non-zero within 60 s, exactly one error line, matching PATTERN.
expect_mpi_failure() {
  local name=$1 np=$2 pattern=$3 rc=0 t0=$SECONDS
  shift 3
  timeout -k 5 60 "${MPI[@]}" -np "$np" "$NB" train "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && [ "$(error_lines "$WORK/$name.err")" = 1 ] \
     && grep '^nobubble: error: ' "$WORK/$name.err" | grep -q -- "$pattern"; then
    pass "$name: exit $rc after $((SECONDS - t0))s, '$(grep '^nobubble: error: ' "$WORK/$name.err")'"
  else
    fail "$name: exit $rc after $((SECONDS - t0))s (124: timed out), stderr: $(cat "$WORK/$name.err")"
  fi
}

if [ "$GPUS" -lt 2 ]; then
  if [ "$GPUS" = 0 ]; then
    expect_mpi_failure no_gpu 2 "rank 0 (stage 0): --device cuda: no usable GPU" "${FLAGS[@]}"
  else
    expect_mpi_failure one_gpu 2 "rank 1 (stage 1): --device cuda: local rank 1 needs GPU 1 but this node has 1" \
      "${FLAGS[@]}"
  fi
  skip "$GPUS CUDA GPU(s) here, the NCCL transport needs 2"
fi

# last_metric FILE KEY: KEY of the last line of a --metrics file that has it.
last_metric() { grep "\"$2\": " "$1" | tail -n 1 | sed "s/.*\"$2\": \([^,}]*\).*/\1/"; }
# close A B: both finite and |A - B| <= 2% of |B|.
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b;
  finite = (a == a + 0) && (b == b + 0) && tolower(a) !~ /nan|inf/ && tolower(b) !~ /nan|inf/
  exit (finite && d <= 0.02 * m) ? 0 : 1 }'; }

# compare_runs ID P ARGS...: the run over NCCL (mpirun -np P) against the in-process one, bit for bit.
compare_runs() {
  local id=$1 p=$2
  shift 2
  run_logged 120 "inproc_$id" "$NB" train "${FLAGS[@]}" "$@" --stages "$p"
  run_logged 120 "nccl_$id" "${MPI[@]}" -np "$p" "$NB" train "${FLAGS[@]}" "$@" --metrics "$WORK/nccl_$id.jsonl"
  grep -q "on $p stages .* over NCCL and MPI" "$WORK/nccl_$id.log" \
    && [ "$(grep -c '^step ' "$WORK/nccl_$id.log")" = 6 ] \
    && pass "$id: 6 steps over NCCL" || fail "$id: $(head -n 3 "$WORK/nccl_$id.log")"
  local loss
  loss=$(last_metric "$WORK/nccl_$id.jsonl" loss)
  close "$loss" "$loss" && pass "$id: final loss $loss is finite" || fail "$id: final loss '$loss'"
  local h
  h=$(hash_of "$WORK/inproc_$id.log")
  [[ "$h" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/nccl_$id.log")" = "$h" ] \
    && [ "$(opt_of "$WORK/nccl_$id.log")" = "$(opt_of "$WORK/inproc_$id.log")" ] \
    && [ "$(val_of "$WORK/nccl_$id.log")" = "$(val_of "$WORK/inproc_$id.log")" ] \
    && pass "$id: weights, optimizer state and val_loss equal the in-process run's" \
    || fail "$id: in-process $h $(val_of "$WORK/inproc_$id.log"), NCCL $(hash_of "$WORK/nccl_$id.log")\
 $(val_of "$WORK/nccl_$id.log")"
}

compare_runs 1f1b 2 --schedule 1f1b --num-microbatches 4
compare_runs 2bw 2 --schedule 2bw --num-microbatches 4

# Against one stage in one process: the same model and data, cut differently; close in bf16.
run_logged 120 one_stage "$NB" train "${FLAGS[@]}" --schedule 1f1b --num-microbatches 4 --metrics "$WORK/one.jsonl"
for key in loss val_loss; do
  want=$(last_metric "$WORK/one.jsonl" "$key")
  got=$(last_metric "$WORK/nccl_1f1b.jsonl" "$key")
  close "$got" "$want" && pass "final $key over NCCL $got, one stage $want (within 2%)" \
    || fail "final $key over NCCL '$got', one stage '$want': not within 2%"
done

expect_mpi_failure fail_rank1 2 "rank 1 (stage 1): injected failure as step 2 begins" "${FLAGS[@]}" \
  --num-microbatches 4 --fail-at-step 2 --fail-rank 1

if [ "$GPUS" -ge 3 ]; then
  compare_runs 1f1b_p3 3 --schedule 1f1b --num-microbatches 6
else
  echo "skip: 3 stages need 3 GPUs ($GPUS here)"
fi
finish
