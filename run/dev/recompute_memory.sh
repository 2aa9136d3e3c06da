#!/usr/bin/env bash
# The memory recomputation opens up, on this machine (docs/DESIGN.md section 2, "Recomputation"): a gpipe run on
# two ranks whose stages the up-front memory check refuses without recomputation (and with selective) and accepts
# with full; one iteration of it under mpirun, each rank under GNU time, its peak resident memory (VmHWM) beside the
# memory check's plan for its stage. The process's own memory (the binary, MPI, OpenBLAS, the corpus: no stage's)
# is measured by the same run with one microbatch, and shown added to the plan.
# Usage: run/dev/recompute_memory.sh NOBUBBLE [MICROBATCHES]   (about 7 minutes on 2 cores; 24 GB of RAM, where
# 340 microbatches of 64 x 64 tokens need 33 GB on stage 0 without recomputation, 25 GB with selective)
set -euo pipefail
nb=${1:?usage: recompute_memory.sh NOBUBBLE [MICROBATCHES]}
m=${2:-340}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
python3 - "$work/corpus.txt" <<'PY'
import random, sys
r = random.Random(1)
words = "the quick brown fox jumps over lazy dog pipeline bubble gradient delay muon error feedback stage".split()
with open(sys.argv[1], "w") as f:
    n = 0
    while n < 12_000_000:
        line = " ".join(r.choice(words) for _ in range(12)) + "\n"
        f.write(line)
        n += len(line)
PY
# 16 blocks of width 64 at 64 tokens: a stash large against its compute, so that the check refuses in minutes.
model=(--model tiny --num-layers 16 --hidden-size 64 --ffn-hidden-size 96 --num-attention-heads 4
       --num-query-groups 2)
run=(train "${model[@]}" --data "$work/corpus.txt" --schedule gpipe --seq-length 64 --micro-batch-size 64 --lr 1e-3
     --train-iters 1 --eval-iters 0)
"$nb" info "${model[@]}" --stages 2 --seq-length 64 --micro-batch-size 64 --num-microbatches "$m" | tail -n 7
for g in none selective; do
  echo "--recompute-granularity $g:"
  if timeout -k 5 120 mpirun --oversubscribe -np 2 "$nb" "${run[@]}" --num-microbatches "$m" \
       --recompute-granularity "$g" >"$work/$g.log" 2>&1; then
    echo "  accepted (the check did not refuse it)"
  else
    grep -m 2 'needs' "$work/$g.log" | sed 's/^/  /'
  fi
done
# measure MICROBATCHES: one iteration with full recomputation, each rank's VmHWM (MiB) and its stage's plan (MiB).
measure() {
  timeout -k 5 1200 mpirun --oversubscribe -np 2 \
    sh -c 'exec /usr/bin/time -f "max_rss_kb %M" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$work/rss_$1" \
    "$nb" "${run[@]}" --num-microbatches "$1" --recompute-granularity full >"$work/full_$1.log" 2>&1 \
    || { echo "the run with $1 microbatches failed:"; tail -n 5 "$work/full_$1.log"; exit 1; }
  local plan
  plan=$(grep '^memory planned per stage, MiB:' "$work/full_$1.log" | cut -d: -f2)
  echo "$(awk '/max_rss_kb/ { printf "%.1f", $2 / 1024 }' "$work/rss_$1.0") $(awk '/max_rss_kb/ { printf "%.1f", $2 / 1024 }' "$work/rss_$1.1") $plan"
}
read -r base0 base1 baseplan0 baseplan1 < <(measure 1)
read -r rss0 rss1 plan0 plan1 < <(measure "$m")
grep -E '^(step|activation stashes)' "$work/full_$m.log"
awk -v r0="$rss0" -v r1="$rss1" -v p0="$plan0" -v p1="$plan1" -v b0="$base0" -v b1="$base1" \
    -v q0="$baseplan0" -v q1="$baseplan1" 'BEGIN {
  printf "%-6s %14s %14s %16s %20s %10s\n", "rank", "VmHWM MiB", "plan MiB", "VmHWM / plan", "process own MiB", "VmHWM / (plan + own)"
  printf "%-6s %14.1f %14.1f %15.3fx %20.1f %10.3fx\n", 0, r0, p0, r0 / p0, b0 - q0, r0 / (p0 + b0 - q0)
  printf "%-6s %14.1f %14.1f %15.3fx %20.1f %10.3fx\n", 1, r1, p1, r1 / p1, b1 - q1, r1 / (p1 + b1 - q1)
  print "process own: VmHWM of the same run with one microbatch, less its plan (the binary, MPI, OpenBLAS, the corpus)" }'
