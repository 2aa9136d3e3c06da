#!/usr/bin/env bash
# Exact resume of the pipeline executor and the oracle (src/run/checkpoint.h, docs/DESIGN.md section 8), on the CPU:
# - every schedule x every optimizer, and 2bw with ef, taylor, predict, ef,predict, lookahead and
#   --sync-start/--sync-cooldown, and pipedream with predict: a run stopped
#   by --exit-interval after step 2 (mid-warm-up) and resumed ends on the oracle's uninterrupted weights AND
#   optimizer state; stopped after step 5 (mid-decay, not a multiple of --save-interval 3) with its own
#   checkpoint removed, the resume from step 3 ends there too;
# - the executor's checkpoint files are byte for byte the oracle's (the same sha256 in both manifests), and a
#   checkpoint of either resumes in the other;
# - resumes also over mpirun (one rank per stage), stopped in one process and resumed under mpirun;
# - resharding: gpipe and 1f1b P=2 -> 3 and 4 -> 1 end bit-equal to the uninterrupted P-stage run; 2bw reshards
#   bit-equal without per-stage clipping (--clip-grad 0), and with its default per-stage clip the state it loads
#   is the saved one; pipedream refuses another stage count with one error naming the field;
# - a damaged stage file of a pipeline checkpoint is one error under mpirun, and nothing is written.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --untie-embeddings-and-output-weights
       --train-iters 8 --lr-warmup-iters 3 --log-interval 4)

# shas DIR: the stage files' sha256s in a manifest.
shas() { grep -o '"sha256": "[0-9a-f]*"' "$1/manifest.json" | tr '\n' ' '; }

# resume_case ID P FLAGS...: the oracle's uninterrupted run; train stopped after 2 and resumed; train stopped
# after 5 (saves at 3 and 5), step_5 removed, resumed from 3; the oracle's checkpoint of step 5 = train's.
resume_case() {
  local id=$1 p=$2
  shift 2
  local F=("${FLAGS[@]}" --stages "$p" "$@")
  run_logged 120 "full_$id" "$NB" reference "${F[@]}"
  run_logged 120 "stop2_$id" "$NB" train "${F[@]}" --save "$WORK/a_$id" --save-interval 2 --exit-interval 2
  run_logged 120 "res2_$id" "$NB" train "${F[@]}" --load "$WORK/a_$id"
  run_logged 120 "stop5_$id" "$NB" train "${F[@]}" --save "$WORK/b_$id" --save-interval 3 --exit-interval 5
  run_logged 120 "ref5_$id" "$NB" reference "${F[@]}" --save "$WORK/r_$id" --save-interval 5 --exit-interval 5
  local s5 r5
  s5=$(shas "$WORK/b_$id/step_5"); r5=$(shas "$WORK/r_$id/step_5")
  [ -n "$s5" ] && [ "$s5" = "$r5" ] && pass "$id: train's checkpoint files of step 5 are the oracle's" \
    || fail "$id: train $s5, oracle $r5"
  rm -rf "$WORK/b_$id/step_5"
  run_logged 120 "res3_$id" "$NB" train "${F[@]}" --load "$WORK/b_$id"
  same_state "$id: stopped after 2 (mid-warm-up), resumed" "$WORK/full_$id.log" "$WORK/res2_$id.log"
  same_state "$id: stopped after 5, resumed from step 3" "$WORK/full_$id.log" "$WORK/res3_$id.log"
}

names_into OPTIMIZERS optimizers
for opt in "${OPTIMIZERS[@]}"; do
  resume_case "gpipe_$opt" 2 --schedule gpipe --num-microbatches 2 --optimizer "$opt"
  resume_case "1f1b_$opt" 3 --schedule 1f1b --num-microbatches 3 --optimizer "$opt"
  resume_case "2bw_$opt" 3 --schedule 2bw --num-microbatches 3 --optimizer "$opt"
  resume_case "pipedream_$opt" 3 --schedule pipedream --num-microbatches 2 --optimizer "$opt"
  resume_case "zb-h1_$opt" 3 --schedule zb-h1 --num-microbatches 3 --optimizer "$opt"
done
resume_case 2bw_muon_ef 3 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef
resume_case 2bw_adamw_taylor 2 --schedule 2bw --num-microbatches 2 --optimizer adamw --delay-fix taylor
resume_case 2bw_adamw_predict 2 --schedule 2bw --num-microbatches 2 --optimizer adamw --delay-fix predict \
  --predict-lambda 0.5
resume_case 2bw_lion_lookahead_sync 2 --schedule 2bw --num-microbatches 2 --optimizer lion --delay-fix lookahead \
  --lookahead-gamma 0.7 --sync-start 2
resume_case 2bw_muon_ef_predict_sync 3 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef,predict \
  --sync-start 2 --sync-cooldown 2
resume_case 2bw_muon_ef_sync 3 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef \
  --sync-start 2 --sync-cooldown 2
resume_case pipedream_lion_sync 3 --schedule pipedream --num-microbatches 2 --optimizer lion --sync-start 3
resume_case pipedream_adamw_predict 3 --schedule pipedream --num-microbatches 2 --optimizer adamw --delay-fix predict

# The oracle resumes from train's checkpoint, and train from the oracle's.
run_logged 120 ref_from_train "$NB" reference "${FLAGS[@]}" --stages 3 --schedule 2bw --num-microbatches 3 \
  --optimizer muon --delay-fix ef --load "$WORK/b_2bw_muon_ef"
same_state "the oracle resumes from train's 2bw+ef checkpoint" "$WORK/full_2bw_muon_ef.log" "$WORK/ref_from_train.log"
run_logged 120 train_from_ref "$NB" train "${FLAGS[@]}" --stages 3 --schedule pipedream --num-microbatches 2 \
  --optimizer soap --load "$WORK/r_pipedream_soap"
same_state "train resumes from the oracle's pipedream+soap checkpoint" "$WORK/full_pipedream_soap.log" \
  "$WORK/train_from_ref.log"

if [ "$HAVE_MPI" = 1 ]; then
  M=(--schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef)
  run_logged 120 mpi_stop mpirun --oversubscribe -np 3 "$NB" train "${FLAGS[@]}" "${M[@]}" --save "$WORK/m" \
    --save-interval 3 --exit-interval 5
  run_logged 120 mpi_res mpirun --oversubscribe -np 3 "$NB" train "${FLAGS[@]}" "${M[@]}" --load "$WORK/m"
  same_state "mpirun -np 3: 2bw+ef stopped after 5 and resumed" "$WORK/full_2bw_muon_ef.log" "$WORK/mpi_res.log"
  run_logged 120 mpi_res_zb mpirun --oversubscribe -np 3 "$NB" train "${FLAGS[@]}" --schedule zb-h1 \
    --num-microbatches 3 --optimizer soap --load "$WORK/a_zb-h1_soap"
  same_state "mpirun -np 3: zb-h1+soap stopped in one process, resumed under mpirun" \
    "$WORK/full_zb-h1_soap.log" "$WORK/mpi_res_zb.log"
  run_logged 120 mpi_res_pd mpirun --oversubscribe -np 3 "$NB" train "${FLAGS[@]}" --schedule pipedream \
    --num-microbatches 2 --optimizer adan --load "$WORK/a_pipedream_adan"
  same_state "mpirun -np 3: pipedream+adan stopped in one process, resumed under mpirun" \
    "$WORK/full_pipedream_adan.log" "$WORK/mpi_res_pd.log"
  cp -r "$WORK/m" "$WORK/m_bad"
  printf 'X' | dd of="$WORK/m_bad/step_5/stage_2.safetensors" bs=1 seek=3000 conv=notrunc status=none
  before=$(ls -R "$WORK/m_bad" | md5sum)
  expect_mpi_failure damaged 3 \
    "rank 2 (stage 2): '.*m_bad/step_5/stage_2.safetensors': its sha256 differs from the manifest's field 'sha256'" \
    "${FLAGS[@]}" "${M[@]}" --load "$WORK/m_bad" --save "$WORK/m_bad" --save-interval 1
  [ "$(ls -R "$WORK/m_bad" | md5sum)" = "$before" ] && pass "a damaged checkpoint: nothing was written" \
    || fail "the damaged checkpoint's directory changed"
else
  echo "skip: mpirun cases (this nobubble has no MPI)"
fi

# Resharding: gpipe and 1f1b bits do not depend on the cut. The optimizer state's hash does (it is taken stage
# by stage), so the resumed run's final checkpoint is loaded back into P stages by a run with no step left,
# which prints the hashes of exactly what it loaded, in P's cut.
reshard_case() {
  local id=$1 p=$2 q=$3
  shift 3
  local F=("${FLAGS[@]}" "$@")
  run_logged 120 "rs_full_$id" "$NB" reference "${F[@]}" --stages "$p"
  run_logged 120 "rs_stop_$id" "$NB" train "${F[@]}" --stages "$p" --save "$WORK/rs_$id" --save-interval 5 \
    --exit-interval 5
  run_logged 120 "rs_res_$id" "$NB" train "${F[@]}" --stages "$q" --load "$WORK/rs_$id" --save "$WORK/rsq_$id" \
    --save-interval 8
  run_logged 120 "rs_back_$id" "$NB" train "${F[@]}" --stages "$p" --load "$WORK/rsq_$id"
  grep -q "resharded from $p to $q stages" "$WORK/rs_res_$id.log" || fail "$id: no reshard line"
  [ "$(hash_of "$WORK/rs_res_$id.log")" = "$(hash_of "$WORK/rs_full_$id.log")" ] || fail "$id: weights differ"
  same_state "$id: saved on $p stages, resumed on $q, its end loaded back into $p" "$WORK/rs_full_$id.log" \
    "$WORK/rs_back_$id.log"
}
reshard_case gpipe_2to3 2 3 --schedule gpipe --num-microbatches 2 --optimizer adamw
reshard_case gpipe_4to1 4 1 --schedule gpipe --num-microbatches 2 --optimizer soap --num-layers 4
reshard_case 1f1b_2to3 2 3 --schedule 1f1b --num-microbatches 3 --optimizer muon
reshard_case 1f1b_4to1 4 1 --schedule 1f1b --num-microbatches 4 --optimizer adamw --num-layers 4
reshard_case zb-h1_3to2 3 2 --schedule zb-h1 --num-microbatches 3 --optimizer muon
reshard_case 2bw_noclip_3to2 3 2 --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef --clip-grad 0
# 2bw with its default per-stage clip: after a reshard the norms are the new stages', so the run differs from
# the uninterrupted one from its first step on; what it loads is exactly what was saved (a resume that runs no
# step ends on the saved state).
B2=("${FLAGS[@]}" --schedule 2bw --num-microbatches 3 --optimizer muon --delay-fix ef)
run_logged 120 rs_2bw_stop "$NB" train "${B2[@]}" --stages 3 --save "$WORK/rs_2bw" --save-interval 5 --exit-interval 5
run_logged 120 rs_2bw_load "$NB" train "${B2[@]}" --stages 2 --train-iters 5 --lr-decay-iters 8 --load "$WORK/rs_2bw"
[ "$(hash_of "$WORK/rs_2bw_load.log")" = "$(hash_of "$WORK/rs_2bw_stop.log")" ] \
  && pass "2bw, per-stage clip: 3 stages' checkpoint loads into 2 with the saved weights" \
  || fail "2bw reshard load: $(hash_of "$WORK/rs_2bw_load.log") vs $(hash_of "$WORK/rs_2bw_stop.log")"
run_logged 120 rs_2bw_run "$NB" train "${B2[@]}" --stages 2 --load "$WORK/rs_2bw"
expect_error 1 "field 'stages' is 3 there, 2 in this run: pipedream's weight stash depends on the stage" \
  "$NB" train "${FLAGS[@]}" --stages 2 --schedule pipedream --num-microbatches 2 --optimizer adamw \
  --load "$WORK/a_pipedream_adamw"
expect_error 1 "field 'identity.lr_schedule' is 'cosine lr 0.001 min_lr 0 warmup 3 decay 8 wsd_decay 1' there, 'cosine lr 0.002" \
  "$NB" train "${FLAGS[@]}" --stages 3 --schedule 2bw --num-microbatches 3 --optimizer adamw --lr 2e-3 --load "$WORK/a_2bw_adamw"
expect_error 1 "field 'identity.schedule' is '2bw' there, '1f1b' in this run" \
  "$NB" train "${FLAGS[@]}" --stages 3 --schedule 1f1b --num-microbatches 3 --optimizer adamw --load "$WORK/a_2bw_adamw"

# The run's clock over mpirun: the checkpoint keeps the last stage's elapsed_s, and the resumed run's metrics go
# on from it.
if [ "$HAVE_MPI" = 1 ]; then
  C=("${FLAGS[@]}" --schedule 2bw --num-microbatches 2 --optimizer adamw --metrics "$WORK/clock.jsonl")
  run_logged 120 clock_stop mpirun --oversubscribe -np 2 "$NB" train "${C[@]}" --save "$WORK/clock" --save-interval 3 \
    --exit-interval 3
  run_logged 120 clock_resume mpirun --oversubscribe -np 2 "$NB" train "${C[@]}" --load "$WORK/clock"
  saved_s=$(grep -o '"elapsed_s": [0-9.]*' "$WORK/clock/step_3/manifest.json" | awk '{print $2}')
  clock=$(python3 -c "import json, sys
r = [json.loads(l)['elapsed_s'] for l in open(sys.argv[1])]
s = float(sys.argv[2])
print('ok' if len(r) == 8 and s > 0 and all(b > a for a, b in zip(r[3:], r[4:])) and r[3] > s else r)" \
    "$WORK/clock.jsonl" "${saved_s:-0}")
  [ "$clock" = ok ] && pass "mpirun: elapsed_s saved with step 3 ($saved_s s) and continued on resume" \
    || fail "mpirun clock: saved '$saved_s', records $clock"
fi
finish
