/* norm_pool.c: the CPU backend's batch normalization (statistics, normalize + optional fused
 * ReLU, backward split into per-channel reductions and dx so that statistics can be combined
 * across ranks), max/average pooling, global average pooling and the residual add, over NCHW
 * tensors. Instantiated from norm_pool_impl.inc for f32, f64, and f16/bf16 computed in f32. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "cpu_cnn.h"
#include "half_impl.h"

#define LS_CAT_(a, b) a##b
#define LS_CAT(a, b) LS_CAT_(a, b)

#define TS float
#define TC float
#define SFX f32
#define LD(v) (v)
#define ST(v) (v)
#define LOWP 0
#include "norm_pool_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LOWP

#define TS double
#define TC double
#define SFX f64
#define LD(v) (v)
#define ST(v) (v)
#define LOWP 0
#include "norm_pool_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LOWP

#define TS uint16_t
#define TC float
#define LOWP 1
#define SFX f16
#define LD(v) ls_hi_f16_to_f32(v)
#define ST(v) ls_hi_f32_to_f16(v)
#include "norm_pool_impl.inc"
#undef SFX
#undef LD
#undef ST
#define SFX bf16
#define LD(v) ls_hi_bf16_to_f32(v)
#define ST(v) ls_hi_f32_to_bf16(v)
#include "norm_pool_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LOWP

/* f16: the F16C build of the kernels where the CPU has it (norm_pool_f16c.c), else the portable
 * one above; the same results bit for bit. */
#if LS_HAVE_NP_F16C
#define F16(fn, ...) (ls_half_has_f16c() ? ls_cpu_np_f16c.fn(__VA_ARGS__) : LS_CAT(fn, _f16)(__VA_ARGS__))
#else
#define F16(fn, ...) LS_CAT(fn, _f16)(__VA_ARGS__)
#endif
static ls_status bn_stats_f16x(const ls_bn_params *p, const uint16_t *x, float *mean, float *var) {
    return F16(bn_stats, p, x, mean, var);
}
static ls_status bn_fwd_f16x(const ls_bn_params *p, const uint16_t *x, const float *mean, const float *var,
                             const float *gamma, const float *beta, uint16_t *y) {
    return F16(bn_fwd, p, x, mean, var, gamma, beta, y);
}
static ls_status bn_bwd_reduce_f16x(const ls_bn_params *p, const uint16_t *dy, const uint16_t *x, const uint16_t *y,
                                    const float *mean, const float *var, float *sum_dy, float *sum_dy_xhat) {
    return F16(bn_bwd_reduce, p, dy, x, y, mean, var, sum_dy, sum_dy_xhat);
}
static ls_status bn_bwd_dx_f16x(const ls_bn_params *p, const uint16_t *dy, const uint16_t *x, const uint16_t *y,
                                const float *mean, const float *var, const float *gamma, const float *sum_dy,
                                const float *sum_dy_xhat, double count, uint16_t *dx) {
    return F16(bn_bwd_dx, p, dy, x, y, mean, var, gamma, sum_dy, sum_dy_xhat, count, dx);
}
static ls_status pool_fwd_f16x(const ls_pool2d_params *p, const uint16_t *x, uint16_t *y) {
    return F16(pool_fwd, p, x, y);
}
static ls_status pool_bwd_f16x(const ls_pool2d_params *p, const uint16_t *x, const uint16_t *dy, uint16_t *dx) {
    return F16(pool_bwd, p, x, dy, dx);
}
static void gap_fwd_f16x(int64_t planes, int64_t hw, const uint16_t *x, uint16_t *y) { F16(gap_fwd, planes, hw, x, y); }
static void gap_bwd_f16x(int64_t planes, int64_t hw, const uint16_t *dy, uint16_t *dx) {
    F16(gap_bwd, planes, hw, dy, dx);
}
static void add_f16x(int64_t n, const uint16_t *a, const uint16_t *b, int relu, uint16_t *y) {
    F16(add, n, a, b, relu, y);
}

/* One switch per entry: f32, f64, f16, bf16. */
#define NP_DISPATCH(op, t, call)                                                                                       \
    switch (t) {                                                                                                       \
    case LS_F32: call(f32); return LS_OK;                                                                              \
    case LS_F64: call(f64); return LS_OK;                                                                              \
    case LS_F16: call(f16x); return LS_OK;                                                                             \
    case LS_BF16: call(bf16); return LS_OK;                                                                            \
    default: return LS_CPU_BAD_DTYPE4(op, t);                                                                          \
    }
/* The same for kernels that return a status. */
#define NP_DISPATCH_S(op, t, call)                                                                                     \
    switch (t) {                                                                                                       \
    case LS_F32: return call(f32);                                                                                     \
    case LS_F64: return call(f64);                                                                                     \
    case LS_F16: return call(f16x);                                                                                    \
    case LS_BF16: return call(bf16);                                                                                   \
    default: return LS_CPU_BAD_DTYPE4(op, t);                                                                          \
    }

ls_status ls_cpu_bn_stats(void *st, ls_dtype t, const ls_bn_params *p, const void *x, void *mean, void *var){
#define CALL(s) LS_CAT(bn_stats_, s)(p, x, mean, var)
    NP_DISPATCH_S("batch-norm statistics", t, CALL)
#undef CALL
}

ls_status ls_cpu_bn_fwd(void *st, ls_dtype t, const ls_bn_params *p, const void *x, const void *mean, const void *var,
                        const void *gamma, const void *beta, void *y){
#define CALL(s) LS_CAT(bn_fwd_, s)(p, x, mean, var, gamma, beta, y)
    NP_DISPATCH_S("batch norm", t, CALL)
#undef CALL
}

ls_status ls_cpu_bn_bwd_reduce(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                               const void *y, const void *mean, const void *var, void *sum_dy, void *sum_dy_xhat){
#define CALL(s) LS_CAT(bn_bwd_reduce_, s)(p, dy, x, y, mean, var, sum_dy, sum_dy_xhat)
    NP_DISPATCH_S("batch-norm backward", t, CALL)
#undef CALL
}

ls_status ls_cpu_bn_bwd_dx(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x, const void *y,
                           const void *mean, const void *var, const void *gamma, const void *sum_dy,
                           const void *sum_dy_xhat, double count, void *dx){
#define CALL(s) LS_CAT(bn_bwd_dx_, s)(p, dy, x, y, mean, var, gamma, sum_dy, sum_dy_xhat, count, dx)
    NP_DISPATCH_S("batch-norm backward", t, CALL)
#undef CALL
}

ls_status ls_cpu_pool2d_fwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, void *y) {
    switch (t) {
    case LS_F32: return pool_fwd_f32(p, x, y);
    case LS_F64: return pool_fwd_f64(p, x, y);
    case LS_F16: return pool_fwd_f16x(p, x, y);
    case LS_BF16: return pool_fwd_bf16(p, x, y);
    default: return LS_CPU_BAD_DTYPE4("pooling", t);
    }
}

ls_status ls_cpu_pool2d_bwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, const void *dy, void *dx) {
    switch (t) {
    case LS_F32: return pool_bwd_f32(p, x, dy, dx);
    case LS_F64: return pool_bwd_f64(p, x, dy, dx);
    case LS_F16: return pool_bwd_f16x(p, x, dy, dx);
    case LS_BF16: return pool_bwd_bf16(p, x, dy, dx);
    default: return LS_CPU_BAD_DTYPE4("pooling backward", t);
    }
}

ls_status ls_cpu_global_avgpool_fwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *x, void *y){
#define CALL(s) LS_CAT(gap_fwd_, s)(planes, hw, x, y)
    NP_DISPATCH("global average pooling", t, CALL)
#undef CALL
}

ls_status ls_cpu_global_avgpool_bwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *dy, void *dx){
#define CALL(s) LS_CAT(gap_bwd_, s)(planes, hw, dy, dx)
    NP_DISPATCH("global average pooling backward", t, CALL)
#undef CALL
}

ls_status ls_cpu_add(void *st, ls_dtype t, int64_t n, const void *a, const void *b, int relu, void *y) {
#define CALL(s) LS_CAT(add_, s)(n, a, b, relu, y)
    NP_DISPATCH("add", t, CALL)
#undef CALL
}
