#!/usr/bin/env bash
# check_emu_quickstart.sh QS_EMU RUN: examples/quickstart (the C API program of docs/guide.md) on
# an emulated GPU (see check_emu_mlp.sh: cuda:0 runs the CUDA backend's own code). Its data set is
# made of floats, not bytes, so a batch staged from the host is gathered as f32 by the host's
# threads and copied as f32 (fashion_mlp's and fashion_resnet's sets go as bytes, decoded on the
# device). Each run is compared by its printed losses and its last checkpoint (the model's and
# AdamW's tensors, tests/gpu/emu/ckpt_run.py):
#   - the data set on the device against the CPU: within 1e-5;
#   - staged from the host (LOCKSTEP_DATA_ON_DEVICE=off), one epoch, then resumed from its
#     checkpoint for the second under the emulator's lazy schedule (kernels and library calls
#     queued too): bitwise the run with the data on the device;
#   - 2 ranks through MPI, staged, under the eager schedule: within 1e-5 of 2 ranks on the CPU.
set -u
prog=$(realpath "$1") run=$(realpath "$2")
source "$(dirname "$0")/emu/runs.sh"

# qs NAME [VAR=VALUE ...] -- ARGS...: quickstart with the variables set and --checkpoint-dir NAME,
# its output appended to NAME.out; then NAME.loss and NAME.bin from the output and the newest
# checkpoint
qs() {
    local name=$1
    shift
    split_env "$@"
    run "$name" "${envs[@]}" -- --checkpoint-dir "$name" "${args[@]}"
    printf '%s\n' "$out" >>"$name.out"
    printf '%s: %s\n' "$name" "$(grep -E '^epoch' <<<"$out" | tail -n 1)"
    local last
    last=$(sed -n 's/^quickstart: saved //p' "$name.out" | tail -n 1)
    [ -n "$last" ] || fail "$name: no checkpoint saved: $out"
    python3 "$emu_dir/ckpt_run.py" "$name.out" "$last" "$name" || fail "$name: $last unreadable"
}

qs cpu LOCKSTEP_DEVICE=cpu -- --epochs 2
qs cuda LOCKSTEP_DEVICE=cuda -- --epochs 2
grep -q '^quickstart: 1 rank on cuda:0,' cuda.out || fail "the cuda run was not on cuda:0: $(cat cuda.out)"
close cuda cpu 1e-5
qs staged LOCKSTEP_DEVICE=cuda LOCKSTEP_DATA_ON_DEVICE=off -- --epochs 1
qs staged LOCKSTEP_DEVICE=cuda LOCKSTEP_DATA_ON_DEVICE=off EMU_SCHEDULE=lazy -- --epochs 2
grep -q '^quickstart: resumed from staged/step-' staged.out || fail "the staged run did not resume: $(cat staged.out)"
close staged cuda 0

launch=("$run" -n 2)
nol=ASAN_OPTIONS=detect_leaks=0 # Open MPI's own allocations, not freed at exit
qs np2_cpu "$nol" LOCKSTEP_DEVICE=cpu LOCKSTEP_COMM=mpi -- --epochs 1
qs np2_staged "$nol" LOCKSTEP_DEVICE=cuda LOCKSTEP_COMM=mpi LOCKSTEP_DATA_ON_DEVICE=off EMU_SCHEDULE=eager -- --epochs 1
grep -q '^quickstart: 2 ranks on cuda:0,' np2_staged.out || fail "np2_staged was not on cuda:0: $(cat np2_staged.out)"
close np2_staged np2_cpu 1e-5
echo "PASS: quickstart on the emulated GPU matches the CPU (f32 data on the device, staged from the host, resumed, 2 ranks)"
