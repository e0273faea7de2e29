#!/bin/bash
# test_gpu_count.sh: on a host with NVIDIA GPUs, the default -n is the number of GPUs (as
# nvidia-smi counts them) and CUDA_VISIBLE_DEVICES limits it. Skips (77) without GPUs.
. "$(dirname "$0")/lib.sh"
fake mpirun
M=$tmp/bin/mpirun
n=$(find /dev -maxdepth 1 -regex '/dev/nvidia[0-9]+' | grep -c .)
[ "$n" -gt 0 ] || n=$(find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 2>/dev/null | grep -c .)
[ "$n" -gt 0 ] || { echo "SKIP: no NVIDIA GPU on this host" >&2; exit 77; }

case_ "nvidia-smi agrees"
if command -v nvidia-smi >/dev/null; then
    smi=$(env -u CUDA_VISIBLE_DEVICES nvidia-smi -L | grep -c '^GPU ')
    [ "$smi" = "$n" ] || fail "nvidia-smi lists $smi GPUs, /dev and /proc $n"
fi

case_ "default: one rank per GPU ($n)"
run "$LSR" --dry-run true
expect_rc 0
if [ "$n" = 1 ]; then
    expect_out "true"
else
    T=$(threads "$n")
    over=; [ "$n" -gt "$CORES" ] && over=" --oversubscribe"
    expect_out "$M -np $n$ROOTFLAG$over --bind-to none --map-by slot -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
fi
expect_no_err

case_ "CUDA_VISIBLE_DEVICES=0 (and CUDA's stop at an invalid entry)"
run CUDA_VISIBLE_DEVICES=0 "$LSR" --dry-run true
expect_out "true"
run CUDA_VISIBLE_DEVICES=0,-1,1 "$LSR" --dry-run true
expect_out "true"

case_ "CUDA_VISIBLE_DEVICES= hides every GPU"
run CUDA_VISIBLE_DEVICES= "$LSR" --dry-run true
expect_out "true"
expect_err "CUDA_VISIBLE_DEVICES hides every GPU"
finish
