#!/usr/bin/env bash
# check_doc_outputs.sh README GUIDE MLP QUICKSTART: the outputs README.md and docs/guide.md print
# beside their commands are what the programs print. README's --metrics example (step 12 of a
# fashion_mlp run with the defaults): step, epoch, samples and lr as printed, loss within 1e-6 of it
# and accuracy within one sample. The guide's quickstart run: its first line as printed, its epoch
# 1 line's losses within 1e-4 and accuracy within 0.05 points, its save line (the directory aside).
# The numbers' last digits may move with the BLAS's kernels on another CPU; the tolerances allow
# for that and no more.
set -u
readme=$1 guide=$2 mlp=$3 qs=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# field NAME JSON: the value of "NAME" in a one-line JSON object of numbers
field() { sed -n "s/.*\"$1\": \([^,}]*\).*/\1/p" <<<"$2"; }
near() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'; }

# README: {"step": 12, "epoch": 0, "loss": ..., ...} (the object is cut by the text's line breaks)
doc=$(tr '\n' ' ' <"$readme" | grep -o '{"step": 12, [^`]*}' | head -n 1)
[ -n "$doc" ] || fail "no {\"step\": 12, ...} example in $readme"
grep -q 'step 12 of a run with the defaults' "$readme" || fail "the example's command changed in $readme"
"$mlp" --max-steps 12 --metrics "$dir/m" --no-progress >"$dir/out" 2>&1 || fail "fashion_mlp: $(cat "$dir/out")"
got=$(sed -n 12p "$dir/m")
echo "README: $doc"
echo "run:    $got"
for k in step epoch samples lr; do
    [ -n "$(field $k "$doc")" ] && [ "$(field $k "$doc")" = "$(field $k "$got")" ] ||
        fail "\"$k\": README says '$(field $k "$doc")', the run wrote '$(field $k "$got")'"
done
near "$(field loss "$got")" "$(field loss "$doc")" 1e-6 ||
    fail "\"loss\": README says $(field loss "$doc"), the run wrote $(field loss "$got")"
near "$(field accuracy "$got")" "$(field accuracy "$doc")" 0.0079 ||
    fail "\"accuracy\": README says $(field accuracy "$doc"), the run wrote $(field accuracy "$got")"

# docs/guide.md: the block of quickstart's output (a run with --checkpoint-dir ck1)
block=$(awk '/^```/ { if (on) exit; inb = !inb; next } inb && /^quickstart: 1 rank/ { on = 1 } on' "$guide")
[ -n "$block" ] || fail "no quickstart output block in $guide"
(cd "$dir" && "$qs" --checkpoint-dir ck1 >out.all 2>&1) || fail "quickstart: $(cat "$dir/out.all")"
# without the log's lines ("[lockstep warn] no usable CUDA device ..." in a CUDA build without a GPU)
grep -v '^\[lockstep ' "$dir/out.all" >"$dir/out.qs"
printf 'guide:\n%s\nrun:\n%s\n' "$block" "$(head -n 3 "$dir/out.qs")"
[ "$(sed -n 1p <<<"$block")" = "$(sed -n 1p "$dir/out.qs")" ] || fail "the first line differs"
nums() { sed -n 2p | sed 's/[^0-9. ]//g; s/  */ /g; s/^ //'; } # epoch, train loss, test loss, accuracy
read -r de dtr dte dacc <<<"$(nums <<<"$block")"
read -r ge gtr gte gacc <<<"$(nums <"$dir/out.qs")"
[ "$de" = 1 ] && [ "$ge" = 1 ] || fail "no epoch 1 line"
near "$gtr" "$dtr" 1e-4 && near "$gte" "$dte" 1e-4 && near "$gacc" "$dacc" 0.05 ||
    fail "epoch 1: the guide says '$dtr $dte $dacc', the run printed '$gtr $gte $gacc'"
[ "$(sed -n 3p <<<"$block")" = "$(sed -n 3p "$dir/out.qs")" ] || fail "the save line differs"
echo "PASS"
