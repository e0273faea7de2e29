/* emu_ctx.h: a compute context for the parity tests on a machine without a GPU. Its op table
 * is the CUDA backend's own (kernels/cuda/cuda_ops.c, translated by translate.py), so every op
 * that runs lockstep's CUDA kernels runs them, emulated on the CPU (cuda_emu.h), through the
 * backend's real entry code. The GEMMs, linear layers and convolutions, which the backend hands
 * to cuBLAS and cuDNN, go to the CPU backend instead: there is nothing of ours to emulate there.
 * "Device" memory is host memory of exactly the size asked (AddressSanitizer checks every access
 * of the emulated kernels against it). */
#ifndef LOCKSTEP_EMU_CTX_H
#define LOCKSTEP_EMU_CTX_H

#include "ops.h"

/* sm_count: the SM count the kernels size their grids by (small counts make every grid-stride
 * loop and split reduction take several turns). */
ls_status emu_ctx_create(int sm_count, ls_ctx **out);
void emu_ctx_destroy(ls_ctx *ctx);
/* How many calls to the CPU-delegated entries answered LS_ERR_UNSUPPORTED so far (the CPU lacks
 * some f16/bf16 GEMMs; the tests skip those, and only those). */
long emu_ctx_delegated_unsupported(void);

#endif
