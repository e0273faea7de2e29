# slurm_cluster.sh: a private two-node Slurm cluster on this machine, for tests (sourced by bash).
# Each node is a network namespace (10.78.0.1 and 10.78.0.2, joined by a veth pair) with its own
# host name (a UTS namespace: ls-s0, ls-s1) and its own Slurm temporary directory (a mount
# namespace binds a per-node directory over TmpFS, where Slurm's PMIx plugin keeps per-step
# files that would collide on one machine). slurmctld and slurmd run from Debian's slurm-wlm
# with a generated slurm.conf: no munge (auth/none), no cgroups (proctrack/linuxproc),
# MpiDefault=none as Slurm ships it. Jobs in partition high preempt those in debug (the default),
# which get SIGTERM and 60 s (GraceTime) before they are requeued. The nodes share this
# machine's CPUs and file system.
#
#   slurm_up DIR    start the cluster, state and logs in DIR; returns 77 where it cannot run here
#                   (not root, Slurm or namespaces missing) with the reason in $slurm_skip
#   on_node0 CMD... run CMD as a client on node ls-s0 (salloc, sbatch, squeue, scancel, ...)
#   slurm_wait_job ID [S]  wait up to S seconds (default 60) for job ID to leave the queue
#   slurm_logs      the daemons' last log lines (for a failure message)
#   slurm_down      stop the daemons, remove the namespaces (idempotent)

slurm_ns0= slurm_ns1= slurm_dir= slurm_skip=
slurm_premounted=0

slurm_up() {
    slurm_dir=$1
    local c
    [ "$(id -u)" = 0 ] || { slurm_skip="the Slurm daemons and namespaces need root"; return 77; }
    for c in slurmctld slurmd srun salloc sbatch squeue scancel scontrol sinfo ip nsenter unshare; do
        command -v "$c" >/dev/null || { slurm_skip="$c is not installed (slurm-wlm, iproute2, util-linux)"; return 77; }
    done
    mkdir -p "$slurm_dir/state" "$slurm_dir/tmp" || return 1
    local n
    for n in ls-s0 ls-s1; do mkdir -p "$slurm_dir/spool-$n" "$slurm_dir/tmp-$n" || return 1; done
    local hw
    hw=$(slurmd -C 2>/dev/null | sed -n '1s/^NodeName=[^ ]* //p')
    [ -n "$hw" ] || { slurm_skip="slurmd -C cannot describe this machine"; return 77; }
    cat >"$slurm_dir/slurm.conf" <<EOF
ClusterName=lstest
SlurmctldHost=ls-s0(10.78.0.1)
SlurmUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$slurm_dir/state
SlurmdSpoolDir=$slurm_dir/spool-%n
TmpFS=$slurm_dir/tmp
SlurmctldPidFile=$slurm_dir/slurmctld.pid
SlurmdPidFile=$slurm_dir/slurmd-%n.pid
SlurmctldLogFile=$slurm_dir/slurmctld.log
SlurmdLogFile=$slurm_dir/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=ls-s0 NodeAddr=10.78.0.1 $hw
NodeName=ls-s1 NodeAddr=10.78.0.2 $hw
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
PartitionName=debug Nodes=ls-s0,ls-s1 Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=60
PartitionName=high Nodes=ls-s0,ls-s1 MaxTime=INFINITE State=UP PriorityTier=2
EOF
    export SLURM_CONF=$slurm_dir/slurm.conf
    slurm_ns0=ls_s0_$$ slurm_ns1=ls_s1_$$
    mountpoint -q /run/netns 2>/dev/null && slurm_premounted=1
    ip netns add "$slurm_ns0" 2>"$slurm_dir/err" && ip netns add "$slurm_ns1" 2>>"$slurm_dir/err" ||
        { slurm_skip="cannot create a network namespace: $(cat "$slurm_dir/err")"; return 77; }
    ip link add lssveth0 netns "$slurm_ns0" type veth peer name lssveth1 netns "$slurm_ns1" 2>"$slurm_dir/err" ||
        { slurm_skip="cannot create a veth pair: $(cat "$slurm_dir/err")"; return 77; }
    # nsenter, not `ip -n`: that remounts /sys, which fails where / is not a mount point (a chroot).
    local i
    for i in 0 1; do
        local in_ns=(nsenter --net="/run/netns/ls_s${i}_$$")
        "${in_ns[@]}" ip link set lo up 2>"$slurm_dir/err" &&
            "${in_ns[@]}" ip addr add "10.78.0.$((i + 1))/24" dev "lssveth$i" 2>>"$slurm_dir/err" &&
            "${in_ns[@]}" ip link set "lssveth$i" up 2>>"$slurm_dir/err" ||
            { echo "slurm_cluster: cannot configure namespace ls_s${i}_$$: $(cat "$slurm_dir/err")" >&2; return 1; }
    done
    unshare --uts --mount true 2>"$slurm_dir/err" ||
        { slurm_skip="cannot create UTS and mount namespaces: $(cat "$slurm_dir/err")"; return 77; }
    # Each daemon: its node's network namespace, host name and temporary directory.
    nsenter --net="/run/netns/$slurm_ns0" unshare --uts sh -c 'hostname ls-s0 && exec slurmctld -D' \
        >"$slurm_dir/slurmctld.out" 2>&1 &
    disown # killed at the end without bash's report
    for i in 0 1; do
        nsenter --net="/run/netns/ls_s${i}_$$" unshare --uts --mount sh -c \
            'hostname "$1" && mount --bind "$2/tmp-$1" "$2/tmp" && exec slurmd -D -N "$1"' sh "ls-s$i" "$slurm_dir" \
            >"$slurm_dir/slurmd-ls-s$i.out" 2>&1 &
        disown
    done
    # Up when both nodes are idle and a step runs on each: idle in sinfo is only the nodes'
    # registration, and a test's first job should not be what finds a node that cannot launch.
    local states probe= deadline=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$deadline" ]; do
        states=$(on_node0 sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ')
        if [ "$states" = "idle " ] && [ "$(on_node0 sinfo -h -N -o %N | sort -u | wc -l)" = 2 ]; then
            probe=$(on_node0 timeout 15 srun -N2 -n2 --mpi=none hostname 2>"$slurm_dir/probe.err")
            [ "$(printf '%s\n' "$probe" | sort | tr '\n' ' ')" = "ls-s0 ls-s1 " ] && return 0
        fi
        sleep 0.2
    done
    echo "slurm_cluster: the nodes did not come up in 60 s (states: ${states:-none}; srun -N2 hostname:" \
        "${probe:-no output} $(cat "$slurm_dir/probe.err" 2>/dev/null))" >&2
    slurm_logs >&2
    return 1
}

on_node0() {
    nsenter --net="/run/netns/$slurm_ns0" "$@"
}

slurm_wait_job() { # id [seconds]
    local i
    for ((i = 0; i < ${2:-60} * 5; i++)); do
        [ -z "$(on_node0 squeue -h -j "$1" 2>/dev/null)" ] && return 0
        sleep 0.2
    done
    echo "slurm_cluster: job $1 still queued or running after ${2:-60} s" >&2
    return 1
}

slurm_logs() {
    local f
    for f in "$slurm_dir"/slurmctld.log "$slurm_dir"/slurmd-ls-s*.log "$slurm_dir"/*.out; do
        [ -s "$f" ] && { echo "--- $f"; tail -n 8 "$f"; }
    done
}

slurm_down() {
    local ns pid
    for ns in $slurm_ns0 $slurm_ns1; do
        [ -e "/run/netns/$ns" ] || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    slurm_ns0= slurm_ns1=
    # `ip netns add` made /run/netns a mount point; undo that where it was not one before.
    if [ "$slurm_premounted" = 0 ] && mountpoint -q /run/netns 2>/dev/null &&
        [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
        umount -l /run/netns 2>/dev/null
    fi
}
