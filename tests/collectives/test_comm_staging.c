/* test_comm_staging.c: the mpi backend's device-buffer path without a GPU. A fake "cuda:0"
 * allocator (host memory underneath, copies counted) stands in for a GPU context, so the mpi
 * backend must stage every device buffer through host memory with the allocator's copy (and
 * stage f16/bf16 reductions through f32): results are checked for every collective, and the copy
 * counters prove the staging ran (host variants must not stage). The gradient reducer runs on the
 * same fake device (fusion copies through the allocator, scale through the CPU op table), copying
 * and with gradients as bucket views (no copies in a step; memory and values given back). Staging
 * Reduce, reduce in segments and broadcast of buffers of their own stage what they send and copy
 * back what they receive only. Staging
 * takes the allocator's pinned host memory, kept for reuse (as many blocks as were in flight at once;
 * a small request does not take a large block) and freed with the communicator. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "commtest.h"
#include "ops.h"
#include "reducer.h"
#include "testutil.h"

#ifndef LS_TEST_HAVE_MPI
#define LS_TEST_HAVE_MPI 0
#endif

static long to_dev, to_host, dev_to_dev, zeros;
static long pinned_allocs, pinned_live; /* the "pinned" host memory the allocator hands out */

static void *fake_alloc(void *st, size_t n) { return malloc(n ? n : 1); }
static void fake_free(void *st, void *p, size_t n) { free(p); }
static ls_status fake_copy(void *st, void *dst, int dd, const void *src, int sd, size_t n) {
    if (dd && sd)
        dev_to_dev++;
    else if (dd)
        to_dev++;
    else if (sd)
        to_host++;
    memmove(dst, src, n);
    return LS_OK;
}
static ls_status fake_zero(void *st, void *p, size_t n) {
    zeros++;
    memset(p, 0, n);
    return LS_OK;
}
static void *fake_host_alloc(void *st, size_t n) {
    pinned_allocs++;
    pinned_live++;
    return malloc(n ? n : 1);
}
static void fake_host_free(void *st, void *p) {
    pinned_live--;
    free(p);
}
static const ls_allocator_vtable fake_vt = {
    "fake-cuda", fake_alloc, fake_free, fake_copy, fake_zero, NULL, NULL, fake_host_alloc, fake_host_free, NULL, NULL,
    NULL,        NULL,       NULL,      NULL,      NULL,      NULL, NULL};

static ls_comm *C;
static int R, W;

#define CHECK_ALL(what, buf, t, n, want_expr) CT_CHECK_ELEMS(R, what, buf, t, n, want_expr)

static void test_collectives(ls_allocator *dev) {
    const int64_t n = 1001;
    for (int d = 0; d < CT_NDTYPES; d++) {
        ls_dtype t = ct_all_dtypes[d];
        size_t es = ls_dtype_size(t);
        void *buf = NULL, *big = NULL;
        LS_REQUIRE_OK(ls_alloc(dev, (size_t)n * (size_t)W * es, "buf", &buf));
        LS_REQUIRE_OK(ls_alloc(dev, (size_t)n * (size_t)W * es, "big", &big));
        for (int op = LS_REDUCE_SUM; op <= LS_REDUCE_MIN; op++) {
            long h0 = to_host, d0 = to_dev;
            for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, op));
            LS_REQUIRE_OK(ls_comm_allreduce(C, buf, n, t, (ls_reduce_op)op));
            CHECK_ALL("allreduce", buf, t, n, ct_expect(t, (ls_reduce_op)op, W, i, op));
            LS_EXPECT(to_host == h0 + 1 && to_dev == d0 + 1);

            for (int64_t j = 0; j < n * W; j++) ct_set(big, t, j, ct_val(t, R, j, 7 + op));
            LS_REQUIRE_OK(ls_comm_reduce_scatter(C, big, buf, n, t, (ls_reduce_op)op));
            CHECK_ALL("reduce-scatter", buf, t, n, ct_expect(t, (ls_reduce_op)op, W, (int64_t)R * n + i, 7 + op));
        }
        for (int root = 0; root < W; root++) {
            for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 20));
            long d0 = to_dev, h0 = to_host;
            LS_REQUIRE_OK(ls_comm_broadcast(C, buf, n, t, root));
            CHECK_ALL("broadcast", buf, t, n, ct_val(t, root, i, 20));
            /* the root only sends, the others only receive */
            LS_EXPECT(R == root ? (to_host == h0 + 1 && to_dev == d0) : (to_host == h0 && to_dev == d0 + 1));
        }
        for (int root = 0; root < W; root++) { /* reduce: every rank stages in, only the root back */
            for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 21));
            long d0 = to_dev, h0 = to_host;
            LS_REQUIRE_OK(ls_comm_reduce(C, buf, n, t, LS_REDUCE_SUM, root));
            CHECK_ALL("reduce", buf, t, n, R == root ? ct_expect(t, LS_REDUCE_SUM, W, i, 21) : ct_val(t, R, i, 21));
            LS_EXPECT(to_host == h0 + 1 && to_dev == d0 + (R == root));
        }
        { /* in segments, and broadcast of buffers of their own: each staged by itself, sent where this
           * rank is its root, copied back where it is not */
            int64_t cnt[3] = {n / 3, 0, n - n / 3};
            int roots[3] = {W - 1, 0, 0};
            for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 22));
            LS_REQUIRE_OK(ls_comm_reduce(C, buf, 0, t, LS_REDUCE_SUM, 0)); /* nothing: no copies */
            ls_comm_request *rq = NULL;
            LS_REQUIRE_OK(ls_comm_ireduce_segments(C, buf, 3, cnt, roots, t, LS_REDUCE_SUM, &rq));
            LS_REQUIRE_OK(ls_comm_wait(&rq));
            CHECK_ALL("reduce in segments", buf, t, n,
                      (i < n / 3 ? R == W - 1 : R == 0) ? ct_expect(t, LS_REDUCE_SUM, W, i, 22) : ct_val(t, R, i, 22));
            void *parts[3] = {buf, NULL, big};
            for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 23));
            for (int64_t i = 0; i < n; i++) ct_set(big, t, i, ct_val(t, R, i, 24));
            long d0 = to_dev, h0 = to_host;
            LS_REQUIRE_OK(ls_comm_ibroadcast_many(C, 3, parts, cnt, roots, t, &rq));
            LS_REQUIRE_OK(ls_comm_wait(&rq));
            CHECK_ALL("broadcast of buffers (1)", buf, t, n / 3, ct_val(t, W - 1, i, 23));
            CHECK_ALL("broadcast of buffers (3)", big, t, n - n / 3, ct_val(t, 0, i, 24));
            int sends = (R == W - 1) + (R == 0), receives = (R != W - 1) + (R != 0);
            LS_EXPECT(to_host == h0 + sends && to_dev == d0 + receives);
        }
        for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 30));
        LS_REQUIRE_OK(ls_comm_allgather(C, buf, big, n, t));
        CHECK_ALL("allgather", big, t, n * W, ct_val(t, (int)(i / n), i % n, 30));

        ls_comm_request *rq = NULL;
        for (int64_t i = 0; i < n; i++) ct_set(buf, t, i, ct_val(t, R, i, 40));
        LS_REQUIRE_OK(ls_comm_iallreduce(C, buf, n, t, LS_REDUCE_SUM, &rq));
        LS_REQUIRE_OK(ls_comm_wait(&rq));
        CHECK_ALL("iallreduce", buf, t, n, ct_expect(t, LS_REDUCE_SUM, W, i, 40));
        ls_free(dev, buf);
        ls_free(dev, big);
    }
    /* staging went through pinned host memory, kept for reuse: the same all-reduce 20 times more
     * takes at most one new block */
    LS_EXPECT(pinned_allocs > 0 && pinned_allocs < 16);
    long a0 = pinned_allocs;
    void *buf = NULL;
    LS_REQUIRE_OK(ls_alloc(dev, (size_t)n * 4, "buf", &buf));
    for (int k = 0; k < 20; k++) LS_REQUIRE_OK(ls_comm_allreduce(C, buf, n, LS_F32, LS_REDUCE_SUM));
    LS_EXPECT(pinned_allocs - a0 <= 1);
    ls_free(dev, buf);
    /* as many blocks are kept as were in flight at once (a reducer's buckets): 8 at a time, 3
     * "steps", new blocks only in the first */
    enum { FLIGHT = 8, BIG = 1 << 16 };
    void *bufs[FLIGHT];
    ls_comm_request *rq[FLIGHT];
    for (int j = 0; j < FLIGHT; j++) LS_REQUIRE_OK(ls_alloc(dev, BIG * 4, "bucket", &bufs[j]));
    long per_step[3];
    for (int step = 0; step < 3; step++) {
        long before = pinned_allocs;
        for (int j = 0; j < FLIGHT; j++)
            LS_REQUIRE_OK(ls_comm_iallreduce(C, bufs[j], BIG, LS_F32, LS_REDUCE_SUM, &rq[j]));
        for (int j = 0; j < FLIGHT; j++) LS_REQUIRE_OK(ls_comm_wait(&rq[j]));
        per_step[step] = pinned_allocs - before;
    }
    LS_EXPECT(per_step[1] == 0 && per_step[2] == 0);
    /* the kept blocks are counted in the allocator's pinned bytes, apart from its live bytes */
    ls_memory_stats ms;
    ls_allocator_stats(dev, &ms);
    LS_EXPECT(ms.pinned_bytes >= (size_t)FLIGHT * BIG * 4);
    /* a small all-reduce does not take a large kept block (the next large one would need a new one) */
    long b0 = pinned_allocs;
    LS_REQUIRE_OK(ls_comm_allreduce(C, bufs[0], 16, LS_F32, LS_REDUCE_SUM));
    LS_REQUIRE_OK(ls_comm_allreduce(C, bufs[0], BIG, LS_F32, LS_REDUCE_SUM));
    LS_EXPECT(pinned_allocs - b0 == 1);
    for (int j = 0; j < FLIGHT; j++) ls_free(dev, bufs[j]);
    /* host variants never stage */
    long h0 = to_host, d0 = to_dev;
    double v[2] = {1, R};
    LS_REQUIRE_OK(ls_comm_allreduce_host(C, v, 2, LS_F64, LS_REDUCE_SUM));
    LS_EXPECT(v[0] == W && v[1] == W * (W - 1) / 2.0);
    LS_EXPECT(to_host == h0 && to_dev == d0);
}

/* The reducer on the fake device, copying (view 0) or with gradients as bucket views (view 1). */
static void test_reducer(ls_ctx *ctx, int view) {
    enum { N = 9 };
    ls_tensor *g[N];
    size_t nbytes[N];
    int bucket_of[N];
    for (int k = 0; k < N; k++) {
        int64_t shape[1] = {k == 4 ? 5000 : 37 * (k + 1)};
        LS_REQUIRE_OK(ls_tensor_create(ctx->alloc, LS_F32, 1, shape, "grad", &g[k]));
        LS_EXPECT(g[k]->device.type == LS_DEVICE_CUDA);
        nbytes[k] = ls_tensor_nbytes(g[k]);
        for (int64_t i = 0; i < shape[0]; i++) ((float *)g[k]->data)[i] = (float)(k * 1000 + i);
    }
    ls_memory_stats m0, m1, m2;
    ls_allocator_stats(ctx->alloc, &m0);
    long z0 = zeros;
    ls_reducer_config cfg = {1024, 4096, view ? 1 : -1, 0};
    ls_reducer *r = NULL;
    LS_REQUIRE_OK(ls_reducer_create(C, ctx, N, g, &cfg, &r));
    ls_allocator_stats(ctx->alloc, &m1);
    LS_EXPECT(zeros > z0); /* the buckets are zeroed on the device (their padding is reduced too) */
    /* the values survive the move; a view bucket's gradients live in it, 256-byte aligned */
    size_t fused = 0;
    int views = 0;
    for (int b = 0; b < ls_reducer_num_buckets(r); b++) {
        ls_reducer_bucket_info bi;
        LS_REQUIRE_OK(ls_reducer_bucket(r, b, &bi));
        LS_EXPECT(bi.view == (view && bi.fused));
        views += bi.view;
        if (bi.fused) fused += bi.bytes;
        for (int k = bi.lo; k <= bi.hi; k++) {
            LS_EXPECT(ls_allocator_owns(ctx->alloc, g[k]->data) == !bi.view);
            if (bi.view) LS_EXPECT((uintptr_t)g[k]->data % 256 == 0);
        }
    }
    LS_EXPECT(fused > 0 && (view ? views > 0 : views == 0));
    for (int k = 0; k < N; k++)
        for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++)
            if (((float *)g[k]->data)[i] != (float)(k * 1000 + i)) {
                LS_EXPECT(!"a gradient's value changed when the reducer was created");
                break;
            }
    /* copying: a buffer beside each fused bucket's gradients; views: only its padding */
    for (int k = 0; k < N; k++) bucket_of[k] = ls_reducer_bucket_of(r, k);
    size_t extra = m1.live_bytes - m0.live_bytes;
    LS_EXPECT(extra == ls_reducer_extra_bytes(N, nbytes, bucket_of, view, 0));
    LS_EXPECT(view ? extra < (size_t)N * 256 + 256 * (size_t)ls_reducer_num_buckets(r) : extra > fused);
    for (int step = 0; step < 2; step++) {
        for (int k = 0; k < N; k++)
            for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++)
                ((float *)g[k]->data)[i] = (float)((R + k + i + step) % 9);
        long dd0 = dev_to_dev;
        LS_REQUIRE_OK(ls_reducer_begin(r, 1.0 / W));
        for (int k = N - 1; k >= 0; k--) LS_REQUIRE_OK(ls_reducer_grad_ready(r, k));
        LS_REQUIRE_OK(ls_reducer_finish(r));
        /* copying: fusion copies through the device allocator; views: none */
        LS_EXPECT(view ? dev_to_dev == dd0 : dev_to_dev > dd0);
        int64_t bad = 0;
        for (int k = 0; k < N; k++)
            for (int64_t i = 0; i < ls_tensor_numel(g[k]); i++) {
                float s = 0;
                for (int q = 0; q < W; q++) s += (float)((q + k + i + step) % 9);
                bad += fabsf(((float *)g[k]->data)[i] - s * (float)(1.0 / W)) > 1e-6f * (1 + s);
            }
        LS_EXPECT(bad == 0);
    }
    /* destroy gives every gradient its own memory back, with its values, and frees the rest */
    float *last[N];
    for (int k = 0; k < N; k++) {
        last[k] = malloc(nbytes[k] + 1);
        memcpy(last[k], g[k]->data, nbytes[k]);
    }
    ls_reducer_destroy(r);
    ls_allocator_stats(ctx->alloc, &m2);
    LS_EXPECT(m2.live_bytes == m0.live_bytes);
    for (int k = 0; k < N; k++) {
        LS_EXPECT(ls_allocator_owns(ctx->alloc, g[k]->data));
        LS_EXPECT(memcmp(g[k]->data, last[k], nbytes[k]) == 0);
        free(last[k]);
    }
    for (int k = 0; k < N; k++) ls_tensor_destroy(g[k]);
}

int main(void) {
    if (!LS_TEST_HAVE_MPI) LS_SKIP("this build has no MPI");
    setenv("LOCKSTEP_MPI_CUDA_AWARE", "0", 1);
    ls_allocator *host = NULL, *dev = NULL;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &host));
    ls_device fake = {LS_DEVICE_CUDA, 0};
    LS_REQUIRE_OK(ls_allocator_create(&fake_vt, NULL, fake, 0, &dev));
    ls_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.device = fake;
    ctx.ops = ls_ops_for(LS_DEVICE_CPU); /* scale runs on the host memory underneath */
    LS_REQUIRE(ctx.ops);
    LS_REQUIRE_OK(ctx.ops->init(ls_device_cpu(), &ctx.state));
    ctx.alloc = dev;
    ctx.host = host;

    LS_REQUIRE_OK(ls_comm_create(&ctx, "mpi", &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);
    LS_EXPECT(ls_comm_device(C).type == LS_DEVICE_CUDA);
    test_collectives(dev);
    test_reducer(&ctx, 0);
    test_reducer(&ctx, 1);

    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce_host(C, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(C);
    LS_EXPECT(pinned_live == 0); /* the kept staging blocks go with the communicator */
    ls_memory_stats ms;
    ls_allocator_stats(dev, &ms);
    LS_EXPECT(ms.pinned_bytes == 0);
    ctx.ops->fini(ctx.state);
    ls_allocator_destroy(dev);
    ls_allocator_destroy(host);
    LS_TEST_END();
}
