#!/usr/bin/env bash
# check_precision.sh FASHION_MLP: trains 2 epochs on 20k samples in fp32, bf16 and fp16 (and fp16
# with activation checkpointing) and fails unless each reaches within 1 point of fp32's accuracy.
set -u
mlp=$1
acc() {
  out=$("$mlp" --epochs 2 --train-limit 20000 --test-limit 5000 --no-progress "$@" 2>&1) || { printf '%s\n' "$out"; echo "FAIL: $*"; exit 1; }
  printf '%s\n' "$out" | sed -n 's/.*test acc \([0-9.]*\)%.*/\1/p' | tail -n 1
}
ref=$(acc --precision fp32)
echo "fp32: $ref%"
for args in "--precision bf16" "--precision fp16" "--precision fp16 --checkpoint-activations=2"; do
  a=$(acc $args)
  echo "$args: $a%"
  awk -v a="$a" -v r="$ref" 'BEGIN { d = a - r; if (d < 0) d = -d; exit !(a != "" && d <= 1.0) }' ||
    { echo "FAIL: $args reached $a%, fp32 $ref%"; exit 1; }
done
echo "PASS"
