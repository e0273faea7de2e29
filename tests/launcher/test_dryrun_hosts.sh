#!/bin/bash
# test_dryrun_hosts.sh: exact --dry-run commands for multi-host runs from --hostfile (comments,
# blank lines, slots, max_slots, hosts without slots) and --hosts, the default -n (the sum of
# slots), the thread rule on the busiest host (a host named twice counted once), -n beyond the slots, and the keepalive settings
# (the user's own, by --mca, OMPI_MCA_* or an Open MPI parameter file, win).
. "$(dirname "$0")/lib.sh"
fake mpirun
M=$tmp/bin/mpirun
HF=$tmp/hosts.txt
# mpirun notices a lost host in about 2 minutes (lockstep-run's TCP keepalive settings)
KA=" --mca oob_tcp_keepalive_time 60 --mca oob_tcp_keepalive_intvl 10 --mca oob_tcp_keepalive_probes 6"
printf '# two nodes\n\nnode1 slots=2   # first\n  node2 slots = 2 max_slots=4\n' >"$HF"

case_ "--hostfile: default -n is the sum of slots"
T=$(threads 2)
run LOCKSTEP_LOG=info "$LSR" --dry-run --hostfile "$HF" true x
expect_rc 0
expect_out "$M -np 4 --hostfile $HF$ROOTFLAG --bind-to none --map-by slot$KA -x LOCKSTEP_LOG -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true x"
expect_no_err

case_ "--hostfile with -n 3 (two ranks on node1)"
run "$LSR" --dry-run -n 3 --hostfile "$HF" true
expect_out "$M -np 3 --hostfile $HF$ROOTFLAG --bind-to none --map-by slot$KA -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"

case_ "--hostfile with -n 2 on one-slot hosts: no thread rule"
printf 'a slots=1\nb slots=1\n' >"$tmp/one.txt"
run "$LSR" --dry-run --hostfile "$tmp/one.txt" true
expect_out "$M -np 2 --hostfile $tmp/one.txt$ROOTFLAG --bind-to none --map-by slot$KA true"

case_ "-n beyond the slots: an error, unless --oversubscribe"
run "$LSR" --dry-run -n 5 --hostfile "$HF" true
expect_rc 2
expect_out ""
expect_err "-n 5 exceeds the 4 slots given by $HF"
T3=$(threads 3)
run "$LSR" --dry-run -n 5 --oversubscribe --hostfile "$HF" true
expect_rc 0
expect_out "$M -np 5 --hostfile $HF$ROOTFLAG --oversubscribe --bind-to none --map-by slot$KA -x OMP_NUM_THREADS=$T3 -x OPENBLAS_NUM_THREADS=$T3 true"

case_ "--hostfile whose slots add up to more ranks than -n takes: refused, not -np 1000001"
printf 'a slots=1000000\nb slots=1\n' >"$tmp/huge.txt"
run "$LSR" --dry-run --hostfile "$tmp/huge.txt" true
expect_rc 2
expect_out ""
expect_err "the slots of the hosts in $tmp/huge.txt add up to 1000001 ranks, more than the 1000000 -n allows; pass -n N"
run "$LSR" --dry-run -n 2 --hostfile "$tmp/huge.txt" true
expect_rc 0

case_ "hostfile lines without slots: one rank per GPU each (CUDA_VISIBLE_DEVICES= hides GPUs)"
printf 'n1\nn2\n' >"$tmp/noslots.txt"
# Open MPI gives such a host as many slots as it has cores, so both ranks may land on n1.
if [ "$CORES" -ge 2 ]; then T=$(threads 2); TX=" -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T"; else TX=; fi
run CUDA_VISIBLE_DEVICES= "$LSR" --dry-run --hostfile "$tmp/noslots.txt" true
expect_out "$M -np 2 --hostfile $tmp/noslots.txt$ROOTFLAG --bind-to none --map-by slot$KA -x CUDA_VISIBLE_DEVICES$TX true"

case_ "--hosts h:2,h:2"
T=$(threads 2)
run NCCL_DEBUG=WARN "$LSR" --dry-run --hosts node1:2,node2:2 true
expect_rc 0
expect_out "$M -np 4 --host node1:2,node2:2$ROOTFLAG --bind-to none --map-by slot$KA -x NCCL_DEBUG -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
expect_no_err

case_ "--host (mpirun's spelling) is --hosts"
run "$LSR" --dry-run --host node1:1,node2:1 true
expect_out "$M -np 2 --host node1:1,node2:1$ROOTFLAG --bind-to none --map-by slot$KA true"

case_ "-H (mpirun's short option) is --hosts"
# it was "unknown option '-H'"
run "$LSR" --dry-run -H node1:1,node2:1 true
expect_out "$M -np 2 --host node1:1,node2:1$ROOTFLAG --bind-to none --map-by slot$KA true"

case_ "--hosts without slots count one each"
run "$LSR" --dry-run --hosts 10.0.0.1,10.0.0.2,n-3.example.org true
expect_out "$M -np 3 --host 10.0.0.1,10.0.0.2,n-3.example.org$ROOTFLAG --bind-to none --map-by slot$KA true"

case_ "a host named twice has the slots of both: its ranks share its CPUs"
# "a,a" used to be counted as two hosts of one slot: no thread rule, both ranks on a's cores with
# every BLAS thread each
T=$(threads 2)
run "$LSR" --dry-run --hosts node1,node1 true
expect_out "$M -np 2 --host node1,node1$ROOTFLAG --bind-to none --map-by slot$KA -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
printf 'a slots=1\nb slots=1\na\n' >"$tmp/twice.txt"
run "$LSR" --dry-run -n 2 --hostfile "$tmp/twice.txt" true
expect_out "$M -np 2 --hostfile $tmp/twice.txt$ROOTFLAG --bind-to none --map-by slot$KA -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
T3=$(threads 3)
run "$LSR" --dry-run -n 3 --hosts a:1,b:1,a:2 true
expect_out "$M -np 3 --host a:1,b:1,a:2$ROOTFLAG --bind-to none --map-by slot$KA -x OMP_NUM_THREADS=$T3 -x OPENBLAS_NUM_THREADS=$T3 true"

case_ "--hosts given twice: both lists, as mpirun's --host"
# the first list was dropped: 2 ranks on node2 only, not 4 on both
T=$(threads 2)
run "$LSR" --dry-run --hosts node1:2 --host node2:2 true
expect_rc 0
expect_out "$M -np 4 --host node1:2,node2:2$ROOTFLAG --bind-to none --map-by slot$KA -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"

case_ "--hosts with -n 1 still uses mpirun (the rank runs on node1)"
run "$LSR" --dry-run -n 1 --hosts node1:1 true
expect_out "$M -np 1 --host node1:1$ROOTFLAG --bind-to none --map-by slot$KA true"

case_ "keepalive settings of the user's (--mca, OMPI_MCA_*) are not overridden"
run OMPI_MCA_oob_tcp_keepalive_probes=2 "$LSR" --dry-run --hosts node1:1,node2:1 --mca oob_tcp_keepalive_time=5 true
expect_out "$M -np 2 --host node1:1,node2:1$ROOTFLAG --bind-to none --map-by slot --mca oob_tcp_keepalive_intvl 10 --mca oob_tcp_keepalive_time 5 true"

case_ "keepalive settings in Open MPI's parameter files are not overridden"
mkdir -p "$tmp/.openmpi" "$tmp/etc"
echo "oob_tcp_keepalive_time = 30   # the user's" >"$tmp/.openmpi/mca-params.conf"
printf '# the installation'"'"'s\n  oob_tcp_keepalive_intvl=3\noob_tcp_keepalive_probes_x = 1\n' \
    >"$tmp/etc/openmpi-mca-params.conf"
run "$LSR" --dry-run --hosts node1:1,node2:1 true
expect_out "$M -np 2 --host node1:1,node2:1$ROOTFLAG --bind-to none --map-by slot --mca oob_tcp_keepalive_probes 6 true"
echo "oob_tcp_keepalive_probes=9" >"$tmp/my.conf"
run OMPI_MCA_mca_base_param_files="$tmp/none.conf:$tmp/my.conf" "$LSR" --dry-run --hosts node1:1,node2:1 true
expect_out "$M -np 2 --host node1:1,node2:1$ROOTFLAG --bind-to none --map-by slot --mca oob_tcp_keepalive_time 60 --mca oob_tcp_keepalive_intvl 10 true"
rm -r "$tmp/.openmpi" "$tmp/etc" "$tmp/my.conf"

case_ "--hosts beyond the slots"
run "$LSR" --dry-run -n 3 --hosts a,b true
expect_rc 2
expect_err "-n 3 exceeds the 2 slots given by --hosts"

finish
