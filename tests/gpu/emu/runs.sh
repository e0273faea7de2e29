# runs.sh: sourced by check_emu_mlp.sh, check_emu_cnn.sh and check_emu_quickstart.sh. Works in a fresh directory (left on
# exit) and defines:
#   train NAME [VAR=VALUE ...] -- ARGS...   runs "${launch[@]}" "$prog" "${base[@]}" ARGS with the
#       variables set, writing NAME.loss (--log-steps) and NAME.bin (--dump-params); stops the
#       script on a failure; prints the last epoch line
#   run NAME [VAR=VALUE ...] -- ARGS...     the same without base, --log-steps and --dump-params:
#       the output in $out
#   train_bg NAME [VAR=VALUE ...] -- ARGS...  train in the background (its output in NAME.out),
#       for runs on one process each that need not wait for one another: two at a time (a third
#       waits for the first) fill the two cores a test with PROCESSORS 2 holds, as the emulator
#       and the CPU backend (OPENBLAS_NUM_THREADS=1) use one each
#   train_wait                              waits for every train_bg, printing their lines in the
#       order they were started; stops the script if any failed
#   close A B TOL                           compare_runs.py A B TOL, stopping the script on a failure
#   fail MESSAGE
emu_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# no NVML under the emulator; one order of sums on the CPU
export LOCKSTEP_GPU_MONITOR=off OPENBLAS_NUM_THREADS=1
launch=()

fail() {
    echo "FAIL: $*"
    exit 1
}

# split_env [VAR=VALUE ...] -- ARGS...: the variables into envs, the arguments into args
split_env() {
    envs=()
    while [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift
    args=("$@")
}

# run NAME [VAR=VALUE ...] -- ARGS...: "${launch[@]}" "$prog" ARGS with the variables set; its
# output in $out; stops the script on a failure
run() {
    local name=$1
    shift
    split_env "$@"
    out=$(env "${envs[@]}" "${launch[@]}" "$prog" "${args[@]}" 2>&1) ||
        fail "$name (${envs[*]} ${launch[*]} ${args[*]} ) failed: $out"
}

train() {
    local name=$1
    shift
    split_env "$@"
    run "$name" "${envs[@]}" -- "${base[@]}" --log-steps "$name.loss" --dump-params "$name.bin" "${args[@]}"
    printf '%s: %s\n' "$name" "$(grep -E '^epoch' <<<"$out" | tail -n 1)"
}

bg_pids=() bg_names=()
train_bg() {
    [ "${#bg_pids[@]}" -lt 2 ] || bg_wait_first
    (
        train "$@" >"$1.line"
        rc=$?
        printf '%s\n' "$out" >"$1.out"
        exit $rc
    ) >"$1.fail" 2>&1 &
    bg_pids+=($!)
    bg_names+=("$1")
}

bg_wait_first() {
    local rc=0
    wait "${bg_pids[0]}" || rc=1
    cat "${bg_names[0]}.line" "${bg_names[0]}.fail" 2>/dev/null
    bg_pids=("${bg_pids[@]:1}") bg_names=("${bg_names[@]:1}")
    [ "$rc" = 0 ] || fail "a run in the background failed (above)"
}

train_wait() {
    while [ "${#bg_pids[@]}" -gt 0 ]; do bg_wait_first; done
}

close() {
    python3 "$emu_dir/compare_runs.py" "$1" "$2" "$3" || fail "$1 and $2 differ (tolerance $3)"
}
