#!/usr/bin/env bash
# `nobubble schedule`: prints a timeline and its numbers for every schedule, the known 1F1B bubble, stays fast
# at P = 64, m = 512, and turns bad input into one `nobubble: error:` line with exit 2.
source "$(dirname "$0")/lib.sh"

# expect_output NAME PATTERN FILE: FILE has a line matching the fixed string PATTERN.
expect_output() {
  if grep -qF -- "$2" "$3"; then pass "$1"; else fail "$1: no line with '$2' in: $(cat "$3")"; fi
}

names_into SCHEDULES schedules
for s in "${SCHEDULES[@]}"; do
  out="$WORK/$s.txt"
  rc=0
  timeout 60 "$NB" schedule --schedule "$s" --stages 4 --microbatches 8 --steps 2 >"$out" 2>"$WORK/$s.err" || rc=$?
  if [ "$rc" = 0 ] && [ ! -s "$WORK/$s.err" ]; then pass "$s: exit 0, nothing on stderr"; else fail "$s: exit $rc, stderr: $(cat "$WORK/$s.err")"; fi
  expect_output "$s: header" "schedule $s: 4 stage(s), 8 microbatch(es) per iteration" "$out"
  expect_output "$s: timeline row of stage 0" "stage 0: F0" "$out"
  if grep -qE '^stage 3: \. +\. +\. +F0 ' "$out"; then pass "$s: stage 3 idles 3 columns, then F0"; else fail "$s: stage 3 row"; fi
  expect_output "$s: makespan" "makespan: " "$out"
  expect_output "$s: bubble" "bubble fraction: " "$out"
  expect_output "$s: per-stage table" "stage     busy ms     busy  in-flight  versions" "$out"
done

# The 1F1B bubble for p = 4, m = 8 with backward = 2 x forward: (p-1)/(m+p-1) = 3/11.
out="$WORK/1f1b_p4_m8.txt"
"$NB" schedule --schedule 1f1b --stages 4 --microbatches 8 >"$out" 2>&1
expect_output "1f1b p=4 m=8: bubble 27.27%" "bubble fraction: 27.27%" "$out"
expect_output "1f1b p=4 m=8: makespan 33 ms" "makespan: 33.000 ms" "$out"
expect_output "1f1b p=4 m=8: stage 0 in flight 4, one version" "    0      24.000   72.73%          4         1" "$out"
expect_output "1f1b p=4 m=8: stage 0 timeline" "stage 0: F0 F1 F2 F3 .  .  .  .  .  .  B0--- F4 B1---" "$out"

# Weight versions per stage: 2 under 2bw, p-s under pipedream.
grep -E '^ +[0-9]+ ' "$WORK/2bw.txt" | awk '{print $5}' | sort -u >"$WORK/2bw_versions"
if [ "$(cat "$WORK/2bw_versions")" = 2 ]; then pass "2bw: 2 versions on every stage"; else fail "2bw versions: $(cat "$WORK/2bw_versions")"; fi
pd_versions=$(grep -E '^ +[0-9]+ ' "$WORK/pipedream.txt" | awk '{printf "%s ", $5}')
if [ "$pd_versions" = "4 3 2 1 " ]; then pass "pipedream: p-s versions"; else fail "pipedream versions: $pd_versions"; fi

# Sync start / cooldown are accepted and shown.
out="$WORK/sync.txt"
"$NB" schedule --schedule 2bw --stages 4 --microbatches 4 --steps 5 --sync-start 1 --sync-cooldown 1 >"$out" 2>&1
expect_output "2bw with sync start and cooldown" "sync start 1, sync cooldown 1" "$out"

# P = 64, m = 512: a summary instead of a grid, within a few seconds.
out="$WORK/large.txt"
start=$(date +%s%N)
rc=0
timeout 30 "$NB" schedule --schedule 2bw --stages 64 --microbatches 512 --steps 3 >"$out" 2>&1 || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ "$rc" = 0 ] && [ "$ms" -lt 5000 ]; then pass "P=64 m=512 in $ms ms"; else fail "P=64 m=512: exit $rc after $ms ms"; fi
expect_output "P=64 m=512: summary, not a grid" "too long to draw by column" "$out"
expect_output "P=64 m=512: last stage listed" "   63 " "$out"

# Bad input: one line, exit 2.
S=("$NB" schedule --stages 4 --microbatches 8)
expect_error 2 "unknown --schedule 'zerobubble' (valid: gpipe, 1f1b, 2bw, pipedream, zb-h1, zb-v)" "${S[@]}" --schedule zerobubble
expect_error 2 "stages must be positive, got 0" "$NB" schedule --schedule 1f1b --stages 0 --microbatches 8
expect_error 2 "schedule 2bw needs --num-microbatches >= the number of stages (P)" "$NB" schedule --schedule 2bw --stages 4 --microbatches 3
expect_error 2 "sync-start 2 + --sync-cooldown 2 exceed the 3 optimizer steps" "${S[@]}" --schedule 2bw --steps 3 --sync-start 2 --sync-cooldown 2
expect_error 2 "forward-ms must be positive" "${S[@]}" --schedule 1f1b --forward-ms 0
expect_error 2 "stages" "$NB" schedule --schedule 1f1b --microbatches 8
# Data parallelism's alpha-beta: 1 Gbit of gradient over 1 Gbit/s for 2 replicas, no latency, is 1000 ms per step,
# all of it exposed (one step: the sum starts with the last backward and the step waits for it).
"$NB" schedule --schedule 1f1b --stages 2 --microbatches 2 --data-parallel-size 2 --grad-mib 119.20928955078125 \
  --allreduce-gbps 1 --allreduce-latency-us 0 --tokens-per-microbatch 100 >"$WORK/dp.txt"
grep -q 'summed in 1000.000 ms per step' "$WORK/dp.txt" && grep -q '^exposed reduction: 1000.000 ms per stage' "$WORK/dp.txt" \
  && grep -q '^projected: .* tokens/s over 4 ranks' "$WORK/dp.txt" \
  && pass "--data-parallel-size 2: the sum costed and exposed, the job's tokens/s" || fail "dp: $(tail -n 3 "$WORK/dp.txt")"
expect_error 2 "allreduce-gbps must be positive" "$NB" schedule --schedule 1f1b --stages 2 --microbatches 2 \
  --data-parallel-size 2 --allreduce-gbps 0
finish
