/* probe.c: what lockstep-run learns about this machine without linking CUDA or MPI: the GPUs it
 * may use (NVIDIA device nodes or the driver's /proc entries, limited by CUDA_VISIBLE_DEVICES),
 * its logical CPUs and physical cores (affinity mask, sysfs topology), programs in PATH, and the
 * output of a short query command (Slurm's scontrol and srun). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

static int count_dir(const char *dir, int dev_nodes) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (dev_nodes) {
            /* nvidia0, nvidia1, ...; not nvidiactl, nvidia-uvm, nvidia-caps. */
            const char *s = e->d_name;
            if (strncmp(s, "nvidia", 6) != 0 || !s[6]) continue;
            int digits = 1;
            for (s += 6; *s; s++) digits &= isdigit((unsigned char)*s) != 0;
            if (!digits) continue;
        }
        n++;
    }
    closedir(d);
    return n;
}

/* Entries of CUDA_VISIBLE_DEVICES that CUDA would accept: it stops at the first invalid one. */
static int count_visible(const char *cvd) {
    int n = 0;
    const char *p = cvd;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && isspace((unsigned char)*p)) {
            p++;
            len--;
        }
        if (len == 0) break;
        int ok = !strncmp(p, "GPU-", 4) || !strncmp(p, "MIG-", 4);
        if (!ok) {
            ok = 1;
            for (size_t i = 0; i < len && ok; i++)
                ok = isdigit((unsigned char)p[i]) != 0 || (i > 0 && isspace((unsigned char)p[i]));
        }
        if (!ok) break;
        n++;
        if (!end) break;
        p = end + 1;
    }
    return n;
}

int lsr_count_gpus(const char **why) {
    /* Device nodes first: inside a container they show the GPUs it was given, while
     * /proc/driver/nvidia/gpus may list the host's. The driver creates them lazily on some hosts,
     * so fall back to /proc. */
    int n = count_dir("/dev", 1);
    const char *src = "/dev/nvidia*";
    if (n == 0) {
        n = count_dir("/proc/driver/nvidia/gpus", 0);
        src = "/proc/driver/nvidia/gpus";
    }
    if (n == 0) {
        *why = "no NVIDIA GPU found (no /dev/nvidia<N>, no /proc/driver/nvidia/gpus)";
        return 0;
    }
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (cvd) {
        int v = count_visible(cvd);
        if (v < n) n = v;
        *why = n ? "GPUs listed in CUDA_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES hides every GPU";
        return n;
    }
    *why = src;
    return n;
}

int lsr_count_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static int read_int_file(const char *path, long *out) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fscanf(f, "%ld", out) == 1;
    fclose(f);
    return ok ? 0 : -1;
}

int lsr_count_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return lsr_count_cpus();
    /* Distinct (package, core) pairs among the CPUs we may run on. */
    long seen[CPU_SETSIZE][2];
    int nseen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        long pkg = 0, core = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if (read_int_file(path, &pkg)) return lsr_count_cpus();
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        if (read_int_file(path, &core)) return lsr_count_cpus();
        int dup = 0;
        for (int i = 0; i < nseen && !dup; i++) dup = seen[i][0] == pkg && seen[i][1] == core;
        if (!dup) {
            seen[nseen][0] = pkg;
            seen[nseen][1] = core;
            nseen++;
        }
    }
    return nseen > 0 ? nseen : lsr_count_cpus();
}

/* 0, ENOENT, ENOEXEC (there, but no executable regular file), or stat's errno (EACCES: a
 * directory on the path this user may not search; root was never refused one) */
static int check_exec(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT || errno == ENOTDIR ? ENOENT : errno;
    if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0) return ENOEXEC;
    return 0;
}

int lsr_find_program(const char *name, char **out) {
    *out = NULL;
    if (!*name) return ENOENT;
    if (strchr(name, '/')) {
        int rc = check_exec(name);
        if (!rc) *out = strdup(name);
        return rc;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    int found_noexec = 0;
    const char *p = path;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        size_t need = len + strlen(name) + 3;
        char *cand = malloc(need);
        if (!cand) return ENOMEM;
        /* An empty PATH entry means the current directory, as for execvp. */
        snprintf(cand, need, "%.*s%s%s", (int)(len ? len : 1), len ? p : ".", "/", name);
        int rc = check_exec(cand);
        if (!rc) {
            *out = cand;
            return 0;
        }
        free(cand);
        found_noexec |= rc == ENOEXEC; /* a directory it may not search: as one without it */
        if (!end) break;
        p = end + 1;
    }
    return found_noexec ? ENOEXEC : ENOENT;
}

static long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

int lsr_capture(char *const argv[], char *buf, size_t cap, int timeout_ms) {
    if (cap) buf[0] = '\0';
    int fds[2];
    if (pipe2(fds, O_CLOEXEC)) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* out of lockstep-run's process group: a signal to that group (timeout(1) sends one after
         * the one to lockstep-run) must not kill the scancel that passes it on */
        setpgid(0, 0);
        int in = open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0) _exit(127);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    int timed_out = 0;
    long deadline = now_ms() + timeout_ms;
    for (;;) {
        long left = deadline - now_ms();
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        int r = left > 0 ? poll(&pfd, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            timed_out = 1;
            break;
        }
        char chunk[4096];
        ssize_t n = read(fds[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;                     /* end of output (or an error) */
        size_t room = cap ? cap - 1 - len : 0; /* the rest is read and dropped */
        size_t keep = (size_t)n < room ? (size_t)n : room;
        if (keep) {
            memcpy(buf + len, chunk, keep);
            len += keep;
            buf[len] = '\0';
        }
    }
    close(fds[0]);
    /* The output has ended: the command gets the rest of its time to exit. */
    int st = 0;
    pid_t w = 0;
    while (!timed_out && (w = waitpid(pid, &st, WNOHANG)) == 0) {
        if (now_ms() >= deadline) {
            timed_out = 1;
            break;
        }
        struct timespec ms = {0, 1000000L};
        nanosleep(&ms, NULL);
    }
    if (timed_out) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        return -1;
    }
    if (w < 0 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}
