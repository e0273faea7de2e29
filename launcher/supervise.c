/* supervise.c: lockstep-run as the parent of srun inside a Slurm job. srun treats a SIGTERM (or
 * SIGHUP) it receives as "kill the step": it sends SIGKILL to every rank, so a rank never gets to
 * write its preemption checkpoint. Inside a batch job the signal for "time is nearly up" often
 * goes to the batch shell alone (#SBATCH --signal=B:TERM@120, scancel --batch), which is
 * lockstep-run when the script execs it. So lockstep-run does not exec srun there: it starts it,
 * waits for it, and passes SIGTERM and SIGINT to the ranks through Slurm (scancel --signal=SIG
 * JOBID, which signals the job's steps and not the batch shell), where the ranks checkpoint and
 * exit 143 or 130. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

int lsr_run_srun_in_job(char *const argv[], const char *job_id) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGCHLD);
    /* A SIGCHLD ignored by whoever started us would reap srun before we see its status. */
    signal(SIGCHLD, SIG_DFL);
    if (sigprocmask(SIG_BLOCK, &set, &old)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        execv(argv[0], argv);
        fprintf(stderr, "lockstep-run: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    int st = 0;
    for (;;) {
        int sig = sigwaitinfo(&set, NULL);
        if (sig == SIGTERM || sig == SIGINT) {
            forward(sig, job_id, pid);
            continue;
        }
        if (sig < 0 && errno != EINTR) { /* no signals to wait for: wait for srun alone */
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
