/* supervise.c: lockstep-run as the parent of the launcher it starts, instead of exec'ing it.
 *
 * Inside a Slurm job: srun treats a SIGTERM (or SIGHUP) it receives as "kill the step": it sends
 * SIGKILL to every rank, so a rank never gets to write its preemption checkpoint. Inside a batch
 * job the signal for "time is nearly up" often goes to the batch shell alone (#SBATCH
 * --signal=B:TERM@120, scancel --batch), which is lockstep-run when the script execs it. So
 * lockstep-run does not exec srun there: it starts it, waits for it, and passes SIGTERM and SIGINT
 * to the ranks through Slurm (scancel --signal=SIG JOBID, which signals the job's steps and not the
 * batch shell), where the ranks checkpoint and exit 143 or 130; SIGHUP and SIGQUIT go the same way
 * as SIGTERM, SIGUSR1 and SIGUSR2 as themselves.
 *
 * With --max-restarts: mpirun, srun or the program itself runs as a child so that lockstep-run can
 * start it again when it fails; SIGTERM and SIGINT sent to lockstep-run are passed on to it.
 *
 * mpirun always runs as a child. A stop signal goes to its ranks on this host (its children with
 * OMPI_COMM_WORLD_RANK in their environment), not to mpirun: signalled, Open MPI's mpirun kills
 * its ranks 1 s later (odls_base_sigkill_timeout), too soon for a checkpoint of any size, and
 * exits 1 whatever they exit with; a lockstep program's ranks agree each step on a stop that any
 * rank got (ls_preempt_agree), so ranks on other hosts stop at the same step, and mpirun passes
 * on their exit status (143, 130). Where it has no rank here yet, mpirun itself gets the signal,
 * once: it takes a second SIGTERM or SIGINT as "abort now" and exits without stopping its ranks,
 * which then train on unseen (timeout(1) sends its signal twice: to its child and to its
 * process group). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

/* Passes sig (for got, the signal lockstep-run received) to the job's steps with scancel; falls
 * back to signalling srun itself. */
static void forward(int got, int sig, const char *job_id, pid_t srun) {
    const char *name = sigabbrev_np(sig) ? sigabbrev_np(sig) : "TERM";
    const char *got_name = sigabbrev_np(got) ? sigabbrev_np(got) : "?";
    char as[32] = "";
    if (got != sig) snprintf(as, sizeof as, " as SIG%s", name);
    char *scancel = NULL;
    char out[1024] = "";
    int rc = -1;
    if (!lsr_find_program("scancel", &scancel)) {
        char opt[32];
        snprintf(opt, sizeof opt, "--signal=%s", name);
        char *argv[] = {scancel, opt, (char *)job_id, NULL};
        rc = lsr_capture(argv, out, sizeof out, 10000);
        free(scancel);
    }
    if (rc == 0) {
        fprintf(stderr, "lockstep-run: SIG%s: passed to the ranks%s (scancel --signal=%s %s)\n", got_name, as, name,
                job_id);
        return;
    }
    out[strcspn(out, "\n")] = '\0';
    fprintf(stderr, "lockstep-run: SIG%s: scancel --signal=%s %s %s%s%s; signalling srun instead\n", got_name, name,
            job_id, rc < 0 ? "could not run" : "failed", *out ? ": " : "", out);
    if (srun > 0) kill(srun, sig);
}

/* 1 when /proc/PID/environ (this user's process) names an Open MPI rank. */
static int is_mpi_rank(long pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/environ", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap + 1);
    for (ssize_t n = 1; buf && n > 0;) {
        if (len == cap && cap < (32u << 20)) { /* an environment is at most a few MiB */
            char *b = realloc(buf, 2 * cap + 1);
            if (!b) break;
            buf = b;
            cap *= 2;
        }
        if (len == cap) break;
        n = read(fd, buf + len, cap - len);
        if (n > 0) len += (size_t)n;
    }
    close(fd);
    int found = 0;
    static const char key[] = "OMPI_COMM_WORLD_RANK=";
    for (size_t i = 0; buf && i < len && !found;) { /* NUL-separated NAME=VALUE entries */
        const char *e = memchr(buf + i, '\0', len - i);
        size_t n = e ? (size_t)(e - (buf + i)) : len - i;
        found = n >= sizeof key - 1 && memcmp(buf + i, key, sizeof key - 1) == 0;
        i += n + 1;
    }
    free(buf);
    return found;
}

/* ---- the job's processes, from /proc ------------------------------------------------------- */

typedef struct proc {
    pid_t pid, ppid, pgrp;
    char state; /* 'Z': a zombie, already dead */
} proc;

typedef struct ptab {
    proc *v; /* sorted by pid */
    size_t n;
} ptab;

static int cmp_proc(const void *a, const void *b) {
    pid_t x = ((const proc *)a)->pid, y = ((const proc *)b)->pid;
    return (x > y) - (x < y);
}

/* Every process of this machine (that /proc shows) with its parent and process group. */
static void ptab_read(ptab *t) {
    t->v = NULL;
    t->n = 0;
    DIR *d = opendir("/proc");
    if (!d) return;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        char path[300], stat[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t k = read(fd, stat, sizeof stat - 1);
        close(fd);
        if (k <= 0) continue;
        stat[k] = '\0';
        const char *rp = strrchr(stat, ')'); /* "pid (comm) state ppid pgrp ...": comm may hold anything */
        long ppid = -1, pgrp = -1;
        char state;
        if (!rp || sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
        if (t->n == cap) {
            size_t c = cap ? 2 * cap : 256;
            proc *v = realloc(t->v, c * sizeof *v);
            if (!v) break;
            t->v = v;
            cap = c;
        }
        t->v[t->n++] = (proc){(pid_t)strtol(e->d_name, NULL, 10), (pid_t)ppid, (pid_t)pgrp, state};
    }
    closedir(d);
    if (t->n) qsort(t->v, t->n, sizeof *t->v, cmp_proc);
}

static void ptab_free(ptab *t) {
    free(t->v);
    t->v = NULL;
    t->n = 0;
}

static long ptab_find(const ptab *t, pid_t pid) {
    proc key = {.pid = pid};
    const proc *p = t->n ? bsearch(&key, t->v, t->n, sizeof *t->v, cmp_proc) : NULL;
    return p ? (long)(p - t->v) : -1;
}

/* in[i] = 1 for root and every descendant of it (calloc'd; NULL when out of memory). */
static unsigned char *ptab_tree(const ptab *t, pid_t root) {
    unsigned char *in = calloc(t->n + 1, 1);
    if (!in) return NULL;
    long r = ptab_find(t, root);
    if (r < 0) return in;
    in[r] = 1;
    for (int changed = 1; changed;) { /* one level deeper each pass */
        changed = 0;
        for (size_t i = 0; i < t->n; i++) {
            if (in[i]) continue;
            long pi = ptab_find(t, t->v[i].ppid);
            if (pi >= 0 && in[pi]) in[i] = changed = 1;
        }
    }
    return in;
}

/* Sends sig to the processes marked in `in` (skip: one not to signal), each once, as a terminal
 * signals its foreground job: to the process group of each that leads one (with the members a
 * process of the tree forked), to the others one by one. Returns how many processes were marked. */
static int signal_marked(const ptab *t, const unsigned char *in, pid_t skip, int sig) {
    int n = 0;
    const int cont = sig != SIGKILL && sig != SIGTSTP && sig != SIGSTOP && sig != SIGCONT; /* a stop acts now */
    for (size_t i = 0; i < t->n; i++)                                                      /* the groups first */
        if (in[i] && t->v[i].pid != skip && t->v[i].pgrp == t->v[i].pid && kill(-t->v[i].pid, sig) == 0 && cont)
            kill(-t->v[i].pid, SIGCONT); /* a stopped process acts on it */
    for (size_t i = 0; i < t->n; i++) {
        if (!in[i] || t->v[i].pid == skip) continue;
        long g = ptab_find(t, t->v[i].pgrp);
        int group_done = g >= 0 && in[g] && t->v[g].pid != skip;
        if (!group_done && t->v[i].state != 'Z' && kill(t->v[i].pid, sig) == 0 && cont) kill(t->v[i].pid, SIGCONT);
        n++;
    }
    return n;
}

/* The job: lockstep-run's descendants (the launcher it started, what that started, and what they
 * left behind, which the kernel gives to lockstep-run, a child subreaper). job[i] marks them,
 * lockstep-run itself not; returns how many are alive (not zombies), -1 out of memory. */
static int job_procs(const ptab *t, unsigned char **job) {
    pid_t self = getpid();
    *job = ptab_tree(t, self);
    if (!*job) return -1;
    long me = ptab_find(t, self);
    if (me >= 0) (*job)[me] = 0;
    int live = 0;
    for (size_t i = 0; i < t->n; i++) live += (*job)[i] && t->v[i].state != 'Z';
    return live;
}

/* Sends sig to the whole job (as a terminal to its foreground job); returns how many processes. */
static int signal_job(int sig) {
    ptab t;
    ptab_read(&t);
    unsigned char *job = NULL;
    int n = job_procs(&t, &job) > 0 ? signal_marked(&t, job, getpid(), sig) : 0;
    free(job);
    ptab_free(&t);
    return n;
}

/* "123 (work.sh), 124 (sleep)": the job's live processes, for messages. */
static void describe_job(char *buf, size_t len) {
    ptab t;
    ptab_read(&t);
    unsigned char *job = NULL;
    size_t used = 0;
    int shown = 0, more = 0;
    buf[0] = '\0';
    if (job_procs(&t, &job) > 0) {
        for (size_t i = 0; i < t.n; i++) {
            if (!job[i] || t.v[i].state == 'Z') continue;
            if (shown == 5) {
                more++;
                continue;
            }
            char path[64], comm[64] = "?";
            snprintf(path, sizeof path, "/proc/%ld/comm", (long)t.v[i].pid);
            FILE *f = fopen(path, "r");
            if (f) {
                if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = '\0';
                fclose(f);
            }
            if (used < len)
                used +=
                    (size_t)snprintf(buf + used, len - used, "%s%ld (%s)", shown ? ", " : "", (long)t.v[i].pid, comm);
            shown++;
        }
        if (more && used < len) snprintf(buf + used, len - used, " and %d more", more);
    }
    free(job);
    ptab_free(&t);
}

/* 1 when pid runs Open MPI's mpirun (orterun, mpiexec, prterun): a wrapper script's child. */
static int is_mpirun(pid_t pid) {
    char path[64], exe[4096];
    snprintf(path, sizeof path, "/proc/%ld/exe", (long)pid);
    ssize_t n = readlink(path, exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    static const char *const names[] = {"orterun", "mpirun", "mpiexec", "prterun"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strncmp(base, names[i], strlen(names[i]))) return 1;
    return 0;
}

/* Passes a stop to the job under mpirun: to each rank on this host (the topmost processes with
 * OMPI_COMM_WORLD_RANK in their environment, wherever they are in the job: mpirun's children, or
 * its grandchildren under a wrapper script) with what it started (its process group: Open MPI
 * gives each rank one; a rank that is a script around the program must not leave the program
 * running). Returns how many ranks got it; 0: none was found, nothing was sent. sig 0: only
 * counts the ranks still running here. */
static int signal_ranks(int sig) { /* sig 0: counts them, sends nothing */
    ptab t;
    ptab_read(&t);
    unsigned char *job = NULL, *rank = NULL;
    int n = 0;
    if (job_procs(&t, &job) > 0 && (rank = calloc(t.n + 1, 1)) != NULL) {
        for (size_t i = 0; i < t.n; i++) rank[i] = job[i] && t.v[i].state != 'Z' && is_mpi_rank(t.v[i].pid);
        for (size_t i = 0; i < t.n; i++) {
            long pi = ptab_find(&t, t.v[i].ppid);
            if (!rank[i] || (pi >= 0 && rank[pi])) continue; /* a rank's child goes with it */
            unsigned char *tree = ptab_tree(&t, t.v[i].pid);
            if (tree && sig) signal_marked(&t, tree, 0, sig);
            free(tree);
            n++;
        }
    }
    free(rank);
    free(job);
    ptab_free(&t);
    return n;
}

/* Passes a stop to mpirun itself (it has no rank here): to the topmost processes of the job that
 * run mpirun (under a wrapper script: signalled, the script would end and leave mpirun running),
 * else to the child. Also SIGTSTP and SIGCONT, which mpirun passes to all its ranks. */
static void signal_mpirun(pid_t child, int sig) {
    const int cont = sig != SIGTSTP && sig != SIGCONT;
    ptab t;
    ptab_read(&t);
    unsigned char *job = NULL;
    int n = 0;
    if (!is_mpirun(child) && job_procs(&t, &job) > 0) {
        for (size_t i = 0; i < t.n; i++) {
            if (!job[i] || t.v[i].state == 'Z' || !is_mpirun(t.v[i].pid)) continue;
            long pi = ptab_find(&t, t.v[i].ppid);
            if (pi >= 0 && job[pi] && is_mpirun(t.v[pi].pid)) continue;
            kill(t.v[i].pid, sig);
            if (cont) kill(t.v[i].pid, SIGCONT);
            n++;
        }
    }
    free(job);
    ptab_free(&t);
    if (n == 0) {
        kill(child, sig);
        if (cont) kill(child, SIGCONT);
    }
}

/* SIGKILL to the job (its processes and their process groups), again until none is left (a
 * process may fork while it is signalled). */
static void kill_job(const char *job_id) {
    if (job_id) { /* the ranks of the Slurm job's steps, on every node */
        char *scancel = NULL;
        if (!lsr_find_program("scancel", &scancel)) {
            char out[256];
            char *argv[] = {scancel, "--signal=KILL", (char *)job_id, NULL};
            lsr_capture(argv, out, sizeof out, 10000);
            free(scancel);
        }
    }
    for (int pass = 0; pass < 20; pass++) {
        ptab t;
        ptab_read(&t);
        unsigned char *job = NULL;
        int live = job_procs(&t, &job);
        if (live > 0) signal_marked(&t, job, getpid(), SIGKILL);
        free(job);
        ptab_free(&t);
        if (live <= 0) break;
        struct timespec ms = {0, 10000000L};
        nanosleep(&ms, NULL);
    }
}

void lsr_signals_block(lsr_signals *s, int job) {
    sigemptyset(&s->set);
    sigaddset(&s->set, SIGTERM);
    sigaddset(&s->set, SIGINT);
    sigaddset(&s->set, SIGCHLD);
    /* also inside a Slurm job: left to their default action they killed lockstep-run, and srun
     * then got SIGTERM (PR_SET_PDEATHSIG) and killed the ranks without their checkpoint */
    sigaddset(&s->set, SIGHUP);
    sigaddset(&s->set, SIGQUIT);
    sigaddset(&s->set, SIGUSR1);
    sigaddset(&s->set, SIGUSR2);
    /* job control: left to their default action they stopped lockstep-run alone (the job is in
     * its own process group) and the job ran on; SIGTTOU blocked also lets lockstep-run write its
     * lines to the terminal from the background under 'stty tostop', as the job does */
    sigaddset(&s->set, SIGTSTP);
    sigaddset(&s->set, SIGTTIN);
    sigaddset(&s->set, SIGTTOU);
    /* a local rank's notice that it is aborting the job (ls_comm_abort; ignored by default) */
    sigaddset(&s->set, LSR_ABORT_SIGNAL);
    s->job = job;
    /* A SIGCHLD ignored by whoever started us would reap the child before we see its status. */
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_BLOCK, &s->set, &s->old);
}

void lsr_signals_restore(const lsr_signals *s) { sigprocmask(SIG_SETMASK, &s->old, NULL); }

/* Seconds the job has to end after a second stop signal before it is killed. */
#define LSR_KILL_GRACE 3.0

static int tstp_signal(int sig) { return sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU; }

/* Ctrl-Z (SIGTSTP, or SIGTTIN/SIGTTOU sent by hand): the job is stopped (mpirun passes SIGTSTP to
 * its ranks as SIGSTOP; inside a Slurm job scancel passes it to the steps; else the program's
 * processes get it), then lockstep-run stops itself; continued (fg, bg, SIGCONT), it continues
 * the job. child: 0 once it has exited. */
static void job_control_stop(int sig, const char *job_id, pid_t child, int mpirun) {
    const char *name = sigabbrev_np(sig) ? sigabbrev_np(sig) : "?";
    if (job_id)
        forward(sig, SIGTSTP, job_id, child);
    else if (mpirun && child)
        signal_mpirun(child, SIGTSTP);
    else
        signal_job(SIGTSTP);
    fprintf(stderr, "lockstep-run: SIG%s: the job is stopped, and lockstep-run; fg, bg or SIGCONT continues both\n",
            name);
    raise(SIGSTOP);
    /* continued */
    if (job_id)
        forward(SIGCONT, SIGCONT, job_id, child);
    else if (mpirun && child)
        signal_mpirun(child, SIGCONT);
    else
        signal_job(SIGCONT);
}

static int stop_signal(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT; }

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The job is killed grace seconds from now (for why), unless an earlier kill is already set. */
static void kill_deadline(double *kill_at, double *kill_grace, const char **kill_why, double grace, const char *why) {
    const double at = mono_now() + grace;
    if (*kill_at >= 0 && *kill_at <= at) return;
    *kill_at = at;
    *kill_grace = grace;
    *kill_why = why;
}

int lsr_run_child(const lsr_signals *sigs, const char *exe, char *const argv[], const char *job_id, int mpirun,
                  double abort_grace, int *stopped, int *signalled) {
    *stopped = 0;
    *signalled = 0;
    double stop_at = -1;                /* when the last stop signal was passed on */
    int stops = 0;                      /* stop signals passed on (a duplicate within a second not counted) */
    double kill_at = -1;                /* when the job gets SIGKILL unless it has ended (after a second stop) */
    const char *kill_why = "";          /* why kill_at was set */
    double kill_grace = LSR_KILL_GRACE; /* the seconds kill_at gave */
    char abort_why[96] = "";            /* kill_why after a rank's abort notice */
    int killed = 0;                     /* the job got SIGKILL */
    int mpirun_stopped = 0;             /* the stop signal that went to mpirun itself (it had no rank here) */
    int ranks_here = 0;                 /* a stop reached ranks of mpirun on this host */
    int child_done = 0;                 /* the child has exited (st); processes of the job may be left */
    int mpirun_more = 0;                /* mpirun was given abort_grace after its ranks here had ended */
    static const char second_stop[] = "the second stop signal";
    /* Orphans of the job (a rank's program whose wrapper script ended, mpirun under an ended
     * wrapper) become lockstep-run's children rather than init's: lockstep-run sees them, stops
     * and kills them with the job, and returns only when the whole job has ended. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* Its own process group: a terminal's Ctrl-C, or a kill of lockstep-run's group, reaches
         * lockstep-run alone, which passes it on once (a second SIGINT or SIGTERM stops a lockstep
         * program at once, without its checkpoint; mpirun takes a second as "abort now"; srun takes
         * a SIGTERM as "kill the step"). A background group must not read the terminal: stdin from
         * /dev/null then; and it writes to it even under 'stty tostop' (SIGTTOU ignored, as the
         * ranks' output reaches it through mpirun or srun): stopped, it would wait for ever, and
         * so would lockstep-run. */
        setpgid(0, 0);
        if (isatty(STDIN_FILENO)) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd >= 0 && fd != STDIN_FILENO) {
                dup2(fd, STDIN_FILENO);
                close(fd);
            }
        }
        signal(SIGTTOU, SIG_IGN);
        /* mpirun's ranks on this host inherit its environment: a rank that aborts the job tells
         * lockstep-run (LSR_ABORT_SIGNAL), which then bounds mpirun's abort */
        if (mpirun) {
            char pid_s[32];
            snprintf(pid_s, sizeof pid_s, "%ld", (long)parent);
            setenv("LOCKSTEP_RUN_PID", pid_s, 1);
        }
        /* lockstep-run killed outright (SIGKILL, the OOM killer) must not leave the job running
         * unseen: the child gets SIGTERM then (mpirun passes it to the ranks). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(128 + SIGTERM);
        sigprocmask(SIG_SETMASK, &sigs->old, NULL);
        execv(exe, argv);
        if (errno == ENOENT && access(exe, F_OK) == 0) /* there: its #! interpreter or loader is not */
            fprintf(stderr,
                    "lockstep-run: cannot run %s: its interpreter (the #! line) or dynamic loader was not found\n",
                    exe);
        else
            fprintf(stderr, "lockstep-run: cannot run %s: %s\n", exe, strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    setpgid(pid, pid); /* also here: no signal may find the child in our group */
    int st = 0;
    siginfo_t info;
    for (;;) {
        int sig;
        if (kill_at >= 0 && !killed) {
            double left = kill_at - mono_now();
            if (left <= 0 && mpirun && !child_done && kill_why == second_stop && !mpirun_stopped && !mpirun_more &&
                signal_ranks(0) == 0) {
                /* The ranks here have ended (they stopped): mpirun alone is ending the job, which
                 * takes it a second or two (its own kill timers), more on a loaded machine (over
                 * 3 s seen: killed, the job's status became 137, not the ranks' 143), and waits
                 * for ranks on other hosts. Bounded as an abort is. */
                fprintf(stderr,
                        "lockstep-run: the ranks on this host have ended: mpirun has up to %g s more to end the job "
                        "(--abort-grace)\n",
                        abort_grace);
                mpirun_more = 1;
                kill_at = mono_now() + abort_grace;
                kill_grace = LSR_KILL_GRACE + abort_grace;
                continue;
            }
            if (left <= 0) {
                fprintf(stderr, "lockstep-run: the job did not end within %g s of %s: killing it (SIGKILL)%s\n",
                        kill_grace, kill_why,
                        kill_why == abort_why ? "; processes on other hosts that mpirun cannot reach may be left" : "");
                kill_job(job_id);
                killed = 1;
                continue;
            }
            struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
            sig = sigtimedwait(&sigs->set, &info, &ts);
            if (sig < 0 && errno == EAGAIN) continue;
        } else {
            sig = sigwaitinfo(&sigs->set, &info);
        }
        if (sig == LSR_ABORT_SIGNAL) {
            /* A rank here is aborting the job (MPI_Abort): mpirun then kills every rank and exits,
             * within a second or so, but not while a host it waits on hangs (its processes stopped
             * or frozen, its kernel still answering TCP): it waited for ever, and so did
             * lockstep-run, and --max-restarts never restarted. Bounded now: the job is killed
             * abort_grace seconds later unless it has ended, or a stop has set an earlier end. */
            if (mpirun && !child_done && !killed && !*abort_why) {
                snprintf(abort_why, sizeof abort_why, "a rank's abort (MPI_Abort, process %ld)", (long)info.si_pid);
                kill_deadline(&kill_at, &kill_grace, &kill_why, abort_grace, abort_why);
            }
            continue;
        }
        if (sig > 0 && tstp_signal(sig)) {
            job_control_stop(sig, job_id, child_done ? 0 : pid, mpirun);
            continue;
        }
        if (sig > 0 && sig != SIGCHLD) {
            if (!stop_signal(sig)) { /* SIGUSR1, SIGUSR2: mpirun passes them to its ranks */
                if (job_id)
                    forward(sig, sig, job_id, child_done ? 0 : pid); /* to the ranks (srun would pass them
                                                                       too, but scancel reaches every step,
                                                                       as a stop does) */
                else if (!child_done) /* (once reaped, its pid may be another process's) */
                    kill(pid, sig);
                continue;
            }
            /* One stop, one signal passed on: the same stop often arrives twice (timeout(1) signals
             * its child and then its process group; a kill of the process and of its group), and
             * a second one stops a lockstep program without its checkpoint. A repeat within a
             * second is that duplicate; a later one is passed on (a second stop: at once), but
             * never to mpirun, which would exit and leave its ranks running (it is already ending
             * them: it kills them odls_base_sigkill_timeout after the first). */
            if (stop_at >= 0 && mono_now() - stop_at < 1.0) continue;
            *stopped = sig;
            const char *name = sigabbrev_np(sig) ? sigabbrev_np(sig) : "?";
            if (++stops >= 3 || killed) {
                /* a job that ignores its stops must still end: the third kills it */
                fprintf(stderr, "lockstep-run: %s SIG%s: killing the job (SIGKILL)\n", killed ? "another" : "third",
                        name);
                kill_job(job_id);
                killed = 1;
                stop_at = mono_now();
                continue;
            }
            if (stops == 2) {
                fprintf(stderr,
                        "lockstep-run: second SIG%s: the job is killed (SIGKILL) if it has not ended %g s from now, "
                        "at once on a third\n",
                        name, LSR_KILL_GRACE);
                kill_deadline(&kill_at, &kill_grace, &kill_why, LSR_KILL_GRACE, second_stop);
            }
            if (job_id) {
                /* as with mpirun: SIGHUP and SIGQUIT reach the ranks as SIGTERM, the signal a
                 * lockstep program checkpoints on (either would kill it outright) */
                forward(sig, sig == SIGINT ? SIGINT : SIGTERM, job_id, child_done ? 0 : pid);
            } else if (mpirun) {
                /* the ranks' stop: SIGINT stays (exit 130), the others become SIGTERM (143) */
                const int to_ranks = sig == SIGINT ? SIGINT : SIGTERM;
                const int reached = mpirun_stopped ? 0 : signal_ranks(to_ranks);
                if (reached > 0) ranks_here = 1;
                if (reached == 0 && ranks_here) {
                    /* The ranks here have ended since an earlier stop: mpirun is ending the job
                     * (a rank's non-zero status aborts it). Signalled in its abort, Open MPI 4's
                     * mpirun crashed (SIGSEGV in PMIx_Finalize: status 139, not the ranks'). */
                    fprintf(stderr,
                            "lockstep-run: SIG%s: the ranks on this host have ended; not passed to mpirun, which is "
                            "ending the job\n",
                            name);
                    stop_at = mono_now();
                    continue;
                }
                if (reached == 0) {
                    if (mpirun_stopped) {
                        fprintf(stderr,
                                "lockstep-run: SIG%s: not passed to mpirun, which is stopping the ranks since the "
                                "first signal (a second would make it exit and leave them running)\n",
                                sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
                        continue;
                    }
                    mpirun_stopped = to_ranks; /* no rank here: mpirun passes it to them */
                    if (child_done)
                        signal_job(to_ranks); /* what is left of the job */
                    else
                        signal_mpirun(pid, to_ranks);
                }
            } else {
                /* the program and what it started, as a terminal's Ctrl-C reaches its job */
                signal_job(sig);
            }
            /* counted from when it was passed on: a repeat sent while scancel ran is the same stop */
            stop_at = mono_now();
            continue;
        }
        /* SIGCHLD: reap the child and the orphans of the job that lockstep-run adopted */
        const int block = sig < 0 && errno != EINTR; /* no signals to wait for: wait for children */
        int none_left = 0;
        for (;;) {
            int s2 = 0;
            pid_t w = waitpid(-1, &s2, block ? 0 : WNOHANG);
            if (w == pid) {
                st = s2;
                child_done = 1;
            } else if (w < 0 && errno == ECHILD) {
                none_left = 1;
                break;
            } else if (w < 0 && errno != EINTR) {
                if (!child_done) return -1;
                none_left = 1;
                break;
            } else if (w == 0) {
                break;
            }
        }
        if (!child_done) continue;
        if (none_left) break;
        if (child_done == 1) { /* the first look after the child's end: what it left running */
            child_done = 2;
            char procs[512];
            describe_job(procs, sizeof procs);
            if (!*procs) continue;
            if (stops) {
                fprintf(stderr,
                        "lockstep-run: %s has exited, but processes of the job still run after the stop signal: %s; "
                        "waiting for them\n",
                        mpirun   ? "mpirun"
                        : job_id ? "srun"
                                 : exe,
                        procs);
            } else if (!killed) {
                fprintf(stderr,
                        "lockstep-run: %s has exited, but processes of the job still run: %s; sending them SIGTERM\n",
                        mpirun   ? "mpirun"
                        : job_id ? "srun"
                                 : exe,
                        procs);
                signal_job(SIGTERM);
                kill_deadline(&kill_at, &kill_grace, &kill_why, LSR_KILL_GRACE, "a SIGTERM to what was left of it");
            }
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 1 && mpirun_stopped) {
        /* Open MPI's mpirun exits 1 when it is signalled, whatever its ranks exited with */
        fprintf(stderr,
                "lockstep-run: mpirun exited 1 after SIG%s, as it does when signalled: exit status %d (the "
                "ranks' lines say whether they saved a checkpoint)\n",
                sigabbrev_np(mpirun_stopped), 128 + mpirun_stopped);
        return 128 + mpirun_stopped;
    }
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) {
        *signalled = WTERMSIG(st);
        return 128 + WTERMSIG(st);
    }
    return 1;
}

int lsr_pause(const lsr_signals *sigs, double seconds) {
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)seconds;
    end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    for (;;) { /* at least once: a stop signal that came between two runs is pending now */
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left = (long long)(end.tv_sec - now.tv_sec) * 1000000000LL + (end.tv_nsec - now.tv_nsec);
        if (left < 0) left = 0;
        struct timespec ts = {(time_t)(left / 1000000000LL), (long)(left % 1000000000LL)};
        int r = sigtimedwait(&sigs->set, NULL, &ts);
        if (r > 0 && stop_signal(r)) return r;
        if (r > 0 && tstp_signal(r)) raise(SIGSTOP); /* Ctrl-Z while no job runs */
        if (r < 0 && errno == EAGAIN) return 0;      /* the time is up */
        if (r < 0 && errno != EINTR) return 0;
        /* SIGCHLD, SIGUSR1/2 with no job running: nothing to do */
    }
}
