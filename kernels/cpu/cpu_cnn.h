/* cpu_cnn.h (internal): the CPU backend's NCHW convolution, pooling, batch-normalization and
 * residual-add entries (conv.c, norm_pool.c), referenced by the op table in cpu_ops.c. Every
 * entry computes in f32 or f64; f16/bf16 tensors are widened per element or per image into f32
 * and rounded back (per-channel statistics and parameter gradients stay f32). */
#ifndef LOCKSTEP_CPU_CNN_H
#define LOCKSTEP_CPU_CNN_H

#include <stddef.h>
#include <stdint.h>

#include "ops.h"

/* The memory-bound loops of these kernels (normalization, im2col, the residual add) are compiled
 * for AVX-512 and AVX2 as well as the baseline ISA, the best picked at load time (GCC function
 * multiversioning). Arithmetic is the same in every version: no contraction into FMA under
 * -std=c11, and sums keep their fixed 8-way association. Off under the sanitizers. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define LS_CPU_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LS_CPU_HOT
#endif

/* The CNN entries compute in all four float types. */
#define LS_CPU_BAD_DTYPE4(op, t) ls_cpu_bad_dtype(op, t, "f32, f64, f16 or bf16")

size_t ls_cpu_conv2d_workspace(void *st, ls_dtype t, const ls_conv2d_params *p, int backward);
ls_status ls_cpu_conv2d_fwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                            const void *b, void *y, void *ws);
ls_status ls_cpu_conv2d_bwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                            const void *w, void *dx, void *dw, void *db, void *ws);
ls_status ls_cpu_pool2d_fwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, void *y);
ls_status ls_cpu_pool2d_bwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, const void *dy,
                            void *dx);
ls_status ls_cpu_global_avgpool_fwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *x, void *y);
ls_status ls_cpu_global_avgpool_bwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *dy, void *dx);
ls_status ls_cpu_bn_stats(void *st, ls_dtype t, const ls_bn_params *p, const void *x, void *mean, void *var);
ls_status ls_cpu_bn_fwd(void *st, ls_dtype t, const ls_bn_params *p, const void *x, const void *mean,
                        const void *var, const void *gamma, const void *beta, void *y);
ls_status ls_cpu_bn_bwd_reduce(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                               const void *y, const void *mean, const void *var, void *sum_dy, void *sum_dy_xhat);
ls_status ls_cpu_bn_bwd_dx(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                           const void *y, const void *mean, const void *var, const void *gamma,
                           const void *sum_dy, const void *sum_dy_xhat, double count, void *dx);
ls_status ls_cpu_add(void *st, ls_dtype t, int64_t n, const void *a, const void *b, int relu, void *y);

#endif
