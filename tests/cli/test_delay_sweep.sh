#!/usr/bin/env bash
# The delay experiment's machinery (run/experiments/delay_sweep.sh) on its smoke preset: every optimizer under
# every setting and seed runs, the lr tuning picks a value, and the table, the csv and the plot are written.
# The numbers of a 12-step run mean nothing; the default preset (about an hour) is the experiment.
source "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
sweep="$root/run/experiments/delay_sweep.sh"
NB="$NB" timeout -k 5 240 "$sweep" --preset smoke --jobs 2 --work "$WORK/work" --results "$WORK/results" \
  >"$WORK/sweep.log" 2>&1 || fail "delay_sweep.sh --preset smoke exited non-zero: $(tail -n 5 "$WORK/sweep.log")"
md="$WORK/results/delay_sweep_smoke.md"
! grep -q 'FAILED' "$WORK/sweep.log" && ! grep -q 'diverged' "$md" && pass "every run finished" \
  || fail "runs failed: $(grep FAILED "$WORK/sweep.log" | head -n 3)"
rows=$(grep -cE '^\| (adamw|muon|lion|adan|mars|soap) \| [0-9.e-]+ \| [0-9]' "$md" 2>/dev/null || true)
[ "$rows" = 6 ] && pass "the table has a row per optimizer" || fail "table rows: $rows in $(cat "$md" 2>/dev/null)"
grep -q '(+\|(-' "$md" && pass "the table shows gaps to sync" || fail "no gaps in the table"
[ "$(grep -c ',' "$WORK/results/delay_sweep_smoke.csv")" = 61 ] && pass "the csv has a row per run (60)" \
  || fail "csv: $(wc -l <"$WORK/results/delay_sweep_smoke.csv") lines"
[ -s "$WORK/results/delay_sweep_smoke.png" ] && pass "the plot is written" || fail "no plot"
# Resumable: a second call repeats no run.
NB="$NB" timeout -k 5 120 "$sweep" --preset smoke --work "$WORK/work" --results "$WORK/results" >"$WORK/again.log" 2>&1 \
  && ! grep -q '  done ' "$WORK/again.log" && pass "a second call repeats no finished run" \
  || fail "second call: $(grep -c '  done ' "$WORK/again.log") runs repeated"
expect_error 2 "unknown --preset 'huge'" "$sweep" --preset huge
finish
