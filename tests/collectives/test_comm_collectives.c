/* test_comm_collectives.c: every collective of the automatically chosen communicator (self when
 * run alone, mpi under mpirun) against reference results: allreduce (sum/avg/max/min), broadcast
 * from every root, allgather and reduce-scatter (also in place), reduce to every root (the others'
 * buffers left as they were; in parts and async), reduce and broadcast in segments of several roots
 * (all in flight at once), barrier, over every dtype and
 * counts 0, 1, odd sizes and a few million elements; async variants with several requests in
 * flight, test/wait, a blocking collective while requests are in flight; host variants; argument
 * errors; a communicator destroyed with requests in flight (argument destroy-in-flight). Run with
 * any number of ranks. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "commtest.h"
#include "testutil.h"

static ls_comm *C;
static int R, W;

static void *xalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    LS_REQUIRE(p);
    return p;
}

/* Count the elements of buf (dtype t) that differ from want(i); report the first. */
#define CHECK_ELEMS(what, buf, t, n, want_expr) CT_CHECK_ELEMS(R, what, buf, t, n, want_expr)

static const int64_t counts[] = {0, 1, 2, 7, 1023};
#define NCOUNTS ((int)(sizeof counts / sizeof counts[0]))

static void test_allreduce(void) {
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX, LS_REDUCE_MIN};
    int salt = 0;
    for (int d = 0; d < CT_NDTYPES; d++)
        for (int o = 0; o < 4; o++)
            for (int k = 0; k < NCOUNTS; k++, salt++) {
                ls_dtype t = ct_all_dtypes[d];
                int64_t n = counts[k];
                void *buf = xalloc((size_t)n * ls_dtype_size(t));
                for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, salt));
                LS_REQUIRE_OK(ls_comm_allreduce(C, n ? buf : NULL, n, t, ops[o]));
                char what[64];
                snprintf(what, sizeof what, "allreduce %s", ls_reduce_op_name(ops[o]));
                CHECK_ELEMS(what, buf, t, n, ct_expect(t, ops[o], W, i, salt));
                free(buf);
            }
}

/* Max and min with NaN on one rank (element j: on rank j), on every rank (element W): the max or
 * min of the numbers, whichever rank holds the NaN (MPI_MAX kept rank 0's NaN and dropped the last
 * rank's); NaN where every rank has one. All-reduce, reduce to the last rank, reduce-scatter. */
static void test_minmax_nan(void) {
    static const ls_dtype fts[] = {LS_F32, LS_F64, LS_F16, LS_BF16};
    const double nan = strtod("nan", NULL);
    for (int d = 0; d < 4; d++)
        for (int mx = 0; mx < 2; mx++)
            for (int kind = 0; kind < 3; kind++) {
                ls_dtype t = fts[d];
                ls_reduce_op op = mx ? LS_REDUCE_MAX : LS_REDUCE_MIN;
                const int64_t n = W + 1, len = kind == 2 ? n * W : n; /* reduce-scatter: n per rank */
                void *buf = xalloc((size_t)len * ls_dtype_size(t)), *out = xalloc((size_t)n * ls_dtype_size(t));
                for (int64_t i = 0; i < len; i++) {
                    const int64_t j = i % n;
                    ct_set(buf, t, i, j == W || j == R ? nan : (double)(R + 1));
                }
                ls_status s = kind == 0   ? ls_comm_allreduce(C, buf, n, t, op)
                              : kind == 1 ? ls_comm_reduce(C, buf, n, t, op, W - 1)
                                          : ls_comm_reduce_scatter(C, buf, out, n, t, op);
                LS_REQUIRE_OK(s);
                const void *got = kind == 2 ? out : buf;
                int bad = 0;
                for (int64_t j = 0; j < n && !(kind == 1 && R != W - 1); j++) { /* a reduce: at its root */
                    double want = nan; /* the max or min of r + 1 over the ranks r != j */
                    for (int r = 0; r < W; r++)
                        if (r != j && j < W) want = want != want ? r + 1 : mx ? fmax(want, r + 1) : fmin(want, r + 1);
                    double g = ct_get(got, t, j);
                    if (want != want ? g == g : g != want) {
                        if (!bad++)
                            fprintf(stderr, "rank %d: %s %s %s: element %lld (NaN on %s) = %g, expected %g\n", R,
                                    kind == 0   ? "allreduce"
                                    : kind == 1 ? "reduce"
                                                : "reduce-scatter",
                                    ls_reduce_op_name(op), ls_dtype_name(t), (long long)j,
                                    j < W ? "one rank" : "every rank", g, want);
                    }
                }
                LS_EXPECT(bad == 0);
                free(buf);
                free(out);
            }
}

/* Sums in the buffer's type (comm.h): u8 and i32 sums wrap, and the avg divides the wrapped sum;
 * an f16 sum past 65504 is inf (its avg, in f32, is not). */
static void test_sum_in_type(void) {
    uint8_t u[2] = {200, 200};
    LS_REQUIRE_OK(ls_comm_allreduce(C, &u[0], 1, LS_U8, LS_REDUCE_SUM));
    LS_REQUIRE_OK(ls_comm_allreduce(C, &u[1], 1, LS_U8, LS_REDUCE_AVG));
    LS_EXPECT(u[0] == (200 * W) % 256);
    LS_EXPECT(u[1] == (200 * W) % 256 / W);
    int32_t big = INT32_MAX - 1, want = (int32_t)(uint32_t)((uint32_t)(INT32_MAX - 1) * (uint32_t)W);
    LS_REQUIRE_OK(ls_comm_allreduce(C, &big, 1, LS_I32, LS_REDUCE_SUM));
    LS_EXPECT(big == want);
    uint16_t h[2] = {ls_hi_f32_to_f16(60000.0f), ls_hi_f32_to_f16(-60000.0f)}, a = ls_hi_f32_to_f16(60000.0f);
    LS_REQUIRE_OK(ls_comm_allreduce(C, h, 2, LS_F16, LS_REDUCE_SUM));
    LS_REQUIRE_OK(ls_comm_allreduce(C, &a, 1, LS_F16, LS_REDUCE_AVG));
    LS_EXPECT(W == 1 ? ls_hi_f16_to_f32(h[0]) == 60000.0f
                     : isinf(ls_hi_f16_to_f32(h[0])) && ls_hi_f16_to_f32(h[0]) > 0);
    LS_EXPECT(W == 1 ? ls_hi_f16_to_f32(h[1]) == -60000.0f
                     : isinf(ls_hi_f16_to_f32(h[1])) && ls_hi_f16_to_f32(h[1]) < 0);
    LS_EXPECT(ls_hi_f16_to_f32(a) == 60000.0f);
}

static void test_allreduce_large(void) {
    const int64_t n = 3000001;
    float *a = xalloc((size_t)n * 4), *b = xalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) a[i] = b[i] = (float)ct_val(LS_F32, R, i, 1);
    LS_REQUIRE_OK(ls_comm_allreduce(C, a, n, LS_F32, LS_REDUCE_SUM));
    CHECK_ELEMS("large allreduce", a, LS_F32, n, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 1));
    ls_comm_request *req = NULL;
    LS_REQUIRE_OK(ls_comm_iallreduce(C, b, n, LS_F32, LS_REDUCE_AVG, &req));
    LS_REQUIRE_OK(ls_comm_wait(&req));
    CHECK_ELEMS("large iallreduce avg", b, LS_F32, n, ct_expect(LS_F32, LS_REDUCE_AVG, W, i, 1));
    free(a);
    free(b);
}

static void test_broadcast(void) {
    static const int64_t bc[] = {0, 1, 7, 100003};
    for (int root = 0; root < W; root++)
        for (int d = 0; d < CT_NDTYPES; d++)
            for (int k = 0; k < 4; k++) {
                ls_dtype t = ct_all_dtypes[d];
                int64_t n = bc[k];
                void *buf = xalloc((size_t)n * ls_dtype_size(t));
                for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 3));
                LS_REQUIRE_OK(ls_comm_broadcast(C, buf, n, t, root));
                CHECK_ELEMS("broadcast", buf, t, n, ct_val(t, root, i, 3));
                free(buf);
            }
}

static void test_allgather(void) {
    static const int64_t gc[] = {0, 1, 5, 4099};
    for (int d = 0; d < CT_NDTYPES; d++)
        for (int k = 0; k < 4; k++)
            for (int inplace = 0; inplace < 2; inplace++) {
                ls_dtype t = ct_all_dtypes[d];
                int64_t n = gc[k];
                size_t es = ls_dtype_size(t);
                void *recv = xalloc((size_t)n * (size_t)W * es);
                memset(recv, 0xab, (size_t)n * (size_t)W * es);
                void *send = inplace ? (char *)recv + (size_t)R * (size_t)n * es : xalloc((size_t)n * es);
                for (int64_t i = 0; i < n; i++) ct_set(send, t, i, ct_val(t, R, i, 4));
                LS_REQUIRE_OK(ls_comm_allgather(C, send, recv, n, t));
                CHECK_ELEMS(inplace ? "allgather in place" : "allgather", recv, t, n * W,
                            ct_val(t, (int)(i / (n ? n : 1)), i % (n ? n : 1), 4));
                if (!inplace) free(send);
                free(recv);
            }
}

/* In place is NCCL's form, recv == send + rank * count_per_rank (this rank's block of send; rank 0:
 * send == recv), blocking and async: on MPI, ranks past 0 passed it to MPI_Reduce_scatter_block as
 * two overlapping buffers, which MPI does not allow. */
static void test_reduce_scatter(void) {
    static const int64_t rc[] = {0, 1, 5, 4099};
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX, LS_REDUCE_MIN};
    for (int d = 0; d < CT_NDTYPES; d++)
        for (int o = 0; o < 4; o++)
            for (int k = 0; k < 4; k++)
                for (int inplace = 0; inplace < 3; inplace++) { /* 2: in place, async */
                    ls_dtype t = ct_all_dtypes[d];
                    int64_t n = rc[k];
                    size_t es = ls_dtype_size(t);
                    void *send = xalloc((size_t)n * (size_t)W * es);
                    for (int64_t j = 0; j < n * W; j++) ct_set(send, t, j, ct_val(t, R, j, 5 + o));
                    void *recv = inplace ? (char *)send + (size_t)R * (size_t)n * es : xalloc((size_t)n * es);
                    if (inplace == 2) {
                        ls_comm_request *q = NULL;
                        LS_REQUIRE_OK(ls_comm_ireduce_scatter(C, send, recv, n, t, ops[o], &q));
                        LS_REQUIRE_OK(ls_comm_wait(&q));
                    } else {
                        LS_REQUIRE_OK(ls_comm_reduce_scatter(C, send, recv, n, t, ops[o]));
                    }
                    char what[64];
                    snprintf(what, sizeof what, "reduce-scatter %s%s", ls_reduce_op_name(ops[o]),
                             inplace == 2 ? " in place, async"
                             : inplace    ? " in place"
                                          : "");
                    CHECK_ELEMS(what, recv, t, n, ct_expect(t, ops[o], W, (int64_t)R * n + i, 5 + o));
                    if (!inplace) free(recv);
                    free(send);
                }
}

/* Reduce to every root, in place: the root holds the reduction, every other rank its own input. */
static void test_reduce(void) {
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX, LS_REDUCE_MIN};
    for (int root = 0; root < W; root++)
        for (int d = 0; d < CT_NDTYPES; d++)
            for (int o = 0; o < 4; o++)
                for (int k = 0; k < NCOUNTS; k++) {
                    ls_dtype t = ct_all_dtypes[d];
                    int64_t n = counts[k];
                    int salt = 11 + o + k;
                    void *buf = xalloc((size_t)n * ls_dtype_size(t));
                    for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, salt));
                    LS_REQUIRE_OK(ls_comm_reduce(C, n ? buf : NULL, n, t, ops[o], root));
                    char what[64];
                    snprintf(what, sizeof what, "reduce %s to %d", ls_reduce_op_name(ops[o]), root);
                    if (R == root)
                        CHECK_ELEMS(what, buf, t, n, ct_expect(t, ops[o], W, i, salt));
                    else
                        CHECK_ELEMS(what, buf, t, n, ct_val(t, R, i, salt));
                    free(buf);
                }
    /* a few million elements (MPI: in parts of LOCKSTEP_MPI_CHUNK), blocking and async */
    const int64_t n = 3000001;
    float *a = xalloc((size_t)n * 4), *b = xalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) a[i] = b[i] = (float)ct_val(LS_F32, R, i, 2);
    LS_REQUIRE_OK(ls_comm_reduce(C, a, n, LS_F32, LS_REDUCE_SUM, W - 1));
    if (R == W - 1)
        CHECK_ELEMS("large reduce", a, LS_F32, n, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 2));
    else
        CHECK_ELEMS("large reduce (not the root)", a, LS_F32, n, ct_val(LS_F32, R, i, 2));
    ls_comm_request *req[2] = {NULL, NULL};
    LS_REQUIRE_OK(ls_comm_ireduce(C, b, n / 2, LS_F32, LS_REDUCE_AVG, 0, &req[0]));
    LS_REQUIRE_OK(ls_comm_ireduce(C, b + n / 2, n - n / 2, LS_F32, LS_REDUCE_SUM, W / 2, &req[1]));
    LS_REQUIRE_OK(ls_comm_wait(&req[0]));
    LS_REQUIRE_OK(ls_comm_wait(&req[1]));
    CHECK_ELEMS("large ireduce avg", b, LS_F32, n / 2,
                R == 0 ? ct_expect(LS_F32, LS_REDUCE_AVG, W, i, 2) : ct_val(LS_F32, R, i, 2));
    CHECK_ELEMS("large ireduce sum", b + n / 2, LS_F32, n - n / 2,
                R == W / 2 ? ct_expect(LS_F32, LS_REDUCE_SUM, W, i + n / 2, 2) : ct_val(LS_F32, R, i + n / 2, 2));
    free(a);
    free(b);
}

/* In segments: consecutive segments of one buffer, each reduced to (or broadcast from) its own
 * root, every one in flight at once; empty segments, one over several MPI parts (LOCKSTEP_MPI_CHUNK
 * in the chunked tests), two calls in flight together. */
static void test_segments(void) {
    enum { NS = 6 };
    static const int64_t cnt[NS] = {5, 0, 1023, 1, 300001, 17};
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX};
    int roots[NS];
    int64_t total = 0, start[NS];
    for (int j = 0; j < NS; j++) {
        roots[j] = (j * 2 + 1) % W;
        start[j] = total;
        total += cnt[j];
    }
    for (int d = 0; d < CT_NDTYPES; d++)
        for (int o = 0; o < 3; o++) {
            ls_dtype t = ct_all_dtypes[d];
            int salt = 30 + o;
            void *a = xalloc((size_t)total * ls_dtype_size(t)), *b = xalloc((size_t)total * ls_dtype_size(t));
            for (int64_t i = 0; i < total; i++) {
                ct_set(a, t, i, ct_val(t, R, i, salt));
                ct_set(b, t, i, ct_val(t, R, i, salt + 9));
            }
            ls_comm_request *ra = NULL, *rb = NULL;
            LS_REQUIRE_OK(ls_comm_ireduce_segments(C, a, NS, cnt, roots, t, ops[o], &ra));
            LS_REQUIRE_OK(ls_comm_ibroadcast_segments(C, b, NS, cnt, roots, t, &rb));
            LS_REQUIRE_OK(ls_comm_wait(&ra));
            LS_REQUIRE_OK(ls_comm_wait(&rb));
            for (int j = 0; j < NS; j++) {
                char what[64];
                snprintf(what, sizeof what, "reduce %s, segment %d (root %d)", ls_reduce_op_name(ops[o]), j, roots[j]);
                const void *seg = (const char *)a + (size_t)start[j] * ls_dtype_size(t);
                if (roots[j] == R)
                    CHECK_ELEMS(what, seg, t, cnt[j], ct_expect(t, ops[o], W, i + start[j], salt));
                else
                    CHECK_ELEMS(what, seg, t, cnt[j], ct_val(t, R, i + start[j], salt));
                snprintf(what, sizeof what, "broadcast, segment %d (root %d)", j, roots[j]);
                CHECK_ELEMS(what, (const char *)b + (size_t)start[j] * ls_dtype_size(t), t, cnt[j],
                            ct_val(t, roots[j], i + start[j], salt + 9));
            }
            free(a);
            free(b);
        }
    float f[2] = {0, 0};
    LS_EXPECT_ERR(ls_comm_ireduce_segments(C, f, 1, (int64_t[]){2}, (int[]){W}, LS_F32, LS_REDUCE_SUM,
                                           &(ls_comm_request *){NULL}),
                  LS_ERR_INVALID_ARGUMENT, "segment 0's root");
    LS_EXPECT_ERR(ls_comm_ibroadcast_segments(C, f, 0, NULL, NULL, LS_F32, &(ls_comm_request *){NULL}),
                  LS_ERR_INVALID_ARGUMENT, "no segments");
    LS_EXPECT_ERR(ls_comm_ireduce_segments(C, f, 2, (int64_t[]){1, -1}, (int[]){0, 0}, LS_F32, LS_REDUCE_SUM,
                                           &(ls_comm_request *){NULL}),
                  LS_ERR_INVALID_ARGUMENT, "segment 1 has a negative count");
}

/* Several async collectives in flight, completed by test and wait, with a blocking collective
 * issued while they are in flight (it must stay ordered after them). */
static void test_async(void) {
    enum { K = 6 };
    const int64_t n = 20011;
    float *bufs[K];
    ls_comm_request *reqs[K];
    for (int k = 0; k < K; k++) {
        bufs[k] = xalloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) bufs[k][i] = (float)ct_val(LS_F32, R, i, 10 + k);
        LS_REQUIRE_OK(ls_comm_iallreduce(C, bufs[k], n, LS_F32, LS_REDUCE_SUM, &reqs[k]));
    }
    double *bc = xalloc(5 * sizeof(double));
    for (int i = 0; i < 5; i++) bc[i] = R * 10 + i;
    ls_comm_request *rb = NULL, *rg = NULL, *rs = NULL, *rbar = NULL;
    LS_REQUIRE_OK(ls_comm_ibroadcast(C, bc, 5, LS_F64, W - 1, &rb));
    int32_t *gs = xalloc(3 * sizeof(int32_t)), *gr = xalloc((size_t)W * 3 * sizeof(int32_t));
    for (int i = 0; i < 3; i++) gs[i] = R * 100 + i;
    LS_REQUIRE_OK(ls_comm_iallgather(C, gs, gr, 3, LS_I32, &rg));
    float *ss = xalloc((size_t)W * 2 * 4), *sr = xalloc(2 * 4);
    for (int j = 0; j < W * 2; j++) ss[j] = (float)(j + R);
    LS_REQUIRE_OK(ls_comm_ireduce_scatter(C, ss, sr, 2, LS_F32, LS_REDUCE_MAX, &rs));
    LS_REQUIRE_OK(ls_comm_ibarrier(C, &rbar));

    /* blocking while requests are in flight */
    int32_t x = R + 1;
    LS_REQUIRE_OK(ls_comm_allreduce(C, &x, 1, LS_I32, LS_REDUCE_SUM));
    LS_EXPECT(x == W * (W + 1) / 2);

    /* poll the first two with test until done, then wait (which frees) */
    for (int k = 0; k < 2; k++) {
        int done = 0;
        for (long spins = 0; !done; spins++) {
            LS_REQUIRE_OK(ls_comm_test(reqs[k], &done));
            LS_REQUIRE(spins < 100000000L);
        }
        int again = 0;
        LS_REQUIRE_OK(ls_comm_test(reqs[k], &again)); /* done stays done */
        LS_EXPECT(again == 1);
    }
    /* wait in reverse order: completion order must not matter to the caller; every other one in
     * stream order (on the CPU backends a plain wait: the results are on the host after it) */
    for (int k = K - 1; k >= 0; k--) LS_REQUIRE_OK(k % 2 ? ls_comm_wait_stream(&reqs[k]) : ls_comm_wait(&reqs[k]));
    LS_REQUIRE_OK(ls_comm_wait_stream(NULL));
    LS_REQUIRE_OK(ls_comm_wait(&rbar));
    LS_REQUIRE_OK(ls_comm_wait(&rs));
    LS_REQUIRE_OK(ls_comm_wait(&rg));
    LS_REQUIRE_OK(ls_comm_wait(&rb));
    LS_REQUIRE_OK(ls_comm_wait(NULL));
    /* a wait clears the caller's handle: waiting again (on a request freed by the first wait, a use
     * after free under ASan) is a no-op, as MPI_Wait on MPI_REQUEST_NULL */
    for (int k = 0; k < K; k++) LS_EXPECT(reqs[k] == NULL);
    LS_EXPECT(rbar == NULL && rs == NULL && rg == NULL && rb == NULL);
    LS_EXPECT(ls_comm_wait(&rb) == LS_OK && ls_comm_wait_stream(&reqs[1]) == LS_OK);
    for (int k = 0; k < K; k++) {
        CHECK_ELEMS("iallreduce", bufs[k], LS_F32, n, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 10 + k));
        free(bufs[k]);
    }
    CHECK_ELEMS("ibroadcast", bc, LS_F64, 5, (W - 1) * 10 + i);
    CHECK_ELEMS("iallgather", gr, LS_I32, W * 3, (i / 3) * 100 + i % 3);
    CHECK_ELEMS("ireduce_scatter", sr, LS_F32, 2, (R * 2 + i) + (W - 1));
    free(bc);
    free(gs);
    free(gr);
    free(ss);
    free(sr);
}

static void test_host_variants(void) {
    double v[3] = {R, 1, -R};
    LS_REQUIRE_OK(ls_comm_allreduce_host(C, v, 3, LS_F64, LS_REDUCE_SUM));
    LS_EXPECT(v[0] == W * (W - 1) / 2.0 && v[1] == W && v[2] == -W * (W - 1) / 2.0);
    int32_t b = R == 0 ? 42 : -1;
    LS_REQUIRE_OK(ls_comm_broadcast_host(C, &b, 1, LS_I32, 0));
    LS_EXPECT(b == 42);
    int32_t mine = R * 3, *all = xalloc((size_t)W * 4);
    LS_REQUIRE_OK(ls_comm_allgather_host(C, &mine, all, 1, LS_I32));
    for (int r = 0; r < W; r++) LS_EXPECT(all[r] == r * 3);
    free(all);
    LS_REQUIRE_OK(ls_comm_barrier(C));
}

static void test_errors(void) {
    float f = 0;
    LS_EXPECT_ERR(ls_comm_broadcast(C, &f, 1, LS_F32, W), LS_ERR_INVALID_ARGUMENT, "is not a rank of");
    LS_EXPECT_ERR(ls_comm_broadcast(C, &f, 1, LS_F32, -1), LS_ERR_INVALID_ARGUMENT, "root -1");
    LS_EXPECT_ERR(ls_comm_allreduce(C, &f, -1, LS_F32, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT, "negative count");
    LS_EXPECT_ERR(ls_comm_allreduce(C, NULL, 4, LS_F32, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT, "buffer is NULL");
    LS_EXPECT_ERR(ls_comm_allreduce(C, &f, 1, (ls_dtype)99, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT, "dtype");
    LS_EXPECT_ERR(ls_comm_allreduce(C, &f, 1, LS_F32, (ls_reduce_op)9), LS_ERR_INVALID_ARGUMENT, "reduction");
    LS_EXPECT_ERR(ls_comm_iallreduce(C, &f, 1, LS_F32, LS_REDUCE_SUM, NULL), LS_ERR_INVALID_ARGUMENT,
                  "request pointer");
    LS_EXPECT_ERR(ls_comm_allgather(C, NULL, &f, 1, LS_F32), LS_ERR_INVALID_ARGUMENT, "send buffer is NULL");
    LS_EXPECT_ERR(ls_comm_reduce(C, &f, 1, LS_F32, LS_REDUCE_SUM, W), LS_ERR_INVALID_ARGUMENT, "reduce: root");
    /* a send buffer inside the receive buffer but not this rank's block (send == recv on rank 1 of 2
     * gave rank 0's values in rank 1's block, without an error): refused, on every rank, even where
     * it is this rank's block on another rank; this rank's block is in place */
    float g[20] = {0};
    char want[256];
    snprintf(want, sizeof want,
             "is not this rank's block of it (in place is send == recv + rank * count_per_rank, "
             "here recv + %d * 3)",
             R);
    LS_EXPECT_ERR(ls_comm_allgather(C, g + 1, g, 3, LS_F32), LS_ERR_INVALID_ARGUMENT, want);
    LS_EXPECT_ERR(ls_comm_allgather(C, g + 3 * R + 2, g, 3, LS_F32), LS_ERR_INVALID_ARGUMENT, "overlaps");
    LS_EXPECT_ERR(ls_comm_allgather(C, g + 3 * R, g + 1, 3, LS_F32), LS_ERR_INVALID_ARGUMENT, "overlaps");
    LS_EXPECT_ERR(ls_comm_iallgather(C, g + 1, g, 3, LS_F32, &(ls_comm_request *){NULL}), LS_ERR_INVALID_ARGUMENT,
                  "overlaps");
    /* send == recv, as a reduce-scatter's in place (rank 0's block: an overlap elsewhere there) */
    LS_EXPECT_ERR(ls_comm_allgather(C, R ? g : g + 1, g, 3, LS_F32), LS_ERR_INVALID_ARGUMENT, "overlaps");
    /* right after the receive buffer, or right before it: no overlap */
    float *h = xalloc((size_t)(W + 2) * 3 * sizeof *h);
    for (int i = 0; i < 3; i++) h[i] = h[3 * (W + 1) + i] = (float)(R * 10 + i);
    LS_REQUIRE_OK(ls_comm_allgather(C, h, h + 3, 3, LS_F32));
    CHECK_ELEMS("allgather, send just before recv", h + 3, LS_F32, 3 * W, (i / 3) * 10 + i % 3);
    for (int i = 0; i < 3; i++) h[3 * (W + 1) + i] = (float)(R * 10 + i);
    LS_REQUIRE_OK(ls_comm_allgather(C, h + 3 * (W + 1), h + 3, 3, LS_F32));
    CHECK_ELEMS("allgather, send just after recv", h + 3, LS_F32, 3 * W, (i / 3) * 10 + i % 3);
    free(h);
    /* reduce-scatter: a receive buffer inside the send buffer other than this rank's block (MPI's
     * in place, send == recv, on a rank past 0: NCCL reads it as two overlapping buffers) is refused
     * on every rank alike; this rank's block is in place */
    snprintf(want, sizeof want,
             "reduce-scatter: the receive buffer overlaps the send buffer but is not this rank's block of it "
             "(in place is recv == send + rank * count_per_rank, here send + %d * 3)",
             R);
    LS_EXPECT_ERR(ls_comm_reduce_scatter(C, g, g + 1, 3, LS_F32, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT, want);
    LS_EXPECT_ERR(ls_comm_reduce_scatter(C, g, g + 3 * R + 1, 3, LS_F32, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT,
                  "overlaps");
    LS_EXPECT_ERR(ls_comm_reduce_scatter(C, g + 1, g + 3 * R, 3, LS_F32, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT,
                  "overlaps");
    LS_EXPECT_ERR(ls_comm_ireduce_scatter(C, g, g + 1, 3, LS_F32, LS_REDUCE_SUM, &(ls_comm_request *){NULL}),
                  LS_ERR_INVALID_ARGUMENT, "overlaps");
    if (R > 0) /* send == recv: in place on rank 0 only */
        LS_EXPECT_ERR(ls_comm_reduce_scatter(C, g, g, 3, LS_F32, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT, "overlaps");
    LS_EXPECT_ERR(ls_comm_ireduce(C, &f, 1, LS_F32, (ls_reduce_op)9, 0, &(ls_comm_request *){NULL}),
                  LS_ERR_INVALID_ARGUMENT, "reduction");
}

/* "destroy-in-flight": the communicator destroyed with requests not waited for, more than the
 * nonblocking progress's window posts at once (comm.h asks for every one to be waited for): they are
 * carried out first (with nonblocking progress, those not yet posted were dropped, and MPI_Finalize
 * crashed in the progress of the others), and the process ends well. */
static int destroy_in_flight(void) {
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);
    enum { K = 5, N = 4099 };
    static float bufs[K][N];
    ls_comm_request *reqs[K + 1];
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) bufs[k][i] = (float)(ct_val(LS_F32, R, i, k));
        LS_REQUIRE_OK(ls_comm_iallreduce(C, bufs[k], N, LS_F32, LS_REDUCE_SUM, &reqs[k]));
    }
    LS_REQUIRE_OK(ls_comm_ibarrier(C, &reqs[K]));
    ls_comm_destroy(C);
    for (int k = 0; k < K; k++) {
        char what[64];
        snprintf(what, sizeof what, "all-reduce %d of %d not waited for", k + 1, K);
        CHECK_ELEMS(what, bufs[k], LS_F32, N, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, k));
    }
    LS_TEST_END();
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "destroy-in-flight")) return destroy_in_flight();
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);
    LS_EXPECT(R == ri.rank && W == ri.world);
    const char *want = strcmp(ri.launcher, "none") ? "mpi" : "self";
    if (getenv("LOCKSTEP_COMM") && *getenv("LOCKSTEP_COMM")) want = getenv("LOCKSTEP_COMM");
    LS_EXPECT(!strcmp(ls_comm_backend_name(C), want));
    LS_EXPECT(ls_comm_device(C).type == LS_DEVICE_CPU);
    LS_EXPECT(ls_comm_set_compute_stream(C, NULL) == LS_OK);

    test_allreduce();
    test_minmax_nan();
    test_sum_in_type();
    test_allreduce_large();
    test_broadcast();
    test_allgather();
    test_reduce_scatter();
    test_reduce();
    test_segments();
    test_async();
    test_host_variants();
    test_errors();

    /* every rank reports its failures to every rank, so all agree on the verdict */
    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(C, &fails, 1, LS_I32, LS_REDUCE_SUM));
    if (R == 0) printf("%s backend, %d rank(s): %d failed check(s) in all\n", ls_comm_backend_name(C), W, (int)fails);
    ls_comm_destroy(C);
    if (fails && !ls_test_failures) ls_test_failures = 1;
    LS_TEST_END();
}
