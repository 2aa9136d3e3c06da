#!/usr/bin/env bash
# The pipeline executor against its oracle (docs/DESIGN.md section 2, "The oracle"): for every schedule, p in {2, 3, 4}
# and m in {p, 2p}, on a model of 5 layers (so every p cuts it unevenly), 6 iterations (>= 6 optimizer steps):
#   - `mpirun -np p nobubble train` (one stage per rank, MPI transport) and
#   - `nobubble train --stages p` (every stage in one process, in-process transport)
# end with the `final weights sha256` and the `final optimizer state sha256` of `nobubble reference` (weights AND
# optimizer state bitwise equal), and the same final validation loss and weight versions held per stage. Gradient clipping is active (--clip-grad 1 against norms of about 2.5), so the global
# clip's cross-stage sums of squares (gpipe, 1f1b) and the per-stage clip (2bw, pipedream) are both checked.
# Without MPI (nobubble built without it, or no mpirun) only the in-process runs are checked.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 5 --untie-embeddings-and-output-weights
       --log-interval 100 --train-iters 6)
[ "$HAVE_MPI" = 1 ] || echo "skip: nobubble is built without MPI or mpirun is missing: in-process runs only"

run() { run_logged 120 "$@"; }  # run NAME COMMAND...: the log lands in $WORK/NAME.log
start=$SECONDS
names_into SCHEDULES schedules
for schedule in "${SCHEDULES[@]}"; do
  for p in 2 3 4; do
    for m in "$p" $((2 * p)); do
      check_against_reference "${schedule}_p${p}_m${m}" "$p" --schedule "$schedule" --num-microbatches "$m" \
        --num-layers "$(enough_layers "$schedule" "$p" 5)"
    done
  done
done
echo "matrix: $((SECONDS - start)) s"

# The runs print what train prints, from rank 0 only, with the cut and the transport named.
grep -q '^nobubble: --schedule 2bw on 3 stages (blocks 0-1 | 2-3 | 4) in one process' "$WORK/inproc_2bw_p3_m3.log" \
  && pass "in-process header" || fail "header: $(head -n 1 "$WORK/inproc_2bw_p3_m3.log")"
if [ "$HAVE_MPI" = 1 ]; then
  [ "$(grep -c '^final weights sha256' "$WORK/mpi_1f1b_p4_m4.log")" = 1 ] && [ "$(grep -c '^step ' "$WORK/mpi_1f1b_p4_m4.log")" = 1 ] \
    && grep -q 'on 4 stages (blocks 0 | 1 | 2-3 | 4) over MPI' "$WORK/mpi_1f1b_p4_m4.log" \
    && pass "under mpirun rank 0 alone prints" || fail "mpirun output: $(cat "$WORK/mpi_1f1b_p4_m4.log")"
fi

# A singleton MPI start (NOBUBBLE_MPI=1, no mpirun) is one rank: its stages run in the process.
if [ "$HAVE_MPI" = 1 ]; then
  run singleton env NOBUBBLE_MPI=1 "$NB" train "${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --stages 3
  equal "a singleton MPI run of 2bw_p3_m3" "$WORK/ref_2bw_p3_m3.log" "$WORK/singleton.log"
fi

# Thread counts change no bit, on either side: 2 CPU threads per rank under mpirun against a 3-thread reference,
# at the full tiny width (its products are cut into many tiles, src/cpu/tiled_gemm.h).
if [ "$HAVE_MPI" = 1 ]; then
  WIDE=(--data "$WORK/corpus.txt" --model tiny --num-layers 3 --micro-batch-size 4 --seq-length 128 --lr 1e-3
        --train-iters 3 --eval-iters 1 --log-interval 100 --schedule 1f1b --num-microbatches 2 --optimizer muon)
  run threads_ref env OPENBLAS_NUM_THREADS=3 "$NB" reference "${WIDE[@]}" --stages 2
  run threads_mpi env OPENBLAS_NUM_THREADS=2 "${MPI[@]}" -np 2 -x OPENBLAS_NUM_THREADS "$NB" train "${WIDE[@]}"
  equal "mpirun at 2 threads per rank against a 3-thread reference" "$WORK/threads_ref.log" "$WORK/threads_mpi.log"
fi

# An asynchronous schedule on one stage runs in the executor too (2bw still delays by one step).
run 2bw_p1_ref "$NB" reference "${FLAGS[@]}" --schedule 2bw --num-microbatches 2
run 2bw_p1 "$NB" train "${FLAGS[@]}" --schedule 2bw --num-microbatches 2
equal "2bw on one stage" "$WORK/2bw_p1_ref.log" "$WORK/2bw_p1.log"

# Every iteration's metrics equal the reference's (timing aside), evaluation every 2 iterations included.
M=(--schedule pipedream --num-microbatches 3 --eval-interval 2)
run metrics_ref "$NB" reference "${FLAGS[@]}" "${M[@]}" --stages 3 --metrics "$WORK/ref.jsonl"
run metrics_pipe "$NB" train "${FLAGS[@]}" "${M[@]}" --stages 3 --metrics "$WORK/pipe.jsonl"
# Timing and memory are not results: tokens/s, elapsed_s, and the pipeline's stage_busy, bubble and act_mib.
strip() { sed -e 's/"tokens_per_s": [^,}]*//' -e 's/, "elapsed_s": [^,}]*//' -e 's/, "stage_busy": \[[^]]*\], "bubble": [^,}]*, "act_mib": \[[^]]*\]//' "$1"; }
[ "$(wc -l <"$WORK/pipe.jsonl")" = 6 ] && [ "$(grep -c val_loss "$WORK/pipe.jsonl")" = 3 ] \
  && [ "$(strip "$WORK/pipe.jsonl")" = "$(strip "$WORK/ref.jsonl")" ] && pass "metrics equal the reference's" \
  || fail "metrics differ: $(diff <(strip "$WORK/ref.jsonl") <(strip "$WORK/pipe.jsonl"))"
if [ "$HAVE_MPI" = 1 ]; then  # the global norm over MPI: every stage's per-parameter sums, added on rank 0
  M=(--schedule 1f1b --num-microbatches 3 --eval-interval 2)
  run metrics_ref1 "$NB" reference "${FLAGS[@]}" "${M[@]}" --stages 3 --metrics "$WORK/ref1.jsonl"
  run metrics_mpi1 mpirun --oversubscribe -np 3 "$NB" train "${FLAGS[@]}" "${M[@]}" --metrics "$WORK/mpi1.jsonl"
  [ "$(wc -l <"$WORK/mpi1.jsonl")" = 6 ] && [ "$(strip "$WORK/mpi1.jsonl")" = "$(strip "$WORK/ref1.jsonl")" ] \
    && pass "metrics over MPI equal the reference's" \
    || fail "metrics over MPI differ: $(diff <(strip "$WORK/ref1.jsonl") <(strip "$WORK/mpi1.jsonl"))"
fi
finish
