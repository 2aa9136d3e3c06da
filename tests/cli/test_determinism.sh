#!/usr/bin/env bash
# Same seed, same weights: across runs and across thread counts (1, 2 and 3: OPENBLAS_NUM_THREADS sets how many
# threads the CPU ops use, src/cpu/cpu_threads.h). A different seed gives different weights. The full `tiny` shape
# (hidden 256, T 128, 4 sequences) makes the GEMMs large enough to be cut into many tiles.
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
run e 3 --seed 7
run d 2 --seed 8
a=$(hash_of "$WORK/a.log"); b=$(hash_of "$WORK/b.log"); c=$(hash_of "$WORK/c.log"); d=$(hash_of "$WORK/d.log")
e=$(hash_of "$WORK/e.log")
[[ "$a" =~ ^[0-9a-f]{64}$ ]] && pass "hash printed: $a" || fail "no 'final weights sha256' line in a.log"
[ "$a" = "$b" ] && pass "same seed, same hash" || fail "same seed gave $a and $b"
[ "$a" = "$c" ] && pass "1 thread and 2 threads give the same hash" || fail "1 thread: $c, 2 threads: $a"
[ "$a" = "$e" ] && pass "3 threads give the same hash" || fail "3 threads: $e, 2 threads: $a"
[ "$a" != "$d" ] && pass "another seed, another hash" || fail "seeds 7 and 8 gave the same hash"
# The optimizers with linear algebra of their own: Muon's Newton-Schulz GEMMs, SOAP's eigen-decompositions and
# QR (LAPACK, on one OpenBLAS thread: src/cpu/blas_lapack.cpp); and an MoE model's grouped GEMMs.
for opt in muon soap; do
  for t in 1 2 3; do run "${opt}_$t" "$t" --seed 7 --optimizer "$opt"; done
  h1=$(hash_of "$WORK/${opt}_1.log"); h2=$(hash_of "$WORK/${opt}_2.log"); h3=$(hash_of "$WORK/${opt}_3.log")
  [[ "$h1" =~ ^[0-9a-f]{64}$ ]] && [ "$h1" = "$h2" ] && [ "$h1" = "$h3" ] && [ "$h1" != "$a" ] \
    && pass "$opt: 1, 2 and 3 threads give the same hash" || fail "$opt: 1 thread $h1, 2 threads $h2, 3 threads $h3"
done
for t in 1 2 3; do run "moe_$t" "$t" --seed 7 --model tiny-moe --num-layers 2; done
h1=$(hash_of "$WORK/moe_1.log"); h2=$(hash_of "$WORK/moe_2.log"); h3=$(hash_of "$WORK/moe_3.log")
[[ "$h1" =~ ^[0-9a-f]{64}$ ]] && [ "$h1" = "$h2" ] && [ "$h1" = "$h3" ] \
  && pass "tiny-moe: 1, 2 and 3 threads give the same hash" || fail "tiny-moe: 1 thread $h1, 2 threads $h2, 3 threads $h3"
finish
