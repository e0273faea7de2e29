/* lockstep_run.c: lockstep-run, which starts one rank of a program per GPU. It picks a launcher
 * (the program itself for one rank, Open MPI's mpirun, or srun inside a Slurm job), builds the
 * launcher's argv as an array and execs it (inside a Slurm job it runs srun as its child instead,
 * to pass SIGTERM/SIGINT to the ranks: supervise.c): no shell runs in between, so the program's
 * arguments arrive verbatim. --dry-run prints that argv, shell-quoted, instead of running it.
 * Exit status: the program's (through mpirun/srun); 2 for usage errors; 126/127 when the program
 * is not executable / not found. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"

#ifndef LSR_VERSION
#define LSR_VERSION "unknown"
#endif

#define EXIT_USAGE 2
#define EXIT_NOEXEC 126
#define EXIT_NOTFOUND 127
#define MAX_RANKS 1000000
#define MAX_RESTARTS 1000
#define RESTART_DELAY_DEFAULT 3.0
#define ABORT_GRACE_DEFAULT 60.0

extern char **environ;

typedef enum lsr_launcher {
    LSR_AUTO = 0,
    LSR_DIRECT,
    LSR_MPIRUN,
    LSR_SRUN,
} lsr_launcher;

static const char *const launcher_names[] = {"auto", "direct", "mpirun", "srun"};

typedef struct lsr_opts {
    long np;                  /* 0: not given */
    const char *hostfile;     /* --hostfile */
    const char *hosts;        /* --hosts (several joined with ',', as mpirun's --host) */
    lsr_strvec hosts_joined;  /* owns the joined lists */
    lsr_launcher launcher;    /* --launcher / LOCKSTEP_LAUNCHER */
    const char *launcher_src; /* where launcher came from, for messages */
    int no_slurm;
    const char *mpirun;     /* --mpirun / LOCKSTEP_MPIRUN, NULL: search PATH */
    const char *mpirun_src; /* "--mpirun" or "LOCKSTEP_MPIRUN" */
    lsr_strvec mca;         /* KEY, VALUE, KEY, VALUE, ... */
    const char *bind;       /* NULL: default */
    const char *srun_mpi;   /* --srun-mpi: NULL, "auto", "site" or a type for srun --mpi */
    int oversubscribe;
    lsr_strvec xvars; /* -x NAME or NAME=VALUE, as given */
    int dry_run;
    int verbose;
    long max_restarts;    /* --max-restarts: 0, run once */
    double restart_delay; /* --restart-delay, seconds */
    int restart_delay_given;
    double abort_grace; /* --abort-grace, seconds */
    int abort_grace_given;
    char **prog; /* program and its arguments, NULL-terminated */
} lsr_opts;

/* Variables forwarded to every rank when set: prefixes and exact names. */
static const char *const fwd_prefixes[] = {"LOCKSTEP_", "NCCL_", "OMP_", "OPENBLAS_", "MKL_"};
static const char *const fwd_names[] = {"CUDA_VISIBLE_DEVICES", "GOTO_NUM_THREADS"};
/* Any of these set by the user means "I chose the thread count". */
static const char *const thread_vars[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                          "GOTO_NUM_THREADS"};

static void usage(FILE *f) {
    fprintf(f, "Usage: lockstep-run [options] [--] program [args...]\n"
               "Start one rank of program per GPU: through mpirun (Open MPI), through srun inside a\n"
               "Slurm job, or, for a single rank, by running program directly. The command is built as\n"
               "an argument vector with no shell in between: arguments reach program verbatim (but\n"
               "mpirun takes a lone ':' for its separator between programs: refused with mpirun).\n"
               "\n"
               "Options:\n"
               "  -n, --np N           ranks to start (default: one per GPU this host may use; 1 on a\n"
               "                       host without GPUs; the sum of slots with --hostfile/--hosts; the\n"
               "                       job's SLURM_NTASKS under Slurm)\n"
               "      --hostfile FILE  Open MPI hostfile: 'host [slots=N] [max_slots=N] [username=U]' per\n"
               "                       line, '#' comments; checked before mpirun starts (a host's slots=\n"
               "                       on one line only, this machine's names being one host; a bare\n"
               "                       repeat adds a slot; max_slots= caps a line without slots=)\n"
               "  -H, --hosts LIST     hosts as host[:slots],... e.g. node1:4,node2:4 (slots default 1;\n"
               "                       --host and -H, as in mpirun, are the same option; given twice,\n"
               "                       both lists)\n"
               "      --launcher L     auto (default), mpirun, srun or direct (run program itself;\n"
               "                       one rank only). auto: mpirun with hosts; srun when\n"
               "                       SLURM_JOB_ID is set and srun is in PATH; direct for one rank;\n"
               "                       mpirun otherwise\n"
               "      --no-slurm       ignore a Slurm job (auto never picks srun)\n"
               "      --mpirun PATH    mpirun to use (default: mpirun in PATH)\n"
               "      --mca KEY VALUE  pass an Open MPI MCA parameter to mpirun (repeatable; also\n"
               "                       --mca KEY=VALUE), e.g. --mca btl_tcp_if_include 10.0.0.0/24;\n"
               "                       with srun or direct: sets OMPI_MCA_KEY=VALUE instead\n"
               "      --srun-mpi TYPE  how srun starts the MPI ranks: auto (default), site, or a type\n"
               "                       for srun's --mpi (pmix, pmi2, ...). auto adds nothing when\n"
               "                       SLURM_MPI_TYPE is set or the cluster's MpiDefault (scontrol\n"
               "                       show config) is not none, else --mpi=pmix (or pmi2) as\n"
               "                       'srun --mpi=list' offers it: without one, Open MPI's ranks\n"
               "                       cannot start under srun. site: never add --mpi\n"
               "      --bind WHAT      none, core or socket: CPU binding of each rank (mpirun default\n"
               "                       none, so a rank's BLAS threads are not confined to one core;\n"
               "                       srun: the site's default unless given)\n"
               "      --oversubscribe  allow more ranks than slots/cores (added by itself for a\n"
               "                       single-host mpirun run with more ranks than cores)\n"
               "      --max-restarts N start the whole job again, up to N times, when it fails (default\n"
               "                       0): for a program that resumes from its checkpoints, such as\n"
               "                       fashion_mlp --save-every 100 --resume auto. Each run's ranks get\n"
               "                       LOCKSTEP_RESTART_COUNT (0, 1, ...). Not restarted: exit status 0,\n"
               "                       2 (usage), 126/127 (cannot run), 130/143 (stopped after a\n"
               "                       checkpoint), mpirun's 131/132 (it could not start the program;\n"
               "                       also a rank killed by SIGQUIT/SIGILL), or after a stop signal\n"
               "                       to lockstep-run\n"
               "      --restart-delay S seconds between a failure and the restart (default 3)\n"
               "      --abort-grace S  mpirun: seconds its abort may take once a rank on this host has\n"
               "                       aborted the job (a lockstep program's error, such as a\n"
               "                       collective past LOCKSTEP_COMM_TIMEOUT) before the job is killed\n"
               "                       (default 60): mpirun waits for ever on a host that hangs\n"
               "                       (processes stopped or frozen, still on the network); killed,\n"
               "                       the job counts as failed for --max-restarts. Also the time\n"
               "                       mpirun has to end the job after a second stop signal once\n"
               "                       the ranks on this host have ended\n"
               "  -x NAME[=VALUE]      also forward variable NAME to every rank (repeatable), with\n"
               "                       VALUE: set it to VALUE first\n"
               "      --dry-run        print the command, shell-quoted on one line, and exit 0\n"
               "  -v, --verbose        say what was detected and decided, and print the command\n"
               "  -h, --help           print this help and exit\n"
               "      --version        print the version and exit\n"
               "\n"
               "Forwarded to every rank when set: LOCKSTEP_*, NCCL_*, OMP_*, OPENBLAS_*, MKL_*,\n"
               "GOTO_NUM_THREADS, CUDA_VISIBLE_DEVICES (mpirun: -x NAME; srun: --export=ALL).\n"
               "When lockstep-run's stderr is a terminal, the ranks get LOCKSTEP_STDERR_TTY=1 (theirs is\n"
               "a pipe): the examples then show their progress line, as without a launcher (not\n"
               "where a rank's stderr is redirected to a file).\n"
               "Threads: when several ranks share a host and none of OMP_NUM_THREADS,\n"
               "OPENBLAS_NUM_THREADS, MKL_NUM_THREADS, GOTO_NUM_THREADS is set, each rank gets\n"
               "OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=max(1, CPUs / ranks on the host): one BLAS thread\n"
               "each when ranks share cores.\n"
               "As root, mpirun gets --allow-run-as-root.\n"
               "With --hostfile/--hosts, mpirun gets --mca oob_tcp_keepalive_time 60,\n"
               "oob_tcp_keepalive_intvl 10 and oob_tcp_keepalive_probes 6 unless set (--mca,\n"
               "OMPI_MCA_*, or an Open MPI parameter file): a host lost from the network ends the job\n"
               "in about 2 minutes (Open MPI's defaults: 8).\n"
               "GPUs are counted without CUDA: /dev/nvidia<N> (else /proc/driver/nvidia/gpus), limited\n"
               "by CUDA_VISIBLE_DEVICES when set (an empty value hides every GPU).\n"
               "Inside a Slurm job srun runs as a child of lockstep-run: a SIGTERM or SIGINT sent to\n"
               "lockstep-run (#SBATCH --signal=B:TERM@120, scancel --batch --signal=TERM, Ctrl-C) is\n"
               "passed to the ranks with 'scancel --signal=SIG $SLURM_JOB_ID', so they can checkpoint;\n"
               "srun itself would kill them at once on SIGTERM. SIGHUP and SIGQUIT go the same way as\n"
               "SIGTERM, SIGUSR1 and SIGUSR2 as themselves.\n"
               "mpirun, srun, and with --max-restarts the program run directly, run as a child of\n"
               "lockstep-run in its own process group (stdin from /dev/null when it is a terminal;\n"
               "SIGTTOU ignored, so 'stty tostop' cannot stop it). lockstep-run passes SIGTERM, SIGINT,\n"
               "SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 on (a terminal's Ctrl-C too); Ctrl-Z (SIGTSTP)\n"
               "stops the job (mpirun passes it to the ranks) and then lockstep-run, and fg, bg or\n"
               "SIGCONT continues both. SIGTERM, SIGINT, SIGHUP and SIGQUIT are stop signals: a repeat\n"
               "within a second is the same stop sent twice (timeout(1) sends it to lockstep-run and to\n"
               "its process group) and is dropped; a later one is a second stop (a lockstep program\n"
               "then stops at once): passed on too, and the job is killed (SIGKILL to its processes) if\n"
               "it has not ended 3 s later (with mpirun: once the ranks on this host have ended, mpirun\n"
               "has --abort-grace more to end the job); a third stop kills it at once. With mpirun a\n"
               "stop goes to mpirun's ranks on this host, SIGINT as SIGINT and the others as SIGTERM,\n"
               "not to mpirun: signalled, mpirun kills its ranks 1 s later (odls_base_sigkill_timeout)\n"
               "and exits 1; a lockstep program's ranks on other hosts stop at the same step, and the\n"
               "ranks' status comes back (143, 130). Only while mpirun has no rank here does it get the\n"
               "signal (once: a second would make it exit and leave the ranks running), and its status\n"
               "1 becomes 128 + the signal; a stop after the ranks here have ended is not passed on\n"
               "(mpirun is ending the job). A stop reaches each rank's process group (the program\n"
               "started by a script around it too; without mpirun the program's group). lockstep-run\n"
               "ends when every process of the job has: one left running when mpirun (srun, the\n"
               "program) exits is waited for after a stop signal, else it gets SIGTERM, and SIGKILL 3 s\n"
               "later.\n"
               "With --max-restarts nothing is restarted after a stop signal; one during\n"
               "--restart-delay ends lockstep-run with 128 + the signal.\n"
               "--dry-run prints the command of one run (the first), the variables lockstep-run sets\n"
               "(LOCKSTEP_RESTART_COUNT=0, LOCKSTEP_STDERR_TTY=1) with their values: a shell that runs\n"
               "the line runs what lockstep-run would.\n"
               "\n"
               "Environment:\n"
               "  LOCKSTEP_MPIRUN      mpirun to use, as --mpirun (the flag wins)\n"
               "  LOCKSTEP_LAUNCHER    launcher, as --launcher (the flag wins)\n"
               "  LOCKSTEP_RESTART_COUNT  set for the ranks with --max-restarts: 0 on the first run, 1 on\n"
               "                       the first restart, ...\n"
               "  LOCKSTEP_RUN_PID     set for mpirun's ranks on this host: lockstep-run's process id,\n"
               "                       which a rank that aborts the job signals (see --abort-grace);\n"
               "                       -x refuses it\n"
               "  SLURM_JOB_ID         inside a Slurm job, auto uses srun; SLURM_NTASKS gives the\n"
               "                       default -n; SLURM_JOB_NUM_NODES the ranks per node (with\n"
               "                       the job's SLURM_NTASKS: the fullest node's count in\n"
               "                       SLURM_TASKS_PER_NODE, e.g. 4 of 4,1). Run\n"
               "                       lockstep-run once, not under srun: as a task of a step of\n"
               "                       several (SLURM_STEP_NUM_TASKS > 1) it refuses to start srun\n"
               "\n"
               "Exit status: the program's (mpirun and srun pass it on; 128 + N for a rank killed by\n"
               "signal N); 2 for a usage error (bad option, hostfile, -n, missing mpirun); 127 when\n"
               "program (or its #! interpreter) is not found, 126 when it is not executable or lies\n"
               "in a directory this user may not search, both checked before anything starts.\n"
               "mpirun itself exits 131 or 132 when it cannot start\n"
               "the program on a host (131: it could not execute it; 132: not found or not executable).\n"
               "1 when --help, --version or --dry-run cannot write their output (a full disk).\n"
               "\n"
               "Examples:\n"
               "  lockstep-run ./fashion_mlp --epochs 2             one rank per local GPU\n"
               "  lockstep-run -n 4 ./fashion_mlp                   4 CPU ranks on this host\n"
               "  lockstep-run --hosts a:8,b:8 ./fashion_mlp        16 ranks on two hosts\n"
               "  lockstep-run --dry-run -n 2 ./fashion_mlp         show the mpirun command\n"
               "  lockstep-run --max-restarts 3 -n 4 ./fashion_mlp --save-every 100 --resume auto\n"
               "                                                    start again from the last checkpoint\n"
               "                                                    after a crash, up to 3 times\n");
}

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("lockstep-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
    exit(EXIT_USAGE);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("lockstep-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\n", stderr);
    va_end(ap);
}

/* After --help, --version or --dry-run: 0 when standard output took it all, else 1 with a line
 * saying why (a full disk, a closed stdout), as coreutils do. */
static int stdout_status(void) {
    const int bad = fflush(stdout) != 0 || ferror(stdout);
    const int e = errno;
    if (!bad) return 0;
    note("cannot write to standard output: %s", e ? strerror(e) : "write error");
    return 1;
}

static int valid_env_name(const char *s, size_t len) {
    if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return 0;
    return 1;
}

static lsr_launcher parse_launcher(const char *s, const char *src) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, launcher_names[i])) return (lsr_launcher)i;
    die_usage("%s: unknown launcher '%s' (expected auto, mpirun, srun or direct)", src, s);
}

/* A plain decimal number of seconds from 0 to max: digits with at most one '.' (no sign, spaces,
 * exponent or hex). Returns 0, or -1 for anything else. */
static int parse_seconds(const char *arg, double max, double *out) {
    int digits = 0, dots = 0, ok = 1;
    for (const char *ch = arg; *ch && ok; ch++) {
        if (isdigit((unsigned char)*ch))
            digits++;
        else if (*ch == '.')
            ok = ++dots == 1;
        else
            ok = 0;
    }
    char *end = NULL;
    errno = 0;
    double d = ok && digits ? strtod(arg, &end) : -1;
    if (!ok || !digits || errno || *end || !(d >= 0 && d <= max)) return -1;
    *out = d;
    return 0;
}

static void parse_args(int argc, char **argv, lsr_opts *o) {
    enum {
        OPT_HOSTFILE = 256,
        OPT_HOSTS,
        OPT_LAUNCHER,
        OPT_NO_SLURM,
        OPT_MPIRUN,
        OPT_MCA,
        OPT_BIND,
        OPT_SRUN_MPI,
        OPT_OVERSUB,
        OPT_DRY_RUN,
        OPT_VERSION,
        OPT_MAX_RESTARTS,
        OPT_RESTART_DELAY,
        OPT_ABORT_GRACE,
    };
    static const struct option longopts[] = {
        {"np", required_argument, NULL, 'n'},
        {"hostfile", required_argument, NULL, OPT_HOSTFILE},
        {"hosts", required_argument, NULL, OPT_HOSTS},
        {"host", required_argument, NULL, OPT_HOSTS},
        {"launcher", required_argument, NULL, OPT_LAUNCHER},
        {"no-slurm", no_argument, NULL, OPT_NO_SLURM},
        {"mpirun", required_argument, NULL, OPT_MPIRUN},
        {"mca", required_argument, NULL, OPT_MCA},
        {"bind", required_argument, NULL, OPT_BIND},
        {"srun-mpi", required_argument, NULL, OPT_SRUN_MPI},
        {"oversubscribe", no_argument, NULL, OPT_OVERSUB},
        {"dry-run", no_argument, NULL, OPT_DRY_RUN},
        {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
        {"restart-delay", required_argument, NULL, OPT_RESTART_DELAY},
        {"abort-grace", required_argument, NULL, OPT_ABORT_GRACE},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    /* '+': stop at the program name, so its own options are left alone. */
    int li = -1;
    while ((c = getopt_long(argc, argv, "+:n:x:H:vh", longopts, &li)) != -1) {
        /* an empty value (an unset shell variable) is never what a flag wants */
        if (optarg && !*optarg && c != ':' && c != '?') {
            if (li >= 0)
                die_usage("--%s must not be empty", longopts[li].name);
            else
                die_usage("-%c must not be empty", c);
        }
        li = -1;
        switch (c) {
        case 'n':
            if (!strcmp(optarg, "p")) die_usage("mpirun's -np is -n N or --np N here");
            if (lsr_parse_int(optarg, 1, MAX_RANKS, &o->np))
                die_usage("-n/--np must be a whole number from 1 to %d, got '%s'", MAX_RANKS, optarg);
            break;
        case OPT_HOSTFILE:
            if (o->hostfile)
                die_usage("--hostfile given twice ('%s' and '%s'): give one file with all the hosts", o->hostfile,
                          optarg);
            o->hostfile = optarg;
            break;
        case 'H':
        case OPT_HOSTS: /* "--host a:2 --host b:2" is a:2,b:2 to mpirun */
            if (o->hosts) {
                lsr_strvec_pushf(&o->hosts_joined, "%s,%s", o->hosts, optarg);
                o->hosts = o->hosts_joined.v[o->hosts_joined.n - 1];
            } else {
                o->hosts = optarg;
            }
            break;
        case OPT_LAUNCHER:
            o->launcher = parse_launcher(optarg, "--launcher");
            o->launcher_src = "--launcher";
            break;
        case OPT_NO_SLURM: o->no_slurm = 1; break;
        case OPT_MPIRUN:
            o->mpirun = optarg;
            o->mpirun_src = "--mpirun";
            break;
        case OPT_MCA: {
            /* MCA parameter names are identifiers: they also become OMPI_MCA_<name> variables. */
            const char *eq = strchr(optarg, '=');
            size_t klen = eq ? (size_t)(eq - optarg) : strlen(optarg);
            int ok = klen > 0;
            for (size_t i = 0; i < klen && ok; i++) ok = isalnum((unsigned char)optarg[i]) || optarg[i] == '_';
            if (!ok) die_usage("--mca: '%.*s' is not an MCA parameter name", (int)klen, optarg);
            if (!eq && optind >= argc) die_usage("--mca needs a parameter name and a value: --mca KEY VALUE");
            if (!(eq ? eq[1] : argv[optind][0])) die_usage("--mca %.*s: the value is empty", (int)klen, optarg);
            lsr_strvec_pushf(&o->mca, "%.*s", (int)klen, optarg);
            lsr_strvec_push(&o->mca, eq ? eq + 1 : argv[optind++]);
            break;
        }
        case OPT_BIND:
            if (strcmp(optarg, "none") && strcmp(optarg, "core") && strcmp(optarg, "socket"))
                die_usage("--bind must be none, core or socket, got '%s'", optarg);
            o->bind = optarg;
            break;
        case OPT_SRUN_MPI: {
            /* srun's plugin names: letters, digits and '_' (pmix_v4, cray_shasta). */
            int ok = optarg[0] != '\0' && strlen(optarg) < 64;
            for (const char *ch = optarg; *ch && ok; ch++) ok = isalnum((unsigned char)*ch) || *ch == '_';
            if (!ok)
                die_usage("--srun-mpi must be auto, site or an MPI type of srun such as pmix or pmi2, "
                          "got '%s'",
                          optarg);
            o->srun_mpi = optarg;
            break;
        }
        case OPT_OVERSUB: o->oversubscribe = 1; break;
        case 'x': {
            const char *eq = strchr(optarg, '=');
            size_t len = eq ? (size_t)(eq - optarg) : strlen(optarg);
            if (!valid_env_name(optarg, len))
                die_usage("-x: '%s' is not NAME or NAME=VALUE with a valid variable name", optarg);
            lsr_strvec_push(&o->xvars, optarg);
            break;
        }
        case OPT_DRY_RUN: o->dry_run = 1; break;
        case OPT_MAX_RESTARTS:
            if (lsr_parse_int(optarg, 0, MAX_RESTARTS, &o->max_restarts))
                die_usage("--max-restarts must be an integer from 0 to %d, got '%s'", MAX_RESTARTS, optarg);
            break;
        case OPT_RESTART_DELAY:
            if (parse_seconds(optarg, 3600, &o->restart_delay))
                die_usage("--restart-delay must be a number of seconds from 0 to 3600, got '%s'", optarg);
            o->restart_delay_given = 1;
            break;
        case OPT_ABORT_GRACE:
            if (parse_seconds(optarg, 3600, &o->abort_grace))
                die_usage("--abort-grace must be a number of seconds from 0 to 3600, got '%s'", optarg);
            o->abort_grace_given = 1;
            break;
        case 'v': o->verbose = 1; break;
        case 'h': usage(stdout); exit(stdout_status());
        case OPT_VERSION: printf("lockstep-run %s\n", LSR_VERSION); exit(stdout_status());
        case ':':
            if (optopt && optopt < 256) die_usage("option '-%c' needs a value (see lockstep-run --help)", optopt);
            die_usage("option '%s' needs a value (see lockstep-run --help)", argv[optind - 1]);
        default:
            if (optopt && optopt < 256) die_usage("unknown option '-%c' (see lockstep-run --help)", optopt);
            die_usage("unknown or ambiguous option '%s' (see lockstep-run --help)", argv[optind - 1]);
        }
    }
    if (optind >= argc) {
        /* "--mca btl ./prog": the value forgotten, the program taken for it */
        const char *last = o->mca.n ? o->mca.v[o->mca.n - 1] : NULL;
        if (last && strchr(last, '/') && access(last, X_OK) == 0)
            die_usage("no program given: --mca %s took '%s' as its value (--mca KEY VALUE, or --mca KEY=VALUE)",
                      o->mca.v[o->mca.n - 2], last);
        die_usage("no program given (usage: lockstep-run [options] [--] program [args...]; "
                  "see --help)");
    }
    o->prog = argv + optind;
    if (o->max_restarts > 0)
        for (size_t i = 0; i < o->xvars.n; i++)
            if (!strncmp(o->xvars.v[i], "LOCKSTEP_RESTART_COUNT", 22) &&
                (o->xvars.v[i][22] == '\0' || o->xvars.v[i][22] == '='))
                die_usage("-x %s: --max-restarts sets LOCKSTEP_RESTART_COUNT itself (the run's number)", o->xvars.v[i]);
    /* a rank that aborts the job signals that process id: forwarded (to other hosts too) or set, it
     * named another process, and the job was not killed --abort-grace seconds after an abort */
    for (size_t i = 0; i < o->xvars.n; i++)
        if (!strncmp(o->xvars.v[i], "LOCKSTEP_RUN_PID", 16) && (o->xvars.v[i][16] == '\0' || o->xvars.v[i][16] == '='))
            die_usage("-x %s: lockstep-run sets LOCKSTEP_RUN_PID itself (its process id, for mpirun's ranks on this "
                      "host)",
                      o->xvars.v[i]);
    if (o->restart_delay_given && o->max_restarts == 0) note("--restart-delay has no effect without --max-restarts");
}

/* ---- shell quoting, for --dry-run and --verbose only ---------------------------------------- */

static int shell_safe(const char *s, int command_word) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (isalnum(c) || strchr("_@%+:,./-", c)) continue;
        if (c == '=' && !command_word) continue;
        return 0;
    }
    return 1;
}

static void print_quoted(FILE *f, const char *s, int command_word) {
    if (shell_safe(s, command_word)) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (const char *p = s; *p; p++) {
        if (*p == '\'')
            fputs("'\\''", f);
        else
            fputc(*p, f);
    }
    fputc('\'', f);
}

/* env: NAME=VALUE assignments for the command's environment, printed as a prefix. */
static void print_command(FILE *f, const lsr_strvec *env, char *const *argv) {
    int first = 1;
    for (size_t i = 0; i < env->n; i++) {
        const char *eq = strchr(env->v[i], '=');
        fprintf(f, "%s%.*s=", first ? "" : " ", (int)(eq - env->v[i]), env->v[i]);
        if (eq[1])
            print_quoted(f, eq + 1, 0);
        else
            fputs("''", f);
        first = 0;
    }
    for (size_t i = 0; argv[i]; i++) {
        if (!first) fputc(' ', f);
        print_quoted(f, argv[i], i == 0);
        first = 0;
    }
    fputc('\n', f);
}

/* Why a program lsr_find_program could not look at (not ENOENT, ENOEXEC) cannot be run, into buf:
 * stat's error, and for EACCES which part of the path it is (the file itself is looked at, not
 * opened: only a directory on the way refuses a stat; root's never did). */
static const char *unreachable(int rc, char *buf, size_t len) {
    snprintf(buf, len, "%s%s", strerror(rc),
             rc == EACCES ? " (a directory on its path may not be searched by this user)" : "");
    return buf;
}

/* A script's #! interpreter must be there too: execve fails with ENOENT without one, and mpirun
 * then exits 131 ("bad interpreter"), which reads as 128 + SIGQUIT. Returns 0, or an error
 * as lsr_find_program's with the interpreter's path in interp, or EILSEQ for a #! line that ends
 * in "\r\n" (a script saved with Windows line endings: the kernel ends the interpreter's name,
 * or its argument, at a blank or the '\n' only, so '/bin/sh\r' is not found). */
static int check_interpreter(const char *path, char *interp, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* executable but not readable: execve alone can tell */
    char line[512];
    int rc = 0;
    if (fgets(line, sizeof line, f) && line[0] == '#' && line[1] == '!') {
        const size_t end = strcspn(line, "\n");
        if (end > 2 && line[end - 1] == '\r') {
            fclose(f);
            return EILSEQ;
        }
        const char *q = line + 2 + strspn(line + 2, " \t");
        size_t n = strcspn(q, " \t\n");
        if (n > 0 && n < len) {
            snprintf(interp, len, "%.*s", (int)n, q);
            char rel[272], *found = NULL; /* no PATH search: "#!name" is ./name */
            snprintf(rel, sizeof rel, "%s%s", strchr(interp, '/') ? "" : "./", interp);
            rc = lsr_find_program(rel, &found);
            free(found);
        }
    }
    fclose(f);
    return rc;
}

/* ---- the plan -------------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Names of the variables in the environment that ranks get, sorted. */
static void forwarded_env(lsr_strvec *out) {
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        size_t len = (size_t)(eq - *e);
        if (!valid_env_name(*e, len)) continue;
        int fwd = 0;
        for (size_t i = 0; i < sizeof fwd_prefixes / sizeof *fwd_prefixes && !fwd; i++)
            fwd = !strncmp(*e, fwd_prefixes[i], strlen(fwd_prefixes[i]));
        for (size_t i = 0; i < sizeof fwd_names / sizeof *fwd_names && !fwd; i++)
            fwd = len == strlen(fwd_names[i]) && !strncmp(*e, fwd_names[i], len);
        if (!fwd) continue;
        char name[256];
        if (len >= sizeof name) continue;
        memcpy(name, *e, len);
        name[len] = '\0';
        if (!lsr_strvec_contains(out, name)) lsr_strvec_push(out, name);
    }
    if (out->n) qsort(out->v, out->n, sizeof *out->v, cmp_str);
}

static int user_set_threads(const lsr_opts *o) {
    for (size_t i = 0; i < sizeof thread_vars / sizeof *thread_vars; i++) {
        const char *v = getenv(thread_vars[i]);
        if (v && *v) return 1;
        size_t len = strlen(thread_vars[i]);
        for (size_t j = 0; j < o->xvars.n; j++)
            if (!strncmp(o->xvars.v[j], thread_vars[i], len) && o->xvars.v[j][len] == '=') return 1;
    }
    return 0;
}

static long env_long(const char *name, long dflt) {
    const char *v = getenv(name);
    long out = 0;
    if (v && !lsr_parse_int(v, 1, MAX_RANKS, &out)) return out;
    return dflt;
}

static long slurm_nodes(void) { return env_long("SLURM_JOB_NUM_NODES", env_long("SLURM_NNODES", 1)); }

/* The most tasks on one node in Slurm's compressed list (SLURM_TASKS_PER_NODE: "4,1", "2(x3),1");
 * 0 when it is not set or does not parse. */
static long slurm_most_tasks_per_node(void) {
    const char *p = getenv("SLURM_TASKS_PER_NODE");
    long most = 0;
    if (!p || !*p) return 0;
    while (*p) {
        char *end = NULL;
        errno = 0;
        long n = strtol(p, &end, 10);
        if (end == p || errno || n < 0 || n > MAX_RANKS) return 0;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') return 0;
            long rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep < 1) return 0;
            p = end + 1;
        }
        if (n > most) most = n;
        if (*p == ',' && p[1])
            p++;
        else if (*p)
            return 0;
    }
    return most;
}

/* What lockstep-run decided; built by plan_*() from the options and this machine. */
typedef struct lsr_plan {
    lsr_hostlist hosts; /* from --hostfile or --hosts; n == 0: this host only */
    int hosts_from_file;
    lsr_launcher launcher; /* never LSR_AUTO once planned */
    const char *launcher_why;
    long np;
    const char *np_why;
    long per_host; /* ranks on the busiest host */
    long threads;  /* OMP/OpenBLAS threads per rank to set; 0: leave alone */
    char *prog_path;
    char *mpirun_path;
    char *srun_path;
    char srun_mpi[64]; /* srun --mpi=<this>; empty: no --mpi */
} lsr_plan;

static void plan_free(lsr_plan *p) {
    lsr_hostlist_free(&p->hosts);
    free(p->prog_path);
    free(p->mpirun_path);
    free(p->srun_path);
}

static void plan_hosts(const lsr_opts *o, lsr_plan *p) {
    char err[LSR_ERRLEN];
    if (o->hostfile && o->hosts) die_usage("--hostfile and --hosts are alternatives; give one");
    if (o->hostfile) {
        if (lsr_hostfile_parse(o->hostfile, &p->hosts, err, sizeof err)) die_usage("%s", err);
        p->hosts_from_file = 1;
    } else if (o->hosts && lsr_hosts_parse(o->hosts, &p->hosts, err, sizeof err)) {
        die_usage("%s", err);
    }
}

/* srun when asked, or by default inside a Slurm job without explicit hosts. */
static void plan_srun(const lsr_opts *o, lsr_plan *p) {
    const char *job = getenv("SLURM_JOB_ID");
    int in_slurm = job && *job && !o->no_slurm;
    p->launcher = o->launcher;
    p->launcher_why = o->launcher_src;
    if (p->launcher != LSR_SRUN && !(p->launcher == LSR_AUTO && in_slurm && !p->hosts.n)) return;
    if (lsr_find_program("srun", &p->srun_path)) {
        if (p->launcher == LSR_SRUN) die_usage("%s srun: srun was not found in PATH", o->launcher_src);
        if (o->verbose) note("SLURM_JOB_ID is set but srun is not in PATH; not using srun");
        return;
    }
    if (p->launcher == LSR_AUTO) {
        p->launcher = LSR_SRUN;
        p->launcher_why = "inside a Slurm job";
    }
    /* Started by srun as one of several tasks (srun -n 4 lockstep-run ...): every task would start
     * an srun of its own, a step that waits for the CPUs the tasks hold ("Requested nodes are
     * busy") for ever, or starts as many copies of the job as there are tasks. */
    const char *step = getenv("SLURM_STEP_ID");
    long step_tasks = env_long("SLURM_STEP_NUM_TASKS", 0);
    if (step && *step && step_tasks > 1)
        die_usage("started by srun as one of %ld tasks of Slurm step %s.%s (srun -n %ld lockstep-run?): each would "
                  "start its own srun, which waits for ever for the CPUs those tasks hold; run lockstep-run once, in "
                  "the batch script or the salloc shell (it starts srun itself)",
                  step_tasks, job, step, step_tasks);
    if (p->hosts.n)
        die_usage("--hostfile/--hosts cannot be used with srun (Slurm places ranks); use "
                  "--launcher mpirun or drop them");
}

/* The next line of text after line, or NULL at the end. */
static const char *next_line(const char *line) {
    const char *nl = strchr(line, '\n');
    return nl && nl[1] ? nl + 1 : NULL;
}

/* The value of "KEY = value" in scontrol show config's output; 0 when found. */
static int config_value(const char *text, const char *key, char *out, size_t cap) {
    size_t klen = strlen(key);
    for (const char *line = *text ? text : NULL; line; line = next_line(line)) {
        if (strncmp(line, key, klen) || (line[klen] != ' ' && line[klen] != '=')) continue;
        const char *v = line + klen + strspn(line + klen, " ");
        if (*v++ != '=') continue;
        v += strspn(v, " ");
        size_t n = strcspn(v, " \r\n");
        if (n == 0 || n >= cap) return -1;
        memcpy(out, v, n);
        out[n] = '\0';
        return 0;
    }
    return -1;
}

/* Whether srun --mpi=list's output offers type: a line that is the type (or a version of it,
 * pmix_v4) alone after blanks and, from older Slurm, an "srun: " prefix. */
static int mpi_list_has(const char *text, const char *type) {
    size_t tlen = strlen(type);
    for (const char *line = *text ? text : NULL; line; line = next_line(line)) {
        const char *t = line;
        if (!strncmp(t, "srun: ", 6)) t += 6;
        t += strspn(t, " \t");
        if (strncmp(t, type, tlen)) continue;
        const char *e = t + tlen;
        if (!strncmp(e, "_v", 2) && isdigit((unsigned char)e[2])) e += 2 + strspn(e + 2, "0123456789");
        if (*e == '\n' || *e == '\r' || *e == '\0' || *e == ' ') return 1;
    }
    return 0;
}

/* Ranks that srun starts find each other through a PMI server in srun (PMIx or PMI-2); with
 * Slurm's own default, MpiDefault=none, there is none and every Open MPI rank fails in MPI_Init.
 * p->srun_mpi: the user's --srun-mpi; else nothing where SLURM_MPI_TYPE or the cluster chose;
 * else pmix (or pmi2) when this srun offers it. */
static void plan_srun_mpi(const lsr_opts *o, lsr_plan *p) {
    p->srun_mpi[0] = '\0';
    if (p->launcher != LSR_SRUN) return;
    if (o->srun_mpi && strcmp(o->srun_mpi, "auto")) {
        if (strcmp(o->srun_mpi, "site")) snprintf(p->srun_mpi, sizeof p->srun_mpi, "%s", o->srun_mpi);
        return;
    }
    const char *env = getenv("SLURM_MPI_TYPE");
    if (env && *env) {
        if (o->verbose) note("srun: SLURM_MPI_TYPE=%s chooses the MPI type; not adding --mpi", env);
        return;
    }
    char text[16384], site[64] = "";
    char *scontrol = NULL;
    if (!lsr_find_program("scontrol", &scontrol)) {
        char *argv[] = {scontrol, "show", "config", NULL};
        if (lsr_capture(argv, text, sizeof text, 10000) != 0 || config_value(text, "MpiDefault", site, sizeof site))
            site[0] = '\0';
        free(scontrol);
    }
    if (site[0] && strcmp(site, "none")) {
        if (o->verbose) note("srun: the cluster's MpiDefault is %s; not adding --mpi", site);
        return;
    }
    const char *site_text = site[0] ? site : "unknown (scontrol show config did not say)";
    char *argv[] = {p->srun_path, "--mpi=list", NULL};
    int rc = lsr_capture(argv, text, sizeof text, 10000);
    const char *pick = rc != 0                      ? NULL
                       : mpi_list_has(text, "pmix") ? "pmix"
                       : mpi_list_has(text, "pmi2") ? "pmi2"
                                                    : NULL;
    if (pick) {
        snprintf(p->srun_mpi, sizeof p->srun_mpi, "%s", pick);
        if (o->verbose)
            note("srun: the cluster's MpiDefault is %s; srun offers %s: adding --mpi=%s", site_text, pick, pick);
        return;
    }
    note("srun offers neither pmix nor pmi2 (%s) and the cluster's MpiDefault is %s: MPI ranks may "
         "fail to start; pass --srun-mpi TYPE or set SLURM_MPI_TYPE",
         rc != 0 ? "'srun --mpi=list' failed" : "srun --mpi=list", site_text);
}

/* Whether hostfile entry i is a bare repeat ("host" alone) of a host whose first line gave slots=:
 * Open MPI adds one slot for it ("a slots=2" and "a": 3). */
static int bare_repeat_of_slots(const lsr_plan *p, size_t i) {
    const lsr_hostlist *h = &p->hosts;
    if (!p->hosts_from_file || h->v[i].slots || h->v[i].max_slots) return 0;
    for (size_t j = 0; j < i; j++)
        if (h->v[j].line == h->v[i].line) return h->v[j].slots > 0;
    return 0;
}

static void plan_np(const lsr_opts *o, lsr_plan *p) {
    const lsr_hostlist *h = &p->hosts;
    const char *gpu_why = "";
    int gpus = -1;
    p->np = o->np;
    p->np_why = "-n";
    if (p->np) {
        /* given */
    } else if (h->n) {
        /* Hosts without slots: one rank per GPU of this host (hosts assumed alike) for a hostfile
         * line (one for a bare repeat of a host given slots=), one for a --hosts entry without ":N"
         * (as Open MPI counts it). */
        for (size_t i = 0; i < h->n; i++) {
            if (h->v[i].slots) {
                p->np += h->v[i].slots;
            } else if (p->hosts_from_file && !bare_repeat_of_slots(p, i)) {
                if (gpus < 0) gpus = lsr_count_gpus(&gpu_why);
                p->np += gpus > 0 ? gpus : 1;
            } else {
                p->np += 1;
            }
        }
        p->np_why = "slots of the hosts";
        /* slots go to 1000000 each: their sum started a job -n could not ask for (-np 2000000) */
        if (p->np > MAX_RANKS)
            die_usage("the slots of the hosts in %s add up to %ld ranks, more than the %d -n allows; pass -n N",
                      o->hostfile ? o->hostfile : "--hosts", p->np, MAX_RANKS);
    } else if (p->launcher == LSR_SRUN && env_long("SLURM_NTASKS", 0) > 0) {
        p->np = env_long("SLURM_NTASKS", 1);
        p->np_why = "SLURM_NTASKS";
    } else {
        long nodes = p->launcher == LSR_SRUN ? slurm_nodes() : 1;
        gpus = lsr_count_gpus(&gpu_why);
        p->np_why = gpu_why;
        if (gpus > 0) {
            p->np = gpus * nodes;
        } else {
            p->np = nodes;
            note("%s: starting %ld rank%s on the CPU%s; pass -n N for more", gpu_why, p->np, p->np > 1 ? "s" : "",
                 nodes > 1 ? " (one per node)" : "");
        }
    }

    /* Open MPI: a hostfile line without slots gets the host's core count (unknown here, so no
     * check) unless it repeats a host given slots= (one more), a --hosts entry without ":N" one
     * slot. */
    /* A line with max_slots= and no slots= has at most max_slots slots. OMPI_MCA_rmaps_base_oversubscribe
     * allows more ranks, as --oversubscribe does. */
    long total = 0;
    int known = 1, capped = 0;
    for (size_t i = 0; i < h->n; i++) {
        const int cap = !h->v[i].slots && h->v[i].max_slots;
        total += h->v[i].slots ? h->v[i].slots : cap ? h->v[i].max_slots : 1;
        known &= h->v[i].slots > 0 || cap || !p->hosts_from_file || bare_repeat_of_slots(p, i);
        capped |= cap;
    }
    const char *env_oversub = getenv("OMPI_MCA_rmaps_base_oversubscribe");
    const int oversub =
        o->oversubscribe || (env_oversub && (!strcmp(env_oversub, "1") || !strcmp(env_oversub, "true")));
    if (h->n && known && !oversub && p->np > total)
        die_usage("-n %ld exceeds the %ld slot%s given by %s%s; add slots or pass --oversubscribe", p->np, total,
                  total == 1 ? "" : "s", o->hostfile ? o->hostfile : "--hosts",
                  capped ? " (max_slots= caps a line without slots=)" : "");
}

static void plan_launcher(const lsr_opts *o, lsr_plan *p) {
    if (p->launcher == LSR_AUTO) {
        p->launcher = p->hosts.n || p->np > 1 ? LSR_MPIRUN : LSR_DIRECT;
        p->launcher_why = p->hosts.n ? "hosts given" : p->np > 1 ? "several ranks" : "one rank";
    }
    if (p->launcher == LSR_DIRECT && (p->np > 1 || p->hosts.n))
        die_usage("%s direct runs one process on this host; -n %ld%s needs mpirun or srun", o->launcher_src, p->np,
                  p->hosts.n ? " on other hosts" : "");
    if (p->launcher != LSR_MPIRUN) return;
    /* mpirun splits its command line at every lone ':' (MPMD: "prog1 args : prog2 args"), the
     * program's arguments included, and has no way to quote one: the job would start other
     * programs with cut arguments */
    for (size_t i = 1; o->prog[i]; i++)
        if (!strcmp(o->prog[i], ":"))
            die_usage("argument %zu of %s is a lone ':', which mpirun reads as the separator between programs "
                      "(MPMD) and cannot pass on (it has no escape for it); write it another way (e.g. --opt=:), "
                      "or run one rank with --launcher direct",
                      i, o->prog[0]);
    if (o->mpirun) {
        int rc = lsr_find_program(o->mpirun, &p->mpirun_path);
        if (rc == ENOENT) die_usage("%s %s: no such program", o->mpirun_src, o->mpirun);
        if (rc == ENOEXEC) die_usage("%s %s: not an executable file", o->mpirun_src, o->mpirun);
        char why[256];
        if (rc) die_usage("%s %s: cannot be run: %s", o->mpirun_src, o->mpirun, unreachable(rc, why, sizeof why));
    } else if (lsr_find_program("mpirun", &p->mpirun_path)) {
        if (p->hosts.n)
            die_usage("%s needs mpirun, which was not found in PATH; install Open MPI "
                      "(openmpi-bin) or pass --mpirun PATH",
                      o->hostfile ? "--hostfile" : "--hosts");
        die_usage("-n %ld needs mpirun, which was not found in PATH; install Open MPI "
                  "(openmpi-bin) or pass --mpirun PATH",
                  p->np);
    }
}

/* Ranks on the busiest host, and the thread count that shares its CPUs among them. */
static void plan_threads(const lsr_opts *o, lsr_plan *p) {
    long np = p->np;
    p->per_host = np;
    if (p->launcher == LSR_MPIRUN && p->hosts.n) {
        /* Open MPI fills each host's slots in order; a host named twice ("a,a", or two lines) has
         * the slots of both (its ranks share its CPUs: counted apart, "a,a" set no thread count) */
        long max_slots = 1, n = 0;
        for (size_t i = 0; i < p->hosts.n; i++) {
            size_t first = 0;
            while (strcmp(p->hosts.v[first].name, p->hosts.v[i].name)) first++;
            if (first < i) continue; /* counted with its first entry */
            long s = 0;
            for (size_t j = i; j < p->hosts.n; j++) {
                if (strcmp(p->hosts.v[j].name, p->hosts.v[i].name)) continue;
                long sj = p->hosts.v[j].slots;
                s += sj ? sj : bare_repeat_of_slots(p, j) || !p->hosts_from_file ? 1 : lsr_count_cores();
            }
            if (s > max_slots) max_slots = s;
            n++;
        }
        long even = (np + n - 1) / n;
        p->per_host = np < max_slots ? np : max_slots;
        if (even > p->per_host) p->per_host = even;
    } else if (p->launcher == LSR_SRUN) {
        long nodes = slurm_nodes();
        p->per_host = (np + nodes - 1) / nodes;
        /* the job's tasks (srun places them as the job's list says): the fullest node's, where the
         * nodes' shares differ (sbatch -n 5 on nodes of 4 CPUs: 4,1) */
        long most = slurm_most_tasks_per_node();
        if (np == env_long("SLURM_NTASKS", 0) && most > p->per_host && most <= np) p->per_host = most;
    }
    if (p->per_host <= 1 || user_set_threads(o)) return;
    int cpus = lsr_count_cpus();
    p->threads = cpus / p->per_host;
    if (p->threads < 1) p->threads = 1;
    if (o->verbose)
        note("%ld ranks share %d CPU(s) per host: OMP_NUM_THREADS=OPENBLAS_NUM_THREADS=%ld", p->per_host, cpus,
             p->threads);
}

static void push_prog(lsr_strvec *cmd, const lsr_opts *o) {
    for (char **a = o->prog; *a; a++) lsr_strvec_push(cmd, *a);
}

/* With hosts, mpirun learns that a host's daemon is gone (a node or its network down) through TCP
 * keepalives on its connection to it: Open MPI's defaults notice after 300 s idle + 9 probes 20 s
 * apart, so the job (its ranks killed, or failed after LOCKSTEP_COMM_TIMEOUT) ended 8 minutes
 * later. lockstep-run asks for 60 s + 6 x 10 s (about 2 minutes: 123 s measured) unless the user
 * set the parameter (user_set_mca). Probes are answered by the peer's kernel: a busy
 * daemon never misses one. */
static const char *const lsr_keepalive[][2] = {
    {"oob_tcp_keepalive_time", "60"}, {"oob_tcp_keepalive_intvl", "10"}, {"oob_tcp_keepalive_probes", "6"}};

/* Whether an Open MPI parameter file ("name = value" lines, '#' comments) sets name. */
static int file_sets_mca(const char *path, const char *name) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[1024];
    int found = 0;
    const size_t len = strlen(name);
    while (!found && fgets(line, sizeof line, f)) {
        const char *q = line;
        while (*q == ' ' || *q == '\t') q++;
        if (strncmp(q, name, len) != 0) continue;
        q += len;
        while (*q == ' ' || *q == '\t') q++;
        found = *q == '=';
    }
    fclose(f);
    return found;
}

/* Whether the user set an MCA parameter: --mca, OMPI_MCA_<name>, or a parameter file Open MPI
 * reads (those of OMPI_MCA_mca_base_param_files, else ~/.openmpi/mca-params.conf and
 * openmpi-mca-params.conf in mpirun's installation's etc/ or Debian's /etc/openmpi). */
static int user_set_mca(const lsr_opts *o, const lsr_plan *p, const char *name) {
    for (size_t i = 0; i + 1 < o->mca.n; i += 2)
        if (!strcmp(o->mca.v[i], name)) return 1;
    char var[96];
    snprintf(var, sizeof var, "OMPI_MCA_%s", name);
    if (getenv(var) != NULL) return 1;
    char path[4096];
    const char *files = getenv("OMPI_MCA_mca_base_param_files");
    if (files && *files) {
        for (const char *f = files; *f;) {
            size_t n = strcspn(f, ":");
            if (n > 0 && n < sizeof path) {
                snprintf(path, sizeof path, "%.*s", (int)n, f);
                if (file_sets_mca(path, name)) return 1;
            }
            f += n;
            if (*f == ':') f++;
        }
        return 0;
    }
    const char *home = getenv("HOME");
    if (home && *home) {
        snprintf(path, sizeof path, "%s/.openmpi/mca-params.conf", home);
        if (file_sets_mca(path, name)) return 1;
    }
    if (p->mpirun_path) { /* <prefix>/bin/mpirun -> <prefix>/etc/openmpi-mca-params.conf */
        snprintf(path, sizeof path, "%s", p->mpirun_path);
        char *slash = strrchr(path, '/');
        if (slash) *slash = '\0';
        slash = strrchr(path, '/');
        if (slash) {
            *slash = '\0';
            size_t used = strlen(path);
            snprintf(path + used, sizeof path - used, "/etc/openmpi-mca-params.conf");
            if (file_sets_mca(path, name)) return 1;
        }
    }
    return file_sets_mca("/etc/openmpi/openmpi-mca-params.conf", name);
}

/* Open MPI 4's mpirun turns the node names into a regular expression for its daemons and stops on
 * a name with anything but letters, digits, '-' and '.' ("the regex parser has detected the
 * presence of an illegal character", after lockstep-run had started it): '_', the ':' of an IPv6
 * address, and in --host a user name ("user@host", which a hostfile takes). Its regx component
 * naive (--mca regx naive) has no such rule. */
/* Open MPI's major version from mpirun --version ("mpirun (Open MPI) 4.1.4"), or -1 (another MPI,
 * or it could not be asked). */
static int open_mpi_major(const lsr_plan *p) {
    char text[4096];
    char *argv[] = {p->mpirun_path, "--version", NULL};
    if (!p->mpirun_path || lsr_capture(argv, text, sizeof text, 10000) != 0) return -1;
    const char *v = strstr(text, "(Open MPI) ");
    return v && isdigit((unsigned char)v[11]) ? atoi(v + 11) : -1;
}

static void plan_host_names(const lsr_opts *o, const lsr_plan *p) {
    if (p->launcher != LSR_MPIRUN || !p->hosts.n || user_set_mca(o, p, "regx")) return;
    int major = 0; /* 0: not asked yet */
    for (size_t i = 0; i < p->hosts.n; i++) {
        const char *name = p->hosts.v[i].name;
        const char *bad = strpbrk(name, p->hosts_from_file ? "_:" : "_:@");
        if (!bad) continue;
        /* the rule is that of Open MPI 3 and 4 (their regx framework): another mpirun (Open MPI 5's
         * PRRTE, MPICH) is left to judge the names itself */
        if (!major) major = open_mpi_major(p);
        if (major != 3 && major != 4) {
            if (o->verbose)
                note("host '%s' has a '%c', which Open MPI 3 and 4 refuse; %s is not one of them: passed on", name,
                     *bad, p->mpirun_path);
            continue;
        }
        char where[LSR_ERRLEN];
        if (p->hosts_from_file)
            snprintf(where, sizeof where, "%s:%d", o->hostfile, p->hosts.v[i].line);
        else
            snprintf(where, sizeof where, "--hosts");
        if (*bad == '@')
            die_usage("%s: '%s': Open MPI's mpirun refuses '@' in a --host name (\"illegal character\"); a user name "
                      "goes in a hostfile ('user@host' or 'host username=user'), or pass --mca regx naive",
                      where, name);
        die_usage("%s: '%s': Open MPI's mpirun refuses '%c' in a host name (\"illegal character\"%s); give another "
                  "name of that host (letters, digits, '-' and '.') or its IPv4 address, or pass --mca regx naive",
                  where, name, *bad, *bad == ':' ? ": an IPv6 address" : "");
    }
}

/* mpirun -np N [--hostfile F | --host L] [--allow-run-as-root] [--oversubscribe] --bind-to B
 *        --map-by slot [--mca oob_tcp_keepalive_* V]... [--mca K V]... [-x NAME]... [-x NAME=VALUE]...
 *        program args... */
/* own: NAME=VALUE of the variables lockstep-run set itself (LOCKSTEP_RESTART_COUNT=0,
 * LOCKSTEP_STDERR_TTY=1): for --dry-run they are printed with their value (-x NAME=VALUE), as a
 * shell that runs the line does not have them; the real run forwards them by name (-x NAME: the
 * restart count changes from run to run). */
static void build_mpirun(const lsr_opts *o, const lsr_plan *p, const lsr_strvec *own, lsr_strvec *cmd) {
    lsr_strvec_push(cmd, p->mpirun_path);
    lsr_strvec_push(cmd, "-np");
    lsr_strvec_pushf(cmd, "%ld", p->np);
    if (o->hostfile) {
        lsr_strvec_push(cmd, "--hostfile");
        lsr_strvec_push(cmd, o->hostfile);
    } else if (o->hosts) {
        lsr_strvec_push(cmd, "--host");
        lsr_strvec_push(cmd, o->hosts);
    }
    if (geteuid() == 0) lsr_strvec_push(cmd, "--allow-run-as-root");
    /* Without hosts Open MPI offers one slot per core of this host. */
    int cores = p->hosts.n ? 0 : lsr_count_cores();
    const int oversub = o->oversubscribe || (!p->hosts.n && p->np > cores);
    if (oversub) {
        lsr_strvec_push(cmd, "--oversubscribe");
        if (o->verbose && !o->oversubscribe) note("%ld ranks on %d core(s): adding --oversubscribe", p->np, cores);
    }
    lsr_strvec_push(cmd, "--bind-to");
    /* more ranks than cores bound to cores (or sockets): mpirun refuses unless overload is allowed */
    if (oversub && o->bind && strcmp(o->bind, "none"))
        lsr_strvec_pushf(cmd, "%s:overload-allowed", o->bind);
    else
        lsr_strvec_push(cmd, o->bind ? o->bind : "none");
    lsr_strvec_push(cmd, "--map-by");
    lsr_strvec_push(cmd, "slot");
    for (size_t k = 0; p->hosts.n && k < sizeof lsr_keepalive / sizeof lsr_keepalive[0]; k++) {
        if (user_set_mca(o, p, lsr_keepalive[k][0])) continue;
        lsr_strvec_push(cmd, "--mca");
        lsr_strvec_push(cmd, lsr_keepalive[k][0]);
        lsr_strvec_push(cmd, lsr_keepalive[k][1]);
    }
    for (size_t i = 0; i + 1 < o->mca.n; i += 2) {
        lsr_strvec_push(cmd, "--mca");
        lsr_strvec_push(cmd, o->mca.v[i]);
        lsr_strvec_push(cmd, o->mca.v[i + 1]);
    }
    lsr_strvec names = {0};
    forwarded_env(&names);
    for (size_t i = 0; i < names.n; i++) {
        int dup = 0;
        size_t len = strlen(names.v[i]);
        for (size_t j = 0; j < o->xvars.n && !dup; j++)
            dup = !strncmp(o->xvars.v[j], names.v[i], len) && (o->xvars.v[j][len] == '=' || o->xvars.v[j][len] == '\0');
        if (!dup) {
            lsr_strvec_push(cmd, "-x");
            const char *set = NULL;
            for (size_t j = 0; own && j < own->n && !set; j++)
                if (!strncmp(own->v[j], names.v[i], len) && own->v[j][len] == '=') set = own->v[j];
            lsr_strvec_push(cmd, set ? set : names.v[i]);
        }
    }
    lsr_strvec_free(&names);
    for (size_t i = 0; i < o->xvars.n; i++) {
        lsr_strvec_push(cmd, "-x");
        lsr_strvec_push(cmd, o->xvars.v[i]);
    }
    if (p->threads) {
        lsr_strvec_push(cmd, "-x");
        lsr_strvec_pushf(cmd, "OMP_NUM_THREADS=%ld", p->threads);
        lsr_strvec_push(cmd, "-x");
        lsr_strvec_pushf(cmd, "OPENBLAS_NUM_THREADS=%ld", p->threads);
    }
    push_prog(cmd, o);
}

/* Without mpirun, -x NAME=VALUE, --mca and the thread rule become variables of the environment
 * the ranks inherit (srun --export=ALL forwards it; Open MPI reads OMPI_MCA_<name>). */
static void build_env(const lsr_opts *o, const lsr_plan *p, lsr_strvec *env) {
    for (size_t i = 0; i < o->xvars.n; i++)
        if (strchr(o->xvars.v[i], '=')) lsr_strvec_push(env, o->xvars.v[i]);
    for (size_t i = 0; i + 1 < o->mca.n; i += 2) lsr_strvec_pushf(env, "OMPI_MCA_%s=%s", o->mca.v[i], o->mca.v[i + 1]);
    if (p->threads) {
        lsr_strvec_pushf(env, "OMP_NUM_THREADS=%ld", p->threads);
        lsr_strvec_pushf(env, "OPENBLAS_NUM_THREADS=%ld", p->threads);
    }
}

/* srun --ntasks=N [--mpi=T] --kill-on-bad-exit=1 [--cpu-bind=B] [--overcommit] --export=ALL program args */
static void build_srun(const lsr_opts *o, const lsr_plan *p, lsr_strvec *cmd) {
    lsr_strvec_push(cmd, p->srun_path);
    lsr_strvec_pushf(cmd, "--ntasks=%ld", p->np);
    if (p->srun_mpi[0]) lsr_strvec_pushf(cmd, "--mpi=%s", p->srun_mpi);
    lsr_strvec_push(cmd, "--kill-on-bad-exit=1");
    if (o->bind)
        lsr_strvec_pushf(cmd, "--cpu-bind=%s",
                         !strcmp(o->bind, "none")   ? "none"
                         : !strcmp(o->bind, "core") ? "cores"
                                                    : "sockets");
    if (o->oversubscribe) lsr_strvec_push(cmd, "--overcommit");
    lsr_strvec_push(cmd, "--export=ALL");
    push_prog(cmd, o);
}

/* Open MPI's mpirun (4.x) exits 131 when it could not start the program on a host (execve failed:
 * a bad #! interpreter, a directory) and 132 when it was not found or not executable there; a rank
 * killed by a signal gives 128 + the signal, so 131 and 132 also read as SIGQUIT and SIGILL. */
static int mpirun_launch_status(lsr_launcher launcher, int rc) {
    return launcher == LSR_MPIRUN && (rc == 131 || rc == 132);
}

/* What an exit status says: "status 139 (killed by SIGSEGV)" for lockstep-run's child killed by a
 * signal, "status 139 (128 + SIGSEGV: a rank killed by it)" as mpirun and srun report a rank's
 * death, mpirun's own launch failures named as such; a program's own exit status as it is. */
static void describe_status(int rc, int signalled, lsr_launcher launcher, char *buf, size_t len) {
    const char *sig = rc > 128 && rc < 128 + 65 && sigabbrev_np(rc - 128) ? sigabbrev_np(rc - 128) : NULL;
    if (signalled)
        snprintf(buf, len, "status %d (killed by SIG%s)", rc, sigabbrev_np(signalled) ? sigabbrev_np(signalled) : "?");
    else if (mpirun_launch_status(launcher, rc))
        snprintf(buf, len,
                 "status %d (mpirun's when it cannot start the program%s, or 128 + SIG%s: a rank killed by it)", rc,
                 rc == 132 ? ", not found or not executable on a host" : "", sig);
    else if (sig && launcher != LSR_DIRECT)
        snprintf(buf, len, "status %d (128 + SIG%s: a rank killed by it)", rc, sig);
    else
        snprintf(buf, len, "status %d", rc);
}

/* Statuses a restart cannot help, or that mean "stop": a usage error, a program that is missing or
 * not executable (also mpirun's 131/132), and a lockstep program stopped by SIGINT or SIGTERM after
 * its checkpoint. */
static int restartable(int rc, int signalled, lsr_launcher launcher) {
    if (signalled) return 1;
    return rc != 0 && rc != EXIT_USAGE && rc != 126 && rc != 127 && rc != 130 && rc != 143 &&
           !mpirun_launch_status(launcher, rc);
}

/* Runs the launcher's command as a child, again after a failure while --max-restarts allows
 * (LOCKSTEP_RESTART_COUNT tells the ranks which run they are). Returns the exit status. */
static int supervise(const lsr_opts *o, lsr_launcher launcher, const char *exe, char *const argv[], const char *job) {
    lsr_signals sigs;
    lsr_signals_block(&sigs, job != NULL);
    char what[256];
    int rc = 0;
    for (long attempt = 0;; attempt++) {
        char count[32];
        snprintf(count, sizeof count, "%ld", attempt);
        if (o->max_restarts > 0) setenv("LOCKSTEP_RESTART_COUNT", count, 1);
        int stopped = 0, signalled = 0;
        rc = lsr_run_child(&sigs, exe, argv, job, launcher == LSR_MPIRUN, o->abort_grace, &stopped, &signalled);
        if (rc < 0) {
            note("cannot run or wait for %s: %s", exe, strerror(errno));
            rc = 1;
            break;
        }
        if (o->max_restarts == 0 || rc == 0) break;
        describe_status(rc, signalled, launcher, what, sizeof what);
        if (stopped) {
            note("the job ended with %s after SIG%s; not restarted", what, sigabbrev_np(stopped));
            break;
        }
        if (!restartable(rc, signalled, launcher)) {
            note("the job ended with %s; not restarted (%s)", what,
                 rc == EXIT_USAGE                     ? "a usage error"
                 : rc == 126 || rc == 127             ? "the program cannot run"
                 : mpirun_launch_status(launcher, rc) ? "mpirun's status for a program it cannot start"
                                                      : "stopped by a signal after its checkpoint");
            break;
        }
        if (attempt == o->max_restarts) {
            note("the job ended with %s; no restarts left (--max-restarts %ld)", what, o->max_restarts);
            break;
        }
        note("the job ended with %s; restart %ld of %ld in %g s (LOCKSTEP_RESTART_COUNT=%ld)", what, attempt + 1,
             o->max_restarts, o->restart_delay, attempt + 1);
        int sig = lsr_pause(&sigs, o->restart_delay);
        if (sig) {
            note("SIG%s while waiting to restart: not restarted", sigabbrev_np(sig));
            rc = 128 + sig;
            break;
        }
    }
    lsr_signals_restore(&sigs);
    return rc;
}

int main(int argc, char **argv) {
    lsr_opts o = {0};
    o.restart_delay = RESTART_DELAY_DEFAULT;
    o.abort_grace = ABORT_GRACE_DEFAULT;

    const char *env_mpirun = getenv("LOCKSTEP_MPIRUN");
    if (env_mpirun && *env_mpirun) {
        o.mpirun = env_mpirun;
        o.mpirun_src = "LOCKSTEP_MPIRUN";
    }
    parse_args(argc, argv, &o);
    const char *env_launcher = getenv("LOCKSTEP_LAUNCHER");
    if (!o.launcher_src && env_launcher && *env_launcher) { /* the flag wins, even over a bad value */
        o.launcher = parse_launcher(env_launcher, "LOCKSTEP_LAUNCHER");
        o.launcher_src = "LOCKSTEP_LAUNCHER";
    }

    lsr_plan p = {0};
    lsr_strvec cmd = {0}, env = {0}, own = {0};
    int rc = 0;
    plan_hosts(&o, &p);
    /* The program must exist before anything is started. */
    char why[256];
    int prc = lsr_find_program(o.prog[0], &p.prog_path);
    if (prc) {
        if (prc == ENOENT)
            note("program '%s' not found%s", o.prog[0],
                 strchr(o.prog[0], '/') ? "" : " in PATH (give a path such as ./prog)");
        else if (prc == ENOEXEC)
            note("program '%s' is not an executable file", o.prog[0]);
        else
            note("program '%s' cannot be run: %s", o.prog[0], unreachable(prc, why, sizeof why));
        rc = prc == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
        goto done;
    }
    char interp[256];
    prc = check_interpreter(p.prog_path, interp, sizeof interp);
    if (prc == EILSEQ) {
        note("program '%s' cannot run: its #! line ends in a carriage return (Windows line endings), which the "
             "kernel takes for part of the interpreter's name; convert it with dos2unix or sed -i 's/\\r$//'",
             o.prog[0]);
        rc = EXIT_NOTFOUND;
        goto done;
    }
    if (prc) {
        note("program '%s' cannot run: its interpreter '%s' (the #! line) %s%s", o.prog[0], interp,
             prc == ENOENT    ? "was not found"
             : prc == ENOEXEC ? "is not an executable file"
                              : "cannot be run: ",
             prc == ENOENT || prc == ENOEXEC ? "" : unreachable(prc, why, sizeof why));
        rc = prc == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
        goto done;
    }
    plan_srun(&o, &p);
    plan_np(&o, &p);
    plan_launcher(&o, &p);
    plan_host_names(&o, &p);
    plan_threads(&o, &p);
    plan_srun_mpi(&o, &p);
    if (o.abort_grace_given && p.launcher != LSR_MPIRUN)
        note("--abort-grace has no effect without mpirun (%s starts the ranks)", launcher_names[p.launcher]);
    if (o.verbose)
        note("launcher %s (%s), %ld rank%s (%s)", launcher_names[p.launcher], p.launcher_why, p.np,
             p.np == 1 ? "" : "s", p.np_why);

    /* An outer lockstep-run's (this one runs in its job): never forwarded; set for the ranks of
     * this job's mpirun as it starts (lsr_run_child). */
    unsetenv("LOCKSTEP_RUN_PID");
    /* Set before the command is built, so that mpirun forwards it (-x) like every LOCKSTEP_ variable. */
    if (o.max_restarts > 0 && setenv("LOCKSTEP_RESTART_COUNT", "0", 1)) {
        note("cannot set LOCKSTEP_RESTART_COUNT: %s", strerror(errno));
        rc = 1;
        goto done;
    }
    if (o.max_restarts > 0) lsr_strvec_push(&own, "LOCKSTEP_RESTART_COUNT=0");
    /* a rank's stderr is mpirun's or srun's pipe: tell rank 0 that its lines reach a terminal (the
     * examples' progress line is on by default there); a value set by hand stays */
    if (isatty(STDERR_FILENO) && !getenv("LOCKSTEP_STDERR_TTY")) {
        if (setenv("LOCKSTEP_STDERR_TTY", "1", 1)) {
            note("cannot set LOCKSTEP_STDERR_TTY: %s", strerror(errno));
            rc = 1;
            goto done;
        }
        lsr_strvec_push(&own, "LOCKSTEP_STDERR_TTY=1");
    }
    if (p.launcher == LSR_MPIRUN) {
        build_mpirun(&o, &p, o.dry_run ? &own : NULL, &cmd);
    } else {
        /* --dry-run: the variables lockstep-run set, in the printed environment */
        for (size_t i = 0; o.dry_run && i < own.n; i++) lsr_strvec_push(&env, own.v[i]);
        build_env(&o, &p, &env);
        if (p.launcher == LSR_SRUN)
            build_srun(&o, &p, &cmd);
        else
            push_prog(&cmd, &o);
    }

    if (o.dry_run) {
        print_command(stdout, &env, cmd.v);
        rc = stdout_status();
        goto done;
    }
    /* srun inside a Slurm job, and every launcher with --max-restarts, run as lockstep-run's child */
    const char *job = getenv("SLURM_JOB_ID");
    if (!(job && *job) || p.launcher != LSR_SRUN) job = NULL;
    /* mpirun always (supervise.c: a second stop signal would make it leave the ranks running) */
    const int supervised = o.max_restarts > 0 || job || p.launcher == LSR_MPIRUN;
    if (o.verbose) {
        fputs(supervised ? "lockstep-run: run " : "lockstep-run: exec ", stderr);
        print_command(stderr, &env, cmd.v);
    }
    for (size_t i = 0; i < env.n; i++) {
        char *eq = strchr(env.v[i], '=');
        *eq = '\0';
        int bad = setenv(env.v[i], eq + 1, 1);
        *eq = '=';
        if (bad) {
            note("cannot set %s: %s", env.v[i], strerror(errno));
            rc = 1;
            goto done;
        }
    }
    fflush(NULL);
    const char *exe = p.launcher == LSR_DIRECT ? p.prog_path : cmd.v[0];
    if (supervised) {
        rc = supervise(&o, p.launcher, exe, cmd.v, job);
        goto done;
    }
    execv(exe, cmd.v);
    int e = errno;
    if (e == ENOENT && access(exe, F_OK) == 0) /* the file is there: its #! interpreter or loader is not */
        note("cannot run %s: its interpreter (the #! line) or dynamic loader was not found", exe);
    else
        note("cannot run %s: %s", exe, strerror(e));
    rc = e == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
done:
    lsr_strvec_free(&cmd);
    lsr_strvec_free(&env);
    lsr_strvec_free(&own);
    lsr_strvec_free(&o.mca);
    lsr_strvec_free(&o.xvars);
    lsr_strvec_free(&o.hosts_joined);
    plan_free(&p);
    return rc;
}
