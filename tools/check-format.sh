#!/usr/bin/env bash
# check-format.sh: checks that lockstep's C, C++ and CUDA sources are formatted as .clang-format says
# (clang-format 14, Debian 12's; other versions format some constructs differently, so they are not
# used). --fix formats them in place. Exit: 0 formatted, 1 some file is not (each named), 77 no
# clang-format 14 (the CTest skip code).
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "usage: tools/check-format.sh [--fix]" >&2; exit 2 ;;
esac
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null && "$c" --version | grep -q 'version 14\.'; then cf=$c; break; fi
done
if [ -z "$cf" ]; then
  echo "check-format: skipped: clang-format 14 not found (apt-get install clang-format)"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \
    -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)
fi
if [ "$fix" = 1 ]; then
  "$cf" -i "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
# One clang-format for every file (it checks each on its own, as the loop below does, and fails
# if any is not formatted): a process per file took 25 s of a 2-core machine. Only where it fails
# does the loop run, to name each file and show its first difference.
if "$cf" --dry-run -Werror "${files[@]}" >/dev/null 2>&1; then
  echo "check-format: ${#files[@]} files formatted"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$cf" --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "check-format: $f is not formatted (first difference below; tools/check-format.sh --fix formats it)"
    "$cf" "$f" | diff -u "$f" - | sed -n '1,12p' || true
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then echo "check-format: $bad of ${#files[@]} files not formatted"; exit 1; fi
echo "check-format: ${#files[@]} files formatted"
