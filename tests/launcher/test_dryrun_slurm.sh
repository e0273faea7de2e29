#!/bin/bash
# test_dryrun_slurm.sh: inside a Slurm job (SLURM_JOB_ID set, a fake srun first in PATH) the
# launcher is srun: exact --dry-run commands for -n, SLURM_NTASKS, ranks per node, the thread
# rule as environment assignments, --bind, and the cases that do not use srun.
. "$(dirname "$0")/lib.sh"
fake srun
fake mpirun
S=$tmp/bin/srun
M=$tmp/bin/mpirun

case_ "-n 4 on 2 nodes: 2 ranks per node share the CPUs"
T=$(threads 2)
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 LOCKSTEP_LOG=debug "$LSR" --dry-run -n 4 true a 'b c'
expect_rc 0
expect_out "OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T $S --ntasks=4 --kill-on-bad-exit=1 --export=ALL true a 'b c'"
expect_no_err

case_ "default -n from SLURM_NTASKS; the user's OMP_NUM_THREADS is kept"
run SLURM_JOB_ID=42 SLURM_NTASKS=3 OMP_NUM_THREADS=2 "$LSR" --dry-run true
expect_out "$S --ntasks=3 --kill-on-bad-exit=1 --export=ALL true"

case_ "one rank still goes through srun (it must run on the allocation)"
run SLURM_JOB_ID=42 "$LSR" --dry-run -n 1 true
expect_out "$S --ntasks=1 --kill-on-bad-exit=1 --export=ALL true"

case_ "--bind, --oversubscribe and -x NAME=VALUE under srun"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 "$LSR" --dry-run -n 2 --bind core --oversubscribe -x 'LS_TEST_EXTRA=a b' -x LOCKSTEP_LOG true
expect_out "LS_TEST_EXTRA='a b' $S --ntasks=2 --kill-on-bad-exit=1 --cpu-bind=cores --overcommit --export=ALL true"

case_ "--mca becomes OMPI_MCA_<name> in srun's environment"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=2 "$LSR" --dry-run -n 2 --mca btl self,tcp --mca btl_tcp_if_include=10.0.0.0/24 true
expect_out "OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=10.0.0.0/24 $S --ntasks=2 --kill-on-bad-exit=1 --export=ALL true"

case_ "default -n without SLURM_NTASKS on a CPU node: one rank per node, with a hint"
run SLURM_JOB_ID=42 SLURM_JOB_NUM_NODES=3 CUDA_VISIBLE_DEVICES= "$LSR" --dry-run true
expect_out "$S --ntasks=3 --kill-on-bad-exit=1 --export=ALL true"
expect_err "pass -n N"

case_ "--no-slurm, --launcher mpirun and hosts bypass srun"
T=$(threads 2)
MPI2="$M -np 2$ROOTFLAG$( [ 2 -gt "$CORES" ] && echo " --oversubscribe") --bind-to none --map-by slot"
run SLURM_JOB_ID=42 "$LSR" --dry-run --no-slurm -n 2 true
expect_out "$MPI2 -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
run SLURM_JOB_ID=42 LOCKSTEP_LAUNCHER=mpirun "$LSR" --dry-run -n 2 true
expect_out "$MPI2 -x LOCKSTEP_LAUNCHER -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
run SLURM_JOB_ID=42 "$LSR" --dry-run --hosts a,b true
expect_out "$M -np 2 --host a,b$ROOTFLAG --bind-to none --map-by slot true"

case_ "SLURM_JOB_ID set but no srun in PATH: mpirun (or direct for one rank)"
rm "$tmp/bin/srun"
run SLURM_JOB_ID=42 "$LSR" --dry-run -n 2 true
expect_out "$MPI2 -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"
run SLURM_JOB_ID=42 "$LSR" --dry-run -n 1 true
expect_out "true"

case_ "srun-only errors"
fake srun
run SLURM_JOB_ID=42 "$LSR" --dry-run --launcher srun --hosts a,b true
expect_rc 2
expect_err "cannot be used with srun"
rm "$tmp/bin/srun"
run "$LSR" --dry-run --launcher srun -n 2 true
expect_rc 2
expect_err "srun was not found in PATH"

finish
