/* bench_collectives.c: nccl-tests-style table for lockstep's collectives (allreduce, and optionally
 * broadcast, allgather, reduce-scatter) over message sizes, on the chosen backend. Columns: size
 * (bytes, nccl-tests' convention per collective), count, type, time (us, per call, max over ranks,
 * median of the rounds), algbw = size/time, busbw = algbw * factor (allreduce 2(n-1)/n, allgather
 * and reduce-scatter (n-1)/n, broadcast 1) and #wrong (elements that differ from the reference,
 * from a separate checked call). With the mpi backend the same sizes are also timed with the raw
 * MPI call, alternating lockstep and MPI rounds (A B A B ...) in one run, and the ratio
 * lockstep/MPI time is printed. Not a test. Run under mpirun (see --help). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if BENCH_HAVE_MPI
#include <mpi.h>
#endif

#include "comm.h"
#include "memory.h"

#define BENCH_PROG "bench_collectives"
#include "bench_args.h"

/* The largest message: 2^30 floats, so that a count fits the raw MPI calls' int; and the rounds'
 * timings, 16 bytes a round. */
#define MAX_BYTES ((size_t)4 << 30)
#define MAX_ROUNDS 1000000
#define MAX_FACTOR 1024.0

typedef enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, OP_REDUCE_SCATTER } bench_op;
static const char *op_names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter"};

typedef struct opts {
    size_t minbytes, maxbytes;
    double factor;
    int iters, warmup, rounds, check, raw;
    const char *backend;
    int ops[4];
} opts;

static int R, W;
static ls_comm *C;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define DIE(...)                                                                                                       \
    do {                                                                                                               \
        fprintf(stderr, "bench_collectives: " __VA_ARGS__);                                                            \
        fprintf(stderr, "\n");                                                                                         \
        if (C && W > 1) ls_comm_abort(C, "bench_collectives failed");                                                  \
        exit(1);                                                                                                       \
    } while (0)

#define CHECK(what, expr)                                                                                              \
    do {                                                                                                               \
        if ((expr) != LS_OK) DIE("%s: %s", what, ls_last_error());                                                     \
    } while (0)

static void usage(FILE *f) {
    fprintf(f, "usage: mpirun -np N bench_collectives [options]\n"
               "  -b, --minbytes SIZE   smallest message (default 4; units K, M, G (binary), KiB, MiB, GiB,\n"
               "                        KB, MB, GB accepted; 1 to 4G)\n"
               "  -e, --maxbytes SIZE   largest message (default 256M; at least --minbytes)\n"
               "  -f, --stepfactor F    multiply the size by F each row (default 2; above 1, up to 1024;\n"
               "                        sizes of the same count of floats are one row)\n"
               "  -n, --iters N         timed calls per round (default 20)\n"
               "  -w, --warmup N        untimed calls before timing (default 5)\n"
               "  -r, --rounds N        timed rounds per size; median reported; lockstep and raw MPI\n"
               "                        rounds alternate (default 4)\n"
               "  -o, --op NAME         allreduce, broadcast, allgather, reduce_scatter or all\n"
               "                        (default allreduce; repeatable)\n"
               "  -c, --check 0|1       check results (#wrong column; default 1)\n"
               "      --backend NAME    self, mpi, nccl or auto (default: LOCKSTEP_COMM, then auto)\n"
               "      --no-raw          do not time the raw MPI call beside lockstep's\n"
               "  -h, --help            this text\n"
               "Sizes follow nccl-tests: allreduce/broadcast: the buffer; allgather: the gathered\n"
               "buffer; reduce_scatter: the input buffer. Type float (f32), reduction sum. Sizes\n"
               "below a float (allgather, reduce_scatter: a float per rank) are left out, said under\n"
               "the header; when every size is, the run is refused.\n");
}

/* Bytes of a size flag. ls_memory_parse_size reads nccl-tests' K, M and G as binary, as nccl-tests
 * does, and refuses what is not a size; atof once took "-1M" as a size of 2^64 - 2^20. */
static size_t parse_size(const char *flag, const char *s) {
    size_t v = 0;
    const char *range = "a size from 1 to 4G bytes, e.g. 4, 64K, 256M, 1GiB";
    if (ls_memory_parse_size(s, &v) != LS_OK) bench_bad(flag, s, "not a size", range);
    if (v < 1 || v > MAX_BYTES) bench_bad(flag, s, "out of range", range);
    return v;
}

/* Elements per rank (count column) and the send/recv element counts for a size in bytes. */
static void shape(bench_op op, size_t bytes, int64_t *count, int64_t *nsend, int64_t *nrecv) {
    int64_t elems = (int64_t)(bytes / 4);
    switch (op) {
    case OP_ALLREDUCE:
    case OP_BROADCAST: *count = *nsend = *nrecv = elems; break;
    case OP_ALLGATHER:
        *count = elems / W;
        *nsend = *count;
        *nrecv = *count * W;
        break;
    case OP_REDUCE_SCATTER:
        *count = elems / W;
        *nsend = *count * W;
        *nrecv = *count;
        break;
    }
}

/* The smallest message op takes, in bytes: a float, and for allgather and reduce_scatter (whose
 * size is the whole buffer) a float per rank; a smaller size has no element to send. */
static size_t least_bytes(bench_op op) {
    return op == OP_ALLGATHER || op == OP_REDUCE_SCATTER ? (size_t)4 * (size_t)W : 4;
}

/* The sizes of the table, from --minbytes times --stepfactor up to --maxbytes: how many are at
 * least `least` bytes (*run) and how many below it (*below). bench walks the same sizes. */
static void count_sizes(const opts *o, size_t least, int *run, int *below) {
    *run = *below = 0;
    for (double bytes = (double)o->minbytes; bytes <= (double)o->maxbytes * 1.0000001; bytes *= o->factor) {
        if ((size_t)bytes < least)
            ++*below;
        else
            ++*run;
        if (o->factor <= 1.0) break;
    }
}

static double bus_factor(bench_op op) {
    switch (op) {
    case OP_ALLREDUCE: return 2.0 * (W - 1) / W;
    case OP_BROADCAST: return 1.0;
    default: return (double)(W - 1) / W;
    }
}

static void run_lockstep(bench_op op, float *send, float *recv, int64_t count) {
    ls_status s = LS_OK;
    switch (op) {
    case OP_ALLREDUCE: s = ls_comm_allreduce(C, recv, count, LS_F32, LS_REDUCE_SUM); break;
    case OP_BROADCAST: s = ls_comm_broadcast(C, recv, count, LS_F32, 0); break;
    case OP_ALLGATHER: s = ls_comm_allgather(C, send, recv, count, LS_F32); break;
    case OP_REDUCE_SCATTER: s = ls_comm_reduce_scatter(C, send, recv, count, LS_F32, LS_REDUCE_SUM); break;
    }
    if (s != LS_OK) DIE("%s of %lld floats: %s", op_names[op], (long long)count, ls_last_error());
}

#if BENCH_HAVE_MPI
static void run_raw(bench_op op, float *send, float *recv, int64_t count) {
    int rc = MPI_SUCCESS, n = (int)count;
    switch (op) {
    case OP_ALLREDUCE: rc = MPI_Allreduce(MPI_IN_PLACE, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case OP_BROADCAST: rc = MPI_Bcast(recv, n, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
    case OP_ALLGATHER: rc = MPI_Allgather(send, n, MPI_FLOAT, recv, n, MPI_FLOAT, MPI_COMM_WORLD); break;
    case OP_REDUCE_SCATTER: rc = MPI_Reduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    }
    if (rc != MPI_SUCCESS) DIE("raw MPI %s failed (%d)", op_names[op], rc);
}
#endif

/* Inputs: rank r's element i = r + 1 + (i % 5); the reference follows from that. */
static void fill(float *x, int64_t n, int rank) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(rank + 1 + (i % 5));
}

static int64_t count_wrong(bench_op op, const float *recv, int64_t count) {
    int64_t wrong = 0;
    switch (op) {
    case OP_ALLREDUCE:
        for (int64_t i = 0; i < count; i++) wrong += recv[i] != (float)(W * (W + 1) / 2 + W * (int)(i % 5));
        break;
    case OP_BROADCAST:
        for (int64_t i = 0; i < count; i++) wrong += recv[i] != (float)(1 + (i % 5));
        break;
    case OP_ALLGATHER:
        for (int64_t j = 0; j < count * W; j++) {
            int64_t r = j / (count ? count : 1), i = j % (count ? count : 1);
            wrong += recv[j] != (float)(r + 1 + (i % 5));
        }
        break;
    case OP_REDUCE_SCATTER:
        for (int64_t i = 0; i < count; i++) {
            int64_t g = (int64_t)R * count + i;
            wrong += recv[i] != (float)(W * (W + 1) / 2 + W * (int)(g % 5));
        }
        break;
    }
    return wrong;
}

typedef void (*runner)(bench_op, float *, float *, int64_t);

static int64_t checked_call(runner fn, bench_op op, float *send, float *recv, int64_t count, int64_t nsend) {
    if (op == OP_ALLREDUCE || op == OP_BROADCAST)
        fill(recv, count, R);
    else
        fill(send, nsend, R);
    fn(op, send, recv, count);
    int64_t wrong = count_wrong(op, recv, count);
    double w = (double)wrong;
    CHECK("check", ls_comm_allreduce_host(C, &w, 1, LS_F64, LS_REDUCE_SUM));
    return (int64_t)w;
}

/* Per-call seconds of one round: iters calls, max over ranks. */
static double timed_round(runner fn, bench_op op, float *send, float *recv, int64_t count, int iters) {
    CHECK("barrier", ls_comm_barrier(C));
    double t0 = now_s();
    for (int i = 0; i < iters; i++) fn(op, send, recv, count);
    double t = (now_s() - t0) / iters;
    CHECK("time", ls_comm_allreduce_host(C, &t, 1, LS_F64, LS_REDUCE_MAX));
    return t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void bench(const opts *o, bench_op op, int raw) {
    size_t maxb = o->maxbytes;
    int64_t c0, s0, r0;
    shape(op, maxb, &c0, &s0, &r0);
    float *send = malloc((size_t)(s0 > 0 ? s0 : 1) * 4), *recv = malloc((size_t)(r0 > 0 ? r0 : 1) * 4);
    if (!send || !recv) DIE("cannot allocate %zu bytes", maxb);
    if (R == 0) {
        printf("#\n# %s, %d rank(s), backend %s%s\n", op_names[op], W, ls_comm_backend_name(C),
               raw ? "; raw MPI timed alternately (A B A B)" : "");
        printf("# %10s %12s %6s %6s %5s %10s %8s %8s %7s", "size", "count", "type", "redop", "root", "time", "algbw",
               "busbw", "#wrong");
        if (raw) printf(" %10s %8s %8s %7s %7s", "mpi time", "algbw", "busbw", "#wrong", "ratio");
        printf("\n# %10s %12s %6s %6s %5s %10s %8s %8s %7s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
               "(GB/s)", "");
        if (raw) printf(" %10s %8s %8s %7s %7s", "(us)", "(GB/s)", "(GB/s)", "", "ls/mpi");
        printf("\n");
        int run, below;
        count_sizes(o, least_bytes(op), &run, &below);
        if (below)
            printf("# %d size(s) below %zu B left out: the smallest %s message with %d rank(s) is a float%s\n", below,
                   least_bytes(op), op_names[op], W, least_bytes(op) > 4 ? " per rank" : "");
        fflush(stdout);
    }
    double *ta = calloc((size_t)o->rounds, sizeof *ta), *tb = calloc((size_t)o->rounds, sizeof *tb);
    if (!ta || !tb) DIE("cannot allocate the timings of %d rounds", o->rounds);
    int64_t last = 0; /* the count of the row before */
    for (double bytes = (double)o->minbytes; bytes <= (double)maxb * 1.0000001; bytes *= o->factor) {
        size_t size = (size_t)bytes;
        int64_t count, nsend, nrecv;
        shape(op, size, &count, &nsend, &nrecv);
        size_t shown = (size_t)(op == OP_ALLGATHER ? nrecv : nsend) * 4; /* nccl-tests' size */
        if (count == 0) continue; /* below least_bytes(op): said under the header */
        /* a factor below 2 reaches the same whole count of floats more than once (from 4 B by 1.1:
         * 4 B eight times): one row each */
        if (count == last) continue;
        last = count;
        int64_t wrong = -1, wrong_raw = -1;
        if (o->check) {
            wrong = checked_call(run_lockstep, op, send, recv, count, nsend);
#if BENCH_HAVE_MPI
            if (raw) wrong_raw = checked_call(run_raw, op, send, recv, count, nsend);
#endif
        }
        memset(send, 0, (size_t)(nsend > 0 ? nsend : 1) * 4);
        memset(recv, 0, (size_t)(nrecv > 0 ? nrecv : 1) * 4);
        for (int i = 0; i < o->warmup; i++) {
            run_lockstep(op, send, recv, count);
#if BENCH_HAVE_MPI
            if (raw) run_raw(op, send, recv, count);
#endif
        }
        for (int k = 0; k < o->rounds; k++) {
            ta[k] = timed_round(run_lockstep, op, send, recv, count, o->iters);
#if BENCH_HAVE_MPI
            if (raw) tb[k] = timed_round(run_raw, op, send, recv, count, o->iters);
#endif
        }
        double t = median(ta, o->rounds);
        double algbw = t > 0 ? (double)shown / t / 1e9 : 0, busbw = algbw * bus_factor(op);
        if (R == 0) {
            char wa[24] = "N/A", wb[24] = "N/A";
            if (o->check) {
                snprintf(wa, sizeof wa, "%lld", (long long)wrong);
                snprintf(wb, sizeof wb, "%lld", (long long)wrong_raw);
            }
            printf("  %10zu %12lld %6s %6s %5d %10.2f %8.3f %8.3f %7s", shown, (long long)count, "float",
                   op == OP_BROADCAST || op == OP_ALLGATHER ? "none" : "sum", op == OP_BROADCAST ? 0 : -1, t * 1e6,
                   algbw, busbw, wa);
            if (raw) {
                double tr = median(tb, o->rounds);
                double ab = tr > 0 ? (double)shown / tr / 1e9 : 0;
                printf(" %10.2f %8.3f %8.3f %7s %7.3f", tr * 1e6, ab, ab * bus_factor(op), wb, tr > 0 ? t / tr : 0);
            }
            printf("\n");
            fflush(stdout);
        }
        if (o->factor <= 1.0) break;
    }
    free(ta);
    free(tb);
    free(send);
    free(recv);
}

int main(int argc, char **argv) {
    opts o = {4, (size_t)256 << 20, 2.0, 20, 5, 4, 1, 1, NULL, {0, 0, 0, 0}};
    int any_op = 0;
    static const struct option longopts[] = {{"minbytes", required_argument, 0, 'b'},
                                             {"maxbytes", required_argument, 0, 'e'},
                                             {"stepfactor", required_argument, 0, 'f'},
                                             {"iters", required_argument, 0, 'n'},
                                             {"warmup", required_argument, 0, 'w'},
                                             {"rounds", required_argument, 0, 'r'},
                                             {"op", required_argument, 0, 'o'},
                                             {"check", required_argument, 0, 'c'},
                                             {"backend", required_argument, 0, 'B'},
                                             {"no-raw", no_argument, 0, 'R'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "b:e:f:n:w:r:o:c:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'b': o.minbytes = parse_size("-b/--minbytes", optarg); break;
        case 'e': o.maxbytes = parse_size("-e/--maxbytes", optarg); break;
        case 'f': o.factor = bench_num("-f/--stepfactor", optarg, 1, 1, MAX_FACTOR); break;
        case 'n': o.iters = (int)bench_int("-n/--iters", optarg, 1, BENCH_MAX_COUNT); break;
        case 'w': o.warmup = (int)bench_int("-w/--warmup", optarg, 0, BENCH_MAX_COUNT); break;
        case 'r': o.rounds = (int)bench_int("-r/--rounds", optarg, 1, MAX_ROUNDS); break;
        case 'c': o.check = (int)bench_int("-c/--check", optarg, 0, 1); break;
        case 'B': o.backend = bench_str("--backend", optarg); break;
        case 'R': o.raw = 0; break;
        case 'o': {
            int found = 0;
            for (int k = 0; k < 4; k++)
                if (!strcmp(optarg, op_names[k]) || !strcmp(optarg, "all")) o.ops[k] = found = 1;
            if (!strcmp(optarg, "reducescatter")) o.ops[OP_REDUCE_SCATTER] = found = 1;
            if (!found)
                bench_bad("-o/--op", optarg, "unknown operation",
                          "allreduce, broadcast, allgather, reduce_scatter or all");
            any_op = 1;
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    bench_no_operands(argc, argv, optind);
    if (o.maxbytes < o.minbytes) {
        fprintf(stderr, "bench_collectives: --maxbytes %zu is below --minbytes %zu\n", o.maxbytes, o.minbytes);
        return 2;
    }
    if (!any_op) o.ops[OP_ALLREDUCE] = 1;
    BENCH_CHECK_FLAG("--backend", o.backend, "communicator", ls_comm_create(NULL, o.backend, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);
    /* an operation none of whose sizes holds an element is refused (it printed its header, no
     * rows, and exited 0); every rank decides alike and closes the communicator, so MPI ends cleanly */
    for (int k = 0; k < 4; k++) {
        int run, below;
        if (!o.ops[k]) continue;
        count_sizes(&o, least_bytes((bench_op)k), &run, &below);
        if (run) continue;
        if (R == 0)
            fprintf(stderr,
                    "bench_collectives: no size from -b/--minbytes %zu to -e/--maxbytes %zu reaches the "
                    "smallest %s message with %d rank(s), %zu bytes (a float%s): raise -e/--maxbytes\n",
                    o.minbytes, o.maxbytes, op_names[k], W, least_bytes((bench_op)k),
                    least_bytes((bench_op)k) > 4 ? " per rank" : "");
        ls_comm_destroy(C);
        return 2;
    }
    int raw = 0;
#if BENCH_HAVE_MPI
    raw = o.raw && !strcmp(ls_comm_backend_name(C), "mpi");
#endif
    if (R == 0) {
        printf("# bench_collectives:");
        for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
        const char *prog = getenv("LOCKSTEP_MPI_PROGRESS");
        printf("\n# ranks %d, backend %s, MPI progress %s, iters %d, warmup %d, rounds %d (median)\n", W,
               ls_comm_backend_name(C), prog && *prog ? prog : "default", o.iters, o.warmup, o.rounds);
    }
    for (int k = 0; k < 4; k++)
        if (o.ops[k]) bench(&o, (bench_op)k, raw);
    ls_comm_destroy(C);
    return 0;
}
