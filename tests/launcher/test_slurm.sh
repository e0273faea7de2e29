#!/bin/bash
# test_slurm.sh: lockstep-run under a real Slurm (slurm_cluster.sh: slurmctld and two slurmd,
# each node a network namespace; MpiDefault=none, Slurm's own default).
#  - salloc -N1 -n2 and -N2 -n2: lockstep-run picks srun and adds --mpi=pmix; the ranks start, run
#    on the nodes Slurm gave them, and a short fashion_mlp run ends with the parameters of the
#    same run under mpirun, bit for bit;
#  - without --mpi (--srun-mpi site) the ranks cannot start: what the default prevents;
#  - lockstep-run --no-slurm in a batch script of 2 tasks: one rank, not rank 0 of the job's 2;
#  - a batch job that execs lockstep-run, signalled as Slurm signals near a time limit: through
#    the batch shell (--signal=B:TERM@T; scancel --batch) and through the steps (--signal=TERM@T;
#    scancel): every rank finishes its step, checkpoints and exits 143 (the job's exit code), and
#    the job submitted again with --resume auto continues from that step;
#  - cluster/slurm/fashion_mlp.sbatch as shipped, preempted by a job of a higher partition: the
#    ranks checkpoint within the GraceTime, the script requeues the job, and it resumes and
#    finishes with every step logged once.
# Skips (77) unless root with slurm-wlm installed and namespaces available.
# Usage: test_slurm.sh LOCKSTEP_RUN FASHION_MLP NETNS_ALLREDUCE DATA_DIR
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/slurm_cluster.sh"
# Absolute paths: batch jobs run in another directory.
LSR=$(realpath "$LSR") MLP=$(realpath "$2") ALLRED=$(realpath "$3") DATA=$4
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [ -r "$DATA/$f" ] || { echo "SKIP: Fashion-MNIST not found ($DATA/$f)" >&2; exit 77; }
done
trap 'slurm_down; rm -rf "$tmp"' EXIT
slurm_up "$tmp/slurm"
rc=$?
[ "$rc" = 77 ] && { echo "SKIP: $slurm_skip" >&2; exit 77; }
[ "$rc" = 0 ] || { echo "FAIL: the Slurm cluster did not start" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One BLAS thread in every run, so that the runs compute the same sums.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
A=(--epochs 1 --train-limit 2000 --test-limit 500 --device cpu --data-dir "$DATA" --no-progress)

case_ "the reference: 2 ranks under mpirun"
"$LSR" --no-slurm -n 2 "$MLP" "${A[@]}" --dump-params "$tmp/mpirun.bin" >"$tmp/ref.out" 2>&1 ||
    fail "mpirun run: $(cat "$tmp/ref.out")"

case_ "salloc -N1 -n2: srun with --mpi=pmix, the same parameters as mpirun"
on_node0 salloc -N1 -n2 "$LSR" --verbose "$MLP" "${A[@]}" --dump-params "$tmp/n1.bin" >"$tmp/n1.out" 2>&1
rc=$? err=$(cat "$tmp/n1.out")
expect_rc 0
grep -q "srun: the cluster's MpiDefault is none; srun offers pmix: adding --mpi=pmix" "$tmp/n1.out" ||
    fail "no --mpi decision in: $(cat "$tmp/n1.out")"
grep -q "lockstep-run: run .*/srun --ntasks=2 --mpi=pmix --kill-on-bad-exit=1 --export=ALL $MLP" "$tmp/n1.out" ||
    fail "srun command not as expected: $(cat "$tmp/n1.out")"
grep -q "^fashion_mlp: 2 ranks, device cpu, communicator mpi" "$tmp/n1.out" || fail "$(cat "$tmp/n1.out")"
cmp "$tmp/mpirun.bin" "$tmp/n1.bin" || fail "parameters differ from the mpirun run's"

case_ "salloc -N2 -n2: one rank on each node"
on_node0 salloc -N2 -n2 "$LSR" "$ALLRED" >"$tmp/ar.out" 2>"$tmp/ar.err"
rc=$? err=$(cat "$tmp/ar.out" "$tmp/ar.err")
expect_rc 0
out=$(grep '^rank' "$tmp/ar.out" | sort)
re='^rank ([01])/2 host (ls-s[01]) netns (net:\[[0-9]+\]) sum ok$'
mapfile -t lines <<<"$out"
[ "${#lines[@]}" = 2 ] || fail "expected 2 lines, got: $out $(cat "$tmp/ar.err")"
[[ ${lines[0]} =~ $re ]] && h0=${BASH_REMATCH[2]} n0=${BASH_REMATCH[3]} || fail "rank 0: '${lines[0]}'"
[[ ${lines[1]:-} =~ $re ]] && h1=${BASH_REMATCH[2]} n1=${BASH_REMATCH[3]} || fail "rank 1: '${lines[1]:-}'"
[ "${h0:-}" != "${h1:-}" ] && [ "${n0:-}" != "${n1:-}" ] || fail "both ranks ran on one node: $out"

case_ "salloc -N2 -n2: fashion_mlp across the nodes, the same parameters as mpirun"
on_node0 salloc -N2 -n2 "$LSR" "$MLP" "${A[@]}" --dump-params "$tmp/n2.bin" >"$tmp/n2.out" 2>&1
rc=$? err=$(cat "$tmp/n2.out")
expect_rc 0
cmp "$tmp/mpirun.bin" "$tmp/n2.bin" || fail "parameters differ from the mpirun run's: $(cat "$tmp/n2.out")"

case_ "--srun-mpi site (no --mpi) with MpiDefault=none: the ranks cannot start"
on_node0 timeout 60 salloc -N1 -n2 "$LSR" --srun-mpi site "$ALLRED" >"$tmp/nopmi.out" 2>&1
rc=$?
[ "$rc" != 0 ] || fail "the ranks started without PMI: $(cat "$tmp/nopmi.out")"
grep -q "sum ok" "$tmp/nopmi.out" && fail "a rank completed without PMI"
grep -qi "PMI" "$tmp/nopmi.out" || fail "no PMI message from Open MPI: $(cat "$tmp/nopmi.out")"

case_ "sbatch -n2: lockstep-run --no-slurm in the batch script runs one rank there, not rank 0 of the job's 2"
# The batch script has SLURM_PROCID=0 and SLURM_NTASKS=2 but is no task of srun's: read as rank 0
# of 2, the program failed ("the slurm launcher started 2 ranks but MPI sees 1").
on_node0 timeout 120 sbatch --wait -N1 -n2 --chdir="$tmp" -o "$tmp/batch1.out" \
    --wrap "$(printf '%q ' "$LSR" --no-slurm "$MLP" "${A[@]}")" >/dev/null
rc=$? err=$(cat "$tmp/batch1.out" 2>&1)
expect_rc 0
grep -q "^fashion_mlp: 1 rank, device cpu, communicator self," "$tmp/batch1.out" || fail "not one rank: $err"

# A batch job as cluster/slurm/fashion_mlp.sbatch writes one: the script execs lockstep-run.
P=(--train-limit 1000 --test-limit 200 --batch-size 16 --epochs 1000 --no-progress --device cpu
   --data-dir "$DATA" --checkpoint-dir "$tmp/D" --save-every 100000 --log-steps "$tmp/L.log")
printf '#!/bin/bash\nexec %q %q "$@"\n' "$LSR" "$MLP" >"$tmp/job.sh"
chmod 755 "$tmp/job.sh"
for how in batch steps; do
    case_ "sbatch -N2 -n2, SIGTERM to the $how (scancel $([ $how = batch ] && echo --batch) --signal=TERM)"
    rm -rf "$tmp/D" "$tmp/L.log"
    id=$(on_node0 sbatch --parsable -N2 -n2 --chdir="$tmp" -o "$tmp/job-$how.out" "$tmp/job.sh" "${P[@]}")
    [ -n "$id" ] || { fail "sbatch gave no job id"; continue; }
    for _ in $(seq 300); do
        [ -s "$tmp/L.log" ] && [ "$(wc -l <"$tmp/L.log")" -ge 5 ] && break
        sleep 0.1
    done
    [ -s "$tmp/L.log" ] || fail "no progress in the step log: $(cat "$tmp/job-$how.out")"
    if [ $how = batch ]; then on_node0 scancel --batch --signal=TERM "$id"; else on_node0 scancel --signal=TERM "$id"; fi
    slurm_wait_job "$id" 60 || { on_node0 scancel "$id"; slurm_wait_job "$id" 30; }
    out=$(cat "$tmp/job-$how.out")
    code=$(on_node0 scontrol show job "$id" | grep -o 'ExitCode=[0-9:]*')
    [ "$code" = "ExitCode=143:0" ] || fail "job $code, expected 143 (SIGTERM): $out"
    if [ $how = batch ]; then
        [[ $out == *"lockstep-run: SIGTERM: passed to the ranks (scancel --signal=TERM $id)"* ]] ||
            fail "lockstep-run did not pass the signal on: $out"
    fi
    [[ $out != *"forcing job termination"* ]] || fail "srun killed the ranks: $out"
    step=$(sed -n 's/^fashion_mlp: received SIGTERM: finished step \([0-9]*\), saved checkpoint .*; exiting$/\1/p' \
        "$tmp/job-$how.out")
    [ -n "$step" ] || { fail "no 'received SIGTERM: finished step N, saved checkpoint' line: $out"; continue; }
    [ "$(grep -c 'task [01]: Exited with exit code 143' "$tmp/job-$how.out")" = 2 ] ||
        fail "both ranks should exit with 143: $out"
    ck=$(printf '%s/D/step-%08d' "$tmp" "$step")
    [ -f "$ck/manifest.json" ] || fail "no checkpoint $ck"
    [ "$(tail -n 1 "$tmp/L.log" | cut -d' ' -f1)" = "$step" ] || fail "the last logged step is not $step"

    end=$((step + 10))
    on_node0 sbatch --wait -N2 -n2 --chdir="$tmp" -o "$tmp/resume-$how.out" "$tmp/job.sh" "${P[@]}" \
        --resume auto --max-steps $end >/dev/null
    rc=$? err=$(cat "$tmp/resume-$how.out" 2>&1)
    expect_rc 0
    grep -q "^fashion_mlp: resumed from $ck at step $step, " "$tmp/resume-$how.out" ||
        fail "not resumed from $ck: $(cat "$tmp/resume-$how.out")"
    seq 1 $end | cmp -s - <(cut -d' ' -f1 "$tmp/L.log") || fail "L.log should list steps 1..$end once each"
done
case_ "preempted (partition high, GraceTime): cluster/slurm/fashion_mlp.sbatch checkpoints, requeues itself and finishes"
# The example as shipped, run from a directory whose build/ points at this build.
W=$tmp/repo
mkdir -p "$W/build/launcher" "$W/build/examples/fashion_mlp"
ln -s "$LSR" "$W/build/launcher/lockstep-run"
ln -s "$MLP" "$W/build/examples/fashion_mlp/fashion_mlp"
SB=$(realpath "$(dirname "$0")/../../cluster/slurm/fashion_mlp.sbatch")
id=$(LOCKSTEP_FASHION_DIR=$DATA on_node0 sbatch --parsable -N2 --ntasks-per-node=1 --gpus-per-node=0 \
    --chdir="$W" -o "$W/job.out" "$SB" --train-limit 1000 --test-limit 200 --batch-size 16 --epochs 40 \
    --device cpu --no-progress --log-steps "$W/L.log")
for _ in $(seq 300); do
    [ -s "$W/L.log" ] && [ "$(wc -l <"$W/L.log")" -ge 5 ] && break
    sleep 0.1
done
[ -s "$W/L.log" ] || fail "no progress in the step log: $(cat "$W/job.out")"
# A job that needs both nodes whole preempts it.
on_node0 sbatch --parsable -p high -N2 -n2 --exclusive --chdir="$W" -o "$W/high.out" --wrap 'echo high ran' >/dev/null
requeued=0
for _ in $(seq 600); do
    st=$(on_node0 squeue -h -j "$id" -o '%T %r' 2>/dev/null)
    [ -z "$st" ] && break
    # Slurm holds a requeued job back for a while (BeginTime, about two minutes) so that the
    # nodes finish with its last run; let it start once no slurmstepd of that run is left (a new
    # step while one lingers collides with it: the same step id and PMIx directory).
    if [ "$st" = "PENDING BeginTime" ]; then
        requeued=1
        pgrep -f "^slurmstepd: \[$id\." >/dev/null || on_node0 scontrol update JobId="$id" StartTime=now
    fi
    sleep 0.2
done
out=$(cat "$W/job.out")
[ -z "$st" ] || { on_node0 scancel "$id"; fail "job $id still '$st' after 120 s: $out"; }
[ "$(cat "$W/high.out" 2>/dev/null)" = "high ran" ] || fail "the preempting job did not run"
[ "$requeued" = 1 ] || fail "job $id was not requeued: $out"
step=$(sed -n 's/^fashion_mlp: received SIGTERM: finished step \([0-9]*\), saved checkpoint .*; exiting$/\1/p' "$W/job.out")
[ -n "$step" ] || fail "no 'received SIGTERM: finished step N, saved checkpoint' line: $out"
[[ $out == *"fashion_mlp.sbatch: stopped by SIGTERM after a checkpoint; requeueing job $id"* ]] ||
    fail "the script did not requeue the job: $out"
grep -q "^fashion_mlp: resumed from checkpoints/$id/step-$(printf %08d "${step:-0}") at step ${step:-x}, " "$W/job.out" ||
    fail "the requeued job did not resume from step ${step:-?}: $out"
[[ $out != *"forcing job termination"* && $out != *"Killed"* ]] || fail "ranks were killed: $out"
job=$(on_node0 scontrol show job "$id")
[[ $job == *"Restarts=1 "* && $job == *"ExitCode=0:0"* && $job == *"JobState=COMPLETED"* ]] ||
    fail "job $id should be COMPLETED with ExitCode=0:0 after 1 restart: $job"
seq 1 1280 | cmp -s - <(cut -d' ' -f1 "$W/L.log") || fail "L.log should list steps 1..1280 (40 epochs of 32) once each"

case_ "cluster/slurm/fashion_mlp.sbatch: a rank that fails at once (srun stops the other: 143) is not requeued"
# srun ends with 143 when it stops the other ranks with SIGTERM after one failed: the script took
# that for a preemption's checkpoint and requeued the job, for ever. Rank 1 fails; rank 0 exits
# 143 on SIGTERM, as lockstep's programs do; no checkpoint is written.
W2=$tmp/repo2
mkdir -p "$W2/build/launcher" "$W2/build/examples/fashion_mlp"
ln -s "$LSR" "$W2/build/launcher/lockstep-run"
cat >"$W2/build/examples/fashion_mlp/fashion_mlp" <<'EOF2'
#!/bin/bash
[ "$SLURM_PROCID" = 1 ] && { echo "rank 1 fails"; exit 3; }
trap 'exit 143' TERM
for _ in $(seq 600); do sleep 0.1; done
EOF2
chmod 755 "$W2/build/examples/fashion_mlp/fashion_mlp"
id=$(on_node0 sbatch --parsable -N2 --ntasks-per-node=1 --gpus-per-node=0 --chdir="$W2" -o "$W2/job.out" "$SB")
for _ in $(seq 600); do
    st=$(on_node0 squeue -h -j "$id" -o '%T %r' 2>/dev/null)
    [ -z "$st" ] || [[ $st == PENDING\ BeginTime* ]] && break
    sleep 0.2
done
out=$(cat "$W2/job.out" 2>&1)
[ -z "$st" ] || { on_node0 scancel "$id"; fail "job $id is '$st' (requeued?): $out"; }
[[ $out == *"not requeued"* && $out != *"requeueing job"* ]] || fail "the failed job was requeued, or said nothing: $out"
job=$(on_node0 scontrol show job "$id")
[[ $job == *"Restarts=0 "* && $job == *"JobState=FAILED"* ]] || fail "job $id should have FAILED with no restart: $job"

[ "$fails" = 0 ] || slurm_logs >&2
finish
