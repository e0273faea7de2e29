#!/bin/bash
# test_netns.sh: two "hosts" made of network namespaces (netns_two_hosts.sh): a 2-rank
# MPI_Allreduce launched through lockstep-run with a hostfile of their addresses must give the
# right sum in both ranks, the ranks must run in two different namespaces (and not this one), the
# result file must equal the single-host 2-rank run's, and the compare mode must catch outputs
# that differ. Skips (77) where namespaces cannot be made.
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

case_ "the namespaces are removed afterwards"
left=$(ip netns list 2>/dev/null | grep -c '^ls_h[01]_')
[ "$left" = "$before" ] || fail "$((left - before)) namespace(s) left behind: $(ip netns list)"
finish
