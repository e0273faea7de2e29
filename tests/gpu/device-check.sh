#!/usr/bin/env bash
# device-check.sh: the one GPU session's script. From the repository root, builds lockstep with
# CUDA (sm_90) unless a usable build directory is given, runs the gpu-labelled tests (op parity
# including the CNN ops and a ResNet step, the allocator), then the end-to-end GPU runs
# (fashion_mlp on cuda, oom_challenge on its GPU defaults, the ResNet and MLP benchmarks beside
# PyTorch eager on cuda), and prints one summary table last. Every step runs under a timeout and the
# whole script under a total budget, so one hang cannot eat the device time; steps run in order of
# priority, so a short budget drops the last ones (the MLP comparison), shown as NOT RUN. Output is
# also written to $OUT/device-check.log when $OUT is set.
#
#   bash tests/gpu/device-check.sh [BUILD_DIR]        (BUILD_DIR: a carried build, optional)
#
# Environment: BUDGET_S (total seconds, default 450; about 540 runs every step), JOBS (default
# 16), FASHION_DIR (data), FASHION_CMD (override the fashion_mlp command line), RESNET_BATCH and
# RESNET_STEPS (the ResNet comparison: default 256 and 100). Data: $FASHION_DIR, else
# .data/fashion-mnist (carried), else /usr/share/datasets/fashion-mnist.
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
    fig=$(grep -h '^cnn parity: [0-9]' "$tl" 2>/dev/null | tail -n 1)
    [ -n "$fig" ] && add_row "  cnn parity figures" "" "${fig#cnn parity: }"
    # "ok   resnet f32 train step: gradient cosine similarity   1.000000 (>= 0.99999)", f32 and bf16
    fig=$(grep -h 'resnet .* train step: gradient cosine' "$tl" 2>/dev/null |
        awk '{ printf "%s%s %s", sep, $3, $9; sep = ", " }')
    [ -n "$fig" ] && add_row "  resnet step grad cosine (gpu/cpu)" "" "$fig"
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

# median of the numbers on stdin (the middle one; the upper middle of an even count)
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int(NR / 2) + 1] }'; }

# ---- lockstep vs PyTorch eager on the same GPU, model, batch and precision (A B A B), before the
# CNN steps so that a tight budget cuts those first ----
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

# ---- end to end: oom_challenge on its GPU defaults (ResNet 64,128,256,512 x 3 blocks on 128x128x3
# synthetic images, batch 256, 48 GiB cap): the baseline runs out of memory with the allocator's
# error, each remedy (batch 64, bf16, activation checkpointing) and all three fit ----
OOM="$BUILD/examples/oom_challenge/oom_challenge"
if [ "$BUILD_RC" -eq 0 ] && [ -x "$OOM" ]; then
    step oom-challenge 150 "$OOM" --device cuda
    res=$(result_of "$STEP_RC")
    if [ "$res" = pass ] && ! grep -q 'challenge met' "$WORK/oom-challenge.out"; then res=FAIL; fi
    # "baseline OOM; smaller 12.1 GiB/0.110 s, mixed ..., activation ..., all ..." (peak/step per remedy)
    fig=$(awk '
        /^baseline \(batch/ { base = ($0 ~ /failed as expected/) ? "baseline OOM" : "baseline FITS" }
        /^(smaller batch|mixed precision|activation checkpointing|all three) / {
            peak = "?"; t = "-"
            if (match($0, /[0-9.]+ (B|KiB|MiB|GiB|TiB)/)) peak = substr($0, RSTART, RLENGTH)
            if (match($0, /[0-9.]+ s /)) t = substr($0, RSTART, RLENGTH - 1)
            split($0, w, " ")
            row = row (row == "" ? "" : ", ") w[1] " " peak "/" t
        }
        END { print (base == "" ? "no baseline line" : base) "; " row }' "$WORK/oom-challenge.out" 2>/dev/null)
    add_row "oom_challenge (cuda, 48 GiB cap)" "$res" "$fig"
    [ "$res" = pass ] || FAILED=1
else
    add_row "oom_challenge (cuda)" "NOT RUN" "no binary ($OOM) or the build failed"
fi

# ---- lockstep vs PyTorch eager on a ResNet: examples/fashion_resnet's model (widths 16,32,64, one
# block per stage), same batch and steps, bf16 (lockstep --precision bf16: bf16 activations, f32
# masters; PyTorch: torch.autocast(bfloat16), channels_last), A B A B, median step times ----
RBENCH="$BUILD/cluster/bench/bench_resnet"
RESNET_BATCH=${RESNET_BATCH:-256}
RESNET_STEPS=${RESNET_STEPS:-100}
if [ "$BUILD_RC" -eq 0 ] && [ -x "$RBENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    have_torch=0
    python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && have_torch=1
    ls_res=pass
    for round in 1 2; do
        step "resnet-lockstep-r$round" 40 "$RBENCH" --device cuda --precision bf16 --batch-size "$RESNET_BATCH" \
            --steps "$RESNET_STEPS" --warmup 10 --data-dir "$DATA"
        case $STEP_RC in
        0) ;;
        125) [ "$ls_res" = pass ] && [ "$round" -eq 1 ] && ls_res="NOT RUN" ;;
        *) ls_res=$(result_of "$STEP_RC") ;;
        esac
        [ "$have_torch" -eq 1 ] &&
            step "resnet-torch-r$round" 40 python3 "$ROOT/cluster/bench/torch_resnet.py" --device cuda --precision bf16 \
                --channels-last --batch-size "$RESNET_BATCH" --steps "$RESNET_STEPS" --warmup 10 --data-dir "$DATA"
    done
    case $ls_res in pass | "NOT RUN") ;; *) FAILED=1 ;; esac
    ls_ms=$(cat "$WORK"/resnet-lockstep-r*.out 2>/dev/null | grep -oE 'step_ms [0-9.]+' | awk '{print $2}' | median)
    pt_ms=$(cat "$WORK"/resnet-torch-r*.out 2>/dev/null | grep -oE 'step_ms [0-9.]+' | awk '{print $2}' | median)
    ratio=$(awk -v a="$ls_ms" -v b="$pt_ms" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", b / a; else print "?" }')
    peak=$(grep -ohE 'peak_mib [0-9.]+' "$WORK"/resnet-lockstep-r*.out 2>/dev/null | tail -n 1)
    peer="${pt_ms:-?} ms: $ratio (torch/lockstep)"
    [ "$have_torch" -eq 1 ] || peer="no python3 torch with CUDA for the peer"
    add_row "ResNet bf16 batch $RESNET_BATCH: lockstep vs torch" "$ls_res" \
        "median step ${ls_ms:-?} ms vs $peer, lockstep ${peak:-peak_mib ?}"
else
    add_row "ResNet lockstep vs torch (cuda)" "NOT RUN" "the build failed, no bench_resnet, or no data in $DATA"
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
