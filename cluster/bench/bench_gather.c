/* bench_gather.c: the batch gather from Fashion-MNIST's 60000 training rows (random rows, as a
 * shuffled epoch reads them): ls_dataset_gather (one thread, the pixel bytes decoded to f32)
 * against ls_dataset_gather_parallel (LOCKSTEP_GATHER_THREADS, default 4 from 8 CPUs up, else 1),
 * alternating A B A B with fresh random indices each round; medians and their ratio. Also timed in
 * the same rounds: ls_dataset_gather_bytes, the rows as stored (what a GPU's staged batch copies).
 *   bench_gather [--batch-size N] [--rounds N] [--data-dir DIR] (--help: usage) */
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
               "  --rounds N       rounds of the three gathers; medians reported (default 101)\n"
               "  --data-dir DIR   Fashion-MNIST (default $LOCKSTEP_FASHION_DIR, else\n"
               "                   /usr/share/datasets/fashion-mnist)\n"
               "  -h, --help       this text\n"
               "LOCKSTEP_GATHER_THREADS: the threaded gather's threads (default 4 from 8 CPUs up, else 1).\n");
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

int main(int argc, char **argv) {
    int64_t B = 4096;
    int rounds = 101;
    const char *dir = NULL;
    static struct option lo[] = {{"batch-size", required_argument, 0, 'b'},
                                 {"rounds", required_argument, 0, 'r'},
                                 {"data-dir", required_argument, 0, 'd'},
                                 {"help", no_argument, 0, 'h'},
                                 {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (c == 'b')
            B = bench_int("--batch-size", optarg, 1, MAX_BATCH);
        else if (c == 'r')
            rounds = (int)bench_int("--rounds", optarg, 1, MAX_ROUNDS);
        else if (c == 'd')
            dir = bench_str("--data-dir", optarg);
        else {
            usage(c == 'h' ? stdout : stderr);
            return c == 'h' ? 0 : 2;
        }
    }
    bench_no_operands(argc, argv, optind);
    ls_dataset *d = NULL;
    if (ls_fashion_mnist_load(dir, 1, 0, &d) != LS_OK) {
        fprintf(stderr, "bench_gather: %s\n", ls_last_error());
        return 1;
    }
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)B);
    float *x = malloc(sizeof(float) * (size_t)(B * d->features));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)B);
    uint8_t *xb = malloc((size_t)(B * d->features));
    double *t[3] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds),
                    malloc(sizeof(double) * (size_t)rounds)};
    if (!idx || !x || !xb || !y || !t[0] || !t[1] || !t[2]) {
        fprintf(stderr, "bench_gather: cannot allocate the buffers of %lld rows (%.1f MiB)\n", (long long)B,
                (double)B * (double)(d->features * 5 + 12) / 1048576.0);
        return 1;
    }
    uint64_t r = 1;
    for (int k = 0; k < rounds; k++)
        for (int m = 0; m < 3; m++) {
            for (int64_t i = 0; i < B; i++) {
                r = r * 6364136223846793005ULL + 1442695040888963407ULL;
                idx[i] = (int64_t)((r >> 33) % (uint64_t)d->n);
            }
            double t0 = now_s();
            ls_status s = m == 0   ? ls_dataset_gather(d, idx, B, x, y)
                          : m == 1 ? ls_dataset_gather_parallel(d, idx, B, x, y, 0)
                                   : ls_dataset_gather_bytes(d, idx, B, xb, y);
            t[m][k] = now_s() - t0;
            if (s != LS_OK) {
                fprintf(stderr, "bench_gather: %s\n", ls_last_error());
                return 1;
            }
        }
    qsort(t[0], (size_t)rounds, sizeof(double), cmp);
    qsort(t[1], (size_t)rounds, sizeof(double), cmp);
    qsort(t[2], (size_t)rounds, sizeof(double), cmp);
    double a = t[0][rounds / 2], b = t[1][rounds / 2], raw = t[2][rounds / 2];
    printf("gather %lld rows x %lld floats (%.1f MiB), %d rounds A B A B, %ld CPUs: one thread median %.3f ms, "
           "threaded median %.3f ms: %.2fx\n",
           (long long)B, (long long)d->features, (double)B * (double)d->features * 4 / 1048576.0, rounds,
           sysconf(_SC_NPROCESSORS_ONLN), a * 1e3, b * 1e3, a / b);
    printf("the same rows as stored bytes (%.1f MiB; a GPU's staged batch): median %.3f ms\n",
           (double)B * (double)d->features / 1048576.0, raw * 1e3);
    free(idx);
    free(x);
    free(xb);
    free(y);
    free(t[0]);
    free(t[1]);
    free(t[2]);
    ls_dataset_destroy(d);
    return 0;
}
