/* cpu_ops.c: the CPU op table. GEMMs go through OpenBLAS (cblas); the elementwise, softmax
 * cross-entropy and optimizer loops come from cpu_impl.inc, instantiated for f32 and f64 (f64 is
 * the reference used by gradient checks). Each entry dispatches on dtype. f16/bf16 tensors are
 * computed in f32 and stored in the low precision (the GPU's mixed-precision policy): inputs are
 * widened into a per-context scratch buffer, the f32 kernel runs, outputs are rounded back. With
 * low-precision activations the parameter gradients (dw, db) and the softmax probabilities and
 * losses are f32, as with fp32 master weights. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "philox.h"
#include "cpu_cnn.h"
#include "ops.h"

#define LS_CAT_(a, b) a##b
#define LS_CAT(a, b) LS_CAT_(a, b)

#define T float
#define SFX f32
#define GEMM cblas_sgemm
#define EXP expf
#define LOG logf
#define ERF erff
#define SQRT sqrtf
#include "cpu_impl.inc"
#undef T
#undef SFX
#undef GEMM
#undef EXP
#undef LOG
#undef ERF
#undef SQRT

#define T double
#define SFX f64
#define GEMM cblas_dgemm
#define EXP exp
#define LOG log
#define ERF erf
#define SQRT sqrt
#include "cpu_impl.inc"

ls_status ls_cpu_bad_dtype(const char *op, ls_dtype t, const char *supported) {
    return ls_error(LS_ERR_UNSUPPORTED, "the CPU backend's %s does not compute in %s (use %s)", op, ls_dtype_name(t),
                    supported);
}

#define LS_CPU_DISPATCH(op, t, call32, call64)                                                                         \
    do {                                                                                                               \
        if ((t) == LS_F32) {                                                                                           \
            call32;                                                                                                    \
            return LS_OK;                                                                                              \
        }                                                                                                              \
        if ((t) == LS_F64) {                                                                                           \
            call64;                                                                                                    \
            return LS_OK;                                                                                              \
        }                                                                                                              \
        return ls_cpu_bad_dtype(op, t, "f32 or f64");                                                                  \
    } while (0)

/* Backend state: scratch for the low-precision paths (grown on demand, reused). */
typedef struct cpu_state {
    float *scratch;
    size_t cap; /* floats */
} cpu_state;

static ls_status cpu_init(ls_device dev, void **state) {
    *state = calloc(1, sizeof(cpu_state));
    if (!*state) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the CPU backend state");
    return LS_OK;
}
static void cpu_fini(void *st) {
    if (!st) return;
    free(((cpu_state *)st)->scratch);
    free(st);
}

/* n floats of scratch; previously returned pointers are invalidated. */
static float *scratch(void *st, int64_t n) {
    cpu_state *s = st;
    if ((size_t)n > s->cap) {
        float *p = realloc(s->scratch, (size_t)n * sizeof(float) + 64);
        if (!p) return NULL;
        s->scratch = p;
        s->cap = (size_t)n;
    }
    return s->scratch;
}

static int lowp(ls_dtype t) { return t == LS_F16 || t == LS_BF16; }

static ls_status widen(ls_dtype t, int64_t n, const void *src, float *dst) {
    return src ? ls_cpu_convert(n, t, src, LS_F32, dst) : LS_OK;
}

#define LS_SCRATCH(var, st, n)                                                                                         \
    float *var = scratch(st, n);                                                                                       \
    if (!var) return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for %lld floats of scratch", (long long)(n))
static ls_status cpu_sync(void *st) { return LS_OK; }

static ls_status cpu_gemm(void *st, ls_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                          const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    LS_CPU_DISPATCH("gemm", t, gemm_f32(ta, tb, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc),
                    gemm_f64(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc));
}
static ls_status cpu_bias_add(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *b, void *y) {
    LS_CPU_DISPATCH("bias_add", t, bias_add_f32(rows, cols, b, y), bias_add_f64(rows, cols, b, y));
}
static ls_status cpu_bias_grad(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *dy, void *db) {
    LS_CPU_DISPATCH("bias_grad", t, bias_grad_f32(rows, cols, dy, db), bias_grad_f64(rows, cols, dy, db));
}
static ls_status lowp_linear_fwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *x, const void *w,
                                 const void *b, void *y) {
    LS_SCRATCH(buf, st, B * in + out * in + out + B * out);
    float *x32 = buf, *w32 = x32 + B * in, *b32 = w32 + out * in, *y32 = b32 + out;
    LS_CHECK(widen(t, B * in, x, x32));
    LS_CHECK(widen(t, out * in, w, w32));
    LS_CHECK(widen(t, out, b, b32));
    linear_fwd_f32(B, in, out, x32, w32, b ? b32 : NULL, y32);
    return ls_cpu_convert(B * out, LS_F32, y32, t, y);
}

static ls_status cpu_linear_fwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *x, const void *w,
                                const void *b, void *y) {
    if (lowp(t)) return lowp_linear_fwd(st, t, B, in, out, x, w, b, y);
    LS_CPU_DISPATCH("linear", t, linear_fwd_f32(B, in, out, x, w, b, y), linear_fwd_f64(B, in, out, x, w, b, y));
}
/* dw, db: f32 master gradients, accumulated. */
static ls_status lowp_linear_bwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *dy,
                                 const void *x, const void *w, void *dx, void *dw, void *db) {
    LS_SCRATCH(buf, st, B * out + B * in + out * in + B * in);
    float *dy32 = buf, *x32 = dy32 + B * out, *w32 = x32 + B * in, *dx32 = w32 + out * in;
    LS_CHECK(widen(t, B * out, dy, dy32));
    LS_CHECK(widen(t, B * in, x, x32));
    LS_CHECK(widen(t, out * in, w, w32));
    linear_bwd_f32(B, in, out, dy32, x32, w32, dx ? dx32 : NULL, dw, db);
    return dx ? ls_cpu_convert(B * in, LS_F32, dx32, t, dx) : LS_OK;
}

static ls_status cpu_linear_bwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *dy, const void *x,
                                const void *w, void *dx, void *dw, void *db) {
    if (lowp(t)) return lowp_linear_bwd(st, t, B, in, out, dy, x, w, dx, dw, db);
    LS_CPU_DISPATCH("linear backward", t, linear_bwd_f32(B, in, out, dy, x, w, dx, dw, db),
                    linear_bwd_f64(B, in, out, dy, x, w, dx, dw, db));
}
static ls_status cpu_act_fwd(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, void *y) {
    if (lowp(t)) {
        LS_SCRATCH(x32, st, n);
        LS_CHECK(widen(t, n, x, x32));
        act_fwd_f32(act, n, x32, x32);
        return ls_cpu_convert(n, LS_F32, x32, t, y);
    }
    LS_CPU_DISPATCH("activation", t, act_fwd_f32(act, n, x, y), act_fwd_f64(act, n, x, y));
}
static ls_status cpu_act_bwd(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, const void *dy, void *dx) {
    if (lowp(t)) {
        LS_SCRATCH(buf, st, 2 * n);
        LS_CHECK(widen(t, n, x, buf));
        LS_CHECK(widen(t, n, dy, buf + n));
        act_bwd_f32(act, n, buf, buf + n, buf + n);
        return ls_cpu_convert(n, LS_F32, buf + n, t, dx);
    }
    LS_CPU_DISPATCH("activation backward", t, act_bwd_f32(act, n, x, dy, dx), act_bwd_f64(act, n, x, dy, dx));
}
/* Low-precision logits: probs and losses are f32. */
static ls_status cpu_xent_fwd(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                              double smoothing, void *probs, void *losses) {
    if (lowp(t)) {
        LS_SCRATCH(z32, st, B * C);
        LS_CHECK(widen(t, B * C, logits, z32));
        xent_fwd_f32(B, C, z32, labels, smoothing, probs, losses);
        return LS_OK;
    }
    LS_CPU_DISPATCH("cross-entropy", t, xent_fwd_f32(B, C, logits, labels, smoothing, probs, losses),
                    xent_fwd_f64(B, C, logits, labels, smoothing, probs, losses));
}
/* Low-precision dlogits: probs are f32. */
static ls_status cpu_xent_bwd(void *st, ls_dtype t, int64_t B, int64_t C, const void *probs, const int32_t *labels,
                              double smoothing, double scale, const double *scale_num, void *dlogits) {
    if (scale_num) scale = *scale_num / scale; /* "device" memory is host memory here */
    if (lowp(t)) {
        LS_SCRATCH(d32, st, B * C);
        xent_bwd_f32(B, C, probs, labels, smoothing, (float)scale, d32);
        return ls_cpu_convert(B * C, LS_F32, d32, t, dlogits);
    }
    LS_CPU_DISPATCH("cross-entropy backward", t, xent_bwd_f32(B, C, probs, labels, smoothing, (float)scale, dlogits),
                    xent_bwd_f64(B, C, probs, labels, smoothing, scale, dlogits));
}
static ls_status cpu_argmax(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                            int32_t *pred, int32_t *correct) {
    if (lowp(t)) {
        LS_SCRATCH(z32, st, B * C);
        LS_CHECK(widen(t, B * C, logits, z32));
        argmax_f32(B, C, z32, labels, pred, correct);
        return LS_OK;
    }
    LS_CPU_DISPATCH("argmax", t, argmax_f32(B, C, logits, labels, pred, correct),
                    argmax_f64(B, C, logits, labels, pred, correct));
}
static ls_status cpu_convert(void *st, int64_t n, ls_dtype src_t, const void *src, ls_dtype dst_t, void *dst) {
    return ls_cpu_convert(n, src_t, src, dst_t, dst);
}
static ls_status cpu_mul(void *st, ls_dtype t, int64_t n, const void *a, const void *b, void *y) {
    if (lowp(t)) {
        LS_SCRATCH(buf, st, 2 * n);
        LS_CHECK(widen(t, n, a, buf));
        LS_CHECK(widen(t, n, b, buf + n));
        mul_f32(n, buf, buf + n, buf);
        return ls_cpu_convert(n, LS_F32, buf, t, y);
    }
    LS_CPU_DISPATCH("mul", t, mul_f32(n, a, b, y), mul_f64(n, a, b, y));
}
static ls_status cpu_scale(void *st, ls_dtype t, int64_t n, double alpha, void *x) {
    LS_CPU_DISPATCH("scale", t, scale_f32(n, (float)alpha, x), scale_f64(n, alpha, x));
}
static ls_status cpu_axpy(void *st, ls_dtype t, int64_t n, double alpha, const void *x, void *y) {
    LS_CPU_DISPATCH("axpy", t, axpy_f32(n, (float)alpha, x, y), axpy_f64(n, alpha, x, y));
}
static ls_status cpu_sumsq(void *st, ls_dtype t, int64_t n, const void *x, double *out, int *nonfinite) {
    if (lowp(t)) {
        LS_SCRATCH(x32, st, n);
        LS_CHECK(widen(t, n, x, x32));
        sumsq_f32(n, x32, out, nonfinite);
        return LS_OK;
    }
    LS_CPU_DISPATCH("sum of squares", t, sumsq_f32(n, x, out, nonfinite), sumsq_f64(n, x, out, nonfinite));
}
/* A step counted in hp->ctl (ops.h): 0 when skipped, else 1 with the step's number in *step. */
static int cpu_optim_count(double *ctl, const double *skip, int64_t *step) {
    if (skip && *skip != 0) return 0;
    ctl[0] += 1;
    *step = (int64_t)ctl[0];
    return 1;
}
static ls_status cpu_sgd_step(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m,
                              const int64_t *n, const ls_sgd_params *hp_in) {
    if (t != LS_F32 && t != LS_F64) return ls_cpu_bad_dtype("SGD", t, "f32 or f64");
    ls_sgd_params hp = *hp_in;
    if (hp.ctl) {
        int64_t step;
        if (!cpu_optim_count(hp.ctl, hp.skip, &step)) return LS_OK;
        hp.first_step = step == 1;
    }
    for (int i = 0; i < k; i++) {
        void *mi = m ? m[i] : NULL;
        if (hp.weight_decays) hp.weight_decay = hp.weight_decays[i];
        if (t == LS_F32)
            sgd_f32(n[i], p[i], g[i], mi, &hp);
        else
            sgd_f64(n[i], p[i], g[i], mi, &hp);
    }
    return LS_OK;
}
static ls_status cpu_adamw_step(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m,
                                void *const *v, const int64_t *n, const ls_adamw_params *hp_in) {
    if (t != LS_F32 && t != LS_F64) return ls_cpu_bad_dtype("AdamW", t, "f32 or f64");
    ls_adamw_params hp = *hp_in;
    if (hp.ctl && !cpu_optim_count(hp.ctl, hp.skip, &hp.step)) return LS_OK;
    for (int i = 0; i < k; i++) {
        if (hp.weight_decays) hp.weight_decay = hp.weight_decays[i];
        if (t == LS_F32)
            adamw_f32(n[i], p[i], g[i], m[i], v[i], &hp);
        else
            adamw_f64(n[i], p[i], g[i], m[i], v[i], &hp);
    }
    return LS_OK;
}
/* ctl is host memory here: the same steps as the CUDA kernels, in place. */
static ls_status cpu_amp_check(void *st, ls_dtype t, int k, void *const *x, const int64_t *n, int unscale,
                               int accumulate, double *ctl) {
    if (t != LS_F32 && t != LS_F64) return ls_cpu_bad_dtype("inf/NaN check", t, "f32 or f64 (master gradients)");
    double sum = 0;
    int bad = 0;
    for (int i = 0; i < k; i++) {
        if (unscale) LS_CHECK(cpu_scale(st, t, n[i], 1.0 / ctl[LS_AMP_SCALE], x[i]));
        LS_CHECK(cpu_sumsq(st, t, n[i], x[i], &sum, &bad));
    }
    ctl[LS_AMP_SUM] = sum;
    ctl[LS_AMP_FOUND] = (bad || (accumulate && ctl[LS_AMP_FOUND] != 0)) ? 1.0 : 0.0;
    return LS_OK;
}
static ls_status cpu_amp_update(void *st, double *ctl, const ls_amp_update_params *p) {
    const int found = ctl[LS_AMP_FOUND] != 0;
    ctl[LS_AMP_LAST] = ctl[LS_AMP_SCALE];
    ctl[LS_AMP_SKIPPED] += found;
    if (!p->enabled) return LS_OK;
    if (found) {
        if (ctl[LS_AMP_SCALE] > LS_AMP_MIN_SCALE)
            ctl[LS_AMP_SCALE] = fmax(ctl[LS_AMP_SCALE] * p->backoff_factor, LS_AMP_MIN_SCALE);
        ctl[LS_AMP_TRACKER] = 0;
    } else if ((ctl[LS_AMP_TRACKER] += 1) >= (double)p->growth_interval) {
        const double grown = ctl[LS_AMP_SCALE] * p->growth_factor;
        if (grown <= FLT_MAX) ctl[LS_AMP_SCALE] = grown; /* as GradScaler: not to inf in f32 */
        ctl[LS_AMP_TRACKER] = 0;
    }
    return LS_OK;
}

static ls_status cpu_gather_rows(void *st, size_t elem_bytes, int64_t rows, int64_t cols, const void *src,
                                 const int64_t *idx, void *dst) {
    const size_t row = elem_bytes * (size_t)cols;
    for (int64_t r = 0; r < rows; r++)
        memcpy((char *)dst + (size_t)r * row, (const char *)src + (size_t)idx[r] * row, row);
    return LS_OK;
}

static ls_status cpu_gather_rows_lut(void *st, int64_t rows, int64_t cols, const uint8_t *src, const int64_t *idx,
                                     const float *lut, float *dst) {
    (void)st;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = src + (size_t)idx[r] * (size_t)cols;
        float *d = dst + (size_t)r * (size_t)cols;
        for (int64_t c = 0; c < cols; c++) d[c] = lut[s[c]];
    }
    return LS_OK;
}

static ls_status cpu_bn_update(void *st, ls_dtype t, int64_t C, double keep, double w1, const void *x1, void *y1,
                               double w2, const void *x2, void *y2) {
    if (t != LS_F32 && t != LS_F64) return ls_cpu_bad_dtype("batch-norm update", t, "f32 or f64");
    if (keep != 1.0) LS_CHECK(cpu_scale(st, t, C, keep, y1));
    LS_CHECK(cpu_axpy(st, t, C, w1, x1, y1));
    if (keep != 1.0) LS_CHECK(cpu_scale(st, t, C, keep, y2));
    return cpu_axpy(st, t, C, w2, x2, y2);
}

/* Dropout's multipliers (ops.h): f32/f64 drawn into y, f16/bf16 drawn as f32 into scratch and
 * converted. */
static ls_status cpu_dropout_mask(void *st, ls_dtype t, int64_t rows, int64_t per, const uint64_t *keys, uint32_t thr,
                                  double keep, void *y) {
    if (t != LS_F32 && t != LS_F64 && !lowp(t)) return ls_cpu_bad_dtype("dropout mask", t, "f32, f64, f16 and bf16");
    const int64_t n = rows * per;
    float *f = lowp(t) ? scratch(st, n) : (t == LS_F32 ? y : NULL);
    if (lowp(t) && !f) return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for %lld floats of scratch", (long long)n);
    const float kf = (float)keep;
    uint32_t u[4];
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < per; j += 4) {
            ls_philox4x32_10((uint64_t)(j / 4), keys[r], u);
            const int64_t e = per - j < 4 ? per - j : 4;
            if (f) {
                float *o = f + r * per + j;
                for (int64_t k = 0; k < e; k++) o[k] = (u[k] >> 8) >= thr ? kf : 0.0f;
            } else {
                double *o = (double *)y + r * per + j;
                for (int64_t k = 0; k < e; k++) o[k] = (u[k] >> 8) >= thr ? keep : 0.0;
            }
        }
    }
    return lowp(t) ? ls_cpu_convert(n, LS_F32, f, t, y) : LS_OK;
}

const ls_ops ls_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .fini = cpu_fini,
    .synchronize = cpu_sync,
    .allocator_create = NULL,
    .gemm = cpu_gemm,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd = cpu_linear_bwd,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .xent_fwd = cpu_xent_fwd,
    .xent_bwd = cpu_xent_bwd,
    .argmax = cpu_argmax,
    .convert = cpu_convert,
    .mul = cpu_mul,
    .scale = cpu_scale,
    .axpy = cpu_axpy,
    .sumsq = cpu_sumsq,
    .sgd_step = cpu_sgd_step,
    .adamw_step = cpu_adamw_step,
    .amp_check = cpu_amp_check,
    .amp_update = cpu_amp_update,
    .conv2d_workspace = ls_cpu_conv2d_workspace,
    .conv2d_fwd = ls_cpu_conv2d_fwd,
    .conv2d_bwd = ls_cpu_conv2d_bwd,
    .pool2d_fwd = ls_cpu_pool2d_fwd,
    .pool2d_bwd = ls_cpu_pool2d_bwd,
    .global_avgpool_fwd = ls_cpu_global_avgpool_fwd,
    .global_avgpool_bwd = ls_cpu_global_avgpool_bwd,
    .bn_stats = ls_cpu_bn_stats,
    .bn_fwd = ls_cpu_bn_fwd,
    .bn_bwd_reduce = ls_cpu_bn_bwd_reduce,
    .bn_bwd_dx = ls_cpu_bn_bwd_dx,
    .add = ls_cpu_add,
    .bn_update = cpu_bn_update,
    .dropout_mask = cpu_dropout_mask,
    .gather_rows = cpu_gather_rows,
    .gather_rows_lut = cpu_gather_rows_lut,
};
