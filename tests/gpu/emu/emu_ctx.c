/* emu_ctx.c: see emu_ctx.h. Built with the translated cuda_backend.h (names emu_ls_cuda_*). */
#include "emu_ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "memory.h"
#include "status.h"

extern const ls_ops emu_ls_cuda_ops; /* kernels/cuda/cuda_ops.c, translated */

/* What a context gives back to the CPU when it goes (the CPU context it was made from). */
typedef struct emu_ctx_saved {
    ls_ctx *ctx;
    const ls_ops *cpu;
    void *cpu_state;
} emu_ctx_saved;

#define EMU_CTX_MAX 8
static emu_ctx_saved saved[EMU_CTX_MAX];

/* The translated backend's ls_cublas_load: its cuBLAS calls reach the stand-ins (emu_cublas.c),
 * so there is no library to load. */
ls_status emu_ls_cublas_load(void) { return LS_OK; }

/* "Device" memory: host memory of exactly the size asked (the CPU allocator rounds up to 64
 * bytes), 256-byte aligned as cudaMalloc's, so AddressSanitizer sees the first byte past a
 * buffer. (The backend's caching allocator is tested on its own, test_cuda_alloc_stub.) */
static void *dev_alloc(void *state, size_t bytes) {
    (void)state;
    void *p = NULL;
    return posix_memalign(&p, 256, bytes ? bytes : 1) == 0 ? p : NULL;
}
/* The emulator queues copies and memsets on their streams: these wait for all of them first. */
static void dev_free(void *state, void *p, size_t bytes) {
    (void)state, (void)bytes;
    emu_device_synchronize();
    free(p);
}
static ls_status dev_copy(void *state, void *dst, int dd, const void *src, int sd, size_t n) {
    (void)state, (void)dd, (void)sd;
    emu_device_synchronize();
    if (n) memmove(dst, src, n);
    return LS_OK;
}
static ls_status dev_zero(void *state, void *p, size_t n) {
    (void)state;
    emu_device_synchronize();
    if (n) memset(p, 0, n);
    return LS_OK;
}
static const ls_allocator_vtable dev_vtable = {
    .name = "cuda-emu", .alloc = dev_alloc, .free = dev_free, .copy = dev_copy, .set_zero = dev_zero};

ls_status emu_ctx_create(int sm_count, ls_ctx **out) {
    *out = NULL;
    emu_ctx_saved *slot = NULL;
    for (int i = 0; i < EMU_CTX_MAX && !slot; i++)
        if (!saved[i].ctx) slot = &saved[i];
    if (!slot) return ls_error(LS_ERR_INVALID_ARGUMENT, "more than %d emulated CUDA contexts at once", EMU_CTX_MAX);
    ls_ctx *c = NULL;
    LS_CHECK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    /* the backend's own init, on the emulated device of sm_count SMs */
    emu_sm_count = sm_count;
    void *state = NULL;
    ls_status st = emu_ls_cuda_ops.init((ls_device){LS_DEVICE_CUDA, 0}, &state);
    if (st != LS_OK) {
        ls_ctx_destroy(c);
        return st;
    }
    ls_allocator *dev = NULL;
    const ls_device cuda0 = {LS_DEVICE_CUDA, 0};
    st = ls_allocator_create(&dev_vtable, NULL, cuda0, 0, &dev);
    if (st != LS_OK) {
        emu_ls_cuda_ops.fini(state);
        ls_ctx_destroy(c);
        return st;
    }
    *slot = (emu_ctx_saved){c, c->ops, c->state};
    c->alloc = dev;    /* ls_ctx_destroy destroys it (it is not the host allocator) */
    c->device = cuda0; /* its tensors are "device" memory: the host reads them through copies */
    c->ops = &emu_ls_cuda_ops;
    c->state = state;
    *out = c;
    return LS_OK;
}

void emu_ctx_destroy(ls_ctx *c) {
    if (!c) return;
    for (int i = 0; i < EMU_CTX_MAX; i++)
        if (saved[i].ctx == c) {
            emu_ls_cuda_ops.fini(c->state);
            c->ops = saved[i].cpu;
            c->state = saved[i].cpu_state;
            saved[i].ctx = NULL;
        }
    ls_ctx_destroy(c);
}
