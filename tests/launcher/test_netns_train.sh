#!/bin/bash
# test_netns_train.sh: the same short fashion_mlp training run as 2 ranks on one host and as 2
# ranks on two network-namespace "hosts" (netns_two_hosts.sh --compare-file) must end with
# bit-identical parameters (--dump-params), also with --shard-optimizer (gradients reduced to their
# owners, parameters broadcast from theirs), and the MPI backend's all-reduce parts must be 16 MiB
# on one host and 1 MiB across the two; with nonblocking progress the same, with 2 MPI calls
# outstanding at most on one host and 1 across the two (LOCKSTEP_MPI_WINDOW, read from the debug
# line; test_comm_chunk counts the calls); when the link between the hosts goes down during
# training, the job must end (non-zero, mpirun reporting the lost host) within a minute instead of
# hanging.
# Skips (77) without namespaces or the dataset.
# Usage: test_netns_train.sh LOCKSTEP_RUN NETNS_TWO_HOSTS_SH FASHION_MLP DATA_DIR
. "$(dirname "$0")/lib.sh"
H=$2
TRAIN=$3
DATA=$4
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [ -r "$DATA/$f" ] || { echo "SKIP: Fashion-MNIST not found ($DATA/$f)" >&2; exit 77; }
done

case_ "fashion_mlp, 1 epoch of 2000 samples, CPU, MPI communicator"
LOCKSTEP_LOG=debug OPENBLAS_NUM_THREADS=1 "$H" --lockstep-run "$LSR" --timeout 120 --compare-file -- "$TRAIN" \
    --epochs 1 --train-limit 2000 --test-limit 500 --device cpu --comm mpi --data-dir "$DATA" \
    --dump-params @OUT@ >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 77 ] && { cat "$tmp/err" >&2; exit 77; }
[ "$rc" = 0 ] || fail "exit status $rc: $(cat "$tmp/out" "$tmp/err")"
grep -q "outputs identical (2143272 bytes)" "$tmp/err" ||
    fail "parameters not compared as expected (535818 f32): $(cat "$tmp/err")"
[ "$(grep -c '^fashion_mlp: 2 ranks' "$tmp/out")" = 2 ] || fail "expected two 2-rank runs: $(cat "$tmp/out")"

case_ "MPI all-reduce parts: 16 MiB on one host, 1 MiB across hosts (the ranks see two nodes)"
# the single-host run comes first (netns_two_hosts.sh --compare-file)
parts=$(sed -n 's/.*mpi communicator: rank \([01]\) of 2,.* all-reduce parts of \([0-9]*\) bytes.*/\2/p' "$tmp/err" |
    tr '\n' ' ')
[ "$parts" = "16777216 16777216 1048576 1048576 " ] ||
    fail "all-reduce part sizes (single host twice, then two hosts twice): '$parts'; $(cat "$tmp/err")"
case_ "nonblocking progress: identical parameters; 2 calls outstanding on one host, 1 across hosts"
LOCKSTEP_MPI_PROGRESS=nonblocking LOCKSTEP_LOG=debug OPENBLAS_NUM_THREADS=1 "$H" --lockstep-run "$LSR" --timeout 120 \
    --compare-file -- "$TRAIN" --epochs 1 --train-limit 2000 --test-limit 500 --device cpu --comm mpi \
    --data-dir "$DATA" --dump-params @OUT@ >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] || fail "exit status $rc: $(cat "$tmp/out" "$tmp/err")"
grep -q "outputs identical (2143272 bytes)" "$tmp/err" || fail "parameters differ: $(cat "$tmp/err")"
windows=$(sed -n 's/.*mpi communicator: rank \([01]\) of 2, progress nonblocking (window \([0-9]*\)).*/\2/p' \
    "$tmp/err" | tr '\n' ' ')
[ "$windows" = "2 2 1 1 " ] || fail "nonblocking windows (single host twice, then two hosts twice): '$windows'"

case_ "--shard-optimizer: the same parameters on one host (reduce and broadcast in segments, one call after the other) and across two (every segment in flight at once)"
OPENBLAS_NUM_THREADS=1 "$H" --lockstep-run "$LSR" --timeout 120 --compare-file -- "$TRAIN" --epochs 1 --train-limit 2000 \
    --test-limit 500 --device cpu --comm mpi --data-dir "$DATA" --shard-optimizer --optimizer adamw \
    --dump-params @OUT@ >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 0 ] || fail "exit status $rc: $(cat "$tmp/out" "$tmp/err")"
grep -q "outputs identical (2143272 bytes)" "$tmp/err" || fail "parameters differ: $(cat "$tmp/err")"
[ "$(grep -c 'parameters; gradients reduced to their owners$' "$tmp/out")" = 2 ] ||
    fail "expected two sharded runs, gradients reduced to their owners: $(cat "$tmp/out")"

case_ "the link goes down during training: mpirun notices the lost host and ends the job, no hang"
# On the first host: train across both, take the link down once training runs, wait for the job.
# The ranks wait in an all-reduce (LOCKSTEP_COMM_TIMEOUT is longer); mpirun's TCP keepalives to the
# other host's daemon go unanswered, and it ends the job. Here the keepalives are short (3 s idle,
# 3 probes 1 s apart: the kernel answers them while the link is up, however busy the machine; they
# were 10 s and 2 s, 16 s of the test's wait); lockstep-run's defaults took 123 s, Open MPI's own
# take 8 minutes.
cat >"$tmp/partition.sh" <<'SH'
#!/bin/bash
start=$SECONDS
"$LOCKSTEP_RUN" -n 2 --mca oob_tcp_keepalive_time 3 --mca oob_tcp_keepalive_intvl 1 \
    --mca oob_tcp_keepalive_probes 3 -x LOCKSTEP_COMM_TIMEOUT=300 -x OPENBLAS_NUM_THREADS=1 -- "$@" &
pid=$!
for _ in $(seq 300); do grep -q '^epoch 1 ' "$OUT" 2>/dev/null && break; sleep 0.2; done
grep -q '^epoch 1 ' "$OUT" || { echo "partition.sh: training did not start" >&2; kill $pid; exit 99; }
ip link set lsveth0 down
down=$SECONDS
wait $pid
rc=$?
echo "lockstep-run exit $rc, $((SECONDS - down)) s after the link went down ($((down - start)) s in)" >&2
exit $rc
SH
chmod +x "$tmp/partition.sh"
OUT=$tmp/part.out "$H" --lockstep-run "$LSR" --timeout 150 --exec -- "$tmp/partition.sh" "$TRAIN" --epochs 1000 \
    --train-limit 4000 --test-limit 100 --device cpu --comm mpi --no-progress --data-dir "$DATA" \
    >"$tmp/part.out" 2>"$tmp/part.err"
rc=$?
[ "$rc" != 0 ] && [ "$rc" != 99 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] ||
    fail "exit status $rc (99: training never started, 124/137: the job hung):" \
        "$(tail -5 "$tmp/part.out"; cat "$tmp/part.err")"
grep -q "lost communication with a remote daemon" "$tmp/part.err" ||
    fail "mpirun did not report the lost host: $(cat "$tmp/part.err")"
secs=$(sed -n 's/.*exit [0-9]*, \([0-9]*\) s after the link went down.*/\1/p' "$tmp/part.err")
[ -n "$secs" ] && [ "$secs" -le 60 ] || fail "the job took '$secs' s to end after the link went down (limit 60)"

finish
