#!/usr/bin/env bash
# The run length must not cost memory or start-up time (docs/DESIGN.md section 1, "Each iteration's actions when
# they are needed"): one line per run length with each rank's peak resident memory (VmHWM, as GNU time's %M
# reads it) and the seconds from launch to the first step's progress line, under mpirun -np 2 on the tiny model,
# then the ratio of the longest run's figures to the shortest's (flat: 1.0x).
# Usage: run/dev/startup_memory.sh NOBUBBLE [ITERS...]   (default 100 1000000; a benchmark, not a test)
set -euo pipefail
nb=${1:?usage: startup_memory.sh NOBUBBLE [ITERS...]}
shift
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(100 1000000)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000))"; done >"$work/corpus.txt"

# measure ITERS: prints "ITERS MAX_RSS_KB_RANK0 MAX_RSS_KB_RANK1 SECONDS_TO_FIRST_STEP"
measure() {
  local iters=$1 log="$work/run_$1.log"
  local start end
  start=$(date +%s.%N)
  # --exit-interval 1: the run ends after its first step, so the peak is start-up's and that step's.
  # Each rank under GNU time, writing its peak into a file named by its rank.
  timeout -k 5 600 mpirun --oversubscribe -np 2 \
    sh -c 'exec /usr/bin/time -f "max_rss_kb %M" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$work/rss_$iters" \
    "$nb" train --model tiny --seq-length 32 --micro-batch-size 2 --lr 1e-3 --data "$work/corpus.txt" \
    --num-microbatches 8 --train-iters "$iters" --log-interval 1 --exit-interval 1 2>&1 |
    while IFS= read -r line; do
      printf '%s %s\n' "$(date +%s.%N)" "$line"
    done >"$log" || { echo "the run of $iters iterations failed:"; tail -n 5 "$log"; exit 1; }
  end=$(awk '$2 == "step" { print $1; exit }' "$log")
  [ -n "$end" ] || { echo "no step line in the run of $iters iterations:"; tail -n 5 "$log"; exit 1; }
  local rss0 rss1
  rss0=$(awk '/max_rss_kb/ { print $2 }' "$work/rss_$iters.0")
  rss1=$(awk '/max_rss_kb/ { print $2 }' "$work/rss_$iters.1")
  echo "$iters $rss0 $rss1 $(echo "$end - $start" | bc -l)"
}

printf '%14s %16s %16s %18s\n' iterations "rank 0 VmHWM MiB" "rank 1 VmHWM MiB" "s to first step"
results=()
for iters in "${lengths[@]}"; do
  r=$(measure "$iters")
  results+=("$r")
  read -r n a b s <<<"$r"
  printf '%14s %16.1f %16.1f %18.2f\n' "$n" "$(echo "$a / 1024" | bc -l)" "$(echo "$b / 1024" | bc -l)" "$s"
done
read -r _ a0 b0 s0 <<<"${results[0]}"
read -r _ a1 b1 s1 <<<"${results[-1]}"
printf 'ratio %s / %s iterations: VmHWM %.2fx %.2fx, time to first step %.2fx (flat: 1.00x)\n' \
  "${lengths[-1]}" "${lengths[0]}" "$(echo "$a1 / $a0" | bc -l)" "$(echo "$b1 / $b0" | bc -l)" \
  "$(echo "$s1 / $s0" | bc -l)"
