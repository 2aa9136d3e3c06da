#!/usr/bin/env bash
# MoE blocks (issue 12, docs/DESIGN.md section 7) from the command line, on the CPU:
# - bad MoE input: one line `nobubble: error: ...`, exit 2 (also the expert bias flags); --device cuda is
#   accepted (it runs on a GPU, and fails as any CUDA run where there is none);
# - `train --model tiny-moe` learns (the loss falls over 20 steps) and is deterministic (same final weights);
# - the pipelines (in-process and mpirun) end on `nobubble reference`'s weights and optimizer state for every
#   schedule (2bw also with ef), with MoE blocks on more than one stage;
# - the aux loss and each MoE layer's expert load in the progress line and --metrics: the same figures from the
#   plain loop, the in-process pipeline, mpirun and the reference (1f1b and 2bw), and MoE dispatch spans in --trace;
# - a tiny-moe 2bw run stopped by --exit-interval and resumed ends on the uninterrupted reference's state, and a
#   checkpoint of another MoE shape is refused;
# - the expert bias (--moe-router-enable-expert-bias): every schedule equals the reference with it, it changes the
#   training, a 2bw resume with it is exact (also onto 3 stages), and a checkpoint of another bias setting is refused.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
C="$WORK/corpus.txt"
T=("$NB" train --data "$C" "${TINY_FLAGS[@]}" --train-iters 2)
M=("$NB" train --data "$C" --model tiny-moe --micro-batch-size 2 --seq-length 32 --lr 1e-3 --eval-iters 1 --train-iters 2)

expect_error 2 "moe-router-topk must be in 1..8 and at most --num-experts 4, got 5" "${T[@]}" --moe-layers all \
  --num-experts 4 --moe-router-topk 5
expect_error 2 "moe-router-topk must be in 1..8 and at most --num-experts 8, got 9" "${M[@]}" --moe-router-topk 9
expect_error 2 "num-experts must be at least 1, got 0" "${M[@]}" --num-experts 0
expect_error 2 "moe-layers 'all-but-first:2' names no block: the model has 2 blocks" "${T[@]}" \
  --moe-layers all-but-first:2
expect_error 2 "moe-layers '1,5' names block 5, which does not exist: the model has blocks 0..1" "${T[@]}" \
  --moe-layers 1,5
expect_error 2 "moe-layers '0,0' names block 0 twice" "${T[@]}" --moe-layers 0,0
expect_error 2 "moe-layers 'some': 'some' is not a block index" "${T[@]}" --moe-layers some
expect_error 2 "^nobubble: error: --num-experts needs MoE layers: this model has none" "${T[@]}" --num-experts 4
expect_error 2 "^nobubble: error: --moe-router-topk needs MoE layers" "${T[@]}" --moe-router-topk 2
expect_error 2 "^nobubble: error: --moe-aux-loss-coeff needs MoE layers" "${M[@]}" --moe-layers none \
  --moe-aux-loss-coeff 0.1
expect_error 2 "moe-aux-loss-coeff must be a finite number >= 0, got -0.5" "${M[@]}" --moe-aux-loss-coeff -0.5
expect_error 2 "moe-shared-expert-ffn-hidden-size must be 0 (none) or more, got -3" "${M[@]}" \
  --moe-shared-expert-ffn-hidden-size -3
expect_error 2 "^nobubble: error: --moe-router-enable-expert-bias needs MoE layers" "${T[@]}" \
  --moe-router-enable-expert-bias
expect_error 2 "^nobubble: error: --moe-router-bias-update-rate needs MoE layers" "${T[@]}" \
  --moe-router-bias-update-rate 1e-3
expect_error 2 "^nobubble: error: --moe-router-bias-update-rate needs --moe-router-enable-expert-bias" "${M[@]}" \
  --moe-router-bias-update-rate 1e-3
expect_error 2 "moe-router-bias-update-rate must be a finite number >= 0, got -0.001" "${M[@]}" \
  --moe-router-enable-expert-bias --moe-router-bias-update-rate -1e-3
expect_error 2 "moe-router-bias-update-rate must be a finite number >= 0, got inf" "${M[@]}" \
  --moe-router-enable-expert-bias --moe-router-bias-update-rate inf
if [ "$HAVE_MPI" = 1 ]; then
  expect_mpi_usage_error bias_rate_mpi 2 "moe-router-bias-update-rate must be a finite number >= 0" \
    --data "$C" --model tiny-moe --lr 1e-3 --train-iters 2 --moe-router-enable-expert-bias \
    --moe-router-bias-update-rate -1
fi
# --device cuda with MoE blocks is no longer refused at startup (cuda/moe_*.cu): where no GPU is usable it fails
# as any CUDA run does (exit 1, one line naming the device), and on a GPU two tiny-moe steps run there.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  run_logged 300 cuda_moe "${M[@]}" --device cuda
else
  expect_error 1 "device cuda" "${M[@]}" --device cuda
fi

# tiny-moe learns, deterministically.
for run in a b; do
  run_logged 300 "learn_$run" "$NB" train --data "$C" --model tiny-moe --micro-batch-size 4 --seq-length 64 \
    --lr 3e-3 --train-iters 20 --eval-iters 1 --log-interval 1 --seed 3
done
first=$(grep -m1 '^step .* | loss ' "$WORK/learn_a.log" | sed 's/.*| loss \([0-9.]*\).*/\1/')
last=$(grep '^step .* | loss ' "$WORK/learn_a.log" | tail -n 1 | sed 's/.*| loss \([0-9.]*\).*/\1/')
if [ -n "$first" ] && [ -n "$last" ] && python3 -c "import sys; sys.exit(0 if $last < 0.8 * $first else 1)"; then
  pass "tiny-moe learns: loss $first -> $last over 20 steps"
else
  fail "tiny-moe: loss $first -> $last over 20 steps (want a fall of 20% or more)"
fi
h=$(hash_of "$WORK/learn_a.log")
[[ "$h" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/learn_b.log")" = "$h" ] && pass "tiny-moe: two runs, one hash" \
  || fail "tiny-moe: two runs gave $h and $(hash_of "$WORK/learn_b.log")"

# The aux loss's gradient reaches the weights: another coefficient, other weights.
run_logged 120 aux_0 "$NB" train --data "$C" --model tiny-moe --micro-batch-size 2 --seq-length 32 --lr 1e-3 \
  --train-iters 2 --eval-iters 1 --moe-aux-loss-coeff 0
run_logged 120 aux_1 "$NB" train --data "$C" --model tiny-moe --micro-batch-size 2 --seq-length 32 --lr 1e-3 \
  --train-iters 2 --eval-iters 1 --moe-aux-loss-coeff 1
h=$(hash_of "$WORK/aux_0.log")
[[ "$h" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/aux_1.log")" != "$h" ] \
  && pass "--moe-aux-loss-coeff changes the weights (its gradient flows)" || fail "aux coeff 0 and 1 gave $h"

# The pipelines against the reference. A small MoE shape: blocks 1 and 2 of 3 are MoE, on different stages.
FLAGS=(--data "$C" --model tiny-moe --num-layers 3 --hidden-size 64 --ffn-hidden-size 96 --num-attention-heads 4
       --num-query-groups 2 --moe-ffn-hidden-size 32 --moe-shared-expert-ffn-hidden-size 32 --moe-aux-loss-coeff 0.05
       --micro-batch-size 2 --seq-length 32 --lr 1e-3 --eval-iters 1 --log-interval 2 --train-iters 6)
check_against_reference gpipe 2 --schedule gpipe --num-microbatches 3
check_against_reference 1f1b 2 --schedule 1f1b --num-microbatches 3
check_against_reference 1f1b_p3 3 --schedule 1f1b --num-microbatches 3 --moe-router-topk-renorm --optimizer muon
check_against_reference 2bw 2 --schedule 2bw --num-microbatches 3
check_against_reference 2bw_ef 2 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef
check_against_reference pipedream 2 --schedule pipedream --num-microbatches 2
check_against_reference zb-h1_p3 3 --schedule zb-h1 --num-microbatches 3 --optimizer muon

# What a run reports about its MoE layers: the aux loss apart from the LM loss, and per MoE layer the expert load
# (max/mean tokens per expert, idle experts) of each iteration's training forwards, in the progress line (the most
# uneven layer) and in --metrics (every layer). The plain loop, the in-process pipeline, mpirun and the reference
# report the same figures bit for bit, under 1f1b, 2bw (whose forwards of iteration t+1 run before t is reported)
# and pipedream (m steps an iteration); the 2bw runs' --trace marks each MoE dispatch inside its F and B
# (check_trace.py).
moe_figures() {  # moe_figures METRICS.jsonl: per record, its aux loss and MoE fields (nothing if one is missing)
  /usr/bin/python3 - "$1" <<'PY' 2>/dev/null
import json, sys
keys = ["step", "aux_loss", "moe_layers", "moe_aux_loss", "moe_load_max_over_mean", "moe_idle_fraction"]
recs = [json.loads(line) for line in open(sys.argv[1])]
for r in recs:
    assert r["aux_loss"] > 0 and r["moe_layers"] == [1, 2], r
    assert all(m >= 1 for m in r["moe_load_max_over_mean"]) and all(0 <= i < 1 for i in r["moe_idle_fraction"]), r
    print(json.dumps({k: r[k] for k in keys}))
PY
}
moe_line_part() { grep '^step ' "$1" | grep -o '| aux [^|]*'; }
same_moe_figures() {  # same_moe_figures NAME WANT GOT: the WORK/WANT and WORK/GOT runs' logs and metrics
  local want got want_line
  want=$(moe_figures "$WORK/$2.jsonl")
  got=$(moe_figures "$WORK/$3.jsonl")
  want_line=$(moe_line_part "$WORK/$2.log")
  if [ "$(printf '%s\n' "$want" | grep -c '"aux_loss"')" = 6 ] && [ "$got" = "$want" ] \
     && [ -n "$want_line" ] && [ "$(moe_line_part "$WORK/$3.log")" = "$want_line" ]; then
    pass "$1: the same aux loss and expert loads as $2 ($(moe_line_part "$WORK/$3.log" | tail -n 1))"
  else
    fail "$1: $2 reports [$want] [$(moe_line_part "$WORK/$2.log")], $3 [$got] [$(moe_line_part "$WORK/$3.log")]"
  fi
}
moe_trace() {  # moe_trace NAME RUN: the run's 2-stage 2bw trace; the cut puts block 1 on stage 0, block 2 on 1
  if grep -q '(blocks 0-1 | 2)' "$WORK/$2.log" && /usr/bin/python3 "$(dirname "$0")/check_trace.py" \
       "$WORK/$2.json" 2 18 6 '1|2' >"$WORK/$2.check" 2>&1 && grep -q 'MoE dispatch spans' "$WORK/$2.check"; then
    pass "$1: $(grep 'MoE dispatch spans' "$WORK/$2.check")"
  else
    fail "$1: $(head -n 1 "$WORK/$2.log") $(cat "$WORK/$2.check")"
  fi
}
O=("${FLAGS[@]}" --num-microbatches 3)
for s in 1f1b 2bw pipedream zb-h1; do
  run_logged 120 "obs_ref_$s" "$NB" reference "${O[@]}" --schedule $s --stages 2 --metrics "$WORK/obs_ref_$s.jsonl"
  run_logged 120 "obs_in_$s" "$NB" train "${O[@]}" --schedule $s --stages 2 --metrics "$WORK/obs_in_$s.jsonl" \
    --trace "$WORK/obs_in_$s.json"
  same_moe_figures "in-process $s" "obs_ref_$s" "obs_in_$s"
done
moe_trace "in-process 2bw --trace" obs_in_2bw
run_logged 120 obs_plain "$NB" train "${O[@]}" --schedule 1f1b --metrics "$WORK/obs_plain.jsonl"
same_moe_figures "the plain loop (one stage)" obs_ref_1f1b obs_plain
pat='^step      2/6 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| grad_norm [0-9.]+ '
pat+='\| aux [0-9]\.[0-9]{4} load max/mean [0-9]+\.[0-9]{2} \(L[12]\) idle [01]\.[0-9]{2} \| [0-9]+ tok/s'
grep -Eq "$pat" "$WORK/obs_plain.log" && pass "progress line: $(grep '^step      2/6' "$WORK/obs_plain.log")" \
  || fail "progress line: $(grep '^step ' "$WORK/obs_plain.log")"
if [ "$HAVE_MPI" = 1 ]; then
  run_logged 120 obs_mpi_1f1b mpirun --oversubscribe -np 2 "$NB" train "${O[@]}" --schedule 1f1b \
    --metrics "$WORK/obs_mpi_1f1b.jsonl"
  same_moe_figures "mpirun -np 2 1f1b" obs_ref_1f1b obs_mpi_1f1b
  run_logged 120 obs_mpi_2bw mpirun --oversubscribe -np 2 "$NB" train "${O[@]}" --schedule 2bw \
    --metrics "$WORK/obs_mpi_2bw.jsonl" --trace "$WORK/obs_mpi_2bw.json"
  same_moe_figures "mpirun -np 2 2bw" obs_ref_2bw obs_mpi_2bw
  moe_trace "mpirun -np 2 2bw --trace" obs_mpi_2bw
fi

# Exact resume under 2bw: stopped after step 2, resumed, against the uninterrupted reference.
R=("${FLAGS[@]}" --stages 2 --schedule 2bw --num-microbatches 3 --train-iters 5)
run_logged 120 resume_full "$NB" reference "${R[@]}"
run_logged 120 resume_stop "$NB" train "${R[@]}" --save "$WORK/ckpt" --save-interval 2 --exit-interval 2
run_logged 120 resume_rest "$NB" train "${R[@]}" --load "$WORK/ckpt"
same_state "tiny-moe 2bw: stopped after 2, resumed, ends on the uninterrupted state" "$WORK/resume_full.log" \
  "$WORK/resume_rest.log"
# A checkpoint of another MoE shape is refused, naming the field.
expect_error 1 "identity.model.moe" "$NB" train "${R[@]}" --num-experts 4 --load "$WORK/ckpt"

# The expert bias (aux-loss-free balancing) under every schedule: a buffer in the weights, so a stale forward
# selects with its own version's bias; the rate is large enough that the bias moves selections within 6 steps.
FLAGS+=(--moe-router-enable-expert-bias --moe-router-bias-update-rate 0.01)
check_against_reference bias_gpipe 2 --schedule gpipe --num-microbatches 3
check_against_reference bias_1f1b_p3 3 --schedule 1f1b --num-microbatches 3 --optimizer muon
check_against_reference bias_2bw 2 --schedule 2bw --num-microbatches 3
check_against_reference bias_2bw_ef 2 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef
check_against_reference bias_pipedream 2 --schedule pipedream --num-microbatches 2
check_against_reference bias_zb-h1 2 --schedule zb-h1 --num-microbatches 3
# The optimizer state covers the trainable parameters only (the same names with the bias or without): it differs
# only if the bias moved some selection, whereas the weights' hash would differ by the bias tensor alone.
o=$(opt_of "$WORK/ref_2bw.log")
[[ "$o" =~ ^[0-9a-f]{64}$ ]] && [ "$(opt_of "$WORK/ref_bias_2bw.log")" != "$o" ] \
  && pass "the expert bias changes the training (it moved some selection)" || fail "bias on and off: optimizer state $o"
# Exact resume with the bias (it is in the checkpoint with its older versions), and identity checks both ways.
R=("${FLAGS[@]}" --stages 2 --schedule 2bw --num-microbatches 3 --train-iters 5)
run_logged 120 bias_resume_full "$NB" reference "${R[@]}"
run_logged 120 bias_resume_stop "$NB" train "${R[@]}" --save "$WORK/ckpt_bias" --save-interval 2 --exit-interval 2
run_logged 120 bias_resume_rest "$NB" train "${R[@]}" --load "$WORK/ckpt_bias"
same_state "tiny-moe 2bw with the expert bias: stopped after 2, resumed, ends on the uninterrupted state" \
  "$WORK/bias_resume_full.log" "$WORK/bias_resume_rest.log"
# Resharded (1f1b, whose bits do not depend on the cut): saved on 2 stages, resumed on 3, ends on the 3-stage
# reference (the bias is found by name).
R3=("${FLAGS[@]}" --schedule 1f1b --num-microbatches 3 --train-iters 5)
run_logged 120 bias_reshard_full "$NB" reference "${R3[@]}" --stages 3
run_logged 120 bias_reshard_stop "$NB" train "${R3[@]}" --stages 2 --save "$WORK/ckpt_reshard" --save-interval 2 \
  --exit-interval 2
run_logged 120 bias_reshard_rest "$NB" train "${R3[@]}" --stages 3 --load "$WORK/ckpt_reshard"
same_state "tiny-moe 1f1b with the expert bias: saved on 2 stages, resumed on 3, ends on the 3-stage reference" \
  "$WORK/bias_reshard_full.log" "$WORK/bias_reshard_rest.log"
expect_error 1 "identity.model.moe" "$NB" train "${R[@]}" --load "$WORK/ckpt"
expect_error 1 "identity.model.moe" "$NB" train "${R[@]/#0.01/0.02}" --load "$WORK/ckpt_bias"  # another rate
finish
