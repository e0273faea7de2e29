/* bench_gather.c: the batch gathers the trainer does on the host, from Fashion-MNIST's 60000
 * training rows (random rows, as a shuffled epoch reads them), each labelled by its path:
 *   bytes: ls_dataset_gather_bytes, the rows as stored, what stage_upload (train.c) gathers for a set
 *     of bytes such as Fashion-MNIST before a GPU decodes them;
 *   f32, 1 thread / f32, T threads: ls_dataset_gather_parallel on the same rows kept as f32
 *     (ls_dataset_to_f32), what stage_upload gathers for a set of f32, on one thread and on the
 *     trainer's thread count (--threads, else LOCKSTEP_GATHER_THREADS, else 4 from 8 CPUs, else 1),
 *     resolved once before the timing as the trainer does at creation;
 *   decoded: ls_dataset_gather of the bytes into f32 on the host (the CPU trainer's load).
 * Each round runs all four in an order shuffled anew (a fixed seed), so that each is first, and right
 * after each other, equally often on average: a fixed order (A B C D A B C D) always ran the
 * threaded f32 gather right after the 1-thread one, which had just written the same buffer, and
 * --threads 1 came out 1.06-1.16x against itself. Fresh random indices each call; one untimed round
 * first; medians.
 *   bench_gather [--batch-size N] [--rounds N] [--threads N] [--data-dir DIR] (--help: usage) */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "data.h"

#define BENCH_PROG "bench_gather"
#include "bench_args.h"

/* Far beyond a real batch, yet the buffers stay allocatable (about 4 GiB of f32 and byte rows at
 * 1 << 20); and the rounds' timings, kept for the medians, 24 bytes a round. */
#define MAX_BATCH (INT64_C(1) << 20)
#define MAX_ROUNDS 1000000

static void usage(FILE *f) {
    fprintf(f, "usage: bench_gather [options]\n"
               "  --batch-size N   rows gathered per call, random with repeats (default 4096)\n"
               "  --rounds N       rounds of the four gathers, each round in a shuffled order (a fixed\n"
               "                   seed), after one untimed; medians reported (default 101)\n"
               "  --threads N      the threaded f32 gather's threads, 1 to 64 (default as the trainer:\n"
               "                   $LOCKSTEP_GATHER_THREADS, else 4 from 8 CPUs up, else 1)\n"
               "  --data-dir DIR   Fashion-MNIST (default $LOCKSTEP_FASHION_DIR, else\n"
               "                   /usr/share/datasets/fashion-mnist)\n"
               "  -h, --help       this text\n");
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of t[0..n) (sorts t): the mean of the two middle values when n is even. */
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof(double), cmp);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

int main(int argc, char **argv) {
    int64_t B = 4096;
    int rounds = 101, threads = 0;
    const char *dir = NULL;
    static struct option lo[] = {{"batch-size", required_argument, 0, 'b'},
                                 {"rounds", required_argument, 0, 'r'},
                                 {"threads", required_argument, 0, 't'},
                                 {"data-dir", required_argument, 0, 'd'},
                                 {"help", no_argument, 0, 'h'},
                                 {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (c == 'b')
            B = bench_int("--batch-size", optarg, 1, MAX_BATCH);
        else if (c == 'r')
            rounds = (int)bench_int("--rounds", optarg, 1, MAX_ROUNDS);
        else if (c == 't')
            threads = (int)bench_int("--threads", optarg, 1, 64);
        else if (c == 'd')
            dir = bench_str("--data-dir", optarg);
        else {
            usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    bench_no_operands(argc, argv, optind);
    /* the trainer's count, resolved once (ls_trainer_create does so): a count <= 0 passed to
     * ls_dataset_gather_parallel would read the environment and the affinity in every call */
    if (!threads && ls_dataset_gather_threads(&threads) != LS_OK) {
        fprintf(stderr, "bench_gather: %s\n", ls_last_error());
        return 2;
    }
    ls_dataset *d = NULL, *df = NULL;
    if (ls_fashion_mnist_load(dir, 1, 0, &d) != LS_OK || ls_fashion_mnist_load(dir, 1, 0, &df) != LS_OK ||
        ls_dataset_to_f32(df) != LS_OK) {
        fprintf(stderr, "bench_gather: %s\n", ls_last_error());
        return 1;
    }
    enum { BYTES, F32_ONE, F32_THREADS, DECODED, METHODS };
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)B);
    float *x = malloc(sizeof(float) * (size_t)(B * d->features));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)B);
    uint8_t *xb = malloc((size_t)(B * d->features));
    double *t[METHODS];
    int ok = idx && x && y && xb;
    for (int m = 0; m < METHODS; m++) ok = (t[m] = malloc(sizeof(double) * (size_t)rounds)) && ok;
    if (!ok) {
        fprintf(stderr, "bench_gather: cannot allocate the buffers of %lld rows (%.1f MiB)\n", (long long)B,
                (double)B * (double)(d->features * 5 + 12) / 1048576.0);
        return 1;
    }
    uint64_t r = 1, o = 7; /* the indices' generator, and the order's (a stream of its own) */
    /* round -1, untimed: every gather once, so that none of the timed ones is the first to touch
     * its fresh output buffer (page faults) or the sets' rows: with --rounds 1 or 2 the first one's
     * cold call was the median, and one thread came out 8-27x faster than itself */
    for (int k = -1; k < rounds; k++) {
        int order[METHODS];
        for (int j = 0; j < METHODS; j++) order[j] = j;
        for (int j = METHODS - 1; j > 0; j--) { /* Fisher-Yates */
            o = o * 6364136223846793005ULL + 1442695040888963407ULL;
            int pick = (int)((o >> 33) % (uint64_t)(j + 1)), tmp = order[j];
            order[j] = order[pick];
            order[pick] = tmp;
        }
        for (int j = 0; j < METHODS; j++) {
            int m = order[j];
            for (int64_t i = 0; i < B; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                idx[i] = (int64_t)((r >> 33) % (uint64_t)d->n);
            }
            double t0 = now_s();
            ls_status s = m == BYTES         ? ls_dataset_gather_bytes(d, idx, B, xb, y)
                          : m == F32_ONE     ? ls_dataset_gather_parallel(df, idx, B, x, y, 1)
                          : m == F32_THREADS ? ls_dataset_gather_parallel(df, idx, B, x, y, threads)
                                             : ls_dataset_gather(d, idx, B, x, y);
            if (k >= 0) t[m][k] = now_s() - t0;
            if (s != LS_OK) {
                fprintf(stderr, "bench_gather: %s\n", ls_last_error());
                return 1;
            }
        }
    }
    double med[METHODS];
    for (int m = 0; m < METHODS; m++) med[m] = median(t[m], rounds);
    double mib = (double)B * (double)d->features / 1048576.0;
    printf("gather %lld random rows x %lld features, %d rounds in shuffled orders, %ld CPUs, medians:\n", (long long)B,
           (long long)d->features, rounds, sysconf(_SC_NPROCESSORS_ONLN));
    printf("bytes (the trainer's staged batch of this byte set; %.1f MiB): %.3f ms\n", mib, med[BYTES] * 1e3);
    /* the threads ls_dataset_gather_parallel runs: at least 1 MiB of rows each, at most a row each */
    int64_t most = B * d->features * (int64_t)sizeof(float) / (1 << 20), used = threads;
    if (most < used) used = most > 1 ? most : 1;
    if (used > B) used = B;
    char note[96] = "";
    if (used != threads) snprintf(note, sizeof note, " (%d asked; at least 1 MiB a thread)", threads);
    printf("f32 set (the trainer's staged batch of an f32 set; %.1f MiB): 1 thread %.3f ms, %lld thread%s%s %.3f ms: "
           "%.2fx\n",
           mib * 4, med[F32_ONE] * 1e3, (long long)used, used == 1 ? "" : "s", note, med[F32_THREADS] * 1e3,
           med[F32_ONE] / med[F32_THREADS]);
    if (threads == 1)
        printf("(one thread against one: the trainer's count here is 1; --threads N or LOCKSTEP_GATHER_THREADS=N "
               "compares N)\n");
    printf("bytes decoded to f32 on the host (the CPU trainer's batch; %.1f MiB written): %.3f ms\n", mib * 4,
           med[DECODED] * 1e3);
    free(idx);
    free(x);
    free(xb);
    free(y);
    for (int m = 0; m < METHODS; m++) free(t[m]);
    ls_dataset_destroy(d);
    ls_dataset_destroy(df);
    return 0;
}
