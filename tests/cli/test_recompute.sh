#!/usr/bin/env bash
# Activation recomputation (--recompute-granularity, docs/DESIGN.md section 2, "Recomputation"): a run that keeps
# only each block group's input and reruns its forward in the backward (full), or keeps the GEMM outputs and
# recomputes the norms and the SwiGLU activation (selective), ends on the same bits as the run that keeps everything.
# - every schedule (gpipe, 1f1b, zb-h1, zb-v, interleaved 1F1B, 2bw, pipedream) x {adamw, muon, and on the
#   asynchronous ones muon with --delay-fix ef and lookahead (2bw) and predict (2bw, pipedream)}: final weights
#   and optimizer state equal, in one process;
# - --recompute-method uniform with groups of 1 and 2 and block; an MoE model (routing, expert bias and aux loss);
#   D = 2 with --use-distributed-optimizer and 2bw under mpirun; stopped and resumed;
# - the stash a microbatch keeps shrinks (the progress line's act MiB), and its measured peak is the plan's;
# - usage errors: an unknown granularity or method, --recompute-num-layers 0, --device cuda.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
BASE=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 6 --untie-embeddings-and-output-weights
      --log-interval 100 --train-iters 3 --eval-iters 1)
FULL=(--recompute-granularity full --recompute-num-layers 2)

# same_as_kept NAME FLAGS...: `train FLAGS...` without recomputation, with full and with selective, the same
# final state.
same_as_kept() {
  local name=$1
  shift
  run_logged 60 "kept_$name" "$NB" train "$@"
  run_logged 60 "recomputed_$name" "$NB" train "$@" "${FULL[@]}"
  same_state "$name: full equals kept" "$WORK/kept_$name.log" "$WORK/recomputed_$name.log"
  run_logged 60 "selective_$name" "$NB" train "$@" --recompute-granularity selective
  same_state "$name: selective equals kept" "$WORK/kept_$name.log" "$WORK/selective_$name.log"
}

for schedule in gpipe 1f1b zb-h1 zb-v; do
  same_as_kept "${schedule}_adamw" "${BASE[@]}" --stages 2 --num-microbatches 3 --schedule "$schedule"
  same_as_kept "${schedule}_muon" "${BASE[@]}" --stages 2 --num-microbatches 3 --schedule "$schedule" --optimizer muon
done
same_as_kept interleaved_adamw "${BASE[@]}" --stages 2 --virtual-stages 2 --num-microbatches 4
same_as_kept interleaved_muon "${BASE[@]}" --stages 2 --virtual-stages 2 --num-microbatches 4 --optimizer muon
ASYNC=("${BASE[@]}" --stages 2 --num-microbatches 4)
same_as_kept 2bw_adamw "${ASYNC[@]}" --schedule 2bw
same_as_kept 2bw_muon_ef "${ASYNC[@]}" --schedule 2bw --optimizer muon --delay-fix ef
same_as_kept 2bw_muon_predict "${ASYNC[@]}" --schedule 2bw --optimizer muon --delay-fix predict
same_as_kept 2bw_muon_lookahead "${ASYNC[@]}" --schedule 2bw --optimizer muon --delay-fix lookahead
same_as_kept pipedream_adamw "${ASYNC[@]}" --schedule pipedream
same_as_kept pipedream_muon_predict "${ASYNC[@]}" --schedule pipedream --optimizer muon --delay-fix predict

# The methods: one block at a time, and the first block of each stage only.
for method in "uniform --recompute-num-layers 1" "block --recompute-num-layers 1"; do
  run_logged 60 "method_${method%% *}" "$NB" train "${BASE[@]}" --stages 2 --num-microbatches 3 \
    --recompute-granularity full --recompute-method $method
  same_state "--recompute-method $method equals kept" "$WORK/kept_1f1b_adamw.log" "$WORK/method_${method%% *}.log"
done
# The plain loop (one stage, no pipeline; it prints no optimizer state hash).
run_logged 60 kept_plain "$NB" train "${BASE[@]}" --num-microbatches 2
run_logged 60 recomputed_plain "$NB" train "${BASE[@]}" --num-microbatches 2 "${FULL[@]}"
want=$(hash_of "$WORK/kept_plain.log")
[[ "$want" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/recomputed_plain.log")" = "$want" ] \
  && pass "plain loop: recomputed equals kept" \
  || fail "plain loop: kept $want, recomputed $(hash_of "$WORK/recomputed_plain.log")"

# MoE: blocks 1 and 3 of 4, a shared expert, the expert bias and the aux loss.
MOE=(--data "$WORK/corpus.txt" --model tiny-moe --num-layers 4 --hidden-size 64 --ffn-hidden-size 96
     --num-attention-heads 4 --num-query-groups 2 --moe-ffn-hidden-size 32 --moe-shared-expert-ffn-hidden-size 32
     --moe-aux-loss-coeff 0.05 --moe-router-enable-expert-bias --moe-layers 1,3 --micro-batch-size 2 --seq-length 32
     --lr 1e-3 --eval-iters 1 --log-interval 100 --train-iters 3)
same_as_kept moe_1f1b "${MOE[@]}" --stages 2 --num-microbatches 3
same_as_kept moe_zb-h1 "${MOE[@]}" --stages 2 --num-microbatches 3 --schedule zb-h1

# The stash shrinks: the progress line's act MiB (the stashes' measured peak).
act_of() { grep -o 'act MiB [0-9.]*' "$1" | head -n 1 | awk '{print $3}'; }  # stage 0's
kept=$(act_of "$WORK/kept_gpipe_adamw.log") recomputed=$(act_of "$WORK/recomputed_gpipe_adamw.log")
selective=$(act_of "$WORK/selective_gpipe_adamw.log")
if [ -n "$kept" ] && [ -n "$recomputed" ] && [ -n "$selective" ] \
   && awk -v k="$kept" -v r="$recomputed" -v s="$selective" 'BEGIN { exit !(r < s && s < k) }'; then
  pass "gpipe's peak stash on stage 0: $kept MiB kept, $selective MiB selective, $recomputed MiB full"
else
  fail "act MiB kept '$kept', selective '$selective', full '$recomputed'"
fi

# The memory check's plan (model/stash_bytes.h walked over each stage's actions) against the stashes' measured peak
# over the run, per stage (part), in every run above: within 10% (on the CPU they agree to the byte).
within_plan() {  # within_plan LOG: "measured A B ..., planned C D ..." from the run's final line
  local line
  line=$(grep '^activation stashes at most' "$1") || return 1
  awk -v line="$line" 'BEGIN {
    sub(/.*measured /, "", line); split(line, halves, ", planned ");
    n = split(halves[1], got, " "); if (split(halves[2], want, " ") != n || n == 0) exit 1;
    for (i = 1; i <= n; ++i) if (got[i] > 1.1 * want[i] || got[i] < 0.9 * want[i]) exit 1 }'
}
planned=0
for log in "$WORK"/kept_*.log "$WORK"/recomputed_*.log "$WORK"/selective_*.log; do
  case $log in *_plain.log) continue ;; esac  # the plain loop has no stages to report
  if within_plan "$log"; then
    planned=$((planned + 1))
  else
    fail "$(basename "$log"): measured and planned stashes differ: $(grep '^activation stashes' "$log")"
  fi
done
[ "$planned" -ge 54 ] && pass "act MiB within 10% of the plan in $planned runs (every schedule x none, selective, full)" \
  || fail "only $planned runs compared with their plan"

# Stopped after 2 iterations and resumed, with recomputation throughout.
R=("${ASYNC[@]}" --schedule 2bw --optimizer muon --delay-fix ef --train-iters 4 "${FULL[@]}")
run_logged 60 res_full "$NB" train "${R[@]}"
run_logged 60 res_stop "$NB" train "${R[@]}" --save "$WORK/ck" --save-interval 2 --exit-interval 2
run_logged 60 res_rest "$NB" train "${R[@]}" --load "$WORK/ck"
same_state "stopped after 2 and resumed equals uninterrupted" "$WORK/res_full.log" "$WORK/res_rest.log"

if [ "$HAVE_MPI" = 1 ]; then
  DP=("${BASE[@]}" --stages 2 --data-parallel-size 2 --num-microbatches 2 --use-distributed-optimizer)
  run_logged 60 mpi_dp_kept "${MPI[@]}" -np 4 "$NB" train "${DP[@]}"
  run_logged 60 mpi_dp_recomputed "${MPI[@]}" -np 4 "$NB" train "${DP[@]}" "${FULL[@]}"
  same_state "mpirun D = 2, distributed optimizer: recomputed equals kept" "$WORK/mpi_dp_kept.log" \
    "$WORK/mpi_dp_recomputed.log"
  run_logged 60 mpi_2bw "${MPI[@]}" -np 2 "$NB" train "${ASYNC[@]}" --schedule 2bw --optimizer muon \
    --delay-fix predict "${FULL[@]}"
  same_state "mpirun 2bw predict: recomputed equals kept in one process" "$WORK/kept_2bw_muon_predict.log" \
    "$WORK/mpi_2bw.log"
else
  echo "skip: nobubble is built without MPI or mpirun is missing"
fi

expect_error 2 "unknown --recompute-granularity 'some'" "$NB" train "${BASE[@]}" --recompute-granularity some
expect_error 2 "unknown --recompute-method 'all'" "$NB" train "${BASE[@]}" --recompute-granularity full \
  --recompute-method all
expect_error 2 "--recompute-num-layers must be >= 1" "$NB" train "${BASE[@]}" "${FULL[@]}" --recompute-num-layers 0
expect_error 2 "--device cuda" "$NB" train "${BASE[@]}" "${FULL[@]}" --device cuda
finish
