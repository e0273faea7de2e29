#!/bin/bash
# test_dryrun_slurm.sh: inside a Slurm job (SLURM_JOB_ID set, fake srun and scontrol first in
# PATH) the launcher is srun: exact --dry-run commands for -n, SLURM_NTASKS, ranks per node, the
# thread rule as environment assignments, --bind, the --mpi type srun gets (--srun-mpi, the
# cluster's MpiDefault, SLURM_MPI_TYPE, what srun --mpi=list offers), and the cases that do not
# use srun.
. "$(dirname "$0")/lib.sh"
fake_slurm
fake mpirun
S=$tmp/bin/srun
M=$tmp/bin/mpirun

case_ "-n 4 on 2 nodes: 2 ranks per node share the CPUs"
T=$(threads 2)
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 LOCKSTEP_LOG=debug "$LSR" --dry-run -n 4 true a 'b c'
expect_rc 0
expect_out "OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T $S --ntasks=4 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true a 'b c'"
expect_no_err

# sbatch -n 5 on a node of 4 CPUs and one more: SLURM_TASKS_PER_NODE=4,1, and srun --ntasks=5 puts
# 4 ranks on the first node; the thread rule took 5 ranks over 2 nodes for 3 per node
case_ "the job's whole allocation on uneven nodes: ranks per node from SLURM_TASKS_PER_NODE"
T=$(threads 4)
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=5 'SLURM_TASKS_PER_NODE=4,1' "$LSR" --dry-run --verbose true
expect_out "OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T $S --ntasks=5 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"
expect_err "lockstep-run: 4 ranks share $CPUS CPU(s) per host: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=$T"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=3 SLURM_NTASKS=6 'SLURM_TASKS_PER_NODE=1(x2),4' "$LSR" --dry-run --verbose true
expect_err "lockstep-run: 4 ranks share $CPUS CPU(s) per host"
# another -n than the job's: srun spreads it over the nodes itself
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=5 'SLURM_TASKS_PER_NODE=4,1' "$LSR" --dry-run --verbose -n 4 true
expect_err "lockstep-run: 2 ranks share $CPUS CPU(s) per host"
# a list that does not parse: the even share, as before
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=5 'SLURM_TASKS_PER_NODE=4(x' "$LSR" --dry-run --verbose true
expect_err "lockstep-run: 3 ranks share $CPUS CPU(s) per host"

case_ "default -n from SLURM_NTASKS; the user's OMP_NUM_THREADS is kept"
run SLURM_JOB_ID=42 SLURM_NTASKS=3 OMP_NUM_THREADS=2 "$LSR" --dry-run true
expect_out "$S --ntasks=3 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"

case_ "one rank still goes through srun (it must run on the allocation)"
run SLURM_JOB_ID=42 "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"

case_ "--bind, --oversubscribe and -x NAME=VALUE under srun"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 "$LSR" --dry-run -n 2 --bind core --oversubscribe -x 'LS_TEST_EXTRA=a b' -x LOCKSTEP_LOG true
expect_out "LS_TEST_EXTRA='a b' $S --ntasks=2 --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores --overcommit --export=ALL true"

case_ "--mca becomes OMPI_MCA_<name> in srun's environment"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 "$LSR" --dry-run -n 2 --mca btl self,tcp --mca btl_tcp_if_include=10.0.0.0/24 true
expect_out "OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=10.0.0.0/24 $S --ntasks=2 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"

case_ "default -n without SLURM_NTASKS on a CPU node: one rank per node, with a hint"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=3 CUDA_VISIBLE_DEVICES= "$LSR" --dry-run true
expect_out "$S --ntasks=3 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"
expect_err "pass -n N"

# srun -n 2 lockstep-run ...: each task started an srun of its own, which waited for ever
# ("Requested nodes are busy"; a batch script has no SLURM_STEP_ID, a one-task step is allowed)
case_ "lockstep-run as one of several tasks of an srun step: refused"
STEP=(SLURM_JOB_ID=42 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2)
run "${STEP[@]}" "$LSR" --dry-run true
expect_rc 2
expect_out ""
[ "$err" = "lockstep-run: started by srun as one of 2 tasks of Slurm step 42.0 (srun -n 2 lockstep-run?): each would start its own srun, which waits for ever for the CPUs those tasks hold; run lockstep-run once, in the batch script or the salloc shell (it starts srun itself)" ] ||
    fail "stderr: $err"
run "${STEP[@]}" "$LSR" --dry-run --launcher srun -n 2 true
expect_rc 2
case_ "in a step of one task (srun --pty bash), or with --no-slurm: srun or mpirun as before"
run SLURM_JOB_ID=42 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 "$LSR" --dry-run true
expect_rc 0
expect_out "$S --ntasks=1 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"
run "${STEP[@]}" "$LSR" --dry-run --no-slurm true
expect_rc 0
expect_out "true"

case_ "--no-slurm, --launcher mpirun and hosts bypass srun"
T=$(threads 2)
MPI2="$M -np 2$ROOTFLAG$( [ 2 -gt "$CORES" ] && echo " --oversubscribe") --bind-to none --map-by slot"
run SLURM_JOB_ID=42 "$LSR" --dry-run --no-slurm -n 2 true
expect_out "$MPI2 -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
run SLURM_JOB_ID=42 LOCKSTEP_LAUNCHER=mpirun "$LSR" --dry-run -n 2 true
expect_out "$MPI2 -x LOCKSTEP_LAUNCHER -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
run SLURM_JOB_ID=42 "$LSR" --dry-run --hosts a,b true
expect_out "$M -np 2 --host a,b$ROOTFLAG --bind-to none --map-by slot --mca oob_tcp_keepalive_time 60 --mca oob_tcp_keepalive_intvl 10 --mca oob_tcp_keepalive_probes 6 true"

TRUE=$(type -P true)
case_ "the cluster's MpiDefault or SLURM_MPI_TYPE already chose: no --mpi"
run SLURM_JOB_ID=42 FAKE_MPI_DEFAULT=pmix_v4 "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --kill-on-bad-exit=1 --export=ALL true"
expect_no_err
run SLURM_JOB_ID=42 SLURM_MPI_TYPE=pmi2 "$LSR" --dry-run --verbose -n 1 true
expect_out "$S --ntasks=1 --kill-on-bad-exit=1 --export=ALL true"
expect_err "srun: SLURM_MPI_TYPE=pmi2 chooses the MPI type; not adding --mpi"
run SLURM_JOB_ID=42 FAKE_MPI_DEFAULT=pmi2 "$LSR" --dry-run --verbose -n 1 true
expect_err "srun: the cluster's MpiDefault is pmi2; not adding --mpi"

case_ "MpiDefault none: what srun --mpi=list offers, pmix first"
run SLURM_JOB_ID=42 "$LSR" --dry-run --verbose -n 1 true
expect_err "srun: the cluster's MpiDefault is none; srun offers pmix: adding --mpi=pmix"
run SLURM_JOB_ID=42 "FAKE_SRUN_MPI=none pmi2" "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --mpi=pmi2 --kill-on-bad-exit=1 --export=ALL true"
expect_no_err
run SLURM_JOB_ID=42 FAKE_SRUN_OLD=1 "FAKE_SRUN_MPI=none openmpi pmix_v3" "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"
run SLURM_JOB_ID=42 "FAKE_SRUN_MPI=none pmix_other pmi2x" "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --kill-on-bad-exit=1 --export=ALL true"
expect_err "srun offers neither pmix nor pmi2 (srun --mpi=list) and the cluster's MpiDefault is none: MPI ranks may fail to start; pass --srun-mpi TYPE or set SLURM_MPI_TYPE"

case_ "scontrol unreachable or missing: srun --mpi=list still decides"
run SLURM_JOB_ID=42 FAKE_SCONTROL_FAIL=1 "$LSR" --dry-run --verbose -n 1 true
expect_out "$S --ntasks=1 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"
expect_err "MpiDefault is unknown (scontrol show config did not say); srun offers pmix"
run SLURM_JOB_ID=42 FAKE_SCONTROL_FAIL=1 FAKE_SRUN_LIST_FAIL=1 "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --kill-on-bad-exit=1 --export=ALL true"
expect_err "srun offers neither pmix nor pmi2 ('srun --mpi=list' failed) and the cluster's MpiDefault is unknown"
mv "$tmp/bin/scontrol" "$tmp/scontrol.off"
run PATH="$tmp/bin" SLURM_JOB_ID=42 "$LSR" --dry-run -n 1 "$TRUE"
expect_out "$S --ntasks=1 --mpi=pmix --kill-on-bad-exit=1 --export=ALL $TRUE"
expect_no_err
mv "$tmp/scontrol.off" "$tmp/bin/scontrol"

case_ "--srun-mpi TYPE and site win over the detection"
run SLURM_JOB_ID=42 FAKE_MPI_DEFAULT=pmix "$LSR" --dry-run --srun-mpi pmi2 -n 1 true
expect_out "$S --ntasks=1 --mpi=pmi2 --kill-on-bad-exit=1 --export=ALL true"
run SLURM_JOB_ID=42 SLURM_MPI_TYPE=pmix "$LSR" --dry-run --srun-mpi pmix_v4 -n 1 true
expect_out "$S --ntasks=1 --mpi=pmix_v4 --kill-on-bad-exit=1 --export=ALL true"
run SLURM_JOB_ID=42 FAKE_SRUN_LIST_FAIL=1 "$LSR" --dry-run --srun-mpi site -n 1 true
expect_out "$S --ntasks=1 --kill-on-bad-exit=1 --export=ALL true"
expect_no_err
run SLURM_JOB_ID=42 "$LSR" --dry-run --srun-mpi auto -n 1 true
expect_out "$S --ntasks=1 --mpi=pmix --kill-on-bad-exit=1 --export=ALL true"
run SLURM_JOB_ID=42 "$LSR" --dry-run --srun-mpi 'pmix;rm' -n 1 true
expect_rc 2
expect_err "--srun-mpi must be auto, site or an MPI type of srun such as pmix or pmi2, got 'pmix;rm'"
run SLURM_JOB_ID=42 "$LSR" --dry-run --srun-mpi '' -n 1 true
expect_rc 2
expect_err "--srun-mpi must not be empty"

case_ "SLURM_JOB_ID set but no srun in PATH: mpirun (or direct for one rank)"
# PATH is this test's bin/ alone (a real srun may be installed in /usr/bin).
mv "$tmp/bin/srun" "$tmp/srun.off"
run PATH="$tmp/bin" SLURM_JOB_ID=42 "$LSR" --dry-run -n 2 "$TRUE"
expect_out "$MPI2 -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T $TRUE"
run PATH="$tmp/bin" SLURM_JOB_ID=42 "$LSR" --dry-run -n 1 "$TRUE"
expect_out "$TRUE"

case_ "srun-only errors"
mv "$tmp/srun.off" "$tmp/bin/srun"
run SLURM_JOB_ID=42 "$LSR" --dry-run --launcher srun --hosts a,b true
expect_rc 2
expect_err "cannot be used with srun"
rm "$tmp/bin/srun"
run PATH="$tmp/bin" "$LSR" --dry-run --launcher srun -n 2 "$TRUE"
expect_rc 2
expect_err "srun was not found in PATH"

case_ "inside a job, a signal to lockstep-run's process group (as timeout(1) sends) reaches srun only through scancel"
# srun takes a SIGTERM as "kill the step" (SIGKILL to the ranks: no checkpoint); it ran in
# lockstep-run's process group, as did the scancel passing the signal on, so the group's signal,
# which timeout(1) sends just after the one to lockstep-run, reached srun at once (or killed scancel)
cat >"$tmp/bin/srun" <<EOF
#!/bin/bash
[ "\$1" = --mpi=list ] && { echo "MPI plugin types are..."; printf '\tpmix\n'; exit 0; }
trap 'echo "srun got TERM" >>"$tmp/srun.log"; exit 143' TERM
echo "srun started" >>"$tmp/srun.log"
for i in \$(seq 400); do sleep 0.05; [ -e "$tmp/cancelled" ] && exit 143; done
exit 1
EOF
cat >"$tmp/bin/scancel" <<EOF
#!/bin/bash
trap 'echo "scancel got TERM" >>"$tmp/srun.log"; exit 143' TERM
echo "scancel \$*" >>"$tmp/srun.log"
sleep 1 & wait # the group's signal comes now
touch "$tmp/cancelled"
EOF
chmod 755 "$tmp/bin/srun" "$tmp/bin/scancel"
rm -f "$tmp/srun.log" "$tmp/cancelled"
env -i "PATH=$BASEPATH" "HOME=$tmp" SLURM_JOB_ID=77 setsid "$LSR" -n 2 --srun-mpi pmix true >"$tmp/stdout" 2>"$tmp/stderr" &
pid=$!
for i in $(seq 200); do grep -q "srun started" "$tmp/srun.log" 2>/dev/null && break; sleep 0.05; done
kill -TERM "$pid"
for i in $(seq 200); do grep -q "^scancel" "$tmp/srun.log" 2>/dev/null && break; sleep 0.05; done
kill -TERM -- "-$pid" # the group: lockstep-run (a repeat, dropped) and whatever shares its group
wait "$pid"
rc=$? err=$(cat "$tmp/stderr")
[ "$(tr '\n' ';' <"$tmp/srun.log")" = "srun started;scancel --signal=TERM 77;" ] ||
    fail "srun's log: $(tr '\n' ';' <"$tmp/srun.log") (stderr: $err)"
expect_err "lockstep-run: SIGTERM: passed to the ranks (scancel --signal=TERM 77)"
expect_rc 143

finish
