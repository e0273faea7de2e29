#!/usr/bin/env bash
# check_emu_cnn.sh RESNET_EMU OOM_EMU RUN: the CNN programs on an emulated GPU (see
# check_emu_mlp.sh: cuda:0 runs the CUDA backend's own code, its cuDNN convolutions answered by a
# stand-in). fashion_resnet on a narrow ResNet (widths 4,8,8, batch 32, lr 0.01, real
# Fashion-MNIST) against the same run on the CPU, step by step and in the parameters at the end
# (at lr 0.1 this narrow net amplifies rounding differences to 1e-4 within a few steps):
#   - f32 with --augment for 2 epochs (the training set's bytes rewritten before the second, and
#     the device copy made in the first must follow them): 1e-5;
#   - 2 ranks through MPI with --sync-bn (statistics all-reduced from device buffers): f32 1e-5,
#     and bf16 1e-2 (the tolerance of the bf16 parity tests: batch statistics of bf16 activations
#     differ by an ulp of bf16 when their sums differ in order; in these 4 steps at lr 0.01 the
#     parameters move little, so this case mostly checks the losses);
#   - a checkpoint at step 8 (batch-norm running statistics included) resumed on cuda: bitwise
#     the run never stopped, with --dropout 0.2 (the CUDA kernel's masks follow the restored step;
#     against the CPU they are compared in test_emu_fashion_mlp: here the masks came out the
#     same bits on both, but with them this narrow net's trajectory amplifies the CPU and GPU
#     rounding past 1e-5 by step 8, the pooled features 6e-6 apart at step 7);
# then --batch-size auto under a 4 MiB cap on cuda (the trials run out of the caching
# allocator's capped memory, and the batch found fits with 10% headroom), and oom_challenge on cuda
# under a 6 MiB cap: the baseline fails with the out-of-memory error naming cuda:0, the cap and
# the remedies, and every remedy fits. Last, the launches of a bf16 step with micro-batches and
# recomputation: the weights cast once, the gradients zeroed in multi-tensor launches.
set -u
prog=$(realpath "$1") oom=$(realpath "$2") run=$(realpath "$3")
source "$(dirname "$0")/emu/runs.sh"
base=(--widths 4,8,8 --train-limit 256 --test-limit 128 --batch-size 32 --lr 0.01 --warmup-steps 2 --no-progress)

# (the two runs side by side: train_bg in emu/runs.sh)
train_bg cpu -- --device cpu --epochs 2 --augment
train_bg cuda -- --device cuda --epochs 2 --augment
train_wait
close cuda cpu 1e-5

launch=("$run" -n 2)
nol=ASAN_OPTIONS=detect_leaks=0 # Open MPI's own allocations, not freed at exit
train np2_cpu "$nol" -- --device cpu --comm mpi --epochs 1 --sync-bn
train np2_cuda "$nol" -- --device cuda --comm mpi --epochs 1 --sync-bn
close np2_cuda np2_cpu 1e-5
train np2b_cpu "$nol" -- --device cpu --comm mpi --epochs 1 --sync-bn --precision bf16
train np2b_cuda "$nol" -- --device cuda --comm mpi --epochs 1 --sync-bn --precision bf16
close np2b_cuda np2b_cpu 1e-2
launch=()

base=(--widths 4,8,8 --train-limit 128 --test-limit 64 --batch-size 32 --lr 0.01 --warmup-steps 2 --no-progress)
train straight -- --device cuda --epochs 3 --checkpoint-dir ck --dropout 0.2
train first -- --device cuda --epochs 3 --checkpoint-dir ck --max-steps 8 --save-every 8 --dropout 0.2
cp first.loss resumed.loss
train resumed -- --device cuda --epochs 3 --checkpoint-dir ck --resume ck/step-00000008 --dropout 0.2
close resumed straight 0

auto=$("$prog" "${base[@]}" --device cuda --epochs 1 --batch-size auto --memory-cap 4MiB --max-steps 2 2>&1) ||
    fail "--batch-size auto: $auto"
line=$(grep -m1 '^batch-size auto:' <<<"$auto") || fail "--batch-size auto reported no batch: $auto"
echo "$line"
grep -qE '^batch-size auto: [0-9]+ per rank \(peak [0-9.]+ MiB of the 4.00 MiB cap, limit 3.60 MiB' <<<"$line" ||
    fail "--batch-size auto: unexpected report"
peak=$(sed -E 's/.*\(peak ([0-9.]+) MiB.*/\1/' <<<"$line")
awk -v p="$peak" 'BEGIN { exit !(p > 0 && p <= 3.60) }' || fail "--batch-size auto: peak $peak MiB over the 3.60 MiB limit"
grep -q "device cuda:0" <<<"$auto" || fail "--batch-size auto did not train on cuda:0"

out=$("$oom" --device cuda --widths 4,8 --blocks 1 --image-size 16 --batch-size 64 --steps 1 --memory-cap 6MiB 2>&1) ||
    fail "oom_challenge on cuda: $out"
echo "$out"
grep -q "out of memory on cuda:0: cannot allocate .* the cap is 6.00 MiB" <<<"$out" ||
    fail "oom_challenge: no out-of-memory error naming cuda:0 and the cap"
grep -q "To fit: a smaller --batch-size, --precision bf16|fp16 .* or --checkpoint-activations" <<<"$out" ||
    fail "oom_challenge: the error does not name the remedies"
grep -q "^challenge met: the baseline exceeds the cap and every remedy fits" <<<"$out" || fail "oom_challenge: not met"
# LOCKSTEP_GPU_MEMORY=limit:SIZE: the cap of the caching allocator, which counts the memory it holds
# from the device (its cache and 2 MiB segments included), not only the blocks in use. Each
# out-of-memory error states the cap and where it comes from, also where the limit on held memory
# is what refused (it used to say "could not provide 3.06 MiB; 1016.51 KiB is already in use", no
# cap, under a limit of 4.5 MiB; under 1 KiB "could not provide 144 B ...; 0 B is already in use")
out=$(LOCKSTEP_GPU_MEMORY=limit:1KiB "$prog" "${base[@]}" --device cuda --epochs 1 --max-steps 1 2>&1) &&
    fail "a 1 KiB limit: the model fitted: $out"
echo "$out"
grep -qF "could not provide 144 B for conv2d weight (it holds 0 B from cuda:0, and a segment of 2.00 MiB more would pass the limit of 1.00 KiB (LOCKSTEP_GPU_MEMORY=limit:1KiB)); 0 B is already in use, the peak so far is 0 B. The model" <<<"$out" ||
    fail "a 1 KiB limit: the error does not state the limit"
out=$(LOCKSTEP_GPU_MEMORY=limit:4.5MiB "$prog" "${base[@]}" --device cuda --epochs 1 --train-limit 256 --batch-size 256 --max-steps 1 2>&1) &&
    fail "a 4.5 MiB limit: batch 256 fitted: $out"
echo "$out"
grep -qF "could not provide 3.06 MiB for conv2d output (it holds 2.00 MiB from cuda:0, and a segment of 4.00 MiB more would pass the limit of 4.50 MiB (LOCKSTEP_GPU_MEMORY=limit:4.5MiB)); 1016.51 KiB is already in use, the peak so far is 1016.51 KiB. To fit, try a smaller --batch-size" <<<"$out" ||
    fail "a 4.5 MiB limit: the error does not state the limit"
out=$(LOCKSTEP_GPU_MEMORY=limit:3MiB "$prog" "${base[@]}" --device cuda --epochs 1 --train-limit 256 --batch-size 256 --max-steps 1 2>&1) &&
    fail "a 3 MiB limit: batch 256 fitted: $out"
grep -qF "cannot allocate 3.06 MiB for conv2d output; the cap is 3.00 MiB (LOCKSTEP_GPU_MEMORY=limit:3MiB), " <<<"$out" ||
    fail "a 3 MiB limit: the error does not say where the cap comes from: $out"
# oom_challenge takes the limit for its cap where --memory-cap is not given (it said "cap 48.00 GiB")
out=$(LOCKSTEP_GPU_MEMORY=limit:6MiB "$oom" --device cuda --widths 4,8 --blocks 1 --image-size 16 --batch-size 64 --steps 1 2>&1) ||
    fail "oom_challenge under LOCKSTEP_GPU_MEMORY=limit:6MiB: $out"
echo "$out"
grep -q "^oom_challenge: device cuda:0, 1 rank, cap 6.00 MiB per rank" <<<"$out" || fail "oom_challenge: not the limit's cap"
grep -qF "the cap is 6.00 MiB (LOCKSTEP_GPU_MEMORY=limit:6MiB), " <<<"$out" ||
    fail "oom_challenge under a limit: the error does not state the cap and where it comes from"
# bf16 with 2 micro-batches and recomputation: the weights' bf16 copies are cast once per step (a
# multi-tensor launch), not at each of the 4 forwards, and the gradients zeroed in multi-tensor
# launches, not a memset each. The launches and memsets of step 2 (EMU_TRACE: the run to step 2
# less the run to step 1) convert the 2 micro-batches' inputs and the weights once, and zero.
launches() {
    EMU_TRACE=1 "$prog" --widths 4,8,8 --train-limit 64 --test-limit 8 --batch-size 8 --no-progress --device cuda \
        --epochs 1 --precision bf16 --accum-steps 2 --checkpoint-activations --max-steps "$1" 2>&1 >/dev/null |
        grep -E '^emu: (launch|memset)' | sort
}
step2=$(diff <(launches 1) <(launches 2) | grep '^> ')
casts=$(grep -c 'convert' <<<"$step2") weights=$(grep -c 'mt_convert_kernel' <<<"$step2")
memsets=$(grep -c 'memset' <<<"$step2") zeros=$(grep -c 'mt_zero_kernel' <<<"$step2")
echo "bf16, 2 micro-batches, recomputation: $(wc -l <<<"$step2") launches and memsets in a step, $casts conversions" \
    "($weights of the weights), $memsets memsets, $zeros multi-tensor zeroings"
[ "$casts" -le 3 ] && [ "$weights" = 1 ] || fail "the weights are cast more than once a step: $(grep convert <<<"$step2")"
# (the memsets left: each micro-batch's correct count, the inf/NaN flag; not one per gradient: 29)
[ "$memsets" -le 3 ] && [ "$zeros" -ge 1 ] && [ "$zeros" -le 2 ] ||
    fail "the gradients are not zeroed in multi-tensor launches: $(grep -E 'memset|zero' <<<"$step2")"

echo "PASS: fashion_resnet and oom_challenge on the emulated GPU (f32 with --augment, 2 ranks with SyncBatchNorm, resume, batch-size auto, out of memory, bf16 weight casts and gradient zeroing)"
