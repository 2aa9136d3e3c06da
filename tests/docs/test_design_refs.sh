#!/usr/bin/env bash
# The repository's references to its design document hold (docs/DESIGN.md):
#   1. no file points outside the repository, at the design notes the project was started from (a parent
#      folder's shared/ DESIGN or NOTES): a clone does not have them;
#   2. docs/DESIGN.md exists and its sections are "## 1." .. "## N." in order;
#   3. every "DESIGN section N", "DESIGN.md section N", "docs/DESIGN.md` sections N and M", "DESIGN §N" in any
#      file (also split over two comment lines) names a section that is a "## N." heading of docs/DESIGN.md.
# Files: `git ls-files` in a git checkout, else every file under the root but .git and build folders; text files
# only; this script left out (it spells the patterns). Usage: test_design_refs.sh [REPO_ROOT]
set -u
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT" || { echo "FAIL: no repository root '$ROOT'"; echo "0 passed, 1 failed"; exit 1; }
SELF=tests/docs/test_design_refs.sh
DESIGN=docs/DESIGN.md
PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok: $1"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL: $1"; }
finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" = 0 ]
}

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
  source_of_list="git ls-files"
  mapfile -t ALL < <(git ls-files)
else
  source_of_list="find"
  mapfile -t ALL < <(find . \( -name .git -o -name .deps -o -name 'build*' \) -prune -o -type f -print | sed 's|^\./||' | sort)
fi
FILES=()
for f in "${ALL[@]}"; do
  [ "$f" = "$SELF" ] && continue
  [ -f "$f" ] && grep -Iq '' "$f" 2>/dev/null && FILES+=("$f")  # text files (grep -I skips binary ones)
done
if [ "${#FILES[@]}" -lt 10 ]; then
  fail "only ${#FILES[@]} text files found by $source_of_list under $ROOT"
  finish
  exit
fi

# 1. Nothing outside the repository.
outside=$(grep -nIE -e '(\.\./|/work/)shared\b' -e 'shared/(DESIGN|NOTES)' -e 'shared NOTES' -- "${FILES[@]}")
if [ -z "$outside" ]; then
  pass "no reference outside the repository (../shared, shared/DESIGN, shared NOTES) in ${#FILES[@]} files ($source_of_list)"
else
  while IFS= read -r hit; do fail "points outside the repository: $hit"; done <<<"$outside"
fi

# 2. The sections of docs/DESIGN.md.
if [ ! -f "$DESIGN" ]; then
  fail "$DESIGN is missing"
  finish
  exit
fi
mapfile -t SECTIONS < <(grep -oE '^## [0-9]+\.' "$DESIGN" | grep -oE '[0-9]+')
expected=1
in_order=1
for n in "${SECTIONS[@]}"; do
  [ "$n" = "$expected" ] || in_order=0
  expected=$((expected + 1))
done
if [ "${#SECTIONS[@]}" -gt 0 ] && [ "$in_order" = 1 ]; then
  pass "$DESIGN has sections 1..${#SECTIONS[@]} in order"
else
  fail "$DESIGN's \"## N.\" headings are not 1, 2, 3, ... in order: ${SECTIONS[*]:-none}"
fi
is_section() {
  local s
  for s in "${SECTIONS[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

# 3. Every cited section exists. awk prints "FILE:LINE: MATCH<TAB>N" per number cited; a reference split over two
# lines is found by reading each line with the next one (its comment marker taken off) after it.
refs=$(awk '
function strip(s) { sub(/^[ \t]*(\/\/+|#+|\*+|--|;+)?[ \t]*/, "", s); return s }
# (mawk mishandles a repeated group with alternatives inside, so "and M", ", M" are taken one by one.)
function scan(text, limit, where,    rest, off, m, k, nums, n, i) {
  rest = text; off = 0
  while (match(rest, /DESIGN(\.md)?`?,?[ \t]*(sections?|§)[ \t]*[0-9]+/)) {
    if (off + RSTART > limit) break
    m = substr(rest, RSTART, RLENGTH)
    off += RSTART + RLENGTH - 1
    rest = substr(rest, RSTART + RLENGTH)
    while (match(rest, /^[ \t]*(,|and)[ \t]*[0-9]+/)) {
      m = m substr(rest, 1, RLENGTH)
      off += RLENGTH
      rest = substr(rest, RLENGTH + 1)
    }
    k = m; sub(/^DESIGN(\.md)?`?,?[ \t]*(sections?|§)/, "", k)
    n = split(k, nums, /[^0-9]+/)
    for (i = 1; i <= n; i++) if (nums[i] != "") printf "%s: %s\t%s\n", where, m, nums[i]
  }
}
FNR == 1 && NR > 1 { scan(prev, length(prev), prevwhere) }
FNR > 1 { scan(prev " " strip($0), length(prev), prevwhere) }
{ prev = $0; prevwhere = FILENAME ":" FNR }
END { if (NR > 0) scan(prev, length(prev), prevwhere) }
' "${FILES[@]}")
count=0
bad=0
while IFS=$'\t' read -r where n; do
  [ -z "$where" ] && continue
  count=$((count + 1))
  if ! is_section "$n"; then
    bad=$((bad + 1))
    fail "$where: section $n is not a \"## $n.\" heading of $DESIGN (it has 1..${#SECTIONS[@]})"
  fi
done <<<"$refs"
if [ "$count" = 0 ]; then
  fail "found no reference to a section of $DESIGN at all: is the pattern broken?"
elif [ "$bad" = 0 ]; then
  pass "$count references to sections of $DESIGN, every one a heading there"
fi
finish
