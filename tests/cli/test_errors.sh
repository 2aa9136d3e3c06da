#!/usr/bin/env bash
# Bad input gets one line `nobubble: error: ...` naming the problem; exit 2 for usage, 1 for runtime.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
C="$WORK/corpus.txt"
T=("$NB" train --data "$C" "${TINY_FLAGS[@]}" --train-iters 2)

expect_error 2 "not expected" "$NB" train --bogus-flag 1
expect_error 2 "unknown preset 'nope'" "${T[@]}" --model nope
expect_error 2 "hidden-size 100 is not divisible by --num-attention-heads 3" "${T[@]}" --hidden-size 100 --num-attention-heads 3
expect_error 2 "num-query-groups 3 does not divide --num-attention-heads 4" "${T[@]}" --num-query-groups 3
expect_error 2 "micro-batch-size must be positive, got 0" "${T[@]}" --micro-batch-size 0
expect_error 2 "seq-length must be positive, got -5" "${T[@]}" --seq-length -5
expect_error 2 "num-layers must be positive, got 0" "${T[@]}" --num-layers 0
expect_error 2 "train-iters must be positive, got 0" "${T[@]}" --train-iters 0
expect_error 2 "lr" "${T[@]}" --lr -1
expect_error 2 "lr-decay-style" "${T[@]}" --lr-decay-style sideways
expect_error 2 "cannot read" "${T[@]}" --config "$WORK/missing.toml"
printf 'unknown-key = 3\n' >"$WORK/bad.toml"
expect_error 2 "unknown key 'unknown-key'" "${T[@]}" --config "$WORK/bad.toml"
printf 'lr = = =\n[[[\n' >"$WORK/garbage.toml"
expect_error 2 "garbage.toml" "${T[@]}" --config "$WORK/garbage.toml"
expect_error 2 "data is required" "$NB" train "${TINY_FLAGS[@]}"
expect_error 2 "9 pipeline stages but the model has only 4 layers" "$NB" info --model tiny --stages 9

# Data files (runtime errors, exit 1): missing, empty, truncated, wrong magic, sequence longer than the data.
expect_error 1 "$WORK/missing.txt" "$NB" train --data "$WORK/missing.txt" "${TINY_FLAGS[@]}" --train-iters 1
: >"$WORK/empty.txt"
expect_error 1 "empty" "$NB" train --data "$WORK/empty.txt" "${TINY_FLAGS[@]}" --train-iters 1
printf 'abc' >"$WORK/short.bin"
expect_error 1 "truncated" "$NB" train --data "$WORK/short.bin" "${TINY_FLAGS[@]}" --train-iters 1
head -c 2048 /dev/zero >"$WORK/zeros.bin"
expect_error 1 "magic" "$NB" train --data "$WORK/zeros.bin" "${TINY_FLAGS[@]}" --train-iters 1
expect_error 1 "no file matches" "$NB" train --data "$WORK/nothing/*.bin" "${TINY_FLAGS[@]}" --train-iters 1
printf 'just a few bytes\n' >"$WORK/few.txt"
expect_error 1 "few.txt" "$NB" train --data "$WORK/few.txt" "${TINY_FLAGS[@]}" --train-iters 1
expect_error 1 "metrics" "${T[@]}" --metrics "$WORK/no/such/dir/m.jsonl"

# --device cuda where no GPU is usable: one line naming the CUDA error (or the missing CUDA build), exit 1.
# On a machine with a GPU this path cannot be reached; the check is then reported as not applicable.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "n/a: a GPU is present, so --device cuda cannot fail for want of one"
else
  expect_error 1 "device cuda" "${T[@]}" --device cuda
fi
expect_error 2 "device 'tpu'" "${T[@]}" --device tpu
finish
