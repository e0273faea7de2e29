/* emu_ctx.h: a compute context for the parity tests on a machine without a GPU. Its op table
 * is the CUDA backend's own (kernels/cuda/cuda_ops.c and cudnn_conv.c, translated by
 * translate.py), started by the backend's own init: every op runs the backend's entry code, its
 * CUDA kernels emulated on the CPU (cuda_emu.h) and its cuBLAS, cuBLASLt and cuDNN calls answered
 * by the stand-ins (emu_cublas.c, emu_cudnn.c). "Device" memory is host memory of exactly the size
 * asked (AddressSanitizer checks every access of the emulated kernels against it). */
#ifndef LOCKSTEP_EMU_CTX_H
#define LOCKSTEP_EMU_CTX_H

#include "ops.h"

/* sm_count: the SM count the device reports, which the kernels size their grids by (small counts
 * make every grid-stride loop and split reduction take several turns). LOCKSTEP_TF32 is read as
 * on a GPU. At most 8 at once. */
ls_status emu_ctx_create(int sm_count, ls_ctx **out);
void emu_ctx_destroy(ls_ctx *ctx);

#endif
