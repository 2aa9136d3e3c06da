#!/usr/bin/env bash
# The data's identity is its content, not its spelling (issue 37, item 4; docs/formats.md "Data fingerprints"):
# - a checkpoint resumes from the same data given under another path (relative, absolute, a symlink, a copy, a
#   glob spelt otherwise) and ends on the uninterrupted run's weights;
# - data whose content changed (one byte inside a text file, a shard replaced, a shard appended to the glob) is
#   refused with one line naming the file, exit 1; --allow-data-change resumes anyway and says so in the log;
# - a shard truncated under a running job is one error line naming it, exit 1 (not SIGBUS).
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
FLAGS=("${TINY_FLAGS[@]}" --train-iters 6 --lr-warmup-iters 2)

run_logged 120 full "$NB" train --data "$WORK/corpus.txt" "${FLAGS[@]}"
# Saved with a relative --data (from inside $WORK), stopped after step 3.
(cd "$WORK" && timeout -k 5 120 "$NB" train --data corpus.txt "${FLAGS[@]}" --save ck --save-interval 3 \
   --exit-interval 3 >"$WORK/stop.log" 2>&1) || fail "stop: $(tail -n 3 "$WORK/stop.log")"
mkdir -p "$WORK/elsewhere"
cp "$WORK/corpus.txt" "$WORK/elsewhere/copy.txt"
ln -s "$WORK/corpus.txt" "$WORK/link.txt"
for spelling in "$WORK/corpus.txt" "$WORK/elsewhere/../corpus.txt" "$WORK/link.txt" "$WORK/elsewhere/copy.txt"; do
  name=resume_$(basename "$spelling" .txt)
  run_logged 120 "$name" "$NB" train --data "$spelling" "${FLAGS[@]}" --load "$WORK/ck"
  [ "$(hash_of "$WORK/$name.log")" = "$(hash_of "$WORK/full.log")" ] \
    && pass "--data '$spelling' resumes the checkpoint saved with 'corpus.txt' and ends on the uninterrupted weights" \
    || fail "--data '$spelling': $(grep -m 1 'error' "$WORK/$name.log")"
done

# One byte changed in the middle of the file, its size the same: refused, naming the file; allowed with the flag.
python3 - "$WORK/corpus.txt" "$WORK/changed.txt" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[len(data) // 2] ^= 1
open(sys.argv[2], "wb").write(data)
PY
expect_error 1 "--data file '$WORK/changed.txt' is not the file the checkpoint was saved with" \
  "$NB" train --data "$WORK/changed.txt" "${FLAGS[@]}" --load "$WORK/ck"
head -c 2000 "$WORK/corpus.txt" >"$WORK/shorter.txt"
expect_error 1 "--data file '$WORK/shorter.txt' is not the file the checkpoint was saved with: 2000 bytes" \
  "$NB" train --data "$WORK/shorter.txt" "${FLAGS[@]}" --load "$WORK/ck"
run_logged 120 allowed "$NB" train --data "$WORK/changed.txt" "${FLAGS[@]}" --load "$WORK/ck" --allow-data-change
grep -q "^--allow-data-change: --data file '$WORK/changed.txt' is not the file the checkpoint was saved with" \
  "$WORK/allowed.log" && grep -q '^resumed from ' "$WORK/allowed.log" \
  && pass "--allow-data-change resumes on changed data and says so in the log" \
  || fail "--allow-data-change: $(head -n 3 "$WORK/allowed.log")"

# llm.c shards: a glob spelt another way finds the same shards; a replaced or an added shard is refused.
make_shards() {  # make_shards DIR COUNT SEED
  python3 - "$1" "$2" "$3" <<'PY'
import os, struct, sys
out, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(out, exist_ok=True)
for k in range(count):
    tokens = [(i * 7919 + k * 31 + seed) % 256 for i in range(3000)]
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(os.path.join(out, f"shard_{k:02d}.bin"), "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))
PY
}
make_shards "$WORK/shards" 2 0
SHARD_FLAGS=("${TINY_FLAGS[@]}" --train-iters 4 --lr-warmup-iters 1)
run_logged 120 shards_stop "$NB" train --data "$WORK/shards/shard_*.bin" "${SHARD_FLAGS[@]}" --save "$WORK/ck_shards" \
  --save-interval 2 --exit-interval 2
run_logged 120 shards_full "$NB" train --data "$WORK/shards/shard_*.bin" "${SHARD_FLAGS[@]}"
run_logged 120 shards_resume "$NB" train --data "$WORK/shards/../shards/shard_0?.bin" "${SHARD_FLAGS[@]}" \
  --load "$WORK/ck_shards"
[ "$(hash_of "$WORK/shards_resume.log")" = "$(hash_of "$WORK/shards_full.log")" ] \
  && pass "a glob spelt otherwise resumes the shards' checkpoint and ends on the uninterrupted weights" \
  || fail "shards resume: $(grep -m 1 error "$WORK/shards_resume.log")"
make_shards "$WORK/other" 3 1
cp "$WORK/shards/shard_00.bin" "$WORK/other/shard_00.bin"
expect_error 1 "--data file '$WORK/other/shard_01.bin' is not the file the checkpoint was saved with" \
  "$NB" train --data "$WORK/other/shard_0[01].bin" "${SHARD_FLAGS[@]}" --load "$WORK/ck_shards"
cp "$WORK/shards/shard_01.bin" "$WORK/other/shard_01.bin"
expect_error 1 "--data matches 3 files, the checkpoint was saved with 2" \
  "$NB" train --data "$WORK/other/shard_*.bin" "${SHARD_FLAGS[@]}" --load "$WORK/ck_shards"

# A shard truncated under a running job (it is read while the job runs): one error line naming it, exit 1.
make_shards "$WORK/live" 1 2
timeout -k 5 60 "$NB" train --data "$WORK/live/shard_00.bin" "${TINY_FLAGS[@]}" --train-iters 100000 --log-interval 1 \
  >"$WORK/live.out" 2>"$WORK/live.err" &
LIVE=$!
for _ in $(seq 1 400); do grep -q '^step ' "$WORK/live.out" && break; sleep 0.05; done
truncate -s 1100 "$WORK/live/shard_00.bin"
rc=0
wait "$LIVE" || rc=$?
if [ "$rc" = 1 ] && [ "$(wc -l <"$WORK/live.err")" = 1 ] \
   && grep -q "^nobubble: error: data '$WORK/live/shard_00.bin': .*shrank" "$WORK/live.err"; then
  pass "a shard truncated under the running job: exit 1, '$(cat "$WORK/live.err")'"
else
  fail "a shard truncated under the running job: exit $rc, stderr: $(head -c 600 "$WORK/live.err")"
fi
finish
