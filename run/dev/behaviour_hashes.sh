#!/usr/bin/env bash
# The fixed set of runs a refactor must not change: one line per run, "NAME WEIGHTS_SHA256 OPTIMIZER_SHA256
# VAL_LOSS". Record it with the binary before the change, again after, and diff the two files; hashes compare
# only between runs on the same machine (OpenBLAS picks its kernels by CPU: docs/DESIGN.md section 6).
# Usage: run/dev/behaviour_hashes.sh NOBUBBLE OUT.txt   (about two minutes on 2 cores)
set -euo pipefail
nb=${1:?usage: behaviour_hashes.sh NOBUBBLE OUT.txt}
out=${2:?output file}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
for i in $(seq 1 400); do echo "line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000))"; done >"$work/corpus.txt"
tied=(--data "$work/corpus.txt" --model tiny --num-layers 5 --hidden-size 64 --ffn-hidden-size 96
       --num-attention-heads 4 --num-query-groups 2 --micro-batch-size 2 --seq-length 32 --lr 1e-3 --eval-iters 1
       --log-interval 100 --train-iters 6)
flags=("${tied[@]}" --untie-embeddings-and-output-weights)
# Every schedule, optimizer and delay fix the binary has, as it lists them (same binary, same runs, same order).
schedules=$("$nb" --list schedules)
optimizers=$("$nb" --list optimizers)
delay_fixes=$("$nb" --list delay-fixes | grep -vx none)
: >"$out"
record() {  # record NAME COMMAND...
  local name=$1 log="$work/$1.log"
  shift
  timeout -k 5 300 "$@" >"$log" 2>&1 || { echo "$name failed:"; tail -n 3 "$log"; exit 1; }
  local w o v
  w=$(grep '^final weights sha256 ' "$log" | awk '{print $4}' || true)
  o=$(grep '^final optimizer state sha256 ' "$log" | awk '{print $5}' || true)
  v=$(grep '^final val_loss ' "$log" | awk '{print $3}' || true)
  echo "$name ${w:--} ${o:--} ${v:--}" | tee -a "$out"
}
record train_tiny "$nb" train "${flags[@]}" --train-iters 8 --lr-warmup-iters 2 --lr-decay-style cosine
record train_tiny_tied "$nb" train "${tied[@]}"
for schedule in $schedules; do
  layers=(); [ "$schedule" = zb-v ] && layers=(--num-layers 6)  # two parts per stage, a block each
  record "ref_${schedule}_p3" "$nb" reference "${flags[@]}" "${layers[@]}" --schedule "$schedule" --stages 3 --num-microbatches 3
  record "inproc_${schedule}_p3" "$nb" train "${flags[@]}" "${layers[@]}" --schedule "$schedule" --stages 3 --num-microbatches 3
done
record mpi_1f1b_p3 mpirun --oversubscribe -np 3 "$nb" train "${flags[@]}" --schedule 1f1b --num-microbatches 3
record mpi_2bw_p2 mpirun --oversubscribe -np 2 "$nb" train "${flags[@]}" --schedule 2bw --num-microbatches 4
for opt in $optimizers; do
  record "ref_${opt}_2bw_p2" "$nb" reference "${flags[@]}" --optimizer "$opt" --schedule 2bw --stages 2 --num-microbatches 2
  record "train_${opt}" "$nb" train "${flags[@]}" --optimizer "$opt"
done
for fix in $delay_fixes; do
  record "ref_2bw_${fix}_p3" "$nb" reference "${flags[@]}" --schedule 2bw --stages 3 --num-microbatches 3 --delay-fix "$fix"
done
record ref_2bw_sync_p2 "$nb" reference "${flags[@]}" --schedule 2bw --stages 2 --num-microbatches 2 --delay-fix ef \
  --sync-start 1 --sync-cooldown 2
record ref_pipedream_sync_p2 "$nb" reference "${flags[@]}" --schedule pipedream --stages 2 --num-microbatches 2 \
  --optimizer lion --sync-start 2
record ref_global_clip_p2 "$nb" reference "${flags[@]}" --schedule 1f1b --stages 2 --num-microbatches 2 --clip-grad 0.05
# Tied embeddings for real (tiny is untied by default, so train_tiny_tied above is not): one stage, and across
# stages (the copy on the last part), synchronous and asynchronous, in process and under mpirun.
record tied_train_p1 "$nb" train "${tied[@]}" --tie-embeddings --num-microbatches 3
record tied_inproc_1f1b_p3 "$nb" train "${tied[@]}" --tie-embeddings --stages 3 --num-microbatches 3 --clip-grad 0.05
record tied_mpi_2bw_p3 mpirun --oversubscribe -np 3 "$nb" train "${tied[@]}" --tie-embeddings --schedule 2bw \
  --num-microbatches 3 --clip-grad 0.05
