/* test_cnn_values.c: the CNN ops' values. f32 conv2d forward and backward against a naive direct
 * convolution in double (strides, padding, groups, bias, rectangular kernels, the 1x1 direct path,
 * the stride-1 correlation path and the col2im path, one and several images per chunk), and without
 * dx (dw bit for bit the same, from a workspace no larger, smaller where dx needs room); pooling and
 * global average pooling known answers; batch-norm statistics and output against the formula;
 * f16/bf16 ops equal to the f32 op on the same rounded inputs, rounded (bitwise), with the F16C
 * kernels equal to the portable ones bit for bit (every f16 entry); shape and dtype errors; and a
 * backend whose CNN entries are missing (as the CUDA table for now) failing with
 * LS_ERR_UNSUPPORTED. */
#include <stdlib.h>

#include "cnn.h"
#include "half_impl.h"
#include "kernels/gradcheck.h"

static ls_ctx *C;
static ls_rng R;

static ls_tensor *tf(ls_dtype t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return gc_tensor(C, t, 4, (int64_t[]){a, b, c, d});
}
static float *F(ls_tensor *t) { return t->data; }

/* ---- conv2d against the definition ---- */
static void naive_conv(const float *x, const float *w, const float *b, double *y, int64_t N, int64_t Cin, int64_t H,
                       int64_t W, int64_t K, int64_t Rk, int64_t Sk, int st, int pad, int G, int64_t P, int64_t Q) {
    int64_t cg = Cin / G, kg = K / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    double s = b ? b[k] : 0;
                    int64_t g = k / kg;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t r = 0; r < Rk; r++)
                            for (int64_t t = 0; t < Sk; t++) {
                                int64_t ih = p * st - pad + r, iw = q * st - pad + t;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                s += (double)x[((n * Cin + g * cg + c) * H + ih) * W + iw] *
                                     (double)w[((k * cg + c) * Rk + r) * Sk + t];
                            }
                    y[((n * K + k) * P + p) * Q + q] = s;
                }
}

static double max_rel(const float *a, const double *ref, int64_t n) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - ref[i]) / fmax(scale, 1e-30));
    return worst;
}

static void check_conv(int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t K, int64_t Rk, int64_t Sk, int st, int pad,
                       int G, int bias) {
    int64_t P = ls_conv_out_size(H, Rk, st, pad), Q = ls_conv_out_size(W, Sk, st, pad);
    ls_tensor *x = tf(LS_F32, N, Cin, H, W), *w = tf(LS_F32, K, Cin / G, Rk, Sk), *y = tf(LS_F32, N, K, P, Q);
    ls_tensor *b = bias ? gc_tensor(C, LS_F32, 1, (int64_t[]){K}) : NULL;
    ls_tensor *dy = tf(LS_F32, N, K, P, Q), *dx = tf(LS_F32, N, Cin, H, W), *dw = tf(LS_F32, K, Cin / G, Rk, Sk);
    ls_tensor *db = bias ? gc_tensor(C, LS_F32, 1, (int64_t[]){K}) : NULL;
    gc_fill(&R, x, 0);
    gc_fill(&R, w, 0);
    gc_fill(&R, dy, 0);
    if (bias) gc_fill(&R, b, 0);
    LS_REQUIRE_OK(ls_op_conv2d_forward(C, x, w, b, y, st, pad, G));
    int64_t ny = N * K * P * Q, nx = N * Cin * H * W, nw = ls_tensor_numel(w);
    double *ref = calloc((size_t)(ny + nx + nw + K + 4), sizeof *ref);
    naive_conv(F(x), F(w), bias ? F(b) : NULL, ref, N, Cin, H, W, K, Rk, Sk, st, pad, G, P, Q);
    double ey = max_rel(F(y), ref, ny);
    /* backward by the definition: dx[n,c,ih,iw] += dy * w; dw[k,c,r,t] += dy * x; db[k] += dy */
    double *rdx = ref, *rdw = ref + nx, *rdb = ref + nx + nw;
    memset(ref, 0, sizeof *ref * (size_t)(nx + nw + K));
    int64_t cg = Cin / G, kg = K / G;
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    double d = F(dy)[((n * K + k) * P + p) * Q + q];
                    rdb[k] += d;
                    for (int64_t c = 0; c < cg; c++)
                        for (int64_t r = 0; r < Rk; r++)
                            for (int64_t t = 0; t < Sk; t++) {
                                int64_t ih = p * st - pad + r, iw = q * st - pad + t;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                int64_t xi = ((n * Cin + (k / kg) * cg + c) * H + ih) * W + iw,
                                        wi = ((k * cg + c) * Rk + r) * Sk + t;
                                rdx[xi] += d * F(w)[wi];
                                rdw[wi] += d * F(x)[xi];
                            }
                }
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, dy, x, w, dx, dw, db, st, pad, G));
    double ex = max_rel(F(dx), rdx, nx), ew = max_rel(F(dw), rdw, nw), eb = bias ? max_rel(F(db), rdb, K) : 0;
    /* without dx (a network's first convolution): the smaller workspace, the same dw bit for bit */
    ls_tensor *dw2 = tf(LS_F32, K, Cin / G, Rk, Sk);
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, dy, x, w, NULL, dw2, NULL, st, pad, G));
    LS_EXPECT(memcmp(dw2->data, dw->data, (size_t)nw * sizeof(float)) == 0);
    ls_tensor_destroy(dw2);
    if (!(ey < 1e-5 && ex < 1e-5 && ew < 1e-5 && eb < 1e-5))
        fprintf(stderr, "conv N%lld C%lld %lldx%lld K%lld %lldx%lld s%d p%d g%d: y %g dx %g dw %g db %g\n",
                (long long)N, (long long)Cin, (long long)H, (long long)W, (long long)K, (long long)Rk, (long long)Sk,
                st, pad, G, ey, ex, ew, eb);
    LS_EXPECT(ey < 1e-5);
    LS_EXPECT(ex < 1e-5);
    LS_EXPECT(ew < 1e-5);
    LS_EXPECT(eb < 1e-5);
    free(ref);
    ls_tensor *ts[] = {x, w, y, b, dy, dx, dw, db};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ls_tensor_destroy(ts[i]);
}

/* The workspace of a backward pass without dx is never larger than with it, and smaller where dx
 * needs room of its own: the stride-1 correlation (col(dy) and the flipped weights), and the
 * staged input gradient of a chunk of several images. */
static void check_conv_ws_weights_only(void) {
    static const struct {
        int64_t N, C, H, W, K, R;
        int stride, pad, groups, smaller;
    } cs[] = {{2, 6, 9, 8, 4, 3, 1, 1, 1, 1},    /* dx by correlation */
              {5, 4, 16, 16, 6, 3, 1, 1, 2, 1},  /* chunks of 2 images: dx staged */
              {2, 1, 28, 28, 16, 3, 1, 1, 1, 0}, /* the stem, one image a chunk: only col(x) either way */
              {3, 8, 11, 10, 8, 3, 2, 1, 2, 1}}; /* stride 2, 3 images a chunk: dx staged */
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        ls_conv2d_params p = {cs[i].N, cs[i].C, cs[i].H,      cs[i].W,      cs[i].K,   cs[i].R,   cs[i].R,
                              0,       0,       cs[i].stride, cs[i].stride, cs[i].pad, cs[i].pad, cs[i].groups};
        p.P = ls_conv_out_size(p.H, p.R, p.stride_h, p.pad_h);
        p.Q = ls_conv_out_size(p.W, p.S, p.stride_w, p.pad_w);
        for (int t = 0; t < 2; t++) {
            ls_dtype dt = t ? LS_BF16 : LS_F32;
            size_t both = C->ops->conv2d_workspace(C->state, dt, &p, LS_CONV_BACKWARD);
            size_t dw_only = C->ops->conv2d_workspace(C->state, dt, &p, LS_CONV_BACKWARD_WEIGHTS);
            printf("conv workspace, case %zu %s: backward %zu B, without dx %zu B\n", i, ls_dtype_name(dt), both,
                   dw_only);
            LS_EXPECT(dw_only <= both);
            if (cs[i].smaller) LS_EXPECT(dw_only < both);
        }
    }
}

/* ---- pooling known answers ---- */
static void check_pool_values(void) {
    /* x = 0..15 on a 4x4 plane */
    ls_tensor *x = tf(LS_F32, 1, 1, 4, 4), *y = tf(LS_F32, 1, 1, 2, 2), *dx = tf(LS_F32, 1, 1, 4, 4);
    for (int i = 0; i < 16; i++) F(x)[i] = (float)i;
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_MAX, 2, 2, 0, x, y));
    LS_EXPECT(F(y)[0] == 5 && F(y)[1] == 7 && F(y)[2] == 13 && F(y)[3] == 15);
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_AVG, 2, 2, 0, x, y));
    LS_EXPECT(F(y)[0] == 2.5f && F(y)[1] == 4.5f && F(y)[2] == 10.5f && F(y)[3] == 12.5f);
    /* max backward: each window's gradient to its maximum */
    ls_tensor *dy = tf(LS_F32, 1, 1, 2, 2);
    for (int i = 0; i < 4; i++) F(dy)[i] = (float)(i + 1);
    LS_REQUIRE_OK(ls_op_pool2d_backward(C, LS_POOL_MAX, 2, 2, 0, x, dy, dx));
    float want[16] = {0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4};
    for (int i = 0; i < 16; i++) LS_EXPECT(F(dx)[i] == want[i]);
    /* ties: the first maximum in scan order gets it all */
    for (int i = 0; i < 16; i++) F(x)[i] = 1;
    LS_REQUIRE_OK(ls_op_pool2d_backward(C, LS_POOL_MAX, 2, 2, 0, x, dy, dx));
    LS_EXPECT(F(dx)[0] == 1 && F(dx)[1] == 0 && F(dx)[4] == 0 && F(dx)[2] == 2 && F(dx)[10] == 4);
    /* 3x3 stride 1 padding 1 average counts the padding (PyTorch's count_include_pad=True) */
    ls_tensor *y3 = tf(LS_F32, 1, 1, 4, 4);
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_AVG, 3, 1, 1, x, y3));
    LS_EXPECT_NEAR(F(y3)[0], 4.0 / 9.0, 1e-7);
    LS_EXPECT_NEAR(F(y3)[5], 1.0, 1e-7);
    /* max with padding: padding never wins, even over negative values */
    for (int i = 0; i < 16; i++) F(x)[i] = -1.0f - (float)i;
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_MAX, 3, 1, 1, x, y3));
    LS_EXPECT(F(y3)[0] == -1.0f && F(y3)[15] == -11.0f);
    /* global average pooling: [N, C, H, W] -> [N, C] */
    ls_tensor *g = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 1});
    for (int i = 0; i < 16; i++) F(x)[i] = (float)i;
    LS_REQUIRE_OK(ls_op_global_avgpool_forward(C, x, g));
    LS_EXPECT(F(g)[0] == 7.5f);
    F(g)[0] = 32;
    LS_REQUIRE_OK(ls_op_global_avgpool_backward(C, g, dx));
    LS_EXPECT(F(dx)[0] == 2 && F(dx)[15] == 2);
    ls_tensor *ts[] = {x, y, dx, dy, y3, g};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ls_tensor_destroy(ts[i]);
}

/* ---- batch norm: statistics, output, running statistics ---- */
static void check_bn_values(void) {
    int64_t N = 3, Ch = 2, H = 2, W = 2, M = N * H * W;
    ls_module *bn;
    LS_REQUIRE_OK(ls_batchnorm2d_create(C, LS_F32, Ch, NULL, "bn", &bn));
    ls_tensor *x = tf(LS_F32, N, Ch, H, W);
    gc_fill(&R, x, 0);
    for (int64_t i = 0; i < ls_tensor_numel(x); i++) F(x)[i] = 3.0f * F(x)[i] + 1.5f;
    double mean[2] = {0, 0}, var[2] = {0, 0};
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < Ch; c++)
            for (int64_t i = 0; i < H * W; i++) mean[c] += F(x)[(n * Ch + c) * H * W + i] / (double)M;
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < Ch; c++)
            for (int64_t i = 0; i < H * W; i++) {
                double d = F(x)[(n * Ch + c) * H * W + i] - mean[c];
                var[c] += d * d / (double)M;
            }
    const ls_tensor *y;
    LS_REQUIRE_OK(ls_module_forward(bn, x, &y));
    /* training: (x - batch mean) / sqrt(biased var + eps) with weight 1, bias 0 */
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < Ch; c++)
            for (int64_t i = 0; i < H * W; i++) {
                int64_t k = (n * Ch + c) * H * W + i;
                LS_EXPECT_NEAR(((float *)y->data)[k], (F(x)[k] - mean[c]) / sqrt(var[c] + 1e-5), 1e-5);
            }
    LS_EXPECT(ls_cnn_num_buffers(bn) == 2);
    char name[64];
    ls_tensor *rm = ls_cnn_buffer(bn, 0, name, sizeof name);
    LS_EXPECT(strcmp(name, "bn.running_mean") == 0);
    ls_tensor *rv = ls_cnn_buffer(bn, 1, name, sizeof name);
    LS_EXPECT(strcmp(name, "bn.running_var") == 0);
    LS_EXPECT(ls_cnn_buffer(bn, 2, name, sizeof name) == NULL);
    /* PyTorch: running = 0.9 running + 0.1 batch, the variance unbiased (M / (M - 1)) */
    for (int c = 0; c < 2; c++) {
        LS_EXPECT_NEAR(F(rm)[c], 0.1 * mean[c], 1e-6);
        LS_EXPECT_NEAR(F(rv)[c], 0.9 + 0.1 * var[c] * (double)M / (double)(M - 1), 1e-6);
    }
    /* a repeated forward before backward (checkpoint recomputation) does not fold in again */
    LS_REQUIRE_OK(ls_module_forward(bn, x, &y));
    for (int c = 0; c < 2; c++) LS_EXPECT_NEAR(F(rm)[c], 0.1 * mean[c], 1e-6);
    ls_tensor *dy = tf(LS_F32, N, Ch, H, W);
    gc_fill(&R, dy, 0);
    const ls_tensor *dx;
    LS_REQUIRE_OK(ls_module_backward(bn, dy, 1, &dx));
    LS_REQUIRE_OK(ls_module_forward(bn, x, &y)); /* the next step folds again */
    for (int c = 0; c < 2; c++) {
        LS_EXPECT_NEAR(F(rm)[c], 0.9 * 0.1 * mean[c] + 0.1 * mean[c], 1e-6);
        double ub = var[c] * (double)M / (double)(M - 1);
        LS_EXPECT_NEAR(F(rv)[c], 0.9 * (0.9 + 0.1 * ub) + 0.1 * ub, 1e-5);
    }
    /* eval: normalized with the running statistics */
    ls_module_set_training(bn, 0);
    LS_REQUIRE_OK(ls_module_forward(bn, x, &y));
    for (int64_t k = 0; k < ls_tensor_numel(x); k++) {
        int64_t c = (k / (H * W)) % Ch;
        LS_EXPECT_NEAR(((float *)y->data)[k], (F(x)[k] - F(rm)[c]) / sqrt(F(rv)[c] + 1e-5), 1e-5);
    }
    /* eval backward: the statistics are constants, dx = dy / sqrt(running var + eps) (weight 1),
     * finite where x is inf (PyTorch's frozen batch norm) */
    F(x)[5] = INFINITY;
    LS_REQUIRE_OK(ls_module_forward(bn, x, &y));
    LS_REQUIRE_OK(ls_module_backward(bn, dy, 1, &dx));
    int64_t eval_bad = 0;
    for (int64_t k = 0; k < ls_tensor_numel(x); k++) {
        int64_t c = (k / (H * W)) % Ch;
        float kc = 1.0f * (float)(1.0 / sqrt((double)F(rv)[c] + 1e-5));
        eval_bad += ((const float *)dx->data)[k] != kc * F(dy)[k];
    }
    LS_EXPECT(eval_bad == 0);
    /* one value per channel cannot be normalized in training */
    ls_module_set_training(bn, 1);
    ls_tensor *one = tf(LS_F32, 1, Ch, 1, 1);
    LS_EXPECT_ERR(ls_module_forward(bn, one, &y), LS_ERR_INVALID_ARGUMENT, "more than one value per channel");
    ls_tensor_destroy(one);
    ls_tensor_destroy(x);
    ls_tensor_destroy(dy);
    ls_module_destroy(bn);
}

/* ---- f16/bf16: the f32 op on rounded inputs, rounded ---- */
static void round_through(ls_tensor *f32, ls_tensor *low) {
    LS_REQUIRE_OK(ls_op_convert(C, f32, low));
    LS_REQUIRE_OK(ls_op_convert(C, low, f32));
}

static int same_bits(const ls_tensor *low, const ls_tensor *f32, ls_dtype t) {
    ls_tensor *r = gc_tensor(C, t, f32->ndim, f32->shape);
    LS_REQUIRE_OK(ls_op_convert(C, f32, r));
    int ok = memcmp(r->data, low->data, ls_tensor_nbytes(r)) == 0;
    ls_tensor_destroy(r);
    return ok;
}

static void check_lowp(ls_dtype t) {
    int64_t N = 2, Ch = 4, H = 6, W = 5, K = 6;
    ls_tensor *x = tf(LS_F32, N, Ch, H, W), *w = tf(LS_F32, K, Ch / 2, 3, 3), *y = tf(LS_F32, N, K, 3, 3);
    ls_tensor *xl = tf(t, N, Ch, H, W), *wl = tf(t, K, Ch / 2, 3, 3), *yl = tf(t, N, K, 3, 3);
    gc_fill(&R, x, 0);
    gc_fill(&R, w, 0);
    round_through(x, xl);
    round_through(w, wl);
    LS_REQUIRE_OK(ls_op_conv2d_forward(C, x, w, NULL, y, 2, 1, 2));
    LS_REQUIRE_OK(ls_op_conv2d_forward(C, xl, wl, NULL, yl, 2, 1, 2));
    LS_EXPECT(same_bits(yl, y, t));
    /* backward: dx in the low precision, dw f32 */
    ls_tensor *dy = tf(LS_F32, N, K, 3, 3), *dyl = tf(t, N, K, 3, 3), *dx = tf(LS_F32, N, Ch, H, W);
    ls_tensor *dxl = tf(t, N, Ch, H, W), *dw = tf(LS_F32, K, Ch / 2, 3, 3), *dwl = tf(LS_F32, K, Ch / 2, 3, 3);
    gc_fill(&R, dy, 0);
    round_through(dy, dyl);
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, dy, x, w, dx, dw, NULL, 2, 1, 2));
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, dyl, xl, wl, dxl, dwl, NULL, 2, 1, 2));
    LS_EXPECT(same_bits(dxl, dx, t));
    LS_EXPECT(memcmp(dw->data, dwl->data, ls_tensor_nbytes(dw)) == 0);
    LS_EXPECT_ERR(ls_op_conv2d_backward(C, dyl, xl, wl, dxl, dxl, NULL, 2, 1, 2), LS_ERR_INVALID_ARGUMENT,
                  "weight gradient is [2, 4, 6, 5]");
    /* stride 1 (the correlation path for dx) */
    ls_tensor *w1 = tf(LS_F32, 3, Ch, 3, 3), *w1l = tf(t, 3, Ch, 3, 3), *y1 = tf(LS_F32, N, 3, H, W),
              *y1l = tf(t, N, 3, H, W);
    ls_tensor *dw1 = tf(LS_F32, 3, Ch, 3, 3), *dw1l = tf(LS_F32, 3, Ch, 3, 3);
    gc_fill(&R, w1, 0);
    round_through(w1, w1l);
    gc_fill(&R, y1, 0);
    round_through(y1, y1l); /* used as dy */
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, y1, x, w1, dx, dw1, NULL, 1, 1, 1));
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, y1l, xl, w1l, dxl, dw1l, NULL, 1, 1, 1));
    LS_EXPECT(same_bits(dxl, dx, t));
    LS_EXPECT(memcmp(dw1->data, dw1l->data, ls_tensor_nbytes(dw1)) == 0);
    /* batch norm with the fused ReLU, pooling, add */
    ls_tensor *m = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch}), *v = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch});
    ls_tensor *ml = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch}), *vl = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch});
    ls_tensor *g = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch}), *b = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch});
    gc_fill(&R, g, 0);
    gc_fill(&R, b, 0);
    ls_tensor *bo = tf(LS_F32, N, Ch, H, W), *bol = tf(t, N, Ch, H, W);
    LS_REQUIRE_OK(ls_op_batchnorm_stats(C, x, m, v));
    LS_REQUIRE_OK(ls_op_batchnorm_stats(C, xl, ml, vl));
    LS_EXPECT(memcmp(m->data, ml->data, 4 * (size_t)Ch) == 0 && memcmp(v->data, vl->data, 4 * (size_t)Ch) == 0);
    LS_REQUIRE_OK(ls_op_batchnorm_forward(C, x, m, v, g, b, 1e-5, 1, bo));
    LS_REQUIRE_OK(ls_op_batchnorm_forward(C, xl, ml, vl, g, b, 1e-5, 1, bol));
    LS_EXPECT(same_bits(bol, bo, t));
    ls_tensor *po = tf(LS_F32, N, Ch, 3, 3), *pol = tf(t, N, Ch, 3, 3);
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_MAX, 3, 2, 1, x, po));
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_MAX, 3, 2, 1, xl, pol));
    LS_EXPECT(same_bits(pol, po, t));
    LS_REQUIRE_OK(ls_op_add(C, x, x, bo));
    LS_REQUIRE_OK(ls_op_add(C, xl, xl, bol));
    LS_EXPECT(same_bits(bol, bo, t));
    LS_REQUIRE_OK(ls_op_add_relu(C, x, bo, bo)); /* x + 2x, negative parts zeroed; in place */
    LS_REQUIRE_OK(ls_op_add_relu(C, xl, bol, bol));
    LS_EXPECT(same_bits(bol, bo, t));
    for (int64_t i = 0; i < ls_tensor_numel(x); i++)
        LS_EXPECT(F(bo)[i] == (F(x)[i] > 0 ? F(x)[i] + 2 * F(x)[i] : 0.0f));
    ls_tensor *ts[] = {x,  w,   y,   xl,   wl, yl, dy, dyl, dx, dxl, dw, dwl, w1, w1l,
                       y1, y1l, dw1, dw1l, m,  v,  ml, vl,  g,  b,   bo, bol, po, pol};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ls_tensor_destroy(ts[i]);
}

/* ---- f16: the F16C/AVX2 kernels (x86-64) against the portable ones, bit for bit ---- */
/* Runs every f16 entry on the same inputs; out[] gets copies of the results. */
#define SIMD_OUTS 9
static void f16_entries(ls_tensor *x, ls_tensor *dy, ls_tensor *w, ls_tensor **out) {
    int64_t N = x->shape[0], Ch = x->shape[1], H = x->shape[2], W = x->shape[3], K = w->shape[0];
    ls_tensor *m = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch}), *v = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch});
    ls_tensor *g = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch}), *b = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch});
    for (int64_t c = 0; c < Ch; c++) F(g)[c] = 0.5f + 0.1f * (float)c, F(b)[c] = 0.05f * (float)c;
    LS_REQUIRE_OK(ls_op_batchnorm_stats(C, x, m, v));
    ls_tensor *y = tf(LS_F16, N, Ch, H, W), *dx = tf(LS_F16, N, Ch, H, W);
    LS_REQUIRE_OK(ls_op_batchnorm_forward(C, x, m, v, g, b, 1e-5, 1, y));
    ls_tensor *s1 = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch}), *s2 = gc_tensor(C, LS_F32, 1, (int64_t[]){Ch});
    LS_REQUIRE_OK(ls_op_batchnorm_backward_reduce(C, dy, x, y, m, v, 1e-5, 1, s1, s2));
    LS_REQUIRE_OK(ls_op_batchnorm_backward_dx(C, dy, x, y, m, v, g, s1, s2, 1e-5, 1, (double)(N * H * W), dx));
    ls_tensor *pa = tf(LS_F16, N, Ch, (H + 1) / 2, (W + 1) / 2), *pdx = tf(LS_F16, N, Ch, H, W);
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, LS_POOL_AVG, 3, 2, 1, x, pa));
    LS_REQUIRE_OK(ls_op_pool2d_backward(C, LS_POOL_MAX, 3, 2, 1, x, pa, pdx));
    ls_tensor *gap = gc_tensor(C, LS_F16, 2, (int64_t[]){N, Ch}), *gdx = tf(LS_F16, N, Ch, H, W);
    LS_REQUIRE_OK(ls_op_global_avgpool_forward(C, x, gap));
    LS_REQUIRE_OK(ls_op_global_avgpool_backward(C, gap, gdx));
    ls_tensor *cy = tf(LS_F16, N, K, H, W), *cdx = tf(LS_F16, N, Ch, H, W), *cdw = tf(LS_F32, K, Ch, 3, 3);
    memset(cdw->data, 0, ls_tensor_nbytes(cdw));
    LS_REQUIRE_OK(ls_op_conv2d_forward(C, x, w, NULL, cy, 1, 1, 1));
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, cy, x, w, cdx, cdw, NULL, 1, 1, 1));
    ls_tensor *res[SIMD_OUTS] = {y, s1, s2, dx, pa, pdx, gap, gdx, cdx};
    for (int i = 0; i < SIMD_OUTS; i++) out[i] = res[i];
    ls_tensor *drop[] = {m, v, g, b, cy, cdw};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) ls_tensor_destroy(drop[i]);
}

static void check_f16_simd(void) {
    if (!ls_half_has_f16c()) {
        printf("f16 SIMD kernels: this CPU has no F16C/AVX2 (the portable kernels ran above)\n");
        return;
    }
    int64_t N = 3, Ch = 5, H = 9, W = 11, K = 4;
    ls_tensor *x32 = tf(LS_F32, N, Ch, H, W), *d32 = tf(LS_F32, N, Ch, H, W), *w32 = tf(LS_F32, K, Ch, 3, 3);
    gc_fill(&R, x32, 0);
    gc_fill(&R, d32, 0);
    gc_fill(&R, w32, 0);
    ls_tensor *x = tf(LS_F16, N, Ch, H, W), *dy = tf(LS_F16, N, Ch, H, W), *w = tf(LS_F16, K, Ch, 3, 3);
    LS_REQUIRE_OK(ls_op_convert(C, x32, x));
    LS_REQUIRE_OK(ls_op_convert(C, d32, dy));
    LS_REQUIRE_OK(ls_op_convert(C, w32, w));
    ls_tensor *simd[SIMD_OUTS], *portable[SIMD_OUTS];
    f16_entries(x, dy, w, simd);
    int was = ls_half_set_simd(0);
    f16_entries(x, dy, w, portable);
    check_lowp(LS_F16); /* the portable kernels also match the f32 ops */
    ls_half_set_simd(was);
    static const char *names[SIMD_OUTS] = {
        "bn forward+relu",   "bn sum dy",       "bn sum dy*xhat",           "bn dx",  "avg pool",
        "max pool backward", "global avg pool", "global avg pool backward", "conv dx"};
    for (int i = 0; i < SIMD_OUTS; i++) {
        int same = memcmp(simd[i]->data, portable[i]->data, ls_tensor_nbytes(simd[i])) == 0;
        if (!same) fprintf(stderr, "f16 %s: the F16C kernel differs from the portable one\n", names[i]);
        LS_EXPECT(same);
        ls_tensor_destroy(simd[i]);
        ls_tensor_destroy(portable[i]);
    }
    ls_tensor *drop[] = {x32, d32, w32, x, dy, w};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) ls_tensor_destroy(drop[i]);
    printf("f16 SIMD kernels: %d outputs equal to the portable kernels' bit for bit\n", SIMD_OUTS);
}

/* ---- errors ---- */
static void check_errors(void) {
    ls_tensor *x = tf(LS_F32, 2, 4, 5, 5), *w = tf(LS_F32, 6, 2, 3, 3), *y = tf(LS_F32, 2, 6, 5, 5);
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, x, w, NULL, y, 1, 1, 1), LS_ERR_INVALID_ARGUMENT,
                  "conv2d: weight [6, 2, 3, 3] f32 cpu does not fit input [2, 4, 5, 5] f32 cpu with 1 groups");
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, x, w, NULL, y, 1, 1, 3), LS_ERR_INVALID_ARGUMENT,
                  "4 input and 6 output channels are not divisible by 3 groups");
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, x, w, NULL, y, 2, 1, 2), LS_ERR_INVALID_ARGUMENT,
                  "conv2d: output is [2, 6, 5, 5] f32 cpu, expected [2, 6, 3, 3] f32");
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, x, w, NULL, y, 0, 1, 2), LS_ERR_INVALID_ARGUMENT, "stride 0");
    ls_tensor *big = tf(LS_F32, 6, 2, 7, 7), *yb = tf(LS_F32, 2, 6, 1, 1);
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, x, big, NULL, yb, 1, 0, 2), LS_ERR_INVALID_ARGUMENT,
                  "a 7x7 kernel does not fit the 5x5 input");
    LS_EXPECT_ERR(ls_op_pool2d_forward(C, LS_POOL_MAX, 2, 2, 2, x, y), LS_ERR_INVALID_ARGUMENT,
                  "0 <= padding <= kernel/2");
    ls_tensor *xi = gc_tensor(C, LS_I32, 4, (int64_t[]){2, 4, 5, 5}),
              *wi = gc_tensor(C, LS_I32, 4, (int64_t[]){6, 2, 3, 3});
    ls_tensor *yi = gc_tensor(C, LS_I32, 4, (int64_t[]){2, 6, 5, 5});
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, xi, wi, NULL, yi, 1, 1, 2), LS_ERR_UNSUPPORTED, "does not compute in i32");
    ls_tensor *m = gc_tensor(C, LS_F64, 1, (int64_t[]){4});
    LS_EXPECT_ERR(ls_op_batchnorm_stats(C, x, m, m), LS_ERR_INVALID_ARGUMENT, "mean is [4] f64 cpu, expected [4] f32");
    /* a backend without the CNN entries (the CUDA table until its kernels land) */
    ls_ops partial = *C->ops;
    partial.name = "partial";
    partial.conv2d_fwd = NULL;
    partial.bn_stats = NULL;
    const ls_ops *keep = C->ops;
    C->ops = &partial;
    LS_EXPECT_ERR(ls_op_conv2d_forward(C, x, w, NULL, y, 1, 1, 2), LS_ERR_UNSUPPORTED,
                  "conv2d is not implemented by the partial backend yet");
    ls_tensor *m32 = gc_tensor(C, LS_F32, 1, (int64_t[]){4});
    LS_EXPECT_ERR(ls_op_batchnorm_stats(C, x, m32, m32), LS_ERR_UNSUPPORTED,
                  "batch-norm statistics is not implemented");
    C->ops = keep;
    /* modules */
    ls_module *conv;
    LS_EXPECT_ERR(ls_conv2d_create(C, LS_F32, 3, 4, 3, 1, 1, 2, 0, 1, "c", &conv), LS_ERR_INVALID_ARGUMENT,
                  "conv2d c: input channels (3) are not divisible by groups (2)");
    /* the one bad value named, not every rule with every value */
    LS_EXPECT_ERR(ls_conv2d_create(C, LS_F32, 4, 4, 3, 0, 1, 1, 0, 1, "c", &conv), LS_ERR_INVALID_ARGUMENT,
                  "conv2d c: stride is 0; it must be >= 1");
    {
        ls_module *bad;
        ls_batchnorm_config bc = ls_batchnorm_defaults();
        bc.eps = 0;
        LS_EXPECT_ERR(ls_batchnorm2d_create(C, LS_F32, 3, &bc, "bn", &bad), LS_ERR_INVALID_ARGUMENT,
                      "batch norm bn: eps is 0; it must be > 0");
        bc = ls_batchnorm_defaults();
        bc.momentum = 2;
        LS_EXPECT_ERR(ls_batchnorm2d_create(C, LS_F32, 3, &bc, NULL, &bad), LS_ERR_INVALID_ARGUMENT,
                      "batch norm: momentum is 2; it must be in [0, 1]");
        LS_EXPECT_ERR(ls_pool2d_create(C, LS_POOL_MAX, 2, 0, 0, &bad), LS_ERR_INVALID_ARGUMENT,
                      "pooling: stride is 0; it must be >= 1");
        LS_EXPECT_ERR(ls_pool2d_create(C, LS_POOL_AVG, 3, 1, 2, &bad), LS_ERR_INVALID_ARGUMENT,
                      "pooling: padding is 2; it must be in 0 <= padding <= kernel/2 (kernel 3)");
    }
    LS_REQUIRE_OK(ls_conv2d_create(C, LS_F32, 4, 6, 3, 1, 1, 1, 0, 1, "c", &conv));
    const ls_tensor *out;
    ls_tensor *x3 = tf(LS_F32, 2, 3, 5, 5);
    LS_EXPECT_ERR(ls_module_forward(conv, x3, &out), LS_ERR_INVALID_ARGUMENT,
                  "c.weight: input is [2, 3, 5, 5] f32 cpu, expected [batch, 4, H, W]");
    ls_module_destroy(conv);
    ls_module *rs;
    LS_REQUIRE_OK(ls_reshape_create(C, 3, (int64_t[]){1, 28, 28}, &rs));
    ls_tensor *flat = gc_tensor(C, LS_F32, 2, (int64_t[]){3, 784}), *odd = gc_tensor(C, LS_F32, 2, (int64_t[]){3, 780});
    LS_REQUIRE_OK(ls_module_forward(rs, flat, &out));
    LS_EXPECT(out->ndim == 4 && out->shape[0] == 3 && out->shape[1] == 1 && out->shape[2] == 28 &&
              out->data == flat->data);
    LS_EXPECT_ERR(ls_module_forward(rs, odd, &out), LS_ERR_INVALID_ARGUMENT, "has 780 values per sample, expected 784");
    ls_module_destroy(rs);
    ls_tensor *ts[] = {x, w, y, big, yb, xi, wi, yi, m, m32, x3, flat, odd};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ls_tensor_destroy(ts[i]);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_rng_init(&R, 99);
    /* N, C, H, W, K, R, S, stride, pad, groups, bias */
    check_conv(2, 3, 9, 8, 5, 3, 3, 1, 1, 1, 1);    /* stride 1: dx by correlation is not used (K > C) */
    check_conv(2, 6, 9, 8, 4, 3, 3, 1, 1, 1, 0);    /* stride 1, K <= C: dx by correlation */
    check_conv(3, 8, 11, 10, 8, 3, 3, 2, 1, 2, 1);  /* stride 2, groups: col2im */
    check_conv(2, 4, 7, 7, 4, 5, 5, 1, 2, 1, 0);    /* 5x5 "same" */
    check_conv(2, 4, 7, 6, 4, 3, 2, 1, 0, 2, 1);    /* rectangular kernel, no padding */
    check_conv(2, 8, 6, 5, 4, 1, 1, 1, 0, 1, 1);    /* 1x1 direct */
    check_conv(2, 8, 7, 7, 16, 1, 1, 2, 0, 1, 0);   /* 1x1 stride 2 (projection) */
    check_conv(1, 4, 6, 6, 4, 3, 3, 1, 1, 4, 1);    /* depthwise */
    check_conv(2, 1, 28, 28, 16, 3, 3, 1, 1, 1, 0); /* the ResNet stem */
    check_conv(5, 4, 16, 16, 6, 3, 3, 1, 1, 2, 1);  /* chunks of 2 images, a last chunk of 1 */
    check_conv(5, 8, 32, 32, 8, 3, 3, 2, 1, 1, 0);  /* the same with stride 2 (col2im) */
    check_conv(7, 8, 7, 7, 8, 3, 3, 1, 1, 1, 0);    /* 7x7 maps: all 7 images in one chunk */
    check_conv_ws_weights_only();
    check_pool_values();
    check_bn_values();
    check_lowp(LS_BF16);
    check_lowp(LS_F16);
    check_f16_simd();
    check_errors();
    ls_ctx_destroy(C);
    LS_TEST_END();
}
