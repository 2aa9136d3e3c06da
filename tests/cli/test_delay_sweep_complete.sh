#!/usr/bin/env bash
# The complete delay experiment's presets (run/experiments/delay_sweep.sh --preset mitigations, beyond-ef,
# momentum, depth) on their smoke versions, seconds each: every run of each grid finishes, the table of final losses is
# whole, and each preset's own section is: every mitigation's gap and share of 2bw's gap (and taylor's lambda
# tuned), the 2bw gap at every momentum coefficient, 2bw's and pipedream's gap at every depth. The numbers of a
# 10-step run mean nothing; the full presets are the experiment.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/delay_sweep_checks.sh"
results="$WORK/results"

# count_rows PRESET REGEX: the lines of PRESET's table matching REGEX.
count_rows() { grep -cE "$2" "$results/delay_sweep_$1.md" 2>/dev/null || true; }
expect_rows() {  # PRESET WANT REGEX WHAT
  local got
  got=$(count_rows "$1" "$3")
  [ "$got" = "$2" ] && pass "$1: $4 ($2 rows)" || fail "$1: $4: $got rows, want $2"
}
# expect_in PASS FAIL PATTERN FILE [PATTERN FILE ...]: pass PASS when every FILE holds its PATTERN, else fail FAIL.
expect_in() {
  local ok=$1 bad=$2
  shift 2
  while [ $# -ge 2 ]; do
    grep -q -- "$1" "$2" || { fail "$bad"; return; }
    shift 2
  done
  pass "$ok"
}

# mitigations: 2 optimizers x 7 settings x 2 seeds = 28 runs.
check_preset smoke-mitigations "adamw|muon" 28 120
expect_rows smoke-mitigations 12 '^\| (adamw|muon) \| 2bw[^|]* \| [+-][0-9.]+ ± [0-9.]+ \| ' \
  "a gap to sync per optimizer and asynchronous setting"
expect_rows smoke-mitigations 10 '^\| (adamw|muon) \| 2bw \+[^|]* \| [^|]+ \| -?[0-9]+% \[' \
  "a share of 2bw's gap per mitigation"
expect_rows smoke-mitigations 2 '^\| (adamw|muon) \| 0\.[0-9]+ \(chosen\) \| [0-9]' "taylor's lambda chosen"
expect_in "smoke-mitigations: the runs take 10% of the steps synchronous and the tuned lambda" \
  "smoke-mitigations: flags: $(cat "$WORK"/smoke-mitigations/*_s2.flags | head -n 4)" \
  '--sync-start 1$' "$WORK/smoke-mitigations/muon_2bw_ss_s2.flags" \
  '--sync-cooldown 1$' "$WORK/smoke-mitigations/adamw_2bw_ef_sc_s2.flags" \
  '--delay-fix taylor --taylor-lambda 0\.' "$WORK/smoke-mitigations/adamw_2bw_taylor_s2.flags"

# beyond-ef: 2 optimizers x 6 settings x 2 seeds = 24 runs; predict's lambda and lookahead's gamma tuned, and
# ef,predict takes predict's lambda.
check_preset smoke-beyond-ef "adamw|muon" 24 120
expect_rows smoke-beyond-ef 8 '^\| (adamw|muon) \| 2bw \+[^|]* \| [^|]+ \| -?[0-9]+% \[' \
  "a share of 2bw's gap per mitigation"
expect_rows smoke-beyond-ef 4 '^\| (adamw|muon) \| [0-9.]+ \(chosen\) \| [0-9]' "predict's lambda and lookahead's gamma chosen"
lambda=$(awk '$1 == "muon" {print $2}' "$WORK/smoke-beyond-ef/chosen_predict.txt")
expect_in "smoke-beyond-ef: the rules' flags, ef,predict with predict's chosen lambda ($lambda)" \
  "smoke-beyond-ef: flags: $(cat "$WORK"/smoke-beyond-ef/*_s2.flags | head -n 6)" \
  '--delay-fix lookahead --lookahead-gamma 0\.' "$WORK/smoke-beyond-ef/adamw_2bw_lookahead_s2.flags" \
  "--delay-fix ef,predict --predict-lambda $lambda\$" "$WORK/smoke-beyond-ef/muon_2bw_ef_predict_s2.flags" \
  '--delay-fix predict --predict-lambda ' "$WORK/smoke-beyond-ef/muon_2bw_predict_s1.flags"

# momentum: 8 coefficients x 2 settings x 2 seeds = 32 runs.
check_preset smoke-momentum "$(echo adamw_b{0.8,0.9,0.95,0.98} muon_m{0.8,0.9,0.95,0.98} | tr ' ' '|')" 32 120
expect_rows smoke-momentum 8 '^\| (adamw \| beta1|muon \| momentum) 0\.[0-9]+ \| [0-9.e-]+ \| [0-9.]+ \| [+-][0-9.]+ ± ' \
  "a 2bw gap per coefficient"
expect_in "smoke-momentum: each variant sets its coefficient" "smoke-momentum: coefficients not set" \
  '--beta1 0.98' "$WORK/smoke-momentum/adamw_b0.98_2bw_s2.flags" \
  '--momentum 0.8' "$WORK/smoke-momentum/muon_m0.8_2bw_s2.flags"

# depth: 2 optimizers x (sync, 2bw and pipedream at P = 2, 4, 8) x 2 seeds = 28 runs.
check_preset smoke-depth "adamw|muon" 28 120
expect_rows smoke-depth 6 '^\| (adamw|muon) \| [248] \| [+-][0-9.]+ ± [0-9.]+ \| [+-][0-9.]+ ± ' \
  "2bw's and pipedream's gap per depth"
expect_in "smoke-depth: 8 blocks, pipedream on 8 stages" "smoke-depth: model or stages" \
  '--num-layers 8 ' "$results/delay_sweep_smoke-depth.md" \
  '--schedule pipedream --stages 8' "$WORK/smoke-depth/muon_pd8_s1.flags"

finish
