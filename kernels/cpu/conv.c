/* conv.c: the CPU backend's NCHW conv2d (stride, padding, groups, optional bias) through im2col
 * and OpenBLAS GEMMs over chunks of images (one image for large feature maps, several for small
 * ones, so the workspace stays a few MiB): forward and backward (dw and db accumulated; dx by a
 * correlation for stride 1, else GEMM + col2im). Instantiated from conv_impl.inc for f32,
 * f64, and f16/bf16 computed in f32. */
#include <cblas.h>
#include <string.h>

#include "cpu.h"
#include "cpu_cnn.h"
#include "half_impl.h"

#define LS_CAT_(a, b) a##b
#define LS_CAT(a, b) LS_CAT_(a, b)

/* A 1x1, stride-1, unpadded convolution needs no im2col: each image is already [C, H*W]. */
static int conv_is_direct(const ls_conv2d_params *p) {
    return p->R == 1 && p->S == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 && p->pad_w == 0;
}

/* With stride 1 (and padding < kernel), dx is the correlation of dy, padded by kernel-1-pad, with
 * the flipped, transposed weights: one im2col of dy + a GEMM writing dx, instead of a GEMM into
 * dcol [C/G*R*S, P*Q] and a scatter-add. Chosen when col(dy) is no larger than dcol (K <= C). */
static int conv_dx_by_correlation(const ls_conv2d_params *p) {
    return p->stride_h == 1 && p->stride_w == 1 && p->pad_h < p->R && p->pad_w < p->S && p->K <= p->C;
}

/* Images per chunk: enough GEMM columns (about 512) that small feature maps still make efficient
 * GEMMs and the weights are packed once per chunk, with the workspace kept to a few MiB. */
static int64_t conv_chunk(const ls_conv2d_params *p) {
    const int64_t pq = p->P * p->Q, hw = p->H * p->W, crs = p->C / p->groups * p->R * p->S;
    const int64_t krs = p->K / p->groups * p->R * p->S, limit = (int64_t)1 << 20; /* elements */
    int64_t nb = pq > 0 ? (512 + pq - 1) / pq : 1;
    if (nb > p->N) nb = p->N;
    while (nb > 1 && (crs * nb * pq > limit || krs * nb * hw > limit || p->C * nb * hw > limit)) nb--;
    return nb < 1 ? 1 : nb;
}

/* The geometry im2col/col2im need: planes H x W read, windows R x S, output P x Q. */
typedef struct conv_geom {
    int64_t H, W, P, Q, R, S, sh, sw, ph, pw;
} conv_geom;

static conv_geom conv_geom_of(const ls_conv2d_params *p) {
    conv_geom g = {p->H, p->W, p->P, p->Q, p->R, p->S, p->stride_h, p->stride_w, p->pad_h, p->pad_w};
    return g;
}

/* Reading dy [P, Q] with padding kernel-1-pad gives windows over an H x W output (stride 1). */
static conv_geom conv_geom_transposed(const ls_conv2d_params *p) {
    conv_geom g = {p->P, p->Q, p->H, p->W, p->R, p->S, 1, 1, p->R - 1 - p->pad_h, p->S - 1 - p->pad_w};
    return g;
}

#define TS float
#define TC float
#define SFX f32
#define LD(v) (v)
#define ST(v) (v)
#define LDN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define STN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define LOWP 0
#define GEMM cblas_sgemm
#include "conv_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN
#undef LOWP
#undef GEMM

#define TS double
#define TC double
#define SFX f64
#define LD(v) (v)
#define ST(v) (v)
#define LDN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define STN(s, d, n) memcpy((d), (s), (size_t)(n) * sizeof(TC))
#define LOWP 0
#define GEMM cblas_dgemm
#include "conv_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN
#undef LOWP
#undef GEMM

#define TS uint16_t
#define TC float
#define SFX f16
#define LD(v) ls_hi_f16_to_f32(v)
#define ST(v) ls_hi_f32_to_f16(v)
#define LDN(s, d, n) ls_half_f16_to_f32_n((s), (d), (n))
#define STN(s, d, n) ls_half_f32_to_f16_n((s), (d), (n))
#define LOWP 1
#define GEMM cblas_sgemm
#include "conv_impl.inc"
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN

#define SFX bf16
#define LD(v) ls_hi_bf16_to_f32(v)
#define ST(v) ls_hi_f32_to_bf16(v)
#define LDN(s, d, n) ls_half_bf16_to_f32_n((s), (d), (n))
#define STN(s, d, n) ls_half_f32_to_bf16_n((s), (d), (n))
#include "conv_impl.inc"
#undef TS
#undef TC
#undef SFX
#undef LD
#undef ST
#undef LDN
#undef STN
#undef LOWP
#undef GEMM

size_t ls_cpu_conv2d_workspace(void *st, ls_dtype t, const ls_conv2d_params *p, int backward) {
    switch (t) {
    case LS_F32: return conv_ws_bytes_f32(p, backward);
    case LS_F64: return conv_ws_bytes_f64(p, backward);
    case LS_F16: return conv_ws_bytes_f16(p, backward);
    case LS_BF16: return conv_ws_bytes_bf16(p, backward);
    default: return 0;
    }
}

ls_status ls_cpu_conv2d_fwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                            const void *b, void *y, void *ws) {
    switch (t) {
    case LS_F32: conv_fwd_f32(p, x, w, b, y, ws); return LS_OK;
    case LS_F64: conv_fwd_f64(p, x, w, b, y, ws); return LS_OK;
    case LS_F16: conv_fwd_f16(p, x, w, b, y, ws); return LS_OK;
    case LS_BF16: conv_fwd_bf16(p, x, w, b, y, ws); return LS_OK;
    default: return LS_CPU_BAD_DTYPE4("conv2d", t);
    }
}

ls_status ls_cpu_conv2d_bwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                            const void *w, void *dx, void *dw, void *db, void *ws) {
    switch (t) {
    case LS_F32: conv_bwd_f32(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    case LS_F64: conv_bwd_f64(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    case LS_F16: conv_bwd_f16(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    case LS_BF16: conv_bwd_bf16(p, dy, x, w, dx, dw, db, ws); return LS_OK;
    default: return LS_CPU_BAD_DTYPE4("conv2d backward", t);
    }
}
