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
    kill(srun, sig);
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

/* Sends sig to mpirun's children on this host that are ranks; returns how many got it. */
static int signal_local_ranks(pid_t mpirun, int sig) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
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
        const char *rp = strrchr(stat, ')'); /* "pid (comm) state ppid ...": comm may hold anything */
        long ppid = -1;
        char state;
        if (!rp || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2 || ppid != (long)mpirun) continue;
        long pid = strtol(e->d_name, NULL, 10);
        if (is_mpi_rank(pid) && kill((pid_t)pid, sig) == 0) {
            kill((pid_t)pid, SIGCONT); /* a stopped rank acts on it */
            n++;
        }
    }
    closedir(d);
    return n;
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
    for (size_t i = 0; i < t->n; i++) /* the groups first */
        if (in[i] && t->v[i].pid != skip && t->v[i].pgrp == t->v[i].pid && kill(-t->v[i].pid, sig) == 0 &&
            sig != SIGKILL)
            kill(-t->v[i].pid, SIGCONT); /* a stopped process acts on it */
    for (size_t i = 0; i < t->n; i++) {
        if (!in[i] || t->v[i].pid == skip) continue;
        long g = ptab_find(t, t->v[i].pgrp);
        int group_done = g >= 0 && in[g] && t->v[g].pid != skip;
        if (!group_done && t->v[i].state != 'Z' && kill(t->v[i].pid, sig) == 0 && sig != SIGKILL)
            kill(t->v[i].pid, SIGCONT);
        n++;
    }
    return n;
}

/* SIGKILL to the job: root (the launcher lockstep-run started), its descendants and their
 * process groups, again until none is left (a process may fork while it is signalled). */
static void kill_job(pid_t root, const char *job_id) {
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
        unsigned char *in = ptab_tree(&t, root);
        int live = 0;
        for (size_t i = 0; in && i < t.n; i++) live += in[i] && t.v[i].state != 'Z';
        if (in && live) signal_marked(&t, in, 0, SIGKILL);
        free(in);
        ptab_free(&t);
        if (!live) break;
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
    s->job = job;
    /* A SIGCHLD ignored by whoever started us would reap the child before we see its status. */
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_BLOCK, &s->set, &s->old);
}

void lsr_signals_restore(const lsr_signals *s) { sigprocmask(SIG_SETMASK, &s->old, NULL); }

/* Seconds the job has to end after a second stop signal before it is killed. */
#define LSR_KILL_GRACE 3.0

static int stop_signal(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT; }

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lsr_run_child(const lsr_signals *sigs, const char *exe, char *const argv[], const char *job_id, int mpirun,
                  int *stopped) {
    *stopped = 0;
    double stop_at = -1;    /* when the last stop signal was passed on */
    int stops = 0;          /* stop signals passed on (a duplicate within a second not counted) */
    double kill_at = -1;    /* when the job gets SIGKILL unless it has ended (after a second stop) */
    int killed = 0;         /* the job got SIGKILL */
    int mpirun_stopped = 0; /* the stop signal that went to mpirun itself (it had no rank here) */
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
    for (;;) {
        int sig;
        if (kill_at >= 0 && !killed) {
            double left = kill_at - mono_now();
            if (left <= 0) {
                fprintf(stderr,
                        "lockstep-run: the job did not end within %g s of the second stop signal: killing it "
                        "(SIGKILL)\n",
                        LSR_KILL_GRACE);
                kill_job(pid, job_id);
                killed = 1;
                continue;
            }
            struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
            sig = sigtimedwait(&sigs->set, NULL, &ts);
            if (sig < 0 && errno == EAGAIN) continue;
        } else {
            sig = sigwaitinfo(&sigs->set, NULL);
        }
        if (sig > 0 && sig != SIGCHLD) {
            if (!stop_signal(sig)) { /* SIGUSR1, SIGUSR2: mpirun passes them to its ranks */
                if (job_id)
                    forward(sig, sig, job_id, pid); /* to the ranks (srun would pass them too, but scancel
                                                  reaches every step, as a stop does) */
                else
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
                kill_job(pid, job_id);
                killed = 1;
                stop_at = mono_now();
                continue;
            }
            if (stops == 2) {
                fprintf(stderr,
                        "lockstep-run: second SIG%s: the job is killed (SIGKILL) if it has not ended %g s from now, "
                        "at once on a third\n",
                        name, LSR_KILL_GRACE);
                kill_at = mono_now() + LSR_KILL_GRACE;
            }
            if (job_id) {
                /* as with mpirun: SIGHUP and SIGQUIT reach the ranks as SIGTERM, the signal a
                 * lockstep program checkpoints on (either would kill it outright) */
                forward(sig, sig == SIGINT ? SIGINT : SIGTERM, job_id, pid);
            } else if (mpirun) {
                /* the ranks' stop: SIGINT stays (exit 130), the others become SIGTERM (143) */
                const int to_ranks = sig == SIGINT ? SIGINT : SIGTERM;
                if (mpirun_stopped || signal_local_ranks(pid, to_ranks) == 0) {
                    if (mpirun_stopped) {
                        fprintf(stderr,
                                "lockstep-run: SIG%s: not passed to mpirun, which is stopping the ranks since the "
                                "first signal (a second would make it exit and leave them running)\n",
                                sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
                        continue;
                    }
                    mpirun_stopped = to_ranks; /* no rank here: mpirun passes it to them */
                    kill(pid, to_ranks);
                    kill(pid, SIGCONT);
                }
            } else {
                kill(pid, sig);
                kill(pid, SIGCONT); /* a stopped child acts on it */
            }
            /* counted from when it was passed on: a repeat sent while scancel ran is the same stop */
            stop_at = mono_now();
            continue;
        }
        if (sig < 0 && errno != EINTR) { /* no signals to wait for: wait for the child alone */
            while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR) return -1;
            break;
        }
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return -1;
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
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
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
        if (r < 0 && errno == EAGAIN) return 0; /* the time is up */
        if (r < 0 && errno != EINTR) return 0;
        /* SIGCHLD, SIGUSR1/2 with no job running: nothing to do */
    }
}
