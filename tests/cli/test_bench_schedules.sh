#!/usr/bin/env bash
# `nobubble bench schedules` on a very small model (the figures themselves are the benchmark's business, not a
# test's): in one process and under mpirun -np 2 it prints one row per schedule with tokens/s, bubble, peak
# activation MiB per stage and final loss, the 2bw / 1f1b ratio and the target line, and writes the same table
# as PREFIX.csv and PREFIX.md. Pipedream runs one microbatch of m x B sequences (the same tokens per step), and
# the schedules' losses are those of `nobubble train` with the same settings. With --data-parallel-size 2 under
# mpirun -np 2: one stage x 2 replicas, a replica-wait column, the loss of the oracle `reference` with D = 2.
# `bench recompute`: rows without and with recomputation and the cut and time table. Bad flags are usage errors.
source "$(dirname "$0")/lib.sh"
MODEL=(--num-layers 4 --hidden-size 64 --ffn-hidden-size 96 --num-attention-heads 4 --num-query-groups 2)
B=(bench schedules "${MODEL[@]}" --micro-batch-size 2 --seq-length 32 --num-microbatches 4 --iters 3 --warmup-iters 1)

# check_outputs NAME LOG PREFIX: the table, the ratio and target lines, the CSV and the markdown.
check_outputs() {
  local name=$1 log=$2 prefix=$3
  local rows
  rows=$(grep -cE '^(gpipe|1f1b|zb-h1|zb-v|2bw|pipedream) +[0-9]+ x [0-9]+ +[0-9]+ +[0-9.]+ +-?[0-9.]+% +[0-9.]+% +[0-9.]+ [0-9.]+ +[0-9.]+$' "$log")
  [ "$rows" = 6 ] && grep -qE '^pipedream +1 x 8 ' "$log" && grep -qE '^2bw +4 x 2 ' "$log" \
    && pass "$name: 6 rows, pipedream 1 x 8 against 4 x 2" || fail "$name: table: $(cat "$log")"
  grep -qE '^2bw / 1f1b tokens/s: [0-9.]+ \(ideal \(m \+ P - 1\) / m = 1.250\)$' "$log" \
    && grep -qE '^target: 2bw >= 1.15 x 1f1b tokens/s: measured [0-9.]+ = [0-9.]+ x target$' "$log" \
    && pass "$name: ratio and target lines" || fail "$name: ratio/target: $(tail -n 4 "$log")"
  [ "$(head -n 1 "$prefix.csv")" = "schedule,num_microbatches,micro_batch_size,tokens_per_s,ms_per_iter,bubble_pct,act_mib_stage0,act_mib_stage1,final_loss,sim_bubble_pct,replica_wait_pct" ] \
    && [ "$(wc -l <"$prefix.csv")" = 7 ] && [ "$(cut -d, -f1 "$prefix.csv" | tail -n 6 | tr '\n' ' ')" = "gpipe 1f1b zb-h1 zb-v 2bw pipedream " ] \
    && pass "$name: CSV" || fail "$name: CSV: $(cat "$prefix.csv")"
  # The simulated bubble at F = B = W, P = 2, m = 4: 1f1b (p-1)/(m+p-1) = 20%, zb-h1 (p-1)/(3m+p-1) = 7.69%, zb-v
  # (p-1)/(6m+p-1) = 4.00% (every step ends on every stage at once: the global clip's all-gather).
  [ "$(awk -F, '$1 == "1f1b" || $1 == "zb-h1" || $1 == "zb-v" { printf "%s=%s ", $1, $(NF - 1) }' "$prefix.csv")" = "1f1b=20.00 zb-h1=7.69 zb-v=4.00 " ] \
    && pass "$name: simulated bubbles of 1f1b, zb-h1 and zb-v" || fail "$name: sim bubble: $(cat "$prefix.csv")"
  [ "$(grep -c '^| ' "$prefix.md")" = 7 ] && grep -q '^target: 2bw >= 1.15' "$prefix.md" \
    && pass "$name: markdown" || fail "$name: markdown: $(cat "$prefix.md")"
}

timeout -k 5 120 "$NB" "${B[@]}" --out "$WORK/inproc" >"$WORK/inproc.log" 2>&1 || fail "in-process bench: $(cat "$WORK/inproc.log")"
grep -q '^bench schedules: .* 2 stages in one process' "$WORK/inproc.log" \
  && grep -q '^note: in one process the stages run one after another' "$WORK/inproc.log" \
  && pass "in one process: says the figures are not a parallel measurement" || fail "in-process header: $(head -n 3 "$WORK/inproc.log")"
check_outputs "in one process" "$WORK/inproc.log" "$WORK/inproc"

# --virtual-stages 2: an interleaved 1F1B row after 1f1b, with its own simulated bubble (P = 2, m = 4, V = 2:
# (p-1)/(v m + p - 1) = 11.11%) and the same loss (synchronous: the same bits).
timeout -k 5 120 "$NB" "${B[@]}" --num-layers 4 --schedules 1f1b --virtual-stages 2 --out "$WORK/vs" >"$WORK/vs.log" 2>&1 \
  || fail "bench --virtual-stages: $(cat "$WORK/vs.log")"
[ "$(cut -d, -f1 "$WORK/vs.csv" | tail -n 2 | tr '\n' ' ')" = "1f1b 1f1b-v2 " ] \
  && [ "$(awk -F, '$1 == "1f1b-v2" { print $(NF - 1) }' "$WORK/vs.csv")" = "11.11" ] \
  && [ "$(awk -F, 'NR > 1 { print $(NF - 2) }' "$WORK/vs.csv" | sort -u | wc -l)" = 1 ] \
  && pass "--virtual-stages 2: a 1f1b-v2 row, simulated bubble 11.11%, the same loss" || fail "1f1b-v2: $(cat "$WORK/vs.csv")"
expect_error 2 "virtual-stages must be positive, got 0" "$NB" "${B[@]}" --virtual-stages 0

# The 2bw row's loss is `train`'s with the same settings (the synthetic corpus is not a file the test has, so
# compare on a given --data).
make_corpus "$WORK/corpus.txt"
timeout -k 5 60 "$NB" "${B[@]}" --schedules 2bw --data "$WORK/corpus.txt" >"$WORK/data.log" 2>&1 || fail "bench --data: $(cat "$WORK/data.log")"
timeout -k 5 60 "$NB" train --data "$WORK/corpus.txt" --model tiny "${MODEL[@]}" --micro-batch-size 2 --seq-length 32 \
  --num-microbatches 4 --train-iters 3 --schedule 2bw --stages 2 --lr 1e-3 --lr-decay-style constant --val-fraction 0 \
  --log-interval 1 >"$WORK/train.log" 2>&1 || fail "train: $(cat "$WORK/train.log")"
want=$(grep '^step      3/3' "$WORK/train.log" | sed 's/.*| loss \([0-9.]*\) .*/\1/')
got=$(grep -E '^2bw ' "$WORK/data.log" | awk '{print $NF}')
[ -n "$want" ] && [ "$got" = "$want" ] && pass "2bw's final loss $got is train's" || fail "bench loss '$got', train's '$want'"

if [ "$HAVE_MPI" = 1 ]; then
  timeout -k 5 120 mpirun --oversubscribe -np 2 "$NB" "${B[@]}" --out "$WORK/mpi" >"$WORK/mpi.log" 2>&1 \
    || fail "mpirun bench: $(cat "$WORK/mpi.log")"
  grep -q '^bench schedules: .* 2 stages over MPI (one rank per stage)' "$WORK/mpi.log" && ! grep -q '^note:' "$WORK/mpi.log" \
    && pass "under mpirun: one rank per stage" || fail "mpirun header: $(head -n 3 "$WORK/mpi.log")"
  check_outputs "under mpirun" "$WORK/mpi.log" "$WORK/mpi"
  # D = 2 replicas of one stage: the same global batch as the oracle's D = 2, the same loss.
  timeout -k 5 120 mpirun --oversubscribe -np 2 "$NB" "${B[@]}" --schedules 1f1b --data-parallel-size 2 \
    --data "$WORK/corpus.txt" --out "$WORK/dp" >"$WORK/dp.log" 2>&1 || fail "mpirun bench D = 2: $(cat "$WORK/dp.log")"
  timeout -k 5 60 "$NB" reference --data "$WORK/corpus.txt" --model tiny "${MODEL[@]}" --micro-batch-size 2 \
    --seq-length 32 --num-microbatches 4 --train-iters 3 --schedule 1f1b --stages 1 --data-parallel-size 2 --lr 1e-3 \
    --lr-decay-style constant --val-fraction 0 --log-interval 1 >"$WORK/dp_ref.log" 2>&1 || fail "reference D = 2: $(cat "$WORK/dp_ref.log")"
  want=$(grep '^step      3/3' "$WORK/dp_ref.log" | sed 's/.*| loss \([0-9.]*\) .*/\1/')
  got=$(grep -E '^1f1b ' "$WORK/dp.log" | awk '{print $(NF - 1)}')
  grep -q '^bench schedules: .* 1 stages x 2 replicas over MPI (one rank per stage and replica), .* of 512 tokens' "$WORK/dp.log" \
    && grep -qE '^1f1b +4 x 2 .* [0-9.]+%$' "$WORK/dp.log" && grep -q '^replica wait: ' "$WORK/dp.log" \
    && [ "$(awk -F, 'NR == 2 { print NF }' "$WORK/dp.csv")" = 10 ] \
    && pass "D = 2: 1 stage x 2 replicas, 512 tokens a step, a replica-wait column" || fail "D = 2: $(cat "$WORK/dp.log" "$WORK/dp.csv")"
  [ -n "$want" ] && [ "$got" = "$want" ] && pass "D = 2: 1f1b's final loss $got is the oracle's" \
    || fail "D = 2: bench loss '$got', reference's '$want'"
else
  echo "skip: nobubble is built without MPI or mpirun is missing: no mpirun bench"
fi

# bench recompute: each schedule asked for without, with selective and with full recomputation, a row each, and per
# recomputed row the largest stage's peak against the kept row's, the time, and the targets (full >= 5x for
# <= 1.4x, selective >= 2x for <= 1.1x); full keeps less than selective, selective less than none.
R=(bench recompute "${MODEL[@]}" --micro-batch-size 2 --seq-length 32 --num-microbatches 4 --iters 2 --warmup-iters 1
   --schedules gpipe,1f1b --virtual-stages 1)
if timeout -k 5 120 "$NB" "${R[@]}" >"$WORK/recompute.log" 2>&1; then
  rows=$(grep -cE '^(gpipe|1f1b)( selective| full)? +4 x 2 ' "$WORK/recompute.log")
  peak() {  # peak ROW: the recomputed row's largest-stage peak MiB (the number before the slash)
    awk -v row="$1" '$0 ~ "^" row " +[0-9.]+/" { for (i = 1; i <= NF; ++i) if ($i ~ /\//) { split($i, a, "/"); print a[1]; exit } }' "$WORK/recompute.log"
  }
  grep -q '^bench recompute: model tiny' "$WORK/recompute.log" && [ "$rows" = 6 ] \
    && grep -qE '^gpipe full +[0-9.]+/[0-9.]+ +[0-9.]+x \(>=5\) +[0-9.]+x +\(<=1.4\) (meets both|misses)$' "$WORK/recompute.log" \
    && grep -qE '^1f1b selective +[0-9.]+/[0-9.]+ +[0-9.]+x \(>=2\) +[0-9.]+x +\(<=1.1\) (meets both|misses)$' "$WORK/recompute.log" \
    && awk -v f="$(peak 'gpipe full')" -v s="$(peak 'gpipe selective')" 'BEGIN { exit !(f > 0 && f < s) }' \
    && pass "bench recompute: 6 rows and the recomputation table, gpipe full $(peak 'gpipe full') < selective $(peak 'gpipe selective') MiB" \
    || fail "bench recompute: $(cat "$WORK/recompute.log")"
else
  fail "bench recompute: $(cat "$WORK/recompute.log")"
fi
expect_error 2 "unknown --recompute-granularity 'most'" "$NB" "${B[@]}" --recompute none,most

expect_error 2 "iters 2 must exceed --warmup-iters 2" "$NB" "${B[@]}" --iters 2 --warmup-iters 2
expect_error 2 "out '$WORK/no/dir/x': no directory" "$NB" "${B[@]}" --out "$WORK/no/dir/x"
expect_error 2 "schedule" "$NB" "${B[@]}" --schedules 1f1b,bogus
expect_error 2 "2bw needs --num-microbatches >= the number of stages" "$NB" "${B[@]}" --num-microbatches 1
expect_error 2 "--schedules zb-v: 4 pipeline stages but the model has only 2 layers" "$NB" "${B[@]}" --num-layers 2
expect_error 2 "--data-parallel-size 2 runs under mpirun -np P\\*2" "$NB" "${B[@]}" --data-parallel-size 2
expect_error 2 "--data-parallel-size must be positive, got 0" "$NB" "${B[@]}" --data-parallel-size 0
finish
