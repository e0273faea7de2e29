/* rank.c: where this process sits in the job, from the launcher's environment variables only
 * (mpirun/mpiexec, srun, torchrun). No MPI calls: the result decides whether MPI is needed. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

/* Parse an integer variable: 1 = present and valid, 0 = absent, error otherwise. */
static ls_status ls_env_int(const char *name, int *present, int *out) {
    *present = 0;
    const char *s = getenv(name);
    if (!s || !*s) return LS_OK;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    /* digits, after a '-' at most: strtol also took " 2" and "+2" */
    if (end == s || *end || !(isdigit((unsigned char)s[0]) || (s[0] == '-' && isdigit((unsigned char)s[1]))))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "launcher environment: %s=%s is not an integer", name, s);
    if (errno || v < INT_MIN || v > INT_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "launcher environment: %s=%s is out of range (at most %d)", name, s,
                        INT_MAX);
    *present = 1;
    *out = (int)v;
    return LS_OK;
}

/* Slurm's compressed tasks-per-node list, e.g. "4(x2),3": the count of node index node. */
static ls_status ls_slurm_tasks_on_node(const char *name, const char *s, int node, int *out) {
    const char *p = s;
    int idx = 0;
    while (*p) {
        char *end = NULL;
        if (!isdigit((unsigned char)*p)) goto bad; /* strtol took " 4" and "+4" */
        long n = strtol(p, &end, 10);
        if (end == p || n < 0) goto bad;
        long rep = 1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') goto bad;
            if (!isdigit((unsigned char)p[2])) goto bad;
            rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep < 1) goto bad;
            p = end + 1;
        }
        if (node < idx + rep) {
            *out = (int)n;
            return LS_OK;
        }
        idx += (int)rep;
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "launcher environment: %s=%s lists %d nodes but SLURM_NODEID=%d", name, s,
                    idx, node);
bad:
    return ls_error(LS_ERR_INVALID_ARGUMENT, "launcher environment: cannot parse %s=%s", name, s);
}

/* Whether this process is a Slurm job's batch script (or runs in it): the job's id, no step's. */
static int ls_slurm_batch_shell(void) {
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID"), *step2 = getenv("SLURM_STEPID");
    return job && *job && !(step && *step) && !(step2 && *step2);
}

typedef struct ls_launcher_vars {
    const char *launcher;
    const char *rank, *world, *local_rank, *local_world; /* local_world NULL: computed */
    int world_needs_rank; /* world above 1 without rank is an error (torchrun's, set by hand) */
} ls_launcher_vars;

static ls_status ls_read_vars(const ls_launcher_vars *v, ls_rank_info *out, int *found) {
    int has_r, has_w, has_lr, has_lw = 0;
    int r = 0, w = 1, lr = 0, lw = 1;
    LS_CHECK(ls_env_int(v->rank, &has_r, &r));
    *found = has_r;
    if (!has_r && v->world_needs_rank) {
        LS_CHECK(ls_env_int(v->world, &has_w, &w));
        if (has_w && w != 1)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "launcher environment (%s): %s=%d is set but %s is not (set both, or neither to run one "
                            "process)",
                            v->launcher, v->world, w, v->rank);
    }
    if (!has_r) return LS_OK;
    LS_CHECK(ls_env_int(v->world, &has_w, &w));
    if (!has_w)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "launcher environment (%s): %s=%d is set but %s is not", v->launcher,
                        v->rank, r, v->world);
    LS_CHECK(ls_env_int(v->local_rank, &has_lr, &lr));
    if (v->local_world) LS_CHECK(ls_env_int(v->local_world, &has_lw, &lw));
    if (w < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "inconsistent launcher environment (%s): %s=%d is not a positive rank count", v->launcher,
                        v->world, w);
    if (r < 0 || r >= w)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "inconsistent launcher environment (%s): %s=%d is not a rank of %s=%d",
                        v->launcher, v->rank, r, v->world, w);
    if (!has_lr) lr = r;
    if (!has_lw) lw = w; /* unknown: at most every rank on this node */
    if (lw < 1 || lw > w)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "inconsistent launcher environment (%s): %s=%d ranks on this node but %s=%d in all",
                        v->launcher, v->local_world ? v->local_world : "local size", lw, v->world, w);
    if (lr < 0 || lr >= lw) {
        if (!has_lr) /* it named the unset variable with the global rank as its value */
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "inconsistent launcher environment (%s): %s is not set, and %s=%d is not a local rank "
                            "of %s=%d",
                            v->launcher, v->local_rank, v->rank, r, v->local_world ? v->local_world : "local size", lw);
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "inconsistent launcher environment (%s): %s=%d is not a local rank of %d", v->launcher,
                        v->local_rank, lr, lw);
    }
    out->rank = r;
    out->world = w;
    out->local_rank = lr;
    out->local_world = lw;
    snprintf(out->launcher, sizeof out->launcher, "%s", v->launcher);
    return LS_OK;
}

ls_status ls_rank_discover(ls_rank_info *out) {
    if (!out) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_rank_discover: out is NULL");
    memset(out, 0, sizeof *out);
    out->world = 1;
    out->local_world = 1;
    snprintf(out->launcher, sizeof out->launcher, "none");

    static const ls_launcher_vars ompi = {"mpi",
                                          "OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          0};
    static const ls_launcher_vars pmi = {"mpi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", 0};
    static const ls_launcher_vars torch = {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", 1};
    int found = 0;
    LS_CHECK(ls_read_vars(&ompi, out, &found));
    if (found) return LS_OK;
    LS_CHECK(ls_read_vars(&pmi, out, &found));
    if (found) return LS_OK;

    /* Slurm: the step's task count (srun) beats the job's (the batch script's own env). A batch
     * script has SLURM_PROCID=0 and the job's SLURM_NTASKS but no step id: a program run in it
     * (or by lockstep-run --no-slurm there) is not one of srun's tasks, and read them as rank 0 of
     * SLURM_NTASKS it failed in MPI_Init. */
    const char *ntasks = getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    ls_launcher_vars slurm = {"slurm", "SLURM_PROCID", ntasks, "SLURM_LOCALID", NULL, 0};
    if (!ls_slurm_batch_shell()) LS_CHECK(ls_read_vars(&slurm, out, &found));
    if (found) {
        const char *tpn_name =
            getenv("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
        const char *tpn = getenv(tpn_name);
        if (tpn && *tpn) {
            int has_node = 0, node = 0, lw = 0;
            LS_CHECK(ls_env_int("SLURM_NODEID", &has_node, &node));
            LS_CHECK(ls_slurm_tasks_on_node(tpn_name, tpn, node, &lw));
            if (lw < 1 || lw > out->world || out->local_rank >= lw)
                return ls_error(LS_ERR_INVALID_ARGUMENT,
                                "inconsistent launcher environment (slurm): SLURM_LOCALID=%d with %s=%s "
                                "on node %d and %s=%d",
                                out->local_rank, tpn_name, tpn, node, ntasks, out->world);
            out->local_world = lw;
        }
        return LS_OK;
    }
    LS_CHECK(ls_read_vars(&torch, out, &found));
    return LS_OK;
}
