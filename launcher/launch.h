/* launch.h: internals of lockstep-run shared by its files: a growable string vector (the child's
 * argv is built in one, never as a shell string), the host list read from --hostfile/--hosts, and
 * probes of this machine (GPUs, CPUs, PATH lookup, a query command's output). Functions that
 * can fail return -1 and write a one-line reason into a caller's buffer; main decides how to
 * exit. */
#ifndef LOCKSTEP_LAUNCH_H
#define LOCKSTEP_LAUNCH_H

#include <signal.h>
#include <stddef.h>

#define LSR_ERRLEN 512

/* The signal a rank sends lockstep-run (LOCKSTEP_RUN_PID) as it aborts the job: SIGURG, whose
 * default action is to be ignored, so a notice that reached another process would do nothing.
 * collectives/comm.c sends it (ls_comm_abort). */
#define LSR_ABORT_SIGNAL SIGURG

/* NULL-terminated vector of heap strings. */
typedef struct lsr_strvec {
    char **v; /* [n + 1], v[n] == NULL */
    size_t n;
    size_t cap;
} lsr_strvec;

void lsr_strvec_push(lsr_strvec *sv, const char *s);
void lsr_strvec_pushf(lsr_strvec *sv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lsr_strvec_contains(const lsr_strvec *sv, const char *s);
void lsr_strvec_free(lsr_strvec *sv);

/* Hosts from --hostfile or --hosts, in order. slots == 0: not given (Open MPI then uses the
 * host's core count for a hostfile line and 1 for --host). */
typedef struct lsr_host {
    char *name;
    int slots;
    int max_slots; /* hostfile: max_slots=, 0 when not given */
    int line;      /* hostfile: the line the host was first listed on (0: --hosts) */
} lsr_host;

typedef struct lsr_hostlist {
    lsr_host *v; /* [n] */
    size_t n;
} lsr_hostlist;

/* Open MPI hostfile: "host [slots=N] [max_slots=N]" per line, '#' comments, blank lines. */
int lsr_hostfile_parse(const char *path, lsr_hostlist *out, char *err, size_t errlen);
/* --hosts "h1:2,h2:2,h3" (":N" optional). */
int lsr_hosts_parse(const char *spec, lsr_hostlist *out, char *err, size_t errlen);
void lsr_hostlist_free(lsr_hostlist *hl);

/* Parses a whole decimal int in [lo, hi]; -1 when s is not one. */
int lsr_parse_int(const char *s, long lo, long hi, long *out);

/* GPUs this process may use: NVIDIA device nodes (/dev/nvidiaN, else /proc/driver/nvidia/gpus),
 * limited by CUDA_VISIBLE_DEVICES when set. *why gets a short description of what was found. */
int lsr_count_gpus(const char **why);
/* Logical CPUs in this process's affinity mask (what BLAS threads would use). */
int lsr_count_cpus(void);
/* Physical cores among those CPUs (what Open MPI counts as slots on a host). */
int lsr_count_cores(void);

/* Resolves a program like execvp: a name with '/' is used as is, else searched in PATH. Returns
 * 0 with a malloc'd path in *out, or an errno-like code: ENOENT (not found), ENOEXEC (not an
 * executable regular file), or, for a name with '/', why it could not be looked at (EACCES: a
 * directory on its path may not be searched by this user). A PATH entry this user may not search
 * is passed over, as by the shell. */
int lsr_find_program(const char *name, char **out);

/* Runs argv (argv[0] a path, no PATH search) with stdin from /dev/null and its standard output
 * and error captured together into buf (at most cap - 1 bytes kept, NUL-terminated). Killed
 * after timeout_ms. Returns its exit status (0-255), or -1 when it could not be run, was killed
 * or timed out. */
int lsr_capture(char *const argv[], char *buf, size_t cap, int timeout_ms);

/* The signals lockstep-run handles while it runs the launcher as its child: SIGTERM, SIGINT,
 * SIGCHLD, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGTSTP, SIGTTIN, SIGTTOU (Ctrl-Z: the job is
 * stopped, then lockstep-run; continued, it continues the job), blocked from lsr_signals_block (before the
 * first run) to lsr_signals_restore (after the last), so none is lost between runs. */
typedef struct lsr_signals {
    sigset_t set, old;
    int job;
} lsr_signals;
void lsr_signals_block(lsr_signals *s, int job);
void lsr_signals_restore(const lsr_signals *s);

/* Runs exe (argv its argument vector) as a child and waits for it. The child runs in its own
 * process group (stdin from /dev/null when it is a terminal, SIGTTOU ignored) and gets SIGTERM if
 * lockstep-run dies (PR_SET_PDEATHSIG); every signal of the set reaches the job once, passed on by
 * lockstep-run (a terminal's Ctrl-C included). With job_id (srun inside that Slurm job) SIGUSR1
 * and SIGUSR2 go to the job's steps (the ranks) with scancel, else to the child. A stop signal
 * (SIGTERM, SIGINT, SIGHUP, SIGQUIT): with job_id it goes to the job's steps with scancel (SIGINT as
 * SIGINT, the others as SIGTERM) instead of letting srun kill them; with mpirun to mpirun's ranks on this host (SIGINT as
 * SIGINT, the others as SIGTERM), or to mpirun when it has none here (then once only, and an exit
 * status 1, mpirun's when signalled, becomes 128 + that signal); else to the child. A stop
 * within a second of the one passed on is the same stop sent twice and is dropped. A second stop
 * gives the job 3 s to end, then it gets SIGKILL (its processes and their process groups; with
 * job_id also scancel --signal=KILL); a third kills it at once. A stop reaches each rank's process
 * group (the child's, without mpirun), not the process alone. lockstep-run is a child subreaper:
 * it returns only when every process of the job has ended (what the child leaves running is
 * waited for after a stop, else sent SIGTERM, then SIGKILL 3 s later). With mpirun, its ranks on
 * this host get LOCKSTEP_RUN_PID (lockstep-run's pid): a rank that aborts the job (ls_comm_abort)
 * first sends lockstep-run LSR_ABORT_SIGNAL, and the job is killed abort_grace seconds later
 * unless it has ended by then (mpirun's abort waits for ever on a host that hangs). *stopped gets
 * the stop signal passed on last, 0 if none. Returns the child's exit status (128 + signal when
 * it was killed: *signalled gets the signal, else 0), or -1 when it could not be started or
 * waited for (errno). */
int lsr_run_child(const lsr_signals *sigs, const char *exe, char *const argv[], const char *job_id, int mpirun,
                  double abort_grace, int *stopped, int *signalled);

/* Waits `seconds` (0: only looks); returns early with a stop signal (SIGTERM, SIGINT, SIGHUP,
 * SIGQUIT) that arrives or is pending, 0 after the wait. */
int lsr_pause(const lsr_signals *sigs, double seconds);

#endif
