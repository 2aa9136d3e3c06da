#!/usr/bin/env bash
# A throughput and loss comparison of schedules on one model, data and seed: the grid that
# run/slurm/compare.sbatch runs inside an allocation, here under plain mpirun (or any launcher).
#
# Two kinds of grid point, one CSV row each (OUT/grid.csv, columns below):
#   bench  `nobubble bench schedules` for one schedule x stages P x microbatches m (x replicas D: P x D ranks,
#          each stage's gradient summed over its D replicas, and the share of time waiting on that sum): tokens/s, measured bubble,
#          peak activation memory, with the analytic bubble of a flushing schedule (P-1)/(m+P-1) and `nobubble
#          schedule`'s simulated one beside it (forward 1, backward 2, SIM_STEPS iterations: the bubble of the
#          schedule's shape, not of this machine)
#   train  a real `nobubble train` run (schedule:optimizer[:delay-fix] at TRAIN_STAGES x TRAIN_MICROBATCHES, with
#          TRAIN_REPLICAS pipeline replicas) with
#          metrics and trace: median tokens/s and bubble over its steps, final validation loss, final weights hash
# then run/report.py turns OUT into charts and OUT/report/index.html, and prints the table.
#
# Usage: run/compare.sh [--grid main|cpu|smoke] [--out DIR]
#   main   `make run`: the delay-sweep default model on fortunes, 1f1b against 2bw (Muon, ef) on 2 ranks, 300
#          steps each (about 90 s on 2 cores); train points only
#   cpu    the CPU grid of docs/cluster.md, "Comparing schedules": gpipe 1f1b zb-h1 zb-v 2bw pipedream x P in {2, 4} x
#          m in {P, 2P} (zb-v at P = 4 skipped: its 8 parts need 8 layers, the model has 4)
#          through bench schedules, and AdamW / Muon under 1f1b, 2bw and 2bw + ef as train points (about 5 minutes)
#   smoke  seconds: the machinery only (tests/cli/test_compare.sh, tests/slurm/test_slurm.sh)
# Every knob below can be set in the environment to change a grid (for example BENCH_SCHEDULES="1f1b 2bw").
# Grid points that cannot run are skipped with a line saying why (an unknown schedule, 2bw with m < P: whatever
# `nobubble schedule` refuses), and the grid goes on; a point that fails is recorded as failed and the grid goes on.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
grid=main
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --grid) grid=${2:?--grid needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    *) echo "nobubble: error: compare.sh: unknown argument '$1' (see the usage at the top of the script)" >&2
       exit 2 ;;
  esac
done

# ---- the grids ----
# The delay sweep's default model (docs/results/delay_sweep_default.md) and the smoke model.
DEFAULT_SHAPE="--model tiny --hidden-size 128 --ffn-hidden-size 384 --num-layers 4 --num-attention-heads 4 --num-query-groups 2 --seq-length 128 --untie-embeddings-and-output-weights"
SMOKE_SHAPE="--model tiny --hidden-size 32 --ffn-hidden-size 64 --num-layers 4 --num-attention-heads 2 --num-query-groups 1 --seq-length 32"
case "$grid" in
  main)
    d_model=$DEFAULT_SHAPE; d_mbs=4
    d_bench_schedules=""; d_bench_stages=""; d_bench_microbatches=""; d_bench_args=""
    d_train_runs="1f1b:muon 2bw:muon:ef"; d_train_stages=2; d_train_microbatches=4
    d_train_args="--train-iters 300 --lr-warmup-iters 20 --eval-interval 50 --eval-iters 4 --log-interval 50" ;;
  cpu)
    d_model=$DEFAULT_SHAPE; d_mbs=4
    d_bench_schedules="gpipe 1f1b zb-h1 zb-v 2bw pipedream"; d_bench_stages="2 4"; d_bench_microbatches="P 2P"
    d_bench_args="--iters 12 --warmup-iters 2"
    d_train_runs="1f1b:adamw 2bw:adamw 2bw:adamw:ef 1f1b:muon 2bw:muon 2bw:muon:ef"; d_train_stages=2
    d_train_microbatches=4
    d_train_args="--train-iters 300 --lr-warmup-iters 20 --eval-interval 50 --eval-iters 4 --log-interval 50" ;;
  smoke)
    d_model=$SMOKE_SHAPE; d_mbs=2
    d_bench_schedules="1f1b 2bw"; d_bench_stages="2"; d_bench_microbatches="P"
    d_bench_args="--iters 3 --warmup-iters 1"
    d_train_runs="1f1b:adamw 2bw:muon:ef"; d_train_stages=2; d_train_microbatches=2
    d_train_args="--train-iters 12 --lr-warmup-iters 2 --eval-interval 6 --eval-iters 1 --log-interval 6" ;;
  *) echo "nobubble: error: compare.sh: unknown --grid '$grid' (valid: main, cpu, smoke)" >&2; exit 2 ;;
esac

# ---- knobs (environment overrides the grid's value) ----
NOBUBBLE=${NOBUBBLE:-$root/build/nobubble}              # the program
LAUNCH=${LAUNCH:-mpirun --oversubscribe -np}            # the launcher; the rank count is appended (srun: "srun --mpi=pmix -n")
DATA=${DATA:-}                                          # the corpus (default: fortunes, prepared under OUT)
MODEL_ARGS=${MODEL_ARGS:-$d_model}                      # the model, the same at every point
MICRO_BATCH_SIZE=${MICRO_BATCH_SIZE:-$d_mbs}            # sequences per microbatch (pipedream: x m, as one batch)
SEED=${SEED:-1234}                                      # weights, data order: the same at every point
BENCH_SCHEDULES=${BENCH_SCHEDULES-$d_bench_schedules}   # bench points: schedules ...
BENCH_STAGES=${BENCH_STAGES-$d_bench_stages}            # ... x stages P ...
BENCH_MICROBATCHES=${BENCH_MICROBATCHES-$d_bench_microbatches}  # ... x microbatches m: a number, P or kP (2P: twice P) ...
BENCH_REPLICAS=${BENCH_REPLICAS:-1}                     # ... x replicas D (--data-parallel-size; P x D ranks)
BENCH_ARGS=${BENCH_ARGS-$d_bench_args}                  # more flags of bench schedules
TRAIN_RUNS=${TRAIN_RUNS-$d_train_runs}                  # train points: schedule:optimizer[:delay-fix] ...
TRAIN_STAGES=${TRAIN_STAGES:-$d_train_stages}           # ... all at these P ...
TRAIN_MICROBATCHES=${TRAIN_MICROBATCHES:-$d_train_microbatches}  # ... and m ...
TRAIN_REPLICAS=${TRAIN_REPLICAS:-1}                     # ... and D replicas (P x D ranks)
TRAIN_ARGS=${TRAIN_ARGS-$d_train_args}                  # more flags of nobubble train
LR_adamw=${LR_adamw:-3e-3}                              # peak lrs: the delay sweep's sync-tuned values
LR_muon=${LR_muon:-2e-2}
DEVICE=${DEVICE:-cpu}                                   # cpu, or cuda (one GPU per rank)
MAX_RANKS=${MAX_RANKS:-}                                # points needing more ranks are skipped (compare.sbatch: the allocation's)
POINT_TIMEOUT_S=${POINT_TIMEOUT_S:-1800}                # the most one point may take
SIM_STEPS=${SIM_STEPS:-12}                              # iterations nobubble schedule simulates (one fill and drain)
PYTHON=${PYTHON:-/usr/bin/python3}                      # Debian's, with numpy and matplotlib (the report)
out=${out:-$root/build/runs/compare-$grid}

[ -x "$NOBUBBLE" ] || { echo "nobubble: error: NOBUBBLE=$NOBUBBLE is not an executable (run make build first)" >&2; exit 2; }
mkdir -p "$out/bench" "$out/train" || { echo "nobubble: error: cannot create --out $out" >&2; exit 2; }
if [ -z "$DATA" ]; then
  DATA="$out/fortunes.txt"
  [ -s "$DATA" ] || "$root/run/prepare_fortunes.sh" "$DATA" >/dev/null || exit 2
fi
[ -r "$DATA" ] || { echo "nobubble: error: DATA=$DATA cannot be read" >&2; exit 2; }
# Open MPI refuses root without these; waiting ranks yield their core (more ranks than cores here).
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
read -ra launch <<<"$LAUNCH"
read -ra model <<<"$MODEL_ARGS"

csv="$out/grid.csv"
echo "kind,name,schedule,stages,replicas,microbatches,micro_batch_size,optimizer,delay_fix,status,reason,tokens_per_s,ms_per_iter,bubble_pct,bubble_analytic_pct,bubble_simulated_pct,peak_act_mib,tokens_per_step,final_val_loss,weights_sha256,metrics,trace,replica_wait_pct" >"$csv"
say() { echo "compare: $*"; }
start=$SECONDS
failed=0
say "grid $grid into $out (launcher: $LAUNCH <ranks: P x D>)"

# microbatches_at SPEC P: a number stays, P is P, kP is k x P.
microbatches_at() {
  case "$1" in
    P) echo "$2" ;;
    *P) echo $(( ${1%P} * $2 )) ;;
    *) echo "$1" ;;
  esac
}
# simulated SCHEDULE P M: `nobubble schedule`'s bubble in percent over SIM_STEPS iterations (2bw and pipedream
# fill and drain once in them, 1f1b and gpipe every iteration); fails with its error line when the point is
# not a valid schedule (unknown name, 2bw with m < P, ...), which is how a point is checked before it runs.
# runnable SCHEDULE P M: `nobubble schedule`'s bubble in percent, or why the point cannot run (its P x d ranks).
runnable() {
  local ranks=$(($2 * d))
  if [ -n "$MAX_RANKS" ] && [ "$ranks" -gt "$MAX_RANKS" ]; then echo "needs $ranks ranks but the allocation has $MAX_RANKS"; return 1; fi
  local layers
  layers=$(sed -n 's/.*--num-layers \([0-9]*\).*/\1/p' <<<"${model[*]}")
  if [ "$1" = zb-v ] && [ -n "$layers" ] && [ $((2 * $2)) -gt "$layers" ]; then
    echo "zb-v cuts $((2 * $2)) parts, a block each, and the model has $layers layers"; return 1
  fi
  simulated "$@"
}
simulated() {
  local text
  text=$("$NOBUBBLE" schedule --schedule "$1" --stages "$2" --microbatches "$3" --steps "$SIM_STEPS" 2>&1) || { echo "${text##*$'\n'}"; return 1; }
  sed -n 's/^bubble fraction: \([0-9.]*\)%.*/\1/p' <<<"$text"
}
# analytic SCHEDULE P M: the formula at backward = 2 x forward: (p-1)/(m+p-1) for 1f1b (and as a yardstick for the
# rest); zb-h1 with B = W = F: (p-1)/(3m+p-1) (Qi et al.: idle (p-1)(F+B-W) per step against busy m(F+B+W)); zb-v
# with B = W = F: (p-1)/(6m+p-1) (idle (p-1)F/2, the least of a flushing schedule, reached for m >= 2p-1).
analytic() {
  awk -v s="$1" -v p="$2" -v m="$3" 'BEGIN { d = s == "zb-h1" ? 3 * m : s == "zb-v" ? 6 * m : m
    printf "%.2f", 100 * (p - 1) / (d + p - 1) }'
}
# row KIND NAME SCHEDULE P M OPT FIX STATUS REASON [FIGURES...]: one CSV line in the header's column order (the
# point's replicas: $d), the columns it does not give left empty (no field holds a comma: a reason has its commas
# replaced).
columns=$(head -n 1 "$csv" | tr ',' '\n' | wc -l)
row() {
  local fields=("$1" "$2" "$3" "$4" "$d" "$5" "$MICRO_BATCH_SIZE" "$6" "$7" "$8" "$(tr ',\n' '; ' <<<"$9" | sed 's/ *$//')" "${@:10}")
  while [ "${#fields[@]}" -lt "$columns" ]; do fields+=(""); done
  local IFS=,
  echo "${fields[*]}" >>"$csv"
}
# skip KIND NAME SCHEDULE P M OPT FIX REASON
skip() {
  say "skip $2: $8"
  row "$1" "$2" "$3" "$4" "$5" "$6" "$7" skipped "$8"
}
# point_failed KIND NAME SCHEDULE P M OPT FIX LOG: the row and the line of a point that failed, its reason the
# log's first error line (else its last line).
point_failed() {
  local reason
  reason=$(grep -m1 '^nobubble: error' "$8" || tail -n 1 "$8")
  row "$1" "$2" "$3" "$4" "$5" "$6" "$7" failed "$reason"
  say "FAILED $1 $2: $reason"
  failed=$((failed + 1))
}
# the flags that give pipedream the same sequences per optimizer step as the others (docs/DESIGN.md section 2)
batch_flags() {
  if [ "$1" = pipedream ]; then echo "--micro-batch-size $((MICRO_BATCH_SIZE * $2)) --num-microbatches 1"
  else echo "--micro-batch-size $MICRO_BATCH_SIZE --num-microbatches $2"; fi
}

# replicas_suffix: a point's name ends in _dD when it has D > 1 replicas.
replicas_suffix() { [ "$d" = 1 ] || echo "_d$d"; }

# ---- bench points ----
for schedule in $BENCH_SCHEDULES; do
  for p in $BENCH_STAGES; do
    for spec in $BENCH_MICROBATCHES; do
      for d in $BENCH_REPLICAS; do
        m=$(microbatches_at "$spec" "$p")
        name="${schedule}_p${p}_m${m}$(replicas_suffix)"
        sim=$(runnable "$schedule" "$p" "$m") || { skip bench "$name" "$schedule" "$p" "$m" "" "" "$sim"; continue; }
        log="$out/bench/$name.log"
        # bench schedules runs pipedream as one microbatch of m x B itself: it takes m and B as for the others
        # shellcheck disable=SC2086
        if timeout -k 10 "$POINT_TIMEOUT_S" "${launch[@]}" "$((p * d))" "$NOBUBBLE" bench schedules --device "$DEVICE" \
             "${model[@]}" --data "$DATA" --seed "$SEED" --stages "$p" --data-parallel-size "$d" \
             --micro-batch-size "$MICRO_BATCH_SIZE" --num-microbatches "$m" --schedules "$schedule" $BENCH_ARGS \
             --out "$out/bench/$name" >"$log" 2>&1; then
          # schedule,num_microbatches,micro_batch_size,tokens_per_s,ms_per_iter,bubble_pct,act_mib_stage0..,
          # final_loss,sim_bubble_pct,replica_wait_pct
          IFS=, read -ra b < <(sed -n 2p "$out/bench/$name.csv")
          peak=$(printf '%s\n' "${b[@]:6:$p}" | sort -g | tail -n 1)
          ideal=$(analytic "$schedule" "$p" "$m")
          row bench "$name" "$schedule" "$p" "$m" "" "" ok "" "${b[3]}" "${b[4]}" "${b[5]}" "$ideal" "$sim" "$peak" \
            "" "" "" "" "" "${b[-1]}"
          say "bench $name: ${b[3]} tokens/s, bubble ${b[5]}% (analytic $ideal%, simulated $sim%)$([ "$d" = 1 ] \
            || echo ", replica wait ${b[-1]}%")"
        else
          point_failed bench "$name" "$schedule" "$p" "$m" "" "" "$log"
        fi
      done
    done
  done
done

# ---- train points ----
p=$TRAIN_STAGES
m=$TRAIN_MICROBATCHES
d=$TRAIN_REPLICAS
for spec in $TRAIN_RUNS; do
  IFS=: read -r schedule optimizer fix <<<"$spec"
  fix=${fix:-none}
  name="${schedule}_${optimizer}$([ "$fix" = none ] || echo "_$fix")_p${p}_m${m}$(replicas_suffix)"
  lr_var="LR_$optimizer"
  if ! sim=$(runnable "$schedule" "$p" "$m"); then skip train "$name" "$schedule" "$p" "$m" "$optimizer" "$fix" "$sim"; continue; fi
  if [ -z "${!lr_var:-}" ]; then
    skip train "$name" "$schedule" "$p" "$m" "$optimizer" "$fix" "no learning rate for --optimizer $optimizer (set $lr_var)"
    continue
  fi
  lr=${!lr_var}
  dir="$out/train/$name"
  mkdir -p "$dir" && rm -f "$dir/metrics.jsonl" "$dir/trace.json"
  extra=()
  [ "$optimizer" = muon ] && extra=(--adam-lr 3e-3)  # Muon's AdamW for embeddings, head and gains, as in the sweep
  # shellcheck disable=SC2046,SC2086
  if timeout -k 10 "$POINT_TIMEOUT_S" "${launch[@]}" "$((p * d))" "$NOBUBBLE" train --device "$DEVICE" "${model[@]}" \
       --data "$DATA" --seed "$SEED" --stages "$p" --data-parallel-size "$d" $(batch_flags "$schedule" "$m") --schedule "$schedule" \
       --optimizer "$optimizer" --lr "$lr" --min-lr "$(awk -v l="$lr" 'BEGIN { print l / 10 }')" "${extra[@]}" \
       --delay-fix "$fix" --lr-decay-style cosine --clip-grad 1.0 $TRAIN_ARGS \
       --metrics "$dir/metrics.jsonl" --trace "$dir/trace.json" >"$dir/train.log" 2>&1; then
    # median tokens/s and bubble over the steps without an evaluation (whose time the step's figure includes)
    read -r tps bubble steps < <("$PYTHON" - "$dir/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
timed = [r for r in rows[1:] if "val_loss" not in r] or rows
print("%.1f %.2f %d" % (statistics.median(r["tokens_per_s"] for r in timed),
                        100 * statistics.median(r["bubble"] for r in timed), len(rows)))
EOF
)
    val=$(sed -n 's/^final val_loss //p' "$dir/train.log")
    hash=$(sed -n 's/^final weights sha256 //p' "$dir/train.log")
    # one optimizer step's tokens, as the run's header states them (pipedream: its one microbatch of m x B)
    tokens=$(sed -n 's/.* \([0-9]*\) tokens per iteration.*/\1/p' "$dir/train.log")
    row train "$name" "$schedule" "$p" "$m" "$optimizer" "$fix" ok "" "$tps" "" "$bubble" "$(analytic "$schedule" "$p" "$m")" \
        "$sim" "" "$tokens" "$val" "$hash" "train/$name/metrics.jsonl" "train/$name/trace.json"
    say "train $name: $tps tokens/s, bubble $bubble%, final val_loss $val ($steps steps)"
  else
    point_failed train "$name" "$schedule" "$p" "$m" "$optimizer" "$fix" "$dir/train.log"
  fi
done

say "grid done in $((SECONDS - start)) s, $failed point(s) failed: $csv"
"$PYTHON" "$root/run/report.py" "$out" || exit 1
[ "$failed" = 0 ]  # the report is written either way; a failed point fails the grid
