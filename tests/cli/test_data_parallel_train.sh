#!/usr/bin/env bash
# Data parallelism in the executor (docs/DESIGN.md section 2, "Data parallelism"): `mpirun -np P*D nobubble train
# --data-parallel-size D`, rank = replica x P + stage, against its oracle `nobubble reference --data-parallel-size D`.
# - every schedule at P = 1 and P = 2 with D = 2: Muon (+ ef where the schedule is 2bw) and AdamW, weights,
#   optimizer state, validation loss, versions and every iteration's loss bit for bit; the MoE model; interleaved
#   1F1B; --clip-scope stage;
# - a D = 2 train run and a D = 1 run of the same global batch (m = 4) agree within 3e-4 (only the sum's order
#   differs);
# - resumed at another D where the global batch is kept (synchronous schedules): as the oracle resumed alike; 2bw
#   refuses it;
# - resumed at the same D, after a checkpoint and after a stop signal that reached one rank of replica 1 only (the
#   replicas vote as one job);
# - a failing, a stalled and a killed rank in replica 1 end the whole job, one line naming stage and replica;
# - --use-distributed-optimizer (ZeRO-1): every optimizer sharded has the same bits (and ef, taylor, MoE, zb-v,
#   D = 3); its checkpoint files are the unsharded run's byte for byte and resume sharded or not;
# - the pipeline and P = 2 x D = 2 once more over Open MPI's TCP path (--mca btl tcp,self);
# - usage: the ranks must be stages x replicas; the header names the replicas.
source "$(dirname "$0")/lib.sh"
if [ "$HAVE_MPI" != 1 ]; then echo "skip: this nobubble has no MPI"; finish; exit; fi
/usr/bin/python3 -c '
import random, sys
r = random.Random(7)
sys.stdout.write("".join(chr(33 + r.randrange(90)) * r.randrange(5, 60) for _ in range(3000)))' >"$WORK/corpus.txt"
BASE=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 4 --untie-embeddings-and-output-weights
      --train-iters 4 --clip-grad 1)
FLAGS=("${BASE[@]}" --num-microbatches 2 --data-parallel-size 2)

losses_of() { sed -n 's/^step .*| loss \([0-9.]*\) .*/\1/p' "$1" | tr '\n' ' '; }

# dp_equal ID P FLAGS...: reference and mpirun -np P*D train (D = $DP, 2 unless set; $ZERO: train's extra
# flags) end alike, every iteration's loss included.
dp_equal() {
  local id=$1 p=$2 d=${DP:-2}
  shift 2
  run_logged 120 "ref_$id" "$NB" reference "${FLAGS[@]}" "$@" --stages "$p" --data-parallel-size "$d"
  run_logged 120 "dp_$id" "${MPI[@]}" -np $((d * p)) "$NB" train "${FLAGS[@]}" "$@" --data-parallel-size "$d" ${ZERO:-}
  equal "P = $p x D = $d $id${ZERO:+ $ZERO}" "$WORK/ref_$id.log" "$WORK/dp_$id.log"
  [ "$(losses_of "$WORK/ref_$id.log")" = "$(losses_of "$WORK/dp_$id.log")" ] || fail "$id: losses differ"
}

start=$SECONDS
names_into SCHEDULES schedules
for s in "${SCHEDULES[@]}"; do
  for p in 1 2; do
    L=(--num-layers "$(enough_layers "$s" "$p" 4)")
    muon=(--optimizer muon)
    [ "$s" = 2bw ] && muon+=(--delay-fix ef)
    dp_equal "${s}_p${p}_muon" "$p" "${L[@]}" --schedule "$s" "${muon[@]}"
    dp_equal "${s}_p${p}_adamw" "$p" "${L[@]}" --schedule "$s" --optimizer adamw
  done
done
echo "matrix: $((SECONDS - start)) s"
MOE=(--num-experts 4 --moe-router-topk 2 --moe-layers all)
dp_equal moe_2bw 2 --schedule 2bw --optimizer muon --delay-fix ef "${MOE[@]}"
dp_equal moe_1f1b_p1 1 --schedule 1f1b --optimizer adamw "${MOE[@]}"
dp_equal interleaved 2 --schedule 1f1b --virtual-stages 2 --optimizer adamw
dp_equal clip_stage 2 --schedule 2bw --optimizer muon --delay-fix ef --clip-scope stage
dp_equal ef_predict 2 --schedule 2bw --optimizer muon --delay-fix ef,predict
dp_equal lookahead 2 --schedule 2bw --optimizer adamw --delay-fix lookahead
grep -q '^nobubble: --schedule 2bw on 2 stages x 2 replicas (blocks' "$WORK/dp_moe_2bw.log" \
  && pass "the header names the replicas" || fail "header: $(head -n 1 "$WORK/dp_moe_2bw.log")"

# The distributed optimizer (ZeRO-1): every optimizer, sharded, has the unsharded oracle's bits; MoE; zb-v;
# D = 3 (rows cut three ways); its checkpoint file is the unsharded run's byte for byte, and resumes either way.
names_into OPTIMIZERS optimizers
for opt in "${OPTIMIZERS[@]}"; do
  ZERO=--use-distributed-optimizer dp_equal "zero_$opt" 2 --schedule 1f1b --optimizer "$opt"
done
ZERO=--use-distributed-optimizer dp_equal zero_muon_ef 2 --schedule 2bw --optimizer muon --delay-fix ef
ZERO=--use-distributed-optimizer dp_equal zero_taylor 2 --schedule 2bw --optimizer adamw --delay-fix taylor
ZERO=--use-distributed-optimizer dp_equal zero_moe 2 --schedule 2bw --optimizer muon --delay-fix ef "${MOE[@]}"
ZERO=--use-distributed-optimizer dp_equal zero_zbv 2 --schedule zb-v --optimizer adamw
DP=3 ZERO=--use-distributed-optimizer dp_equal zero_d3 1 --schedule 1f1b --optimizer adamw
Z=("${FLAGS[@]}" --stages 2 --schedule 2bw --optimizer muon --delay-fix ef --train-iters 6)
run_logged 120 z_full "${MPI[@]}" -np 4 "$NB" train "${Z[@]}"
run_logged 120 z_part1 "${MPI[@]}" -np 4 "$NB" train "${Z[@]}" --use-distributed-optimizer --save "$WORK/ckz" \
  --save-interval 2 --exit-interval 2
run_logged 120 u_part1 "${MPI[@]}" -np 4 "$NB" train "${Z[@]}" --save "$WORK/cku" --save-interval 2 --exit-interval 2
cmp -s "$WORK/ckz/step_2/stage_0.safetensors" "$WORK/cku/step_2/stage_0.safetensors" &&
  cmp -s "$WORK/ckz/step_2/stage_1.safetensors" "$WORK/cku/step_2/stage_1.safetensors" &&
  pass "sharded: the checkpoint files are the unsharded run's, byte for byte" \
  || fail "sharded and unsharded checkpoint files differ"
run_logged 120 z_part2 "${MPI[@]}" -np 4 "$NB" train "${Z[@]}" --use-distributed-optimizer --load "$WORK/ckz"
same_state "sharded: stopped after 2, resumed sharded" "$WORK/z_full.log" "$WORK/z_part2.log"
run_logged 120 u_part2 "${MPI[@]}" -np 4 "$NB" train "${Z[@]}" --load "$WORK/ckz"
same_state "sharded checkpoint resumed unsharded" "$WORK/z_full.log" "$WORK/u_part2.log"
expect_error 2 "use-distributed-optimizer shards the optimizer state over the replicas" "$NB" train "${BASE[@]}" \
  --use-distributed-optimizer

# Resumed at another D, the global batch kept (synchronous schedules): D = 2 x m = 2 saved, resumed at D = 1 x m = 4,
# ends where the oracle resumed the same way ends (not on the uninterrupted run's bits: the sum's order changed at
# the resume; 2bw refuses another D: below).
S=("${BASE[@]}" --stages 2 --schedule 1f1b --optimizer adamw --train-iters 6)
run_logged 120 t_part1 "${MPI[@]}" -np 4 "$NB" train "${S[@]}" --data-parallel-size 2 --num-microbatches 2 \
  --save "$WORK/ckt" --save-interval 2 --exit-interval 2
run_logged 120 t_part2 "${MPI[@]}" -np 2 "$NB" train "${S[@]}" --num-microbatches 4 --load "$WORK/ckt"
run_logged 120 t_ref "$NB" reference "${S[@]}" --num-microbatches 4 --load "$WORK/ckt"
same_state "saved at D = 2 x m = 2, resumed at D = 1 x m = 4: the oracle resumed alike" "$WORK/t_ref.log" \
  "$WORK/t_part2.log"

# D = 2 x m = 2 against D = 1 x m = 4, both under train: the same global batch, another order of the sum.
run_logged 120 d1_m4 "${MPI[@]}" -np 2 "$NB" train "${BASE[@]}" --num-microbatches 4 --optimizer muon
run_logged 120 d2_m2 "${MPI[@]}" -np 4 "$NB" train "${FLAGS[@]}" --optimizer muon
a=$(losses_of "$WORK/d1_m4.log"); b=$(losses_of "$WORK/d2_m2.log")
awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, " "); if (n < 2 || n != split(b, y, " ")) exit 1
     for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 3e-4) exit 1 } }' \
  && pass "D = 2 x m = 2 and D = 1 x m = 4 agree within 3e-4 ($b / $a)" || fail "D = 2 ($b) against D = 1 ($a)"

# Resumed at D = 2: after a checkpoint, and after a stop asked on rank 3 (stage 1 of replica 1) alone.
R=("${FLAGS[@]}" --stages 2 --schedule 2bw --optimizer muon --delay-fix ef --train-iters 6)
run_logged 120 full "${MPI[@]}" -np 4 "$NB" train "${R[@]}"
run_logged 120 part1 "${MPI[@]}" -np 4 "$NB" train "${R[@]}" --save "$WORK/ck" --save-interval 2 --exit-interval 2
run_logged 120 part2 "${MPI[@]}" -np 4 "$NB" train "${R[@]}" --load "$WORK/ck"
same_state "D = 2: stopped after 2, resumed" "$WORK/full.log" "$WORK/part2.log"
expect_error 1 "field 'identity.num_microbatches' is '2' there, '4' in this run" "$NB" train "${R[@]}" \
  --data-parallel-size 1 --num-microbatches 4 --load "$WORK/ck"
run_logged 120 sig1 "${MPI[@]}" -np 4 "$NB" train "${R[@]}" --save "$WORK/ck_sig" --save-interval 100 \
  --signal-at-step 1 --signal-rank 3
grep -q '^stopped by SIGTERM after step [2-5]; checkpoint saved$' "$WORK/sig1.log" \
  && pass "a stop asked on one rank of replica 1 stops the job ($(ls "$WORK/ck_sig" | tr '\n' ' '))" \
  || fail "signal: $(tail -n 3 "$WORK/sig1.log")"
run_logged 120 sig2 "${MPI[@]}" -np 4 "$NB" train "${R[@]}" --load "$WORK/ck_sig"
same_state "D = 2: stopped by a signal, resumed" "$WORK/full.log" "$WORK/sig2.log"

# Faults in replica 1 end every rank, naming stage and replica.
expect_mpi_failure fail_r1 4 "rank 2 (stage 0 of replica 1): injected failure" "${R[@]}" --fail-at-step 2 --fail-rank 2
# A stalled rank: every rank whose watchdog fires before the abort reaches it prints its line (as in
# test_watchdog.sh), each naming stage and replica, none the stalled rank 3.
t0=$SECONDS rc=0
timeout -k 5 30 "${MPI[@]}" -np 4 "$NB" train "${R[@]}" --stall-at-step 2 --stall-rank 3 --watchdog-s 3 \
  >"$WORK/stall.out" 2>"$WORK/stall.err" || rc=$?
lines=$(error_lines "$WORK/stall.err")
named=$(grep -c '^nobubble: error: watchdog: rank [0-2] (stage . of replica .) made no progress for 3 s' "$WORK/stall.err")
[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$lines" -ge 1 ] && [ "$named" = "$lines" ] \
  && pass "a stalled rank of replica 1: the job ends (exit $rc after $((SECONDS - t0)) s), $lines watchdog line(s)" \
  || fail "stall: exit $rc, stderr: $(cat "$WORK/stall.err")"
t0=$SECONDS rc=0
timeout -k 5 30 "${MPI[@]}" -np 4 "$NB" train "${R[@]}" --kill-at-step 2 --kill-rank 3 --watchdog-s 3 \
  >"$WORK/kill.out" 2>"$WORK/kill.err" || rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] && [ $((SECONDS - t0)) -lt 30 ] \
  && pass "a killed rank of replica 1 ends the job (exit $rc after $((SECONDS - t0)) s)" || fail "kill: exit $rc"

# Open MPI's TCP path (the one traffic between nodes takes) instead of shared memory: the pipeline, and data
# parallelism with the distributed optimizer, once more, on the oracle's bits.
TCP=(--mca btl tcp,self)
PP=("${BASE[@]}" --num-microbatches 2 --schedule 2bw --optimizer muon --delay-fix ef)
run_logged 120 tcp_pp_ref "$NB" reference "${PP[@]}" --stages 2
run_logged 120 tcp_pp "${MPI[@]}" "${TCP[@]}" -np 2 "$NB" train "${PP[@]}"
equal "over TCP: mpirun -np 2 2bw" "$WORK/tcp_pp_ref.log" "$WORK/tcp_pp.log"
run_logged 120 tcp_dp "${MPI[@]}" "${TCP[@]}" -np 4 "$NB" train "${FLAGS[@]}" --schedule 2bw --optimizer muon \
  --delay-fix ef --data-parallel-size 2 --use-distributed-optimizer
equal "over TCP: P = 2 x D = 2 2bw, the distributed optimizer" "$WORK/ref_zero_muon_ef.log" "$WORK/tcp_dp.log"

expect_mpi_usage_error ranks 3 "--data-parallel-size 2 with --stages 2 needs 4 MPI ranks" "${FLAGS[@]}" --stages 2
expect_error 2 "--data-parallel-size 2 with --stages 1 needs 2 MPI ranks" "$NB" train "${FLAGS[@]}"
finish
