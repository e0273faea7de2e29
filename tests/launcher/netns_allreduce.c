/* netns_allreduce.c: MPI test program for the two-namespace harness. Every rank all-reduces a
 * vector of integer-valued doubles (exact in any summation order), checks the sum, and prints its
 * rank, host name and network namespace, so a test can see that the ranks ran in different
 * namespaces. --out FILE: rank 0 writes the reduced vector (raw little-endian f64) to FILE. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N (1 << 16) /* 512 KiB: large enough for the TCP transport's rendezvous path */

int main(int argc, char **argv) {
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else {
            fprintf(stderr, "usage: netns_allreduce [--out FILE]\n");
            return 2;
        }
    }
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    double *v = malloc(N * sizeof *v), *sum = malloc(N * sizeof *sum);
    if (!v || !sum) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (int i = 0; i < N; i++) v[i] = (double)(rank + 1) * (double)(i % 1000 + 1);
    int rc = MPI_Allreduce(v, sum, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    long bad = rc == MPI_SUCCESS ? 0 : N;
    double tri = (double)size * (size + 1) / 2.0;
    for (int i = 0; i < N && !bad; i++)
        if (sum[i] != tri * (double)(i % 1000 + 1)) bad = i + 1;

    char host[256] = "?", ns[256] = "?";
    gethostname(host, sizeof host - 1);
    ssize_t len = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    ns[len > 0 ? len : 1] = '\0';
    printf("rank %d/%d host %s netns %s sum %s\n", rank, size, host, ns, bad ? "WRONG" : "ok");
    fflush(stdout);

    if (out && rank == 0) {
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(sum, sizeof *sum, N, f) != N || fclose(f)) {
            perror(out);
            bad = 1;
        }
    }
    free(v);
    free(sum);
    MPI_Finalize();
    return bad ? 1 : 0;
}
