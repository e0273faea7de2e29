#!/bin/bash
# test_netns_train.sh: the same short fashion_mlp training run as 2 ranks on one host and as 2
# ranks on two network-namespace "hosts" (netns_two_hosts.sh --compare-file) must end with
# bit-identical parameters (--dump-params), and the MPI backend's all-reduce parts must be 16 MiB
# on one host and 1 MiB across the two. Skips (77) without namespaces or the dataset.
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
finish
