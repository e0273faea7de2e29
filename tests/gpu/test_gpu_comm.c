/* test_gpu_comm.c: the communicator on device buffers. Run alone with LOCKSTEP_COMM=nccl (a
 * one-rank NCCL communicator: every dtype mapping, op and stream path of comm_nccl.c runs, with
 * the trivial world of one) and under mpirun with LOCKSTEP_COMM=mpi (ranks sharing the GPU, device
 * buffers staged through the host) where the build has MPI. Checks allreduce (sum, avg, max, min)
 * over every dtype and counts from 0 to a million, broadcast from every root, allgather and
 * reduce-scatter into poisoned buffers, several async all-reduces in flight, and the ordering
 * with the compute stream: an op queued there just before a collective (not waited for) is seen
 * by it, and an op queued just after sees its result, also when the collective was completed in
 * stream order (ls_comm_wait_stream: the compute stream waits, the host does not). Exits 77 without a usable GPU. --cpu runs
 * the same on a CPU context (host buffers), so CI keeps the test itself honest. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/commtest.h"
#include "comm.h"
#include "ops.h"
#include "testutil.h"

static ls_ctx *X;
static ls_comm *C;
static int R, W;
static int n_checks;

static void *dalloc(size_t bytes) {
    void *d = NULL;
    LS_REQUIRE_OK(ls_alloc(X->alloc, bytes ? bytes : 1, "comm test buffer", &d));
    return d;
}
static void *halloc(size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    LS_REQUIRE(h);
    return h;
}
static void put(void *d, const void *h, size_t bytes) {
    if (bytes) LS_REQUIRE_OK(ls_allocator_copy(X->alloc, d, 1, h, 0, bytes));
}
static void get(void *h, const void *d, size_t bytes) {
    if (bytes) LS_REQUIRE_OK(ls_allocator_copy(X->alloc, h, 0, d, 1, bytes));
}
static void poison(void *d, size_t bytes) {
    void *h = halloc(bytes);
    memset(h, 0xab, bytes);
    put(d, h, bytes);
    free(h);
}

/* Compare host copy buf (dtype t, n elements) with want(i); report the first difference. */
#define CHECK_ELEMS(what, buf, t, n, want_expr)                                                                        \
    do {                                                                                                               \
        n_checks++;                                                                                                    \
        CT_CHECK_ELEMS(R, what, buf, t, n, want_expr);                                                                 \
    } while (0)

static const int64_t counts[] = {0, 1, 7, 1023, (1 << 20) + 3};
#define NCOUNTS ((int)(sizeof counts / sizeof counts[0]))

static void test_allreduce(void) {
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX, LS_REDUCE_MIN};
    int salt = 0;
    for (int d = 0; d < CT_NDTYPES; d++)
        for (int o = 0; o < 4; o++)
            for (int k = 0; k < NCOUNTS; k++, salt++) {
                ls_dtype t = ct_all_dtypes[d];
                int64_t n = counts[k];
                size_t bytes = (size_t)n * ls_dtype_size(t);
                void *h = halloc(bytes), *dv = dalloc(bytes);
                for (int64_t i = 0; i < n; i++) ct_set(h, t, i, ct_val(t, R, i, salt));
                put(dv, h, bytes);
                memset(h, 0xab, bytes);
                LS_REQUIRE_OK(ls_comm_allreduce(C, n ? dv : NULL, n, t, ops[o]));
                get(h, dv, bytes);
                char what[64];
                snprintf(what, sizeof what, "allreduce %s", ls_reduce_op_name(ops[o]));
                CHECK_ELEMS(what, h, t, n, ct_expect(t, ops[o], W, i, salt));
                ls_free(X->alloc, dv);
                free(h);
            }
}

static void test_broadcast(void) {
    for (int root = 0; root < W; root++)
        for (int d = 0; d < CT_NDTYPES; d++) {
            ls_dtype t = ct_all_dtypes[d];
            int64_t n = 100003;
            size_t bytes = (size_t)n * ls_dtype_size(t);
            void *h = halloc(bytes), *dv = dalloc(bytes);
            for (int64_t i = 0; i < n; i++) ct_set(h, t, i, ct_val(t, R, i, 3));
            put(dv, h, bytes);
            LS_REQUIRE_OK(ls_comm_broadcast(C, dv, n, t, root));
            get(h, dv, bytes);
            CHECK_ELEMS("broadcast", h, t, n, ct_val(t, root, i, 3));
            ls_free(X->alloc, dv);
            free(h);
        }
}

static void test_gather_scatter(void) {
    const int64_t n = 4099;
    for (int d = 0; d < CT_NDTYPES; d++) {
        ls_dtype t = ct_all_dtypes[d];
        size_t es = ls_dtype_size(t);
        void *h = halloc((size_t)n * (size_t)W * es), *send = dalloc((size_t)n * es);
        void *recv = dalloc((size_t)n * (size_t)W * es);
        for (int64_t i = 0; i < n; i++) ct_set(h, t, i, ct_val(t, R, i, 4));
        put(send, h, (size_t)n * es);
        poison(recv, (size_t)n * (size_t)W * es);
        LS_REQUIRE_OK(ls_comm_allgather(C, send, recv, n, t));
        get(h, recv, (size_t)n * (size_t)W * es);
        CHECK_ELEMS("allgather", h, t, n * W, ct_val(t, (int)(i / n), i % n, 4));
        /* reduce-scatter (sum) of W blocks into this rank's block */
        for (int64_t j = 0; j < n * W; j++) ct_set(h, t, j, ct_val(t, R, j, 5));
        put(recv, h, (size_t)n * (size_t)W * es);
        poison(send, (size_t)n * es);
        LS_REQUIRE_OK(ls_comm_reduce_scatter(C, recv, send, n, t, LS_REDUCE_SUM));
        get(h, send, (size_t)n * es);
        CHECK_ELEMS("reduce-scatter sum", h, t, n, ct_expect(t, LS_REDUCE_SUM, W, (int64_t)R * n + i, 5));
        ls_free(X->alloc, send);
        ls_free(X->alloc, recv);
        free(h);
    }
}

/* Several all-reduces in flight on device buffers, completed in order by wait. */
static void test_async(void) {
    enum { K = 5 };
    const int64_t n = 300007;
    void *dv[K];
    ls_comm_request *req[K];
    float *h = halloc((size_t)n * 4);
    for (int k = 0; k < K; k++) {
        dv[k] = dalloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++) h[i] = (float)ct_val(LS_F32, R, i, 20 + k);
        put(dv[k], h, (size_t)n * 4);
        LS_REQUIRE_OK(ls_comm_iallreduce(C, dv[k], n, LS_F32, k % 2 ? LS_REDUCE_AVG : LS_REDUCE_SUM, &req[k]));
    }
    for (int k = 0; k < K; k++) {
        LS_REQUIRE_OK(ls_comm_wait(&req[k]));
        get(h, dv[k], (size_t)n * 4);
        ls_reduce_op op = k % 2 ? LS_REDUCE_AVG : LS_REDUCE_SUM;
        CHECK_ELEMS("iallreduce in flight", h, LS_F32, n, ct_expect(LS_F32, op, W, i, 20 + k));
        ls_free(X->alloc, dv[k]);
    }
    free(h);
}

/* The compute stream's work queued before a collective is part of its input; work queued after a
 * (completed) collective reads its result. Nothing waits for the device in between. Avg as well as
 * sum: a one-rank NCCL sum in place does nothing at all (so it would pass unordered), while avg
 * runs a kernel on the communication stream that reads the buffer. */
static void test_stream_order(void) {
    const int64_t n = (1 << 22) + 1;
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_AVG, LS_REDUCE_SUM};
    float *h = halloc((size_t)n * 4);
    void *dv = dalloc((size_t)n * 4);
    for (int o = 0; o < 4; o++) {
        int in_stream = o >= 2; /* started, then completed in stream order (ls_comm_wait_stream) */
        for (int64_t i = 0; i < n; i++) h[i] = (float)ct_val(LS_F32, R, i, 30);
        put(dv, h, (size_t)n * 4);
        /* queued, not waited for: ~1 GB of traffic keeps the GPU busy well past the collective's
         * enqueue, and only the last scale doubles the values */
        for (int k = 0; k < 32; k++) LS_REQUIRE_OK(X->ops->scale(X->state, LS_F32, n, k == 31 ? 2.0 : 1.0, dv));
        if (in_stream) {
            ls_comm_request *req = NULL;
            LS_REQUIRE_OK(ls_comm_iallreduce(C, dv, n, LS_F32, ops[o], &req));
            LS_REQUIRE_OK(ls_comm_wait_stream(&req)); /* the host goes on at once */
        } else {
            LS_REQUIRE_OK(ls_comm_allreduce(C, dv, n, LS_F32, ops[o])); /* must see the doubled values */
        }
        LS_REQUIRE_OK(X->ops->scale(X->state, LS_F32, n, 0.5, dv)); /* must see the reduced values */
        get(h, dv, (size_t)n * 4);
        char what[96];
        snprintf(what, sizeof what, "compute stream -> allreduce %s%s -> compute stream", ls_reduce_op_name(ops[o]),
                 in_stream ? " (waited for in stream order)" : "");
        CHECK_ELEMS(what, h, LS_F32, n, ct_expect(LS_F32, ops[o], W, i, 30));
    }
    ls_free(X->alloc, dv);
    free(h);
}

int main(int argc, char **argv) {
    int cpu = argc > 1 && !strcmp(argv[1], "--cpu");
    char why[256] = "";
    if (!cpu && ls_device_cuda_count(why, sizeof why) == 0) LS_SKIP("no usable CUDA device: %s", why);
    LS_REQUIRE_OK(ls_ctx_create(cpu ? ls_device_cpu() : (ls_device){LS_DEVICE_CUDA, 0}, NULL, &X));
    LS_REQUIRE_OK(ls_comm_create(X, NULL, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);
    test_allreduce();
    test_broadcast();
    test_gather_scatter();
    test_async();
    test_stream_order();
    if (!strcmp(ls_comm_backend_name(C), "nccl")) {
        /* plain host memory in a device collective: a clear error, not a fault on the GPU; the
         * host variant takes it */
        double h[2] = {1.0, 2.0};
        LS_EXPECT_ERR(ls_comm_allreduce(C, h, 2, LS_F64, LS_REDUCE_SUM), LS_ERR_INVALID_ARGUMENT,
                      "is host memory, which NCCL cannot use");
        LS_REQUIRE_OK(ls_comm_allreduce_host(C, h, 2, LS_F64, LS_REDUCE_SUM));
        LS_EXPECT(h[0] == 1.0 * W && h[1] == 2.0 * W);
        n_checks += 2;
    }
    LS_REQUIRE_OK(ls_comm_barrier(C));
    if (R == 0)
        printf("gpu comm: %s communicator, %d rank(s) on %s, %d checks, %d failed\n", ls_comm_backend_name(C), W,
               cpu ? "the cpu" : "cuda:0", n_checks, ls_test_failures);
    ls_comm_destroy(C);
    ls_ctx_destroy(X);
    LS_TEST_END();
}
