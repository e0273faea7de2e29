#!/usr/bin/env bash
# check_readme_help.sh README PROGRAM HEADING: the fenced block under "### HEADING" in the README
# must equal PROGRAM --help, so the README documents every flag the program has.
set -u
readme=$1 prog=$2 heading=$3
want=$("$prog" --help)
got=$(awk -v h="### $heading" '$0 == h { f = 1; next } f && /^```$/ { if (in_block) exit; in_block = 1; next } in_block { print }' "$readme")
if [ "$want" != "$got" ]; then
  echo "FAIL: README section '$heading' differs from $prog --help:"
  diff <(printf '%s\n' "$got") <(printf '%s\n' "$want")
  exit 1
fi
echo "PASS: README '$heading' matches --help"
