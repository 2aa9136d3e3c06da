#!/usr/bin/env bash
# A checkpoint's stage files are safetensors that Hugging Face's own `safetensors` package reads (issue 38): a
# P = 2 x D = 2 run (mpirun, distributed optimizer) saves its last step, and test_checkpoint_safetensors.py reads
# every file of it with safetensors (PyTorch tensors), checking each file against the manifest (bytes, sha256), its
# names, dtypes and shapes against its header, its __metadata__, and its values against what the run printed: the
# SHA-256 of every stage's weights (final weights sha256) and optimizer state (final optimizer state sha256).
# Usage: test_checkpoint_safetensors.sh NOBUBBLE WORKDIR HF_PYTHON (exit 77: no MPI, or no `make hf-venv`).
source "$(dirname "$0")/../cli/lib.sh"
PY=${3:?usage: test_checkpoint_safetensors.sh NOBUBBLE WORKDIR HF_PYTHON}
if [ "$HAVE_MPI" != 1 ]; then echo "skip: this nobubble has no MPI"; exit 77; fi
if ! "$PY" -c 'import safetensors, torch' 2>/dev/null; then
  echo "skip: no safetensors in '$PY' (make hf-venv)"
  exit 77
fi
make_corpus "$WORK/corpus.txt"
run_logged 120 train "${MPI[@]}" -np 4 "$NB" train --data "$WORK/corpus.txt" "${TINY_FLAGS[@]}" --num-layers 4 \
  --untie-embeddings-and-output-weights --stages 2 --data-parallel-size 2 --use-distributed-optimizer \
  --num-microbatches 2 --optimizer adamw --train-iters 3 --save "$WORK/ck" --save-interval 3
weights=$(sed -n 's/^final weights sha256 //p' "$WORK/train.log")
optimizer=$(sed -n 's/^final optimizer state sha256 //p' "$WORK/train.log")
if [ -n "$weights" ] && [ -n "$optimizer" ] &&
   "$PY" "$(dirname "$0")/test_checkpoint_safetensors.py" "$WORK/ck/step_3" 2 "$weights" "$optimizer"; then
  pass "safetensors reads every file of the P = 2 x D = 2 checkpoint: names, shapes, metadata, values"
else
  fail "the checkpoint as safetensors reads it (weights '$weights', optimizer '$optimizer'):" \
    "$(tail -3 "$WORK/train.log")"
fi
finish
