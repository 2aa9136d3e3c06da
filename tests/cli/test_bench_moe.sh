#!/usr/bin/env bash
# `nobubble bench moe` on a small shape (the figures are the benchmark's business, not a test's): it names the shape,
# prints a row for the MoE layer and one for the dense MLP of the same active FLOPs, and the target line whose
# ratio is the two rows' times measured in that run; --profile adds both layers' op tables; on CUDA it times a
# training step or says in one error line why not. Bad flags are usage errors.
source "$(dirname "$0")/lib.sh"
timeout -k 5 120 "$NB" bench moe --hidden-size 64 --tokens 256 --reps 2 >"$WORK/bench.log" 2>&1 \
  || fail "bench moe: $(cat "$WORK/bench.log")"
grep -qE '^  shape: tiny-moe scaled to hidden 64: 256 tokens, 8 experts of ffn 48, top-2, shared expert ffn 48; dense ffn 144 \(= 2 x 48 \+ 48\)$' \
  "$WORK/bench.log" && pass "the shape, scaled from tiny-moe" || fail "shape: $(cat "$WORK/bench.log")"
row='+[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]'
grep -qE "^  moe $row.*busiest expert [0-9.]+ x the mean load\)$" "$WORK/bench.log" && pass "a row for the MoE layer" \
  || fail "moe row: $(cat "$WORK/bench.log")"
grep -qE "^  dense $row+$" "$WORK/bench.log" && pass "a row for the dense MLP" || fail "dense row: $(cat "$WORK/bench.log")"
grep -qE '^target: dense_time / moe_time >= 0\.70: measured [0-9]+\.[0-9]{3} = [0-9]+\.[0-9]{2} x target$' "$WORK/bench.log" \
  && pass "the target line" || fail "target: $(tail -n 1 "$WORK/bench.log")"
# The ratio is the rows' own times (to their printed rounding), and the MoE layer's FLOPs include its router.
awk '$1 == "moe" { moe_ms = $2; moe_gf = $3 } $1 == "dense" { dense_ms = $2; dense_gf = $3 }
     /^target:/ { ratio = $8 }
     END { r = dense_ms / moe_ms; ok = ratio > 0 && (r - ratio) ^ 2 <= (0.03 * ratio + 0.02) ^ 2 && moe_gf >= dense_gf
           exit ok ? 0 : 1 }' "$WORK/bench.log" \
  && pass "the ratio is dense_time / moe_time of the same run" || fail "ratio: $(cat "$WORK/bench.log")"
# --profile: where each layer's time goes, the MoE layer's grouped GEMMs among it.
timeout -k 5 120 "$NB" bench moe --hidden-size 64 --tokens 256 --reps 1 --profile >"$WORK/profile.log" 2>&1 \
  || fail "bench moe --profile: $(cat "$WORK/profile.log")"
grep -qE "^  op profile of the MoE layer's forward \+ backward " "$WORK/profile.log" \
  && grep -qE '^    moe_grouped_linear_forward +3 ' "$WORK/profile.log" \
  && grep -qE "^  op profile of the dense MLP's forward \+ backward " "$WORK/profile.log" \
  && pass "--profile: both layers op by op" || fail "profile: $(cat "$WORK/profile.log")"
# CUDA: a training step's tokens/s and MFU, or one error line (no GPU, no CUDA in this build, MoE kernels not built).
rc=0
timeout -k 5 120 "$NB" bench moe --device cuda --hidden-size 64 --tokens 256 --reps 1 --gpu-model tiny-moe \
  --micro-batch-size 1 --seq-length 128 --steps 1 >"$WORK/cuda.log" 2>"$WORK/cuda.err" || rc=$?
if [ "$rc" = 0 ]; then
  grep -qE '^  [0-9.]+ ms/step, [0-9]+ tokens/s, [0-9.]+ TFLOP/s over the active FLOPs, MFU [0-9.]+% of 989$' "$WORK/cuda.log" \
    && pass "cuda: a training step timed" || fail "cuda step: $(cat "$WORK/cuda.log")"
else
  [ "$(wc -l <"$WORK/cuda.err")" = 1 ] && grep -q '^nobubble: error: ' "$WORK/cuda.err" \
    && pass "cuda: not here, one line: $(cat "$WORK/cuda.err")" || fail "cuda: exit $rc, $(cat "$WORK/cuda.err")"
fi
expect_error 2 "reps" "$NB" bench moe --reps 0
expect_error 2 "tokens" "$NB" bench moe --tokens 0
expect_error 2 "multiple of 4" "$NB" bench moe --hidden-size 66
expect_error 2 "device" "$NB" bench moe --device tpu
finish
