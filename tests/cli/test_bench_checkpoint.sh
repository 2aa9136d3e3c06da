#!/usr/bin/env bash
# `nobubble bench checkpoint` on `tiny` (the figures are the benchmark's business, not a test's): it prints one row
# per model with the bytes, save and load seconds and the ratio to the disk's rate, then the target line; its
# scratch directory under --dir is gone afterwards; CUDA is timed or skipped with a reason. Bad flags are usage
# errors. Then the Hugging Face export and import row (src/run/hf_bench.h) and its target line.
source "$(dirname "$0")/lib.sh"
mkdir -p "$WORK/scratch"
timeout -k 5 120 "$NB" bench checkpoint --models tiny --reps 1 --dir "$WORK/scratch" >"$WORK/bench.log" 2>&1 \
  || fail "bench checkpoint: $(cat "$WORK/bench.log")"
grep -qE '^  cpu +tiny +3279104 +[0-9.]+ MB +[0-9.]+ +[0-9.]+ +[0-9.]+ [kMG]B/s +[0-9.]+ [kMG]B/s +[0-9]+%' "$WORK/bench.log" \
  && pass "a row for tiny on the CPU" || fail "row: $(cat "$WORK/bench.log")"
grep -qE '^  cuda: skipped \(.+\)$|^  cuda +tiny ' "$WORK/bench.log" && pass "CUDA timed or skipped with a reason" \
  || fail "cuda line: $(cat "$WORK/bench.log")"
grep -qE "^target: save rate >= 50% of the disk's sequential write rate: lowest [0-9]+%, target (met|not met)$" \
  "$WORK/bench.log" && pass "the target line" || fail "target: $(tail -n 2 "$WORK/bench.log")"
grep -qE '^  tiny +[0-9.]+ [kMG]?B( +[0-9.]+){2}( +[0-9.]+ [kMG]?B/s){2} +[0-9]+%( +[0-9.]+ [kMG]?B/s){2} +[0-9]+%$' \
  "$WORK/bench.log" && pass "a Hugging Face export and import row for tiny" || fail "hf row: $(cat "$WORK/bench.log")"
grep -qE "^target: export and import rates >= 50% of the disk's sequential write and read rates: lowest [0-9]+%, \
target (met|not met)$" "$WORK/bench.log" && pass "the export and import target line" \
  || fail "hf target: $(tail -n 2 "$WORK/bench.log")"
[ -z "$(ls -A "$WORK/scratch")" ] && pass "its scratch directory is removed" || fail "left behind: $(ls -A "$WORK/scratch")"
expect_error 2 "reps" "$NB" bench checkpoint --reps 0
expect_error 1 "$WORK/no/such/dir" "$NB" bench checkpoint --models tiny --dir "$WORK/no/such/dir"
finish
