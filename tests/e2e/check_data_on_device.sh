#!/usr/bin/env bash
# check_data_on_device.sh MLP [RESNET]: the batch gather from a data set kept "on the device"
# (LOCKSTEP_DATA_ON_DEVICE=on; on the CPU a copy in the context's allocator, gathered by the op
# table's gather_rows) trains exactly as the host gather: the same losses and accuracies to the
# printed digit, with the copies counted in peak memory (5000 x 784 pixel bytes + int32 labels and
# the 1000-sample test set, each set with its 256-value table: 4.51 MiB, where f32 images took
# 17.96; plus the batch buffers, 100 x 784 f32 images and labels (training and evaluation use the
# batch size), now in the context's allocator, in each of two slots used in turn (a batch's indices
# are staged into one while the device may still read the other): 0.60 MiB); a bad value is
# refused by name. With
# RESNET (fashion_resnet):
# --augment rewrites the training set's bytes in place every epoch, and the device copy must follow
# (ls_dataset_changed), so the epochs are again the same with and without it; and the test set's
# copy, made for an evaluation, is freed by the next training step (it held 7.5 MiB of a 16 MiB cap
# into epoch 2, which ran out) and counted by --batch-size auto's trials. Both also train the
# same with batches staged through the allocator and the next one prefetched (LOCKSTEP_PREFETCH=on,
# the GPU's path for a data set kept on the host).
set -u
mlp=$1 resnet=${2:-}
args=(--epochs 2 --train-limit 5000 --test-limit 1000 --batch-size 100 --no-progress)
fail() { echo "FAIL: $*"; exit 1; }
off=$(LOCKSTEP_DATA_ON_DEVICE=off "$mlp" "${args[@]}" 2>&1) || fail "off: $off"
on=$(LOCKSTEP_DATA_ON_DEVICE=on "$mlp" "${args[@]}" 2>&1) || fail "on: $on"
pf=$(LOCKSTEP_DATA_ON_DEVICE=off LOCKSTEP_PREFETCH=on "$mlp" "${args[@]}" 2>&1) || fail "prefetch: $pf"
printf 'off:\n%s\non:\n%s\nprefetch:\n%s\n' "$off" "$on" "$pf"
fields() { grep -E '^epoch ' | sed -E 's/ +[0-9]+ samples\/s.*//'; }
[ -n "$(fields <<<"$off")" ] || fail "no epoch lines"
[ "$(fields <<<"$off")" = "$(fields <<<"$on")" ] || fail "the epochs differ between off and on"
[ "$(fields <<<"$off")" = "$(fields <<<"$pf")" ] || fail "the epochs differ with LOCKSTEP_PREFETCH=on"
peak() { grep -E '^epoch ' | tail -n 1 | sed -E 's/.*peak memory ([0-9.]+) MiB.*/\1/'; }
p_off=$(peak <<<"$off") p_on=$(peak <<<"$on")
awk -v a="$p_off" -v b="$p_on" 'BEGIN { d = b - a; exit !(d >= 5.08 && d <= 5.14) }' ||
    fail "peak memory $p_off MiB (off) -> $p_on MiB (on): expected 5.11 MiB more (the two data sets as bytes and two slots' batch buffers)"
bad=$(LOCKSTEP_DATA_ON_DEVICE=sometimes "$mlp" "${args[@]}" 2>&1) && fail "a bad value was accepted"
grep -q "LOCKSTEP_DATA_ON_DEVICE='sometimes': use auto, on or off" <<<"$bad" || fail "unclear error: $bad"
if [ -n "$resnet" ]; then
    rargs=(--epochs 3 --train-limit 512 --test-limit 256 --augment --widths 8,8,8 --no-progress)
    r_off=$(LOCKSTEP_DATA_ON_DEVICE=off "$resnet" "${rargs[@]}" 2>&1) || fail "resnet off: $r_off"
    r_on=$(LOCKSTEP_DATA_ON_DEVICE=on "$resnet" "${rargs[@]}" 2>&1) || fail "resnet on: $r_on"
    r_pf=$(LOCKSTEP_DATA_ON_DEVICE=off LOCKSTEP_PREFETCH=on "$resnet" "${rargs[@]}" 2>&1) || fail "resnet prefetch: $r_pf"
    printf 'resnet --augment, off:\n%s\non:\n%s\nprefetch:\n%s\n' "$r_off" "$r_on" "$r_pf"
    [ "$(fields <<<"$r_off" | wc -l)" -eq 3 ] || fail "resnet: expected 3 epoch lines"
    [ "$(fields <<<"$r_off")" = "$(fields <<<"$r_on")" ] ||
        fail "resnet --augment: the epochs differ between off and on (a stale device copy?)"
    [ "$(fields <<<"$r_off")" = "$(fields <<<"$r_pf")" ] ||
        fail "resnet --augment: the epochs differ with LOCKSTEP_PREFETCH=on (a stale prefetched batch?)"
    # The test set's copy (7.5 MiB of 10000 images) lives from the evaluation to the next training
    # step only: it stayed, and epoch 2's step ran out of a 16 MiB cap beside it; and --batch-size
    # auto's trials evaluate too (the batch it found trained, then the evaluation ran out of 12 MiB).
    cargs=(--epochs 2 --train-limit 600 --widths 4,8 --no-progress)
    r_cap=$(LOCKSTEP_DATA_ON_DEVICE=on "$resnet" "${cargs[@]}" --batch-size 40 --memory-cap 16MiB 2>&1) ||
        fail "resnet, the test set on the device, 16 MiB cap: $r_cap"
    r_auto=$(LOCKSTEP_DATA_ON_DEVICE=on "$resnet" "${cargs[@]}" --batch-size auto --memory-cap 12MiB 2>&1) ||
        fail "resnet, the test set on the device, --batch-size auto under 12 MiB: $r_auto"
    printf 'resnet, the test set on the device:\n%s\n%s\n' "$r_cap" "$r_auto"
    [ "$(fields <<<"$r_cap" | wc -l)" -eq 2 ] && [ "$(fields <<<"$r_auto" | wc -l)" -eq 2 ] ||
        fail "resnet, the test set on the device: expected 2 epoch lines each"
fi
echo "PASS: identical epochs (prefetch too); peak memory $p_off -> $p_on MiB; bad value refused${resnet:+; augmented resnet identical}"
