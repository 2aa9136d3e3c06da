#!/usr/bin/env bash
# The delay experiment: does a one-step gradient delay hurt, and does it depend on the optimizer?
#
# Trains one small model on the fortunes corpus with every optimizer (adamw muon lion adan mars soap) under
#   sync     --schedule 1f1b on 2 stages (no delay: the baseline)
#   2bw      --schedule 2bw on 2 stages (every gradient one step stale)
#   2bw_ef   the same with --delay-fix ef (update-level error feedback)
#   pd2      --schedule pipedream on 2 stages (stage s lags 1 - s steps)
#   pd4      --schedule pipedream on 4 stages (stage s lags 3 - s steps)
# with two seeds each (three for --preset large), all at equal tokens: every run sees the same number of
# sequences per optimizer step (pipedream takes one micro-batch as large as the others' global batch, as
# docs/DESIGN.md section 2 says a fair comparison must).
#
# First each optimizer's peak learning rate is tuned on `sync` alone (seed 1, a few values), then kept for
# the asynchronous runs, as the paper does. The runs use `nobubble reference`, the single-process oracle: it
# computes the same bits as `mpirun -np P nobubble train` (tests/cli/test_pipeline_equality.sh) and runs
# several at once on a small machine.
#
# Usage: run/experiments/delay_sweep.sh [--preset NAME] [--jobs N] [--work DIR] [--results DIR]
#   smoke      a minute: the machinery only, numbers meaningless (tests/cli/test_delay_sweep.sh runs it)
#   smoke-moe  seconds: the moe preset's machinery on the smoke shape (the same test runs it)
#   default    about an hour on 2 cores (76 runs of 300 steps)
#   long       about 25 minutes: does the gap close with training? The default model 4x longer (1200 steps),
#              adamw and muon at the default preset's tuned lrs, sync / 2bw / 2bw_ef, two seeds
#   moe        about half an hour: tiny-moe's MoE blocks (8 experts, top-2, a shared expert, every block but the
#              first, aux coefficient 1e-2) at the default model's width, each expert and the shared expert 128
#              wide so a token's active FFN matches the dense 384; adamw and muon, lr tuned on sync (three
#              values, four for muon), sync / 2bw / 2bw_ef, two seeds, 150 steps (17 runs)
#   moe-dense  about 15 minutes: the moe preset's dense control, the default model under the same grid and steps
#   large      several hours: a wider model, 600 steps, three seeds
#   mitigations  about 30 minutes: every mitigation side by side. The default model, 600 steps (half the long
#              preset's 1200, to fit the hour), adamw and muon at the default preset's tuned lrs, under sync,
#              2bw, 2bw_ef, 2bw_taylor (lambda tuned over three values on 2bw, seed 1, then kept), 2bw_ss
#              (--sync-start: the first 10% of the steps synchronous), 2bw_sc (--sync-cooldown: the last 10%)
#              and 2bw_ef_sc, two seeds (32 runs); the table adds each gap's share of 2bw's
#   momentum   about an hour: the sync-vs-2bw gap against the momentum coefficient, Muon's --momentum and
#              AdamW's --beta1 each in {0.8, 0.9, 0.95, 0.98}, the lr re-tuned on sync (three values) at each,
#              the default model and steps, three seeds (64 runs); the plot is the gap against the momentum
#   depth      about 37 minutes: the gap against pipeline depth, an 8-block model (the default one's blocks),
#              pipedream at P = 2, 4, 8 against 2bw at the same P and sync, adamw and muon at the default
#              preset's tuned lrs, 300 steps of 8 microbatches of 2 sequences, two seeds (28 runs)
#   beyond-ef  about 100 minutes: the mitigations beyond EF against it. The long preset's model and 1200 steps,
#              adamw and muon at the default preset's tuned lrs, under sync, 2bw, 2bw_ef, 2bw_predict (weight
#              prediction, --predict-lambda tuned over 0.5 1 1.5 2 3 on 2bw, seed 1), 2bw_lookahead (the momentum
#              look-ahead, --lookahead-gamma over 0.1 0.25 0.5 0.75 0.9) and 2bw_ef_predict (ef with predict at
#              predict's tuned lambda), three seeds; the table adds each gap's share of 2bw's
#   smoke-mitigations, smoke-momentum, smoke-depth, smoke-beyond-ef  seconds: those grids on the smoke shape
#              (tests/cli/test_delay_sweep_complete.sh runs them)
# Results: DIR/delay_sweep_<preset>.md (the table, the lr tuning), .csv and .png (validation-loss curves).
# Runs are resumable: a run that finished with the same flags is not repeated (delete --work to start over); a
# changed grid or preset reruns what it changes (for example the runs of an optimizer whose tuned lr moved).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
preset=default
jobs=2
work=""
results="$root/docs/results"
while [ $# -gt 0 ]; do
  case "$1" in
    --preset) preset=${2:?--preset needs a value}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
    --work) work=${2:?--work needs a value}; shift 2 ;;
    --results) results=${2:?--results needs a value}; shift 2 ;;
    *) echo "nobubble: error: delay_sweep.sh: unknown argument '$1' (see the usage at the top of the script)" >&2
       exit 2 ;;
  esac
done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "nobubble: error: --jobs must be a positive integer, got '$jobs'" >&2; exit 2; }
work=${work:-$root/build/delay_sweep_$preset}
NB=${NB:-$root/build/nobubble}
[ -x "$NB" ] || { echo "nobubble: error: $NB is missing: run make build first" >&2; exit 1; }

# The shapes the presets share: the smoke model, the default model, and tiny-moe's MoE blocks on each of them
# (tiny-moe's 8 experts, top-2, shared expert, every block but the first; its width overridden by the shape).
SMOKE_SHAPE=(--hidden-size 32 --ffn-hidden-size 64 --num-layers 4 --num-attention-heads 2 --num-query-groups 1
             --seq-length 32)
DEFAULT_SHAPE=(--hidden-size 128 --ffn-hidden-size 384 --num-layers 4 --num-attention-heads 4 --num-query-groups 2
               --seq-length 128)
moe_blocks() {  # the inner size of each expert and of the shared expert
  echo "--moe-ffn-hidden-size $1 --moe-shared-expert-ffn-hidden-size $1 --moe-aux-loss-coeff 1e-2"
}
with_layers() {  # the shape flags $2... with --num-layers set to $1 (the depth presets' 8 blocks)
  local layers=$1 prev="" flag
  shift
  for flag in "$@"; do
    if [ "$prev" = --num-layers ]; then echo -n "$layers "; else echo -n "$flag "; fi
    prev=$flag
  done
}

# Per preset: the model, the batch (global = MBS x M sequences of SEQ tokens), the steps and the seeds.
case "$preset" in
  smoke)
    MODEL=(--model tiny "${SMOKE_SHAPE[@]}")
    MBS=2; M=4; ITERS=12; WARMUP=2; EVAL_INTERVAL=6; EVAL_ITERS=1; SEEDS="1 2"; LR_POINTS=1 ;;
  smoke-moe)
    # shellcheck disable=SC2046
    MODEL=(--model tiny-moe "${SMOKE_SHAPE[@]}" $(moe_blocks 16))
    MBS=2; M=4; ITERS=12; WARMUP=2; EVAL_INTERVAL=6; EVAL_ITERS=1; SEEDS="1 2"; LR_POINTS=1 ;;
  default)
    MODEL=(--model tiny "${DEFAULT_SHAPE[@]}")
    MBS=4; M=4; ITERS=300; WARMUP=20; EVAL_INTERVAL=25; EVAL_ITERS=4; SEEDS="1 2"; LR_POINTS=3 ;;
  long|beyond-ef)
    MODEL=(--model tiny "${DEFAULT_SHAPE[@]}")
    MBS=4; M=4; ITERS=1200; WARMUP=20; EVAL_INTERVAL=100; EVAL_ITERS=4; SEEDS="1 2"; LR_POINTS=1
    # beyond-ef: a third seed, since Muon's differences between the rules sat within two seeds' spread
    [ "$preset" = beyond-ef ] && SEEDS="1 2 3" ;;
  moe|moe-dense)
    # Experts 128 wide: top-2 plus the shared expert is 3 x 128 = the dense model's 384 per token. moe-dense is
    # the control: the default (dense) model under the same grid and steps.
    if [ "$preset" = moe ]; then
      # shellcheck disable=SC2046
      MODEL=(--model tiny-moe "${DEFAULT_SHAPE[@]}" $(moe_blocks 128))
    else
      MODEL=(--model tiny "${DEFAULT_SHAPE[@]}")
    fi
    MBS=4; M=4; ITERS=150; WARMUP=15; EVAL_INTERVAL=25; EVAL_ITERS=4; SEEDS="1 2"; LR_POINTS=3 ;;
  large)
    MODEL=(--model tiny --num-layers 4 --seq-length 256)
    MBS=4; M=4; ITERS=600; WARMUP=30; EVAL_INTERVAL=50; EVAL_ITERS=8; SEEDS="1 2 3"; LR_POINTS=3 ;;
  mitigations)
    MODEL=(--model tiny "${DEFAULT_SHAPE[@]}")
    MBS=4; M=4; ITERS=600; WARMUP=20; EVAL_INTERVAL=50; EVAL_ITERS=4; SEEDS="1 2"; LR_POINTS=1 ;;
  momentum)  # three seeds: the differences between the coefficients' gaps are close to the seed spread
    MODEL=(--model tiny "${DEFAULT_SHAPE[@]}")
    MBS=4; M=4; ITERS=300; WARMUP=20; EVAL_INTERVAL=25; EVAL_ITERS=4; SEEDS="1 2 3"; LR_POINTS=3 ;;
  depth)
    # 8 microbatches of 2 sequences: 2bw needs at least P microbatches; the same 16 sequences a step as default.
    # shellcheck disable=SC2046
    MODEL=(--model tiny $(with_layers 8 "${DEFAULT_SHAPE[@]}"))
    MBS=2; M=8; ITERS=300; WARMUP=20; EVAL_INTERVAL=25; EVAL_ITERS=4; SEEDS="1 2"; LR_POINTS=1 ;;
  smoke-mitigations|smoke-momentum|smoke-beyond-ef)
    MODEL=(--model tiny "${SMOKE_SHAPE[@]}")
    MBS=2; M=4; ITERS=10; WARMUP=2; EVAL_INTERVAL=5; EVAL_ITERS=1; SEEDS="1 2"; LR_POINTS=1 ;;
  smoke-depth)
    # shellcheck disable=SC2046
    MODEL=(--model tiny $(with_layers 8 "${SMOKE_SHAPE[@]}"))
    MBS=1; M=8; ITERS=10; WARMUP=2; EVAL_INTERVAL=5; EVAL_ITERS=1; SEEDS="1 2"; LR_POINTS=1 ;;
  *) echo "nobubble: error: unknown --preset '$preset' (valid: smoke, smoke-moe, default, long, moe, moe-dense," \
          "large, mitigations, momentum, depth, beyond-ef, smoke-mitigations, smoke-momentum, smoke-depth," \
          "smoke-beyond-ef)" >&2
     exit 2 ;;
esac

# The learning rates tried on sync, per optimizer (around each one's usual range for a small LM; LR_POINTS=1
# keeps the middle one). SOAP's grid reaches further up: its best value was the largest of three at first. Muon's auxiliary AdamW (embedding, head, norm gains) keeps --adam-lr 3e-3 throughout.
declare -A LRS=(
  [adamw]="1e-3 3e-3 1e-2"
  [muon]="1e-2 2e-2 5e-2"
  [lion]="3e-4 1e-3 3e-3"
  [adan]="3e-3 1e-2 3e-2"
  [mars]="1e-3 3e-3 1e-2"
  [soap]="1e-3 3e-3 1e-2 3e-2"
)
declare -A EXTRA=([muon]="--adam-lr 3e-3")
OPTIMIZERS=$("$NB" --list optimizers | paste -sd' ')  # every optimizer nobubble has
SETTINGS="sync 2bw 2bw_ef pd2 pd4"
VIEW=curves  # what the summary adds to the table (summarize_delay_sweep.py --view)
case "$preset" in  # the paper's pair under the one-step delay only
  long|moe|moe-dense|smoke-moe) OPTIMIZERS="adamw muon"; SETTINGS="sync 2bw 2bw_ef" ;;
  mitigations|smoke-mitigations)
    OPTIMIZERS="adamw muon"; SETTINGS="sync 2bw 2bw_ef 2bw_taylor 2bw_ss 2bw_sc 2bw_ef_sc"; VIEW=mitigations ;;
  beyond-ef|smoke-beyond-ef)
    OPTIMIZERS="adamw muon"; SETTINGS="sync 2bw 2bw_ef 2bw_predict 2bw_lookahead 2bw_ef_predict"; VIEW=mitigations ;;
  momentum|smoke-momentum)  # a variant per coefficient: <optimizer>_b<beta1> or <optimizer>_m<momentum>
    OPTIMIZERS="adamw_b0.8 adamw_b0.9 adamw_b0.95 adamw_b0.98 muon_m0.8 muon_m0.9 muon_m0.95 muon_m0.98"
    SETTINGS="sync 2bw"; VIEW=momentum ;;
  depth|smoke-depth) OPTIMIZERS="adamw muon"; SETTINGS="sync 2bw 2bw4 2bw8 pd2 pd4 pd8"; VIEW=depth ;;
esac
for opt in $OPTIMIZERS; do  # a new optimizer needs its grid in LRS before it can be swept
  [ -n "${LRS[${opt%%_*}]:-}" ] \
    || { echo "nobubble: error: delay_sweep.sh: no lr grid for --optimizer ${opt%%_*} (add it to LRS)" >&2; exit 2; }
done
# The coefficients of the tuned mitigations, each tried on its setting with seed 1 where a preset runs it (the
# best is kept, in chosen_<rule>.txt): the rule, its flag and its grid. 2bw_ef_predict takes predict's choice.
declare -A TUNED_FLAG=([taylor]=--taylor-lambda [predict]=--predict-lambda [lookahead]=--lookahead-gamma)
# predict's and lookahead's grids were widened once (beyond-ef: predict's best was 1.5, the top of 0.5 1 1.5, for
# both optimizers; lookahead gained 0.1 below 0.25 after a first look at 300 steps where 0.5 did worse than none).
declare -A TUNED_GRID=([taylor]="0.01 0.04 0.16" [predict]="0.5 1 1.5 2 3" [lookahead]="0.1 0.25 0.5 0.75 0.9")
# The tuned rule of a setting (2bw_taylor: taylor, 2bw_ef_predict: predict), or nothing.
rule_of() {
  case "$1" in
    2bw_taylor) echo taylor ;;
    2bw_predict|2bw_ef_predict) echo predict ;;
    2bw_lookahead) echo lookahead ;;
  esac
}
if [[ "$preset" =~ ^(long|mitigations|depth|beyond-ef)$ ]]; then
  # no tuning: the lrs the default preset chose (docs/results/delay_sweep_default.md)
  LRS[adamw]=3e-3
  LRS[muon]=2e-2
fi
if [ "$preset" = moe ] || [ "$preset" = moe-dense ]; then
  LRS[muon]="1e-2 2e-2 5e-2 1e-1"  # on moe Muon's best was the largest of three at first (5e-2)
fi

mkdir -p "$work" "$results"
corpus="$work/fortunes.txt"
[ -s "$corpus" ] || "$root/run/prepare_fortunes.sh" "$corpus" >/dev/null

COMMON=(--data "$corpus" "${MODEL[@]}" --untie-embeddings-and-output-weights --train-iters "$ITERS"
        --lr-warmup-iters "$WARMUP" --lr-decay-style cosine --clip-grad 1.0 --eval-interval "$EVAL_INTERVAL"
        --eval-iters "$EVAL_ITERS" --log-interval "$ITERS")

# The schedule flags of a setting. Equal tokens per optimizer step: MBS x M sequences everywhere. 2bw's
# settings run on 2 stages unless the name ends in the depth (2bw4, 2bw8); 10% of the steps is --sync-start's
# and --sync-cooldown's K (2bw_ss, 2bw_sc); 2bw_taylor's lambda is the optimizer's (taylor_flag).
setting_flags() {
  local microbatches="--micro-batch-size $MBS --num-microbatches $M" tenth=$(( (ITERS + 9) / 10 ))
  case "$1" in
    sync)      echo "--schedule 1f1b --stages 2 $microbatches" ;;
    2bw)       echo "--schedule 2bw --stages 2 $microbatches" ;;
    2bw[0-9]*) echo "--schedule 2bw --stages ${1#2bw} $microbatches" ;;
    2bw_ef)    echo "--schedule 2bw --stages 2 $microbatches --delay-fix ef" ;;
    2bw_taylor) echo "--schedule 2bw --stages 2 $microbatches --delay-fix taylor" ;;
    2bw_predict) echo "--schedule 2bw --stages 2 $microbatches --delay-fix predict" ;;
    2bw_lookahead) echo "--schedule 2bw --stages 2 $microbatches --delay-fix lookahead" ;;
    2bw_ef_predict) echo "--schedule 2bw --stages 2 $microbatches --delay-fix ef,predict" ;;
    2bw_ss)    echo "--schedule 2bw --stages 2 $microbatches --sync-start $tenth" ;;
    2bw_sc)    echo "--schedule 2bw --stages 2 $microbatches --sync-cooldown $tenth" ;;
    2bw_ef_sc) echo "--schedule 2bw --stages 2 $microbatches --delay-fix ef --sync-cooldown $tenth" ;;
    pd[0-9]*)  echo "--schedule pipedream --stages ${1#pd} --micro-batch-size $((MBS * M)) --num-microbatches 1" ;;
    *) echo "nobubble: error: delay_sweep.sh: no flags for setting '$1'" >&2; exit 2 ;;
  esac
}

# A variant is an optimizer, or an optimizer with one coefficient set (the momentum preset): adamw_b0.8 is
# AdamW with --beta1 0.8, muon_m0.8 Muon with --momentum 0.8 (its auxiliary AdamW keeps its own betas).
optimizer_of() { echo "${1%%_*}"; }
variant_flags() {
  local opt coefficient
  opt=$(optimizer_of "$1")
  coefficient=${1#"$opt"}
  case "$coefficient" in
    "")  echo "${EXTRA[$opt]:-}" ;;
    _b*) echo "${EXTRA[$opt]:-} --beta1 ${coefficient#_b}" ;;
    _m*) echo "${EXTRA[$opt]:-} --momentum ${coefficient#_m}" ;;
  esac
}
# The flags of one run: variant, lr, seed, setting, and a tuned setting's coefficient (its rule's flag).
run_flags() {
  local variant=$1 lr=$2 seed=$3 setting=$4 value=${5:-} rule
  rule=$(rule_of "$setting")
  echo "--optimizer $(optimizer_of "$variant") --lr $lr --min-lr $(min_lr "$lr") $(variant_flags "$variant")" \
       "--seed $seed $(setting_flags "$setting")${value:+ ${TUNED_FLAG[$rule]} $value}"
}

middle() { local a=($1); echo "${a[$(( ${#a[@]} / 2 ))]}"; }
lrs_of() {
  local grid=${LRS[$1]:-${LRS[$(optimizer_of "$1")]}}
  if [ "$LR_POINTS" = 1 ]; then middle "$grid"; else echo "$grid"; fi
}
min_lr() { python3 -c "print('%g' % ($1 / 10))"; }

# One run: NAME then the flags. Its log and metrics land in $work; a run that finished with the same flags
# (NAME.flags) is not repeated.
run_one() {
  local name=$1; shift
  if [ -f "$work/$name.log" ] && grep -q '^final weights sha256' "$work/$name.log" \
     && [ "$(cat "$work/$name.flags" 2>/dev/null)" = "$*" ]; then return 0; fi
  rm -f "$work/$name.jsonl"
  echo "$*" >"$work/$name.flags"
  if OPENBLAS_NUM_THREADS=1 "$NB" reference "${COMMON[@]}" "$@" --metrics "$work/$name.jsonl" \
       >"$work/$name.log" 2>&1; then
    echo "  done $name: $(grep '^final val_loss' "$work/$name.log")"
  else
    echo "  FAILED $name (diverged or error): $(tail -n 1 "$work/$name.log")"
  fi
}

# Runs every line of a job list (NAME FLAGS...), $jobs at a time.
run_all() {
  local list=$1 pids=() line
  while read -r line; do
    [ -n "$line" ] || continue
    # shellcheck disable=SC2086
    run_one $line &
    pids+=($!)
    if [ "${#pids[@]}" -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done <"$list"
  wait
}

start=$SECONDS
echo "delay sweep, preset $preset: work in $work, $jobs runs at a time"

# 1. The learning rate of each optimizer, on sync with seed 1.
: >"$work/jobs_lr.txt"
for opt in $OPTIMIZERS; do
  for lr in $(lrs_of "$opt"); do
    echo "lr_${opt}_${lr} $(run_flags "$opt" "$lr" 1 sync)" >>"$work/jobs_lr.txt"
  done
done
echo "1. tuning the learning rate on sync: $(wc -l <"$work/jobs_lr.txt") runs"
run_all "$work/jobs_lr.txt"

# The value among $2 (a list) whose tuning run $1_<value> ended with the lowest validation loss (the middle one
# where none finished).
best_of() {
  local prefix=$1 values=$2 best="" best_loss="" value loss
  for value in $values; do
    loss=$(grep '^final val_loss' "$work/${prefix}_${value}.log" 2>/dev/null | awk '{print $3}')
    [ -n "$loss" ] || continue
    if [ -z "$best" ] || python3 -c "import sys; sys.exit(0 if $loss < $best_loss else 1)"; then
      best=$value; best_loss=$loss
    fi
  done
  echo "${best:-$(middle "$values")}"
}
: >"$work/chosen_lr.txt"
for opt in $OPTIMIZERS; do echo "$opt $(best_of "lr_$opt" "$(lrs_of "$opt")")" >>"$work/chosen_lr.txt"; done
chosen_lr() { awk -v o="$1" '$1 == o {print $2}' "$work/chosen_lr.txt"; }

# 1b. Each tuned rule the preset runs (2bw_taylor, 2bw_predict, 2bw_lookahead): its coefficient per optimizer,
# on its setting with seed 1 at the tuned lr (runs <rule>_<optimizer>_<value>).
TUNED_RULES=""
for rule in taylor predict lookahead; do
  : >"$work/chosen_$rule.txt"
  [[ " $SETTINGS " == *" 2bw_$rule "* ]] || continue
  TUNED_RULES+="$rule "
  : >"$work/jobs_$rule.txt"
  for opt in $OPTIMIZERS; do
    for value in ${TUNED_GRID[$rule]}; do
      echo "${rule}_${opt}_${value} $(run_flags "$opt" "$(chosen_lr "$opt")" 1 "2bw_$rule" "$value")" \
        >>"$work/jobs_$rule.txt"
    done
  done
  echo "1b. tuning $rule's ${TUNED_FLAG[$rule]} on 2bw: $(wc -l <"$work/jobs_$rule.txt") runs"
  run_all "$work/jobs_$rule.txt"
  for opt in $OPTIMIZERS; do
    echo "$opt $(best_of "${rule}_$opt" "${TUNED_GRID[$rule]}")" >>"$work/chosen_$rule.txt"
  done
done
chosen_value() { awk -v o="$2" '$1 == o {print $2}' "$work/chosen_$1.txt"; }  # RULE OPTIMIZER

# 2. Every optimizer at its tuned lr under every setting and seed. A tuning run is the seed-1 run of its
# setting (sync at the chosen lr, 2bw_taylor at the chosen lambda): it is copied, not repeated.
tuning_run_of() {  # the tuning run that is (variant, setting) with seed 1, or nothing
  case "$2" in
    sync) echo "lr_$1_$(chosen_lr "$1")" ;;
    2bw_taylor|2bw_predict|2bw_lookahead) echo "$(rule_of "$2")_$1_$(chosen_value "$(rule_of "$2")" "$1")" ;;
  esac
}
: >"$work/jobs_main.txt"
for opt in $OPTIMIZERS; do
  lr=$(chosen_lr "$opt")
  for setting in $SETTINGS; do
    lambda=""
    rule=$(rule_of "$setting")
    [ -n "$rule" ] && lambda=$(chosen_value "$rule" "$opt")
    for seed in $SEEDS; do
      name="${opt}_${setting}_s${seed}"
      tuned=$(tuning_run_of "$opt" "$setting")
      if [ "$seed" = 1 ] && [ -n "$tuned" ] && [ -f "$work/$tuned.jsonl" ]; then
        for ext in log jsonl flags; do cp "$work/$tuned.$ext" "$work/$name.$ext" 2>/dev/null || true; done
        continue
      fi
      echo "$name $(run_flags "$opt" "$lr" "$seed" "$setting" "$lambda")" >>"$work/jobs_main.txt"
    done
  done
done
echo "2. the sweep at the tuned learning rates: $(wc -l <"$work/jobs_main.txt") runs"
run_all "$work/jobs_main.txt"

# 3. The table and the plot.
/usr/bin/python3 "$here/summarize_delay_sweep.py" --work "$work" --preset "$preset" --out "$results" \
  --optimizers $OPTIMIZERS --settings $SETTINGS --seeds $SEEDS --view "$VIEW" \
  --lrs "$(for o in $OPTIMIZERS; do echo "$o=$(lrs_of "$o" | tr ' ' ,)"; done | tr '\n' ' ')" \
  --tuned $(for r in $TUNED_RULES; do echo "$r=$(echo "${TUNED_GRID[$r]}" | tr ' ' ,)"; done) \
  --config "$(printf '%s ' "${MODEL[@]}") global batch $((MBS * M)) x seq, $ITERS steps, warm-up $WARMUP, cosine to lr/10, clip 1.0" \
  --minutes "$(( (SECONDS - start + 59) / 60 ))"
