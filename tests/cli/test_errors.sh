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
# A run length whose counts (iterations x microbatches x samples x tokens) overflow int64: one usage error naming
# the flag, from the command line and from a config (the executor's lists cost nothing per iteration: issue 37).
expect_error 2 "train-iters 9223372036854775807 is more than a run can count" "${T[@]}" --train-iters 9223372036854775807
expect_error 2 "train-iters 1000000000000000 is more than a run can count" "${T[@]}" --train-iters 1000000000000000 \
  --num-microbatches 8 --seq-length 2048 --micro-batch-size 1024
echo "train-iters = 9223372036854775807" >"$WORK/long.toml"
expect_error 2 "train-iters 9223372036854775807 is more than a run can count" \
  "$NB" train --data "$C" "${TINY_FLAGS[@]}" --config "$WORK/long.toml"
expect_error 2 "lr" "${T[@]}" --lr -1
expect_error 2 "lr-decay-style" "${T[@]}" --lr-decay-style sideways
# No --lr at all: the error names the missing flag, not a value the user never typed; train and reference alike.
NO_LR=(--data "$C" --model tiny --train-iters 2)
for command in train reference; do
  expect_error 2 "^nobubble: error: --lr is required (the peak learning rate, e.g. --lr 3e-4)$" "$NB" "$command" "${NO_LR[@]}"
done
expect_error 2 "^nobubble: error: unknown subcommand 'definitely-not-a-command' (one of: train, info, bench, schedule, reference, export, eval, generate, tokenize)$" \
  "$NB" definitely-not-a-command
expect_error 2 "^nobubble: error: no subcommand given (one of: train, info, bench, schedule, reference, export, eval, generate, tokenize)$" "$NB"
expect_error 2 "cannot read" "${T[@]}" --config "$WORK/missing.toml"
printf 'unknown-key = 3\n' >"$WORK/bad.toml"
expect_error 2 "unknown key 'unknown-key'" "${T[@]}" --config "$WORK/bad.toml"
printf 'lr = = =\n[[[\n' >"$WORK/garbage.toml"
expect_error 2 "garbage.toml" "${T[@]}" --config "$WORK/garbage.toml"
expect_error 2 "data is required" "$NB" train "${TINY_FLAGS[@]}"
expect_error 2 "9 pipeline stages but the model has only 4 layers" "$NB" info --model tiny --stages 9
# --pipeline-layout (blocks per stage; TINY_FLAGS has 2 blocks): one line for each way it can be wrong, in train,
# reference, info and bench schedules alike.
expect_error 2 "^nobubble: error: --pipeline-layout '1,0': stage 1 would be empty (every stage needs at least one block)$" \
  "${T[@]}" --stages 2 --pipeline-layout 1,0
expect_error 2 "^nobubble: error: --pipeline-layout '1,x': 'x' (stage 1) is not a positive integer (blocks per stage, e.g. 3,4,4,2)$" \
  "${T[@]}" --stages 2 --pipeline-layout 1,x
for bad in -1,3 1,,1 1.5,1 ""; do
  expect_error 2 "^nobubble: error: --pipeline-layout '$bad': .* is not a positive integer" "${T[@]}" --stages 2 \
    --pipeline-layout "$bad"
done
expect_error 2 "^nobubble: error: --pipeline-layout '1,1' names 2 stages but --stages is 1$" "${T[@]}" --pipeline-layout 1,1
expect_error 2 "^nobubble: error: --pipeline-layout '2,3' holds 5 blocks but the model has 2 layers$" "${T[@]}" \
  --stages 2 --pipeline-layout 2,3
expect_error 2 "^nobubble: error: --pipeline-layout '1,2' holds 3 blocks but the model has 2 layers$" "$NB" reference \
  --data "$C" "${TINY_FLAGS[@]}" --train-iters 2 --stages 2 --pipeline-layout 1,2
expect_error 2 "^nobubble: error: --pipeline-layout '3' names 1 stage but --stages is 2$" "$NB" info --model tiny \
  --stages 2 --pipeline-layout 3
expect_error 2 "^nobubble: error: --pipeline-layout '1,2' holds 3 blocks but the model has 4 layers$" "$NB" bench \
  schedules --model tiny --stages 2 --pipeline-layout 1,2

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
# The optimizers and the delay mitigations (every rank of a pipeline prints the same line: test_pipeline_faults).
expect_error 2 "unknown --optimizer 'sgd' (valid: adamw, muon, lion, adan, mars, soap)" "${T[@]}" --optimizer sgd
expect_error 2 "beta1 1.5 must be in \[0, 1)" "${T[@]}" --optimizer lion --beta1 1.5
expect_error 2 "beta2 -0.1 must be in \[0, 1)" "${T[@]}" --beta2 -0.1
expect_error 2 "beta3 1 must be in \[0, 1)" "${T[@]}" --optimizer adan --beta3 1
expect_error 2 "momentum 1 must be in \[0, 1)" "${T[@]}" --optimizer muon --momentum 1
expect_error 2 "eps 0 must be > 0" "${T[@]}" --eps 0
expect_error 2 "weight-decay -1 must be >= 0" "${T[@]}" --optimizer soap --weight-decay -1
expect_error 2 "ns-steps 0 must be >= 1" "${T[@]}" --optimizer muon --ns-steps 0
expect_error 2 "precondition-frequency 0 must be >= 1" "${T[@]}" --optimizer soap --precondition-frequency 0
expect_error 2 "momentum does not apply to --optimizer adamw" "${T[@]}" --momentum 0.9
expect_error 2 "adam-lr does not apply to --optimizer lion" "${T[@]}" --optimizer lion --adam-lr 1e-3
expect_error 2 "unknown --delay-fix 'magic' (valid: none, ef, taylor, predict, lookahead)" "${T[@]}" --delay-fix magic
expect_error 2 "delay-fix 'lookahead,predict': lookahead moves the forwards to its own look-ahead point" "${T[@]}" --schedule 2bw --delay-fix lookahead,predict
expect_error 2 "delay-fix 'ef,lookahead': ef and lookahead both correct the step; choose one" "${T[@]}" --schedule 2bw --delay-fix ef,lookahead
expect_error 2 "lookahead-gamma 1 must be in \[0, 1)" "${T[@]}" --schedule 2bw --delay-fix lookahead --lookahead-gamma 1
expect_error 2 "delay-fix 'ef,taylor': ef and taylor both correct the step; choose one" "${T[@]}" --schedule 2bw --delay-fix ef,taylor
expect_error 2 "delay-fix 'none,predict': none stands alone" "${T[@]}" --schedule 2bw --delay-fix none,predict
expect_error 2 "delay-fix 'predict,predict' names predict twice" "${T[@]}" --schedule 2bw --delay-fix predict,predict
expect_error 2 "delay-fix ef,predict applies to --schedule 2bw only; pipedream takes predict alone" "${T[@]}" --schedule pipedream --delay-fix ef,predict
expect_error 2 "predict-lambda -1 must be >= 0" "${T[@]}" --schedule 2bw --delay-fix predict --predict-lambda -1
expect_error 2 "delay-fix predict with --use-distributed-optimizer is not built yet" "${T[@]}" --schedule 2bw --delay-fix predict --data-parallel-size 2 --use-distributed-optimizer
expect_error 2 "delay-fix ef applies to --schedule 2bw and pipedream, not 1f1b: a synchronous schedule" "${T[@]}" --delay-fix ef
expect_error 2 "delay-fix taylor applies to --schedule 2bw only; pipedream takes predict alone" "${T[@]}" --schedule pipedream --delay-fix taylor
expect_error 2 "delay-fix lookahead applies to --schedule 2bw only; pipedream" "${T[@]}" --schedule pipedream --delay-fix lookahead
expect_error 2 "delay-fix predict applies to --schedule 2bw and pipedream, not gpipe" "${T[@]}" --schedule gpipe --delay-fix predict
expect_error 2 "taylor-lambda -1 must be >= 0" "${T[@]}" --schedule 2bw --delay-fix taylor --taylor-lambda -1
expect_error 2 "sync-start 2 + --sync-cooldown 1 exceed the 2 optimizer steps" "${T[@]}" --schedule 2bw --sync-start 2 --sync-cooldown 1
expect_error 2 "sync-start must be >= 0, got -1" "${T[@]}" --schedule 2bw --sync-start -1
expect_error 2 "is synchronous already" "${T[@]}" --schedule gpipe --sync-cooldown 1
expect_error 2 "sync-start 2 + --sync-cooldown 1 exceed" "$NB" reference --data "$C" "${TINY_FLAGS[@]}" --train-iters 2 --schedule 2bw --sync-start 2 --sync-cooldown 1
expect_error 2 "delay-fix ef applies to --schedule 2bw and pipedream, not 1f1b" "$NB" reference --data "$C" "${TINY_FLAGS[@]}" --train-iters 2 --delay-fix ef
# --list KIND: the names, one per line, exit 0; they are the names the flag's parser accepts (its error lists
# the same); an unknown KIND is one error line naming the kinds.
expect_list() {
  local kind=$1 want=$2 out rc=0
  out=$("$NB" --list "$kind" 2>&1) || rc=$?
  if [ "$rc" = 0 ] && [ "$(echo "$out" | paste -sd' ')" = "$want" ]; then
    pass "--list $kind: $want"
  else
    fail "--list $kind: expected exit 0 and '$want', got exit $rc and: $out"
  fi
}
expect_list optimizers "adamw muon lion adan mars soap"
expect_list schedules "gpipe 1f1b 2bw pipedream zb-h1 zb-v"
expect_list delay-fixes "none ef taylor predict lookahead"
expect_list lr-decay-styles "constant linear cosine wsd"
expect_list clip-scopes "global stage"
expect_list pipeline-cuts "cost params"
expect_list devices "cpu cuda"
expect_list kill-points "forward receive optimizer checkpoint manifest switch prune"
expect_list attention-backends "auto cudnn kernel"
expect_list models "tiny tiny-moe small smollm-135m smollm-360m moe-1b moe-10b"
for kind_flag in optimizers:--optimizer schedules:--schedule delay-fixes:--delay-fix lr-decay-styles:--lr-decay-style \
                 clip-scopes:--clip-scope pipeline-cuts:--pipeline-cut devices:--device kill-points:--kill-during; do
  kind=${kind_flag%%:*} flag=${kind_flag#*:}
  valid=$("$NB" --list "$kind" | paste -sd',' | sed 's/,/, /g')
  expect_error 2 "^nobubble: error: unknown $flag 'bogus' (valid: $valid)$" "${T[@]}" "$flag" bogus
done
expect_error 2 "^nobubble: error: unknown --list 'bogus' (valid: optimizers, schedules, delay-fixes, lr-decay-styles, clip-scopes, pipeline-cuts, recompute-granularities, recompute-methods, devices, models, kill-points, attention-backends)$" \
  "$NB" --list bogus
expect_error 2 "^nobubble: error: unknown --list '' (valid: " "$NB" --list ""
expect_error 2 "^nobubble: error: --list takes no subcommand (got 'schedule')$" \
  "$NB" --list optimizers schedule --schedule 1f1b --stages 2 --microbatches 2 --steps 1

# The run-shape flags (src/cli/run_shape_flags.cpp, model_flags.cpp): a value given is checked in every command that
# takes the flag, -1 included (a model override of -1 once meant "not given" and trained the preset).
R=("$NB" reference --data "$C" "${TINY_FLAGS[@]}" --train-iters 2)
I=("$NB" info --model tiny)
S=("$NB" bench schedules --model tiny --iters 2 --warmup-iters 1)
for flag in --vocab-size --hidden-size --ffn-hidden-size --num-layers --num-attention-heads --num-query-groups \
            --rope-theta --norm-epsilon; do
  for command in T R I S; do
    declare -n run=$command
    expect_error 2 "^nobubble: error: $flag must be positive, got -1$" "${run[@]}" "$flag" -1
  done
done
unset -n run
MOE=(--model tiny-moe --num-layers 2 --hidden-size 64 --ffn-hidden-size 96 --num-attention-heads 4
     --num-query-groups 2 --micro-batch-size 2 --seq-length 32)
for flag_says in "--num-experts:must be at least 1, got -1" "--moe-router-topk:must be in 1..8" \
                 "--moe-ffn-hidden-size:must be at least 1, got -1" \
                 "--moe-shared-expert-ffn-hidden-size:must be 0 (none) or more, got -1" \
                 "--moe-aux-loss-coeff:must be a finite number >= 0, got -1"; do
  flag=${flag_says%%:*} says=${flag_says#*:}
  expect_error 2 "^nobubble: error: $flag $says" "$NB" train --data "$C" --lr 1e-3 "${MOE[@]}" "$flag" -1
  expect_error 2 "^nobubble: error: $flag $says" "$NB" info "${MOE[@]}" "$flag" -1
done
expect_error 2 "^nobubble: error: --moe-router-bias-update-rate must be a finite number >= 0, got -1$" "$NB" train \
  --data "$C" --lr 1e-3 "${MOE[@]}" --moe-router-enable-expert-bias --moe-router-bias-update-rate -1
expect_error 2 "^nobubble: error: --moe-layers '': give all" "${T[@]}" --moe-layers ""
# The batch and pipeline counts, -1 in each command that takes them: one check (check_run_shape), one line.
ALL_SHAPE_FLAGS="--micro-batch-size --num-microbatches --seq-length --stages --data-parallel-size --virtual-stages"
declare -A SHAPE_FLAGS=(
  [T]="$ALL_SHAPE_FLAGS" [R]="$ALL_SHAPE_FLAGS" [I]="$ALL_SHAPE_FLAGS" [S]="$ALL_SHAPE_FLAGS"
  [SCHEDULE]="--num-microbatches --stages --data-parallel-size --virtual-stages"
  [OPS]="--micro-batch-size --seq-length"
  [GPU]="--micro-batch-size --seq-length"
  [MOE_BENCH]="--micro-batch-size --seq-length"
  [DP]="--micro-batch-size --num-microbatches --seq-length --stages")
SCHEDULE=("$NB" schedule --schedule 1f1b --stages 2 --microbatches 2)
OPS=("$NB" bench ops --steps 1 --gemm-size 8)
GPU=("$NB" bench gpu --steps 1)
MOE_BENCH=("$NB" bench moe --reps 1)
DP=("$NB" bench data-parallel --iters 2 --warmup-iters 1)
for command in "${!SHAPE_FLAGS[@]}"; do
  declare -n run=$command
  for flag in ${SHAPE_FLAGS[$command]}; do
    expect_error 2 "^nobubble: error: $flag must be positive, got -1$" "${run[@]}" "$flag" -1
  done
done
unset -n run
# --seed: a non-negative integer that fits 64 bits (-1 wrapped, 2^64 was clipped to 2^64 - 1, both silently).
SEED_RULE="--seed must be a non-negative integer of at most 18446744073709551615 (64 bits)"
for command in T R S; do
  declare -n run=$command
  for seed in -1 18446744073709551616 1.5 ""; do
    expect_error 2 "^nobubble: error: $SEED_RULE, got '$seed'$" \
      "${run[@]}" --seed "$seed"
  done
done
unset -n run
# The same through --config: a given value is checked there too.
config_error() {  # config_error PATTERN TOML-TEXT
  printf '%b' "$2" >"$WORK/shape.toml"
  expect_error 2 "$1" "$NB" train --config "$WORK/shape.toml" --data "$C" --model tiny --seq-length 32 \
    --micro-batch-size 2 --lr 1e-3 --train-iters 2
}
AT="^nobubble: error: --config '$WORK/shape.toml' line"
config_error "$AT 2: key 'seed': $SEED_RULE, got '-1'$" 'eval-iters = 1\nseed = -1\n'
config_error "$AT 1: key 'seed': expected an integer, got a float$" 'seed = 1.5\n'
config_error "$AT 1, column .*key 'seed'.* not representable in 64 bits" 'seed = 18446744073709551616\n'
for flag in vocab-size hidden-size ffn-hidden-size num-layers num-attention-heads num-query-groups rope-theta \
            norm-epsilon micro-batch-size num-microbatches seq-length stages data-parallel-size virtual-stages; do
  # The command line's own --seq-length and --micro-batch-size would win over the file: these two alone.
  if [ "$flag" = seq-length ] || [ "$flag" = micro-batch-size ]; then
    printf '%s = -1\n' "$flag" >"$WORK/shape.toml"
    expect_error 2 "^nobubble: error: --$flag must be positive, got -1$" "$NB" train --config "$WORK/shape.toml" \
      --data "$C" --model tiny --lr 1e-3 --train-iters 2
  else
    config_error "^nobubble: error: --$flag must be positive, got -1$" "$flag = -1\n"
  fi
done

# Under mpirun a bad --pipeline-layout is the same usage error on every rank: rank 0 prints it, all exit 2.
if [ "$HAVE_MPI" = 1 ]; then
  L=(--data "$C" "${TINY_FLAGS[@]}" --train-iters 2)
  expect_mpi_usage_error layout_empty 2 "^nobubble: error: --pipeline-layout '1,0': stage 1 would be empty" "${L[@]}" \
    --pipeline-layout 1,0
  expect_mpi_usage_error layout_word 2 "'x' (stage 0) is not a positive integer" "${L[@]}" --pipeline-layout x,1
  expect_mpi_usage_error layout_count 2 "--pipeline-layout '2' names 1 stage but --stages is 2$" "${L[@]}" \
    --pipeline-layout 2
  expect_mpi_usage_error layout_sum 2 "--pipeline-layout '1,2' holds 3 blocks but the model has 2 layers$" "${L[@]}" \
    --pipeline-layout 1,2
  # The run's shape under mpirun: the same line as in one process, on every rank, before `train` divides the ranks
  # by D (--data-parallel-size 0 was a SIGFPE with backtraces and no line).
  expect_mpi_usage_error dp_zero 2 "^nobubble: error: --data-parallel-size must be positive, got 0$" "${L[@]}" \
    --data-parallel-size 0
  expect_mpi_usage_error dp_negative 2 "^nobubble: error: --data-parallel-size must be positive, got -1$" "${L[@]}" \
    --data-parallel-size -1
  expect_mpi_usage_error dp_not_dividing 3 \
    "^nobubble: error: --data-parallel-size 2 does not divide the 3 MPI ranks (mpirun -np P\*D runs D replicas of P" \
    "${L[@]}" --data-parallel-size 2
  expect_mpi_usage_error stages_zero 2 "^nobubble: error: --stages must be positive, got 0$" "${L[@]}" --stages 0
  expect_mpi_usage_error layers_minus_one 2 "^nobubble: error: --num-layers must be positive, got -1$" "${L[@]}" \
    --num-layers -1
  expect_mpi_usage_error seed_minus_one 2 "^nobubble: error: --seed must be a non-negative integer .*, got '-1'$" \
    "${L[@]}" --seed -1
else
  echo "skip: nobubble is built without MPI or mpirun is missing: no mpirun checks"
fi
finish
