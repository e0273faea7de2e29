/* log.c: process-wide logging configuration (level, rank prefix) and the writer. The two
 * settings are the only process-wide state in runtime/core; they are atomics so any thread may
 * log. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

static atomic_int ls_log_level_cur = -1; /* -1: not yet read from the environment */
static atomic_int ls_log_progress = 0;   /* a progress line without its newline is on stderr */
static atomic_int ls_log_rank = -2;      /* -2: not yet read from the launcher's environment */

/* The rank a launcher gave this process (Open MPI, PMI, Slurm, torchrun's variables) where it
 * started several, else -1: lines logged before ls_log_set_rank (a bad LOCKSTEP_LOG, no usable
 * GPU) carry it too, as the README says of every line. The variables and their order are
 * ls_rank_discover's (collectives/rank.c; Slurm's not in a job's batch script, which has no step
 * id), read here without it: runtime/core sits below the
 * collectives, and a discovery that fails sets the last error, which a log line must not. */
static int ls_log_env_rank(void) {
    const char *slurm_n = getenv("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
    const char *const vars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   {"PMI_RANK", "PMI_SIZE"},
                                   {"SLURM_PROCID", slurm_n},
                                   {"RANK", "WORLD_SIZE"}};
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID"), *step2 = getenv("SLURM_STEPID");
    const int batch_shell = job && *job && !(step && *step) && !(step2 && *step2); /* no srun task */
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        if (batch_shell && i == 2) continue;
        const char *r = getenv(vars[i][0]), *w = getenv(vars[i][1]);
        if (!r || !w) continue;
        char *end1 = NULL, *end2 = NULL;
        long rank = strtol(r, &end1, 10), world = strtol(w, &end2, 10);
        if (end1 != r && !*end1 && end2 != w && !*end2 && world > 1 && rank >= 0 && rank < world && rank < 1000000)
            return (int)rank;
        return -1;
    }
    return -1;
}

static int ls_log_rank_now(void) {
    int rank = atomic_load(&ls_log_rank);
    if (rank == -2) {
        int expected = -2;
        atomic_compare_exchange_strong(&ls_log_rank, &expected, ls_log_env_rank());
        rank = atomic_load(&ls_log_rank);
    }
    return rank;
}

static const char *const ls_level_names[] = {"error", "warn", "info", "debug"};

ls_status ls_log_level_parse(const char *s, ls_log_level *out) {
    LS_CHECK_ARG(out, "ls_log_level_parse: out is NULL");
    for (int i = 0; i < 4; i++) {
        if (s && strcasecmp(s, ls_level_names[i]) == 0) {
            *out = (ls_log_level)i;
            return LS_OK;
        }
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "log level '%s' is not one of error, warn, info, debug", s ? s : "(null)");
}

ls_log_level ls_log_get_level(void) {
    int lv = atomic_load(&ls_log_level_cur);
    if (lv < 0) {
        ls_log_level parsed = LS_LOG_WARN;
        const char *env = getenv("LOCKSTEP_LOG");
        if (env && *env && ls_log_level_parse(env, &parsed) != LS_OK) {
            char who[32] = "";
            int rank = ls_log_rank_now();
            if (rank >= 0) snprintf(who, sizeof who, " r%d", rank);
            fprintf(stderr,
                    "[lockstep%s warn] LOCKSTEP_LOG='%s' is not one of error, warn, info, "
                    "debug; using warn\n",
                    who, env);
            parsed = LS_LOG_WARN;
        }
        atomic_store(&ls_log_level_cur, (int)parsed);
        lv = (int)parsed;
    }
    return (ls_log_level)lv;
}

void ls_log_set_level(ls_log_level level) { atomic_store(&ls_log_level_cur, (int)level); }
void ls_log_set_rank(int rank) { atomic_store(&ls_log_rank, rank); }
int ls_log_enabled(ls_log_level level) { return (int)level <= (int)ls_log_get_level(); }

void ls_log(ls_log_level level, const char *fmt, ...) {
    if (!ls_log_enabled(level)) return;
    char line[2048];
    int rank = ls_log_rank_now();
    int n = rank >= 0 ? snprintf(line, sizeof line, "[lockstep r%d %s] ", rank, ls_level_names[level])
                      : snprintf(line, sizeof line, "[lockstep %s] ", ls_level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* one write per line so ranks do not interleave mid-line */
    fprintf(stderr, "%s%s\n", atomic_exchange(&ls_log_progress, 0) ? "\r\033[K" : "", line);
}

int ls_fd_off_stdio(int fd) {
    if (fd < 0 || fd > 2) return fd;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    close(fd);
    errno = e;
    return hi;
}

int ls_log_progress_shown(int shown) { return atomic_exchange(&ls_log_progress, shown != 0); }
