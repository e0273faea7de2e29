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
 * start it again when it fails; SIGTERM and SIGINT sent to lockstep-run are passed on to it. */
#include <errno.h>
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
    const char *name = sig == SIGTERM ? "TERM" : "INT";
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

/* A terminal's Ctrl-C (or Ctrl-\) reaches the whole foreground process group, the child too: the
 * kernel sends it with si_code SI_KERNEL. Passing it on would signal the child twice (a second
 * SIGINT stops a lockstep program at once, without its checkpoint; mpirun takes a second one as
 * "abort now"). srun is the exception: on a terminal's SIGINT it only prints the job's state. */
static int from_terminal(const siginfo_t *si) { return si->si_code == SI_KERNEL; }

int lsr_run_child(const char *exe, char *const argv[], const char *job_id, int *stopped) {
    *stopped = 0;
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGCHLD);
    /* A SIGCHLD ignored by whoever started us would reap the child before we see its status. */
    signal(SIGCHLD, SIG_DFL);
    if (sigprocmask(SIG_BLOCK, &set, &old)) return -1;
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        /* lockstep-run killed outright (SIGKILL, the OOM killer) must not leave the job running
         * unseen: the child gets SIGTERM then (mpirun passes it to the ranks). */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(128 + SIGTERM);
        execv(exe, argv);
        fprintf(stderr, "lockstep-run: cannot run %s: %s\n", exe, strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st = 0;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int sig = sigwaitinfo(&set, &si);
        if (sig == SIGTERM || sig == SIGINT) {
            *stopped = sig;
            if (job_id)
                forward(sig, job_id, pid);
            else if (!from_terminal(&si))
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
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return 1;
}

int lsr_pause(double seconds) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    if (sigprocmask(SIG_BLOCK, &set, &old)) return 0;
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)seconds;
    end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    int sig = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left = (long long)(end.tv_sec - now.tv_sec) * 1000000000LL + (end.tv_nsec - now.tv_nsec);
        if (left <= 0) break;
        struct timespec ts = {(time_t)(left / 1000000000LL), (long)(left % 1000000000LL)};
        int r = sigtimedwait(&set, NULL, &ts);
        if (r == SIGTERM || r == SIGINT) {
            sig = r;
            break;
        }
        if (r < 0 && errno != EINTR && errno != EAGAIN) break;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return sig;
}
