/* test_emu_staging.c: the CUDA caching allocator's staged uploads (memory.h: ls_allocator_upload,
 * _upload_join, _upload_wait, _release), run by the backend's own code over the emulated runtime
 * (emu/cuda_emu.cc), whose schedules make a missing wait give a wrong value instead of a lucky one:
 *  - upload_wait: the host waits for a slot's queued copy before it rewrites the staging memory.
 *    Under the late schedule the copy from pinned memory reads the staging bytes only when its
 *    queue runs; without the wait it would read the rewritten bytes;
 *  - release: a slot's next copy into its device buffer waits for the compute work that reads the
 *    buffer. Under the eager schedule a copy runs as soon as the events it waits for allow, while
 *    kernels stay queued; without the release the next batch would overwrite the buffer before
 *    the kernel reading the current one ran;
 *  - upload_join: a kernel reading the buffer waits for its copy (lazy and late: the copy is still
 *    queued when the kernel is).
 * The test runs under each schedule (test_emu_staging, _lazy, _eager); each check holds in all. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memory.h"
#include "ops.h"
#include "testutil.h"

extern const ls_ops emu_ls_cuda_ops; /* kernels/cuda/cuda_ops.c, translated for the emulator */

enum { N = 4096 };

static void fill(float *x, float v) {
    for (int i = 0; i < N; i++) x[i] = v + (float)i;
}
/* 1 when x holds v + i at each i */
static int holds(const float *x, float v) {
    for (int i = 0; i < N; i++)
        if (x[i] != v + (float)i) {
            fprintf(stderr, "  element %d is %g, expected %g\n", i, (double)x[i], (double)(v + (float)i));
            return 0;
        }
    return 1;
}

int main(void) {
    const ls_ops *ops = &emu_ls_cuda_ops;
    const ls_device cuda0 = {LS_DEVICE_CUDA, 0};
    void *st = NULL;
    LS_REQUIRE_OK(ops->init(cuda0, &st));
    ls_allocator *a = NULL;
    LS_REQUIRE_OK(ops->allocator_create(st, cuda0, &a));
    const size_t bytes = N * sizeof(float);
    float *stage[2] = {NULL, NULL}, *back = malloc(bytes);
    int pinned[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        LS_REQUIRE_OK(ls_allocator_host_alloc(a, bytes, "staging", &pinned[k], (void **)&stage[k]));
    LS_REQUIRE(back && pinned[0] && pinned[1]); /* pinned: the emulator defers copies from it */
    void *dev = NULL, *zero = NULL, *out = NULL;
    LS_REQUIRE_OK(ls_alloc(a, bytes, "batch", &dev));
    LS_REQUIRE_OK(ls_alloc(a, bytes, "zeros", &zero));
    LS_REQUIRE_OK(ls_alloc(a, bytes, "out", &out));
    LS_REQUIRE_OK(ls_allocator_set_zero(a, zero, bytes));

    /* 1. upload_wait: batch A is staged and queued; the host waits, then writes batch B into the
     * same staging memory; the device buffer must hold A */
    fill(stage[0], 1000.0f);
    LS_REQUIRE_OK(ls_allocator_upload(a, 0, dev, stage[0], bytes));
    LS_REQUIRE_OK(ls_allocator_upload_wait(a, 0));
    fill(stage[0], 2000.0f);
    LS_REQUIRE_OK(ls_allocator_upload_join(a, 0));
    LS_REQUIRE_OK(ops->add(st, LS_F32, N, dev, zero, 0, out)); /* out = dev, on the compute stream */
    LS_REQUIRE_OK(ls_allocator_release(a, 0));
    LS_REQUIRE_OK(ls_allocator_copy(a, back, 0, out, 1, bytes));
    fprintf(stderr, "upload_wait: the copy read the staging memory before the host rewrote it\n");
    LS_EXPECT(holds(back, 1000.0f));

    /* 2. release: a kernel reads batch C from the device buffer of slot 1; the slot is released;
     * batch D (other staging memory) is queued into the same device buffer; the kernel must
     * have read C */
    fill(stage[1], 3000.0f);
    LS_REQUIRE_OK(ls_allocator_upload(a, 1, dev, stage[1], bytes));
    LS_REQUIRE_OK(ls_allocator_upload_join(a, 1));
    LS_REQUIRE_OK(ops->add(st, LS_F32, N, dev, zero, 0, out));
    LS_REQUIRE_OK(ls_allocator_release(a, 1));
    LS_REQUIRE_OK(ls_allocator_upload_wait(a, 0)); /* slot 0's staging memory is rewritten next */
    fill(stage[0], 4000.0f);
    LS_REQUIRE_OK(ls_allocator_upload(a, 1, dev, stage[0], bytes));
    LS_REQUIRE_OK(ls_allocator_copy(a, back, 0, out, 1, bytes));
    fprintf(stderr, "release: the next copy into the buffer waited for the kernel reading it\n");
    LS_EXPECT(holds(back, 3000.0f));
    /* and the copy itself landed, once joined */
    LS_REQUIRE_OK(ls_allocator_upload_join(a, 1));
    LS_REQUIRE_OK(ops->add(st, LS_F32, N, dev, zero, 0, out));
    LS_REQUIRE_OK(ls_allocator_release(a, 1));
    LS_REQUIRE_OK(ls_allocator_copy(a, back, 0, out, 1, bytes));
    LS_EXPECT(holds(back, 4000.0f));

    ls_free(a, out);
    ls_free(a, zero);
    ls_free(a, dev);
    for (int k = 0; k < 2; k++) ls_allocator_host_free(a, stage[k], bytes, pinned[k]);
    ls_allocator_destroy(a);
    ops->fini(st);
    free(back);
    LS_TEST_END();
}
