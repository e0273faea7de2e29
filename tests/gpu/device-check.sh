#!/usr/bin/env bash
# device-check.sh: the one GPU session's script. From the repository root, builds lockstep with
# CUDA (sm_90) unless a usable build directory is given, runs the gpu-labelled tests, then the
# end-to-end GPU runs (fashion_mlp on cuda, the PyTorch peer on cuda), and prints one summary
# table last. Every step runs under a timeout and the whole script under a total budget, so one
# hang cannot eat the device time. Output is also written to $OUT/device-check.log when $OUT is set.
#
#   bash tests/gpu/device-check.sh [BUILD_DIR]        (BUILD_DIR: a carried build, optional)
#
# Environment: BUDGET_S (total seconds, default 450), JOBS (default 16), FASHION_DIR (data),
# FASHION_CMD (override the fashion_mlp command line). Data: $FASHION_DIR, else .data/fashion-mnist
# (carried), else /usr/share/datasets/fashion-mnist.
set -u
set -o pipefail

ROOT=$(pwd)
BUDGET_S=${BUDGET_S:-450}
JOBS=${JOBS:-16}
START=$SECONDS
LOG=/dev/null
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    LOG="$OUT/device-check.log"
    exec > >(tee -a "$LOG") 2>&1
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

SUMMARY=()   # "name|result|figure"
FAILED=0
add_row() { SUMMARY+=("$1|$2|$3"); }

left() { echo $((BUDGET_S - (SECONDS - START))); }

# step NAME LIMIT_S CMD...: runs CMD with a timeout of min(LIMIT_S, time left - 15 s), output to
# the log and to $WORK/NAME.out. Sets STEP_RC (124: timed out, 125: no time left).
step() {
    local name=$1 limit=$2
    shift 2
    local rest=$(($(left) - 15))
    [ "$limit" -gt "$rest" ] && limit=$rest
    echo
    echo "=== $name (limit ${limit}s, $(left)s of the budget left) ==="
    echo "+ $*"
    if [ "$limit" -le 5 ]; then
        echo "no time left for $name"
        STEP_RC=125
        return
    fi
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$WORK/$name.out"
    STEP_RC=${PIPESTATUS[0]}
    echo "=== $name: exit $STEP_RC after $((SECONDS - t0))s ==="
}

result_of() { # rc -> word
    case $1 in
    0) echo pass ;;
    77) echo skipped ;;
    124 | 137) echo TIMEOUT ;;
    125) echo "NOT RUN" ;;
    *) echo "FAIL($1)" ;;
    esac
}

# ---- the machine ----
step gpu-info 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
GPU="nvidia-smi failed"
[ "$STEP_RC" -eq 0 ] && GPU=$(head -n 1 "$WORK/gpu-info.out")
add_row "gpu" "$(result_of "$STEP_RC")" "$GPU"
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc_path" ] && "$nvcc_path" --version | tail -n 2

# ---- build ----
BUILD=${1:-}
if [ -n "$BUILD" ] && [ -f "$BUILD/CMakeCache.txt" ]; then
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
    cuda=$(sed -n 's/^LOCKSTEP_CUDA:STRING=//p' "$BUILD/CMakeCache.txt")
    if [ "$src" != "$ROOT" ] || [ "$cuda" = "OFF" ]; then
        echo "build directory $BUILD was configured for '$src' (LOCKSTEP_CUDA=$cuda); configuring a fresh one"
        BUILD=""
    fi
fi
if [ -z "$BUILD" ]; then
    BUILD="$ROOT/build-device"
    step configure 120 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90
    if [ "$STEP_RC" -ne 0 ]; then
        add_row "configure" "$(result_of "$STEP_RC")" "see the log"
        FAILED=1
    fi
fi
step build 300 cmake --build "$BUILD" -j "$JOBS"
BUILD_RC=$STEP_RC
add_row "build (sm_90, -j$JOBS)" "$(result_of "$BUILD_RC")" "$BUILD"
[ "$BUILD_RC" -ne 0 ] && FAILED=1

# ---- gpu tests ----
if [ "$BUILD_RC" -eq 0 ]; then
    step ctest-gpu 240 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 200
    [ "$STEP_RC" -ne 0 ] && FAILED=1
    # one row per test, from ctest's own lines: "1/3 Test #59: test_gpu_parity ....   Passed  12.3 sec"
    while read -r line; do
        tname=$(sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' <<<"$line")
        res=$(sed -E 's/.*Test +#[0-9]+: [^ ]+ \.*\**( |\*)*([A-Za-z][A-Za-z ]*[a-z]).*/\2/' <<<"$line")
        secs=$(grep -oE '[0-9.]+ sec' <<<"$line")
        add_row "$tname" "$res" "$secs"
    done < <(grep -E 'Test +#[0-9]+: ' "$WORK/ctest-gpu.out" 2>/dev/null)
    # key figures from the tests' output (CTest keeps all of it in LastTest.log)
    tl="$BUILD/Testing/Temporary/LastTest.log"
    fig=$(grep -h '^parity: [0-9]' "$tl" 2>/dev/null | tail -n 1)
    [ -n "$fig" ] && add_row "  parity figures" "" "${fig#parity: }"
    fig=$(grep -h '^grow: after' "$tl" 2>/dev/null | tail -n 1)
    [ -n "$fig" ] && add_row "  allocator steady state" "" "${fig#grow: }"
    fig=$(grep -h '^reserve:0.1' "$tl" 2>/dev/null | tail -n 1)
    [ -n "$fig" ] && add_row "  allocator reserve" "" "$fig"
    fails=$(grep -h '^FAIL ' "$tl" 2>/dev/null | head -n 5 | cut -c1-110)
    if [ -n "$fails" ]; then
        while read -r f; do add_row "  failed comparison" "FAIL" "$f"; done <<<"$fails"
    fi
else
    add_row "ctest -L gpu" "NOT RUN" "the build failed"
fi

# ---- end to end: fashion_mlp on cuda ----
# The GPU machine has no Debian data package: carry the data set in the ignored folder .data/
# (cp -r /usr/share/datasets/fashion-mnist .data/) and name .data in the device tool's carry.
DATA=${FASHION_DIR:-${LOCKSTEP_FASHION_DIR:-}}
[ -z "$DATA" ] && [ -f "$ROOT/.data/fashion-mnist/train-images-idx3-ubyte.gz" ] && DATA=$ROOT/.data/fashion-mnist
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
MLP="$BUILD/examples/fashion_mlp/fashion_mlp"
BENCH="$BUILD/cluster/bench/bench_mlp"
FASHION_CMD=${FASHION_CMD:-"$MLP --device cuda --epochs 2 --no-progress --data-dir $DATA"}
# mlp_run NAME LIMIT ARGS...: a fashion_mlp run with a summary row (accuracy, samples/s, peak)
mlp_run() {
    local name=$1 limit=$2
    shift 2
    # shellcheck disable=SC2086
    step "$name" "$limit" $FASHION_CMD "$@"
    local last
    last=$(grep -E '^epoch [0-9]+ ' "$WORK/$name.out" | tail -n 1)
    add_row "fashion_mlp $*" "$(result_of "$STEP_RC")" \
        "$(grep -oE 'test acc [0-9.]+%' <<<"$last"), $(grep -oE '[0-9]+ samples/s' <<<"$last"), $(grep -oE 'peak memory .*' <<<"$last")"
    [ "$STEP_RC" -ne 0 ] && FAILED=1
}
if [ "$BUILD_RC" -eq 0 ] && [ -x "$MLP" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    mlp_run fashion-mlp-cuda 120
    mlp_run fashion-mlp-bf16 90 --precision bf16
    mlp_run fashion-mlp-fp16-ckpt 90 --precision fp16 --checkpoint-activations
    # checkpoints on the GPU: 60 steps with a save, then resume to 120; the resumed log continues
    ck="$WORK/ckpt"
    # shellcheck disable=SC2086
    step ckpt-save 60 $FASHION_CMD --checkpoint-dir "$ck" --save-every 60 --max-steps 60 --log-steps "$WORK/steps.log"
    # shellcheck disable=SC2086
    step ckpt-resume 60 $FASHION_CMD --checkpoint-dir "$ck" --resume auto --max-steps 120 --log-steps "$WORK/steps.log"
    n=$(wc -l <"$WORK/steps.log" 2>/dev/null || echo 0)
    res=$(result_of "$STEP_RC")
    [ "$n" -eq 120 ] || res=FAIL
    add_row "checkpoint save + resume (cuda)" "$res" "$n of 120 step losses logged"
    [ "$res" = pass ] || FAILED=1
else
    add_row "fashion_mlp --device cuda" "NOT RUN" "no binary ($MLP) or no data in $DATA"
fi

# ---- lockstep vs PyTorch eager on the same GPU, model, batch and precision (A B A B) ----
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null &&
    [ -x "$BENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    for b in 128 4096; do
        steps=400
        [ "$b" -eq 4096 ] && steps=100
        for round in 1 2 3; do
            step "lockstep-b$b-r$round" 60 "$BENCH" --device cuda --batch-size "$b" --steps "$steps" --data-dir "$DATA"
            step "torch-b$b-r$round" 60 python3 "$ROOT/cluster/bench/torch_mlp.py" --device cuda --batch-size "$b" \
                --steps "$steps" --data-dir "$DATA"
        done
        ls_ms=$(cat "$WORK"/lockstep-b$b-r*.out 2>/dev/null | grep -oE 'step_ms [0-9.]+' | awk '{print $2}' | sort -n | sed -n 2p)
        pt_ms=$(cat "$WORK"/torch-b$b-r*.out 2>/dev/null | grep -oE 'step_ms [0-9.]+' | awk '{print $2}' | sort -n | sed -n 2p)
        ratio=$(awk -v a="$ls_ms" -v b="$pt_ms" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "?" }')
        add_row "MLP fp32 batch $b: lockstep vs torch" "" "median step ${ls_ms:-?} ms vs ${pt_ms:-?} ms: $ratio (target >= 1.2x)"
    done
else
    add_row "lockstep vs torch (cuda)" "NOT RUN" "no python3 torch with CUDA, no bench_mlp, or no data"
fi

# ---- summary ----
echo
echo "=== summary ($((SECONDS - START))s of ${BUDGET_S}s) ==="
printf '%-34s %-9s %s\n' "check" "result" "key figure"
printf '%-34s %-9s %s\n' "-----" "------" "----------"
for row in "${SUMMARY[@]}"; do
    IFS='|' read -r n r f <<<"$row"
    printf '%-34s %-9s %s\n' "$n" "$r" "$f"
done
exit $FAILED
