#!/usr/bin/env bash
# run/compare.sh and run/report.py on the smoke grid under mpirun: one CSV row per grid point, the skips (an
# unknown schedule, 2bw with m < P, an optimizer without a learning rate, a point larger than MAX_RANKS) said in a
# line each while the grid goes on, a failing point recorded and failing the grid, the report's five charts (loss
# against tokens and against wall time among them), the time to the synchronous run's final loss, and its page,
# the page's path printed last; the train point's hash is that of the same run by hand.
# The D axis: points of P x D ranks (named _dD), skipped above MAX_RANKS; a D = 2 train point ends on the
# oracle's bits (reference --data-parallel-size 2).
source "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
COMPARE="$ROOT/run/compare.sh"
if [ "$HAVE_MPI" != 1 ]; then echo "skip: this nobubble has no MPI"; finish; exit; fi
make_corpus "$WORK/corpus.txt"
export NOBUBBLE="$NB" DATA="$WORK/corpus.txt" POINT_TIMEOUT_S=120

# field CSV NAME COLUMN: the value of COLUMN in the row of grid point NAME.
field() {
  /usr/bin/python3 -c "import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r['name'] == sys.argv[2]]
print(rows[0][sys.argv[3]] if rows else 'no such row')" "$@"
}

# 1. The smoke grid with points that cannot run.
OUT="$WORK/grid"
LOG="$WORK/grid.log"
rc=0
BENCH_SCHEDULES="1f1b 2bw zigzag" BENCH_MICROBATCHES="1 P" TRAIN_RUNS="1f1b:muon 2bw:muon:ef 2bw:lion" \
  timeout -k 5 240 "$COMPARE" --grid smoke --out "$OUT" >"$WORK/grid.log" 2>&1 || rc=$?
[ "$rc" = 0 ] && pass "the smoke grid finished" || fail "the smoke grid exited $rc: $(tail -n 5 "$WORK/grid.log")"
CSV="$OUT/grid.csv"
# 3 schedules x 2 m bench points, 3 train points, plus the header
[ "$(wc -l <"$CSV")" = 10 ] && pass "grid.csv has a row per point (9)" || fail "grid.csv: $(cat "$CSV")"
for point in 1f1b_p2_m1 1f1b_p2_m2 2bw_p2_m2 1f1b_muon_p2_m2 2bw_muon_ef_p2_m2; do
  [ "$(field "$CSV" "$point" status)" = ok ] && [ -n "$(field "$CSV" "$point" tokens_per_s)" ] \
    && pass "$point: ok, $(field "$CSV" "$point" tokens_per_s) tokens/s" || fail "$point: $(grep "$point" "$CSV")"
done
expect_skip() {  # POINT PATTERN: skipped, the reason in the CSV and in a line of the log
  if [ "$(field "$CSV" "$1" status)" = skipped ] && field "$CSV" "$1" reason | grep -q -- "$2" \
     && grep "^compare: skip $1: " "$LOG" | grep -q -- "$2"; then
    pass "$1 skipped: $(field "$CSV" "$1" reason)"
  else
    fail "$1: want skipped for '$2', got: $(grep "$1" "$CSV")"
  fi
}
expect_skip zigzag_p2_m1 "zigzag"
expect_skip 2bw_p2_m1 "needs --num-microbatches >= the number of stages"
expect_skip 2bw_lion_p2_m2 "no learning rate for --optimizer lion"
# the bubble columns: analytic (P-1)/(m+P-1) and the simulation beside the measured one
[ "$(field "$CSV" 1f1b_p2_m2 bubble_analytic_pct)" = 33.33 ] && [ "$(field "$CSV" 1f1b_p2_m2 bubble_simulated_pct)" = 33.33 ] \
  && pass "1f1b P=2 m=2: analytic and simulated bubble 33.33%" || fail "bubble columns: $(grep 1f1b_p2_m2 "$CSV")"

# The train point is an ordinary run: the same flags by hand end on the same hash.
run_logged 120 by_hand "${MPI[@]}" -np 2 "$NB" train --device cpu --model tiny --hidden-size 32 \
  --ffn-hidden-size 64 --num-layers 4 --num-attention-heads 2 --num-query-groups 1 --seq-length 32 --data "$DATA" \
  --seed 1234 --stages 2 --micro-batch-size 2 --num-microbatches 2 --schedule 2bw --optimizer muon --lr 2e-2 \
  --min-lr 0.002 --adam-lr 3e-3 --delay-fix ef --lr-decay-style cosine --clip-grad 1.0 --train-iters 12 \
  --lr-warmup-iters 2 --eval-interval 6 --eval-iters 1 --log-interval 6
want=$(sed -n 's/^final weights sha256 //p' "$WORK/by_hand.log")
[ -n "$want" ] && [ "$(field "$CSV" 2bw_muon_ef_p2_m2 weights_sha256)" = "$want" ] \
  && pass "the 2bw train point ends on the by-hand run's hash" || fail "hash: csv $(field "$CSV" 2bw_muon_ef_p2_m2 weights_sha256), by hand '$want'"

# The report: five charts, the page with them inline, its path last.
for png in tokens_per_s bubble val_loss val_loss_time stage_busy; do
  [ -s "$OUT/report/$png.png" ] && pass "report/$png.png" || fail "report/$png.png missing"
done
[ "$(grep -o 'data:image/png;base64' "$OUT/report/index.html" | wc -l)" = 5 ] && grep -q '<table>' "$OUT/report/index.html" \
  && pass "index.html holds the table and the 5 charts" || fail "index.html: $(head -c 300 "$OUT/report/index.html")"
# Time to the target loss: the 1f1b run (muon) sets it with its final validation loss, which it reaches at its
# last evaluation (elapsed_s of its metrics); the 2bw muon run gets seconds or "not reached" against it.
sync_final=$(field "$CSV" 1f1b_muon_p2_m2 final_val_loss)
sync_row=$(grep '^| 1f1b muon P=2 m=2 | ' "$OUT/report/table.md")
async_row=$(grep '^| 2bw muon + ef P=2 m=2 | ' "$OUT/report/table.md")
last_s=$(python3 -c "import json, sys
print('%.2f' % [json.loads(l) for l in open(sys.argv[1]) if 'val_loss' in l][-1]['elapsed_s'])" "$OUT/$(field "$CSV" 1f1b_muon_p2_m2 metrics)")
[ -n "$sync_final" ] && echo "$sync_row" | grep -q "| $(printf '%.4f' "$sync_final") (1f1b) | $last_s |" \
  && echo "$async_row" | grep -Eq '\| [0-9]+\.[0-9]+ \(1f1b\) \| ([0-9]+\.[0-9]|not reached) \|' \
  && grep -q "Time to the synchronous run's final validation loss" "$OUT/report/index.html" \
  && pass "time to target: 1f1b reaches its own final loss at its last evaluation ($last_s s); 2bw: $async_row" \
  || fail "time to target: sync '$sync_row' (final $sync_final, last eval $last_s s), 2bw '$async_row'"
[ "$(tail -n 1 "$WORK/grid.log")" = "report: $OUT/report/index.html" ] && pass "the page's path is printed last" \
  || fail "last line: $(tail -n 1 "$WORK/grid.log")"
grep -q '^2bw / 1f1b tokens/s, bench P=2 m=2: ' "$WORK/grid.log" && pass "the 2bw / 1f1b ratio is printed" \
  || fail "no ratio line: $(tail -n 8 "$WORK/grid.log")"

# 2. A point that fails is recorded and fails the grid; points above MAX_RANKS are skipped.
rc=0
BENCH_SCHEDULES="1f1b" BENCH_STAGES="2 3" BENCH_MICROBATCHES="P" BENCH_REPLICAS="1 2" MAX_RANKS=2 TRAIN_RUNS="1f1b:adamw" \
  TRAIN_ARGS="--train-iters 2 --eval-interval 0 --no-such-flag" \
  timeout -k 5 120 "$COMPARE" --grid smoke --out "$WORK/bad" >"$WORK/bad.log" 2>&1 || rc=$?
CSV="$WORK/bad/grid.csv"
LOG="$WORK/bad.log"
[ "$rc" != 0 ] && [ "$(field "$CSV" 1f1b_adamw_p2_m2 status)" = failed ] \
  && field "$CSV" 1f1b_adamw_p2_m2 reason | grep -q 'no-such-flag' \
  && pass "a failing point: recorded ($(field "$CSV" 1f1b_adamw_p2_m2 reason)), the grid exits $rc" \
  || fail "failing point: exit $rc, $(grep 1f1b_adamw "$CSV")"
expect_skip 1f1b_p3_m3 "needs 3 ranks but the allocation has 2"
expect_skip 1f1b_p2_m2_d2 "needs 4 ranks but the allocation has 2"
[ "$(field "$CSV" 1f1b_p2_m2 status)" = ok ] && pass "the grid went on past them" || fail "1f1b_p2_m2: $(grep 1f1b_p2_m2 "$CSV")"

# 3. The D axis: one stage x 2 replicas, a bench and a train point.
BENCH_SCHEDULES="1f1b" BENCH_STAGES="1" BENCH_MICROBATCHES="2" BENCH_REPLICAS="2" TRAIN_RUNS="1f1b:adamw" \
  TRAIN_STAGES=1 TRAIN_REPLICAS=2 timeout -k 5 120 "$COMPARE" --grid smoke --out "$WORK/dp" >"$WORK/dp.log" 2>&1 \
  || fail "the D = 2 grid: $(tail -n 5 "$WORK/dp.log")"
CSV="$WORK/dp/grid.csv"
[ "$(field "$CSV" 1f1b_p1_m2_d2 status)" = ok ] && [ "$(field "$CSV" 1f1b_p1_m2_d2 replicas)" = 2 ] \
  && [ -n "$(field "$CSV" 1f1b_p1_m2_d2 replica_wait_pct)" ] && grep -q '^| bench | 1f1b P=1 D=2 m=2 | ok ' "$WORK/dp.log" \
  && pass "bench 1f1b P=1 D=2: ok, replica wait $(field "$CSV" 1f1b_p1_m2_d2 replica_wait_pct)%" \
  || fail "bench D = 2: $(cat "$CSV") $(tail -n 8 "$WORK/dp.log")"
run_logged 120 dp_ref "$NB" reference --device cpu --model tiny --hidden-size 32 --ffn-hidden-size 64 --num-layers 4 \
  --num-attention-heads 2 --num-query-groups 1 --seq-length 32 --data "$DATA" --seed 1234 --stages 1 \
  --data-parallel-size 2 --micro-batch-size 2 --num-microbatches 2 --schedule 1f1b --optimizer adamw --lr 3e-3 \
  --min-lr 0.0003 --delay-fix none --lr-decay-style cosine --clip-grad 1.0 --train-iters 12 --lr-warmup-iters 2 \
  --eval-interval 6 --eval-iters 1 --log-interval 6
want=$(sed -n 's/^final weights sha256 //p' "$WORK/dp_ref.log")
[ -n "$want" ] && [ "$(field "$CSV" 1f1b_adamw_p1_m2_d2 weights_sha256)" = "$want" ] \
  && [ "$(field "$CSV" 1f1b_adamw_p1_m2_d2 tokens_per_step)" = 256 ] \
  && pass "the D = 2 train point ends on the oracle's hash, 256 tokens a step" \
  || fail "D = 2 train: $(grep 1f1b_adamw "$CSV"), oracle '$want'"

# 4. Bad input: one error line, exit 2.
expect_error 2 "unknown --grid 'huge'" "$COMPARE" --grid huge --out "$WORK/x"
expect_error 2 "report.py: $WORK/nothing/grid.csv is missing" /usr/bin/python3 "$ROOT/run/report.py" "$WORK/nothing"
finish
