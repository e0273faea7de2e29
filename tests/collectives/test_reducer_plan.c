/* test_reducer_plan.c: the gradient reducer on one rank: the bucket assignment (reverse parameter
 * order, first-bucket cap, later cap, a gradient over the cap alone, exact fits, empty tensors),
 * the caps from config and environment (and bad values), bucket queries, launches as buckets
 * fill in and out of order, post_scale, and misuse errors (ready twice, outside a step, ...). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "ops.h"
#include "reducer.h"
#include "testutil.h"

static int plan_is(int n, const size_t *bytes, size_t first, size_t cap, int want_nb, const int *want) {
    int got[16];
    int nb = ls_reducer_plan_buckets(n, bytes, first, cap, got);
    int ok = nb == want_nb;
    for (int i = 0; i < n; i++) ok = ok && got[i] == want[i];
    if (!ok) {
        fprintf(stderr, "plan: got %d buckets [", nb);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, " ], expected %d\n", want_nb);
    }
    return ok;
}

static void test_plan(void) {
    { /* reverse order: the last parameters share bucket 0 up to the first cap */
        size_t b[6] = {40, 40, 40, 40, 40, 40};
        int w[6] = {1, 1, 1, 1, 0, 0};
        LS_EXPECT(plan_is(6, b, 100, 250, 2, w));
    }
    { /* an oversized gradient gets its own bucket, wherever it falls */
        size_t b[4] = {10, 300, 10, 10};
        int w[4] = {2, 1, 0, 0};
        LS_EXPECT(plan_is(4, b, 100, 250, 3, w));
        size_t c[2] = {10, 500};
        int wc[2] = {1, 0};
        LS_EXPECT(plan_is(2, c, 100, 250, 2, wc));
    }
    { /* exact fit stays in one bucket */
        size_t b[2] = {50, 50};
        int w[2] = {0, 0};
        LS_EXPECT(plan_is(2, b, 100, 250, 1, w));
    }
    { /* the first cap applies to bucket 0 only */
        size_t b[4] = {200, 200, 200, 10};
        int w[4] = {2, 1, 1, 0};
        LS_EXPECT(plan_is(4, b, 100, 450, 3, w));
    }
    { /* empty tensors; no tensors */
        size_t b[3] = {0, 0, 0};
        int w[3] = {0, 0, 0};
        LS_EXPECT(plan_is(3, b, 100, 250, 1, w));
        LS_EXPECT(ls_reducer_plan_buckets(0, b, 100, 250, NULL) == 0);
    }
    { /* many equal tensors: full buckets of cap/size each */
        size_t b[10];
        int w[10];
        for (int i = 0; i < 10; i++) b[i] = 30;
        /* first cap 60: params 9,8 -> bucket 0; cap 90: 7,6,5 -> 1; 4,3,2 -> 2; 1,0 -> 3 */
        int want[10] = {3, 3, 2, 2, 2, 1, 1, 1, 0, 0};
        memcpy(w, want, sizeof w);
        LS_EXPECT(plan_is(10, b, 60, 90, 4, w));
    }
}

static void test_config(void) {
    ls_reducer_config c;
    unsetenv("LOCKSTEP_BUCKET_MB");
    unsetenv("LOCKSTEP_FIRST_BUCKET_MB");
    LS_REQUIRE_OK(ls_reducer_config_resolve(NULL, &c));
    LS_EXPECT(c.first_bucket_bytes == 1u << 20 && c.bucket_bytes == 25u << 20);
    setenv("LOCKSTEP_BUCKET_MB", "0.5", 1);
    setenv("LOCKSTEP_FIRST_BUCKET_MB", "2", 1);
    LS_REQUIRE_OK(ls_reducer_config_resolve(NULL, &c));
    LS_EXPECT(c.first_bucket_bytes == 2u << 20 && c.bucket_bytes == 512u << 10);
    ls_reducer_config mine = {4096, 0, 0, 0};
    LS_REQUIRE_OK(ls_reducer_config_resolve(&mine, &c));
    LS_EXPECT(c.first_bucket_bytes == 4096 && c.bucket_bytes == 512u << 10 && c.bucket_view == 1);
    /* gradients as bucket views: on unless the config or the environment says off */
    setenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW", "0", 1);
    LS_REQUIRE_OK(ls_reducer_config_resolve(NULL, &c));
    LS_EXPECT(c.bucket_view == -1);
    mine.bucket_view = 1;
    LS_REQUIRE_OK(ls_reducer_config_resolve(&mine, &c));
    LS_EXPECT(c.bucket_view == 1);
    setenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW", "on", 1);
    mine.bucket_view = -1;
    LS_REQUIRE_OK(ls_reducer_config_resolve(&mine, &c));
    LS_EXPECT(c.bucket_view == -1);
    setenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW", "yes", 1);
    LS_EXPECT_ERR(ls_reducer_config_resolve(NULL, &c), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GRAD_AS_BUCKET_VIEW=yes: expected 1, on, 0 or off");
    unsetenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW");
    setenv("LOCKSTEP_BUCKET_MB", "lots", 1);
    LS_EXPECT_ERR(ls_reducer_config_resolve(NULL, &c), LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_BUCKET_MB=lots");
    setenv("LOCKSTEP_BUCKET_MB", "0", 1);
    LS_EXPECT_ERR(ls_reducer_config_resolve(NULL, &c), LS_ERR_INVALID_ARGUMENT, "positive size in MiB");
    /* decimal digits only: strtod took "0x10" for 16 MiB, and a space or '+' */
    static const char *const not_mib[] = {"0x10", " 25", "+25", "25 ", "inf", "1e-400"};
    for (size_t i = 0; i < sizeof not_mib / sizeof not_mib[0]; i++) {
        char want[128];
        snprintf(want, sizeof want, "LOCKSTEP_FIRST_BUCKET_MB=%s: expected a positive size in MiB", not_mib[i]);
        setenv("LOCKSTEP_BUCKET_MB", "25", 1);
        setenv("LOCKSTEP_FIRST_BUCKET_MB", not_mib[i], 1);
        LS_EXPECT_ERR(ls_reducer_config_resolve(NULL, &c), LS_ERR_INVALID_ARGUMENT, want);
        snprintf(want, sizeof want, "LOCKSTEP_BUCKET_MB=%s: expected a positive size in MiB", not_mib[i]);
        unsetenv("LOCKSTEP_FIRST_BUCKET_MB");
        setenv("LOCKSTEP_BUCKET_MB", not_mib[i], 1);
        LS_EXPECT_ERR(ls_reducer_config_resolve(NULL, &c), LS_ERR_INVALID_ARGUMENT, want);
    }
    setenv("LOCKSTEP_BUCKET_MB", "2e1", 1);
    setenv("LOCKSTEP_FIRST_BUCKET_MB", ".5", 1);
    LS_REQUIRE_OK(ls_reducer_config_resolve(NULL, &c));
    LS_EXPECT(c.bucket_bytes == 20 * (size_t)1048576 && c.first_bucket_bytes == 524288);
    unsetenv("LOCKSTEP_BUCKET_MB");
    unsetenv("LOCKSTEP_FIRST_BUCKET_MB");
}

/* What the buckets take beyond the gradients: copying, the fused buckets' buffers; as views, their
 * padding. */
static void test_extra_bytes(void) {
    size_t b[7] = {40, 40, 400, 40, 40, 40, 40};
    int of[7];
    LS_EXPECT(ls_reducer_plan_buckets(7, b, 80, 120, of) == 4);
    /* a buffer for two 40-byte gradients: 256 bytes of lead-in at most, then at 0 and 256: 552 */
    LS_EXPECT(ls_reducer_extra_bytes(7, b, of, 0, 0) == 3 * 552);
    LS_EXPECT(ls_reducer_extra_bytes(7, b, of, 1, 0) == 3 * (552 - 80));
    LS_EXPECT(ls_reducer_extra_bytes(0, b, of, 1, 0) == 0);
}

/* Compression: the buckets go through 16 bits (here one rank: the conversions alone), so a value
 * that 16 bits cannot hold comes back rounded; the setting from the environment, and its errors. */
static void test_compress(void) {
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "self", &c));
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &a));
    ls_tensor *g[3];
    for (int i = 0; i < 3; i++) LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 1, (int64_t[]){4}, "grad", &g[i]));
    const float odd = 1.0f + 1.0f / 1024; /* f16 holds it, bf16 rounds it to 1 */
    for (int mode = LS_REDUCER_F16; mode <= LS_REDUCER_BF16; mode++) {
        ls_reducer_config cfg = {1 << 20, 1 << 20, 0, mode};
        ls_reducer *r = NULL;
        LS_REQUIRE_OK(ls_reducer_create(c, NULL, 3, g, &cfg, &r));
        LS_EXPECT(ls_reducer_get_config(r).compress == mode);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) ((float *)g[i]->data)[j] = j == 0 ? odd : 1e6f * (float)j;
        LS_REQUIRE_OK(ls_reducer_begin(r, 0.5));
        LS_REQUIRE_OK(ls_reducer_finish(r));
        const float *x = g[1]->data;
        if (mode == LS_REDUCER_F16) /* 1e6 overflows f16: inf */
            LS_EXPECT(x[0] == odd * 0.5f && isinf(x[1]));
        else /* bf16: rounded to 8 significant bits, f32's range */
            LS_EXPECT(x[0] == 0.5f && x[1] == 999424.0f * 0.5f);
        ls_reducer_destroy(r);
    }
    setenv("LOCKSTEP_GRAD_COMPRESS", "bf16", 1);
    ls_reducer_config rc;
    LS_REQUIRE_OK(ls_reducer_config_resolve(NULL, &rc));
    LS_EXPECT(rc.compress == LS_REDUCER_BF16);
    setenv("LOCKSTEP_GRAD_COMPRESS", "none", 1);
    LS_REQUIRE_OK(ls_reducer_config_resolve(NULL, &rc));
    LS_EXPECT(rc.compress == -1);
    setenv("LOCKSTEP_GRAD_COMPRESS", "int8", 1);
    LS_EXPECT_ERR(ls_reducer_config_resolve(NULL, &rc), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GRAD_COMPRESS=int8: expected none, fp16 or bf16");
    unsetenv("LOCKSTEP_GRAD_COMPRESS");
    for (int i = 0; i < 3; i++) ls_tensor_destroy(g[i]);
    ls_allocator_destroy(a);
    ls_comm_destroy(c);
}

/* Destroyed when the allocator is full (after running out of memory): the gradients still get
 * their memory and values back, and nothing is left behind. */
static void test_destroy_when_full(void) {
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "self", &c));
    enum { N = 4, CAP = 8192 };
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(ls_host_allocator_create(CAP, &a));
    ls_tensor *g[N];
    for (int i = 0; i < N; i++) {
        LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 1, (int64_t[]){100}, "grad", &g[i]));
        for (int j = 0; j < 100; j++) ((float *)g[i]->data)[j] = (float)(i * 100 + j);
    }
    ls_reducer_config cfg = {1 << 20, 1 << 20, 1, 0};
    ls_reducer *r = NULL;
    LS_REQUIRE_OK(ls_reducer_create(c, NULL, N, g, &cfg, &r));
    ls_reducer_bucket_info bi;
    LS_REQUIRE_OK(ls_reducer_bucket(r, 0, &bi));
    LS_EXPECT(ls_reducer_num_buckets(r) == 1 && bi.view == 1);
    ls_memory_stats m;
    ls_allocator_stats(a, &m);
    void *fill = NULL; /* every byte left under the cap */
    LS_REQUIRE_OK(ls_alloc(a, CAP - m.live_bytes, "the rest", &fill));
    LS_EXPECT_ERR(ls_alloc(a, 400, "one more gradient", &(void *){NULL}), LS_ERR_OUT_OF_MEMORY, "cap");
    ls_reducer_destroy(r);
    int64_t bad = 0;
    for (int i = 0; i < N; i++) {
        LS_EXPECT(ls_allocator_owns(a, g[i]->data));
        for (int j = 0; j < 100; j++) bad += ((float *)g[i]->data)[j] != (float)(i * 100 + j);
    }
    LS_EXPECT(bad == 0);
    ls_free(a, fill);
    for (int i = 0; i < N; i++) ls_tensor_destroy(g[i]);
    ls_allocator_stats(a, &m);
    LS_EXPECT(m.live_bytes == 0);
    ls_allocator_destroy(a);
    ls_comm_destroy(c);
}

/* One rank (self): bucket queries, launches as buckets complete, post_scale, errors. */
static void test_reducer_one_rank(ls_ctx *ctx, int view) {
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(ctx, "self", &c));
    ls_allocator *a = ctx ? ctx->alloc : NULL;
    ls_allocator *own = NULL;
    if (!a) {
        LS_REQUIRE_OK(ls_host_allocator_create(0, &own));
        a = own;
    }
    /* 6 gradients of 10 floats (40 B) and one of 100 floats (400 B) at index 2 */
    enum { N = 7 };
    ls_tensor *g[N];
    for (int i = 0; i < N; i++) {
        int64_t shape[1] = {i == 2 ? 100 : 10};
        LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 1, shape, "grad", &g[i]));
    }
    ls_reducer_config cfg = {80, 120, view ? 1 : -1, 0};
    ls_reducer *r = NULL;
    LS_REQUIRE_OK(ls_reducer_create(c, ctx, N, g, &cfg, &r));
    /* reverse: 6,5 -> b0 (80); 4,3 -> b1 (80, next 2 is 400 > 120); 2 -> b2 alone; 1,0 -> b3 */
    LS_EXPECT(ls_reducer_num_buckets(r) == 4);
    int want_b[N] = {3, 3, 2, 1, 1, 0, 0};
    for (int i = 0; i < N; i++) LS_EXPECT(ls_reducer_bucket_of(r, i) == want_b[i]);
    LS_EXPECT(ls_reducer_bucket_of(r, N) == -1);
    ls_reducer_bucket_info bi;
    LS_REQUIRE_OK(ls_reducer_bucket(r, 0, &bi));
    LS_EXPECT(bi.lo == 5 && bi.hi == 6 && bi.bytes == 80 && bi.fused == 1 && bi.view == view);
    LS_REQUIRE_OK(ls_reducer_bucket(r, 2, &bi));
    LS_EXPECT(bi.lo == 2 && bi.hi == 2 && bi.bytes == 400 && bi.fused == 0 && bi.view == 0);
    /* as views, a bucket's gradients sit 256 bytes apart in its buffer, from offset 256 */
    LS_EXPECT(!view || ((char *)g[5]->data - (char *)g[6]->data == 256 && (uintptr_t)g[6]->data % 256 == 0));
    LS_EXPECT(ls_allocator_owns(a, g[6]->data) == !view && ls_allocator_owns(a, g[2]->data));
    LS_EXPECT_ERR(ls_reducer_bucket(r, 4, &bi), LS_ERR_INVALID_ARGUMENT, "no bucket 4");
    LS_EXPECT(ls_reducer_get_config(r).first_bucket_bytes == 80);

    for (int step = 0; step < 3; step++) {
        for (int i = 0; i < N; i++)
            for (int64_t j = 0; j < ls_tensor_numel(g[i]); j++) ((float *)g[i]->data)[j] = (float)(i * 1000 + j);
        LS_REQUIRE_OK(ls_reducer_begin(r, 0.5));
        if (step == 0) { /* backward order: each bucket launches as soon as it fills */
            int launched_after[N] = {0, 1, 1, 2, 3, 3, 4}; /* marking 6,5,4,3,2,1,0 */
            for (int k = 0; k < N; k++) {
                LS_REQUIRE_OK(ls_reducer_grad_ready(r, N - 1 - k));
                LS_EXPECT(ls_reducer_launched(r) == launched_after[k]);
            }
        } else if (step == 1) { /* out of order: nothing launches until bucket 0 is complete */
            int order[N] = {0, 2, 3, 4, 1, 6, 5};
            int launched_after[N] = {0, 0, 0, 0, 0, 0, 4};
            for (int k = 0; k < N; k++) {
                LS_REQUIRE_OK(ls_reducer_grad_ready(r, order[k]));
                LS_EXPECT(ls_reducer_launched(r) == launched_after[k]);
            }
            LS_EXPECT_ERR(ls_reducer_grad_ready(r, 3), LS_ERR_INVALID_ARGUMENT, "gradient 3 marked ready twice");
        } else { /* never marked: finish does it all */
            LS_REQUIRE_OK(ls_reducer_grad_ready(r, 6));
            LS_EXPECT(ls_reducer_launched(r) == 0);
        }
        LS_REQUIRE_OK(ls_reducer_finish(r));
        LS_EXPECT(ls_reducer_launched(r) == 4);
        int64_t bad = 0;
        for (int i = 0; i < N; i++)
            for (int64_t j = 0; j < ls_tensor_numel(g[i]); j++)
                bad += ((float *)g[i]->data)[j] != 0.5f * (float)(i * 1000 + j);
        LS_EXPECT(bad == 0);
    }

    LS_EXPECT_ERR(ls_reducer_grad_ready(r, 0), LS_ERR_INVALID_ARGUMENT, "outside a step");
    LS_EXPECT_ERR(ls_reducer_finish(r), LS_ERR_INVALID_ARGUMENT, "outside a step");
    LS_REQUIRE_OK(ls_reducer_begin(r, 1.0));
    LS_EXPECT_ERR(ls_reducer_begin(r, 1.0), LS_ERR_INVALID_ARGUMENT, "previous step was not finished");
    LS_EXPECT_ERR(ls_reducer_grad_ready(r, 7), LS_ERR_INVALID_ARGUMENT, "gradient 7 is not in 0..6");
    LS_REQUIRE_OK(ls_reducer_finish(r));
    if (view) { /* a second reducer over the same gradients copies: they are the first one's views */
        ls_reducer *r2 = NULL;
        LS_REQUIRE_OK(ls_reducer_create(c, ctx, N, g, &cfg, &r2));
        LS_REQUIRE_OK(ls_reducer_bucket(r2, 0, &bi));
        LS_EXPECT(bi.fused == 1 && bi.view == 0);
        LS_REQUIRE_OK(ls_reducer_begin(r2, 2.0));
        LS_REQUIRE_OK(ls_reducer_finish(r2));
        ls_reducer_destroy(r2);
        LS_EXPECT(((float *)g[6]->data)[3] == 6003);
    }
    ls_reducer_destroy(r);
    for (int i = 0; i < N; i++) LS_EXPECT(ls_allocator_owns(a, g[i]->data));
    /* the last step's values (halved), doubled by the second reducer */
    const float f = view ? 2.0f : 1.0f;
    LS_EXPECT(((float *)g[6]->data)[3] == 3001.5f * f && ((float *)g[0]->data)[9] == 4.5f * f);

    if (view) { /* a bucket whose gradients are a view or from another allocator is copied */
        ls_allocator *other = NULL;
        LS_REQUIRE_OK(ls_host_allocator_create(0, &other));
        ls_tensor *x = NULL;
        LS_REQUIRE_OK(ls_tensor_create(other, LS_F32, 1, (int64_t[]){10}, "grad", &x));
        float mem[10] = {0};
        ls_tensor v = ls_tensor_view(mem, LS_F32, ls_device_cpu(), 1, (int64_t[]){10});
        ls_tensor *lists[2][3] = {{g[0], g[1], x}, {g[0], &v, g[1]}};
        for (int l = 0; l < 2; l++) {
            LS_REQUIRE_OK(ls_reducer_create(c, ctx, 3, lists[l], &cfg, &r));
            LS_REQUIRE_OK(ls_reducer_bucket(r, 0, &bi));
            LS_EXPECT(bi.fused == 1 && bi.view == 0 && bi.hi - bi.lo == 1);
            ls_reducer_destroy(r);
        }
        LS_EXPECT(v.data == mem && ls_allocator_owns(other, x->data));
        ls_tensor_destroy(x);
        ls_allocator_destroy(other);
    }

    /* only f32 gradients */
    int64_t s1[1] = {3};
    ls_tensor *d = NULL;
    LS_REQUIRE_OK(ls_tensor_create(a, LS_F64, 1, s1, "grad", &d));
    ls_tensor *mixed[2] = {g[0], d};
    LS_EXPECT_ERR(ls_reducer_create(c, ctx, 2, mixed, NULL, &r), LS_ERR_INVALID_ARGUMENT, "the reducer takes f32");
    ls_tensor_destroy(d);
    /* an empty list is fine */
    LS_REQUIRE_OK(ls_reducer_create(c, ctx, 0, NULL, NULL, &r));
    LS_EXPECT(ls_reducer_num_buckets(r) == 0);
    LS_REQUIRE_OK(ls_reducer_begin(r, 1.0));
    LS_REQUIRE_OK(ls_reducer_finish(r));
    ls_reducer_destroy(r);

    for (int i = 0; i < N; i++) ls_tensor_destroy(g[i]);
    ls_comm_destroy(c);
    if (own) ls_allocator_destroy(own);
}

int main(void) {
    unsetenv("LOCKSTEP_COMM");
    test_plan();
    test_config();
    test_extra_bytes();
    test_destroy_when_full();
    test_compress();
    for (int view = 0; view <= 1; view++) {
        test_reducer_one_rank(NULL, view);
        ls_ctx *ctx = NULL;
        LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
        test_reducer_one_rank(ctx, view);
        ls_ctx_destroy(ctx);
    }
    LS_TEST_END();
}
