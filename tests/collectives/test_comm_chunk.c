/* test_comm_chunk.c: the MPI backend sends a large all-reduce as several MPI calls of at most
 * LOCKSTEP_MPI_CHUNK bytes (default 16 MiB on one node, 1 MiB across nodes; 0: one call). The test
 * stands between lockstep and MPI (the PMPI profiling interface: MPI_Allreduce and MPI_Iallreduce
 * defined here count the calls and pass them on) and checks, for blocking and asynchronous
 * all-reduces, in f32, f64, i32, f16 and bf16 (sums as 16 bits, averages through f32), with several
 * requests in flight (also completed through ls_comm_test in an order that differs by rank, which
 * breaks parts posted as earlier ones complete): the number of calls, the largest count per call,
 * and every element of the result; with nonblocking progress, the calls outstanding at once against
 * LOCKSTEP_MPI_WINDOW (default 2 on one node; 0: a request's parts all at once), and a broadcast
 * queued between all-reduces in parts. Then the default size
 * on one node (16 MiB), 0, ranks given different sizes (the smallest wins), and a bad value's
 * error, also on one rank only (the others fail with it). The default across nodes (1 MiB) is
 * checked by launcher_netns_train.
 * Run under mpirun (label mpi), with either progress mode. */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "commtest.h"
#include "testutil.h"

static atomic_long calls, max_count, outstanding, max_outstanding;
static long fail_iallreduce_at = -1; /* the MPI_Iallreduce with this number (calls) fails */

static void count_call(int count) {
    atomic_fetch_add(&calls, 1);
    long prev = atomic_load(&max_count);
    while (count > prev && !atomic_compare_exchange_weak(&max_count, &prev, count)) {}
}

/* Open MPI calls its collectives internally through its own tables, not these symbols, so every
 * call counted here is lockstep's. */
int MPI_Allreduce(const void *sb, void *rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    count_call(count);
    return PMPI_Allreduce(sb, rb, count, dt, op, comm);
}

int MPI_Iallreduce(const void *sb, void *rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm, MPI_Request *req) {
    count_call(count);
    if (atomic_load(&calls) == fail_iallreduce_at) return MPI_ERR_OTHER;
    long now = atomic_fetch_add(&outstanding, 1) + 1, prev = atomic_load(&max_outstanding);
    while (now > prev && !atomic_compare_exchange_weak(&max_outstanding, &prev, now)) {}
    return PMPI_Iallreduce(sb, rb, count, dt, op, comm, req);
}

/* Nonblocking progress completes its calls through MPI_Test: the calls outstanding at once. */
int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
    int rc = PMPI_Test(req, flag, status);
    if (rc == MPI_SUCCESS && *flag) atomic_fetch_sub(&outstanding, 1);
    return rc;
}

static int R, W;

static int nonblocking, window; /* LOCKSTEP_MPI_PROGRESS=nonblocking; LOCKSTEP_MPI_WINDOW (default 2: one node) */

static void reset(void) {
    atomic_store(&calls, 0);
    atomic_store(&max_count, 0);
    atomic_store(&outstanding, 0);
    atomic_store(&max_outstanding, 0);
}

/* n elements of t, all-reduced with op (async: three requests in flight, waited in reverse), in
 * parts of per_call elements: the calls made and every element. */
static void check_allreduce(ls_comm *c, ls_dtype t, ls_reduce_op op, int64_t n, int64_t per_call, int async) {
    enum { NREQ = 3 };
    const int nbuf = async ? NREQ : 1;
    void *buf[NREQ];
    for (int b = 0; b < nbuf; b++) {
        buf[b] = malloc((size_t)n * ls_dtype_size(t));
        LS_REQUIRE(buf[b]);
        for (int64_t i = 0; i < n; i++) ct_set(buf[b], t, i, ct_val(t, R, i, b));
    }
    reset();
    if (async) {
        ls_comm_request *req[NREQ];
        for (int b = 0; b < nbuf; b++) LS_REQUIRE_OK(ls_comm_iallreduce(c, buf[b], n, t, op, &req[b]));
        for (int b = nbuf - 1; b >= 0; b--) LS_REQUIRE_OK(ls_comm_wait(&req[b]));
        /* nonblocking: the first request posts min(window, its parts) calls before testing any, and
         * never more than the window are outstanding (0: a request's parts all at once) */
        const long parts = (long)((n + per_call - 1) / per_call), most = atomic_load(&max_outstanding);
        const long least = window == 0 || parts < window ? parts : window;
        if (nonblocking && n > 0 && (most < least || (window > 0 && most > window))) {
            fprintf(stderr,
                    "rank %d: %lld elements in parts of %lld, window %d: %ld MPI calls outstanding at most, "
                    "expected %ld to %s\n",
                    R, (long long)n, (long long)per_call, window, most, least, window ? "the window" : "any");
            ls_test_failures++;
        }
    } else {
        LS_REQUIRE_OK(ls_comm_allreduce(c, buf[0], n, t, op));
    }
    const long want_calls = (long)nbuf * (long)((n + per_call - 1) / per_call);
    const long got_calls = atomic_load(&calls), got_max = atomic_load(&max_count);
    if (got_calls != want_calls || got_max != (n < per_call ? n : per_call)) {
        fprintf(stderr,
                "rank %d: %s all-reduce of %lld %s in parts of %lld: %ld MPI calls of at most %ld "
                "elements, expected %ld of at most %lld\n",
                R, async ? "async" : "blocking", (long long)n, ls_dtype_name(t), (long long)per_call, got_calls,
                got_max, want_calls, (long long)(n < per_call ? n : per_call));
        ls_test_failures++;
    }
    for (int b = 0; b < nbuf; b++) {
        char what[96];
        snprintf(what, sizeof what, "%s %s all-reduce of %lld %s", async ? "async" : "blocking", ls_reduce_op_name(op),
                 (long long)n, ls_dtype_name(t));
        CT_CHECK_ELEMS(R, what, buf[b], t, n, ct_expect(t, op, W, i, b));
        free(buf[b]);
    }
}

static ls_comm *make_comm(const char *chunk) {
    if (chunk)
        setenv("LOCKSTEP_MPI_CHUNK", chunk, 1);
    else
        unsetenv("LOCKSTEP_MPI_CHUNK");
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &c));
    return c;
}

int main(void) {
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    if (!strcmp(ri.launcher, "none")) LS_SKIP("run under mpirun: the MPI backend's all-reduce parts");
    const char *pe = getenv("LOCKSTEP_MPI_PROGRESS"), *we = getenv("LOCKSTEP_MPI_WINDOW");
    nonblocking = pe && !strcmp(pe, "nonblocking");
    window = we && *we ? atoi(we) : 2;

    /* the default: 16 MiB parts (4194304 f32), so 5 million f32 take two calls. This communicator
     * stays to the end (MPI is finalized with the last one). */
    ls_comm *keep = make_comm(NULL);
    R = ls_comm_rank(keep);
    W = ls_comm_world(keep);
    check_allreduce(keep, LS_F32, LS_REDUCE_SUM, 5000000, 4194304, 0);

    /* 4 KiB parts: 1024 f32 or i32, 512 f64; an f16 sum goes as 16 bits (2048), its avg as f32 (1024) */
    ls_comm *c = make_comm("4KiB");
    for (int async = 0; async <= 1; async++) {
        check_allreduce(c, LS_F32, LS_REDUCE_SUM, 10007, 1024, async); /* 9 whole parts and 791 */
        check_allreduce(c, LS_F32, LS_REDUCE_AVG, 2048, 1024, async);  /* exactly 2 */
        check_allreduce(c, LS_F64, LS_REDUCE_MAX, 5000, 512, async);
        check_allreduce(c, LS_I32, LS_REDUCE_MIN, 1025, 1024, async);
        check_allreduce(c, LS_F16, LS_REDUCE_SUM, 5000, 2048, async);
        check_allreduce(c, LS_BF16, LS_REDUCE_SUM, 3000, 2048, async);
        check_allreduce(c, LS_F16, LS_REDUCE_AVG, 3000, 1024, async);
        check_allreduce(c, LS_F32, LS_REDUCE_SUM, 1000, 1024, async); /* one call under the size */
        check_allreduce(c, LS_F32, LS_REDUCE_SUM, 0, 1024, async);    /* no call */
    }
    /* a blocking all-reduce while an async one in parts is in flight keeps the order */
    {
        enum { N = 4000 };
        float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
        LS_REQUIRE(a && b);
        for (int i = 0; i < N; i++) {
            a[i] = (float)ct_val(LS_F32, R, i, 7);
            b[i] = (float)ct_val(LS_F32, R, i, 8);
        }
        ls_comm_request *req = NULL;
        LS_REQUIRE_OK(ls_comm_iallreduce(c, a, N, LS_F32, LS_REDUCE_SUM, &req));
        LS_REQUIRE_OK(ls_comm_allreduce(c, b, N, LS_F32, LS_REDUCE_SUM));
        LS_REQUIRE_OK(ls_comm_wait(&req));
        CT_CHECK_ELEMS(R, "async then blocking (first)", a, LS_F32, N, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 7));
        CT_CHECK_ELEMS(R, "async then blocking (second)", b, LS_F32, N, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 8));
        free(a);
        free(b);
    }
    /* an all-reduce in parts, a broadcast and another all-reduce in flight, waited in reverse: the
     * broadcast's call queues behind the first all-reduce's parts */
    {
        enum { N = 6000, M = 700 };
        float *a = malloc(N * sizeof *a), *b = malloc(M * sizeof *b), *d = malloc(N * sizeof *d);
        LS_REQUIRE(a && b && d);
        for (int i = 0; i < N; i++) {
            a[i] = (float)ct_val(LS_F32, R, i, 11);
            d[i] = (float)ct_val(LS_F32, R, i, 12);
        }
        for (int i = 0; i < M; i++) b[i] = R == W - 1 ? (float)i * 0.5f : -1.0f;
        ls_comm_request *r1 = NULL, *r2 = NULL, *r3 = NULL;
        LS_REQUIRE_OK(ls_comm_iallreduce(c, a, N, LS_F32, LS_REDUCE_SUM, &r1));
        LS_REQUIRE_OK(ls_comm_ibroadcast(c, b, M, LS_F32, W - 1, &r2));
        LS_REQUIRE_OK(ls_comm_iallreduce(c, d, N, LS_F32, LS_REDUCE_SUM, &r3));
        LS_REQUIRE_OK(ls_comm_wait(&r3));
        LS_REQUIRE_OK(ls_comm_wait(&r2));
        LS_REQUIRE_OK(ls_comm_wait(&r1));
        CT_CHECK_ELEMS(R, "all-reduce before a broadcast", a, LS_F32, N, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 11));
        CT_CHECK_ELEMS(R, "broadcast between all-reduces", b, LS_F32, M, (double)i * 0.5);
        CT_CHECK_ELEMS(R, "all-reduce after a broadcast", d, LS_F32, N, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 12));
        free(a);
        free(b);
        free(d);
    }
    /* a blocking all-reduce after a request one rank has tested to completion and the others have
     * not: every rank must make the same kind of MPI call (MPI pairs no blocking call with a
     * nonblocking one) */
    {
        enum { N = 3000 };
        float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
        LS_REQUIRE(a && b);
        for (int i = 0; i < N; i++) {
            a[i] = (float)ct_val(LS_F32, R, i, 13);
            b[i] = (float)ct_val(LS_F32, R, i, 14);
        }
        ls_comm_request *req = NULL;
        LS_REQUIRE_OK(ls_comm_iallreduce(c, a, N, LS_F32, LS_REDUCE_SUM, &req));
        if (R == 0)
            for (int done = 0; !done;) LS_REQUIRE_OK(ls_comm_test(req, &done));
        LS_REQUIRE_OK(ls_comm_allreduce(c, b, N, LS_F32, LS_REDUCE_SUM));
        LS_REQUIRE_OK(ls_comm_wait(&req));
        CT_CHECK_ELEMS(R, "tested on rank 0 only, then blocking (first)", a, LS_F32, N,
                       ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 13));
        CT_CHECK_ELEMS(R, "tested on rank 0 only, then blocking (second)", b, LS_F32, N,
                       ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 14));
        free(a);
        free(b);
    }
    /* requests of several parts in flight, completed through ls_comm_test in an order that differs
     * by rank (as the reducer's buckets are): every rank must still start the parts in one order */
    {
        enum { NR = 4 };
        const int64_t sizes[NR] = {9000, 3000, 20000, 5000};
        float *bufs[NR];
        ls_comm_request *req[NR];
        int done[NR] = {0};
        for (int q = 0; q < NR; q++) {
            bufs[q] = malloc((size_t)sizes[q] * sizeof(float));
            LS_REQUIRE(bufs[q]);
            for (int64_t i = 0; i < sizes[q]; i++) bufs[q][i] = (float)ct_val(LS_F32, R, i, 20 + q);
            LS_REQUIRE_OK(ls_comm_iallreduce(c, bufs[q], sizes[q], LS_F32, LS_REDUCE_SUM, &req[q]));
        }
        for (int left = NR; left > 0;)
            for (int k = 0; k < NR; k++) {
                const int q = (R % 2 ? NR - 1 - k : k + R) % NR;
                if (done[q]) continue;
                LS_REQUIRE_OK(ls_comm_test(req[q], &done[q]));
                if (done[q]) left--;
            }
        for (int q = 0; q < NR; q++) LS_REQUIRE_OK(ls_comm_wait(&req[q])); /* frees */
        for (int q = 0; q < NR; q++) {
            CT_CHECK_ELEMS(R, "parts completed by test", bufs[q], LS_F32, sizes[q],
                           ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 20 + q));
            free(bufs[q]);
        }
    }
    ls_comm_destroy(c);

    /* 0: one call, however large */
    c = make_comm("0");
    check_allreduce(c, LS_F32, LS_REDUCE_SUM, 5000000, 5000000, 1);
    float f = 1;
    LS_EXPECT_ERR(ls_comm_allreduce(c, &f, (int64_t)INT_MAX + 1, LS_F32, LS_REDUCE_SUM), LS_ERR_UNSUPPORTED,
                  "exceeds MPI's int count limit (2147483647) (LOCKSTEP_MPI_CHUNK=0 turned off");
    ls_comm_destroy(c);

    /* ranks given different sizes agree on the smallest (0, no limit, is the largest): else their
     * parts would pair MPI calls of different counts */
    c = make_comm(R == 0 ? "4KiB" : "8KiB");
    check_allreduce(c, LS_F32, LS_REDUCE_SUM, 5000, 1024, 0);
    ls_comm_destroy(c);
    c = make_comm(R == W - 1 ? "8KiB" : "0");
    check_allreduce(c, LS_F32, LS_REDUCE_SUM, 5000, W > 1 ? 2048 : 5000, 1);
    ls_comm_destroy(c);

    setenv("LOCKSTEP_MPI_CHUNK", "lots", 1);
    ls_comm *bad = NULL;
    LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_MPI_CHUNK=lots: expected a size such as 16MiB, 4096 or 0");
    LS_EXPECT(bad == NULL);
    setenv("LOCKSTEP_MPI_CHUNK", "100", 1);
    LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_MPI_CHUNK=100: below the 4 KiB minimum");
    LS_EXPECT(bad == NULL);
    /* a bad value on one rank: that rank names it, the others fail with it instead of waiting */
    if (W > 1) {
        setenv("LOCKSTEP_MPI_CHUNK", R == 0 ? "lots" : "4KiB", 1);
        if (R == 0)
            LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad), LS_ERR_INVALID_ARGUMENT,
                          "LOCKSTEP_MPI_CHUNK=lots: expected a size");
        else
            LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad), LS_ERR_COMM,
                          "another rank refused its settings (LOCKSTEP_MPI_CHUNK, LOCKSTEP_MPI_PROGRESS or "
                          "LOCKSTEP_MPI_WINDOW");
        LS_EXPECT(bad == NULL);
        const char *prog = getenv("LOCKSTEP_MPI_PROGRESS");
        char *saved = prog ? strdup(prog) : NULL;
        unsetenv("LOCKSTEP_MPI_CHUNK");
        if (R == W - 1) setenv("LOCKSTEP_MPI_PROGRESS", "eventually", 1);
        if (R == W - 1)
            LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad), LS_ERR_INVALID_ARGUMENT,
                          "LOCKSTEP_MPI_PROGRESS=eventually: expected thread or nonblocking");
        else
            LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad), LS_ERR_COMM, "another rank refused its settings");
        LS_EXPECT(bad == NULL);
        if (saved)
            setenv("LOCKSTEP_MPI_PROGRESS", saved, 1);
        else
            unsetenv("LOCKSTEP_MPI_PROGRESS");
        free(saved);
    }

    /* nonblocking, window 1: an MPI call that fails when a test posts it. The request it belongs to
     * reports it at its wait, and every later collective of that communicator fails (its queued
     * calls could no longer pair with the other ranks'); the request already done is fine. */
    if (nonblocking && window == 1) {
        ls_comm *fc = make_comm(NULL);
        float x[100], y[100], z = 1;
        for (int i = 0; i < 100; i++) x[i] = y[i] = 1;
        ls_comm_request *r1 = NULL, *r2 = NULL;
        fail_iallreduce_at = atomic_load(&calls) + 2; /* the second from now: r2's, posted by a test */
        LS_REQUIRE_OK(ls_comm_iallreduce(fc, x, 100, LS_F32, LS_REDUCE_SUM, &r1));
        LS_REQUIRE_OK(ls_comm_iallreduce(fc, y, 100, LS_F32, LS_REDUCE_SUM, &r2));
        for (int done = 0, k = 0; !done && k < 100000000; k++)
            if (ls_comm_test(r1, &done) != LS_OK) break;
        LS_EXPECT(ls_comm_wait(&r1) == LS_OK);
        LS_EXPECT(x[0] == (float)W);
        int done2 = 0;
        LS_EXPECT_ERR(ls_comm_test(r2, &done2), LS_ERR_COMM, "MPI_Iallreduce");
        LS_EXPECT_ERR(ls_comm_wait(&r2), LS_ERR_COMM, "MPI_Iallreduce"); /* still, after the test */
        LS_EXPECT_ERR(ls_comm_allreduce(fc, &z, 1, LS_F32, LS_REDUCE_SUM), LS_ERR_COMM,
                      "the MPI communicator stopped after an earlier error (MPI_Iallreduce failed");
        fail_iallreduce_at = -1;
        ls_comm_destroy(fc);
    }

    /* LOCKSTEP_MPI_WINDOW: a bad value is an error on that rank and fails the others with it */
    {
        char *saved = we ? strdup(we) : NULL;
        setenv("LOCKSTEP_MPI_WINDOW", "-3", 1);
        ls_comm *bad_w = NULL;
        if (W == 1)
            LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad_w), LS_ERR_INVALID_ARGUMENT,
                          "LOCKSTEP_MPI_WINDOW=-3: expected a count of MPI calls from 0 to 1000000 (0: no limit)");
        /* digits only: strtol took a space and a '+' (rank 0's " 2" against the others' 1) */
        static const char *const bad_windows[] = {"-3", " 2", "+2"};
        for (size_t i = 0; W > 1 && i < sizeof bad_windows / sizeof bad_windows[0]; i++) {
            setenv("LOCKSTEP_MPI_WINDOW", R == 0 ? bad_windows[i] : "1", 1);
            char want[96];
            snprintf(want, sizeof want, "LOCKSTEP_MPI_WINDOW=%s: expected a count of MPI calls from 0 to 1000000",
                     bad_windows[i]);
            if (R == 0)
                LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad_w), LS_ERR_INVALID_ARGUMENT, want);
            else
                LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &bad_w), LS_ERR_COMM, "another rank refused its settings");
        }
        LS_EXPECT(bad_w == NULL);
        if (saved)
            setenv("LOCKSTEP_MPI_WINDOW", saved, 1);
        else
            unsetenv("LOCKSTEP_MPI_WINDOW");
        free(saved);
    }

    /* every rank's failures decide for all */
    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(keep, &fails, 1, LS_I32, LS_REDUCE_SUM));
    if (R == 0) printf("mpi all-reduce parts, %d rank(s): %d failed check(s) in all\n", W, (int)fails);
    ls_comm_destroy(keep);
    if (fails && !ls_test_failures) ls_test_failures = 1;
    LS_TEST_END();
}
