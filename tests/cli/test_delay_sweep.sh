#!/usr/bin/env bash
# The delay experiment's machinery (run/experiments/delay_sweep.sh) on its smoke presets: every optimizer under
# every setting and seed runs, the lr tuning picks a value, and the table, the csv and the plot are written; the
# smoke-moe preset (the moe preset's grid: adamw and muon, sync / 2bw / 2bw + ef, on tiny-moe's MoE blocks) too.
# The numbers of a 12-step run mean nothing; the default and moe presets are the experiment.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/delay_sweep_checks.sh"

check_preset smoke "adamw|muon|lion|adan|mars|soap" 60 240
# Resumable: a second call repeats no run.
NB="$NB" timeout -k 5 120 "$sweep" --preset smoke --work "$WORK/smoke" --results "$WORK/results" \
  >"$WORK/again.log" 2>&1 && ! grep -q '  done ' "$WORK/again.log" && pass "a second call repeats no finished run" \
  || fail "second call: $(grep -c '  done ' "$WORK/again.log") runs repeated"

check_preset smoke-moe "adamw|muon" 12 120
# The smoke-moe runs train MoE blocks: the model named in the table, and MoE parameters in every run.
grep -q -- '--model tiny-moe .*--moe-aux-loss-coeff 1e-2' "$WORK/results/delay_sweep_smoke-moe.md" \
  && pass "smoke-moe: the table names tiny-moe and its aux coefficient" || fail "smoke-moe: the table's model line"
moe_runs=$(grep -l 'model tiny-moe' "$WORK"/smoke-moe/{adamw,muon}_*.log 2>/dev/null | wc -l)
[ "$moe_runs" = 12 ] && pass "smoke-moe: every run trains tiny-moe" \
  || fail "smoke-moe: $moe_runs of 12 runs are tiny-moe"

expect_error 2 "unknown --preset 'huge'" "$sweep" --preset huge
finish
