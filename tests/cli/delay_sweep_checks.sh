# The delay sweep tests' shared check (sourced after lib.sh by test_delay_sweep.sh and
# test_delay_sweep_complete.sh).
sweep="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/run/experiments/delay_sweep.sh"

# Runs PRESET in WORK/PRESET and checks its results: a table row per optimizer (OPTIMIZERS, a regex
# alternation), gaps to sync, a csv row per run (RUNS), each with its final loss, and the plot.
check_preset() {
  local preset=$1 optimizers=$2 runs=$3 timeout_s=$4
  local md="$WORK/results/delay_sweep_$preset.md" csv="$WORK/results/delay_sweep_$preset.csv"
  local log="$WORK/$preset.log" want_rows
  want_rows=$(echo "$optimizers" | tr '|' '\n' | wc -l)
  NB="$NB" timeout -k 5 "$timeout_s" "$sweep" --preset "$preset" --jobs 2 --work "$WORK/$preset" \
    --results "$WORK/results" >"$log" 2>&1 \
    || fail "$preset: delay_sweep.sh exited non-zero: $(tail -n 5 "$log")"
  ! grep -q 'FAILED' "$log" && ! grep -q 'diverged' "$md" && pass "$preset: every run finished" \
    || fail "$preset: runs failed: $(grep FAILED "$log" | head -n 3)"
  # the first table only (the sections after it, from the first '## ', have rows of their own)
  rows=$(sed '/^## /q' "$md" 2>/dev/null | grep -cE "^\| ($optimizers) \| [0-9.e-]+ \| [0-9]" || true)
  [ "$rows" = "$want_rows" ] && pass "$preset: the table has a row per optimizer ($want_rows)" \
    || fail "$preset: table rows: $rows in $(cat "$md" 2>/dev/null)"
  grep -q '(+\|(-' "$md" && pass "$preset: the table shows gaps to sync" || fail "$preset: no gaps in the table"
  [ "$(grep -c ',' "$csv")" = $((runs + 1)) ] && pass "$preset: the csv has a row per run ($runs)" \
    || fail "$preset: csv: $(wc -l <"$csv") lines"
  unfinished=$(grep -c ',$' "$csv" 2>/dev/null || true)
  [ "$unfinished" = 0 ] && pass "$preset: every csv row has its final loss" \
    || fail "$preset: $unfinished runs without a final loss"
  [ -s "$WORK/results/delay_sweep_$preset.png" ] && pass "$preset: the plot is written" || fail "$preset: no plot"
}
