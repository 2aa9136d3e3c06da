#!/usr/bin/env bash
# Training writes its progress lines and metrics file; a --config file gives the same run as the same flags.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
M="$WORK/metrics.jsonl"
timeout 120 "$NB" train --data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --train-iters 6 --eval-interval 3 \
  --metrics "$M" >"$WORK/flags.log" 2>&1 || fail "train exited non-zero: $(tail -n 3 "$WORK/flags.log")"
[ "$(wc -l <"$M")" = 6 ] && pass "6 metrics lines" || fail "metrics has $(wc -l <"$M") lines"
/usr/bin/python3 - "$M" <<'PY' && pass "metrics lines are JSON with the keys" || fail "metrics content"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6], rows
for r in rows:
    for k in ("loss", "lr", "grad_norm", "tokens_per_s"):
        assert k in r, (k, r)
assert "val_loss" in rows[2] and "val_loss" in rows[5] and "val_loss" not in rows[0], rows
PY
grep -q '^step      6/6 | loss ' "$WORK/flags.log" && pass "progress line" || fail "no progress line for step 6"

cat >"$WORK/run.toml" <<TOML
model = "tiny"
num-layers = 2
hidden-size = 64
ffn-hidden-size = 96
num-attention-heads = 4
num-query-groups = 2
micro-batch-size = 2
seq-length = 32
lr = 5.0   # overridden on the command line
eval-iters = 1
log-interval = 1
train-iters = 6
eval-interval = 3
TOML
timeout 120 "$NB" train --config "$WORK/run.toml" --data "$WORK/corpus.txt" --lr 1e-3 >"$WORK/config.log" 2>&1 \
  || fail "train --config exited non-zero: $(tail -n 3 "$WORK/config.log")"
[ "$(hash_of "$WORK/flags.log")" = "$(hash_of "$WORK/config.log")" ] && pass "--config run equals the flags run" \
  || fail "--config gave $(hash_of "$WORK/config.log"), flags gave $(hash_of "$WORK/flags.log")"
finish
