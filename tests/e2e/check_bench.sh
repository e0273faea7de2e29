#!/usr/bin/env bash
# check_bench.sh BENCH_COLLECTIVES [BENCH_MLP BENCH_RESNET BENCH_CKPT BENCH_BUCKETING]: the
# benchmarks' tables mean what they say. (bench_gather's cold first call, which at --rounds 1 was its
# figure, is fixed without a test here: that would be a timed test; performance is measured in the
# benchmarks, never asserted in tests.) A --device or --backend that names none is bad usage (2).
# The Python drivers' PyTorch runs meet at a port free on this host, so that two can run at once,
# and their records name the machine.
set -u
coll=$1 mlp=${2:-} resnet=${3:-} ckpt=${4:-} bucketing=${5:-}
fail() {
    echo "FAIL: $*"
    exit 1
}
# bench_collectives -f below 2: sizes that are the same whole count of floats are one row (4 B was
# timed and printed 8 times over from -b 4 -f 1.1, 8 B 4 times, 12 B 3 times)
out=$("$coll" --backend self -b 4 -e 16 -f 1.1 -r 1 -n 1 -w 0 2>&1) || fail "bench_collectives: $out"
sizes=$(awk '!/^#/ { printf "%s ", $1 }' <<<"$out")
[ "$sizes" = "4 8 12 " ] || fail "bench_collectives -b 4 -e 16 -f 1.1: rows of sizes '$sizes', expected '4 8 12 ': $out"
echo "PASS: bench_collectives -f 1.1: one row a size"

# A --device or --backend the library refuses as no device or backend is bad usage (exit 2) as any
# other bad flag value (it exited 1, as a failed run), naming the flag; a device this build cannot
# use, or a bad LOCKSTEP_DEVICE, is a failed run (1), as in the examples.
# status WANT_RC WANT PROG ARGS...: PROG exits WANT_RC and its output holds WANT
status() {
    local want_rc=$1 want=$2 out rc
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ "$rc" -eq "$want_rc" ] && grep -qF -- "$want" <<<"$out" ||
        fail "$*: exit $rc (want $want_rc), expected '$want': $(tail -n 3 <<<"$out")"
    echo "PASS: $* (exit $rc)"
}
ckdir=$(mktemp -d)
status 2 "bench_collectives: --backend: backend argument 'foo' is not a communicator backend" "$coll" --backend foo
if [ -n "$bucketing" ]; then
    status 2 "bench_bucketing: --backend: backend argument 'foo' is not a communicator backend" "$bucketing" \
        --backend foo
fi
if [ -n "$mlp" ]; then
    status 2 "bench_mlp: --device: device 'foo' is not one of auto, cpu, cuda, cuda:N" "$mlp" --device foo
    status 1 "bench_mlp: device: LOCKSTEP_DEVICE: device 'foo'" env LOCKSTEP_DEVICE=foo "$mlp"
    status 2 "bench_mlp: --checkpoint-activations '0': out of range (a whole number from 1 to 7)" "$mlp" \
        --checkpoint-activations=0
    # --checkpoint-activations trains the same (the loss printed) as without, frozen layers or not
    if [ -f "${LOCKSTEP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}/train-images-idx3-ubyte.gz" ]; then
        for f in "--freeze 0" "--freeze 2"; do
            # shellcheck disable=SC2086
            a=$("$mlp" --device cpu --steps 3 $f | grep -o 'loss [0-9.]*')
            # shellcheck disable=SC2086
            b=$("$mlp" --device cpu --steps 3 $f --checkpoint-activations=5 | grep -o 'loss [0-9.]*')
            [ -n "$a" ] && [ "$a" = "$b" ] || fail "bench_mlp $f: '$a' without --checkpoint-activations, '$b' with"
            echo "PASS: bench_mlp $f --checkpoint-activations=5: $b, as without"
        done
    fi
    status 2 "bench_resnet: --device: device 'foo' is not one of auto, cpu, cuda, cuda:N" "$resnet" --device foo
    status 2 "bench_ckpt: --device: device 'foo' is not one of auto, cpu, cuda, cuda:N" "$ckpt" save "$ckdir" --device foo
fi
rm -rf "$ckdir"

# The drivers' PyTorch ranks meet at a port: it was 29533 whenever MASTER_PORT was unset, so a
# second run on the node at once failed ("Address already in use") or its ranks joined the first's;
# and torch_ddp_mlp.py's --port lost to a MASTER_PORT set. Now a port free here when the run starts
# ($MASTER_PORT where set; --port over both); a launched job's ranks, which cannot agree on a free
# port, keep 29533. Held here while the cases run, 29533 must not be the port chosen. A stub torch
# (PYTHONPATH) prints the port its ranks would meet at, without PyTorch's seconds of start (and
# without PyTorch or numpy installed).
benchdir=$(cd "$(dirname "$0")/../../cluster/bench" && pwd)
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
d=$(mktemp -d)
holder=
cleanup() {
    [ -z "$holder" ] || kill "$holder" 2>/dev/null
    rm -rf "$d"
}
trap cleanup EXIT
"$py" -c 'import socket, sys, time
s = socket.socket()
try:
    s.bind(("", 29533)); s.listen()
except OSError:
    pass  # in use already: held all the same
open(sys.argv[1], "w").write("held")
time.sleep(300)' "$d/held" &
holder=$!
for _ in $(seq 300); do
    [ -s "$d/held" ] && break
    sleep 0.1
done
[ -s "$d/held" ] || fail "the helper holding port 29533 did not start in 30 s"
mkdir -p "$d/idx64" "$d/stub/torch"
"$py" -c 'import gzip, struct, sys; gzip.open(sys.argv[1], "wb").write(struct.pack(">IIII", 0x803, 64, 28, 28))' \
    "$d/idx64/train-images-idx3-ubyte.gz"
cat >"$d/stub/torch/__init__.py" <<'PY'
import os, sys
def set_num_threads(n):
    pass
def meet(*args, **kwargs):  # the ranks' rendezvous: say where, then end the run
    print("MASTER_PORT", os.environ.get("MASTER_PORT"), flush=True)
    os._exit(0)
PY
printf 'from torch import meet as spawn\n' >"$d/stub/torch/multiprocessing.py"
# and numpy, which a launched rank imports before it meets the others: the stub runs where neither
# is installed (a fresh machine: torch_ddp_mlp.py --launched said it cannot import numpy)
mkdir -p "$d/stub/numpy" && : >"$d/stub/numpy/__init__.py"
printf 'from torch import meet as init_process_group\n' >"$d/stub/torch/distributed.py"
# port_free PORT: PORT can be bound now
port_free() { "$py" -c 'import socket, sys; socket.socket().bind(("", int(sys.argv[1])))' "$1" 2>/dev/null; }
# ddp_port WANT ARGS...: torch_ddp_mlp.py ARGS meets at WANT ("free": a free port, not 29533)
ddp_port() {
    local want=$1 out port
    shift
    out=$(PYTHONPATH="$d/stub" "$py" "$benchdir/torch_ddp_mlp.py" --data-dir "$d/idx64" --batch-size 8 "$@" 2>&1) ||
        fail "torch_ddp_mlp.py $*: exit $?: $out"
    port=$(sed -n 's/^MASTER_PORT //p' <<<"$out")
    if [ "$want" = free ]; then
        [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" != 29533 ] && port_free "$port" ||
            fail "torch_ddp_mlp.py $*: port '$port', expected a free one: $out"
    else
        [ "$port" = "$want" ] || fail "torch_ddp_mlp.py $*: port '$port', expected $want: $out"
    fi
    echo "PASS: torch_ddp_mlp.py $*: port $port"
}
unset MASTER_PORT
ddp_port free --ranks 2
MASTER_PORT=4242 ddp_port 4242 --ranks 2
MASTER_PORT=4242 ddp_port 4343 --ranks 2 --port 4343
ddp_port 29533 --launched
MASTER_PORT=4242 ddp_port 4242 --launched
# the drivers that launch torch_ddp_mlp.py give its ranks --port: $MASTER_PORT, else one free here
# driver_port WANT DRIVER ARGS...: every PyTorch command DRIVER --dry-run prints has --port WANT
driver_port() {
    local want=$1 drv=$2 out ports
    shift 2
    out=$("$py" "$benchdir/$drv" --build /nonexistent --dry-run "$@" 2>&1) || fail "$drv $*: exit $?: $out"
    ports=$(grep torch_ddp_mlp.py <<<"$out" | sed -n 's/.* --port \([0-9]*\).*/\1/p' | sort -u)
    [ "$(grep -c torch_ddp_mlp.py <<<"$out")" -eq 2 ] && [ "$(grep -c -- ' --port ' <<<"$out")" -eq 2 ] &&
        [ "$(wc -l <<<"$ports")" -eq 1 ] || fail "$drv $*: not one --port on both PyTorch commands: $out"
    if [ "$want" = free ]; then
        [ "$ports" != 29533 ] && port_free "$ports" || fail "$drv $*: --port $ports, expected a free one: $out"
    else
        [ "$ports" = "$want" ] || fail "$drv $*: --port $ports, expected $want: $out"
    fi
    echo "PASS: $drv $*: the PyTorch ranks meet at port $ports"
}
driver_port free compare_compress.py
MASTER_PORT=4242 driver_port 4242 compare_compress.py
driver_port free compare_shard.py --torch
MASTER_PORT=4242 driver_port 4242 compare_shard.py --torch
# a MASTER_PORT that is no port is bad usage, named
for drv in compare_compress.py "compare_shard.py --torch"; do
    out=$(MASTER_PORT=x "$py" "$benchdir"/$drv --build /nonexistent --dry-run 2>&1)
    rc=$?
    [ "$rc" -eq 2 ] && grep -q "^${drv%.py*}: MASTER_PORT: 'x' must be a whole number from 1 to 65535$" <<<"$out" ||
        fail "MASTER_PORT=x $drv: exit $rc: $out"
    echo "PASS: MASTER_PORT=x $drv: refused"
done

# Each driver's record names the machine it ran on (README: "each prints the machine, the
# command"): compare_ddp, compare_mlp and compare_resnet printed only the CPU's kind ("x86_64, 2
# cores"), no host. Run here on fakes (copies of the drivers beside peers that print a figure, and a
# build, mpirun and lockstep-run that do), so that no benchmark runs.
fake=$d/fake
mkdir -p "$fake/drv" "$fake/bin" "$fake/build/cluster/bench" "$fake/build/launcher"
cp "$benchdir"/{benchrun.py,fashion_idx.py,compare_ddp.py,compare_mlp.py,compare_resnet.py} "$fake/drv/"
for peer in torch_ddp_mlp torch_mlp torch_resnet; do
    printf '%s\n' 'import sys' 'n = sys.argv[sys.argv.index("--ranks") + 1] if "--ranks" in sys.argv else "1"' \
        'print(f"torch ranks {n} samples/s 50")' >"$fake/drv/$peer.py"
done
for prog in build/cluster/bench/bench_mlp build/cluster/bench/bench_resnet build/launcher/lockstep-run bin/mpirun; do
    printf '%s\n' '#!/bin/sh' 'n=1' 'case "$0" in *mpirun | *lockstep-run) n=2 ;; esac' \
        'echo "lockstep ranks $n samples/s 100 step_ms 1 GFLOP/s 5"' >"$fake/$prog"
    chmod +x "$fake/$prog"
done
host=$(uname -n)
for drv in compare_ddp compare_mlp compare_resnet; do
    out=$(PATH="$fake/bin:$PATH" "$py" "$fake/drv/$drv.py" --build "$fake/build" --rounds 1 2>&1) ||
        fail "$drv.py on fakes: exit $?: $out"
    grep -q "^machine: $host, " <<<"$out" && grep -q "^command: .*$drv.py --build $fake/build --rounds 1$" <<<"$out" ||
        fail "$drv.py: no 'machine: $host, ...' and 'command: ...' lines: $out"
    echo "PASS: $drv.py names the machine: $(grep '^machine: ' <<<"$out")"
done

# compare_ckpt.py given a --bench that prints no JSON result (not bench_ckpt, or an older build's)
# names the command and shows its output (a JSONDecodeError or IndexError traceback)
printf '%s\n' '#!/bin/sh' 'echo ready' 'echo "not json"' >"$fake/nojson"
printf '%s\n' '#!/bin/sh' 'exit 0' >"$fake/silent"
chmod +x "$fake/nojson" "$fake/silent"
for prog in nojson silent; do
    for mode in "" --train; do
        out=$("$py" "$benchdir/compare_ckpt.py" --bench "$fake/$prog" --rounds 1 --hidden 8 $mode 2>&1)
        rc=$?
        [ "$rc" -eq 1 ] && grep -q "^compare_ckpt: $fake/$prog .* printed no JSON result on its last line:$" <<<"$out" &&
            ! grep -q Traceback <<<"$out" || fail "compare_ckpt.py --bench $prog $mode: exit $rc: $out"
        echo "PASS: compare_ckpt.py --bench $prog $mode: refused, named"
    done
done
