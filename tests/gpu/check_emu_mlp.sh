#!/usr/bin/env bash
# check_emu_mlp.sh MLP_EMU RUN: the whole fashion_mlp program on an emulated GPU. MLP_EMU is
# fashion_mlp built with tests/gpu/emu (its cuda:0 runs the CUDA backend's own code: kernels
# emulated, cuBLAS answered by a stand-in, memory from the caching allocator, copies and events on
# streams in one of three orders CUDA allows: see EMU_SCHEDULE in emu/cuda_emu.cc); RUN is
# lockstep-run. On a small MLP (784-64-10, 2048 samples, batch 64, real Fashion-MNIST) each case
# trains on cuda and is compared with the same run on the CPU, step by step (the losses of
# --log-steps, 17 digits) and in the parameters at the end (--dump-params; a parameter's
# difference relative to the largest parameter):
#   - f32: relative difference at most 1e-5 (the two differ in the order of sums only);
#   - batches gathered on the device, staged through pinned memory with the next one copied on
#     the copy stream during the step, and staged without prefetch: bitwise the same; staged with
#     prefetch and 2 accumulation steps under the emulator's three schedules (EMU_SCHEDULE: late,
#     lazy, eager), and 2 ranks under late and lazy: bitwise the same;
#   - GELU, gradient clipping, 2 accumulation steps, activation checkpointing, label smoothing,
#     weight decay on the weight matrices only (--no-decay-1d) and dropout (masks drawn on the
#     device, the CPU's bit for bit, replayed by the recomputation): 1e-5;
#   - bf16 at most 1e-4, fp16 at most 5e-3 (the GPU rounds each 16-bit product's inputs as the
#     CPU does; the sums differ); fp16 with an inf gradient injected at step 5: the same steps
#     skipped and the same loss scale at every step (--metrics) on both;
#   - 2 ranks through MPI (device gradients staged through pinned host memory), also with bf16
#     gradient compression: 1e-5 and 1e-3; fp16 with an inf injected on rank 1 only: 5e-3, and
#     the same steps skipped on rank 0 with the same scales;
#   - 2 ranks with --shard-optimizer (plain, fp16 with the inf, AdamW with a checkpoint): bitwise the
#     unsharded runs, the same checkpoint files;
#   - --ema (the average updated and swapped in device memory): its ema.safetensors within 1e-5 of
#     the CPU run's, and the EMA figures printed those of its weights evaluated by --init-from;
#   - a checkpoint written on cuda at step 40: resumed on cuda, bitwise the run never stopped;
#     resumed on the CPU, within 1e-5 of it; its weights loaded with --init-from evaluate to the
#     same test figures on cuda and on the CPU.
# First, LOCKSTEP_TF32=maybe is refused when cuda:0 starts.
set -u
prog=$(realpath "$1") run=$(realpath "$2")
source "$(dirname "$0")/emu/runs.sh"
base=(--hidden 64 --train-limit 2048 --test-limit 1000 --batch-size 64 --no-progress)

# a TF32 setting other than 1/on/true or 0/off/false (it meant off) is refused when cuda:0 starts
out=$(env LOCKSTEP_TF32=maybe "$prog" "${base[@]}" --device cuda --max-steps 1 2>&1) && fail "LOCKSTEP_TF32=maybe accepted"
grep -qF "LOCKSTEP_TF32=maybe: expected 1, on or true" <<<"$out" || fail "LOCKSTEP_TF32=maybe: $out"
# (runs of one process each, two at a time: train_bg in emu/runs.sh; compared once all have ended)
train_bg cpu -- --device cpu --epochs 1
train_bg cuda -- --device cuda --epochs 1
train_bg staged LOCKSTEP_DATA_ON_DEVICE=off LOCKSTEP_PREFETCH=on -- --device cuda --epochs 1
train_bg staged_nopf LOCKSTEP_DATA_ON_DEVICE=off LOCKSTEP_PREFETCH=off -- --device cuda --epochs 1
# the emulator's other schedules (cuda_emu.cc): kernels and library calls queued too, copies as
# late as allowed (lazy) or as early (eager); the same work in another legal order: bitwise the same
for sch in late lazy eager; do
    train_bg "accum_$sch" EMU_SCHEDULE=$sch LOCKSTEP_DATA_ON_DEVICE=off LOCKSTEP_PREFETCH=on -- --device cuda --epochs 1 \
        --accum-steps 2
done

feat=(--epochs 1 --activation gelu --clip-grad-norm 0.5 --accum-steps 2 --checkpoint-activations
      --label-smoothing 0.1 --weight-decay 0.01 --no-decay-1d --dropout 0.2)
train_bg feat_cpu -- --device cpu "${feat[@]}"
train_bg feat_cuda -- --device cuda "${feat[@]}"

for prec in bf16 fp16; do # (compared below: bf16 within 1e-4, fp16 5e-3)
    inj=LOCKSTEP_AMP_INJECT_INF=
    [ "$prec" = fp16 ] && inj=LOCKSTEP_AMP_INJECT_INF=5 # an inf gradient at step 5: the step skipped, the scale halved
    train_bg "${prec}_cpu" "$inj" -- --device cpu --epochs 1 --precision "$prec" --metrics "${prec}_cpu.json"
    train_bg "${prec}_cuda" "$inj" -- --device cuda --epochs 1 --precision "$prec" --metrics "${prec}_cuda.json"
done
train_wait
close cuda cpu 1e-5
close staged cuda 0
close staged_nopf cuda 0
close accum_lazy accum_late 0
close accum_eager accum_late 0
close feat_cuda feat_cpu 1e-5
close bf16_cuda bf16_cpu 1e-4
close fp16_cuda fp16_cpu 5e-3
scales() { sed -n 's/.*"loss_scale": *\([^,}]*\), "skipped": *\([01]\).*/\1 \2/p' "$1"; }
[ "$(scales fp16_cpu.json | wc -l)" -eq 32 ] || fail "fp16: no loss scale per step in the metrics"
scales fp16_cpu.json | grep -q '^32768 ' || fail "fp16: the injected inf did not halve the loss scale"
[ "$(scales fp16_cuda.json)" = "$(scales fp16_cpu.json)" ] ||
    fail "fp16: the loss scales or skipped steps differ between cuda and cpu"

launch=("$run" -n 2)
nol=ASAN_OPTIONS=detect_leaks=0 # Open MPI's own allocations, not freed at exit
train np2_cpu "$nol" -- --device cpu --comm mpi --epochs 1
train np2_cuda "$nol" -- --device cuda --comm mpi --epochs 1
close np2_cuda np2_cpu 1e-5
train np2_lazy "$nol" EMU_SCHEDULE=lazy -- --device cuda --comm mpi --epochs 1
close np2_lazy np2_cuda 0
train np2c_cpu "$nol" LOCKSTEP_GRAD_COMPRESS=bf16 -- --device cpu --comm mpi --epochs 1
train np2c_cuda "$nol" LOCKSTEP_GRAD_COMPRESS=bf16 -- --device cuda --comm mpi --epochs 1
close np2c_cuda np2c_cpu 1e-3
# fp16 with an inf injected on rank 1 at step 5: the found-inf flag, kept on the device, reaches
# rank 0 through an all-reduce of device memory; the same steps skipped and scales as on the CPU
train np2h_cpu "$nol" LOCKSTEP_AMP_INJECT_INF=5:1 -- --device cpu --comm mpi --epochs 1 --precision fp16 \
    --metrics np2h_cpu.json
train np2h_cuda "$nol" LOCKSTEP_AMP_INJECT_INF=5:1 -- --device cuda --comm mpi --epochs 1 --precision fp16 \
    --metrics np2h_cuda.json
close np2h_cuda np2h_cpu 5e-3
[ "$(scales np2h_cpu.json | sed -n '5,6p' | tr '\n' ' ')" = "65536 1 32768 0 " ] ||
    fail "fp16, 2 ranks: rank 1's inf did not skip rank 0's step 5 and halve the scale"
[ "$(scales np2h_cuda.json)" = "$(scales np2h_cpu.json)" ] ||
    fail "fp16, 2 ranks: the loss scales or skipped steps differ between cuda and cpu"
# --shard-optimizer (ZeRO stage 1): each rank steps its own parameters on the device and they are
# broadcast from device memory: bitwise the unsharded runs (fp16: the device-counted skipped step
# too); with AdamW the checkpoint gathers the moments on rank 0 through device memory: the same files
train np2s_cuda "$nol" -- --device cuda --comm mpi --epochs 1 --shard-optimizer
close np2s_cuda np2_cuda 0
train np2hs_cuda "$nol" LOCKSTEP_AMP_INJECT_INF=5:1 -- --device cuda --comm mpi --epochs 1 --precision fp16 \
    --shard-optimizer
close np2hs_cuda np2h_cuda 0
train np2a_cuda "$nol" -- --device cuda --comm mpi --optimizer adamw --max-steps 20 --save-every 20 --checkpoint-dir a
train np2as_cuda "$nol" -- --device cuda --comm mpi --optimizer adamw --max-steps 20 --save-every 20 \
    --checkpoint-dir as --shard-optimizer
close np2as_cuda np2a_cuda 0
for f in model.safetensors optimizer.safetensors; do
    cmp a/step-00000020/$f as/step-00000020/$f || fail "--shard-optimizer on cuda: $f differs"
done
launch=()

adam=(--epochs 2 --optimizer adamw --checkpoint-dir ck)
train straight -- --device cuda "${adam[@]}"
train first -- --device cuda "${adam[@]}" --max-steps 40 --save-every 40
cp first.loss resumed.loss
cp first.loss moved.loss
train resumed -- --device cuda "${adam[@]}" --resume ck/step-00000040
close resumed straight 0
train moved -- --device cpu "${adam[@]}" --resume ck/step-00000040
close moved straight 1e-5
# --init-from on the emulated GPU: the step-40 weights, evaluated on cuda as on the CPU
figures() { grep -oE 'test loss [0-9.]+  test acc [0-9.]+%' <<<"$out" | tail -n 1; }
run init_cuda -- "${base[@]}" --device cuda --epochs 0 --init-from ck/step-00000040/model.safetensors
on_cuda=$(figures)
run init_cpu -- "${base[@]}" --device cpu --epochs 0 --init-from ck/step-00000040/model.safetensors
[ -n "$on_cuda" ] && [ "$on_cuda" = "$(figures)" ] || fail "--init-from: cuda '$on_cuda', cpu '$(figures)'"
# --ema on the emulated GPU: updated on the compute stream, swapped in for the evaluation
ema=(--epochs 1 --ema 0.9 --ema-warmup --max-steps 20 --save-every 20)
train_bg ema_cpu -- --device cpu "${ema[@]}" --checkpoint-dir ec
train_bg ema_cuda -- --device cuda "${ema[@]}" --checkpoint-dir eg
train_wait
ema_fig=$(grep -oE 'EMA of the weights \(decay 0.9 with warmup\): test loss [0-9.]+  test acc [0-9.]+%' ema_cuda.out |
    grep -oE 'test loss.*')
close ema_cuda ema_cpu 1e-5
python3 - ec/step-00000020/ema.safetensors eg/step-00000020/ema.safetensors <<'PY' || fail "--ema: cuda's average differs"
import struct, sys
from array import array
def values(p):
    raw = open(p, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return array("f", raw[8 + n:])
a, b = values(sys.argv[1]), values(sys.argv[2])
scale = max(abs(x) for x in a)
worst = max(abs(x - y) for x, y in zip(a, b)) / scale
print("--ema: cuda's average within %.2e of the CPU's (relative to the largest value)" % worst)
sys.exit(0 if len(a) == len(b) and worst <= 1e-5 else 1)
PY
run ema_init -- "${base[@]}" --device cuda --epochs 0 --init-from eg/step-00000020/ema.safetensors
[ -n "$ema_fig" ] && [ "$(figures)" = "$ema_fig" ] || fail "--ema: cuda printed '$ema_fig', its weights evaluate to '$(figures)'"
echo "PASS: fashion_mlp on the emulated GPU matches the CPU (f32, staged batches, bf16, fp16, 2 ranks, resume," \
     "--init-from: $on_cuda)"
