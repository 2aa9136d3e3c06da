#!/usr/bin/env bash
# Same seed, same weights: across runs and across thread counts. A different seed gives different weights.
# The full `tiny` shape (hidden 256, T 128, 4 sequences) makes GEMMs large enough for OpenBLAS to use threads.
source "$(dirname "$0")/lib.sh"
make_corpus "$WORK/corpus.txt"
run() {  # run NAME THREADS [flags...]
  local name=$1 threads=$2
  shift 2
  OPENBLAS_NUM_THREADS=$threads timeout 120 "$NB" train --data "$WORK/corpus.txt" --model tiny --lr 1e-3 \
    --micro-batch-size 4 --seq-length 128 --eval-iters 1 --train-iters 3 --num-microbatches 2 "$@" >"$WORK/$name.log" 2>&1 || fail "run $name exited non-zero: $(tail -n 3 "$WORK/$name.log")"
}
run a 2 --seed 7
run b 2 --seed 7
run c 1 --seed 7
run d 2 --seed 8
a=$(hash_of "$WORK/a.log"); b=$(hash_of "$WORK/b.log"); c=$(hash_of "$WORK/c.log"); d=$(hash_of "$WORK/d.log")
[[ "$a" =~ ^[0-9a-f]{64}$ ]] && pass "hash printed: $a" || fail "no 'final weights sha256' line in a.log"
[ "$a" = "$b" ] && pass "same seed, same hash" || fail "same seed gave $a and $b"
[ "$a" = "$c" ] && pass "1 thread and 2 threads give the same hash" || fail "1 thread: $c, 2 threads: $a"
[ "$a" != "$d" ] && pass "another seed, another hash" || fail "seeds 7 and 8 gave the same hash"
# The optimizers with linear algebra of their own: Muon's Newton-Schulz GEMMs, SOAP's eigen-decompositions and
# QR (LAPACK, which would follow OpenBLAS's thread count if it were let: src/cpu/lapack.cpp).
for opt in muon soap; do
  run "${opt}_1" 1 --seed 7 --optimizer "$opt"
  run "${opt}_2" 2 --seed 7 --optimizer "$opt"
  h1=$(hash_of "$WORK/${opt}_1.log"); h2=$(hash_of "$WORK/${opt}_2.log")
  [[ "$h1" =~ ^[0-9a-f]{64}$ ]] && [ "$h1" = "$h2" ] && [ "$h1" != "$a" ] \
    && pass "$opt: 1 thread and 2 threads give the same hash" || fail "$opt: 1 thread $h1, 2 threads $h2"
done
finish
