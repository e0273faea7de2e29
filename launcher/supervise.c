/* supervise.c: lockstep-run as the parent of the launcher it starts, instead of exec'ing it.
 *
 * Inside a Slurm job: srun treats a SIGTERM (or SIGHUP) it receives as "kill the step": it sends
 * SIGKILL to every rank, so a rank never gets to write its preemption checkpoint. Inside a batch
 * job the signal for "time is nearly up" often goes to the batch shell alone (#SBATCH
 * --signal=B:TERM@120, scancel --batch), which is lockstep-run when the script execs it. So
 * lockstep-run does not exec srun there: it starts it, waits for it, and passes SIGTERM and SIGINT
 * to the ranks through Slurm (scancel --signal=SIG JOBID, which signals the job's steps and not the
 * batch shell), where the ranks checkpoint and exit 143 or 130.
 *
 * With --max-restarts: mpirun, srun or the program itself runs as a child so that lockstep-run can
 * start it again when it fails; SIGTERM and SIGINT sent to lockstep-run are passed on to it.
 *
 * mpirun always runs as a child: Open MPI's mpirun takes a second SIGTERM or SIGINT as "abort now"
 * and exits without stopping its ranks, which then train on unseen (timeout(1) sends its signal
 * twice: to its child and to its process group). lockstep-run passes it one. */
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

/* Passes sig to the job's steps with scancel; falls back to signalling srun itself. */
static void forward(int sig, const char *job_id, pid_t srun) {
    const char *name = sigabbrev_np(sig) ? sigabbrev_np(sig) : "TERM";
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
        fprintf(stderr, "lockstep-run: SIG%s: passed to the ranks (scancel --signal=%s %s)\n", name, name, job_id);
        return;
    }
    out[strcspn(out, "\n")] = '\0';
    fprintf(stderr, "lockstep-run: SIG%s: scancel --signal=%s %s %s%s%s; signalling srun instead\n", name, name, job_id,
            rc < 0 ? "could not run" : "failed", *out ? ": " : "", out);
    kill(srun, sig);
}

void lsr_signals_block(lsr_signals *s, int job) {
    sigemptyset(&s->set);
    sigaddset(&s->set, SIGTERM);
    sigaddset(&s->set, SIGINT);
    sigaddset(&s->set, SIGCHLD);
    if (!job) { /* srun inside a job keeps what it had before --max-restarts: these kill lockstep-run */
        sigaddset(&s->set, SIGHUP);
        sigaddset(&s->set, SIGQUIT);
        sigaddset(&s->set, SIGUSR1);
        sigaddset(&s->set, SIGUSR2);
    }
    s->job = job;
    /* A SIGCHLD ignored by whoever started us would reap the child before we see its status. */
    signal(SIGCHLD, SIG_DFL);
    sigprocmask(SIG_BLOCK, &s->set, &s->old);
}

void lsr_signals_restore(const lsr_signals *s) { sigprocmask(SIG_SETMASK, &s->old, NULL); }

static int stop_signal(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT; }

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int lsr_run_child(const lsr_signals *sigs, const char *exe, char *const argv[], const char *job_id, int stop_once,
                  int *stopped) {
    *stopped = 0;
    double stop_at = -1; /* when the first stop signal was passed on */
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!job_id) {
            /* Its own process group: a terminal's Ctrl-C, or a kill of lockstep-run's group, reaches
             * lockstep-run alone, which passes it on once (a second SIGINT or SIGTERM stops a
             * lockstep program at once, without its checkpoint; mpirun takes a second as "abort
             * now"). A background group must not read the terminal: stdin from /dev/null then. */
            setpgid(0, 0);
            if (isatty(STDIN_FILENO)) {
                int fd = open("/dev/null", O_RDONLY);
                if (fd >= 0 && fd != STDIN_FILENO) {
                    dup2(fd, STDIN_FILENO);
                    close(fd);
                }
            }
            /* lockstep-run killed outright (SIGKILL, the OOM killer) must not leave the job
             * running unseen: the child gets SIGTERM then (mpirun passes it to the ranks). */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(128 + SIGTERM);
        }
        sigprocmask(SIG_SETMASK, &sigs->old, NULL);
        execv(exe, argv);
        fprintf(stderr, "lockstep-run: cannot run %s: %s\n", exe, strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (!job_id) setpgid(pid, pid); /* also here: no signal may find the child in our group */
    int st = 0;
    for (;;) {
        int sig = sigwaitinfo(&sigs->set, NULL);
        if (sig > 0 && sig != SIGCHLD) {
            if (stop_signal(sig)) {
                /* One stop, one signal passed on: the same stop often arrives twice (timeout(1) signals
                 * its child and then its process group; a kill of the process and of its group), and
                 * a second one stops a lockstep program without its checkpoint, and makes mpirun exit
                 * at once, leaving its ranks running unseen (they trained on, saving checkpoints). A
                 * repeat within a second is that duplicate; with stop_once (mpirun) any repeat is
                 * dropped: mpirun is already ending the ranks (it kills them odls_base_sigkill_timeout
                 * after the first). */
                const double now = mono_now();
                if (stop_at >= 0 && (stop_once || now - stop_at < 1.0)) {
                    if (now - stop_at >= 1.0)
                        fprintf(stderr,
                                "lockstep-run: SIG%s: not passed to mpirun, which is stopping the ranks since the "
                                "first signal (a second would make it exit and leave them running)\n",
                                sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
                    continue;
                }
                if (stop_at < 0) stop_at = now;
                *stopped = sig;
            }
            if (job_id)
                forward(sig, job_id, pid);
            else
                kill(pid, sig);
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
