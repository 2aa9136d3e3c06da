#!/usr/bin/env bash
# Schedules with several chunks per stage (docs/DESIGN.md section 2): interleaved 1F1B (--virtual-stages V with 1f1b),
# the model cut into P x V parts, chunk c of stage s holding part c P + s; and zb-v, two chunks per stage in a V,
# chunk 0 of stage s on part s and chunk 1 on part 2P-1-s. Each rank runs its chunks (under mpirun over
# ChunkTransports: pipeline/transport/chunk_transport.h).
# - against the oracle (`reference --virtual-stages V`, the same cut) in one process and under mpirun, at several
#   (P, V, m), with the global clip active (--clip-grad 1), for AdamW, Muon and SOAP and an MoE model: weights,
#   optimizer state, validation loss and versions bit for bit;
# - the weights equal plain 1f1b's on P stages (synchronous: the bits do not depend on the cut or the order);
# - stopped and resumed (in one process, then under mpirun) it ends on the uninterrupted state;
# - --trace has one track per part, every microbatch's F and B on each;
# - usage errors: V > 1 with another schedule, m not a multiple of P, more parts than layers, V < 1.
# zb-v the same: against the oracle at several (P, m), m below and above the V's warm-up of 2P - 1, for AdamW,
# Muon and SOAP and the MoE model; equal to plain 1f1b; stopped and resumed, under mpirun too; resharded to other
# stage counts; its trace (one track per part, a W for every B); and its usage errors.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 6 --untie-embeddings-and-output-weights
       --log-interval 100 --train-iters 6 --clip-grad 1)
[ "$HAVE_MPI" = 1 ] || echo "skip: nobubble is built without MPI or mpirun is missing: in-process runs only"

check_against_reference p2_v2_m2 2 --virtual-stages 2 --num-microbatches 2
check_against_reference p2_v2_m4 2 --virtual-stages 2 --num-microbatches 4
check_against_reference p3_v2_m3 3 --virtual-stages 2 --num-microbatches 3
check_against_reference p2_v3_m4 2 --virtual-stages 3 --num-microbatches 4
check_against_reference p2_v2_muon 2 --virtual-stages 2 --num-microbatches 4 --optimizer muon
check_against_reference p2_v2_soap 2 --virtual-stages 2 --num-microbatches 2 --optimizer soap

run_logged 120 plain_1f1b "$NB" reference "${FLAGS[@]}" --stages 2 --num-microbatches 4
[ -n "$(hash_of "$WORK/plain_1f1b.log")" ] && [ "$(hash_of "$WORK/ref_p2_v2_m4.log")" = "$(hash_of "$WORK/plain_1f1b.log")" ] \
  && pass "interleaved ends on plain 1f1b's weights" || fail "interleaved $(hash_of "$WORK/ref_p2_v2_m4.log"), 1f1b $(hash_of "$WORK/plain_1f1b.log")"
grep -q 'on 2 stages x 2 chunks (blocks' "$WORK/inproc_p2_v2_m4.log" && pass "the header names the chunks" \
  || fail "header: $(head -n 1 "$WORK/inproc_p2_v2_m4.log")"

# An MoE model: blocks 1 and 3 of 4 are MoE, on different parts.
MOE=(--data "$WORK/corpus.txt" --model tiny-moe --num-layers 4 --hidden-size 64 --ffn-hidden-size 96
     --num-attention-heads 4 --num-query-groups 2 --moe-ffn-hidden-size 32 --moe-shared-expert-ffn-hidden-size 32
     --moe-aux-loss-coeff 0.05 --moe-layers 1,3 --micro-batch-size 2 --seq-length 32 --lr 1e-3 --eval-iters 1
     --log-interval 100 --train-iters 4)
SAVED=("${FLAGS[@]}")
FLAGS=("${MOE[@]}")
check_against_reference moe_p2_v2 2 --virtual-stages 2 --num-microbatches 2
FLAGS=("${SAVED[@]}")

# Resume: stopped after 2 iterations and resumed, in one process and under mpirun.
R=("${FLAGS[@]}" --virtual-stages 2 --num-microbatches 4 --optimizer muon)
run_logged 120 res_full "$NB" reference "${R[@]}" --stages 2
run_logged 120 res_stop "$NB" train "${R[@]}" --stages 2 --save "$WORK/ck" --save-interval 2 --exit-interval 2
run_logged 120 res_rest "$NB" train "${R[@]}" --stages 2 --load "$WORK/ck"
same_state "in one process: stopped after 2, resumed" "$WORK/res_full.log" "$WORK/res_rest.log"
if [ "$HAVE_MPI" = 1 ]; then
  run_logged 120 res_mpi "${MPI[@]}" -np 2 "$NB" train "${R[@]}" --load "$WORK/ck"
  same_state "under mpirun: stopped in one process after 2, resumed" "$WORK/res_full.log" "$WORK/res_mpi.log"
fi

# The trace: one track per part.
run_logged 120 traced "$NB" train "${FLAGS[@]}" --stages 2 --virtual-stages 2 --num-microbatches 4 --train-iters 2 \
  --trace "$WORK/trace.json"
if /usr/bin/python3 "$(dirname "$0")/check_trace.py" "$WORK/trace.json" 4 8 2 >"$WORK/trace.check" 2>&1; then
  pass "trace: $(tr '\n' ';' <"$WORK/trace.check")"
else
  fail "trace: $(cat "$WORK/trace.check")"
fi

# ---- zb-v ----
check_against_reference zbv_p2_m2 2 --schedule zb-v --num-microbatches 2
check_against_reference zbv_p2_m4 2 --schedule zb-v --num-microbatches 4
check_against_reference zbv_p3_m3 3 --schedule zb-v --num-microbatches 3
check_against_reference zbv_p3_m5 3 --schedule zb-v --num-microbatches 5
check_against_reference zbv_p2_muon 2 --schedule zb-v --num-microbatches 3 --optimizer muon
check_against_reference zbv_p2_soap 2 --schedule zb-v --num-microbatches 4 --optimizer soap
[ "$(hash_of "$WORK/ref_zbv_p2_m4.log")" = "$(hash_of "$WORK/plain_1f1b.log")" ] \
  && pass "zb-v ends on plain 1f1b's weights" || fail "zb-v $(hash_of "$WORK/ref_zbv_p2_m4.log"), 1f1b $(hash_of "$WORK/plain_1f1b.log")"
grep -q 'on 3 stages x 2 chunks in a V (blocks' "$WORK/inproc_zbv_p3_m3.log" && pass "the header names the V" \
  || fail "header: $(head -n 1 "$WORK/inproc_zbv_p3_m3.log")"
FLAGS=("${MOE[@]}")
check_against_reference moe_zbv_p2 2 --schedule zb-v --num-microbatches 3
FLAGS=("${SAVED[@]}")

# Resume and reshard: 2 stages (4 parts) stopped after 2, resumed on 2 (in one process and under mpirun), and on 3
# (6 parts), whose end loads back into 2.
Z=("${FLAGS[@]}" --schedule zb-v --num-microbatches 3 --optimizer soap)
run_logged 120 zres_full "$NB" reference "${Z[@]}" --stages 2
run_logged 120 zres_stop "$NB" train "${Z[@]}" --stages 2 --save "$WORK/zck" --save-interval 2 --exit-interval 2
run_logged 120 zres_rest "$NB" train "${Z[@]}" --stages 2 --load "$WORK/zck"
same_state "zb-v in one process: stopped after 2, resumed" "$WORK/zres_full.log" "$WORK/zres_rest.log"
grep -q "resumed from .*zck/step_2 (after step 2)$" "$WORK/zres_rest.log" && pass "zb-v: a resume of the same parts is no reshard" \
  || fail "resume line: $(grep resumed "$WORK/zres_rest.log")"
if [ "$HAVE_MPI" = 1 ]; then
  run_logged 120 zres_mpi "${MPI[@]}" -np 2 "$NB" train "${Z[@]}" --load "$WORK/zck"
  same_state "zb-v under mpirun: stopped in one process after 2, resumed" "$WORK/zres_full.log" "$WORK/zres_mpi.log"
fi
run_logged 120 zres_p3 "$NB" train "${Z[@]}" --stages 3 --load "$WORK/zck" --save "$WORK/zck3" --save-interval 6
grep -q "resharded from 4 to 6 stages" "$WORK/zres_p3.log" && pass "zb-v: 4 parts resharded to 6" \
  || fail "reshard line: $(grep resumed "$WORK/zres_p3.log")"
[ "$(hash_of "$WORK/zres_p3.log")" = "$(hash_of "$WORK/zres_full.log")" ] && pass "zb-v resharded 2 -> 3 stages: the same weights" \
  || fail "zb-v reshard: $(hash_of "$WORK/zres_p3.log") vs $(hash_of "$WORK/zres_full.log")"
run_logged 120 zres_back "$NB" train "${Z[@]}" --stages 2 --load "$WORK/zck3"
same_state "zb-v: resharded to 3 stages, its end loaded back into 2" "$WORK/zres_full.log" "$WORK/zres_back.log"

# The trace: one track per part; a W for every B.
run_logged 120 ztraced "$NB" train "${FLAGS[@]}" --stages 2 --schedule zb-v --num-microbatches 4 --train-iters 2 \
  --trace "$WORK/ztrace.json"
if /usr/bin/python3 "$(dirname "$0")/check_trace.py" "$WORK/ztrace.json" 4 8 2 >"$WORK/ztrace.check" 2>&1; then
  pass "zb-v trace: $(tr '\n' ';' <"$WORK/ztrace.check")"
else
  fail "zb-v trace: $(cat "$WORK/ztrace.check")"
fi

expect_error 2 "--schedule zb-v runs two chunks per stage in a V: --virtual-stages must be 2 (or left out), got 3" \
  "$NB" train "${FLAGS[@]}" --stages 2 --schedule zb-v --virtual-stages 3 --num-microbatches 2
expect_error 2 "8 pipeline stages but the model has only 6 layers" \
  "$NB" train "${FLAGS[@]}" --stages 4 --schedule zb-v --num-microbatches 4

expect_error 2 "virtual-stages 2 (interleaved 1F1B) needs --schedule 1f1b, not 2bw" \
  "$NB" train "${FLAGS[@]}" --stages 2 --virtual-stages 2 --schedule 2bw --num-microbatches 2
expect_error 2 "needs --num-microbatches a multiple of the 2 stages, as Megatron-LM does: got 3" \
  "$NB" train "${FLAGS[@]}" --stages 2 --virtual-stages 2 --num-microbatches 3
expect_error 2 "8 pipeline stages but the model has only 6 layers" \
  "$NB" train "${FLAGS[@]}" --stages 2 --virtual-stages 4 --num-microbatches 2
expect_error 2 "virtual-stages must be positive, got 0" "$NB" reference "${FLAGS[@]}" --stages 2 --virtual-stages 0
finish
