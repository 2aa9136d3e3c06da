#!/usr/bin/env bash
# The main job: train the `tiny` preset on the fortunes corpus (bytes, vocab 256) for about three minutes on
# two cores, printing progress and writing metrics. Usage: run/train_fortunes.sh NOBUBBLE CORPUS OUTDIR
set -euo pipefail
nobubble=${1:?usage: train_fortunes.sh NOBUBBLE CORPUS OUTDIR}
corpus=${2:?corpus file}
outdir=${3:?output folder}
mkdir -p "$outdir"
rm -f "$outdir/metrics.jsonl"
"$nobubble" train --config run/configs/tiny_fortunes.toml --data "$corpus" --metrics "$outdir/metrics.jsonl" \
  | tee "$outdir/train.log"
echo "metrics: $outdir/metrics.jsonl"
