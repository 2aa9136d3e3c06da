#!/usr/bin/env bash
# What a pipeline run tells about itself (docs/DESIGN.md section 5, "Outputs"):
# - `--trace FILE.json` (Chrome/Perfetto): `mpirun -np 2 ... --schedule 1f1b` and an in-process `--schedule 2bw`
#   on 2 stages, each checked by check_trace.py (valid JSON, one track per stage, every microbatch's F and B on
#   every stage, waits/sends/receives, no overlap within a stage, one clock across the stages); the run's weights
#   and optimizer state are those of the same run without --trace; one stage with a synchronous schedule traces
#   too (on the executor, with the plain loop's weights);
# - the progress line's busy % per stage, bubble % and activation MiB per stage, and the same in --metrics;
# - errors: a --trace path that cannot be written (before the run), --trace given to the reference.
# (These dense runs have no MoE dispatch spans, which check_trace.py checks; MoE traces: test_moe_cli.sh.)
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
CHECK="$(dirname "$0")/check_trace.py"
PY=/usr/bin/python3
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --untie-embeddings-and-output-weights
       --train-iters 4 --num-microbatches 4 --log-interval 2)
[ "$HAVE_MPI" = 1 ] || echo "skip: nobubble is built without MPI or mpirun is missing: in-process runs only"

run() { run_logged 60 "$@"; }  # run NAME COMMAND...: the log lands in $WORK/NAME.log
opt_of() { grep '^final optimizer state sha256 ' "$1" | awk '{print $5}'; }
same_result() {  # same_result NAME WANT_LOG GOT_LOG
  if [ -n "$(hash_of "$2")" ] && [ "$(hash_of "$3")" = "$(hash_of "$2")" ] && [ "$(opt_of "$3")" = "$(opt_of "$2")" ]; then
    pass "$1: the same weights and optimizer state with --trace"
  else
    fail "$1: $(hash_of "$2") $(opt_of "$2") without --trace, $(hash_of "$3") $(opt_of "$3") with"
  fi
}
check_trace() {  # check_trace NAME FILE STAGES MICROBATCHES STEPS
  if $PY "$CHECK" "$2" "$3" "$4" "$5" >"$WORK/$1.check" 2>&1; then
    pass "$1: $(tr '\n' ';' <"$WORK/$1.check")"
  else
    fail "$1: $(cat "$WORK/$1.check")"
  fi
}

# ---- in one process: 2bw on 2 stages ----
run inproc "$NB" train "${FLAGS[@]}" --schedule 2bw --stages 2 --trace "$WORK/inproc.json" --metrics "$WORK/inproc.jsonl"
run inproc_plain "$NB" train "${FLAGS[@]}" --schedule 2bw --stages 2
check_trace "in-process 2bw trace" "$WORK/inproc.json" 2 16 4
same_result "in-process 2bw" "$WORK/inproc_plain.log" "$WORK/inproc.log"
[ ! -e "$WORK/inproc.json.tmp" ] && pass "no temporary file left" || fail "$WORK/inproc.json.tmp left behind"

# zb-h1: every W after its B, in its own colour; the bits of the untraced run.
run zb "$NB" train "${FLAGS[@]}" --schedule zb-h1 --stages 2 --trace "$WORK/zb.json"
run zb_plain "$NB" train "${FLAGS[@]}" --schedule zb-h1 --stages 2
check_trace "in-process zb-h1 trace" "$WORK/zb.json" 2 16 4
grep -q "W on every microbatch\|W of every microbatch" "$WORK/in-process zb-h1 trace.check" && pass "zb-h1 trace has W actions" \
    || fail "zb-h1 trace: no W actions ($(cat "$WORK/in-process zb-h1 trace.check"))"
same_result "in-process zb-h1" "$WORK/zb_plain.log" "$WORK/zb.log"

# The progress line: busy per stage, bubble, activation MiB per stage (P = 2 numbers each).
pat='^step      2/4 \| loss [0-9.]+ \| .* ms \| busy [0-9]+% [0-9]+% \| bubble -?[0-9.]+% \| act MiB [0-9.]+ [0-9.]+$'
grep -Eq "$pat" "$WORK/inproc.log" && pass "progress line: $(grep '^step      2/4' "$WORK/inproc.log" | sed 's/.*ms | //')" \
  || fail "progress line: $(grep '^step ' "$WORK/inproc.log")"
if $PY - "$WORK/inproc.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 4, recs
for r in recs:
    assert len(r["stage_busy"]) == 2 and all(0 <= b <= 1.5 for b in r["stage_busy"]), r
    assert len(r["act_mib"]) == 2 and all(a > 0 for a in r["act_mib"]), r
    assert -0.5 <= r["bubble"] <= 1, r
EOF
then pass "metrics: stage_busy and act_mib arrays of 2, bubble"; else fail "metrics: $(cat "$WORK/inproc.jsonl")"; fi

# ---- one stage, 1f1b: the executor (the plain loop has no trace), the plain loop's bits ----
run one "$NB" train "${FLAGS[@]}" --trace "$WORK/one.json"
run one_plain "$NB" train "${FLAGS[@]}"
check_trace "one-stage 1f1b trace" "$WORK/one.json" 1 16 4
[ -n "$(hash_of "$WORK/one.log")" ] && [ "$(hash_of "$WORK/one.log")" = "$(hash_of "$WORK/one_plain.log")" ] \
  && pass "one stage traced ends with the plain loop's weights" \
  || fail "one stage: $(hash_of "$WORK/one_plain.log") plain, $(hash_of "$WORK/one.log") traced"

# ---- over MPI: 1f1b on 2 ranks ----
if [ "$HAVE_MPI" = 1 ]; then
  run mpi mpirun --oversubscribe -np 2 "$NB" train "${FLAGS[@]}" --schedule 1f1b --trace "$WORK/mpi.json"
  run mpi_ref "$NB" reference "${FLAGS[@]}" --schedule 1f1b --stages 2
  check_trace "mpirun -np 2 1f1b trace" "$WORK/mpi.json" 2 16 4
  same_result "mpirun -np 2 1f1b (against the reference)" "$WORK/mpi_ref.log" "$WORK/mpi.log"
  grep -Eq "$pat" "$WORK/mpi.log" && pass "progress line over MPI" || fail "progress line over MPI: $(grep '^step ' "$WORK/mpi.log")"
fi

# ---- errors ----
expect_error 1 "trace '$WORK/no/such/dir/t.json': cannot open for writing" "$NB" train "${FLAGS[@]}" --stages 2 \
  --trace "$WORK/no/such/dir/t.json"
expect_error 2 "trace: the reference runs no pipeline to trace" "$NB" reference "${FLAGS[@]}" --stages 2 \
  --trace "$WORK/r.json"
finish
