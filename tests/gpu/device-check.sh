#!/usr/bin/env bash
# device-check.sh: the one GPU session's script. From the repository root, builds lockstep with
# CUDA (sm_90 only) unless a usable build directory is given, runs the gpu-labelled tests (op
# parity including the CNN ops and a ResNet step, the allocator), then the end-to-end GPU runs
# (fashion_mlp and examples/quickstart on cuda, the MLP benchmark beside PyTorch eager,
# oom_challenge on its GPU defaults, the ResNet benchmark beside PyTorch, the MLP with dropout
# beside PyTorch, a checkpoint's save and load beside torch.save/torch.load) and prints one summary
# table last. Every step runs under a
# timeout and the whole script under a total budget, so one hang cannot eat the device time; steps
# run in order of priority (tests, then the MLP comparison, then the CNN runs), so a short budget
# drops the last ones, shown as NOT RUN. Output is also written to $OUT/device-check.log (and the
# tests' full output to $OUT/ctest-LastTest.log) when $OUT is set.
#
#   bash tests/gpu/device-check.sh [BUILD_DIR]        (BUILD_DIR: a carried build, optional)
#
# Expected times on the H200 machine (16 cores), about 355 s in all; if everything takes 1.3x
# longer, the last steps (dropout, the checkpoint) no longer fit BUDGET_S, 470 by default (the
# lease's 8-minute slot), and show as NOT RUN:
#   gpu info, cuDNN probe                           ~2 s
#   configure (CUDA detection, sm_90 only)          ~15 s
#   build, -j$(nproc)                               ~30 s   (2-core dev VM: configure 10 s; the
#                                                            library 55 s, ~45 CPU-s; the rest ~50
#                                                            CPU-s; cnn.cu, the longest nvcc job, 8 s)
#   ctest -L gpu, 6 tests side by side (-j6)        ~50 s   (test_gpu_parity's f64/adamw references
#                                                            on the CPU dominate: ~25 s of one core)
#   fashion_mlp x4 (2 epochs) + checkpoint pair     ~40 s   (6 processes: CUDA start, data, training)
#   quickstart (the C API example) on cuda          ~3 s
#   PyTorch probe (cold import)                     ~0 s    (runs during the build)
#   MLP vs PyTorch: 2 batches x 2 rounds A B A B    ~80 s   (lockstep ~5 s, torch ~15 s a process)
#   MLP batch 128 with LOCKSTEP_TIMELINE + summary  ~8 s
#   MLP batch 4096 with LOCKSTEP_TIMELINE + summary ~8 s
#   MLP batch 4096, data on the host: prefetch
#     against none, 2 rounds A B A B                ~20 s
#   oom_challenge (5 configurations, 48 GiB cap)    ~30 s
#   ResNet vs PyTorch: 2 rounds A B A B             ~50 s   (lockstep ~8 s, torch ~18 s a process)
#   MLP batch 4096 with dropout 0.2 vs PyTorch      ~20 s   (one round each)
#   checkpoint save + load, 441.8 MB, vs PyTorch    ~15 s   (one round each, last)
#
# Environment: BUDGET_S (total seconds, default 470), JOBS (default: the CPU count), FASHION_DIR
# (data), FASHION_CMD (override the fashion_mlp command line), MLP_ROUNDS (default 2),
# RESNET_BATCH and RESNET_STEPS (the ResNet comparison: default 256 and 100). Data: $FASHION_DIR,
# else .data/fashion-mnist (carried), else /usr/share/datasets/fashion-mnist. cuDNN and NCCL: the
# CUDA toolkit's, else the copies PyTorch's wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) carry.
# OpenBLAS, cJSON, zlib: the system's, else .devdeps/ (tools/device-deps.sh; carry it with .data).
set -u
set -o pipefail

ROOT=$(pwd)
# PyTorch runs with the library path it came with: what this script adds for lockstep (carried
# libraries, the toolkit's) must not replace the CUDA libraries torch's wheels bring
TORCH_LD=${LD_LIBRARY_PATH:-}
BUDGET_S=${BUDGET_S:-470}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 16)}
MLP_ROUNDS=${MLP_ROUNDS:-2}
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
step gpu-info 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,compute_mode \
    --format=csv,noheader
GPU="nvidia-smi failed"
[ "$STEP_RC" -eq 0 ] && GPU=$(head -n 1 "$WORK/gpu-info.out")
add_row "gpu" "$(result_of "$STEP_RC")" "$GPU"
# Open MPI refuses root without these (the device machine runs commands as root)
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
# the gpu tests run side by side unless the GPU takes one process at a time
CTEST_J=6
CTEST_E=()
case $GPU in *Exclusive* | *Prohibited*) CTEST_J=1 ;; esac
# two ranks sharing the GPU cannot run where it takes one process at a time
case $GPU in *Exclusive_Process* | *Prohibited*)
    CTEST_E=(-E '_np2$')
    add_row "2 ranks sharing the GPU (*_np2)" "NOT RUN" "compute mode: ${GPU##*, }" ;;
esac
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc_path" ] && "$nvcc_path" --version | tail -n 2

# One probe of PyTorch with CUDA for both comparisons, in the background while lockstep builds (it
# also warms the page cache with torch's libraries, so the first timed torch process does not pay
# the cold start alone); waited for before the comparisons.
HAVE_TORCH=0
(LD_LIBRARY_PATH=$TORCH_LD timeout 90 python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 &&
    touch "$WORK/have-torch") &
TORCH_PROBE=$!

# cuDNN and NCCL: the toolkit's when it has them, else the copies in PyTorch's wheels
# (nvidia-cudnn-cu13, nvidia-nccl-cu13): headers and the versioned library (no unversioned link
# there) named explicitly, and the folder on LD_LIBRARY_PATH (cuDNN opens sub-libraries at run
# time). Without MPI on the machine NCCL still builds: one rank bootstraps it alone.
CUDA_ARGS=()
toolkit_inc="$(dirname "$(dirname "$nvcc_path")")/include"
from_wheel() { # from_wheel MODULE HEADER LIBNAME CMAKEVAR
    local d wheel lib
    for d in "$toolkit_inc" /usr/include /usr/include/x86_64-linux-gnu; do
        [ -f "$d/$2" ] && return 0
    done
    wheel=$(timeout 30 python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null)
    lib=$(find "${wheel:-/nonexistent}/lib" -maxdepth 1 -name "$3.so*" 2>/dev/null | sort | head -n 1)
    if [ -n "$wheel" ] && [ -f "$wheel/include/$2" ] && [ -n "$lib" ]; then
        echo "$1: none with the toolkit; using PyTorch's wheel: $wheel"
        CUDA_ARGS+=("-D${4}_INCLUDE=$wheel/include" "-D${4}_LIB=$lib")
        export LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
        echo "$1: no $2 with the toolkit and no nvidia-$1 wheel"
    fi
}
from_wheel cudnn cudnn.h libcudnn LOCKSTEP_CUDNN # without it configure fails (LOCKSTEP_CUDA=ON)
from_wheel nccl nccl.h libnccl LOCKSTEP_NCCL     # without it the NCCL test runs on the self communicator

# The data set: the GPU machine has no Debian data package: carry it in the ignored folder .data/
# (cp -r /usr/share/datasets/fashion-mnist .data/) and name .data in the device tool's carry.
DATA=${FASHION_DIR:-${LOCKSTEP_FASHION_DIR:-}}
[ -z "$DATA" ] && [ -f "$ROOT/.data/fashion-mnist/train-images-idx3-ubyte.gz" ] && DATA=$ROOT/.data/fashion-mnist
DATA=${DATA:-/usr/share/datasets/fashion-mnist}

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
# Libraries the machine may lack (OpenBLAS, cJSON, zlib: tools/device-deps.sh packs them into the
# carried .devdeps/): unpacked here; a configure that fails without them is repeated with them on
# CMAKE_PREFIX_PATH, and the shared objects the system lacks go on LD_LIBRARY_PATH (torch's
# processes keep the system's copies; lockstep's find their own through the build's RPATH).
DEPS=""
if [ -f "$ROOT/.devdeps/deps.tar.xz" ] && mkdir -p "$WORK/deps/run" && tar -C "$WORK/deps" -xJf "$ROOT/.devdeps/deps.tar.xz"; then
    DEPS="$WORK/deps"
    cache=$(ldconfig -p 2>/dev/null) # once, into a variable: grep -q on a pipe would fail it under pipefail
    for f in "$DEPS"/lib/*.so.*; do
        [ -e "$f" ] || continue
        so=$(basename "$f")
        grep -q "^[[:space:]]*$so (" <<<"$cache" || ln -sf "$f" "$DEPS/run/$so"
    done
    missing=$(find "$DEPS/run" -mindepth 1 -printf '%f ')
    echo "carried libraries: .devdeps unpacked; the system lacks: ${missing:-nothing}"
    [ -n "$missing" ] && export LD_LIBRARY_PATH="$DEPS/run${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if [ -z "$BUILD" ]; then
    BUILD="$ROOT/build-device"
    # the generator named, whatever CMAKE_GENERATOR says, for the keep-going flag below: Makefiles
    # where make exists, else Ninja (an image may have only ninja); the data set's folder for the
    # gpu-labelled training tests
    GEN=(-G "Unix Makefiles")
    command -v make >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1 || GEN=(-G Ninja)
    CONFIG=("${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
        -DLOCKSTEP_BUILD_EXAMPLES=ON -DLOCKSTEP_BUILD_BENCH=ON -DLOCKSTEP_EMU_TESTS=OFF -DLOCKSTEP_FASHION_DIR="$DATA"
        "${CUDA_ARGS[@]}")
    step configure 90 cmake -S "$ROOT" -B "$BUILD" "${CONFIG[@]}"
    cfg=configure
    if [ "$STEP_RC" -ne 0 ] && [ -n "$DEPS" ]; then # OpenBLAS/cJSON/zlib are found first: a quick failure
        rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
        step configure-devdeps 90 cmake -S "$ROOT" -B "$BUILD" "${CONFIG[@]}" -DCMAKE_PREFIX_PATH="$DEPS"
        cfg=configure-devdeps
    fi
    if [ "$STEP_RC" -ne 0 ]; then
        why=$(grep -m 1 -E 'CMake Error|not found' "$WORK/$cfg.out" 2>/dev/null | cut -c1-100)
        add_row "$cfg" "$(result_of "$STEP_RC")" "${why:-see the log}"
        FAILED=1
    else
        [ "$cfg" = configure-devdeps ] && add_row "$cfg" "pass" "with the carried .devdeps (${missing:-})"
    fi
fi
# Everything (with 16 cores the ~100 small test programs add a few seconds; the gpu-labelled tests of
# any folder are built with no list to keep up), going on past a target that fails to build, so one
# broken program does not stop the checks of the others: each step runs when its program exists.
KEEP_GOING=()
[ -f "$BUILD/Makefile" ] && KEEP_GOING=(-- -k)
[ -f "$BUILD/build.ninja" ] && KEEP_GOING=(-- -k 0)
step build 180 cmake --build "$BUILD" -j "$JOBS" "${KEEP_GOING[@]}"
BUILD_RC=$STEP_RC
add_row "build (sm_90, -j$JOBS)" "$(result_of "$BUILD_RC")" "$BUILD"
[ "$BUILD_RC" -ne 0 ] && FAILED=1
# a step runs when its program was built
LIBOK=0
compgen -G "$BUILD/liblockstep.so*" >/dev/null && LIBOK=1
# CMake leaves the toolkit's own folder out of the run path (an implicit link directory of nvcc):
# where the image's loader does not know it either, lockstep finds cudart/cuBLAS there this way
if [ "$LIBOK" -eq 1 ]; then
    nf=$(ldd "$BUILD"/liblockstep.so 2>/dev/null | awk '/not found/ { print $1 }' | sort -u | xargs)
    if [ -n "$nf" ]; then
        tk=$(dirname "$(dirname "$nvcc_path")")
        for d in "$tk/lib64" "$tk/lib" "$tk/targets/x86_64-linux/lib"; do
            [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        done
        echo "liblockstep.so's loader missed: $nf; added the toolkit's library folders"
        nf=$(ldd "$BUILD"/liblockstep.so 2>/dev/null | awk '/not found/ { print $1 }' | sort -u | xargs)
        [ -n "$nf" ] && add_row "libraries" "FAIL" "not found: $nf"
    fi
fi

# ---- gpu tests ----
if [ "$LIBOK" -eq 1 ]; then
    step ctest-gpu 150 ctest --test-dir "$BUILD" -L gpu "${CTEST_E[@]}" -j "$CTEST_J" --output-on-failure --timeout 120
    [ "$STEP_RC" -ne 0 ] && FAILED=1
    grep -qE 'Test +#[0-9]+: ' "$WORK/ctest-gpu.out" 2>/dev/null || add_row "ctest -L gpu" "$(result_of "$STEP_RC")" ""
    # one row per test, from ctest's own lines: "1/3 Test #59: test_gpu_parity ....   Passed  12.3 sec"
    while read -r line; do
        tname=$(sed -E 's/.*Test +#[0-9]+: ([^ ]+) .*/\1/' <<<"$line")
        res=$(sed -E 's/.*Test +#[0-9]+: [^ ]+ \.*\**( |\*)*([A-Za-z][A-Za-z ]*[a-z]).*/\2/' <<<"$line")
        secs=$(grep -oE '[0-9.]+ sec' <<<"$line")
        add_row "$tname" "$res" "$secs"
    done < <(grep -E 'Test +#[0-9]+: ' "$WORK/ctest-gpu.out" 2>/dev/null)
    # key figures from the tests' output (CTest keeps all of it in LastTest.log)
    tl="$BUILD/Testing/Temporary/LastTest.log"
    [ -n "${OUT:-}" ] && [ -f "$tl" ] && cp "$tl" "$OUT/ctest-LastTest.log"
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
    add_row "ctest -L gpu" "NOT RUN" "the library did not build"
fi

# ---- end to end: fashion_mlp on cuda ----
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
    # the GPU monitor's line after the last epoch (NVML): "  NVIDIA H200: gpu 97% busy (memory ...), ..."
    local gpu
    gpu=$(grep -E '^  .*: gpu [0-9]+% busy' "$WORK/$name.out" | tail -n 1 | sed -E 's/^ +//')
    if [ -n "$gpu" ]; then
        add_row "  nvml over the last epoch" "" "$gpu"
    elif grep -q 'no GPU figures' "$WORK/$name.out"; then
        add_row "  nvml" "FAIL" "$(grep -m1 -o 'no GPU figures.*' "$WORK/$name.out" | cut -c1-110)"
    fi
    [ "$STEP_RC" -ne 0 ] && FAILED=1
}
if [ -x "$MLP" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    mlp_run fashion-mlp-cuda 120
    # every step waits for the device to read its loss (--log-steps), where the run above reads
    # its running totals once an epoch: the samples/s of the two rows say what the wait costs
    mlp_run fashion-mlp-cuda-log-steps 90 --log-steps "$WORK/every-step.log"
    mlp_run fashion-mlp-bf16 90 --precision bf16
    mlp_run fashion-mlp-fp16-ckpt 90 --precision fp16 --checkpoint-activations
    # checkpoints on the GPU: 60 steps with a save, then resume to 120; the resumed log continues
    ck="$WORK/ckpt"
    # shellcheck disable=SC2086
    step ckpt-save 60 $FASHION_CMD --checkpoint-dir "$ck" --save-every 60 --max-steps 60 --log-steps "$WORK/steps.log"
    # shellcheck disable=SC2086
    step ckpt-resume 60 $FASHION_CMD --checkpoint-dir "$ck" --resume auto --max-steps 120 --log-steps "$WORK/steps.log"
    n=0
    [ -f "$WORK/steps.log" ] && n=$(wc -l <"$WORK/steps.log")
    res=$(result_of "$STEP_RC")
    [ "$n" -eq 120 ] || [ "$STEP_RC" -eq 125 ] || res=FAIL
    add_row "checkpoint save + resume (cuda)" "$res" "$n of 120 step losses logged"
    [ "$res" = pass ] || FAILED=1
else
    add_row "fashion_mlp --device cuda" "NOT RUN" "no binary ($MLP) or no data in $DATA"
fi
# examples/quickstart (docs/guide.md) on the GPU: the C API end to end, its own data in memory
QS="$BUILD/examples/quickstart/quickstart"
if [ -x "$QS" ]; then
    step quickstart-cuda 30 env LOCKSTEP_DEVICE=cuda "$QS" --epochs 2 --checkpoint-dir "$WORK/qs"
    acc=$(grep -E '^epoch 2 ' "$WORK/quickstart-cuda.out" | grep -oE '[0-9.]+%$')
    res=$(result_of "$STEP_RC")
    awk -v a="${acc%\%}" 'BEGIN { exit !(a + 0 >= 90) }' || [ "$STEP_RC" -eq 125 ] || res=FAIL
    add_row "quickstart (C API) on cuda, 2 epochs" "$res" "test accuracy ${acc:-none} (at least 90%)"
    [ "$res" = pass ] || FAILED=1
fi

wait "$TORCH_PROBE" 2>/dev/null
[ -f "$WORK/have-torch" ] && HAVE_TORCH=1
echo
echo "python3 torch with CUDA: $([ "$HAVE_TORCH" -eq 1 ] && echo yes || echo no) ($(left)s of the budget left)"

# median of the numbers on stdin (the mean of the two middle ones for an even count)
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else if (NR) printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# step_ms of the steps named NAME-r* (one per round), space-separated, in round order
round_ms() { for f in "$WORK/$1"-r*.out; do grep -ohE 'step_ms [0-9.]+' "$f" 2>/dev/null | awk '{print $2}'; done | xargs; }

# ---- lockstep vs PyTorch eager on the same GPU, model, batch and precision: A B A B (MLP_ROUNDS
# rounds of each), the median of each side's step times, before the CNN steps so that a tight
# budget cuts those first ----
if [ "$HAVE_TORCH" -eq 1 ] && [ -x "$BENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    for b in 128 4096; do
        steps=400
        [ "$b" -eq 4096 ] && steps=100
        for round in $(seq 1 "$MLP_ROUNDS"); do
            step "lockstep-b$b-r$round" 45 "$BENCH" --device cuda --batch-size "$b" --steps "$steps" --data-dir "$DATA"
            step "torch-b$b-r$round" 60 env LD_LIBRARY_PATH="$TORCH_LD" python3 "$ROOT/cluster/bench/torch_mlp.py" --device cuda --batch-size "$b" \
                --steps "$steps" --data-dir "$DATA"
        done
        ls_all=$(round_ms "lockstep-b$b")
        pt_all=$(round_ms "torch-b$b")
        ls_ms=$(tr ' ' '\n' <<<"$ls_all" | median)
        pt_ms=$(tr ' ' '\n' <<<"$pt_all" | median)
        ratio=$(awk -v a="$ls_ms" -v b="$pt_ms" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", b / a; else print "?" }')
        add_row "MLP fp32 batch $b: lockstep vs torch" "" \
            "median step ${ls_ms:-?} ms [${ls_all:-}] vs ${pt_ms:-?} ms [${pt_all:-}]: $ratio (target >= 1.2x)"
    done
else
    add_row "lockstep vs torch (cuda)" "NOT RUN" "no python3 torch with CUDA, no bench_mlp, or no data"
fi

# ---- where a lockstep MLP step's host time goes (LOCKSTEP_TIMELINE, cluster/bench/timeline_summary.py):
# the time to queue forward, backward and the optimizer. bench_mlp reads the loss only at its last
# step (as the PyTorch peer does), so its steps do not wait for the GPU to read it: the host runs
# ahead and waits inside 'load batch', before it rewrites a slot's staged indices, for the copy
# made from it a step back. A large 'load batch' share: the GPU sets the pace; a small one: the
# host does, and forward + backward + optimizer is the host's cost per step. The trace goes to
# $OUT for ui.perfetto.dev ----
for tb in 128 4096; do
    [ -x "$BENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ] || break
    step timeline-b$tb 30 env LOCKSTEP_TIMELINE="$WORK/timeline-b$tb.json" "$BENCH" --device cuda --batch-size $tb \
        --steps 200 --data-dir "$DATA"
    res=$(result_of "$STEP_RC")
    fig="no timeline written"
    if [ -f "$WORK/timeline-b$tb.json" ]; then
        [ -n "${OUT:-}" ] && cp "$WORK/timeline-b$tb.json" "$OUT/timeline-b$tb.json"
        step timeline-summary-b$tb 20 python3 "$ROOT/cluster/bench/timeline_summary.py" --skip 20 \
            "$WORK/timeline-b$tb.json"
        # "step 0.152 ms: forward 0.041, backward 0.052, optimizer 0.011, load (waits for the GPU) 0.044,
        # read loss 0.000 (ms/step)"
        fig=$(awk '
            /mean step/ { for (i = 1; i <= NF; i++) if ($i == "step") st = $(i + 1) }
            $1 == "forward" { f = $4 } $1 == "backward" { b = $4 } $1 == "optimizer" { o = $4 }
            $1 == "load" && $2 == "batch" { l = $5 } /read loss/ { w = $(NF - 1) }
            END { printf "step %s ms: forward %s, backward %s, optimizer %s, load (waits for the GPU) %s, read loss %s (ms/step)",
                  st, f, b, o, l, w }' "$WORK/timeline-summary-b$tb.out" 2>/dev/null)
    fi
    add_row "MLP b$tb host time (timeline)" "$res" "$fig"
done

# ---- batches from host memory (the path of a data set too big to keep on the GPU): staged in
# pinned memory, the next one gathered and copied on the copy stream while the step runs, against
# the same without prefetching; batch 4096, A B A B ----
if [ -x "$BENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    for round in 1 2; do
        step "host-prefetch-r$round" 30 env LOCKSTEP_DATA_ON_DEVICE=off "$BENCH" --device cuda --batch-size 4096 \
            --steps 100 --data-dir "$DATA"
        step "host-noprefetch-r$round" 30 env LOCKSTEP_DATA_ON_DEVICE=off LOCKSTEP_PREFETCH=off "$BENCH" \
            --device cuda --batch-size 4096 --steps 100 --data-dir "$DATA"
    done
    dev_ms=$(round_ms lockstep-b4096)
    on_all=$(round_ms host-prefetch)
    off_all=$(round_ms host-noprefetch)
    pf=$(grep -ohE 'prefetched [0-9]+' "$WORK"/host-prefetch-r1.out 2>/dev/null | head -n 1)
    add_row "MLP batch 4096, data on the host" "" \
        "prefetch ${on_all:-?} ms vs none ${off_all:-?} ms per step (${pf:-prefetched ?}; on the device: ${dev_ms:-?} ms)"
fi
# the host gather behind that path: the raw-bytes gather that a staged batch of Fashion-MNIST
# does, and for a set of f32 one thread against the threads this machine's cores get (the trainer's)
if [ -x "$BUILD/cluster/bench/bench_gather" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    step bench-gather 20 "$BUILD/cluster/bench/bench_gather" --batch-size 4096 --rounds 101 --data-dir "$DATA"
    fig=$(grep -E '^f32 set ' "$WORK/bench-gather.out" 2>/dev/null | sed -E 's/.*MiB\): //')
    raw=$(grep -E '^bytes \(the trainer' "$WORK/bench-gather.out" 2>/dev/null | sed -E 's/.*: //')
    add_row "host gather, 4096 rows" "$(result_of "$STEP_RC")" "staged bytes ${raw:-?}; an f32 set ${fig:-?}"
fi

# ---- end to end: oom_challenge on its GPU defaults (ResNet 64,128,256,512 x 3 blocks on 128x128x3
# synthetic images, batch 256, 48 GiB cap): the baseline runs out of memory with the allocator's
# error, each remedy (batch 64, bf16, activation checkpointing) and all three fit ----
OOM="$BUILD/examples/oom_challenge/oom_challenge"
if [ -x "$OOM" ]; then
    step oom-challenge 120 "$OOM" --device cuda
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
    add_row "oom_challenge (cuda)" "NOT RUN" "no binary ($OOM): the build failed"
fi

# ---- lockstep vs PyTorch eager on a ResNet: examples/fashion_resnet's model (widths 32,64,128, one
# block per stage), same batch and steps, bf16 (lockstep --precision bf16: bf16 activations, f32
# masters; PyTorch: torch.autocast(bfloat16), channels_last), A B A B, median step times ----
RBENCH="$BUILD/cluster/bench/bench_resnet"
RESNET_BATCH=${RESNET_BATCH:-256}
RESNET_STEPS=${RESNET_STEPS:-100}
if [ -x "$RBENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    ls_res=pass
    for round in 1 2; do
        step "resnet-lockstep-r$round" 45 "$RBENCH" --device cuda --precision bf16 --batch-size "$RESNET_BATCH" \
            --steps "$RESNET_STEPS" --warmup 10 --data-dir "$DATA"
        case $STEP_RC in
        0) ;;
        125) [ "$ls_res" = pass ] && [ "$round" -eq 1 ] && ls_res="NOT RUN" ;;
        *) ls_res=$(result_of "$STEP_RC") ;;
        esac
        [ "$HAVE_TORCH" -eq 1 ] &&
            step "resnet-torch-r$round" 60 env LD_LIBRARY_PATH="$TORCH_LD" python3 "$ROOT/cluster/bench/torch_resnet.py" --device cuda --precision bf16 \
                --channels-last --batch-size "$RESNET_BATCH" --steps "$RESNET_STEPS" --warmup 10 --data-dir "$DATA"
    done
    case $ls_res in pass | "NOT RUN") ;; *) FAILED=1 ;; esac
    ls_all=$(round_ms resnet-lockstep)
    pt_all=$(round_ms resnet-torch)
    ls_ms=$(tr ' ' '\n' <<<"$ls_all" | median)
    pt_ms=$(tr ' ' '\n' <<<"$pt_all" | median)
    ratio=$(awk -v a="$ls_ms" -v b="$pt_ms" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", b / a; else print "?" }')
    peak=$(grep -ohE 'peak_mib [0-9.]+' "$WORK"/resnet-lockstep-r*.out 2>/dev/null | tail -n 1)
    peer="${pt_ms:-?} ms [${pt_all:-}]: $ratio (torch/lockstep)"
    [ "$HAVE_TORCH" -eq 1 ] || peer="no python3 torch with CUDA for the peer"
    add_row "ResNet bf16 batch $RESNET_BATCH: lockstep vs torch" "$ls_res" \
        "median step ${ls_ms:-?} ms [${ls_all:-}] vs $peer, lockstep ${peak:-peak_mib ?}"
else
    add_row "ResNet lockstep vs torch (cuda)" "NOT RUN" "no bench_resnet (the build failed) or no data in $DATA"
fi

# ---- dropout 0.2 on the MLP at batch 4096: lockstep (masks drawn on the device by its Philox
# kernel, keyed to step and sample) against nn.Dropout, one round each, last: a tight budget cuts
# it first; beside the same model's figures without dropout above ----
if [ "$HAVE_TORCH" -eq 1 ] && [ -x "$BENCH" ] && [ -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    step lockstep-drop-r1 30 "$BENCH" --device cuda --batch-size 4096 --steps 100 --dropout 0.2 --data-dir "$DATA"
    res=$(result_of "$STEP_RC")
    case $res in pass | "NOT RUN") ;; *) FAILED=1 ;; esac
    step torch-drop-r1 45 env LD_LIBRARY_PATH="$TORCH_LD" python3 "$ROOT/cluster/bench/torch_mlp.py" --device cuda \
        --batch-size 4096 --steps 100 --dropout 0.2 --data-dir "$DATA"
    add_row "MLP b4096 dropout 0.2 vs torch" "$res" \
        "step $(round_ms lockstep-drop) ms vs $(round_ms torch-drop) ms (without dropout: lockstep $(round_ms lockstep-b4096), torch $(round_ms torch-b4096))"
fi

# ---- a checkpoint of the MLP 784-4096-4096-4096-10 and its AdamW state (441.8 MB) saved and
# loaded on cuda: lockstep (a save stages through 16 MiB of pinned memory, a load copies from the
# mapped file) against torch.save/torch.load (fsync'd and renamed alike), one round each, last ----
CKB="$BUILD/cluster/bench/bench_ckpt"
if [ -x "$CKB" ]; then
    step ckpt-lockstep-save 30 "$CKB" save "$WORK/ck-ls" --device cuda
    res=$(result_of "$STEP_RC")
    step ckpt-lockstep-load 30 "$CKB" load "$WORK/ck-ls" --device cuda
    [ "$res" = pass ] && res=$(result_of "$STEP_RC")
    case $res in pass | "NOT RUN") ;; *) FAILED=1 ;; esac
    secs() { grep -ohE '"seconds": [0-9.]+' "$WORK/$1.out" 2>/dev/null | tail -n 1 | sed 's/.*: //'; }
    peer="no python3 torch with CUDA"
    if [ "$HAVE_TORCH" -eq 1 ]; then
        step ckpt-torch-save 45 env LD_LIBRARY_PATH="$TORCH_LD" python3 "$ROOT/cluster/bench/torch_ckpt.py" save \
            "$WORK/ck-pt" --device cuda
        step ckpt-torch-load 45 env LD_LIBRARY_PATH="$TORCH_LD" python3 "$ROOT/cluster/bench/torch_ckpt.py" load \
            "$WORK/ck-pt" --device cuda
        peer="torch save $(secs ckpt-torch-save) s, load $(secs ckpt-torch-load) s"
    fi
    add_row "checkpoint 441.8 MB (cuda)" "$res" "save $(secs ckpt-lockstep-save) s, load $(secs ckpt-lockstep-load) s vs $peer"
    rm -rf "$WORK/ck-ls" "$WORK/ck-pt"
    # the same model trained 35 steps with a save every 10: synchronous saves against saves in the
    # background (the snapshot copied to pinned host memory, a thread writing)
    step ckpt-train-sync 40 "$CKB" train "$WORK/ck-ts" --device cuda --steps 35 --save-every 10 --data-dir "$DATA"
    res=$(result_of "$STEP_RC")
    step ckpt-train-async 40 "$CKB" train "$WORK/ck-ta" --device cuda --steps 35 --save-every 10 --async \
        --data-dir "$DATA"
    [ "$res" = pass ] && res=$(result_of "$STEP_RC")
    case $res in pass | "NOT RUN") ;; *) FAILED=1 ;; esac
    stopped() { grep -ohE '"stopped": [0-9.]+' "$WORK/$1.out" 2>/dev/null | tail -n 1 | sed 's/.*: //'; }
    add_row "checkpoint saves in training (cuda)" "$res" \
        "3 saves stopped it $(stopped ckpt-train-sync) s, --async $(stopped ckpt-train-async) s (runs $(secs ckpt-train-sync) s, $(secs ckpt-train-async) s)"
    rm -rf "$WORK/ck-ts" "$WORK/ck-ta"
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
