#!/usr/bin/env bash
# messages.sh PROG CASE [ARGS...]: what a run says of a checkpoint directory and a resume that
# cannot go on, one CASE at a time (ARGS go to each run of PROG, a training example):
#   newer   checkpoints of later steps, left by an earlier run, are warned of once in a run of
#           five saves, not at every save
#   lock    DIR/.lock of another user (root's, mode 644: nobody may not open it for writing) is
#           said to be that user's, by uid and name (run as nobody: root only, else skipped, 77)
#   freeze  fashion_resnet's checkpoint saved with --freeze-backbone, resumed without it: the error
#           says how it was saved and the flag to add; the reverse resumes, warning that
#           --freeze-backbone changed; with the flag as saved, it resumes
#   signal  SIGTERM in the step whose --log-steps line could not be written (/dev/full): both are
#           said, and the exit status is 1 (an error), not 143 (a clean preemption)
PROG=$1 CASE=$2
shift 2
MPIRUN=none
. "$(dirname "$0")/lib.sh"
A=(--train-limit 512 --test-limit 100 --batch-size 16 --epochs 1 --no-progress "$@")

case $CASE in
newer)
    train 1 "${A[@]}" --checkpoint-dir D --max-steps 30 --save-every 10 --keep-last 0
    expect_rc 0
    # run again from scratch into the same directory: 5 saves, all of steps below 30
    train 1 "${A[@]}" --checkpoint-dir D --max-steps 25 --save-every 5
    expect_rc 0
    n=$(grep -c "newer than the checkpoint just written" out)
    [ "$n" -eq 1 ] || fail "the checkpoints of later steps were warned of $n times in 5 saves, want once"
    expect_out "'D/step-00000030' and 2 more checkpoints are newer than the checkpoint just written (step 5): an earlier run saved them into 'D'. --resume auto would pick 'D/step-00000030' over this run's checkpoints, and --keep-last neither counts nor removes them: remove them if this run replaces that one, or give this run a directory of its own (said once: this run's later saves keep them too)"
    [ -d D/step-00000030 ] || fail "the newer checkpoint was removed"
    [ "$(cat D/latest)" = step-00000025 ] || fail "latest is '$(cat D/latest)', want step-00000025"
    # a third run, resumed from step 25: step-00000030 alone is newer; said once again
    train 1 "${A[@]}" --checkpoint-dir D --max-steps 28 --save-every 1 --resume D/step-00000025
    expect_rc 0
    n=$(grep -c "newer than the checkpoint just written" out)
    [ "$n" -eq 1 ] || fail "the resumed run warned of the newer checkpoint $n times in 3 saves, want once"
    expect_out "'D/step-00000030' is newer than the checkpoint just written (step 26): an earlier run saved it into 'D'. --resume auto would pick 'D/step-00000030' over this run's checkpoints, and --keep-last neither counts nor removes it: remove it if this run replaces that one, or give this run a directory of its own (said once: this run's later saves keep it too)"
    ;;
lock)
    [ "$(id -u)" = 0 ] || { echo "SKIP: needs root to run as nobody beside root's lock"; exit 77; }
    command -v setpriv >/dev/null || { echo "SKIP: no setpriv"; exit 77; }
    as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    "${as[@]}" "$PROG" --help >/dev/null 2>&1 || { echo "SKIP: $NAME cannot run as nobody here"; exit 77; }
    chmod 755 "$tmp"
    mkdir D && chmod 777 D
    echo "pid 1 on elsewhere" >D/.lock
    chmod 644 D/.lock # root's, as another user's run leaves it
    "${as[@]}" "$PROG" "${A[@]}" --checkpoint-dir D --max-steps 2 --save-every 1 >out 2>&1
    rc=$?
    expect_rc 1
    expect_out "$NAME: --checkpoint-dir: I/O error: 'D/.lock': cannot open the checkpoint directory's lock: Permission denied: it belongs to another user, uid 0 (root), so 'D' is probably that user's run's checkpoint directory: give this run a directory of its own, or ask that user"
    [ ! -e D/step-00000001 ] || fail "a checkpoint was saved beside another user's lock"
    ;;
freeze)
    train 1 "${A[@]}" --checkpoint-dir F --max-steps 2 --save-every 2 --freeze-backbone
    expect_rc 0
    train 1 "${A[@]}" --checkpoint-dir F --max-steps 4 --save-every 2 --resume auto
    expect_rc 1
    expect_out "$NAME: --resume: invalid argument: the checkpoint was saved with --freeze-backbone (the backbone frozen, without optimizer state): add --freeze-backbone to resume it: 'F/step-00000002/optimizer.safetensors': no tensor '1.weight.momentum' (and 17 more state tensors) for this run's optimizer: the run that saved it had those parameters frozen (left out of its optimizer), and this run trains them; resume with them frozen"
    ! grep -q "resumed from" out || fail "resumed a checkpoint of a frozen backbone without --freeze-backbone"
    # the reverse resumes (fine-tuning the classifier of a checkpoint that trained every layer: its
    # backbone's optimizer state unused), warning with the flag's name
    train 1 "${A[@]}" --checkpoint-dir T --max-steps 2 --save-every 2
    expect_rc 0
    train 1 "${A[@]}" --checkpoint-dir T --max-steps 4 --save-every 2 --resume auto --freeze-backbone
    expect_rc 0
    expect_out "--freeze-backbone changed since the checkpoint: saved off, now on; this run's applies"
    expect_out "$NAME: resumed from T/step-00000002 at step 2"
    # with the flag as it was saved, it resumes
    train 1 "${A[@]}" --checkpoint-dir F --max-steps 4 --save-every 2 --resume auto --freeze-backbone
    expect_rc 0
    expect_out "$NAME: resumed from F/step-00000002 at step 2"
    ;;
signal)
    # --metrics on a FIFO: rank 0 opens it after the SIGTERM handler is in place, and waits there
    # for a reader; the SIGTERM sent meanwhile is pending when step 1 ends, the step whose
    # --log-steps line /dev/full refuses
    mkfifo M
    "$PROG" "${A[@]}" --epochs 100 --checkpoint-dir D --save-every 100000 --log-steps /dev/full --metrics M \
        >out 2>&1 &
    pid=$!
    for _ in $(seq 400); do
        cgt=$(sed -n 's/^SigCgt:[[:space:]]*//p' /proc/$pid/status 2>/dev/null)
        [ -n "$cgt" ] && (((16#$cgt >> 14) & 1)) && break # SIGTERM (15) caught
        sleep 0.05
    done
    (((16#${cgt:-0} >> 14) & 1)) || { kill -KILL $pid; fail "the SIGTERM handler was not installed"; }
    kill -TERM $pid
    cat M >metrics.out
    wait $pid
    rc=$?
    expect_rc 1
    expect_out "$NAME: --log-steps: I/O error: cannot write '/dev/full': No space left on device; saving a checkpoint of step 1 and stopping"
    expect_out "$NAME: received SIGTERM: finished step 1, saved checkpoint D/step-00000001; exiting with status 1 for the --log-steps error"
    [ -f D/step-00000001/manifest.json ] || fail "no checkpoint of step 1"
    [ "$(grep -c '"step": *1\b' metrics.out)" -eq 1 ] || fail "--metrics lacks step 1: $(cat metrics.out)"
    ;;
*) fail "case '$CASE'" ;;
esac
echo "PASS: $CASE"
