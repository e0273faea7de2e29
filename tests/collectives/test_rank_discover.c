/* test_rank_discover.c: rank discovery from each launcher's environment variables (Open MPI,
 * MPICH/Intel PMI, Slurm incl. its compressed tasks-per-node lists, torchrun), the order in which
 * they are tried, the defaults (no launcher: rank 0 of 1; no local values: one node), and the
 * errors for inconsistent or non-numeric values. No MPI is involved. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "testutil.h"

static const char *all_vars[] = {"OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE",
                                 "OMPI_COMM_WORLD_LOCAL_RANK",
                                 "OMPI_COMM_WORLD_LOCAL_SIZE",
                                 "PMI_RANK",
                                 "PMI_SIZE",
                                 "MPI_LOCALRANKID",
                                 "MPI_LOCALNRANKS",
                                 "SLURM_PROCID",
                                 "SLURM_NTASKS",
                                 "SLURM_STEP_NUM_TASKS",
                                 "SLURM_LOCALID",
                                 "SLURM_NODEID",
                                 "SLURM_TASKS_PER_NODE",
                                 "SLURM_STEP_TASKS_PER_NODE",
                                 "SLURM_JOB_ID",
                                 "SLURM_STEP_ID",
                                 "SLURM_STEPID",
                                 "RANK",
                                 "WORLD_SIZE",
                                 "LOCAL_RANK",
                                 "LOCAL_WORLD_SIZE"};

static void clear_env(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static void expect_info(const char *launcher, int rank, int world, int lr, int lw) {
    ls_rank_info ri;
    ls_status s = ls_rank_discover(&ri);
    LS_EXPECT(s == LS_OK);
    if (s != LS_OK) {
        fprintf(stderr, "  %s: %s\n", launcher, ls_last_error());
        return;
    }
    LS_EXPECT(!strcmp(ri.launcher, launcher));
    LS_EXPECT(ri.rank == rank);
    LS_EXPECT(ri.world == world);
    LS_EXPECT(ri.local_rank == lr);
    LS_EXPECT(ri.local_world == lw);
    if (strcmp(ri.launcher, launcher) || ri.rank != rank || ri.world != world || ri.local_rank != lr ||
        ri.local_world != lw)
        fprintf(stderr, "  got %s %d/%d local %d/%d, expected %s %d/%d local %d/%d\n", ri.launcher, ri.rank, ri.world,
                ri.local_rank, ri.local_world, launcher, rank, world, lr, lw);
}

static void expect_error(const char *needle) {
    ls_rank_info ri;
    LS_EXPECT_ERR(ls_rank_discover(&ri), LS_ERR_INVALID_ARGUMENT, needle);
}

int main(void) {
    clear_env();
    expect_info("none", 0, 1, 0, 1);

    /* Open MPI */
    setenv("OMPI_COMM_WORLD_RANK", "5", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
    expect_info("mpi", 5, 8, 1, 4);
    /* MPI beats torchrun and Slurm variables set at the same time (mpirun inside an allocation) */
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    expect_info("mpi", 5, 8, 1, 4);
    setenv("OMPI_COMM_WORLD_RANK", "8", 1);
    expect_error("OMPI_COMM_WORLD_RANK=8 is not a rank of OMPI_COMM_WORLD_SIZE=8");
    setenv("OMPI_COMM_WORLD_RANK", "-1", 1);
    expect_error("OMPI_COMM_WORLD_RANK=-1 is not a rank of");
    setenv("OMPI_COMM_WORLD_RANK", "two", 1);
    expect_error("OMPI_COMM_WORLD_RANK=two is not an integer");
    setenv("OMPI_COMM_WORLD_RANK", "99999999999", 1);
    expect_error("OMPI_COMM_WORLD_RANK=99999999999 is out of range (at most 2147483647)");
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "4", 1);
    expect_error("OMPI_COMM_WORLD_LOCAL_RANK=4 is not a local rank of 4");
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "9", 1);
    expect_error("OMPI_COMM_WORLD_LOCAL_SIZE=9 ranks on this node but OMPI_COMM_WORLD_SIZE=8 in all");
    setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
    expect_error("OMPI_COMM_WORLD_SIZE=0 is not a positive rank count");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    expect_error("OMPI_COMM_WORLD_RANK=1 is set but OMPI_COMM_WORLD_SIZE is not");
    clear_env();

    /* MPICH / Intel MPI (Hydra) */
    setenv("PMI_RANK", "3", 1);
    setenv("PMI_SIZE", "4", 1);
    expect_info("mpi", 3, 4, 3, 4); /* no local values: one node */
    setenv("MPI_LOCALRANKID", "1", 1);
    setenv("MPI_LOCALNRANKS", "2", 1);
    expect_info("mpi", 3, 4, 1, 2);
    setenv("PMI_SIZE", "3", 1);
    expect_error("PMI_RANK=3 is not a rank of PMI_SIZE=3");
    clear_env();

    /* Slurm (srun) */
    setenv("SLURM_PROCID", "6", 1);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_LOCALID", "2", 1);
    setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_TASKS_PER_NODE", "4(x2)", 1);
    expect_info("slurm", 6, 8, 2, 4);
    setenv("SLURM_TASKS_PER_NODE", "3,4(x2),1", 1);
    setenv("SLURM_NODEID", "3", 1);
    setenv("SLURM_LOCALID", "0", 1);
    expect_info("slurm", 6, 8, 0, 1);
    setenv("SLURM_NODEID", "2", 1);
    expect_info("slurm", 6, 8, 0, 4);
    /* the step's values beat the job's */
    setenv("SLURM_STEP_NUM_TASKS", "12", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "6(x2)", 1);
    setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_LOCALID", "5", 1);
    expect_info("slurm", 6, 12, 5, 6);
    setenv("SLURM_STEP_TASKS_PER_NODE", "6(x2", 1);
    expect_error("cannot parse SLURM_STEP_TASKS_PER_NODE=6(x2");
    /* digits only: strtol took a leading space or sign */
    setenv("SLURM_STEP_TASKS_PER_NODE", " 6(x2)", 1);
    expect_error("cannot parse SLURM_STEP_TASKS_PER_NODE= 6(x2)");
    setenv("SLURM_STEP_TASKS_PER_NODE", "6(x+2)", 1);
    expect_error("cannot parse SLURM_STEP_TASKS_PER_NODE=6(x+2)");
    setenv("SLURM_STEP_TASKS_PER_NODE", "6,+6", 1);
    expect_error("cannot parse SLURM_STEP_TASKS_PER_NODE=6,+6");
    setenv("SLURM_STEP_NUM_TASKS", "+12", 1);
    expect_error("SLURM_STEP_NUM_TASKS=+12 is not an integer");
    setenv("SLURM_STEP_NUM_TASKS", " 12", 1);
    expect_error("SLURM_STEP_NUM_TASKS= 12 is not an integer");
    setenv("SLURM_STEP_NUM_TASKS", "12", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "6(x2)", 1);
    setenv("SLURM_NODEID", "2", 1);
    expect_error("lists 2 nodes but SLURM_NODEID=2");
    setenv("SLURM_NODEID", "1", 1);
    setenv("SLURM_LOCALID", "6", 1);
    expect_error("SLURM_LOCALID=6");
    setenv("SLURM_PROCID", "12", 1);
    expect_error("SLURM_PROCID=12 is not a rank of SLURM_STEP_NUM_TASKS=12");
    clear_env();
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", "1", 1);
    expect_info("slurm", 1, 2, 1, 2); /* no tasks-per-node list */
    clear_env();
    /* A batch script's own environment (sbatch -N2 --ntasks-per-node=2): SLURM_PROCID=0 and the
     * job's task counts, but no step: a program run there directly (or by lockstep-run --no-slurm
     * or --launcher direct) is one process, not rank 0 of 4, which failed in MPI_Init */
    setenv("SLURM_JOB_ID", "6", 1);
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_NODEID", "0", 1);
    setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
    expect_info("none", 0, 1, 0, 1);
    setenv("RANK", "1", 1); /* torchrun's, in a batch script: still read */
    setenv("WORLD_SIZE", "2", 1);
    expect_info("torchrun", 1, 2, 1, 2);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    /* a task of srun's step in that job has the step's id (both names, older Slurm's too) */
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_PROCID", "3", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_NODEID", "1", 1);
    expect_info("slurm", 3, 4, 1, 2);
    unsetenv("SLURM_STEP_ID");
    setenv("SLURM_STEPID", "0", 1);
    expect_info("slurm", 3, 4, 1, 2);
    clear_env();

    /* torchrun */
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "4", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    expect_info("torchrun", 2, 4, 0, 2);
    setenv("LOCAL_RANK", "2", 1);
    expect_error("LOCAL_RANK=2 is not a local rank of 2");
    /* a local size without a local rank: the message named LOCAL_RANK=3, which was not set */
    unsetenv("LOCAL_RANK");
    setenv("RANK", "3", 1);
    expect_error("inconsistent launcher environment (torchrun): LOCAL_RANK is not set, and RANK=3 is not a local "
                 "rank of LOCAL_WORLD_SIZE=2");
    setenv("RANK", "1", 1);
    expect_info("torchrun", 1, 4, 1, 2);
    setenv("RANK", "2", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("WORLD_SIZE", "1x", 1);
    expect_error("WORLD_SIZE=1x is not an integer");
    /* a rank count without a rank (a user's export, two processes started by hand): each ran alone
     * as rank 0 of 1, silently; torch's env:// refuses it too */
    clear_env();
    setenv("WORLD_SIZE", "2", 1);
    expect_error("launcher environment (torchrun): WORLD_SIZE=2 is set but RANK is not (set both, or neither to run "
                 "one process)");
    setenv("WORLD_SIZE", "1", 1); /* one process of one: nothing lost */
    expect_info("none", 0, 1, 0, 1);
    setenv("WORLD_SIZE", "x", 1);
    expect_error("WORLD_SIZE=x is not an integer");
    clear_env();

    LS_EXPECT_ERR(ls_rank_discover(NULL), LS_ERR_INVALID_ARGUMENT, "out is NULL");
    LS_TEST_END();
}
