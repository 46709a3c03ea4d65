#!/usr/bin/env bash
# Every C++ source and header of the tree as the root's .clang-format has it
# (clang-format --dry-run -Werror): the formatting commit stays applied.
# The chip table (Chips.def) is a hand-aligned table and is left out.
#   scripts/check-format.sh [SRC_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
format=${CLANG_FORMAT:-clang-format}
cd "$root"
if [ -d .git ]; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h')
else
  mapfile -t files < <(find compiler dialects models passes runtime targets test bench \
    \( -name '*.cpp' -o -name '*.h' \) -not -path '*/Inputs/*' | sort)
fi
bad=0
for f in "${files[@]}"; do
  case "$f" in */Inputs/*) continue ;; esac
  if ! "$format" --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: $format -i $f)"
    bad=$((bad + 1))
  fi
done
echo "${#files[@]} files checked, $bad not formatted"
[ "$bad" -eq 0 ]
