#!/usr/bin/env bash
# --config files (src/cli/config_file.cpp):
# - each kind of bad file gets exit 2 and exactly one line `nobubble: error: --config 'FILE' line N...` naming the
#   key where there is one: a syntax error, an unclosed [header, a key given twice, a string where a number
#   belongs, a float for an integer, an array or a table for a single value, a [section], an unknown key, a value
#   the flag itself refuses; good files of every value type get past the file to the missing data;
# - random damage (bit flips, truncations, random bytes; 300 cases, bounded at 10 s each, about 10 s in all)
#   never crashes or hangs `nobubble train`: each run exits 2 (a usage error: the TOML or a key or a value) or 1
#   (a runtime error: here the data file that does not exist), with exactly one line `nobubble: error: ...`. The
#   undamaged file gets exactly the missing-data error, so the harness is checked too.
source "$(dirname "$0")/lib.sh"
CONFIG="$(dirname "$0")/../../run/configs/tiny_fortunes.toml"
MISSING="$WORK/no-such-corpus.txt"
cp "$CONFIG" "$WORK/good.toml"
expect_error 1 "$MISSING" "$NB" train --config "$WORK/good.toml" --data "$MISSING"

# bad_config NAME LINE PATTERN TEXT: the file NAME.toml holding TEXT (printf %b) gets exit 2 and one line naming
# the file and `line LINE`, then matching PATTERN (the key, where there is one).
bad_config() {
  local f="$WORK/$1.toml"
  printf '%b' "$4" >"$f"
  expect_error 2 "^nobubble: error: --config '$f' line $2[,:].*$3" "$NB" train --config "$f" --data "$MISSING"
}
bad_config syntax 2 "key 'lr': syntax error" 'model = "tiny"\nlr = = 3\n'
bad_config header 3 "syntax error" 'lr = 1e-3\nseed = 1\n[x\n'
bad_config twice 3 "key 'lr': given twice: " 'lr = 1e-3\nseed = 1\nlr = 2e-3\n'
bad_config string_for_number 2 "key 'lr': expected a number, got a string$" 'model = "tiny"\nlr = "fast"\n'
bad_config number_as_string 1 "key 'lr': expected a number, got a string$" 'lr = "3e-3"\n'
bad_config float_for_integer 2 "key 'train-iters': expected an integer, got a float$" 'lr = 1e-3\ntrain-iters = 2.5\n'
bad_config number_for_string 1 "key 'model': expected a string, got an integer$" 'model = 3\n'
bad_config number_for_flag 1 "key 'stop-on-nan': expected true or false, got an integer$" 'stop-on-nan = 1\n'
bad_config array 3 "key 'num-microbatches': expected an integer, got an array$" \
  'model = "tiny"\n\nnum-microbatches = [1, 2]\n'
bad_config inline_table 2 "key 'lr': expected a number, got a table$" 'seed = 3\nlr = { peak = 1e-3 }\n'
bad_config section 2 "unknown key 'train' for \`nobubble train\`$" 'lr = 1e-3\n[train]\nseed = 3\n'
bad_config unknown 2 "unknown key 'bogus-key' for \`nobubble train\`$" 'lr = 1e-3\nbogus-key = 3\n'
bad_config nested_config 1 "unknown key 'config'" 'config = "other.toml"\n'
bad_config control_key 2 "unknown key 'a\\\\x0ab'" 'lr = 1e-3\n"a\\nb" = 1\n'
bad_config out_of_range 1 "key 'stages': " 'stages = 99999999999\n'
# Every value type the flags take, each as TOML writes it, gets past the file (to the missing data: exit 1).
printf 'model = "tiny"\nlr = 1\nmin-lr = 1e-5\nseq-length = 32\nstop-on-nan = false\nno-stop-on-nan = false\n' \
  >"$WORK/types.toml"
expect_error 1 "$MISSING" "$NB" train --config "$WORK/types.toml" --data "$MISSING"
printf 'schedule = "gpipe"\nstages = 2\nlr = 1e-3\n' >"$WORK/reference.toml"
expect_error 1 "$MISSING" "$NB" reference --config "$WORK/reference.toml" --data "$MISSING"
: >"$WORK/empty.toml"
expect_error 2 "lr is required" "$NB" train --config "$WORK/empty.toml" --data "$MISSING"

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
