#!/usr/bin/env bash
# check_mlp.sh MIN_ACC CMD...: runs a fashion_mlp command line and fails unless its last epoch's
# test accuracy is at least MIN_ACC percent; prints the run's output.
set -u
min=$1; shift
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "FAIL: exit status $rc"; exit 1; }
acc=$(printf '%s\n' "$out" | sed -n 's/.*test acc \([0-9.]*\)%.*/\1/p' | tail -n 1)
[ -n "$acc" ] || { echo "FAIL: no 'test acc' line"; exit 1; }
awk -v a="$acc" -v m="$min" 'BEGIN { exit !(a + 0 >= m + 0) }' || { echo "FAIL: test accuracy $acc% < $min%"; exit 1; }
echo "PASS: test accuracy $acc% >= $min%"
