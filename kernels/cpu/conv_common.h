/* conv_common.h (internal): what conv_impl.inc needs besides its type macros: the chunking and
 * geometry helpers, shared by conv.c and conv_f16c.c (static: each includer gets its own copy). */
#ifndef LOCKSTEP_CONV_COMMON_H
#define LOCKSTEP_CONV_COMMON_H

#include <stdint.h>

#include "ops.h"

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

#endif
