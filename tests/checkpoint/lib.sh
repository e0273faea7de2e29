# lib.sh: shared by the checkpoint shell tests. Sourced with PROG (a training example:
# fashion_mlp, fashion_resnet) and MPIRUN set by the caller; gives NAME (the program's name, which
# starts its messages), a scratch directory $tmp (the working directory, removed on exit), fail,
# expect_out, expect_rc, train NP ARGS... which runs PROG directly (NP = 1) or under mpirun
# (NP > 1; --save-async only where ARGS hold --save-every), its output into $tmp/out and its exit
# status into $rc, and reldiff/within to compare
# two --dump-params files.
set -u
NAME=$(basename "$PROG")
tmp=$(mktemp -d /tmp/ls_ckpt_e2e.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; echo "--- last output:"; tail -n 30 "$tmp/out" 2>/dev/null; exit 1; }
train() { # NP ARGS...; a script's --save-async goes to the runs that save (--save-every): the others
    # are run without it, which the programs refuse alone
    local np=$1 a keep=() saves=0; shift
    for a in "$@"; do [ "$a" = --save-every ] && saves=1; done
    for a in "$@"; do [ "$a" = --save-async ] && [ "$saves" = 0 ] || keep+=("$a"); done
    set -- "${keep[@]}"
    if [ "$np" -eq 1 ]; then "$PROG" "$@" >"$tmp/out" 2>&1; rc=$?
    else "$MPIRUN" --oversubscribe --bind-to none -np "$np" "$PROG" "$@" >"$tmp/out" 2>&1; rc=$?; fi
}
expect_out() { grep -qF -- "$1" "$tmp/out" || fail "output lacks '$1'"; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1"; }
# the largest |a - b| over the largest |a| of two --dump-params files (f32)
reldiff() {
    paste <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; if (d > m) m = d; if (a > x) x = a; n++ }
             END { if (n == 0 || x == 0) print "inf"; else printf "%.3g\n", m / x }'
}
within() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d != "inf" && d + 0 <= t + 0) }'; }
# dropout_runs PRECISION ARGS...: PROG with ARGS and --dropout 0.3 at a global batch of 32 on 1
# rank (parameters in one.bin); the same with --checkpoint-activations bit for bit (the recomputed
# forward draws the same masks); without dropout far from it (the masks took effect); --precision
# PRECISION trains with dropout; with MPIRUN, 2 ranks of 16 within 1e-5 of one.bin (the masks are
# keyed to sample and step, not to the rank)
dropout_runs() {
    local prec=$1
    shift
    local B=("$@")
    train 1 "${B[@]}" --dropout 0.3 --batch-size 32 --dump-params one.bin
    expect_rc 0
    train 1 "${B[@]}" --dropout 0.3 --batch-size 32 --checkpoint-activations --dump-params ckpt.bin
    expect_rc 0
    cmp -s one.bin ckpt.bin || fail "--checkpoint-activations changed the parameters: the recomputed masks differ"
    train 1 "${B[@]}" --batch-size 32 --dump-params plain.bin
    expect_rc 0
    d=$(reldiff one.bin plain.bin)
    echo "with dropout against without: $d"
    within "$d" 1e-3 && fail "dropout 0.3 moved the parameters by only $d of the largest"
    train 1 "${B[@]}" --dropout 0.3 --batch-size 32 --precision "$prec"
    expect_rc 0
    grep -qE "test acc [0-9.]+%" "$tmp/out" || fail "no test accuracy from the $prec run"
    if [ "$MPIRUN" != none ]; then
        train 2 "${B[@]}" --dropout 0.3 --batch-size 16 --dump-params two.bin
        expect_rc 0
        d=$(reldiff one.bin two.bin)
        echo "1 rank x 32 against 2 ranks x 16: $d"
        within "$d" 1e-5 || fail "2 ranks trained $d of the largest parameter away from 1 rank"
    fi
}
