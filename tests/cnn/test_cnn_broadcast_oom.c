/* ls_cnn_broadcast_buffers on 2 ranks where rank 1 cannot allocate its buffer list (its next
 * malloc on this thread fails: a malloc of this executable's, before glibc's): every rank fails
 * with rank 1's message. Rank 1 used to return alone while rank 0 waited in the broadcast's
 * agreement for good. First the broadcast itself: rank 0's running statistics reach rank 1. On
 * one process there is nothing to broadcast: the call allocates nothing and succeeds. */
#include <stddef.h>

#include "cnn.h"
#include "comm.h"
#include "testutil.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LS_TEST_NO_MALLOC_HOOK 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__GLIBC__)
#define LS_TEST_NO_MALLOC_HOOK 1
#endif

#ifndef LS_TEST_NO_MALLOC_HOOK
extern void *__libc_malloc(size_t n);
static _Thread_local int fail_next_malloc; /* this thread's next malloc returns NULL */
static _Thread_local int malloc_failed;
void *malloc(size_t n) {
    if (fail_next_malloc) {
        fail_next_malloc = 0;
        malloc_failed++;
        return NULL;
    }
    return __libc_malloc(n);
}
#endif

int main(void) {
#ifdef LS_TEST_NO_MALLOC_HOOK
    printf("SKIP: a sanitizer's (or not glibc's) malloc: no hook to fail one allocation\n");
    return 77;
#else
    ls_ctx *ctx;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    ls_comm *comm;
    LS_REQUIRE_OK(ls_comm_create(ctx, NULL, &comm));
    const int rank = ls_comm_rank(comm);
    ls_module *bn;
    LS_REQUIRE_OK(ls_batchnorm2d_create(ctx, LS_F32, 3, NULL, "bn", &bn));
    LS_REQUIRE(ls_cnn_num_buffers(bn) == 2);
    if (ls_comm_world(comm) == 1) {
        fail_next_malloc = 1;
        LS_EXPECT(ls_cnn_broadcast_buffers(comm, bn) == LS_OK);
        LS_EXPECT(malloc_failed == 0); /* no list made: no allocation */
        fail_next_malloc = 0;
        ls_module_destroy(bn);
        ls_comm_destroy(comm);
        ls_ctx_destroy(ctx);
        LS_TEST_END();
    }
    LS_REQUIRE(ls_comm_world(comm) == 2);
    float *mean = ls_cnn_buffer(bn, 0, NULL, 0)->data;
    for (int c = 0; c < 3; c++) mean[c] = (float)(rank ? 100 + c : c);
    LS_REQUIRE_OK(ls_cnn_broadcast_buffers(comm, bn));
    for (int c = 0; c < 3; c++) LS_EXPECT(mean[c] == (float)c);

    fail_next_malloc = rank == 1;
    ls_status s = ls_cnn_broadcast_buffers(comm, bn);
    fail_next_malloc = 0;
    LS_EXPECT(malloc_failed == (rank == 1));
    LS_EXPECT(s == LS_ERR_OUT_OF_MEMORY);
    LS_EXPECT(strstr(ls_last_error(), "cannot allocate the list of 2 batch-norm buffers to broadcast") != NULL);
    if (rank == 0) LS_EXPECT(strstr(ls_last_error(), "(on rank 1)") != NULL);
    if (s != LS_ERR_OUT_OF_MEMORY) fprintf(stderr, "rank %d: %s\n", rank, ls_last_error());

    /* the ranks still pair their collectives: a broadcast after it moves the same values */
    for (int c = 0; c < 3; c++) mean[c] = (float)(rank ? -1 : 7 + c);
    LS_REQUIRE_OK(ls_cnn_broadcast_buffers(comm, bn));
    for (int c = 0; c < 3; c++) LS_EXPECT(mean[c] == (float)(7 + c));
    ls_module_destroy(bn);
    ls_comm_destroy(comm);
    ls_ctx_destroy(ctx);
    LS_TEST_END();
#endif
}
