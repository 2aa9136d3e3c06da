#!/usr/bin/env bash
# The stage cut on the command line (model/partition.h, src/plan/pipeline_cut.h). On a 5-block model whose
# embedding and head weigh about a block each (hidden 32), --pipeline-cut params, --pipeline-cut cost (the default)
# and --pipeline-layout 1,1,3 are three different cuts: 0 | 1-3 | 4, 0-1 | 2-3 | 4 and 0 | 1 | 2-4.
#   - 1f1b on 3 stages in one process (and under mpirun where there is MPI) equals `nobubble reference` given the
#     same flags, for each cut, and the reference names the same cut as train;
#   - a synchronous schedule's final weights do not depend on the cut (the global clip adds every stage's sums in
#     the unsplit model's order): the three runs end on the same weights;
#   - pipedream's delays do depend on it (stage s lags p-1-s steps): params and cost end apart, each still equal
#     to its own reference;
#   - so a pipedream checkpoint resumes only into its own cut (else one line naming the --pipeline-layout to give);
#   - --pipeline-layout overrides --pipeline-cut, and is read from a --config file;
#   - `info` says what bound each stage, its share of the forward + backward FLOPs and the slowest against the mean.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 5 --hidden-size 32 --ffn-hidden-size 48
       --untie-embeddings-and-output-weights --log-interval 100 --train-iters 6)
[ "$HAVE_MPI" = 1 ] || echo "skip: nobubble is built without MPI or mpirun is missing: in-process runs only"

# cut_is NAME LOG CUT: the run's header names the cut "(blocks ...)".
cut_is() {
  grep -qF "on 3 stages ($3)" "$2" && pass "$1 cuts $3" || fail "$1: want ($3), got: $(head -n 1 "$2")"
}

declare -A CUT=([params]="blocks 0 | 1-3 | 4" [cost]="blocks 0-1 | 2-3 | 4" [layout]="blocks 0 | 1 | 2-4")
declare -A ARGS=([params]="--pipeline-cut params" [cost]="" [layout]="--pipeline-layout 1,1,3")
for name in params cost layout; do
  # shellcheck disable=SC2086  # ARGS holds words
  check_against_reference "1f1b_$name" 3 --schedule 1f1b --num-microbatches 3 ${ARGS[$name]}
  cut_is "train --stages 3 (${name})" "$WORK/inproc_1f1b_$name.log" "${CUT[$name]}"
  cut_is "reference (${name})" "$WORK/ref_1f1b_$name.log" "${CUT[$name]}"
done
w=$(hash_of "$WORK/inproc_1f1b_params.log")
if [[ "$w" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/inproc_1f1b_cost.log")" = "$w" ] \
   && [ "$(hash_of "$WORK/inproc_1f1b_layout.log")" = "$w" ] && [ "$(hash_of "$WORK/ref_1f1b_cost.log")" = "$w" ]; then
  pass "1f1b ends on the same weights under every cut ($w)"
else
  fail "1f1b weights by cut: params $w, cost $(hash_of "$WORK/inproc_1f1b_cost.log"), layout $(hash_of "$WORK/inproc_1f1b_layout.log")"
fi

check_against_reference pipedream_params 3 --schedule pipedream --num-microbatches 3 --pipeline-cut params
check_against_reference pipedream_cost 3 --schedule pipedream --num-microbatches 3
a=$(hash_of "$WORK/inproc_pipedream_params.log") b=$(hash_of "$WORK/inproc_pipedream_cost.log")
[[ "$a" =~ ^[0-9a-f]{64}$ ]] && [[ "$b" =~ ^[0-9a-f]{64}$ ]] && [ "$a" != "$b" ] \
  && pass "pipedream's weights depend on the cut ($a, $b)" || fail "pipedream by cut: params $a, cost $b"

# pipedream's checkpoint loads only into the cut it was saved with (a stage's stash depends on the stage): another
# cut is one line naming the layout that gives the saved one, and with that layout the resume ends where the
# uninterrupted run ends. The reference refuses it alike.
PD=(--schedule pipedream --stages 3 --num-microbatches 3)
run_logged 120 pd_save "$NB" train "${FLAGS[@]}" "${PD[@]}" --pipeline-cut params --save "$WORK/ck" --save-interval 3
SAVED_CUT="field 'cut' is blocks 0 | 1-3 | 4 there, blocks 0-1 | 2-3 | 4 in this run: .*(--pipeline-layout 1,3,1)$"
expect_error 1 "$SAVED_CUT" "$NB" train "${FLAGS[@]}" "${PD[@]}" --load "$WORK/ck/step_3"
expect_error 1 "$SAVED_CUT" "$NB" reference "${FLAGS[@]}" "${PD[@]}" --load "$WORK/ck/step_3"
run_logged 120 pd_resume "$NB" train "${FLAGS[@]}" "${PD[@]}" --pipeline-layout 1,3,1 --load "$WORK/ck/step_3"
same_state "pipedream resumed onto its saved cut, given as --pipeline-layout" "$WORK/inproc_pipedream_params.log" \
  "$WORK/pd_resume.log"

# The layout wins over --pipeline-cut; a --config file holds it as a string.
run_logged 120 over "$NB" train "${FLAGS[@]}" --stages 3 --num-microbatches 3 --pipeline-cut params --pipeline-layout 1,1,3
cut_is "--pipeline-layout over --pipeline-cut params" "$WORK/over.log" "${CUT[layout]}"
printf 'pipeline-layout = "1,1,3"\npipeline-cut = "params"\n' >"$WORK/cut.toml"
run_logged 120 config "$NB" train "${FLAGS[@]}" --stages 3 --num-microbatches 3 --config "$WORK/cut.toml"
cut_is "--pipeline-layout from --config" "$WORK/config.log" "${CUT[layout]}"
[ "$(hash_of "$WORK/config.log")" = "$w" ] && pass "the --config run's weights too" || fail "config run: $(tail -n 3 "$WORK/config.log")"

# info: the bound of each stage, its FLOP share, the slowest against the mean.
INFO=(--model tiny --num-layers 5 --hidden-size 32 --ffn-hidden-size 48 --untie-embeddings-and-output-weights
      --micro-batch-size 2 --seq-length 32 --stages 3)
run_logged 60 info_cost "$NB" info "${INFO[@]}"
run_logged 60 info_params "$NB" info "${INFO[@]}" --pipeline-cut params
run_logged 60 info_layout "$NB" info "${INFO[@]}" --pipeline-layout 1,1,3
# stage_rows LOG: "STAGE BOUND FLOP-SHARE" per stage row of the stage table.
stage_rows() {
  awk '/^  stage +bound +layers/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { print $1, $2, $(NF - 10) } on && /^[a-z]/ { on = 0 }' "$1" | paste -sd' '
}
[ "$(stage_rows "$WORK/info_cost.log")" = "0 cost 34.2% 1 cost 34.2% 2 cost 31.5%" ] \
  && grep -qx '  slowest stage: 34.2% of the forward + backward FLOPs, 1.027 x the mean (1: even)' "$WORK/info_cost.log" \
  && grep -q '^pipeline plan: 3 stage(s), cut by cost (.*FLOP model.*not a measured profile' "$WORK/info_cost.log" \
  && pass "info: the cost cut, each stage bound by cost, max/mean 1.027" || fail "info cost: $(cat "$WORK/info_cost.log")"
[ "$(stage_rows "$WORK/info_params.log")" = "0 params 17.1% 1 params 51.4% 2 params 31.5%" ] \
  && grep -qx '  slowest stage: 51.4% of the forward + backward FLOPs, 1.541 x the mean (1: even)' "$WORK/info_params.log" \
  && pass "info: the params cut, max/mean 1.541" || fail "info params: $(cat "$WORK/info_params.log")"
[ "$(stage_rows "$WORK/info_layout.log" | awk '{print $2, $5, $8}')" = "layout layout layout" ] \
  && grep -q '^pipeline plan: 3 stage(s), cut by --pipeline-layout 1,1,3$' "$WORK/info_layout.log" \
  && pass "info: a layout" || fail "info layout: $(cat "$WORK/info_layout.log")"
finish
