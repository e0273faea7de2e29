#!/bin/bash
# test_netns.sh: two "hosts" made of network namespaces (netns_two_hosts.sh): a 2-rank
# MPI_Allreduce launched through lockstep-run with a hostfile of their addresses must give the
# right sum in both ranks, the ranks must run in two different namespaces (and not this one), the
# result file must equal the single-host 2-rank run's, and the compare mode must catch outputs
# that differ; --exec runs a command on the first host with LOCKSTEP_RUN, MASTER_ADDR and the
# hosts' names set up, and --rate limits the link. Skips (77) where namespaces cannot be made.
# Usage: test_netns.sh LOCKSTEP_RUN NETNS_TWO_HOSTS_SH NETNS_ALLREDUCE
. "$(dirname "$0")/lib.sh"
H=$2
PROG=$3

before=$(ip netns list 2>/dev/null | grep -c '^ls_h[01]_')

case_ "allreduce across two namespaces"
"$H" --lockstep-run "$LSR" --timeout 60 -- "$PROG" >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
[ "$rc" = 77 ] && { cat "$tmp/run.err" >&2; exit 77; }
[ "$rc" = 0 ] || fail "harness exit status $rc: $(cat "$tmp/run.err")"
out=$(sort "$tmp/run.out")
re='^rank ([01])/2 host (ls-h[01]) netns (net:\[[0-9]+\]) sum ok$'
mapfile -t lines <<<"$out"
[ "${#lines[@]}" = 2 ] || fail "expected 2 lines, got: $out"
[[ ${lines[0]} =~ $re ]] && [ "${BASH_REMATCH[1]}" = 0 ] && [ "${BASH_REMATCH[2]}" = ls-h0 ] || fail "rank 0: '${lines[0]}'"
ns0=${BASH_REMATCH[3]}
[[ ${lines[1]:-} =~ $re ]] && [ "${BASH_REMATCH[1]}" = 1 ] && [ "${BASH_REMATCH[2]}" = ls-h1 ] || fail "rank 1: '${lines[1]:-}'"
ns1=${BASH_REMATCH[3]}
[ "$ns0" != "$ns1" ] || fail "both ranks ran in namespace $ns0"
self=$(readlink /proc/self/ns/net)
[ "$ns0" != "$self" ] && [ "$ns1" != "$self" ] || fail "a rank ran in the test's own namespace $self"

case_ "--compare-file: the reduced vector equals the single-host run's"
"$H" --lockstep-run "$LSR" --timeout 60 --compare-file -- "$PROG" --out @OUT@ >"$tmp/cmp.out" 2>"$tmp/cmp.err"
rc=$?
[ "$rc" = 0 ] || fail "exit status $rc: $(cat "$tmp/cmp.err")"
grep -q "outputs identical (524288 bytes)" "$tmp/cmp.err" || fail "no comparison reported: $(cat "$tmp/cmp.err")"

case_ "--compare-file reports outputs that differ"
"$H" --lockstep-run "$LSR" --timeout 60 --compare-file -- sh -c 'readlink /proc/self/ns/net >"$0"' @OUT@ \
    >"$tmp/neg.out" 2>"$tmp/neg.err"
rc=$?
[ "$rc" = 1 ] || fail "exit status $rc for differing outputs, expected 1: $(cat "$tmp/neg.err")"
grep -q "outputs differ" "$tmp/neg.err" || fail "no difference reported: $(cat "$tmp/neg.err")"

case_ "--exec --rate: a command on the first host, LOCKSTEP_RUN reaches both, the link limited"
"$H" --lockstep-run "$LSR" --timeout 60 --rate 100mbit --exec -- sh -c \
    'hostname; echo "master $MASTER_ADDR"; getent hosts ls-h1; tc qdisc show dev lsveth0;
     "$LOCKSTEP_RUN" -n 2 -- hostname' >"$tmp/exec.out" 2>"$tmp/exec.err"
rc=$?
[ "$rc" = 0 ] || fail "exit status $rc: $(cat "$tmp/exec.out" "$tmp/exec.err")"
[ "$(head -1 "$tmp/exec.out")" = ls-h0 ] || fail "not run on ls-h0: $(cat "$tmp/exec.out")"
grep -qx "master 10.77.0.1" "$tmp/exec.out" || fail "MASTER_ADDR: $(cat "$tmp/exec.out")"
grep -Eq '^10\.77\.0\.2 +ls-h1$' "$tmp/exec.out" || fail "ls-h1 does not resolve to 10.77.0.2: $(cat "$tmp/exec.out")"
grep -q "qdisc tbf .* rate 100Mbit" "$tmp/exec.out" || fail "no 100 Mbit/s token bucket: $(cat "$tmp/exec.out")"
[ "$(tail -2 "$tmp/exec.out" | sort | tr '\n' ' ')" = "ls-h0 ls-h1 " ] ||
    fail "LOCKSTEP_RUN -n 2 did not run on both hosts: $(cat "$tmp/exec.out")"
[ -z "$(ls /etc/netns 2>/dev/null | grep '^ls_h[01]_')" ] || fail "/etc/netns entries left: $(ls /etc/netns)"

case_ "the namespaces are removed afterwards"
left=$(ip netns list 2>/dev/null | grep -c '^ls_h[01]_')
[ "$left" = "$before" ] || fail "$((left - before)) namespace(s) left behind: $(ip netns list)"
finish
