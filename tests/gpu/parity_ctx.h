/* parity_ctx.h: the device contexts of the parity tests (test_gpu_parity.c,
 * test_gpu_cnn_parity.c). Built plain, they are CUDA contexts (CPU contexts with --self). Built
 * with LS_PARITY_EMU (the tests *_emu), they are contexts whose CUDA kernels run emulated on the
 * CPU through the CUDA backend's own entry code (emu/emu_ctx.h), its cuBLAS, cuBLASLt and cuDNN
 * calls answered by stand-ins, so every comparison runs without a GPU. */
#ifndef LOCKSTEP_TEST_PARITY_CTX_H
#define LOCKSTEP_TEST_PARITY_CTX_H

#include "ops.h"
#include "testutil.h"
#ifdef LS_PARITY_EMU
#include "emu_ctx.h"
#endif

#ifdef LS_PARITY_EMU
enum { parity_emulated = 1 };
#else
enum { parity_emulated = 0 };
#endif

/* What the device is, for the first line of output. */
static inline const char *parity_device_name(int self_mode) {
    if (parity_emulated) return "cuda kernels emulated on the cpu";
    return self_mode ? "cpu (--self)" : "cuda:0";
}

/* A device context: sm_count sizes the emulated kernels' grids (ignored on a real device). */
static inline ls_status parity_ctx_create(ls_device dev, int sm_count, ls_ctx **out) {
#ifdef LS_PARITY_EMU
    (void)dev;
    return emu_ctx_create(sm_count, out);
#else
    (void)sm_count;
    return ls_ctx_create(dev, NULL, out);
#endif
}

static inline void parity_ctx_destroy(ls_ctx *c) {
#ifdef LS_PARITY_EMU
    emu_ctx_destroy(c);
#else
    ls_ctx_destroy(c);
#endif
}

#endif
