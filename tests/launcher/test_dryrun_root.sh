#!/bin/bash
# test_dryrun_root.sh: mpirun gets --allow-run-as-root exactly when lockstep-run runs as root;
# as root the test also runs it as an unprivileged user (setpriv) and expects no flag.
. "$(dirname "$0")/lib.sh"
fake mpirun
M=$tmp/bin/mpirun
tail_="--bind-to none --map-by slot -x OMP_NUM_THREADS=1 true"
over=; [ 2 -gt "$CORES" ] && over=" --oversubscribe"

case_ "as uid $(id -u)"
run "$LSR" --dry-run -n 2 -x OMP_NUM_THREADS=1 true
expect_rc 0
if [ "$(id -u)" = 0 ]; then
    expect_out "$M -np 2 --allow-run-as-root$over $tail_"
else
    expect_out "$M -np 2$over $tail_"
fi

if [ "$(id -u)" = 0 ]; then
    case_ "as nobody"
    if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null &&
        setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$LSR"; then
        run setpriv --reuid=65534 --regid=65534 --clear-groups "$LSR" --dry-run -n 2 -x OMP_NUM_THREADS=1 true
        expect_rc 0
        expect_out "$M -np 2$over $tail_"
    else
        echo "note: cannot run lockstep-run as nobody here; checked the root case only" >&2
    fi
    case_ "as root, through a real mpirun when present"
    if command -v mpirun >/dev/null; then
        run PATH=/usr/local/bin:/usr/bin:/bin "$LSR" -n 2 true
        expect_rc 0
    fi
fi
finish
