#!/usr/bin/env bash
# Checkpoints of the single-process loop (src/run/checkpoint.h; the pipeline's and the oracle's:
# test_pipeline_resume.sh):
# - for every optimizer, a run stopped by --exit-interval and resumed with --load ends on the uninterrupted
#   run's weights, stopped mid-warm-up (step 2) and mid-decay (step 5), and resumed from the last save before
#   the stop when the stop's own checkpoint is gone (a stop that is not a multiple of --save-interval);
# - the metrics file is appended to, less the stopped run's records after the checkpoint, and progress continues
#   from the resumed step, its elapsed_s clock too;
# - a checkpoint of another model, a damaged or truncated file, a missing manifest: one error naming the file
#   and the field, exit 1; flags that do not go together, or a loop that does not checkpoint yet: exit 2.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=(--data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 3 --train-iters 8 --lr-warmup-iters 3 --log-interval 1)

names_into OPTIMIZERS optimizers
for opt in "${OPTIMIZERS[@]}"; do
  F=("${FLAGS[@]}" --optimizer "$opt")
  run_logged 120 "full_$opt" "$NB" train "${F[@]}"
  want=$(hash_of "$WORK/full_$opt.log")
  # mid-warm-up: stop after step 2 (saved there), resume
  run_logged 120 "stop2_$opt" "$NB" train "${F[@]}" --save "$WORK/ck2_$opt" --save-interval 2 --exit-interval 2
  run_logged 120 "resume2_$opt" "$NB" train "${F[@]}" --load "$WORK/ck2_$opt"
  # mid-decay: saves after 3, stops after 5 (saving), the stop's checkpoint removed: resumes from step 3
  run_logged 120 "stop5_$opt" "$NB" train "${F[@]}" --save "$WORK/ck5_$opt" --save-interval 3 --exit-interval 5 \
    --metrics "$WORK/m_$opt.jsonl"
  rm -rf "$WORK/ck5_$opt/step_5"
  run_logged 120 "resume5_$opt" "$NB" train "${F[@]}" --load "$WORK/ck5_$opt" --metrics "$WORK/m_$opt.jsonl"
  got2=$(hash_of "$WORK/resume2_$opt.log")
  got5=$(hash_of "$WORK/resume5_$opt.log")
  [[ "$want" =~ ^[0-9a-f]{64}$ ]] && [ "$got2" = "$want" ] && [ "$got5" = "$want" ] \
    && pass "$opt: resumed after step 2 and from step 3 ends on the uninterrupted weights" \
    || fail "$opt: uninterrupted $want, resumed after 2 $got2, from 3 $got5"
  steps=$(grep -o '"step": [0-9]*' "$WORK/m_$opt.jsonl" | awk '{print $2}' | tr '\n' ' ')
  [ "$steps" = "1 2 3 4 5 6 7 8 " ] \
    && pass "$opt: metrics hold each step once (the stopped run's 4, 5 dropped, then 4..8)" \
    || fail "$opt: metrics steps $steps"
done
# The run's clock (elapsed_s): rising through the file, kept in the manifest, and the resumed run's going on from
# the checkpoint's (step 3's, which it resumed from), not from 0 (the stopped run's records 4, 5 are gone).
saved_s=$(grep -o '"elapsed_s": [0-9.]*' "$WORK/ck5_adamw/step_3/manifest.json" | awk '{print $2}')
clock=$(python3 - "$WORK/m_adamw.jsonl" "$saved_s" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
saved = float(sys.argv[2])
first, resumed = records[:3], records[3:]
rising = all(b["elapsed_s"] > a["elapsed_s"] for a, b in zip(records, records[1:]))
print("ok" if rising and abs(saved - first[2]["elapsed_s"]) < 1e-5 and resumed[0]["elapsed_s"] > saved
      else f"saved {saved}, elapsed {[r['elapsed_s'] for r in records]}")
PY
)
[ -n "$saved_s" ] && [ "$clock" = ok ] && pass "elapsed_s rises, is saved with step 3 and goes on from it on resume" \
  || fail "elapsed_s: $clock"
grep -q '^resumed from .*/step_3 (after step 3)$' "$WORK/resume5_adamw.log" && grep -q '^step      4/8 ' "$WORK/resume5_adamw.log" \
  && ! grep -q '^step      3/8 ' "$WORK/resume5_adamw.log" && pass "progress continues from the resumed step" \
  || fail "resume log: $(head -n 4 "$WORK/resume5_adamw.log")"

CK="$WORK/ck5_adamw"
expect_error 1 "field 'identity.model.hidden_size' is '64' there, '96' in this run" \
  "$NB" train "${FLAGS[@]}" --hidden-size 96 --load "$CK"
expect_error 1 "field 'identity.--weight-decay' is '0.1' there, '0.2' in this run" \
  "$NB" train "${FLAGS[@]}" --weight-decay 0.2 --load "$CK"
cp -r "$CK" "$WORK/truncated"
head -c 1000 "$CK/step_3/stage_0.safetensors" >"$WORK/truncated/step_3/stage_0.safetensors"
expect_error 1 "truncated/step_3/stage_0.safetensors': 1000 bytes, the manifest's field 'bytes' says" \
  "$NB" train "${FLAGS[@]}" --load "$WORK/truncated"
cp -r "$CK" "$WORK/flipped"
printf 'X' | dd of="$WORK/flipped/step_3/stage_0.safetensors" bs=1 seek=5000 conv=notrunc status=none
expect_error 1 "flipped/step_3/stage_0.safetensors': its sha256 differs from the manifest's field 'sha256'" \
  "$NB" train "${FLAGS[@]}" --load "$WORK/flipped"
rm "$WORK/flipped/step_3/manifest.json"
expect_error 1 "no complete checkpoint there" "$NB" train "${FLAGS[@]}" --load "$WORK/flipped"
expect_error 2 "--save needs --save-interval N" "$NB" train "${FLAGS[@]}" --save "$WORK/x"
expect_error 2 "--save-interval and --save-keep go with --save DIR" "$NB" train "${FLAGS[@]}" --save-interval 2
expect_error 2 "--signal-at-step needs --save DIR" "$NB" train "${FLAGS[@]}" --signal-at-step 2

# The plain loop's checkpoint is the pipeline's too: one stage's file loads into 3 stages (a reshard) and into
# the oracle, and both end on the uninterrupted weights (untied: the pipeline does not split a tied embedding).
U=(--untie-embeddings-and-output-weights --optimizer adamw)
run_logged 120 untied_full "$NB" train "${FLAGS[@]}" "${U[@]}"
run_logged 120 untied_stop "$NB" train "${FLAGS[@]}" "${U[@]}" --save "$WORK/ck_untied" --save-interval 4 --exit-interval 4
run_logged 120 untied_p3 "$NB" train "${FLAGS[@]}" "${U[@]}" --stages 3 --load "$WORK/ck_untied"
run_logged 120 untied_ref "$NB" reference "${FLAGS[@]}" "${U[@]}" --stages 2 --load "$WORK/ck_untied"
want=$(hash_of "$WORK/untied_full.log")
[[ "$want" =~ ^[0-9a-f]{64}$ ]] && [ "$(hash_of "$WORK/untied_p3.log")" = "$want" ] \
  && [ "$(hash_of "$WORK/untied_ref.log")" = "$want" ] \
  && grep -q "resharded from 1 to 3 stages" "$WORK/untied_p3.log" \
  && pass "the plain loop's checkpoint resumes on 3 pipeline stages and in the oracle, ending on its weights" \
  || fail "plain $want, 3 stages $(hash_of "$WORK/untied_p3.log"), reference $(hash_of "$WORK/untied_ref.log")"

# --save-keep 2: only the two newest complete checkpoints stay.
run_logged 120 keep "$NB" train "${FLAGS[@]}" --save "$WORK/keep" --save-interval 2 --save-keep 2
[ "$(ls "$WORK/keep" | tr '\n' ' ')" = "step_6 step_8 " ] && pass "--save-keep 2 keeps step_6 and step_8" \
  || fail "--save-keep 2 left: $(ls "$WORK/keep" | tr '\n' ' ')"
finish
