/* test_cuda_alloc_stub.c: the caching device allocator (kernels/cuda/cuda_alloc.c) over a
 * stand-in CUDA runtime (stub_cudart.c), so its bookkeeping is tested where there is no GPU:
 * - random allocations and frees under grow, reserve and limit policies: no two live blocks
 *   overlap, each keeps its contents, every block is 512-byte aligned, the bytes held from the
 *   driver stay within a limit, and destroying the allocator gives every segment back;
 * - the steady state: the same allocations again take nothing new from the driver;
 * - reserve:F takes F of the free memory less 512 MiB up front; a size is taken as asked; too much
 *   is refused by name;
 * - after a failed cudaMalloc the cache is released and the request tried again, and in reserve
 *   mode a block the released segments free in the arena is used at once (it used to fail);
 * - a cudaMalloc that fails for another reason than memory (a sticky error from an earlier
 *   kernel) is that CUDA error, not "out of memory", and empties no cache;
 * - out-of-memory errors name the request, the cap or the GPU, and the remedies;
 * - staged uploads through pinned staging arrive intact; bad policies are refused by name.
 * test_gpu_alloc runs the same allocator against a real GPU in the device check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "memory.h"
#include "stub_cudart.h"
#include "testutil.h"

#define MIB ((size_t)1 << 20)

static ls_cuda_state CS;

static void stub_reset(void) {
    stub_device_free = stub_device_total = (size_t)1 << 30;
    stub_fail_malloc = cudaSuccess;
}

static ls_status make(const char *policy, ls_allocator **out) {
    if (policy)
        setenv("LOCKSTEP_GPU_MEMORY", policy, 1);
    else
        unsetenv("LOCKSTEP_GPU_MEMORY");
    return ls_cuda_allocator_create(&CS, (ls_device){LS_DEVICE_CUDA, 0}, out);
}

static ls_memory_stats stats(ls_allocator *a) {
    ls_memory_stats s;
    ls_allocator_stats(a, &s);
    return s;
}

/* Every segment went back to the driver. */
static void expect_all_returned(const char *what) {
    if (stub_out_bytes != 0 || stub_mallocs != stub_frees)
        printf("%s: %zu bytes still out, %ld cudaMalloc vs %ld cudaFree\n", what, stub_out_bytes, stub_mallocs,
               stub_frees);
    LS_EXPECT(stub_out_bytes == 0 && stub_mallocs == stub_frees);
}

/* ---- random allocations and frees ---- */
enum { SLOTS = 300 };
static unsigned char *ptr[SLOTS];
static size_t len[SLOTS];

static void tag(int i) { /* the first and last 8 bytes (or all of a smaller block) say whose it is */
    size_t n = len[i] < 16 ? len[i] : 8;
    memset(ptr[i], i & 0xff, n);
    memset(ptr[i] + len[i] - n, (i + 1) & 0xff, n);
}

static int tag_ok(int i) {
    size_t n = len[i] < 16 ? len[i] : 8;
    for (size_t k = 0; k < n; k++)
        if (ptr[i][len[i] - n + k] != ((i + 1) & 0xff) || (len[i] >= 16 && ptr[i][k] != (i & 0xff))) return 0;
    return 1;
}

static int overlaps(void) {
    for (int i = 0; i < SLOTS; i++)
        for (int j = i + 1; j < SLOTS && ptr[i]; j++)
            if (ptr[j] && ptr[i] < ptr[j] + len[j] && ptr[j] < ptr[i] + len[i]) {
                printf("blocks %d [%p, +%zu) and %d [%p, +%zu) overlap\n", i, (void *)ptr[i], len[i], j, (void *)ptr[j],
                       len[j]);
                return 1;
            }
    return 0;
}

static void stress(const char *policy, size_t limit) {
    stub_reset();
    long m0 = stub_mallocs, f0 = stub_frees;
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(make(policy, &a));
    uint64_t r = 0x9e3779b97f4a7c15ull;
    int ooms = 0, bad_tag = 0, bad_align = 0, over = 0;
    size_t live = 0, most_reserved = 0;
    for (int it = 0; it < 40000; it++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int i = (int)((r >> 33) % SLOTS);
        if (ptr[i]) {
            bad_tag += !tag_ok(i);
            ls_free(a, ptr[i]);
            live -= len[i];
            ptr[i] = NULL;
            continue;
        }
        uint64_t k = (r >> 20) % 10, v = r >> 40;
        size_t n = k < 6 ? v % 70000 : k < 9 ? v % (8 * MIB) : v % (40 * MIB);
        void *p = NULL;
        ls_status s = ls_alloc(a, n, "a stress block", &p);
        if (s != LS_OK) {
            LS_EXPECT(s == LS_ERR_OUT_OF_MEMORY);
            ls_error_clear();
            ooms++;
            continue;
        }
        ptr[i] = p;
        len[i] = n ? n : 1;
        live += n;
        bad_align += ((uintptr_t)p % 512) != 0;
        tag(i);
        ls_memory_stats st = stats(a);
        if (st.reserved_bytes > most_reserved) most_reserved = st.reserved_bytes;
        if (it % 500 == 0) over += overlaps();
    }
    over += overlaps();
    ls_memory_stats st = stats(a);
    printf("%-24s %d out-of-memory answers, live %zu B, at most %zu B held from the driver, %ld cudaMalloc\n", policy,
           ooms, st.live_bytes, most_reserved, stub_mallocs - m0);
    LS_EXPECT(st.live_bytes == live);
    LS_EXPECT(bad_tag == 0 && bad_align == 0 && over == 0);
    if (limit) LS_EXPECT(most_reserved <= limit);
    for (int i = 0; i < SLOTS; i++)
        if (ptr[i]) {
            bad_tag += !tag_ok(i);
            ls_free(a, ptr[i]);
            ptr[i] = NULL;
        }
    LS_EXPECT(bad_tag == 0);
    LS_EXPECT(stats(a).live_bytes == 0);
    ls_allocator_destroy(a);
    LS_EXPECT(stub_mallocs - m0 == stub_frees - f0);
    expect_all_returned(policy);
}

/* ---- the steady state: a step's allocations again take nothing new ---- */
static void steady_state(void) {
    stub_reset();
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(make(NULL, &a));
    static const size_t sizes[] = {784 * 128 * 4, 512 * 4, 2 * MIB + 17, 64, 30 * MIB, 4096, 11 * MIB};
    enum { K = sizeof sizes / sizeof sizes[0] };
    long m0 = stub_mallocs, after_first = 0;
    for (int step = 0; step < 20; step++) {
        void *p[K];
        for (int i = 0; i < K; i++) LS_REQUIRE_OK(ls_alloc(a, sizes[i], "a step's buffer", &p[i]));
        for (int i = K - 1; i >= 0; i--) ls_free(a, p[i]);
        if (step == 0) after_first = stub_mallocs;
    }
    printf("steady state: %ld cudaMalloc in the first step, %ld in the 19 after it\n", after_first - m0,
           stub_mallocs - after_first);
    LS_EXPECT(stub_mallocs == after_first);
    ls_allocator_destroy(a);
    expect_all_returned("steady state");
}

/* ---- reserve ---- */
static void reserve(void) {
    stub_reset();
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(make("reserve:0.5", &a));
    /* half of (1 GiB free - 512 MiB kept back) */
    LS_EXPECT(stats(a).reserved_bytes == 256 * MIB);
    void *p[4];
    size_t sz[4] = {100, MIB, 50 * MIB, 150 * MIB};
    long m = stub_mallocs;
    for (int i = 0; i < 4; i++) LS_REQUIRE_OK(ls_alloc(a, sz[i], "from the arena", &p[i]));
    LS_EXPECT(stub_mallocs == m && stats(a).reserved_bytes == 256 * MIB); /* all from the arena */
    for (int i = 0; i < 4; i++) ls_free(a, p[i]);
    ls_allocator_destroy(a);

    stub_reset();
    LS_REQUIRE_OK(make("reserve:1", &a)); /* leaves NCCL, cuBLAS and cuDNN their room */
    LS_EXPECT(stats(a).reserved_bytes == 512 * MIB && stub_device_free == 512 * MIB);
    ls_allocator_destroy(a);

    stub_reset();
    LS_REQUIRE_OK(make("reserve:20MiB", &a));
    LS_EXPECT(stats(a).reserved_bytes == 20 * MIB);
    ls_allocator_destroy(a);

    stub_reset();
    LS_EXPECT_ERR(make("reserve:2GiB", &a), LS_ERR_OUT_OF_MEMORY,
                  "LOCKSTEP_GPU_MEMORY=reserve:2GiB: cannot reserve 2.00 GiB on cuda:0 (1.00 GiB free of 1.00 GiB)");
    expect_all_returned("reserve");
}

/* ---- a failed cudaMalloc: release the cache, try again ---- */
static void release_and_retry(void) {
    /* grow: 60 MiB cached, then 80 MiB on a device with 100 MiB: fits once the cache is released */
    stub_reset();
    stub_device_free = stub_device_total = 100 * MIB;
    ls_allocator *a = NULL;
    void *p = NULL, *q = NULL;
    LS_REQUIRE_OK(make(NULL, &a));
    LS_REQUIRE_OK(ls_alloc(a, 60 * MIB, "first", &p));
    ls_free(a, p);
    long f = stub_frees;
    LS_REQUIRE_OK(ls_alloc(a, 80 * MIB, "second", &q));
    LS_EXPECT(stub_frees == f + 1); /* the cached 60 MiB went back */
    /* more than the device has: out of memory, naming the request, the GPU and the remedies */
    LS_EXPECT_ERR(ls_alloc(a, 200 * MIB, "activations", &p), LS_ERR_OUT_OF_MEMORY,
                  "out of memory on cuda:0: the cuda caching allocator could not provide 200.00 MiB for activations "
                  "(it holds 80.00 MiB from cuda:0, which has 20.00 MiB free of 100.00 MiB); 80.00 MiB is already in "
                  "use, the peak so far is 80.00 MiB. The GPU (stub GPU) has 100.00 MiB in "
                  "all, with no cap set (LOCKSTEP_GPU_MEMORY). To fit, use a smaller batch (--batch-size), mixed "
                  "precision (--precision bf16 or --precision fp16) or activation checkpointing "
                  "(--checkpoint-activations)");
    ls_free(a, q);
    ls_allocator_destroy(a);

    /* reserve under a cap: a small segment carved from the arena, freed, goes back to the arena
     * and merges; a request for the whole arena then fits at once */
    stub_reset();
    LS_REQUIRE_OK(make("limit:64MiB,reserve:1", &a));
    LS_EXPECT(stats(a).reserved_bytes == 64 * MIB);
    LS_REQUIRE_OK(ls_alloc(a, 4096, "small", &p));
    LS_REQUIRE_OK(ls_alloc(a, 62 * MIB, "large", &q));
    ls_free(a, p);
    ls_free(a, q);
    long m = stub_mallocs;
    ls_status s = ls_alloc(a, 64 * MIB, "the whole arena", &p);
    if (s != LS_OK) printf("64 MiB after the arena was freed: %s\n", ls_last_error());
    LS_EXPECT(s == LS_OK && stub_mallocs == m);
    if (s == LS_OK) ls_free(a, p);
    /* past the cap: the cap's error */
    LS_EXPECT_ERR(ls_alloc(a, 65 * MIB, "activations", &p), LS_ERR_OUT_OF_MEMORY,
                  "cannot allocate 65.00 MiB for activations; the cap is 64.00 MiB "
                  "(LOCKSTEP_GPU_MEMORY=limit:64MiB,reserve:1), 0 B is already in use, the peak so far is 64.00 MiB. "
                  "To fit, use a smaller batch (--batch-size)");
    ls_allocator_destroy(a);

    /* the limit counts what is held from the device: 4 KiB in use (a 2 MiB small segment) and 3
     * MiB more (a 4 MiB segment) pass a 5 MiB limit, though 3 MiB + 4 KiB are under it; the error
     * states the limit (it stated no cap at all) */
    stub_reset();
    LS_REQUIRE_OK(make("limit:5MiB", &a));
    LS_REQUIRE_OK(ls_alloc(a, 4096, "small", &p));
    LS_EXPECT_ERR(ls_alloc(a, 3 * MIB, "activations", &q), LS_ERR_OUT_OF_MEMORY,
                  "out of memory on cuda:0: the cuda caching allocator could not provide 3.00 MiB for activations "
                  "(it holds 2.00 MiB from cuda:0, and a segment of 4.00 MiB more would pass the limit of 5.00 MiB "
                  "(LOCKSTEP_GPU_MEMORY=limit:5MiB)); 4.00 KiB is already in use, the peak so far is 4.00 KiB. To "
                  "fit, use a smaller batch (--batch-size)");
    ls_free(a, p);
    ls_allocator_destroy(a);
    expect_all_returned("release and retry");
}

/* ---- a sticky CUDA error is not out of memory ---- */
static void sticky_error(void) {
    stub_reset();
    ls_allocator *a = NULL;
    void *p = NULL;
    LS_REQUIRE_OK(make(NULL, &a));
    LS_REQUIRE_OK(ls_alloc(a, 30 * MIB, "cached", &p));
    ls_free(a, p);
    long f = stub_frees;
    stub_fail_malloc = cudaErrorIllegalAddress; /* an earlier kernel faulted */
    LS_EXPECT_ERR(ls_alloc(a, 100 * MIB, "activations", &p), LS_ERR_CUDA,
                  "cuda:0: cudaMalloc failed with cudaErrorIllegalAddress (an illegal memory access was encountered): "
                  "not out of memory; an earlier kernel or copy may have failed (run with CUDA_LAUNCH_BLOCKING=1 to "
                  "find it)");
    LS_EXPECT(stub_frees == f); /* the cache was not emptied for it */
    LS_EXPECT(stats(a).live_bytes == 0);
    LS_REQUIRE_OK(ls_alloc(a, 20 * MIB, "from the cache", &p)); /* no cudaMalloc needed */
    ls_free(a, p);
    stub_fail_malloc = cudaSuccess;
    LS_REQUIRE_OK(ls_alloc(a, 100 * MIB, "activations", &p));
    ls_free(a, p);
    ls_allocator_destroy(a);
    expect_all_returned("sticky error");
}

/* ---- staged uploads ---- */
static void uploads(void) {
    stub_reset();
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(make(NULL, &a));
    int pinned = 0;
    void *h = NULL, *d = NULL, *back = malloc(MIB);
    LS_REQUIRE(back != NULL);
    LS_REQUIRE_OK(ls_allocator_host_alloc(a, MIB, "staging", &pinned, &h));
    LS_EXPECT(pinned == 1);
    ls_memory_stats ms;
    ls_allocator_stats(a, &ms);
    LS_EXPECT(ms.pinned_bytes == MIB && ms.live_bytes == 0); /* pinned host memory, counted apart */
    LS_REQUIRE_OK(ls_alloc(a, MIB, "device buffer", &d));
    for (int slot = 0; slot < LS_UPLOAD_SLOTS; slot++) {
        memset(h, 0x30 + slot, MIB);
        LS_REQUIRE_OK(ls_allocator_upload(a, slot, d, h, MIB));
        LS_REQUIRE_OK(ls_allocator_upload_join(a, slot));
        LS_REQUIRE_OK(ls_allocator_upload_wait(a, slot));
        LS_REQUIRE_OK(ls_allocator_copy(a, back, 0, d, 1, MIB));
        LS_EXPECT(memcmp(back, h, MIB) == 0);
        LS_REQUIRE_OK(ls_allocator_release(a, slot));
    }
    ls_free(a, d);
    ls_allocator_host_free(a, h, MIB, pinned);
    ls_allocator_stats(a, &ms);
    LS_EXPECT(ms.pinned_bytes == 0);
    free(back);
    ls_allocator_destroy(a);
    expect_all_returned("uploads");
}

static void bad_policies(void) {
    ls_allocator *a = NULL;
    LS_EXPECT_ERR(make("reserve:lots", &a), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY: 'reserve:lots' wants a fraction of the free memory in (0, 1] or a size");
    LS_EXPECT_ERR(make("shrink", &a), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY: 'shrink' is not one of grow, reserve:FRACTION, reserve:SIZE, limit:SIZE");
    LS_EXPECT_ERR(make("limit:0", &a), LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_GPU_MEMORY: 'limit:0' wants a size");
    /* a number alone above 1 was read as bytes: reserve:1.5 reserved 1 byte */
    LS_EXPECT_ERR(make("reserve:1.5", &a), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY: 'reserve:1.5': a number alone is a fraction of the free memory, in (0, 1]; "
                  "a size takes a unit (reserve:0.9, reserve:20GiB)");
    LS_EXPECT_ERR(make("reserve:2", &a), LS_ERR_INVALID_ARGUMENT, "'reserve:2': a number alone is a fraction");
    LS_EXPECT(a == NULL);
}

int main(void) {
    CS.device = 0;
    snprintf(CS.name, sizeof CS.name, "stub GPU");
    CS.total_mem = 100 * MIB; /* the size the out-of-memory hint names (release_and_retry's device) */
    stress("grow", 0);
    stress("limit:400MiB", 400 * MIB);
    stress("reserve:0.5", 0);
    stress("reserve:0.9,limit:300MiB", 300 * MIB);
    steady_state();
    reserve();
    release_and_retry();
    sticky_error();
    uploads();
    bad_policies();
    LS_TEST_END();
}
