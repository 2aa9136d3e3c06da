#!/usr/bin/env bash
# Random damage to a --config file (bit flips, truncations, random bytes; 300 cases, bounded at 10 s each, about
# 10 s in all) never crashes or hangs `nobubble train`: each run exits 2 (a usage error: the TOML or a key or a
# value) or 1 (a runtime error: here the data file that does not exist), with exactly one line
# `nobubble: error: ...`. The undamaged file gets exactly the missing-data error, so the harness is checked too.
source "$(dirname "$0")/lib.sh"
CONFIG="$(dirname "$0")/../../run/configs/tiny_fortunes.toml"
MISSING="$WORK/no-such-corpus.txt"
cp "$CONFIG" "$WORK/good.toml"
expect_error 1 "$MISSING" "$NB" train --config "$WORK/good.toml" --data "$MISSING"

python3 - "$CONFIG" "$WORK/fuzz" <<'PY'
import os, random, sys
good = open(sys.argv[1], "rb").read()
os.makedirs(sys.argv[2], exist_ok=True)
rng = random.Random(1201)
for c in range(300):
    b = bytearray(good)
    if c % 3 == 0:
        for _ in range(1 + rng.randrange(3)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif c % 3 == 1:
        b = b[: rng.randrange(len(b))]
    else:
        b = bytearray(rng.randrange(256) for _ in range(rng.randrange(200)))
    open(f"{sys.argv[2]}/{c:03d}.toml", "wb").write(b)
PY
bad=0
for f in "$WORK"/fuzz/*.toml; do
  rc=0
  timeout -k 2 10 "$NB" train --config "$f" --data "$MISSING" >"$WORK/out" 2>"$WORK/err" || rc=$?
  lines=$(wc -l <"$WORK/err")
  if { [ "$rc" != 1 ] && [ "$rc" != 2 ]; } || [ "$lines" != 1 ] || ! grep -q '^nobubble: error: ' "$WORK/err"; then
    bad=$((bad + 1))
    fail "$(basename "$f"): exit $rc, $lines stderr lines: $(head -c 300 "$WORK/err")"
  fi
done
[ "$bad" = 0 ] && pass "300 damaged config files: each one error line, exit 1 or 2"
finish
