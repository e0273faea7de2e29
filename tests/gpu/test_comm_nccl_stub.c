/* test_comm_nccl_stub.c: the NCCL communicator (collectives/comm_nccl.c, compiled into this test)
 * over stand-ins for the CUDA runtime and NCCL (stub_cudart.c, stub_nccl.c), under mpirun with 2 and
 * 3 ranks on a machine without a GPU, and with 1 (the one-rank bootstrap over a self
 * communicator). What it checks is comm_nccl.c's own logic: the unique id bootstrap over MPI; every collective, dtype and reduction reaching NCCL as asked (results against
 * the reference); host buffers refused, the _host variants delegated to MPI; each collective
 * queued after an event recorded on the compute stream and awaited on the communication stream;
 * a timeout, an asynchronous error, a failed local setup on one rank and a failed ncclGetUniqueId
 * each ending in the right error on every rank, and an aborted communicator refusing further work;
 * a failed NCCL call and a CUDA error seen by a wait aborting the communicator (so that peers stop
 * waiting), a completion event that cannot be created leaving nothing queued, and destroy with a
 * collective unfinished aborting after the timeout, or at once after an asynchronous error; the
 * "not ready" of its polls cleared from the thread's last CUDA error; a wait
 * in stream order returning at once with the compute stream waiting for the completion event, and
 * the watchdog thread releasing completed events, stopping at destroy, and turning a timeout, an
 * asynchronous error and a failed kernel into its fatal action with the message. The
 * stand-in's collectives are synchronous MPI calls, so what is checked is each rank's own path,
 * not a peer really blocked. NCCL itself runs in test_gpu_comm, on a GPU. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"
#include "commtest.h"
#include "stub_cudart.h"
#include "stub_nccl.h"
#include "testutil.h"

static int R, W;

typedef struct nccl {
    const ls_comm_iface *f;
    void *st;
} nccl;

/* A NCCL communicator bootstrapped over a new MPI one (which it takes over on success). */
static ls_status make(double timeout_s, nccl *out) {
    ls_comm_env env;
    memset(&env, 0, sizeof env);
    env.device.type = LS_DEVICE_CUDA;
    env.device.index = 0;
    env.timeout_s = timeout_s;
    ls_comm *boot = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &boot));
    ls_status s = ls_comm_nccl_create(&env, boot, &out->f, &out->st);
    if (s != LS_OK) {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", ls_last_error());
        ls_comm_destroy(boot); /* still the caller's after a failure */
        ls_error(s, "%s", keep);
    }
    return s;
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    LS_REQUIRE(cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess);
    return p;
}

static ls_coll_op op_of(ls_coll_kind k, const void *send, void *recv, int64_t n, ls_dtype t, ls_reduce_op rop,
                        int root) {
    return (ls_coll_op){.kind = k, .send = send, .recv = recv, .count = n, .dtype = t, .op = rop, .root = root};
}

static void test_collectives(nccl *c) {
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX, LS_REDUCE_MIN};
    const int64_t n = 999;
    int salt = 0;
    for (int d = 0; d < CT_NDTYPES; d++)
        for (int o = 0; o < 4; o++, salt++) {
            const ls_dtype t = ct_all_dtypes[d];
            void *buf = dev_alloc((size_t)n * ls_dtype_size(t));
            for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, salt));
            ls_coll_op op = op_of(LS_COLL_ALLREDUCE, buf, buf, n, t, ops[o], 0);
            LS_REQUIRE_OK(c->f->run(c->st, &op));
            char what[64];
            snprintf(what, sizeof what, "allreduce %s", ls_reduce_op_name(ops[o]));
            CT_CHECK_ELEMS(R, what, buf, t, n, ct_expect(t, ops[o], W, i, salt));
            cudaFree(buf);
        }
    for (int root = 0; root < W; root++) {
        float *b = dev_alloc((size_t)n * sizeof *b);
        for (int64_t i = 0; i < n; i++) b[i] = (float)ct_val(LS_F32, R, i, 40);
        ls_coll_op op = op_of(LS_COLL_BROADCAST, b, b, n, LS_F32, LS_REDUCE_SUM, root);
        LS_REQUIRE_OK(c->f->run(c->st, &op));
        CT_CHECK_ELEMS(R, "broadcast", b, LS_F32, n, ct_val(LS_F32, root, i, 40));
        cudaFree(b);
    }
    for (int in_place = 0; in_place <= 1; in_place++) { /* allgather, f16 */
        uint16_t *all = dev_alloc((size_t)(n * W) * 2), *mine = in_place ? all + n * R : dev_alloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) ct_set(mine, LS_F16, i, ct_val(LS_F16, R, i, 41));
        ls_coll_op op = op_of(LS_COLL_ALLGATHER, mine, all, n, LS_F16, LS_REDUCE_SUM, 0);
        LS_REQUIRE_OK(c->f->run(c->st, &op));
        CT_CHECK_ELEMS(R, in_place ? "allgather in place" : "allgather", all, LS_F16, n * W,
                       ct_val(LS_F16, (int)(i / n), i % n, 41));
        if (!in_place) cudaFree(mine);
        cudaFree(all);
    }
    for (int o = 0; o < 2; o++) { /* reduce-scatter: sum and avg, bf16 and f32 */
        const ls_dtype t = o ? LS_F32 : LS_BF16;
        void *in = dev_alloc((size_t)(n * W) * ls_dtype_size(t)), *out = dev_alloc((size_t)n * ls_dtype_size(t));
        for (int64_t i = 0; i < n * W; i++) ct_set(in, t, i, ct_val(t, R, i, 42));
        ls_coll_op op = op_of(LS_COLL_REDUCE_SCATTER, in, out, n, t, ops[o], 0);
        LS_REQUIRE_OK(c->f->run(c->st, &op));
        CT_CHECK_ELEMS(R, "reduce-scatter", out, t, n, ct_expect(t, ops[o], W, i + n * R, 42));
        cudaFree(in);
        cudaFree(out);
    }
    for (int root = 0; root < W; root++) { /* reduce in place (ncclReduce): the root's sum, the others unchanged */
        float *b = dev_alloc((size_t)n * sizeof *b);
        for (int64_t i = 0; i < n; i++) b[i] = (float)ct_val(LS_F32, R, i, 43);
        ls_coll_op op = op_of(LS_COLL_REDUCE, b, b, n, LS_F32, LS_REDUCE_SUM, root);
        int64_t all = n; /* a reduce reaches a backend as one segment (ls_comm_reduce) */
        op.nseg = 1, op.seg_count = &all, op.seg_root = &root;
        LS_REQUIRE_OK(c->f->run(c->st, &op));
        CT_CHECK_ELEMS(R, "reduce", b, LS_F32, n,
                       R == root ? ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 43) : ct_val(LS_F32, R, i, 43));
        cudaFree(b);
    }
    { /* in segments: one NCCL group of reduces (and of broadcasts) to each segment's root */
        int64_t cnt[3] = {n / 2, 0, n - n / 2};
        int roots[3] = {W - 1, 0, 0};
        float *b = dev_alloc((size_t)n * sizeof *b), *c2 = dev_alloc((size_t)n * sizeof *c2);
        for (int64_t i = 0; i < n; i++) b[i] = (float)ct_val(LS_F32, R, i, 44), c2[i] = (float)ct_val(LS_F32, R, i, 45);
        ls_coll_op op = op_of(LS_COLL_REDUCE, b, b, n, LS_F32, LS_REDUCE_SUM, 0);
        op.nseg = 3, op.seg_count = cnt, op.seg_root = roots;
        LS_REQUIRE_OK(c->f->run(c->st, &op));
        CT_CHECK_ELEMS(R, "reduce in segments", b, LS_F32, n,
                       (i < n / 2 ? R == W - 1 : R == 0) ? ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 44)
                                                         : ct_val(LS_F32, R, i, 44));
        ls_coll_op bc = op_of(LS_COLL_BROADCAST, c2, c2, n, LS_F32, LS_REDUCE_SUM, 0);
        bc.nseg = 3, bc.seg_count = cnt, bc.seg_root = roots;
        LS_REQUIRE_OK(c->f->run(c->st, &bc));
        CT_CHECK_ELEMS(R, "broadcast in segments", c2, LS_F32, n, ct_val(LS_F32, i < n / 2 ? W - 1 : 0, i, 45));
        cudaFree(b);
        cudaFree(c2);
    }
    ls_coll_op bar = op_of(LS_COLL_BARRIER, NULL, NULL, 0, LS_I32, LS_REDUCE_SUM, 0);
    LS_REQUIRE_OK(c->f->run(c->st, &bar));

    /* several in flight, completed through test and then waited */
    enum { NR = 3 };
    float *b[NR];
    void *h[NR];
    for (int q = 0; q < NR; q++) {
        b[q] = dev_alloc((size_t)n * sizeof(float));
        for (int64_t i = 0; i < n; i++) b[q][i] = (float)ct_val(LS_F32, R, i, 50 + q);
        ls_coll_op op = op_of(LS_COLL_ALLREDUCE, b[q], b[q], n, LS_F32, LS_REDUCE_SUM, 0);
        LS_REQUIRE_OK(c->f->start(c->st, &op, &h[q]));
    }
    for (int q = NR - 1; q >= 0; q--) {
        int done = 0;
        LS_REQUIRE_OK(c->f->test(c->st, h[q], &done));
        LS_EXPECT(done == 1); /* the stand-in completes each collective as it is queued */
        LS_REQUIRE_OK(c->f->wait(c->st, h[q]));
        CT_CHECK_ELEMS(R, "async allreduce", b[q], LS_F32, n, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 50 + q));
        cudaFree(b[q]);
    }

    /* host buffers: refused on the device path (NCCL is never called), served by MPI when marked host */
    float *hb = malloc((size_t)n * sizeof *hb);
    LS_REQUIRE(hb);
    for (int64_t i = 0; i < n; i++) hb[i] = (float)ct_val(LS_F32, R, i, 60);
    long colls = stub_nccl_colls;
    ls_coll_op op = op_of(LS_COLL_ALLREDUCE, hb, hb, n, LS_F32, LS_REDUCE_SUM, 0);
    LS_EXPECT_ERR(c->f->run(c->st, &op), LS_ERR_INVALID_ARGUMENT, "NCCL communicator: the send buffer");
    LS_EXPECT(strstr(ls_last_error(), "is host memory, which NCCL cannot use") &&
              strstr(ls_last_error(), "ls_comm_allreduce_host"));
    void *dev = dev_alloc((size_t)(n * W) * sizeof(float));
    ls_coll_op ag = op_of(LS_COLL_ALLGATHER, hb, dev, n, LS_F32, LS_REDUCE_SUM, 0);
    LS_EXPECT_ERR(c->f->run(c->st, &ag), LS_ERR_INVALID_ARGUMENT, "the send buffer");
    cudaFree(dev);
    op.host = 1;
    LS_REQUIRE_OK(c->f->run(c->st, &op));
    CT_CHECK_ELEMS(R, "host allreduce", hb, LS_F32, n, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 60));
    for (int64_t i = 0; i < n; i++) hb[i] = (float)ct_val(LS_F32, R, i, 61);
    void *hh = NULL;
    LS_REQUIRE_OK(c->f->start(c->st, &op, &hh));
    LS_REQUIRE_OK(c->f->wait(c->st, hh));
    CT_CHECK_ELEMS(R, "host iallreduce", hb, LS_F32, n, ct_expect(LS_F32, LS_REDUCE_SUM, W, i, 61));
    LS_EXPECT(stub_nccl_colls == colls);
    free(hb);
}

/* Each collective: an event recorded on the compute stream, the communication stream waiting for
 * it, the collective on the communication stream, its completion event recorded there. */
static void test_ordering(nccl *c) {
    cudaStream_t compute = NULL;
    LS_REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
    float *b = dev_alloc(64 * sizeof *b);
    for (int pass = 0; pass < 2; pass++) {
        cudaStream_t cs = pass ? NULL : compute; /* NULL: the legacy default stream */
        LS_REQUIRE_OK(c->f->set_compute_stream(c->st, cs));
        stub_ntrace = 0;
        void *h = NULL;
        ls_coll_op op = op_of(LS_COLL_ALLREDUCE, b, b, 64, LS_F32, LS_REDUCE_SUM, 0);
        LS_REQUIRE_OK(c->f->start(c->st, &op, &h));
        const stub_call *t = stub_trace;
        int ok = stub_ntrace == 4 && !strcmp(t[0].what, "record") && t[0].b == (const void *)cs &&
                 !strcmp(t[1].what, "wait") && t[1].b == t[0].a && t[1].a != (const void *)cs &&
                 !strcmp(t[2].what, "allreduce") && t[2].b == t[1].a && !strcmp(t[3].what, "record") &&
                 t[3].b == t[1].a && t[3].a != t[0].a;
        if (!ok) {
            fprintf(stderr, "rank %d: calls queued for an allreduce (compute stream %p):\n", R, (void *)cs);
            for (int i = 0; i < stub_ntrace; i++) fprintf(stderr, "  %s %p %p\n", t[i].what, t[i].a, t[i].b);
        }
        LS_EXPECT(ok);
        LS_REQUIRE_OK(c->f->wait(c->st, h));
    }
    cudaFree(b);
    cudaStreamDestroy(compute);
}

/* A 16-float device buffer (*b, cudaFree it) and an all-reduce of it, for the failure tests. */
static ls_coll_op small_allreduce(float **b) {
    *b = dev_alloc(16 * sizeof **b);
    return op_of(LS_COLL_ALLREDUCE, *b, *b, 16, LS_F32, LS_REDUCE_SUM, 0);
}

static void test_timeout(void) {
    nccl c;
    LS_REQUIRE_OK(make(0.3, &c));
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    long aborts = stub_nccl_aborts, destroys = stub_nccl_destroys;
    stub_event_hang = 1;
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_COMM,
                  "did not complete within 0.3 s (LOCKSTEP_COMM_TIMEOUT): a rank may have failed or skipped "
                  "this collective; the NCCL communicator was aborted");
    stub_event_hang = 0;
    LS_EXPECT(cudaGetLastError() == cudaSuccess); /* the polls' "not ready" was not left behind */
    LS_EXPECT(stub_nccl_aborts == aborts + 1);
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_COMM, "the NCCL communicator was aborted after an earlier failure");
    c.f->destroy(c.st);
    LS_EXPECT(stub_nccl_destroys == destroys); /* aborted: nothing left to destroy */
    cudaFree(b);
}

/* A host wait that polls "not ready" a few times, then completes: LS_OK, and the thread's last
 * CUDA error is clear (CUDA leaves a query's cudaErrorNotReady there, and the next kernel launch's
 * check would report it as its own failure). */
static void test_not_ready_cleared(void) {
    nccl c;
    LS_REQUIRE_OK(make(30, &c));
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    stub_event_polls = 5;
    LS_EXPECT(c.f->run(c.st, &op) == LS_OK);
    stub_event_polls = 0;
    LS_EXPECT(cudaGetLastError() == cudaSuccess);
    c.f->destroy(c.st);
    cudaFree(b);
}

static void test_async_error(void) {
    nccl c;
    LS_REQUIRE_OK(make(30, &c));
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    long aborts = stub_nccl_aborts;
    stub_event_hang = 1;
    void *h = NULL;
    LS_REQUIRE_OK(c.f->start(c.st, &op, &h));
    int done = 0;
    LS_EXPECT(c.f->test(c.st, h, &done) == LS_OK && done == 0); /* not finished, no error yet */
    __atomic_store_n(&stub_nccl_async_error, ncclRemoteError, __ATOMIC_SEQ_CST);
    LS_EXPECT_ERR(c.f->wait(c.st, h), LS_ERR_COMM,
                  "NCCL (asynchronous error) failed: remote process exited or there was a network error: stub "
                  "NCCL: a peer failed (injected)");
    __atomic_store_n(&stub_nccl_async_error, ncclSuccess, __ATOMIC_SEQ_CST);
    stub_event_hang = 0;
    LS_EXPECT(stub_nccl_aborts == aborts + 1);
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_COMM, "aborted after an earlier failure");
    c.f->destroy(c.st);
    cudaFree(b);
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the stand-in's live events (the watchdog's thread destroys them) */
static long live_events(void) { return __atomic_load_n(&stub_events_live, __ATOMIC_SEQ_CST); }

/* CUDA and NCCL failures once the buffers are accepted abort the communicator; a completion event
 * that cannot be created fails the start before anything is queued; destroy does not wait for ever. */
static void test_failures(void) {
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    nccl c;

    LS_REQUIRE_OK(make(30, &c));
    long aborts = stub_nccl_aborts;
    stub_nccl_fail_colls = ncclUnhandledCudaError;
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_COMM,
                  "failed: stub NCCL error: stub NCCL: the collective failed (injected); the NCCL communicator was "
                  "aborted");
    stub_nccl_fail_colls = ncclSuccess;
    LS_EXPECT(stub_nccl_aborts == aborts + 1);
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_COMM, "aborted after an earlier failure");
    c.f->destroy(c.st);

    LS_REQUIRE_OK(make(30, &c));
    aborts = stub_nccl_aborts;
    __atomic_store_n(&stub_event_error, cudaErrorIllegalAddress, __ATOMIC_SEQ_CST);
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_CUDA,
                  "cudaEventQuery failed: an illegal memory access was encountered (cudaErrorIllegalAddress); the "
                  "NCCL communicator was aborted");
    __atomic_store_n(&stub_event_error, cudaSuccess, __ATOMIC_SEQ_CST);
    LS_EXPECT(stub_nccl_aborts == aborts + 1);
    c.f->destroy(c.st);

    LS_REQUIRE_OK(make(30, &c));
    long colls = stub_nccl_colls;
    aborts = stub_nccl_aborts;
    stub_fail_event_create = cudaErrorMemoryAllocation;
    void *h = NULL;
    LS_EXPECT_ERR(c.f->start(c.st, &op, &h), LS_ERR_CUDA, "cudaEventCreateWithFlags");
    stub_fail_event_create = cudaSuccess;
    LS_EXPECT(stub_nccl_colls == colls && stub_nccl_aborts == aborts); /* nothing queued, still usable */
    LS_EXPECT(c.f->run(c.st, &op) == LS_OK);

    /* destroy while the communication stream never finishes: aborted after the timeout, not destroyed */
    long destroys = stub_nccl_destroys;
    c.f->destroy(c.st);
    LS_EXPECT(stub_nccl_destroys == destroys + 1); /* (an idle stream: destroyed) */
    LS_REQUIRE_OK(make(0.3, &c));
    destroys = stub_nccl_destroys;
    aborts = stub_nccl_aborts;
    stub_stream_busy = 1;
    double t0 = seconds();
    c.f->destroy(c.st);
    double waited = seconds() - t0;
    LS_EXPECT(stub_nccl_aborts == aborts + 1 && stub_nccl_destroys == destroys);
    LS_EXPECT(waited >= 0.3 && waited < 10);
    LS_EXPECT(cudaGetLastError() == cudaSuccess); /* cudaStreamQuery's "not ready", cleared */
    /* and at once after an asynchronous error, whatever the timeout */
    LS_REQUIRE_OK(make(300, &c));
    aborts = stub_nccl_aborts;
    __atomic_store_n(&stub_nccl_async_error, ncclRemoteError, __ATOMIC_SEQ_CST);
    t0 = seconds();
    c.f->destroy(c.st);
    waited = seconds() - t0;
    __atomic_store_n(&stub_nccl_async_error, ncclSuccess, __ATOMIC_SEQ_CST);
    stub_stream_busy = 0;
    LS_EXPECT(stub_nccl_aborts == aborts + 1 && stub_nccl_destroys == destroys && waited < 10);
    cudaFree(b);
}

/* A local failure on the last rank: every rank fails before ncclCommInitRank, so none waits in it. */
static void test_setup_failure(void) {
    long inits = stub_nccl_inits;
    if (R == W - 1) stub_fail_malloc = cudaErrorMemoryAllocation;
    nccl c;
    ls_status s = make(30, &c);
    stub_fail_malloc = cudaSuccess;
    char want[128];
    if (R == W - 1) {
        snprintf(want, sizeof want, "NCCL setup on rank %d (cuda:0): cudaMalloc", R);
        LS_EXPECT(s == LS_ERR_CUDA && strstr(ls_last_error(), want));
    } else {
        snprintf(want, sizeof want, "NCCL setup failed on rank %d", W - 1);
        LS_EXPECT(s == LS_ERR_COMM && strstr(ls_last_error(), want));
    }
    if (s == LS_OK || !strstr(ls_last_error(), want))
        fprintf(stderr, "rank %d: setup failure gave '%s', expected '%s'\n", R, ls_last_error(), want);
    LS_EXPECT(stub_nccl_inits == inits);

    if (R == 0) stub_nccl_fail_unique_id = 1;
    s = make(30, &c);
    stub_nccl_fail_unique_id = 0;
    const char *w2 = R == 0 ? "ncclGetUniqueId failed: unhandled system error: stub NCCL: no network interface "
                              "found (injected)"
                            : "ncclGetUniqueId failed on rank 0";
    LS_EXPECT(s == LS_ERR_COMM && strstr(ls_last_error(), w2));
    if (s == LS_OK || !strstr(ls_last_error(), w2))
        fprintf(stderr, "rank %d: unique id failure gave '%s', expected '%s'\n", R, ls_last_error(), w2);
    LS_EXPECT(stub_nccl_inits == inits);
}

/* ---- waits in stream order, and the watchdog ---- */

static char fatal_why[700];
static int fatal_count; /* __atomic: set by the watchdog's thread */

static void record_fatal(const char *why) {
    snprintf(fatal_why, sizeof fatal_why, "%s", why);
    __atomic_add_fetch(&fatal_count, 1, __ATOMIC_SEQ_CST);
}

/* Wait up to 10 s for the watchdog to report; returns the seconds it took (-1: it did not). */
static double await_fatal(int before) {
    double t0 = seconds();
    while (__atomic_load_n(&fatal_count, __ATOMIC_SEQ_CST) == before) {
        if (seconds() - t0 > 10) return -1;
        struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
    }
    return seconds() - t0;
}

/* Start an all-reduce whose completion event never completes (until stub_event_complete). */
static void *start_hung(nccl *c, const ls_coll_op *op, cudaEvent_t *done) {
    void *h = NULL;
    stub_event_hang = 1;
    stub_ntrace = 0;
    LS_REQUIRE_OK(c->f->start(c->st, op, &h));
    stub_event_hang = 0;
    LS_REQUIRE(stub_ntrace == 4 && !strcmp(stub_trace[3].what, "record"));
    *done = (cudaEvent_t)stub_trace[3].a;
    return h;
}

/* The compute stream waits for the completion event on the device and the host does not: a wait
 * in stream order returns at once although the collective has not completed; the watchdog lets
 * the event go once it completes, and destroy stops it. */
static void test_wait_stream(void) {
    nccl c;
    LS_REQUIRE_OK(make(30, &c));
    cudaStream_t compute = NULL;
    LS_REQUIRE(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking) == cudaSuccess);
    LS_REQUIRE_OK(c.f->set_compute_stream(c.st, compute));
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = (float)(R + 1) * (float)i;
    memcpy(b, x, sizeof x); /* the stand-in's device memory is host memory */
    long events = live_events(), aborts = stub_nccl_aborts;
    cudaEvent_t done = NULL;
    void *h = start_hung(&c, &op, &done);
    stub_ntrace = 0;
    double t0 = seconds();
    LS_EXPECT(c.f->wait_stream(c.st, h, "allreduce of 16 f32") == LS_OK);
    LS_EXPECT(seconds() - t0 < 5); /* the host did not wait (the timeout is 30 s) */
    LS_EXPECT(stub_ntrace == 1 && !strcmp(stub_trace[0].what, "wait") && stub_trace[0].a == (const void *)compute &&
              stub_trace[0].b == (const void *)done);
    LS_EXPECT(live_events() == events + 1); /* the watchdog holds it */
    /* the stand-in reduced at start: the sum over ranks of (r + 1) * i */
    memcpy(x, b, sizeof x);
    int sum_ok = 1;
    for (int i = 0; i < 16; i++) sum_ok &= x[i] == (float)(W * (W + 1) / 2) * (float)i;
    LS_EXPECT(sum_ok);
    stub_event_complete(done);
    for (double t = seconds(); live_events() != events && seconds() - t < 10;) sched_yield();
    LS_EXPECT(live_events() == events); /* seen complete, released */
    /* many in flight at once, completed out of order: all released, none reported */
    cudaEvent_t ev[5];
    for (int k = 0; k < 5; k++) LS_EXPECT(c.f->wait_stream(c.st, start_hung(&c, &op, &ev[k]), "allreduce") == LS_OK);
    for (int k = 4; k >= 0; k--) stub_event_complete(ev[k]);
    for (double t = seconds(); live_events() != events && seconds() - t < 10;) sched_yield();
    LS_EXPECT(live_events() == events);
    /* destroy with one still watched: the watchdog stops, the stream is drained, the event freed */
    LS_EXPECT(c.f->wait_stream(c.st, start_hung(&c, &op, &done), "allreduce") == LS_OK);
    long destroys = stub_nccl_destroys;
    c.f->destroy(c.st);
    LS_EXPECT(stub_nccl_destroys == destroys + 1 && stub_nccl_aborts == aborts);
    LS_EXPECT(live_events() == events - 1); /* and the communicator's own "ready" event */
    cudaFree(b);
    cudaStreamDestroy(compute);
}

/* What the watchdog sees while a collective waited for in stream order is unfinished: a timeout,
 * an asynchronous NCCL error, a failed kernel. Each aborts the communicator and calls the fatal
 * action (in the job: ls_comm_abort and exit; here record_fatal) with the collective, the rank and
 * the reason; later calls fail and destroy does not call ncclCommDestroy. */
static void test_watchdog(void) {
    ls_comm_nccl_set_watchdog_fatal(record_fatal);
    struct {
        double timeout;
        const char *why;
    } cases[] = {
        {0.3, "did not complete within 0.3 s (LOCKSTEP_COMM_TIMEOUT): a rank may have failed or skipped this "
              "collective"},
        {300, "NCCL (asynchronous error) failed: remote process exited or there was a network error: stub NCCL: a "
              "peer failed (injected)"},
        {300, "cudaEventQuery failed: an illegal memory access was encountered (cudaErrorIllegalAddress)"},
    };
    for (int k = 0; k < 3; k++) {
        nccl c;
        LS_REQUIRE_OK(make(cases[k].timeout, &c));
        float *b = NULL;
        ls_coll_op op = small_allreduce(&b);
        long aborts = stub_nccl_aborts, destroys = stub_nccl_destroys;
        int before = __atomic_load_n(&fatal_count, __ATOMIC_SEQ_CST);
        cudaEvent_t done = NULL;
        LS_EXPECT(c.f->wait_stream(c.st, start_hung(&c, &op, &done), "allreduce of 16 f32") == LS_OK);
        if (k == 1) __atomic_store_n(&stub_nccl_async_error, ncclRemoteError, __ATOMIC_SEQ_CST);
        if (k == 2) __atomic_store_n(&stub_event_error, cudaErrorIllegalAddress, __ATOMIC_SEQ_CST);
        double took = await_fatal(before);
        __atomic_store_n(&stub_nccl_async_error, ncclSuccess, __ATOMIC_SEQ_CST);
        __atomic_store_n(&stub_event_error, cudaSuccess, __ATOMIC_SEQ_CST);
        LS_EXPECT(took >= 0 && (k > 0 || took >= 0.25));
        char want[600];
        snprintf(want, sizeof want, "allreduce of 16 f32 on rank %d (nccl, seen by its watchdog): %s", R, cases[k].why);
        if (strcmp(fatal_why, want))
            fprintf(stderr, "rank %d: watchdog said\n  %s\nwanted\n  %s\n", R, fatal_why, want);
        LS_EXPECT(!strcmp(fatal_why, want));
        LS_EXPECT(stub_nccl_aborts == aborts + 1);
        void *h = NULL;
        LS_EXPECT_ERR(c.f->start(c.st, &op, &h), LS_ERR_COMM, "aborted after an earlier failure");
        c.f->destroy(c.st);
        LS_EXPECT(stub_nccl_destroys == destroys && stub_nccl_aborts == aborts + 1);
        cudaFree(b);
    }
    /* a host buffer's wait (the bootstrap's) is a plain wait; after a host-side abort, a wait in
     * stream order fails at once */
    nccl c;
    LS_REQUIRE_OK(make(0.3, &c));
    float hb[4] = {1, 2, 3, 4};
    ls_coll_op hop = op_of(LS_COLL_ALLREDUCE, hb, hb, 4, LS_F32, LS_REDUCE_SUM, 0);
    hop.host = 1;
    void *h = NULL;
    LS_REQUIRE_OK(c.f->start(c.st, &hop, &h));
    LS_EXPECT(c.f->wait_stream(c.st, h, "host allreduce") == LS_OK);
    LS_EXPECT(hb[3] == 4.0f * (float)W);
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    cudaEvent_t done = NULL;
    void *hung = start_hung(&c, &op, &done);
    stub_event_hang = 1;
    LS_EXPECT_ERR(c.f->run(c.st, &op), LS_ERR_COMM, "did not complete within 0.3 s"); /* a host wait */
    stub_event_hang = 0;
    LS_EXPECT_ERR(c.f->wait_stream(c.st, hung, "allreduce"), LS_ERR_COMM, "aborted after an earlier failure");
    c.f->destroy(c.st);
    cudaFree(b);
    ls_comm_nccl_set_watchdog_fatal(NULL);
}

/* The watchdog aborts the communicator (in NCCL: frees it) while this thread polls another
 * collective, each poll an ncclCommGetAsyncError that here takes 2 ms: the abort must wait for
 * the call in progress and no call may follow it (the poll checked the failure flag, then called
 * into the communicator the watchdog had meanwhile freed). The poll ends with the abort's error. */
static void test_watchdog_abort_while_polled(void) {
    ls_comm_nccl_set_watchdog_fatal(record_fatal);
    long used = stub_nccl_used_aborted;
    for (int round = 0; round < 3; round++) {
        nccl c;
        LS_REQUIRE_OK(make(0.2, &c));
        float *b = NULL;
        ls_coll_op op = small_allreduce(&b);
        int before = __atomic_load_n(&fatal_count, __ATOMIC_SEQ_CST);
        cudaEvent_t done1 = NULL, done2 = NULL;
        LS_EXPECT(c.f->wait_stream(c.st, start_hung(&c, &op, &done1), "allreduce of 16 f32") == LS_OK);
        void *polled = start_hung(&c, &op, &done2);
        stub_nccl_async_delay_us = 2000;
        int done = 0;
        ls_status s = LS_OK;
        double t0 = seconds();
        while ((s = c.f->test(c.st, polled, &done)) == LS_OK && !done && seconds() - t0 < 10) {}
        stub_nccl_async_delay_us = 0;
        LS_EXPECT(await_fatal(before) >= 0);
        LS_EXPECT(s == LS_ERR_COMM && !done);
        LS_EXPECT_ERR(c.f->wait(c.st, polled), LS_ERR_COMM, "aborted after an earlier failure");
        c.f->destroy(c.st);
        cudaFree(b);
    }
    if (stub_nccl_used_aborted != used)
        fprintf(stderr, "rank %d: %ld NCCL calls on a communicator the watchdog aborted\n", R,
                stub_nccl_used_aborted - used);
    LS_EXPECT(stub_nccl_used_aborted == used);
    ls_comm_nccl_set_watchdog_fatal(NULL);
}

/* One rank (registry.c's path for --comm nccl without a launcher): bootstrapped over a self
 * communicator, whose broadcast of the unique id is a no-op; then every collective as above. */
static void test_one_rank_bootstrap(void) {
    ls_comm_env env;
    memset(&env, 0, sizeof env);
    env.device.type = LS_DEVICE_CUDA;
    env.timeout_s = 30;
    ls_comm *boot = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "self", &boot));
    LS_REQUIRE(ls_comm_world(boot) == 1);
    long inits = stub_nccl_inits, destroys = stub_nccl_destroys, colls = stub_nccl_colls;
    nccl c;
    LS_REQUIRE_OK(ls_comm_nccl_create(&env, boot, &c.f, &c.st)); /* takes boot over */
    LS_EXPECT(stub_nccl_inits == inits + 1);
    test_collectives(&c);
    LS_EXPECT(stub_nccl_colls > colls); /* they went to NCCL, not to the self communicator */
    c.f->destroy(c.st);
    LS_EXPECT(stub_nccl_destroys == destroys + 1);
    printf("one rank: a NCCL communicator bootstrapped over a self communicator, %ld collectives\n",
           stub_nccl_colls - colls);
}

/* --watchdog-abort: the watchdog's own action, not a test hook: a collective waited for in stream
 * order that never completes ends the whole job (MPI_Abort from the watchdog's thread) soon after
 * the 0.5 s timeout, with the watchdog's message; "not reached" if the rank is still alive 30 s
 * later (ctest matches the message and fails on that line). */
static int watchdog_abort(void) {
    nccl c;
    LS_REQUIRE_OK(make(0.5, &c));
    float *b = NULL;
    ls_coll_op op = small_allreduce(&b);
    cudaEvent_t done = NULL;
    LS_REQUIRE(c.f->wait_stream(c.st, start_hung(&c, &op, &done), "allreduce of 16 f32") == LS_OK);
    for (double t0 = seconds(); seconds() - t0 < 30;) {
        struct timespec nap = {0, 10000000};
        nanosleep(&nap, NULL);
    }
    printf("rank %d: not reached: the watchdog did not end the job\n", R);
    return 0;
}

int main(int argc, char **argv) {
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    if (!strcmp(ri.launcher, "none")) LS_SKIP("run under mpirun: the NCCL communicator's bootstrap needs ranks");
    if (argc > 1 && !strcmp(argv[1], "--watchdog-abort")) {
        ls_comm *keep = NULL;
        LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &keep));
        R = ls_comm_rank(keep);
        W = ls_comm_world(keep);
        return watchdog_abort();
    }
    ls_comm *keep = NULL; /* MPI stays initialized while one communicator lives */
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &keep));
    R = ls_comm_rank(keep);
    W = ls_comm_world(keep);

    nccl c;
    LS_REQUIRE_OK(make(30, &c));
    LS_EXPECT(stub_nccl_inits == 1);
    test_collectives(&c);
    test_ordering(&c);
    long destroys = stub_nccl_destroys;
    c.f->destroy(c.st);
    LS_EXPECT(stub_nccl_destroys == destroys + 1);
    test_timeout();
    test_not_ready_cleared();
    test_async_error();
    test_failures();
    test_wait_stream();
    test_watchdog();
    test_watchdog_abort_while_polled();
    test_setup_failure();
    if (W == 1) test_one_rank_bootstrap();

    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(keep, &fails, 1, LS_I32, LS_REDUCE_SUM));
    if (R == 0)
        printf("nccl communicator over the stand-ins, %d rank(s): %d failed check(s) in all; %ld collectives\n", W,
               (int)fails, stub_nccl_colls);
    ls_comm_destroy(keep);
    if (fails && !ls_test_failures) ls_test_failures = 1;
    LS_TEST_END();
}
