/* test_gpu_alloc.c: the caching CUDA allocator and its LOCKSTEP_GPU_MEMORY policies: the
 * steady state (the same allocations step after step reserve nothing new), data kept intact,
 * the hard cap (limit:64MiB: an allocation past it fails naming the request, the cap, the peak
 * and the three remedies with their flags; cached memory is released to fit a request under the
 * cap), reserve:0.1 (an arena up front that later allocations come from), a request larger than
 * the GPU, and a bad policy string. Exits 77 where no CUDA device is usable, after checking that a
 * CUDA context there fails with LS_ERR_DEVICE and a message that says how to run on the CPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

static ls_ctx *ctx_with(const char *policy) {
    ls_ctx *c = NULL;
    if (policy)
        setenv("LOCKSTEP_GPU_MEMORY", policy, 1);
    else
        unsetenv("LOCKSTEP_GPU_MEMORY");
    LS_REQUIRE_OK(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &c));
    unsetenv("LOCKSTEP_GPU_MEMORY");
    return c;
}

static ls_memory_stats stats(ls_ctx *c) {
    ls_memory_stats s;
    ls_allocator_stats(c->alloc, &s);
    return s;
}

static void expect_remedies(const char *msg) {
    LS_EXPECT(strstr(msg, "--batch-size") != NULL);
    LS_EXPECT(strstr(msg, "--precision bf16") != NULL);
    LS_EXPECT(strstr(msg, "--checkpoint-activations") != NULL);
    LS_EXPECT(strstr(msg, "peak") != NULL);
}

/* A training step's worth of buffers of mixed sizes, allocated and freed in a fixed order. */
static void one_step(ls_ctx *c) {
    static const size_t sizes[] = {0, 100, 4096, 300 * 1024, MIB, 3 * MIB + 7, 12 * MIB, 50 * MIB, 513};
    void *p[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        LS_REQUIRE_OK(ls_alloc(c->alloc, sizes[i], "step buffer", &p[i]));
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i += 2) ls_free(c->alloc, p[i]);
    for (size_t i = 1; i < sizeof sizes / sizeof sizes[0]; i += 2) ls_free(c->alloc, p[i]);
}

static void test_grow(void) {
    ls_ctx *c = ctx_with(NULL);
    LS_EXPECT(stats(c).reserved_bytes == 0);
    LS_EXPECT(stats(c).cap_bytes == 0);
    /* data survives a round trip, including through a reused block */
    for (int round = 0; round < 2; round++) {
        size_t n = 5 * MIB + 3;
        unsigned char *h = malloc(n), *back = malloc(n);
        for (size_t i = 0; i < n; i++) h[i] = (unsigned char)(i * 31 + (size_t)round);
        void *d = NULL;
        LS_REQUIRE_OK(ls_alloc(c->alloc, n, "round trip", &d));
        LS_REQUIRE_OK(ls_allocator_copy(c->alloc, d, 1, h, 0, n));
        LS_REQUIRE_OK(ls_allocator_copy(c->alloc, back, 0, d, 1, n));
        LS_EXPECT(memcmp(h, back, n) == 0);
        LS_REQUIRE_OK(ls_allocator_set_zero(c->alloc, d, n));
        LS_REQUIRE_OK(ls_allocator_copy(c->alloc, back, 0, d, 1, n));
        LS_EXPECT(back[0] == 0 && back[n / 2] == 0 && back[n - 1] == 0);
        ls_free(c->alloc, d);
        free(h), free(back);
    }
    /* zero-byte allocations are distinct valid pointers */
    void *z1 = NULL, *z2 = NULL;
    LS_REQUIRE_OK(ls_alloc(c->alloc, 0, "empty", &z1));
    LS_REQUIRE_OK(ls_alloc(c->alloc, 0, "empty", &z2));
    LS_EXPECT(z1 && z2 && z1 != z2);
    ls_free(c->alloc, z1), ls_free(c->alloc, z2);

    one_step(c);
    ls_memory_stats first = stats(c);
    for (int i = 0; i < 200; i++) one_step(c);
    ls_memory_stats later = stats(c);
    printf("grow: after 1 step reserved %zu B, after 201 steps %zu B; peak live %zu B\n", first.reserved_bytes,
           later.reserved_bytes, later.peak_bytes);
    LS_EXPECT(first.reserved_bytes > 0);
    LS_EXPECT(later.reserved_bytes == first.reserved_bytes); /* the steady state allocates nothing new */
    LS_EXPECT(later.live_bytes == 0);
    LS_EXPECT(later.peak_bytes >= 66 * MIB);
    LS_EXPECT(later.allocs == later.frees);

    /* more than the GPU has: a clean out-of-memory error, and the allocator still works after */
    void *huge = NULL;
    ls_status s = ls_alloc(c->alloc, (size_t)1 << 44, "a 16 TiB tensor", &huge);
    LS_EXPECT(s == LS_ERR_OUT_OF_MEMORY && huge == NULL);
    printf("grow, 16 TiB: %s\n", ls_last_error());
    expect_remedies(ls_last_error());
    LS_EXPECT(strstr(ls_last_error(), "a 16 TiB tensor") != NULL);
    one_step(c);
    ls_ctx_destroy(c);
}

static void test_limit(void) {
    ls_ctx *c = ctx_with("limit:64MiB");
    LS_EXPECT(stats(c).cap_bytes == 64 * MIB);
    void *a = NULL, *b = NULL;
    LS_REQUIRE_OK(ls_alloc(c->alloc, 40 * MIB, "activations", &a));
    ls_status s = ls_alloc(c->alloc, 30 * MIB, "the next layer's output", &b);
    LS_EXPECT(s == LS_ERR_OUT_OF_MEMORY && b == NULL);
    const char *msg = ls_last_error();
    printf("limit:64MiB, 40 MiB live, 30 MiB more: %s\n", msg);
    LS_EXPECT(strstr(msg, "30.00 MiB") != NULL); /* the request */
    LS_EXPECT(strstr(msg, "64.00 MiB") != NULL); /* the cap */
    LS_EXPECT(strstr(msg, "the next layer's output") != NULL);
    expect_remedies(msg);
    /* the 40 MiB segment is cached after the free; a 60 MiB request fits the cap only once the
     * cache is released, which the allocator does before failing */
    ls_free(c->alloc, a);
    LS_REQUIRE_OK(ls_alloc(c->alloc, 60 * MIB, "after release", &a));
    LS_EXPECT(stats(c).reserved_bytes <= 64 * MIB);
    ls_free(c->alloc, a);
    s = ls_alloc(c->alloc, 65 * MIB, "too big alone", &a);
    LS_EXPECT(s == LS_ERR_OUT_OF_MEMORY);
    expect_remedies(ls_last_error());
    LS_EXPECT(stats(c).live_bytes == 0);
    ls_ctx_destroy(c);
}

static void test_reserve(void) {
    ls_ctx *c = ctx_with("reserve:0.1");
    size_t r0 = stats(c).reserved_bytes;
    printf("reserve:0.1: %zu B reserved up front\n", r0);
    LS_EXPECT(r0 >= 256 * MIB);
    /* allocations of every size come out of the arena: nothing new is reserved */
    void *p[6];
    size_t sizes[6] = {64, 4096, MIB, 3 * MIB, 100 * MIB, 17};
    for (int i = 0; i < 6; i++) LS_REQUIRE_OK(ls_alloc(c->alloc, sizes[i], "from the arena", &p[i]));
    LS_EXPECT(stats(c).reserved_bytes == r0);
    for (int i = 0; i < 6; i++) ls_free(c->alloc, p[i]);
    for (int i = 0; i < 50; i++) one_step(c);
    LS_EXPECT(stats(c).reserved_bytes == r0);
    ls_ctx_destroy(c);
}

static void test_bad_policy(void) {
    ls_ctx *c = NULL;
    setenv("LOCKSTEP_GPU_MEMORY", "reserve:lots", 1);
    LS_EXPECT_ERR(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &c), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY");
    setenv("LOCKSTEP_GPU_MEMORY", "shrink", 1);
    LS_EXPECT_ERR(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &c), LS_ERR_INVALID_ARGUMENT, "not one of grow");
    unsetenv("LOCKSTEP_GPU_MEMORY");
}

int main(void) {
    char why[256] = "";
    if (ls_device_cuda_count(why, sizeof why) == 0) {
        /* even here: a CUDA context fails cleanly, saying why and how to run on the CPU */
        ls_ctx *c = NULL;
        ls_status s = ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &c);
        if (s != LS_ERR_DEVICE || c || !strstr(ls_last_error(), "--device cpu")) {
            fprintf(stderr, "a CUDA context without a usable GPU gave %s: '%s'\n", ls_status_name(s), ls_last_error());
            return 1;
        }
        printf("without a GPU: %s\n", ls_last_error());
        LS_SKIP("no usable CUDA device: %s", why);
    }
    test_grow();
    test_limit();
    test_reserve();
    test_bad_policy();
    LS_TEST_END();
}
