/* bench_bucketing.c: the gradient exchange of realistic parameter lists (the MLP 784-512-256-10,
 * 6 tensors; ResNet-18, 62 tensors of mixed sizes) done four ways: the bucketed reducer (grad_ready
 * in backward order, finish), one blocking allreduce per tensor, one async allreduce per tensor
 * (all started, then waited), and a single bucket holding everything (over a second copy of the
 * gradients, so that it takes bucket views exactly when the bucketed reducer does: the views
 * column says which did). The methods alternate run by run (A B C D A B C D). Median over runs of
 * the step time (max over ranks); the ratio column is time / bucketed time; MB are 10^6 bytes
 * (the bucket caps are in MiB, as LOCKSTEP_BUCKET_MB). With --compute-us, a
 * simulated backward (busy work proportional to each tensor's size) runs before each gradient is
 * marked ready, showing how much communication the reducer hides. Results are checked. Not a test. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "reducer.h"
#include "tensor.h"

#define BENCH_PROG "bench_bucketing"
#include "bench_args.h"

/* Bounds of the flags, far beyond real runs: the runs' timings are kept (8 bytes a run); 10 s of
 * simulated backward a step; bucket caps as LOCKSTEP_BUCKET_MB takes them. */
#define MAX_RUNS 1000000
#define MAX_COMPUTE_US 1e7
#define MAX_BUCKET_MB 1e6

/* Bytes of a bucket cap in MiB: 0 leaves the reducer's default; a positive cap is at least a byte. */
static size_t cap_bytes(double mb) {
    size_t bytes = (size_t)(mb * 1048576.0);
    return mb > 0 && bytes == 0 ? 1 : bytes;
}

static int R, W;
static ls_comm *C;

#define DIE(...)                                                                                                       \
    do {                                                                                                               \
        fprintf(stderr, "bench_bucketing: " __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                                         \
        if (C && W > 1) ls_comm_abort(C, "bench_bucketing failed");                                                    \
        exit(1);                                                                                                       \
    } while (0)
#define CHECK(what, expr)                                                                                              \
    do {                                                                                                               \
        if ((expr) != LS_OK) DIE("%s: %s", what, ls_last_error());                                                     \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void spin(double seconds) {
    if (seconds <= 0) return;
    double end = now_s() + seconds;
    while (now_s() < end) {}
}

/* ---- parameter lists ---- */

typedef struct plist {
    const char *name;
    int n;
    int64_t numel[80];
} plist;

static void add(plist *p, int64_t a, int64_t b, int64_t c, int64_t d) { p->numel[p->n++] = a * b * c * d; }

static plist mlp_params(void) {
    plist p = {"mlp-784-512-256-10", 0, {0}};
    add(&p, 512, 784, 1, 1);
    add(&p, 512, 1, 1, 1);
    add(&p, 256, 512, 1, 1);
    add(&p, 256, 1, 1, 1);
    add(&p, 10, 256, 1, 1);
    add(&p, 10, 1, 1, 1);
    return p;
}

static plist resnet18_params(void) {
    plist p = {"resnet18", 0, {0}};
    add(&p, 64, 3, 7, 7); /* conv1 */
    add(&p, 64, 1, 1, 1);
    add(&p, 64, 1, 1, 1); /* bn1 */
    int in = 64;
    const int widths[4] = {64, 128, 256, 512};
    for (int l = 0; l < 4; l++) {
        int w = widths[l];
        for (int blk = 0; blk < 2; blk++) {
            int cin = blk == 0 ? in : w;
            add(&p, w, cin, 3, 3);
            add(&p, w, 1, 1, 1);
            add(&p, w, 1, 1, 1);
            add(&p, w, w, 3, 3);
            add(&p, w, 1, 1, 1);
            add(&p, w, 1, 1, 1);
            if (blk == 0 && cin != w) { /* downsample */
                add(&p, w, cin, 1, 1);
                add(&p, w, 1, 1, 1);
                add(&p, w, 1, 1, 1);
            }
        }
        in = w;
    }
    add(&p, 1000, 512, 1, 1); /* fc */
    add(&p, 1000, 1, 1, 1);
    return p;
}

/* ---- methods ---- */

typedef enum { M_BUCKETED, M_PER_TENSOR, M_PER_TENSOR_ASYNC, M_SINGLE_BUCKET, M_COMPUTE_ONLY, M_COUNT } method;
static const char *method_names[] = {"bucketed (reducer)", "per-tensor allreduce", "per-tensor async", "single bucket",
                                     "compute only"};

typedef struct setup {
    plist p;
    ls_tensor *g[80], *g1[80]; /* g1: the single bucket's own gradients, the same sizes */
    ls_reducer *red, *single;
    double compute_s[80]; /* simulated backward time of each tensor */
    int64_t total;
} setup;

/* The gradients method m reduces. */
static ls_tensor **grads(setup *s, method m) { return m == M_SINGLE_BUCKET ? s->g1 : s->g; }

/* "v/f": of a reducer's fused buckets, how many hold their gradients as views. */
static void views_of(const ls_reducer *r, char *out, size_t size) {
    int fused = 0, views = 0;
    for (int b = 0; b < ls_reducer_num_buckets(r); b++) {
        ls_reducer_bucket_info info;
        if (ls_reducer_bucket(r, b, &info) != LS_OK) continue;
        fused += info.fused;
        views += info.fused && info.view;
    }
    snprintf(out, size, "%d/%d", views, fused);
}

static void scale_all(setup *s, int i) {
    float *x = s->g[i]->data, f = 1.0f / (float)W;
    for (int64_t k = 0; k < s->p.numel[i]; k++) x[k] *= f;
}

static void run_method(setup *s, method m) {
    const int n = s->p.n;
    switch (m) {
    case M_BUCKETED:
    case M_SINGLE_BUCKET: {
        ls_reducer *r = m == M_BUCKETED ? s->red : s->single;
        CHECK("begin", ls_reducer_begin(r, 1.0 / W));
        for (int i = n - 1; i >= 0; i--) {
            spin(s->compute_s[i]);
            CHECK("grad_ready", ls_reducer_grad_ready(r, i));
        }
        CHECK("finish", ls_reducer_finish(r));
        break;
    }
    case M_PER_TENSOR:
        for (int i = n - 1; i >= 0; i--) {
            spin(s->compute_s[i]);
            CHECK("allreduce", ls_comm_allreduce(C, s->g[i]->data, s->p.numel[i], LS_F32, LS_REDUCE_SUM));
            scale_all(s, i);
        }
        break;
    case M_PER_TENSOR_ASYNC: {
        ls_comm_request *req[80];
        for (int i = n - 1; i >= 0; i--) {
            spin(s->compute_s[i]);
            CHECK("iallreduce", ls_comm_iallreduce(C, s->g[i]->data, s->p.numel[i], LS_F32, LS_REDUCE_SUM, &req[i]));
        }
        for (int i = n - 1; i >= 0; i--) {
            CHECK("wait", ls_comm_wait(&req[i]));
            scale_all(s, i);
        }
        break;
    }
    case M_COMPUTE_ONLY:
        for (int i = n - 1; i >= 0; i--) spin(s->compute_s[i]);
        break;
    default: break;
    }
}

static float gval(int r, int i, int64_t k) { return (float)((r * 3 + i * 5 + (int)(k % 11)) % 13) * 0.5f; }

static int64_t check_method(setup *s, method m) {
    ls_tensor **g = grads(s, m);
    for (int i = 0; i < s->p.n; i++)
        for (int64_t k = 0; k < s->p.numel[i]; k++) ((float *)g[i]->data)[k] = gval(R, i, k);
    run_method(s, m);
    int64_t wrong = 0;
    for (int i = 0; i < s->p.n; i++)
        for (int64_t k = 0; k < s->p.numel[i]; k++) {
            float sum = 0;
            for (int r = 0; r < W; r++) sum += gval(r, i, k);
            float want = sum * (1.0f / (float)W), got = ((float *)g[i]->data)[k];
            wrong += !(fabsf(got - want) <= 1e-6f * (1 + fabsf(want)));
        }
    double w = (double)wrong;
    CHECK("check", ls_comm_allreduce_host(C, &w, 1, LS_F64, LS_REDUCE_SUM));
    return (int64_t)w;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int runs = 20, warmup = 3, which = 3; /* 1 mlp, 2 resnet, 3 both */
    double compute_us = 0, bucket_mb = 0, first_mb = 0;
    const char *backend = NULL;
    static const struct option longopts[] = {{"runs", required_argument, 0, 'n'},
                                             {"warmup", required_argument, 0, 'w'},
                                             {"model", required_argument, 0, 'm'},
                                             {"compute-us", required_argument, 0, 'u'},
                                             {"bucket-mb", required_argument, 0, 'B'},
                                             {"first-bucket-mb", required_argument, 0, 'F'},
                                             {"backend", required_argument, 0, 'b'},
                                             {"help", no_argument, 0, 'h'},
                                             {0, 0, 0, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "n:w:m:u:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'n': runs = (int)bench_int("-n/--runs", optarg, 1, MAX_RUNS); break;
        case 'w': warmup = (int)bench_int("-w/--warmup", optarg, 0, BENCH_MAX_COUNT); break;
        case 'm':
            which = !strcmp(optarg, "mlp") ? 1 : !strcmp(optarg, "resnet") ? 2 : !strcmp(optarg, "all") ? 3 : 0;
            if (!which) bench_bad("-m/--model", optarg, "unknown model", "mlp, resnet or all");
            break;
        case 'u': compute_us = bench_num("-u/--compute-us", optarg, 0, 0, MAX_COMPUTE_US); break;
        case 'B': bucket_mb = bench_num("--bucket-mb", optarg, 0, 0, MAX_BUCKET_MB); break;
        case 'F': first_mb = bench_num("--first-bucket-mb", optarg, 0, 0, MAX_BUCKET_MB); break;
        case 'b': backend = bench_str("--backend", optarg); break;
        case 'h':
        default:
            fprintf(ch == 'h' ? stdout : stderr,
                    "usage: mpirun -np N bench_bucketing [options]\n"
                    "  -n, --runs N            timed runs per method (median; default 20)\n"
                    "  -w, --warmup N          untimed runs first (default 3)\n"
                    "  -m, --model NAME        mlp, resnet or all (default all)\n"
                    "  -u, --compute-us US     simulated backward time per step, spread over the tensors\n"
                    "                          by size (default 0: communication only)\n"
                    "      --bucket-mb MIB     bucket cap in MiB (default 0: LOCKSTEP_BUCKET_MB, then 25)\n"
                    "      --first-bucket-mb MIB first bucket cap in MiB (default 0: LOCKSTEP_FIRST_BUCKET_MB,\n"
                    "                          then 1)\n"
                    "      --backend NAME      self, mpi, nccl or auto (default: LOCKSTEP_COMM, then auto)\n"
                    "  -h, --help              this text\n");
            return ch == 'h' ? 0 : 2;
        }
    }
    bench_no_operands(argc, argv, optind);
    BENCH_CHECK_FLAG("--backend", backend, "communicator", ls_comm_create(NULL, backend, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);
    ls_allocator *a = NULL;
    CHECK("allocator", ls_host_allocator_create(0, &a));
    if (R == 0) {
        printf("# bench_bucketing:");
        for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
        const char *prog = getenv("LOCKSTEP_MPI_PROGRESS");
        printf("\n# ranks %d, backend %s, MPI progress %s, runs %d (methods alternating; median of max over "
               "ranks), compute %.0f us/step; MB = 10^6 bytes; views: fused buckets holding their gradients as views\n",
               W, ls_comm_backend_name(C), prog && *prog ? prog : "default", runs, compute_us);
        printf("# %-20s %7s %9s %7s %5s  %-22s %10s %8s %7s\n", "model", "tensors", "MB", "buckets", "views", "method",
               "time (ms)", "vs bucketed", "#wrong");
    }
    for (int model = 1; model <= 2; model++) {
        if (!(which & model)) continue;
        setup s;
        memset(&s, 0, sizeof s);
        s.p = model == 1 ? mlp_params() : resnet18_params();
        for (int i = 0; i < s.p.n; i++) {
            int64_t shape[1] = {s.p.numel[i]};
            CHECK("gradient", ls_tensor_create(a, LS_F32, 1, shape, "grad", &s.g[i]));
            CHECK("gradient", ls_tensor_create(a, LS_F32, 1, shape, "grad", &s.g1[i]));
            s.total += s.p.numel[i];
        }
        for (int i = 0; i < s.p.n; i++) s.compute_s[i] = compute_us * 1e-6 * (double)s.p.numel[i] / (double)s.total;
        /* the bucketed reducer as configured (bucket views by default, LOCKSTEP_GRAD_AS_BUCKET_VIEW);
         * the single bucket with the same setting, over its own gradients (a gradient that is
         * already another reducer's view would be copied) */
        ls_reducer_config cfg = {cap_bytes(first_mb), cap_bytes(bucket_mb), 0, 0};
        CHECK("reducer", ls_reducer_create(C, NULL, s.p.n, s.g, &cfg, &s.red));
        ls_reducer_config one = {(size_t)s.total * 4 + 1, (size_t)s.total * 4 + 1, cfg.bucket_view, cfg.compress};
        CHECK("reducer", ls_reducer_create(C, NULL, s.p.n, s.g1, &one, &s.single));
        double med[M_COUNT];
        int64_t wrong[M_COUNT];
        double *t[M_COUNT];
        for (int m = 0; m < M_COUNT; m++)
            if (!(t[m] = calloc((size_t)runs, sizeof(double)))) DIE("cannot allocate the timings of %d runs", runs);
        int nm = compute_us > 0 ? M_COUNT : M_COMPUTE_ONLY; /* the methods run */
        for (int m = 0; m < nm; m++) wrong[m] = m == M_COMPUTE_ONLY ? 0 : check_method(&s, (method)m);
        for (int k = 0; k < warmup; k++)
            for (int m = 0; m < nm; m++) run_method(&s, (method)m);
        for (int k = 0; k < runs; k++)
            for (int m = 0; m < nm; m++) { /* alternating, so load from elsewhere hits every method alike */
                CHECK("barrier", ls_comm_barrier(C));
                double t0 = now_s();
                run_method(&s, (method)m);
                t[m][k] = now_s() - t0;
                CHECK("time", ls_comm_allreduce_host(C, &t[m][k], 1, LS_F64, LS_REDUCE_MAX));
            }
        for (int m = 0; m < nm; m++) {
            qsort(t[m], (size_t)runs, sizeof(double), cmp_double);
            med[m] = runs % 2 ? t[m][runs / 2] : 0.5 * (t[m][runs / 2 - 1] + t[m][runs / 2]);
            free(t[m]);
        }
        for (int m = nm; m < M_COUNT; m++) free(t[m]);
        if (R == 0) {
            for (int m = 0; m < nm; m++) {
                int nb = m == M_BUCKETED        ? ls_reducer_num_buckets(s.red)
                         : m == M_SINGLE_BUCKET ? 1
                         : m == M_COMPUTE_ONLY  ? 0
                                                : s.p.n;
                char views[24] = "-";
                if (m == M_BUCKETED || m == M_SINGLE_BUCKET)
                    views_of(m == M_BUCKETED ? s.red : s.single, views, sizeof views);
                printf("  %-20s %7d %9.3f %7d %5s  %-22s %10.3f %8.3f %7lld\n", s.p.name, s.p.n,
                       (double)s.total * 4 / 1e6, nb, views, method_names[m], med[m] * 1e3, med[m] / med[M_BUCKETED],
                       (long long)wrong[m]);
            }
            fflush(stdout);
        }
        ls_reducer_destroy(s.red);
        ls_reducer_destroy(s.single);
        for (int i = 0; i < s.p.n; i++) {
            ls_tensor_destroy(s.g[i]);
            ls_tensor_destroy(s.g1[i]);
        }
    }
    ls_allocator_destroy(a);
    ls_comm_destroy(C);
    return 0;
}
