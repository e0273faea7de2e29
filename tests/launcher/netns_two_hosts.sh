#!/bin/bash
# netns_two_hosts.sh: runs a program as 2 MPI ranks on two "hosts" made of network namespaces on
# this machine, launched through lockstep-run with a hostfile of their addresses. The namespaces
# are joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24); Open MPI's remote agent
# (plm_rsh_agent) is a small script that enters the target's namespace instead of ssh; TCP is
# restricted to that subnet. Each namespace also gets its own UTS namespace (host names ls-h0,
# ls-h1), so Open MPI sees two nodes. Exits 77 (CTest's skip code) where namespaces cannot be made.
#
# Usage: netns_two_hosts.sh [options] [--] program [args...]
#   --lockstep-run PATH  the launcher (default: $LOCKSTEP_RUN, else lockstep-run in PATH)
#   --compare-file       also run program as 2 ranks on one host (lockstep-run -n 2) and cmp the
#                        files it writes: every @OUT@ in args becomes a per-run path
#   --compare-stdout     also run it on one host and compare the two runs' standard output,
#                        lines sorted (the ranks' lines interleave in any order)
#   --launcher-arg ARG   pass ARG to lockstep-run in both runs (repeatable), e.g. -x VAR
#   --out-dir DIR        keep the outputs there (single.out, netns.out; *.stdout) instead of a
#                        temporary directory
#   --timeout S          limit for each run, seconds (default 120)
#   --rate RATE          limit each direction of the link to RATE (tc's syntax: 1gbit, 500mbit),
#                        a token bucket (tbf) on both ends of the veth pair; default: no limit
#   --exec               instead of starting program through lockstep-run, run the command itself
#                        on the first host (ls-h0), with LOCKSTEP_RUN set to a lockstep-run that
#                        starts its ranks on the two hosts (hostfile, agent and TCP settings
#                        included) and MASTER_ADDR=10.77.0.1; the hosts' names resolve to their
#                        addresses there. For benchmarks across a (throttled) link, e.g.
#                        netns_two_hosts.sh --lockstep-run build/launcher/lockstep-run --rate 1gbit \
#                            --timeout 3600 --exec -- /usr/bin/python3 cluster/bench/compare_compress.py
# Exit status: the program's (run and exec modes); in a compare mode 0 when both runs succeed and
# their outputs are identical, 1 when not; 77 when skipped.
set -u

mode=run
lsr=${LOCKSTEP_RUN:-}
out_dir=
limit=120
rate=
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    --lockstep-run) lsr=$2; shift 2 ;;
    --compare-file) mode="file"; shift ;;
    --compare-stdout) mode="stdout"; shift ;;
    --out-dir) out_dir=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --launcher-arg) extra+=("$2"); shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --exec) mode="exec"; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "netns_two_hosts: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
if [ $# -eq 0 ]; then
    echo "netns_two_hosts: no program given (see --help)" >&2
    exit 2
fi
if [ -n "$rate" ] && ! [[ $rate =~ ^[1-9][0-9]{0,5}[kmg]bit$ ]]; then
    echo "netns_two_hosts: --rate $rate: expected a whole number (up to 6 digits) of kbit, mbit or gbit" \
        "(e.g. 1gbit)" >&2
    exit 2
fi
skip() { echo "SKIP: $*" >&2; exit 77; }
[ -n "$lsr" ] || lsr=$(command -v lockstep-run) || { echo "netns_two_hosts: lockstep-run not found; pass --lockstep-run" >&2; exit 2; }
[ -x "$lsr" ] || { echo "netns_two_hosts: --lockstep-run $lsr: not an executable file" >&2; exit 2; }
lsr=$(readlink -f "$lsr")
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is not installed"
command -v mpirun >/dev/null || skip "mpirun (Open MPI) is not installed"
command -v orted >/dev/null || skip "orted is not in PATH (is this Open MPI?)"

tag=$$
ns0=ls_h0_$tag
ns1=ls_h1_$tag
work=$(mktemp -d "${TMPDIR:-/tmp}/ls_netns.XXXXXX") || exit 1
chmod 755 "$work"
# `ip netns add` turns /run/netns into a mount point: where this script made it one, it is undone
# at the end (left behind, it pins a chroot's /run; the netns tests hold a CTest resource lock).
netns_premounted=0
etc_netns_made=0
[ -d /etc/netns ] || etc_netns_made=1
mountpoint -q /run/netns 2>/dev/null && netns_premounted=1
cleanup() {
    for ns in "$ns0" "$ns1"; do
        if ip netns pids "$ns" >/dev/null 2>&1; then
            for pid in $(ip netns pids "$ns"); do kill -9 "$pid" 2>/dev/null; done
        fi
        [ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
        [ -d "/etc/netns/$ns" ] && rm -rf "/etc/netns/$ns"
    done
    [ "$etc_netns_made" = 1 ] && rmdir /etc/netns 2>/dev/null
    if [ "$netns_premounted" = 0 ] && mountpoint -q /run/netns 2>/dev/null &&
        [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
        umount -l /run/netns 2>/dev/null
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$ns0" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
ip netns add "$ns1" 2>"$work/err" || skip "cannot create a network namespace: $(cat "$work/err")"
# Entering one remounts /sys, which fails where / is not a mount point (a chroot, some containers).
ip -n "$ns0" link show lo >/dev/null 2>"$work/err" || skip "cannot enter a network namespace: $(cat "$work/err")"
ip link add lsveth0 netns "$ns0" type veth peer name lsveth1 netns "$ns1" 2>"$work/err" ||
    skip "cannot create a veth pair: $(cat "$work/err")"
setup_ns() { # ns dev address
    ip -n "$1" link set lo up &&
        ip -n "$1" addr add "$3/24" dev "$2" &&
        ip -n "$1" link set "$2" up
}
setup_ns "$ns0" lsveth0 10.77.0.1 && setup_ns "$ns1" lsveth1 10.77.0.2 || {
    echo "netns_two_hosts: cannot configure the namespaces" >&2
    exit 1
}
unshare --uts true 2>"$work/err" || skip "cannot create a UTS namespace: $(cat "$work/err")"
if [ -n "$rate" ]; then
    # The bucket holds 4 ms at RATE, at least 256 KiB: veth passes 64 KiB GSO segments, and a
    # bucket smaller than one would stall the link.
    case $rate in
    *kbit) bits=$((${rate%kbit} * 1000)) ;;
    *mbit) bits=$((${rate%mbit} * 1000000)) ;;
    *gbit) bits=$((${rate%gbit} * 1000000000)) ;;
    esac
    burst=$((bits / 8 / 250))
    [ "$burst" -ge 262144 ] || burst=262144
    for end in "$ns0 lsveth0" "$ns1 lsveth1"; do
        read -r ns dev <<<"$end"
        ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms \
            2>"$work/err" || skip "cannot limit the link's rate (tc tbf): $(cat "$work/err")"
    done
fi

# The remote agent. Open MPI calls it like ssh: agent [options] host command... where command is
# the orted command line, quoted for a shell.
agent=$work/ns-agent.sh
cat >"$agent" <<EOF
#!/bin/sh
# ns-agent.sh: plm_rsh_agent for netns_two_hosts.sh; runs the command in the host's namespace.
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1
shift
case \$host in
10.77.0.1) ns=$ns0; name=ls-h0 ;;
10.77.0.2) ns=$ns1; name=ls-h1 ;;
*) echo "ns-agent: unknown host '\$host'" >&2; exit 255 ;;
esac
echo "\$host" >>"$work/agent.log"
exec ip netns exec "\$ns" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$name" "\$*"
EOF
chmod 755 "$agent"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$work/hostfile"

# lockstep-run with what it takes to start ranks on the two hosts.
{
    echo '#!/bin/bash'
    echo '# lockstep-run for netns_two_hosts.sh: ranks on 10.77.0.1 and 10.77.0.2, TCP between them.'
    printf 'exec %q --hostfile %q --mca plm_rsh_agent %q --mca btl self,tcp' "$lsr" "$work/hostfile" "$agent"
    echo ' --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 "$@"'
} >"$work/lockstep-run"
chmod 755 "$work/lockstep-run"

# Substitute @OUT@ in the program's arguments.
subst_args() { # out-path args...
    local out=$1
    shift
    args=()
    local a
    for a in "$@"; do args+=("${a//@OUT@/$out}"); done
}

run_netns() { # stdout-file out-path
    subst_args "$2" "${@:3}"
    timeout -k 5 "$limit" ip netns exec "$ns0" unshare --uts sh -c 'hostname ls-h0 && exec "$@"' sh \
        "$work/lockstep-run" "${extra[@]}" -n 2 -- "${args[@]}" | tee "$1"
    local rc=${PIPESTATUS[0]}
    if ! grep -qx 10.77.0.2 "$work/agent.log" 2>/dev/null; then
        echo "netns_two_hosts: Open MPI never used the agent to start a daemon on 10.77.0.2" >&2
        return 1
    fi
    return "$rc"
}

run_single() { # stdout-file out-path
    subst_args "$2" "${@:3}"
    timeout -k 5 "$limit" "$lsr" "${extra[@]}" -n 2 -- "${args[@]}" | tee "$1"
    return "${PIPESTATUS[0]}"
}

dir=${out_dir:-$work}
mkdir -p "$dir" || exit 1
if [ "$mode" = exec ]; then
    # `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: each host's name resolves to its
    # address, as on a cluster (PyTorch's gloo binds to the address of the host's name).
    for ns in "$ns0" "$ns1"; do
        mkdir -p "/etc/netns/$ns" &&
            printf '127.0.0.1 localhost\n10.77.0.1 ls-h0\n10.77.0.2 ls-h1\n' >"/etc/netns/$ns/hosts" || exit 1
    done
    LOCKSTEP_RUN=$work/lockstep-run MASTER_ADDR=10.77.0.1 timeout -k 5 "$limit" \
        ip netns exec "$ns0" unshare --uts sh -c 'hostname ls-h0 && exec "$@"' sh "$@"
    exit $?
fi
if [ "$mode" = run ]; then
    run_netns "$dir/netns.stdout" "$dir/netns.out" "$@"
    exit $?
fi

echo "netns_two_hosts: single host, 2 ranks" >&2
run_single "$dir/single.stdout" "$dir/single.out" "$@" || {
    echo "netns_two_hosts: the single-host run failed" >&2
    exit 1
}
echo "netns_two_hosts: two namespaces, 2 ranks" >&2
run_netns "$dir/netns.stdout" "$dir/netns.out" "$@" || {
    echo "netns_two_hosts: the two-namespace run failed" >&2
    exit 1
}
if [ "$mode" = file ]; then
    a=$dir/single.out b=$dir/netns.out
else
    sort "$dir/single.stdout" >"$dir/single.stdout.sorted"
    sort "$dir/netns.stdout" >"$dir/netns.stdout.sorted"
    a=$dir/single.stdout.sorted b=$dir/netns.stdout.sorted
fi
[ -e "$a" ] && [ -e "$b" ] || {
    echo "netns_two_hosts: a run wrote no output file (does the program get @OUT@?)" >&2
    exit 1
}
if cmp "$a" "$b"; then
    echo "netns_two_hosts: outputs identical ($(wc -c <"$a") bytes)" >&2
    exit 0
fi
echo "netns_two_hosts: outputs differ" >&2
exit 1
