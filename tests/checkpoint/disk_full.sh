#!/usr/bin/env bash
# disk_full.sh PROG TOOL MPIRUN|none: the file system of --checkpoint-dir misbehaving during a run,
# on a tmpfs of its own in a private mount namespace (root, or another user in a user namespace of
# its own where the system allows them: else skipped, 77). Room for one
# checkpoint and a half: the first save is made, the second fails: exit 1, the error naming the
# file and "No space left on device" (written in the background with --save-async, said at the
# next save), the first checkpoint verifies, nothing else is left in the directory, and once there
# is room --resume auto continues from it. The same on 2 ranks: every rank ends, exit 1, the error
# said once (rank 0's; each rank printed it, then aborted the job: Open MPI's MPI_ABORT banner).
# A read-only checkpoint directory: resumed from, evaluated and verified; saving there is refused
# at the start, naming it. --log-steps rewritten at a resume on a full disk: refused, no FILE.tmp left.
PROG=$1 TOOL=$2 MPIRUN=$3
. "$(dirname "$0")/lib.sh"
export LOCKSTEP_DEVICE=cpu
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    NS=(unshare -m)
elif unshare -r -m true 2>/dev/null; then # another user: root in a user namespace of its own
    NS=(unshare -r -m)
    # Open MPI's session directory, /tmp/ompi.HOST.UID, is then root's (uid 0 there): one of its own
    mkdir "$tmp/mpitmp" && export TMPDIR=$tmp/mpitmp
else
    echo "skipped: needs mount namespaces (a tmpfs of its own), as root or in a user namespace, which this system refuses"
    exit 77
fi
A=(--train-limit 1024 --test-limit 100 --hidden 16 --no-progress)
mkdir fs
# in_fs SIZE CMD...: CMD (a shell command line) with a SIZE tmpfs on fs/, output into $tmp/out
in_fs() {
    local size=$1
    shift
    timeout 120 "${NS[@]}" sh -c 'mount -t tmpfs -o "size=$1" tmpfs fs && shift && eval "$@"' sh "$size" "$@" \
        >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -ne 124 ] || fail "$*: still running after 120 s"
}
# full_case NP ARGS...: 180 KiB hold one checkpoint of this MLP (112 KiB) and its start check
# (about 0.17 MB free), not two
full_case() {
    local np=$1 run
    shift
    run="\"$PROG\" ${A[*]} $* --max-steps 4 --save-every 1 --checkpoint-dir fs/ck"
    [ "$np" -eq 1 ] || run="\"$MPIRUN\" --oversubscribe --bind-to none -np $np $run"
    in_fs 180k "$run; echo \"rc=\$?\"; \"$TOOL\" verify fs/ck; echo \"verify=\$?\"; echo '<ls>'; ls -A fs/ck; echo '</ls>';
        mount -o remount,size=1m tmpfs fs; $run --resume auto; echo \"resumed=\$?\""
    local what="$np rank(s) $*"
    grep -qx "rc=1" "$tmp/out" || fail "$what: the run on a full disk did not exit 1"
    local err="$NAME: checkpoint: I/O error: optimizer state '0.weight.momentum': "
    [ -z "$*" ] || err="$NAME: checkpoint: I/O error: the checkpoint of step 2, written in the background: safetensors: tensor '0.weight.momentum': "
    err+="'fs/ck/step-00000002.tmp/optimizer.safetensors.tmp': write failed: No space left on device"
    local n
    n=$(grep -cxF -- "$err" "$tmp/out")
    [ "$n" -eq 1 ] || fail "$what: '$err' said $n times, expected once"
    grep -q "MPI_ABORT\|aborting the mpi communicator\|(on rank 0)" "$tmp/out" &&
        fail "$what: a failed save, known to every rank, aborted the job or was said again"
    grep -qx "ok       fs/ck/step-00000001 (step 1)" "$tmp/out" && grep -qx "verify=0" "$tmp/out" ||
        fail "$what: the checkpoint of step 1 does not verify"
    local left
    left=$(sed -n '/^<ls>$/,/^<\/ls>$/p' "$tmp/out" | grep -v '^</\?ls>$' | tr '\n' ' ')
    [ "$left" = ".lock latest step-00000001 " ] || fail "$what: left in the directory: $left"
    grep -qF "$NAME: resumed from fs/ck/step-00000001 at step 1" "$tmp/out" && grep -qx "resumed=0" "$tmp/out" ||
        fail "$what: --resume auto did not continue from step 1"
    echo "ok: $what: a full disk at the second save"
}
full_case 1
full_case 1 --save-async
if [ "$MPIRUN" != none ]; then
    full_case 2
    full_case 2 --save-async
fi

# read-only: resume, evaluate and verify work; a save there is refused at the start
run="\"$PROG\" ${A[*]} --max-steps 2 --save-every 1 --checkpoint-dir fs/ck >/dev/null 2>&1; mount -o remount,ro tmpfs fs;
    \"$PROG\" ${A[*]} --max-steps 4 --checkpoint-dir fs/ck --resume auto; echo \"resume=\$?\";
    \"$PROG\" ${A[*]} --epochs 0 --resume fs/ck/step-00000002; echo \"eval=\$?\";
    \"$TOOL\" verify fs/ck; echo \"verify=\$?\";
    \"$PROG\" ${A[*]} --max-steps 4 --save-every 1 --checkpoint-dir fs/ck --resume auto; echo \"save=\$?\""
in_fs 1m "$run"
grep -qx "resume=0" "$tmp/out" && grep -qF "$NAME: stopped at step 4 (--max-steps)" "$tmp/out" ||
    fail "read-only: resuming without a save failed"
# --checkpoint-dir alone saves at the end; a store that cannot be written gives that up, saying so
grep -qF "[lockstep warn] --checkpoint-dir 'fs/ck': cannot write in the directory: Read-only file system: no checkpoint will be saved at the end of this run (--save-every N would make this an error)" "$tmp/out" ||
    fail "read-only: the run resumed from it did not say that it saves no checkpoint at the end"
grep -qx "eval=0" "$tmp/out" && grep -qF "$NAME: nothing to train (--epochs 0); the model as it is: test loss" \
    "$tmp/out" || fail "read-only: evaluating a checkpoint failed"
grep -qx "verify=0" "$tmp/out" && grep -qx "ok       fs/ck/step-00000002 (step 2)" "$tmp/out" ||
    fail "read-only: verify failed"
grep -qx "save=1" "$tmp/out" &&
    grep -qxF "$NAME: --checkpoint-dir: I/O error: 'fs/ck': cannot write in the directory: Read-only file system" \
        "$tmp/out" || fail "read-only: a save there not refused at the start"
echo "ok: a read-only checkpoint directory"

# --log-steps on a full disk at a resume that rewrites it (its lines kept are not its first ones: a
# step 99 among them): refused, the file as it was, no l.txt.tmp left (it was, cut short)
"$PROG" "${A[@]}" --max-steps 2 --save-every 2 --checkpoint-dir ck >/dev/null 2>&1 || fail "a run to resume from"
run="python3 -c 'import sys; sys.stdout.write(\"\".join(\"%d %s\\n\" % (i % 31 or 99, \"x\" * 80) for i in range(1, 61)))' >fs/l.txt;
    cp fs/l.txt before.txt; \"$PROG\" ${A[*]} --max-steps 4 --checkpoint-dir ck --resume auto --log-steps fs/l.txt;
    echo \"rc=\$?\"; cmp fs/l.txt before.txt && echo same; ls -A fs"
in_fs 8k "$run"
grep -qx "rc=1" "$tmp/out" && grep -qF "$NAME: --log-steps: I/O error: cannot rewrite '$tmp/fs/l.txt': No space left on device" \
    "$tmp/out" || fail "--log-steps rewritten on a full disk: not refused, naming it"
grep -qx same "$tmp/out" || fail "--log-steps rewritten on a full disk: the file changed"
grep -qx "l.txt.tmp" "$tmp/out" && fail "--log-steps rewritten on a full disk: l.txt.tmp left"
echo "ok: --log-steps rewritten at a resume on a full disk"
echo PASS
