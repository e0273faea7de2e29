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
 * -std=c11, and sums keep their fixed 8-way association. Off under the sanitizers (under TSan the
 * instrumented resolvers ran before its runtime started: every program crashed at load). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) &&               \
    !defined(__SANITIZE_THREAD__)
#define LS_CPU_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LS_CPU_HOT
#endif

/* The f16 kernels of norm_pool_impl.inc as a table: norm_pool_f16c.c's copy, compiled for AVX2 +
 * F16C (x86-64 builds, LS_HAVE_NP_F16C), is used where the CPU has both (ls_half_has_f16c). */
typedef struct ls_cpu_np_f16 {
    ls_status (*bn_stats)(const ls_bn_params *p, const uint16_t *x, float *mean, float *var);
    ls_status (*bn_fwd)(const ls_bn_params *p, const uint16_t *x, const float *mean, const float *var,
                        const float *gamma, const float *beta, uint16_t *y);
    ls_status (*bn_bwd_reduce)(const ls_bn_params *p, const uint16_t *dy, const uint16_t *x, const uint16_t *y,
                               const float *mean, const float *var, float *sum_dy, float *sum_dy_xhat);
    ls_status (*bn_bwd_dx)(const ls_bn_params *p, const uint16_t *dy, const uint16_t *x, const uint16_t *y,
                           const float *mean, const float *var, const float *gamma, const float *sum_dy,
                           const float *sum_dy_xhat, double count, uint16_t *dx);
    ls_status (*pool_fwd)(const ls_pool2d_params *p, const uint16_t *x, uint16_t *y);
    ls_status (*pool_bwd)(const ls_pool2d_params *p, const uint16_t *x, const uint16_t *dy, uint16_t *dx);
    void (*gap_fwd)(int64_t planes, int64_t hw, const uint16_t *x, uint16_t *y);
    void (*gap_bwd)(int64_t planes, int64_t hw, const uint16_t *dy, uint16_t *dx);
    void (*add)(int64_t n, const uint16_t *a, const uint16_t *b, int relu, uint16_t *y);
} ls_cpu_np_f16;
#if LS_HAVE_NP_F16C
extern const ls_cpu_np_f16 ls_cpu_np_f16c;
/* conv_f16c.c: the f16 convolution built for AVX2 + F16C */
void ls_cpu_conv_fwd_f16c(const ls_conv2d_params *p, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                          uint16_t *y, void *ws);
void ls_cpu_conv_bwd_f16c(const ls_conv2d_params *p, const uint16_t *dy, const uint16_t *x, const uint16_t *w,
                          uint16_t *dx, float *dw, float *db, void *ws);
size_t ls_cpu_conv_ws_bytes_f16c(const ls_conv2d_params *p, int pass);
#endif

/* batch norm's scratch allocation failed */
static inline ls_status bn_no_memory(int64_t C) {
    return ls_error(LS_ERR_OUT_OF_MEMORY, "batch norm: no host memory for %lld per-channel values", (long long)C);
}

/* The CNN entries compute in all four float types. */
#define LS_CPU_BAD_DTYPE4(op, t) ls_cpu_bad_dtype(op, t, "f32, f64, f16 or bf16")

size_t ls_cpu_conv2d_workspace(void *st, ls_dtype t, const ls_conv2d_params *p, int pass);
ls_status ls_cpu_conv2d_fwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                            const void *b, void *y, void *ws);
ls_status ls_cpu_conv2d_bwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                            const void *w, void *dx, void *dw, void *db, void *ws);
ls_status ls_cpu_pool2d_fwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, void *y);
ls_status ls_cpu_pool2d_bwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, const void *dy, void *dx);
ls_status ls_cpu_global_avgpool_fwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *x, void *y);
ls_status ls_cpu_global_avgpool_bwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *dy, void *dx);
ls_status ls_cpu_bn_stats(void *st, ls_dtype t, const ls_bn_params *p, const void *x, void *mean, void *var);
ls_status ls_cpu_bn_fwd(void *st, ls_dtype t, const ls_bn_params *p, const void *x, const void *mean, const void *var,
                        const void *gamma, const void *beta, void *y);
ls_status ls_cpu_bn_bwd_reduce(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                               const void *y, const void *mean, const void *var, void *sum_dy, void *sum_dy_xhat);
ls_status ls_cpu_bn_bwd_dx(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x, const void *y,
                           const void *mean, const void *var, const void *gamma, const void *sum_dy,
                           const void *sum_dy_xhat, double count, void *dx);
ls_status ls_cpu_add(void *st, ls_dtype t, int64_t n, const void *a, const void *b, int relu, void *y);

#endif
