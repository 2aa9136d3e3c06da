#!/usr/bin/env bash
# Builds the fortunes corpus: every plain-text file of Debian's `fortunes` package, concatenated in name order
# (the binary .dat indexes and the .u8 links are left out). Usage: run/prepare_fortunes.sh OUT.txt
set -euo pipefail
out=${1:?usage: prepare_fortunes.sh OUT.txt}
src=/usr/share/games/fortunes
if [ ! -d "$src" ]; then
  echo "nobubble: error: $src is missing: install Debian's fortunes package (make setup)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 | LC_ALL=C sort -z | xargs -0 cat > "$tmp"
mv "$tmp" "$out"
echo "fortunes corpus: $(stat -c %s "$out") bytes in $out"
