#!/usr/bin/env bash
# Checks that every C++/CUDA source git tracks or would add (untracked, not ignored) is formatted by
# the checked-in .clang-format. `scripts/check-format.sh --fix` rewrites them instead, new files
# too. Needs clang-format (Debian: clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.h' '*.cc' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if clang-format --dry-run --Werror "${files[@]}" 2>/tmp/loom-format.$$; then
  rm -f /tmp/loom-format.$$
  echo "${#files[@]} files follow .clang-format"
  exit 0
fi
grep -o '^[^:]*:[0-9]*' /tmp/loom-format.$$ | sort -u | head -20
echo "files above differ from .clang-format: run scripts/check-format.sh --fix"
rm -f /tmp/loom-format.$$
exit 1
