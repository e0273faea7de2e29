# runs.sh: sourced by check_emu_mlp.sh and check_emu_cnn.sh. Works in a fresh directory (left on
# exit) and defines:
#   train NAME [VAR=VALUE ...] -- ARGS...   runs "${launch[@]}" "$prog" "${base[@]}" ARGS with the
#       variables set, writing NAME.loss (--log-steps) and NAME.bin (--dump-params); stops the
#       script on a failure; prints the last epoch line
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

train() {
    local name=$1
    shift
    local envs=()
    while [ "$1" != "--" ]; do
        envs+=("$1")
        shift
    done
    shift
    local out
    out=$(env "${envs[@]}" "${launch[@]}" "$prog" "${base[@]}" --log-steps "$name.loss" --dump-params "$name.bin" \
        "$@" 2>&1) || fail "$name (${envs[*]} ${launch[*]} $* ) failed: $out"
    printf '%s: %s\n' "$name" "$(grep -E '^epoch' <<<"$out" | tail -n 1)"
}

close() {
    python3 "$emu_dir/compare_runs.py" "$1" "$2" "$3" || fail "$1 and $2 differ (tolerance $3)"
}
