/* emu_ctx.c: see emu_ctx.h. Built with the translated cuda_backend.h (names emu_ls_cuda_*). */
#include "emu_ctx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "memory.h"
#include "status.h"

extern const ls_ops emu_ls_cuda_ops; /* kernels/cuda/cuda_ops.c, translated */

#define EMU_WORKSPACE ((size_t)32 << 20) /* as the backend's LS_CUDA_WORKSPACE */

/* The backend's state first, so the CUDA entries can take the whole as theirs. */
typedef struct emu_state {
    emu_ls_cuda_state cu;
    void *cpu_state;
    const ls_ops *cpu;
    ls_ops table;
} emu_state;

static long delegated_unsupported;
long emu_ctx_delegated_unsupported(void) { return delegated_unsupported; }

static ls_status counted(ls_status s) {
    if (s == LS_ERR_UNSUPPORTED) delegated_unsupported++;
    return s;
}

static ls_status e_gemm(void *st, ls_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                        const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    emu_state *e = st;
    return counted(e->cpu->gemm(e->cpu_state, t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}
static ls_status e_linear_fwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *x, const void *w,
                              const void *b, void *y) {
    emu_state *e = st;
    return counted(e->cpu->linear_fwd(e->cpu_state, t, B, in, out, x, w, b, y));
}
static ls_status e_linear_bwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *dy, const void *x,
                              const void *w, void *dx, void *dw, void *db) {
    emu_state *e = st;
    return counted(e->cpu->linear_bwd(e->cpu_state, t, B, in, out, dy, x, w, dx, dw, db));
}
static size_t e_conv2d_workspace(void *st, ls_dtype t, const ls_conv2d_params *p, int backward) {
    emu_state *e = st;
    return e->cpu->conv2d_workspace(e->cpu_state, t, p, backward);
}
static ls_status e_conv2d_fwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                              const void *b, void *y, void *ws) {
    emu_state *e = st;
    return counted(e->cpu->conv2d_fwd(e->cpu_state, t, p, x, w, b, y, ws));
}
static ls_status e_conv2d_bwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                              const void *w, void *dx, void *dw, void *db, void *ws) {
    emu_state *e = st;
    return counted(e->cpu->conv2d_bwd(e->cpu_state, t, p, dy, x, w, dx, dw, db, ws));
}

/* "Device" memory: host memory of exactly the size asked (the CPU allocator rounds up to 64
 * bytes), 256-byte aligned as cudaMalloc's, so AddressSanitizer sees the first byte past a
 * buffer. */
static void *dev_alloc(void *state, size_t bytes) {
    (void)state;
    void *p = NULL;
    return posix_memalign(&p, 256, bytes ? bytes : 1) == 0 ? p : NULL;
}
static void dev_free(void *state, void *p, size_t bytes) {
    (void)state, (void)bytes;
    free(p);
}
static ls_status dev_copy(void *state, void *dst, int dd, const void *src, int sd, size_t n) {
    (void)state, (void)dd, (void)sd;
    if (n) memmove(dst, src, n);
    return LS_OK;
}
static ls_status dev_zero(void *state, void *p, size_t n) {
    (void)state;
    if (n) memset(p, 0, n);
    return LS_OK;
}
static const ls_allocator_vtable dev_vtable = {
    .name = "cuda-emu", .alloc = dev_alloc, .free = dev_free, .copy = dev_copy, .set_zero = dev_zero};

ls_status emu_ctx_create(int sm_count, ls_ctx **out) {
    *out = NULL;
    ls_ctx *c = NULL;
    LS_CHECK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    emu_state *e = calloc(1, sizeof *e);
    void *ws = aligned_alloc(256, EMU_WORKSPACE);
    double *scratch = calloc(4, sizeof(double));
    if (!e || !ws || !scratch) {
        free(e), free(ws), free(scratch);
        ls_ctx_destroy(c);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the emulated CUDA backend's state");
    }
    e->cpu = c->ops;
    e->cpu_state = c->state;
    e->cu.workspace = ws;
    e->cu.workspace_bytes = EMU_WORKSPACE;
    e->cu.host_scratch = scratch;
    e->cu.launch =
        (emu_ls_cuda_launch){.stream = NULL, .sm_count = sm_count, .scratch = ws, .scratch_bytes = EMU_WORKSPACE};
    snprintf(e->cu.name, sizeof e->cu.name, "CUDA kernels emulated on the CPU (%d SMs)", sm_count);
    e->table = emu_ls_cuda_ops;
    e->table.name = "cuda-emu";
    /* the context's life stays the CPU's (emu_ctx_destroy gives the CPU its state back) */
    e->table.init = e->cpu->init;
    e->table.fini = e->cpu->fini;
    e->table.allocator_create = e->cpu->allocator_create;
    e->table.gemm = e_gemm;
    e->table.linear_fwd = e_linear_fwd;
    e->table.linear_bwd = e_linear_bwd;
    e->table.conv2d_workspace = e_conv2d_workspace;
    e->table.conv2d_fwd = e_conv2d_fwd;
    e->table.conv2d_bwd = e_conv2d_bwd;
    ls_allocator *dev = NULL;
    ls_status st = ls_allocator_create(&dev_vtable, NULL, c->device, 0, &dev);
    if (st != LS_OK) {
        free(e), free(ws), free(scratch);
        ls_ctx_destroy(c);
        return st;
    }
    c->alloc = dev; /* ls_ctx_destroy destroys it (it is not the host allocator) */
    c->ops = &e->table;
    c->state = e;
    *out = c;
    return LS_OK;
}

void emu_ctx_destroy(ls_ctx *c) {
    if (!c) return;
    emu_state *e = c->state;
    c->ops = e->cpu;
    c->state = e->cpu_state;
    free(e->cu.workspace);
    free(e->cu.host_scratch);
    free(e);
    ls_ctx_destroy(c);
}
