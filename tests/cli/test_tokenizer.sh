#!/usr/bin/env bash
# The trainer knows the tokenizer (issue 40; docs/formats.md "Data and batches", "Checkpoints"), with hand-written
# tokenizer.json files (identity only: nobubble reads no merges), so that no Python package is needed:
# - the tokenizer.json beside llm.c shards is the run's by default; its checkpoint keeps a copy and records its
#   sha256 and vocab_size; byte text has none; a model vocabulary larger than the tokenizer's trains;
# - bad input, one error line each: a tokenizer with more ids than --vocab-size (exit 2, found beside the shards or
#   given), --tokenizer naming a missing file or a file that is not a tokenizer.json (exit 2), --tokenizer with
#   byte text data (exit 2), and under mpirun the same line once; a resume with another tokenizer, or with none
#   where the checkpoint had one (exit 1, naming both; --allow-data-change resumes and says so).
# tests/interop/test_hf_tokenizer_export.py runs the same with Hugging Face's own tokenizers and transformers.
source "$(dirname "$0")/lib.sh"

# tokenizer_json PATH IDS [EXTRA]: a byte-level-BPE-shaped tokenizer.json: <|endoftext|> added as id 0, the vocab
# ids 1 .. IDS-1 ("t1", ...); EXTRA (a string) is added to the vocab's last token, for a file of the same ids but
# other bytes.
tokenizer_json() {
  python3 - "$@" <<'PY'
import json, sys
path, ids = sys.argv[1], int(sys.argv[2])
extra = sys.argv[3] if len(sys.argv) > 3 else ""
vocab = {"<|endoftext|>": 0, **{f"t{i}" + (extra if i == ids - 1 else ""): i for i in range(1, ids)}}
json.dump({"version": "1.0", "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": False,
           "lstrip": False, "rstrip": False, "normalized": False, "special": True}],
           "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(path, "w"), indent=2)
PY
}
make_shards() {  # make_shards DIR: train and val shards of ids below 300
  python3 - "$1" <<'PY'
import os, struct, sys
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for name, n in (("train_000000.bin", 4000), ("val_000000.bin", 800)):
    tokens = [(i * 7919 + n) % 300 for i in range(n)]
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *[0] * 253) + struct.pack(f"<{n}H", *tokens))
PY
}
sha_of() { sha256sum "$1" | awk '{print $1}'; }
# manifest_tokenizer MANIFEST: the manifest's run.tokenizer as "SHA256 VOCAB_SIZE", or "null"
manifest_tokenizer() {
  python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["run"]["tokenizer"]
print("null" if t is None else "%s %d" % (t["sha256"], t["vocab_size"]))' "$1"
}

make_shards "$WORK/tok"
tokenizer_json "$WORK/tok/tokenizer.json" 300
DATA=(--data "$WORK/tok/train_*.bin" --val-data "$WORK/tok/val_000000.bin")
FLAGS=("${TINY_FLAGS[@]}" --vocab-size 300 --train-iters 4 --lr-warmup-iters 1)

# The default: the tokenizer.json beside the shards, copied into the checkpoint, its identity in the manifest.
run_logged 120 saved "$NB" train "${DATA[@]}" "${FLAGS[@]}" --save "$WORK/ck" --save-interval 2 --exit-interval 2
STEP="$WORK/ck/step_2"
if cmp -s "$STEP/tokenizer.json" "$WORK/tok/tokenizer.json" \
   && [ "$(manifest_tokenizer "$STEP/manifest.json")" = "$(sha_of "$WORK/tok/tokenizer.json") 300" ] \
   && grep -q '"name": "tokenizer.json"' "$STEP/manifest.json"; then
  pass "the tokenizer.json beside the shards: copied into the checkpoint, its sha256 and 300 ids in the manifest"
else
  fail "the checkpoint's tokenizer: $(ls "$STEP"), $(manifest_tokenizer "$STEP/manifest.json")"
fi
# The same tokenizer under another path resumes (identity is the content).
cp "$WORK/tok/tokenizer.json" "$WORK/copy.json"
run_logged 120 resumed "$NB" train "${DATA[@]}" "${FLAGS[@]}" --tokenizer "$WORK/copy.json" --load "$WORK/ck"
grep -q '^resumed from ' "$WORK/resumed.log" && pass "--tokenizer naming a copy of the same file resumes" \
  || fail "resume with a copy: $(tail -n 2 "$WORK/resumed.log")"
# Byte text: no tokenizer (null in the manifest); a model vocabulary larger than the tokenizer's trains.
make_corpus "$WORK/corpus.txt"
run_logged 120 text "$NB" train --data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --train-iters 1 --save "$WORK/ck_text" \
  --save-interval 1
[ "$(manifest_tokenizer "$WORK/ck_text/step_1/manifest.json")" = null ] && [ ! -e "$WORK/ck_text/step_1/tokenizer.json" ] \
  && pass "byte text: no tokenizer (\"tokenizer\": null, no copy)" || fail "byte text: $(ls "$WORK/ck_text/step_1")"
run_logged 120 padded "$NB" train "${DATA[@]}" "${FLAGS[@]}" --vocab-size 320 --train-iters 2
grep -q '^final weights sha256 ' "$WORK/padded.log" && pass "--vocab-size 320 over a tokenizer of 300 ids trains" \
  || fail "padded vocabulary: $(tail -n 2 "$WORK/padded.log")"

# Bad input: one error line each.
expect_error 2 "tokenizer $WORK/tok/tokenizer.json beside the --data shards has 300 ids but the model's vocab_size is 256: set --vocab-size 300" \
  "$NB" train "${DATA[@]}" "${TINY_FLAGS[@]}" --train-iters 1
expect_error 2 "^nobubble: error: --tokenizer $WORK/tok/tokenizer.json has 300 ids but the model's vocab_size is 299: set --vocab-size 300" \
  "$NB" train --data "$WORK/tok/train_000000.bin" --tokenizer "$WORK/tok/tokenizer.json" "${TINY_FLAGS[@]}" \
  --vocab-size 299 --train-iters 1
expect_error 2 "tokenizer '$WORK/missing.json': no such file" \
  "$NB" train "${DATA[@]}" "${FLAGS[@]}" --tokenizer "$WORK/missing.json"
echo '{"version": "1.0", "merges": []}' >"$WORK/not_a_tokenizer.json"
expect_error 2 "tokenizer '$WORK/not_a_tokenizer.json' is not a Hugging Face tokenizer.json: no \"model\" object" \
  "$NB" train "${DATA[@]}" "${FLAGS[@]}" --tokenizer "$WORK/not_a_tokenizer.json"
expect_error 2 "--tokenizer $WORK/tok/tokenizer.json goes with llm.c shards (--data \*.bin): --data '$WORK/corpus.txt' is byte text" \
  "$NB" train --data "$WORK/corpus.txt" --tokenizer "$WORK/tok/tokenizer.json" "${TINY_FLAGS[@]}" --train-iters 1
expect_error 2 "--tokenizer $WORK/tok/tokenizer.json goes with llm.c shards" \
  "$NB" reference --data "$WORK/corpus.txt" --tokenizer "$WORK/tok/tokenizer.json" "${TINY_FLAGS[@]}" --train-iters 1
# A resume with another tokenizer (the same ids, other bytes), or with none: refused naming both, exit 1.
tokenizer_json "$WORK/other.json" 300 x
expect_error 1 "manifest.json': this run's tokenizer '$WORK/other.json' (300 ids, sha256 $(sha_of "$WORK/other.json" | head -c 12)...) is not the checkpoint's '$STEP/tokenizer.json' (300 ids, sha256 $(sha_of "$WORK/tok/tokenizer.json" | head -c 12)...) (--allow-data-change" \
  "$NB" train "${DATA[@]}" "${FLAGS[@]}" --tokenizer "$WORK/other.json" --load "$WORK/ck"
mkdir -p "$WORK/bare" && cp "$WORK"/tok/*.bin "$WORK/bare/"
expect_error 1 "this run has no tokenizer (no --tokenizer, no tokenizer.json beside the --data shards), the checkpoint was saved with '$STEP/tokenizer.json'" \
  "$NB" train --data "$WORK/bare/train_*.bin" --val-data "$WORK/bare/val_000000.bin" "${FLAGS[@]}" --load "$WORK/ck"
run_logged 120 allowed "$NB" train "${DATA[@]}" "${FLAGS[@]}" --tokenizer "$WORK/other.json" --load "$WORK/ck" \
  --allow-data-change --save "$WORK/ck" --save-interval 2
grep -q "^--allow-data-change: this run's tokenizer '$WORK/other.json'" "$WORK/allowed.log" \
  && [ "$(manifest_tokenizer "$WORK/ck/step_4/manifest.json")" = "$(sha_of "$WORK/other.json") 300" ] \
  && cmp -s "$WORK/ck/step_4/tokenizer.json" "$WORK/other.json" \
  && pass "--allow-data-change resumes with another tokenizer, says so, and its checkpoint records the new one" \
  || fail "--allow-data-change with another tokenizer: $(head -n 3 "$WORK/allowed.log")"

# Under mpirun, every rank finds the same error; the job prints it once.
if [ "$HAVE_MPI" = 1 ]; then
  expect_mpi_usage_error mpi_vocab 2 "has 300 ids but the model's vocab_size is 256" "${DATA[@]}" "${TINY_FLAGS[@]}" \
    --train-iters 1
fi
finish
