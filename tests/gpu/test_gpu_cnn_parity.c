/* test_gpu_cnn_parity.c: the CUDA backend's NCHW entries (conv2d through cuDNN, max/average
 * pooling, global average pooling, batch-norm statistics/forward/backward, the residual add)
 * against the CPU's on fresh random inputs in f32, f64, f16 and bf16 (the CPU computes f16/bf16
 * itself; per-channel tensors, dw and db in the f32 master dtype), then one training step
 * (forward, loss, backward; then the same in eval mode) of a small ResNet on both from identical
 * parameters. Outputs that an op overwrites are poisoned first (0xFF bytes: NaN), so an element the
 * GPU forgets to write, or accumulates into, fails; accumulating outputs (dw, db) start from random
 * values, and conv2d backward runs twice (the second time without dx and db) so dw must hold two
 * gradients. Error = max |gpu - cpu| / max |cpu| per output; tolerances:
 *   f64 1e-10; f32 1e-4 for convolutions (cuDNN's algorithms sum in other orders), 1e-5 for the
 *   rest; f32 convolutions with TF32 on 5e-3; f16 5e-3; bf16 2e-2 (one or two roundings of 2^-8).
 * cuDNN without an f64 algorithm for a shape (LS_ERR_UNSUPPORTED) is a skip, not a failure: ops.h
 * lets a backend refuse f64. The ResNet step: f32 loss within 1e-5, every gradient and running
 * statistic within 1e-3 (relative to the tensor's largest value); bf16 activations: loss within
 * 1e-2, gradients with cosine similarity > 0.95 (the bar test_cnn_modules holds bf16 to against
 * f32), running statistics within 5e-2. The workspace cuDNN asks for must be the same from a
 * second context (it is chosen per shape, not by timing). Exits 77 where no CUDA device is usable;
 * without one it still checks that the CUDA op table has every CNN entry. --self runs the harness
 * with the CPU as the "device". */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "cpu/cpu.h"
#include "nn.h"
#include "ops.h"
#include "rng.h"
#include "testutil.h"
#include "gpu_values.h"
#include "parity_ctx.h"

static ls_ctx *CPU, *DEV, *DEV2, *DEV_TF32;
static int self_mode;
static ls_rng R;
static int n_cases, n_skipped;
static double worst_f32, worst_low;

enum { TOL_CONV = 0, TOL_OTHER = 1, TOL_TF32 = 2 };

/* ---- host values: doubles (pack/unpack in gpu_values.h) ---- */
/* Random values shift + normal * scale, rounded to what dtype t can hold. */
static double *rnd_at(int64_t n, double shift, double scale, ls_dtype t) {
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    LS_REQUIRE(v);
    for (int64_t i = 0; i < n; i++) v[i] = shift + ls_rng_normal(&R) * scale;
    void *p = pack(v, t, n);
    double *r = unpack(p, t, n);
    free(p);
    free(v);
    return r;
}
static double *rnd(int64_t n, double scale, ls_dtype t) { return rnd_at(n, 0.0, scale, t); }

/* Parameter gradients and per-channel tensors under activations of dtype t. */
static ls_dtype master(ls_dtype t) { return t == LS_F64 ? LS_F64 : LS_F32; }

/* ---- device buffers (on ctx's allocator) ---- */
static void *dev_alloc(ls_ctx *c, size_t bytes) {
    void *d = NULL;
    LS_REQUIRE_OK(ls_alloc(c->alloc, bytes ? bytes : 1, "cnn parity test buffer", &d));
    return d;
}
static void *dev_bytes(ls_ctx *c, const void *h, size_t bytes) {
    void *d = dev_alloc(c, bytes);
    if (bytes) LS_REQUIRE_OK(ls_allocator_copy(c->alloc, d, 1, h, 0, bytes));
    return d;
}
static void *dev_vals(ls_ctx *c, const double *v, ls_dtype t, int64_t n) {
    void *h = pack(v, t, n);
    void *d = dev_bytes(c, h, (size_t)n * ls_dtype_size(t));
    free(h);
    return d;
}
static void *dev_poison(ls_ctx *c, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    LS_REQUIRE(h);
    memset(h, 0xFF, bytes);
    void *d = dev_bytes(c, h, bytes);
    free(h);
    return d;
}
static double *dev_read(ls_ctx *c, const void *d, ls_dtype t, int64_t n) {
    void *h = malloc((size_t)(n > 0 ? n : 1) * ls_dtype_size(t));
    LS_REQUIRE(h);
    if (n) LS_REQUIRE_OK(ls_allocator_copy(c->alloc, h, 0, d, 1, (size_t)n * ls_dtype_size(t)));
    double *v = unpack(h, t, n);
    free(h);
    return v;
}
static void dev_free(ls_ctx *c, void *d) { ls_free(c->alloc, d); }

/* ---- comparison ---- */
static double tol_for(ls_dtype t, int kind) {
    if (t == LS_F64) return 1e-10;
    if (t == LS_F32) return kind == TOL_TF32 ? 5e-3 : kind == TOL_CONV ? 1e-4 : 1e-5;
    return t == LS_F16 ? 5e-3 : 2e-2;
}

/* max |got - ref| / max |ref|; *nan_at: the first element that is NaN/inf on one side only */
static double rel_err(const double *got, const double *ref, int64_t n, int64_t *nan_at) {
    double num = 0, den = 0;
    *nan_at = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(ref[i]) || isinf(got[i]) != isinf(ref[i])) {
            if (*nan_at < 0) *nan_at = i;
            continue;
        }
        if (!isfinite(ref[i])) continue;
        num = fmax(num, fabs(got[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    return den > 0 ? num / den : num;
}

static void check_tol(const char *what, const char *tname, double tol, const double *got, const double *ref, int64_t n,
                      double *worst) {
    int64_t nan_at;
    double err = rel_err(got, ref, n, &nan_at);
    n_cases++;
    if (worst && err > *worst) *worst = err;
    int ok = nan_at < 0 && err <= tol;
    printf("%-4s %-60s %-5s err %.3g (tol %.0e)%s\n", ok ? "ok" : "FAIL", what, tname, err, tol,
           nan_at >= 0 ? " NaN/inf mismatch" : "");
    if (nan_at >= 0)
        fprintf(stderr, "%s %s: element %lld is %g on the device, %g on the CPU\n", what, tname, (long long)nan_at,
                got[nan_at], ref[nan_at]);
    if (!ok) ls_test_failures++;
}

static void check(const char *what, ls_dtype t, int kind, const double *got, const double *ref, int64_t n) {
    double *worst = t == LS_F32 && kind != TOL_TF32 ? &worst_f32 : (t == LS_F16 || t == LS_BF16) ? &worst_low : NULL;
    check_tol(what, kind == TOL_TF32 ? "tf32" : ls_dtype_name(t), tol_for(t, kind), got, ref, n, worst);
}

/* Compare device buffer d (dtype t, n values) with host bytes h of the same dtype. */
static void check_buf(ls_ctx *dev, const char *what, ls_dtype t, int kind, const void *d, const void *h, int64_t n,
                      ls_dtype tol_t) {
    double *got = dev_read(dev, d, t, n), *ref = unpack(h, t, n);
    check(what, tol_t, kind, got, ref, n);
    free(got);
    free(ref);
}

/* The device's answer: LS_OK; or a skip for f64 refused as unsupported (cuDNN may lack f64 for a
 * shape, which ops.h allows). Anything else fails. */
static int dev_ok(ls_status s, const char *what, ls_dtype t) {
    if (s == LS_OK) return 1;
    if (s == LS_ERR_UNSUPPORTED && t == LS_F64) {
        n_skipped++;
        printf("skip %-60s f64   unsupported: %s\n", what, ls_last_error());
        return 0;
    }
    fprintf(stderr, "%s %s on the device failed: %s: %s\n", what, ls_dtype_name(t), ls_status_name(s), ls_last_error());
    ls_test_failures++;
    return 0;
}

static const ls_dtype FLOATS[] = {LS_F32, LS_F64, LS_F16, LS_BF16};
#define N_FLOATS 4

/* ---- conv2d: forward, then backward twice (dx, dw, db; then dw alone) ---- */
typedef struct conv_case {
    int64_t N, C, H, W, K, R, stride, pad, groups;
    int bias;
} conv_case;

static void case_conv(ls_ctx *dev, ls_dtype t, int kind, const conv_case *cc) {
    ls_conv2d_params p = {cc->N, cc->C, cc->H,      cc->W,      cc->K,   cc->R,   cc->R,
                          0,     0,     cc->stride, cc->stride, cc->pad, cc->pad, cc->groups};
    p.P = ls_conv_out_size(p.H, p.R, p.stride_h, p.pad_h);
    p.Q = ls_conv_out_size(p.W, p.S, p.stride_w, p.pad_w);
    LS_REQUIRE(p.P > 0 && p.Q > 0 && p.C % p.groups == 0 && p.K % p.groups == 0);
    const ls_dtype mt = master(t);
    const size_t es = ls_dtype_size(t);
    const int64_t nx = p.N * p.C * p.H * p.W, nw = p.K * (p.C / p.groups) * p.R * p.S, ny = p.N * p.K * p.P * p.Q;
    double *x = rnd(nx, 1.0, t), *w = rnd(nw, 1.0 / sqrt((double)(p.C / p.groups * p.R * p.S)), t);
    double *b = rnd(p.K, 1.0, t), *dy = rnd(ny, 1.0, t), *dw0 = rnd(nw, 1.0, mt), *db0 = rnd(p.K, 1.0, mt);
    char shape[128], what[160];
    snprintf(shape, sizeof shape, "conv [%lld,%lld,%lld,%lld]*[%lld,%lld,%lld,%lld] s%lld p%lld g%lld%s",
             (long long)p.N, (long long)p.C, (long long)p.H, (long long)p.W, (long long)p.K,
             (long long)(p.C / p.groups), (long long)p.R, (long long)p.S, (long long)p.stride_h, (long long)p.pad_h,
             (long long)p.groups, cc->bias ? " +b" : "");
    /* CPU */
    void *hx = pack(x, t, nx), *hw = pack(w, t, nw), *hb = pack(b, t, p.K), *hdy = pack(dy, t, ny);
    void *hy = malloc((size_t)ny * es), *hdx = malloc((size_t)nx * es);
    void *hdw = pack(dw0, mt, nw), *hdb = pack(db0, mt, p.K);
    size_t cws = CPU->ops->conv2d_workspace(CPU->state, t, &p, LS_CONV_FORWARD);
    size_t cws1 = CPU->ops->conv2d_workspace(CPU->state, t, &p, LS_CONV_BACKWARD);
    size_t cws2 = CPU->ops->conv2d_workspace(CPU->state, t, &p, LS_CONV_BACKWARD_WEIGHTS);
    void *hws = malloc((cws > cws1 ? cws : cws1) + 1), *hws2 = malloc(cws2 + 1);
    LS_REQUIRE(hy && hdx && hws && hws2 && cws2 <= cws1);
    LS_REQUIRE_OK(CPU->ops->conv2d_fwd(CPU->state, t, &p, hx, hw, cc->bias ? hb : NULL, hy, hws));
    LS_REQUIRE_OK(CPU->ops->conv2d_bwd(CPU->state, t, &p, hdy, hx, hw, hdx, hdw, cc->bias ? hdb : NULL, hws));
    LS_REQUIRE_OK(CPU->ops->conv2d_bwd(CPU->state, t, &p, hdy, hx, hw, NULL, hdw, NULL, hws2));
    /* device: the forward, backward and backward-without-dx workspaces */
    size_t ws0 = dev->ops->conv2d_workspace(dev->state, t, &p, LS_CONV_FORWARD);
    size_t ws1 = dev->ops->conv2d_workspace(dev->state, t, &p, LS_CONV_BACKWARD);
    size_t ws2 = dev->ops->conv2d_workspace(dev->state, t, &p, LS_CONV_BACKWARD_WEIGHTS);
    if (dev == DEV && DEV2) { /* chosen per shape: a second context asks for the same */
        size_t a0 = DEV2->ops->conv2d_workspace(DEV2->state, t, &p, LS_CONV_FORWARD);
        size_t a1 = DEV2->ops->conv2d_workspace(DEV2->state, t, &p, LS_CONV_BACKWARD);
        size_t a2 = DEV2->ops->conv2d_workspace(DEV2->state, t, &p, LS_CONV_BACKWARD_WEIGHTS);
        n_cases++;
        int ok = a0 == ws0 && a1 == ws1 && a2 == ws2 && ws2 <= ws1 &&
                 ws0 == dev->ops->conv2d_workspace(dev->state, t, &p, LS_CONV_FORWARD);
#ifdef LS_PARITY_EMU
        ok = ok && (ws1 == 0 || ws2 < ws1); /* the emulated backward-data algorithms ask for more */
#endif
        printf("%-4s %-60s %-5s workspace %zu / %zu / %zu bytes, second context %zu / %zu / %zu\n", ok ? "ok" : "FAIL",
               shape, ls_dtype_name(t), ws0, ws1, ws2, a0, a1, a2);
        if (!ok) ls_test_failures++;
    }
    void *dws = ws0 || ws1 ? dev_alloc(dev, ws0 > ws1 ? ws0 : ws1) : NULL;
    void *dws2 = ws2 ? dev_alloc(dev, ws2) : NULL; /* exactly what the pass without dx asked for */
    void *dx_ = dev_vals(dev, x, t, nx), *dw_ = dev_vals(dev, w, t, nw), *db_ = dev_vals(dev, b, t, p.K);
    void *ddy = dev_vals(dev, dy, t, ny), *dy_out = dev_poison(dev, (size_t)ny * es);
    void *ddx = dev_poison(dev, (size_t)nx * es);
    void *ddw = dev_vals(dev, dw0, mt, nw), *ddb = dev_vals(dev, db0, mt, p.K);
    snprintf(what, sizeof what, "%s fwd", shape);
    if (dev_ok(dev->ops->conv2d_fwd(dev->state, t, &p, dx_, dw_, cc->bias ? db_ : NULL, dy_out, dws), what, t))
        check_buf(dev, what, t, kind, dy_out, hy, ny, t);
    snprintf(what, sizeof what, "%s bwd", shape);
    if (dev_ok(dev->ops->conv2d_bwd(dev->state, t, &p, ddy, dx_, dw_, ddx, ddw, cc->bias ? ddb : NULL, dws), what, t) &&
        dev_ok(dev->ops->conv2d_bwd(dev->state, t, &p, ddy, dx_, dw_, NULL, ddw, NULL, dws2), what, t)) {
        char w2[192];
        snprintf(w2, sizeof w2, "%s: dx", what);
        check_buf(dev, w2, t, kind, ddx, hdx, nx, t);
        snprintf(w2, sizeof w2, "%s: dw += 2x (%s)", what, ls_dtype_name(mt));
        double *got = dev_read(dev, ddw, mt, nw), *ref = unpack(hdw, mt, nw);
        check(w2, t, kind, got, ref, nw);
        free(got), free(ref);
        if (cc->bias) {
            snprintf(w2, sizeof w2, "%s: db += (%s)", what, ls_dtype_name(mt));
            got = dev_read(dev, ddb, mt, p.K), ref = unpack(hdb, mt, p.K);
            check(w2, t, TOL_OTHER, got, ref, p.K);
            free(got), free(ref);
        }
    }
    void *ds[] = {dx_, dw_, db_, ddy, dy_out, ddx, ddw, ddb};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) dev_free(dev, ds[i]);
    if (dws) dev_free(dev, dws);
    if (dws2) dev_free(dev, dws2);
    void *hs[] = {x, w, b, dy, dw0, db0, hx, hw, hb, hdy, hy, hdx, hdw, hdb, hws, hws2};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
}

/* ---- pooling ---- */
static void case_pool(ls_dtype t, ls_pool mode, int incl_pad, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k,
                      int64_t s, int64_t pad, int ties) {
    ls_pool2d_params p = {N, C, H, W, 0, 0, k, k, s, s, pad, pad, mode, incl_pad};
    p.P = ls_conv_out_size(H, k, s, pad);
    p.Q = ls_conv_out_size(W, k, s, pad);
    LS_REQUIRE(p.P > 0 && p.Q > 0);
    const size_t es = ls_dtype_size(t);
    const int64_t nx = N * C * H * W, ny = N * C * p.P * p.Q;
    double *x = rnd(nx, 2.0, t), *dy = rnd(ny, 1.0, t);
    if (ties) /* a few levels: windows have several maxima, only the first may get the gradient */
        for (int64_t i = 0; i < nx; i++) x[i] = (double)(ls_rng_u32(&R) % 3);
    void *hx = pack(x, t, nx), *hdy = pack(dy, t, ny), *hy = malloc((size_t)ny * es), *hdx = malloc((size_t)nx * es);
    LS_REQUIRE(hy && hdx);
    LS_REQUIRE_OK(CPU->ops->pool2d_fwd(CPU->state, t, &p, hx, hy));
    LS_REQUIRE_OK(CPU->ops->pool2d_bwd(CPU->state, t, &p, hx, hdy, hdx));
    void *dx_ = dev_vals(DEV, x, t, nx), *ddy = dev_vals(DEV, dy, t, ny);
    void *dy_out = dev_poison(DEV, (size_t)ny * es), *ddx = dev_poison(DEV, (size_t)nx * es);
    char what[160];
    snprintf(what, sizeof what, "%s pool [%lld,%lld,%lld,%lld] k%lld s%lld p%lld%s%s",
             mode == LS_POOL_MAX ? "max" : "avg", (long long)N, (long long)C, (long long)H, (long long)W, (long long)k,
             (long long)s, (long long)pad, mode == LS_POOL_AVG ? (incl_pad ? " incl-pad" : " excl-pad") : "",
             ties ? " ties" : "");
    char w2[192];
    snprintf(w2, sizeof w2, "%s fwd", what);
    if (dev_ok(DEV->ops->pool2d_fwd(DEV->state, t, &p, dx_, dy_out), w2, t))
        check_buf(DEV, w2, t, TOL_OTHER, dy_out, hy, ny, t);
    snprintf(w2, sizeof w2, "%s bwd", what);
    if (dev_ok(DEV->ops->pool2d_bwd(DEV->state, t, &p, dx_, ddy, ddx), w2, t))
        check_buf(DEV, w2, t, TOL_OTHER, ddx, hdx, nx, t);
    dev_free(DEV, dx_), dev_free(DEV, ddy), dev_free(DEV, dy_out), dev_free(DEV, ddx);
    free(x), free(dy), free(hx), free(hdy), free(hy), free(hdx);
}

/* ---- global average pooling ---- */
static void case_gap(ls_dtype t, int64_t planes, int64_t hw) {
    const size_t es = ls_dtype_size(t);
    double *x = rnd_at(planes * hw, 0.5, 1.0, t), *dy = rnd(planes, 1.0, t);
    void *hx = pack(x, t, planes * hw), *hdy = pack(dy, t, planes);
    void *hy = malloc((size_t)planes * es), *hdx = malloc((size_t)(planes * hw) * es);
    LS_REQUIRE(hy && hdx);
    LS_REQUIRE_OK(CPU->ops->global_avgpool_fwd(CPU->state, t, planes, hw, hx, hy));
    LS_REQUIRE_OK(CPU->ops->global_avgpool_bwd(CPU->state, t, planes, hw, hdy, hdx));
    void *dx_ = dev_vals(DEV, x, t, planes * hw), *ddy = dev_vals(DEV, dy, t, planes);
    void *dy_out = dev_poison(DEV, (size_t)planes * es), *ddx = dev_poison(DEV, (size_t)(planes * hw) * es);
    char what[160];
    snprintf(what, sizeof what, "global avgpool %lld planes x %lld fwd", (long long)planes, (long long)hw);
    if (dev_ok(DEV->ops->global_avgpool_fwd(DEV->state, t, planes, hw, dx_, dy_out), what, t))
        check_buf(DEV, what, t, TOL_OTHER, dy_out, hy, planes, t);
    snprintf(what, sizeof what, "global avgpool %lld planes x %lld bwd", (long long)planes, (long long)hw);
    if (dev_ok(DEV->ops->global_avgpool_bwd(DEV->state, t, planes, hw, ddy, ddx), what, t))
        check_buf(DEV, what, t, TOL_OTHER, ddx, hdx, planes * hw, t);
    dev_free(DEV, dx_), dev_free(DEV, ddy), dev_free(DEV, dy_out), dev_free(DEV, ddx);
    free(x), free(dy), free(hx), free(hdy), free(hy), free(hdx);
}

/* ---- batch norm's per-channel updates (bn_update): the running statistics (keep 1 - momentum,
 * the variance weighted by momentum x n/(n-1)) and the parameter gradients (keep 1); one
 * launch, the CPU's roundings, so bitwise here ---- */
static void case_bn_update(ls_dtype t, int64_t C, double keep) {
    double *x1 = rnd(C, 1.0, t), *x2 = rnd_at(C, 0.5, 1.0, t), *y1 = rnd(C, 1.0, t), *y2 = rnd_at(C, 0.5, 1.0, t);
    void *hx1 = pack(x1, t, C), *hx2 = pack(x2, t, C), *hy1 = pack(y1, t, C), *hy2 = pack(y2, t, C);
    const double w1 = keep == 1 ? 1 : 1 - keep, w2 = keep == 1 ? 1 : (1 - keep) * 64.0 / 63.0;
    LS_REQUIRE_OK(CPU->ops->bn_update(CPU->state, t, C, keep, w1, hx1, hy1, w2, hx2, hy2));
    void *dx1 = dev_vals(DEV, x1, t, C), *dx2 = dev_vals(DEV, x2, t, C), *dy1 = dev_vals(DEV, y1, t, C),
         *dy2 = dev_vals(DEV, y2, t, C);
    char what[160];
    snprintf(what, sizeof what, "bn update C=%lld keep %g", (long long)C, keep);
    if (dev_ok(DEV->ops->bn_update(DEV->state, t, C, keep, w1, dx1, dy1, w2, dx2, dy2), what, t)) {
        check_buf(DEV, what, t, TOL_OTHER, dy1, hy1, C, t);
        check_buf(DEV, what, t, TOL_OTHER, dy2, hy2, C, t);
    }
    dev_free(DEV, dx1), dev_free(DEV, dx2), dev_free(DEV, dy1), dev_free(DEV, dy2);
    free(x1), free(x2), free(y1), free(y2), free(hx1), free(hx2), free(hy1), free(hy2);
}

/* ---- batch norm: statistics, forward (in place when asked), backward reduce, backward dx over
 * count N*HW and count 0 (eval). Each step gets the CPU's inputs, so it checks only itself. ---- */
static void case_bn(ls_dtype t, int64_t N, int64_t C, int64_t HW, int relu, int in_place) {
    ls_bn_params p = {N, C, HW, 1e-5, relu};
    const ls_dtype mt = master(t);
    const size_t es = ls_dtype_size(t), ms = ls_dtype_size(mt);
    const int64_t n = N * C * HW;
    double *x = rnd_at(n, 1.5, 2.0, t), *dy = rnd(n, 1.0, t), *gamma = rnd_at(C, 1.0, 0.3, mt);
    double *beta = rnd(C, 0.5, mt);
    char shape[96], what[160];
    snprintf(shape, sizeof shape, "bn [%lld,%lld,%lld]%s", (long long)N, (long long)C, (long long)HW,
             relu ? " +relu" : "");
    void *hx = pack(x, t, n), *hdy = pack(dy, t, n), *hg = pack(gamma, mt, C), *hb = pack(beta, mt, C);
    void *hmean = malloc((size_t)C * ms), *hvar = malloc((size_t)C * ms), *hy = malloc((size_t)n * es);
    void *hs1 = malloc((size_t)C * ms), *hs2 = malloc((size_t)C * ms);
    void *hdx = malloc((size_t)n * es), *hdx0 = malloc((size_t)n * es);
    LS_REQUIRE(hmean && hvar && hy && hs1 && hs2 && hdx && hdx0);
    const double count = (double)(N * HW);
    LS_REQUIRE_OK(CPU->ops->bn_stats(CPU->state, t, &p, hx, hmean, hvar));
    LS_REQUIRE_OK(CPU->ops->bn_fwd(CPU->state, t, &p, hx, hmean, hvar, hg, hb, hy));
    LS_REQUIRE_OK(CPU->ops->bn_bwd_reduce(CPU->state, t, &p, hdy, hx, relu ? hy : NULL, hmean, hvar, hs1, hs2));
    LS_REQUIRE_OK(
        CPU->ops->bn_bwd_dx(CPU->state, t, &p, hdy, hx, relu ? hy : NULL, hmean, hvar, hg, hs1, hs2, count, hdx));
    LS_REQUIRE_OK(
        CPU->ops->bn_bwd_dx(CPU->state, t, &p, hdy, hx, relu ? hy : NULL, hmean, hvar, hg, NULL, NULL, 0.0, hdx0));
    /* device */
    void *dx_ = dev_bytes(DEV, hx, (size_t)n * es), *ddy = dev_bytes(DEV, hdy, (size_t)n * es);
    void *dg = dev_bytes(DEV, hg, (size_t)C * ms), *db = dev_bytes(DEV, hb, (size_t)C * ms);
    void *dmean = dev_poison(DEV, (size_t)C * ms), *dvar = dev_poison(DEV, (size_t)C * ms);
    void *cmean = dev_bytes(DEV, hmean, (size_t)C * ms), *cvar = dev_bytes(DEV, hvar, (size_t)C * ms);
    void *cy = dev_bytes(DEV, hy, (size_t)n * es);
    void *cs1 = dev_bytes(DEV, hs1, (size_t)C * ms), *cs2 = dev_bytes(DEV, hs2, (size_t)C * ms);
    void *dy_out = in_place ? dev_bytes(DEV, hx, (size_t)n * es) : dev_poison(DEV, (size_t)n * es);
    void *ds1 = dev_poison(DEV, (size_t)C * ms), *ds2 = dev_poison(DEV, (size_t)C * ms);
    /* dx in place of a copy of dy when asked, else poisoned */
    void *ddx = in_place ? dev_bytes(DEV, hdy, (size_t)n * es) : dev_poison(DEV, (size_t)n * es);
    void *ddx0 = dev_poison(DEV, (size_t)n * es);
    snprintf(what, sizeof what, "%s stats: mean (%s)", shape, ls_dtype_name(mt));
    if (dev_ok(DEV->ops->bn_stats(DEV->state, t, &p, dx_, dmean, dvar), what, t)) {
        check_buf(DEV, what, mt, TOL_OTHER, dmean, hmean, C, t);
        snprintf(what, sizeof what, "%s stats: var (%s)", shape, ls_dtype_name(mt));
        check_buf(DEV, what, mt, TOL_OTHER, dvar, hvar, C, t);
    }
    snprintf(what, sizeof what, "%s fwd%s", shape, in_place ? " in place" : "");
    if (dev_ok(DEV->ops->bn_fwd(DEV->state, t, &p, in_place ? dy_out : dx_, cmean, cvar, dg, db, dy_out), what, t))
        check_buf(DEV, what, t, TOL_OTHER, dy_out, hy, n, t);
    snprintf(what, sizeof what, "%s bwd reduce: sum dy, sum dy*xhat", shape);
    if (dev_ok(DEV->ops->bn_bwd_reduce(DEV->state, t, &p, ddy, dx_, relu ? cy : NULL, cmean, cvar, ds1, ds2), what,
               t)) {
        double *g1 = dev_read(DEV, ds1, mt, C), *g2 = dev_read(DEV, ds2, mt, C);
        double *r1 = unpack(hs1, mt, C), *r2 = unpack(hs2, mt, C);
        /* one scale for both: sums near zero are compared against the channel's typical magnitude */
        double *g = malloc(sizeof(double) * (size_t)(2 * C)), *r = malloc(sizeof(double) * (size_t)(2 * C));
        memcpy(g, g1, sizeof(double) * (size_t)C), memcpy(g + C, g2, sizeof(double) * (size_t)C);
        memcpy(r, r1, sizeof(double) * (size_t)C), memcpy(r + C, r2, sizeof(double) * (size_t)C);
        check(what, t, TOL_OTHER, g, r, 2 * C);
        free(g1), free(g2), free(r1), free(r2), free(g), free(r);
    }
    snprintf(what, sizeof what, "%s bwd dx, count %g%s", shape, count, in_place ? ", dx in place of dy" : "");
    /* in place: ddx holds a copy of dy, which the op reads while it overwrites it */
    if (dev_ok(DEV->ops->bn_bwd_dx(DEV->state, t, &p, in_place ? ddx : ddy, dx_, relu ? cy : NULL, cmean, cvar, dg, cs1,
                                   cs2, count, ddx),
               what, t))
        check_buf(DEV, what, t, TOL_OTHER, ddx, hdx, n, t);
    snprintf(what, sizeof what, "%s bwd dx, count 0 (eval)", shape);
    if (dev_ok(
            DEV->ops->bn_bwd_dx(DEV->state, t, &p, ddy, dx_, relu ? cy : NULL, cmean, cvar, dg, NULL, NULL, 0.0, ddx0),
            what, t))
        check_buf(DEV, what, t, TOL_OTHER, ddx0, hdx0, n, t);
    /* eval with an inf in x: the statistics are constants, dx stays finite (k dy) on both */
    x[n / 2] = INFINITY;
    void *hxi = pack(x, t, n), *dxi = dev_bytes(DEV, hxi, (size_t)n * es), *ddxi = dev_poison(DEV, (size_t)n * es);
    LS_REQUIRE_OK(
        CPU->ops->bn_bwd_dx(CPU->state, t, &p, hdy, hxi, relu ? hy : NULL, hmean, hvar, hg, NULL, NULL, 0.0, hdx0));
    snprintf(what, sizeof what, "%s bwd dx, count 0 (eval), an inf in x", shape);
    if (dev_ok(
            DEV->ops->bn_bwd_dx(DEV->state, t, &p, ddy, dxi, relu ? cy : NULL, cmean, cvar, dg, NULL, NULL, 0.0, ddxi),
            what, t))
        check_buf(DEV, what, t, TOL_OTHER, ddxi, hdx0, n, t);
    dev_free(DEV, dxi), dev_free(DEV, ddxi), free(hxi);
    void *dv[] = {dx_, ddy, dg, db, dmean, dvar, cmean, cvar, cy, cs1, cs2, dy_out, ds1, ds2, ddx, ddx0};
    for (size_t i = 0; i < sizeof dv / sizeof dv[0]; i++) dev_free(DEV, dv[i]);
    void *hv[] = {x, dy, gamma, beta, hx, hdy, hg, hb, hmean, hvar, hy, hs1, hs2, hdx, hdx0};
    for (size_t i = 0; i < sizeof hv / sizeof hv[0]; i++) free(hv[i]);
}

/* ---- residual add: alias 0 (y separate), 1 (y = a), 2 (y = b); offset misaligns every pointer ---- */
static void case_add(ls_dtype t, int64_t n, int relu, int alias, int64_t offset) {
    const size_t es = ls_dtype_size(t);
    double *a = rnd(n + offset, 1.0, t), *b = rnd(n + offset, 1.0, t);
    if (n >= 8) { /* non-finite sums, as the CPU passes them: NaN stays NaN through the ReLU */
        a[offset + n / 2] = NAN;
        a[offset + n / 3] = INFINITY, b[offset + n / 3] = -INFINITY;
        a[offset + n / 4] = INFINITY;
        a[offset + n / 5] = -0.0, b[offset + n / 5] = -0.0;
    }
    void *ha = pack(a, t, n + offset), *hb = pack(b, t, n + offset), *hy = malloc((size_t)(n + offset) * es);
    LS_REQUIRE(hy);
    LS_REQUIRE_OK(CPU->ops->add(CPU->state, t, n, (char *)ha + offset * es, (char *)hb + offset * es, relu,
                                (char *)hy + offset * es));
    void *da = dev_vals(DEV, a, t, n + offset), *db = dev_vals(DEV, b, t, n + offset);
    void *dy = alias ? NULL : dev_poison(DEV, (size_t)(n + offset) * es);
    char *out = alias == 1 ? da : alias == 2 ? db : dy;
    char what[160];
    snprintf(what, sizeof what, "add%s n=%lld%s%s", relu ? "+relu" : "", (long long)n,
             alias == 1   ? " into a"
             : alias == 2 ? " into b"
                          : "",
             offset ? " misaligned" : "");
    if (dev_ok(DEV->ops->add(DEV->state, t, n, (char *)da + offset * es, (char *)db + offset * es, relu,
                             out + offset * es),
               what, t))
        check_buf(DEV, what, t, TOL_OTHER, out + offset * es, (char *)hy + offset * es, n, t);
    dev_free(DEV, da), dev_free(DEV, db);
    if (dy) dev_free(DEV, dy);
    free(a), free(b), free(ha), free(hb), free(hy);
}

/* ---- one training step of a small ResNet on both backends ---- */
typedef struct net {
    ls_ctx *ctx;
    ls_module *m;
    ls_xent *loss;
    ls_tensor *x, *labels;
} net;

static void net_make(net *n, ls_ctx *ctx, const ls_resnet_config *cfg, const ls_tensor *hx, const ls_tensor *hl) {
    n->ctx = ctx;
    LS_REQUIRE_OK(ls_resnet_create(ctx, cfg, &n->m));
    LS_REQUIRE_OK(ls_xent_create(ctx, &n->loss));
    LS_REQUIRE_OK(ls_tensor_create(ctx->alloc, hx->dtype, hx->ndim, hx->shape, "resnet input", &n->x));
    LS_REQUIRE_OK(ls_tensor_create(ctx->alloc, hl->dtype, hl->ndim, hl->shape, "resnet labels", &n->labels));
    LS_REQUIRE_OK(ls_tensor_copy(ctx->alloc, n->x, hx));
    LS_REQUIRE_OK(ls_tensor_copy(ctx->alloc, n->labels, hl));
}

static void net_drop(net *n) {
    ls_tensor_destroy(n->x);
    ls_tensor_destroy(n->labels);
    ls_xent_destroy(n->loss);
    ls_module_destroy(n->m);
}

/* forward, mean cross-entropy, backward (gradients accumulate); the loss */
static double net_step(net *n) {
    const ls_tensor *logits, *dl;
    double loss;
    LS_REQUIRE_OK(ls_module_forward(n->m, n->x, &logits));
    LS_REQUIRE_OK(ls_xent_forward(n->loss, logits, n->labels, &loss));
    LS_REQUIRE_OK(ls_xent_backward(n->loss, 1.0 / (double)n->x->shape[0], &dl));
    LS_REQUIRE_OK(ls_module_backward(n->m, dl, 0, NULL));
    LS_REQUIRE_OK(ls_ctx_synchronize(n->ctx));
    return loss;
}

/* a tensor's values on the host as doubles */
static double *tensor_values(ls_ctx *c, const ls_tensor *t) {
    void *h = malloc(ls_tensor_nbytes(t) + 1);
    LS_REQUIRE(h);
    ls_tensor v = ls_tensor_view(h, t->dtype, ls_device_cpu(), t->ndim, t->shape);
    LS_REQUIRE_OK(ls_tensor_copy(c->alloc, &v, t));
    double *d = unpack(h, t->dtype, ls_tensor_numel(t));
    free(h);
    return d;
}

/* Compare every parameter gradient (per tensor, or by cosine similarity over all of them) and
 * every running statistic of a and b. */
static void compare_nets(const char *stage, net *a, net *b, double grad_tol, double min_cos, double buf_tol) {
    char what[192];
    double dot = 0, na = 0, nb = 0, worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < ls_module_num_params(a->m); i++) {
        ls_tensor *ga = ls_module_grad(a->m, i), *gb = ls_module_grad(b->m, i);
        const int64_t k = ls_tensor_numel(ga);
        double *va = tensor_values(a->ctx, ga), *vb = tensor_values(b->ctx, gb);
        for (int64_t j = 0; j < k; j++) {
            dot += va[j] * vb[j];
            na += va[j] * va[j];
            nb += vb[j] * vb[j];
        }
        if (grad_tol > 0) {
            snprintf(what, sizeof what, "resnet %s: grad %s", stage, ls_module_param_name(a->m, i));
            check_tol(what, "f32", grad_tol, vb, va, k, NULL);
        } else {
            int64_t nan_at;
            double e = rel_err(vb, va, k, &nan_at);
            if (nan_at >= 0) e = INFINITY;
            if (e > worst) worst = e, worst_name = ls_module_param_name(a->m, i);
        }
        free(va), free(vb);
    }
    double cosv = dot / sqrt(na * nb);
    n_cases++;
    int ok = cosv >= min_cos && isfinite(cosv);
    snprintf(what, sizeof what, "resnet %s: gradient cosine similarity", stage);
    printf("%-4s %-60s %.6f (>= %g)", ok ? "ok" : "FAIL", what, cosv, min_cos);
    if (grad_tol <= 0) printf(", worst tensor %s %.3g", worst_name, worst);
    printf("\n");
    if (!ok) ls_test_failures++;
    for (int i = 0; i < ls_cnn_num_buffers(a->m); i++) {
        char name[64];
        ls_tensor *ta = ls_cnn_buffer(a->m, i, name, sizeof name), *tb = ls_cnn_buffer(b->m, i, NULL, 0);
        double *va = tensor_values(a->ctx, ta), *vb = tensor_values(b->ctx, tb);
        snprintf(what, sizeof what, "resnet %s: %s", stage, name);
        check_tol(what, ls_dtype_name(ta->dtype), buf_tol, vb, va, ls_tensor_numel(ta), NULL);
        free(va), free(vb);
    }
}

static void case_resnet(ls_dtype act) {
    const int64_t B = 8, Cin = 3, HW = 16, classes = 10;
    ls_resnet_config cfg = {LS_F32, act, Cin, HW, HW, 3, {8, 16, 16}, 1, classes, 5, NULL, 0};
    const int f32 = act == LS_F32;
    const double loss_tol = f32 ? 1e-5 : 1e-2, grad_tol = f32 ? 1e-3 : 0, min_cos = f32 ? 0.99999 : 0.95;
    const double buf_tol = f32 ? 1e-3 : 5e-2;
    float *xs = malloc(sizeof(float) * (size_t)(B * Cin * HW * HW));
    int32_t lab[8];
    LS_REQUIRE(xs);
    for (int64_t i = 0; i < B * Cin * HW * HW; i++) xs[i] = (float)ls_rng_normal(&R);
    for (int64_t i = 0; i < B; i++) lab[i] = (int32_t)ls_rng_below(&R, (uint32_t)classes);
    ls_tensor hx = ls_tensor_view(xs, LS_F32, ls_device_cpu(), 2, (int64_t[]){B, Cin * HW * HW});
    ls_tensor hl = ls_tensor_view(lab, LS_I32, ls_device_cpu(), 1, (int64_t[]){B});
    net c, d;
    net_make(&c, CPU, &cfg, &hx, &hl);
    net_make(&d, DEV, &cfg, &hx, &hl);
    /* identical parameters and buffers: the CPU's, copied */
    LS_REQUIRE(ls_module_num_params(c.m) == ls_module_num_params(d.m));
    for (int i = 0; i < ls_module_num_params(c.m); i++)
        LS_REQUIRE_OK(ls_tensor_copy(DEV->alloc, ls_module_param(d.m, i), ls_module_param(c.m, i)));
    for (int i = 0; i < ls_cnn_num_buffers(c.m); i++)
        LS_REQUIRE_OK(ls_tensor_copy(DEV->alloc, ls_cnn_buffer(d.m, i, NULL, 0), ls_cnn_buffer(c.m, i, NULL, 0)));
    LS_REQUIRE_OK(ls_module_zero_grad(c.m));
    LS_REQUIRE_OK(ls_module_zero_grad(d.m));
    char stage[64], what[160];
    for (int eval = 0; eval < 2; eval++) {
        ls_module_set_training(c.m, !eval);
        ls_module_set_training(d.m, !eval);
        double lc = net_step(&c), ld = net_step(&d);
        snprintf(stage, sizeof stage, "%s %s step", ls_dtype_name(act), eval ? "eval" : "train");
        snprintf(what, sizeof what, "resnet %s: loss %.7f vs %.7f", stage, ld, lc);
        n_cases++;
        int ok = fabs(ld - lc) <= loss_tol * fabs(lc);
        printf("%-4s %-60s rel %.3g (tol %.0e)\n", ok ? "ok" : "FAIL", what, fabs(ld - lc) / fabs(lc), loss_tol);
        if (!ok) ls_test_failures++;
        /* the eval step's gradients add to the train step's (count 0 in batch norm's backward) */
        compare_nets(stage, &c, &d, grad_tol, min_cos, buf_tol);
    }
    net_drop(&c);
    net_drop(&d);
    free(xs);
}

/* The CNN entries of an op table (conv2d_workspace .. add) that are NULL: their count. */
static int missing_cnn_entries(const ls_ops *o) {
    typedef void (*fn)(void);
    const size_t first = offsetof(ls_ops, conv2d_workspace), last = offsetof(ls_ops, add);
    int missing = 0;
    for (size_t off = first; off <= last; off += sizeof(fn)) {
        fn f;
        memcpy(&f, (const char *)o + off, sizeof f);
        if (!f) {
            fprintf(stderr, "the %s op table lacks the CNN entry at byte offset %zu of ls_ops\n", o->name, off);
            missing++;
        }
    }
    return missing;
}

int main(int argc, char **argv) {
    self_mode = argc > 1 && strcmp(argv[1], "--self") == 0;
    /* checked with or without a GPU: the CUDA table has every CNN entry of ops.h */
    const ls_ops *cuda_ops = ls_ops_for(LS_DEVICE_CUDA);
    LS_REQUIRE(cuda_ops != NULL);
    if (missing_cnn_entries(cuda_ops)) return 1;
    char why[256] = "";
    if (!parity_emulated && !self_mode && ls_device_cuda_count(why, sizeof why) == 0)
        LS_SKIP("no usable CUDA device: %s", why);
    ls_device dev = self_mode ? ls_device_cpu() : (ls_device){LS_DEVICE_CUDA, 0};
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &CPU));
    unsetenv("LOCKSTEP_TF32");
    LS_REQUIRE_OK(parity_ctx_create(dev, 2, &DEV));
    LS_REQUIRE_OK(parity_ctx_create(dev, 5, &DEV2));
    setenv("LOCKSTEP_TF32", "1", 1);
    LS_REQUIRE_OK(parity_ctx_create(dev, 3, &DEV_TF32));
    unsetenv("LOCKSTEP_TF32");
    ls_rng_init(&R, 20240612);
    printf("cnn parity: %s against cpu\n", parity_device_name(self_mode));

    /* N, C, H, W, K, R, stride, pad, groups, bias: odd sizes, strides 1 and 2, paddings 0..2,
     * groups 1 and 2, 1x1 and 5x5, the ResNet stem (C = 1) and its projections */
    static const conv_case convs[] = {
        {2, 3, 11, 13, 5, 3, 1, 1, 1, 1},  {3, 4, 9, 7, 6, 3, 2, 1, 2, 1},   {2, 8, 10, 10, 8, 1, 1, 0, 1, 0},
        {2, 6, 15, 9, 4, 3, 2, 0, 2, 0},   {4, 16, 8, 8, 32, 3, 1, 1, 1, 0}, {3, 16, 14, 14, 32, 1, 2, 0, 1, 1},
        {2, 1, 28, 28, 16, 3, 1, 1, 1, 0}, {2, 4, 12, 11, 8, 5, 2, 2, 2, 1}, {8, 32, 16, 16, 64, 3, 2, 1, 1, 0},
        {5, 6, 7, 7, 6, 3, 1, 1, 2, 0},
    };
    const int n_convs = (int)(sizeof convs / sizeof convs[0]);
    for (int i = 0; i < N_FLOATS; i++) {
        const ls_dtype t = FLOATS[i];
        for (int j = 0; j < n_convs; j++) case_conv(DEV, t, TOL_CONV, &convs[j]);
        for (int m = 0; m < 2; m++) {
            const ls_pool mode = m ? LS_POOL_AVG : LS_POOL_MAX;
            case_pool(t, mode, 1, 2, 3, 11, 13, 3, 2, 1, 0);
            case_pool(t, mode, 1, 2, 4, 8, 8, 2, 2, 0, 0);
            case_pool(t, mode, 1, 1, 2, 7, 9, 3, 1, 1, 0);
            case_pool(t, mode, 0, 3, 5, 14, 15, 3, 2, 1, 0);
            case_pool(t, mode, 1, 2, 3, 12, 10, 4, 3, 2, 0);
        }
        case_pool(t, LS_POOL_MAX, 1, 3, 5, 14, 14, 3, 2, 1, 1);
        case_pool(t, LS_POOL_MAX, 1, 2, 3, 9, 9, 3, 1, 1, 1);
        case_gap(t, 6, 49);
        case_gap(t, 256, 784);
        case_gap(t, 10, 1);
        case_gap(t, 3, 5000);
        for (int relu = 0; relu < 2; relu++) {
            case_bn(t, 4, 3, 49, relu, 0);
            case_bn(t, 16, 16, 196, relu, relu);
            case_bn(t, 8, 5, 1, relu, 0);
            case_bn(t, 3, 7, 143, relu, 1);
            case_bn(t, 2, 4, 20000, relu, 0);
        }
        if (t == LS_F32 || t == LS_F64) /* per-channel values are in the master dtype */
            for (int c = 0; c < 3; c++) {
                case_bn_update(t, c == 0 ? 3 : c == 1 ? 64 : 100003, 0.9);
                case_bn_update(t, c == 0 ? 3 : c == 1 ? 64 : 100003, 1.0);
            }
        for (int relu = 0; relu < 2; relu++) {
            case_add(t, 1000003, relu, 0, 0);
            case_add(t, 4099, relu, 1, 0);
            case_add(t, 4099, relu, 2, 1);
            case_add(t, 17, relu, 0, 1);
        }
    }
    /* TF32: f32 convolutions on tensor cores */
    case_conv(DEV_TF32, LS_F32, TOL_TF32, &convs[4]);
    case_conv(DEV_TF32, LS_F32, TOL_TF32, &convs[8]);
    /* a small ResNet, one training step and one eval step, f32 and bf16 activations */
    case_resnet(LS_F32);
    case_resnet(LS_BF16);
    /* unsupported dtypes: a clear error, not a crash */
    if (!self_mode) {
        ls_bn_params bp = {1, 1, 1, 1e-5, 0};
        LS_EXPECT_ERR(DEV->ops->bn_stats(DEV->state, LS_I32, &bp, NULL, NULL, NULL), LS_ERR_UNSUPPORTED,
                      "does not compute in i32");
    }
    LS_REQUIRE_OK(ls_ctx_synchronize(DEV));
    printf("cnn parity: %d comparisons, %d skipped, %d failed; worst error f32 %.3g, f16/bf16 %.3g\n", n_cases,
           n_skipped, ls_test_failures, worst_f32, worst_low);
    parity_ctx_destroy(DEV_TF32);
    parity_ctx_destroy(DEV2);
    parity_ctx_destroy(DEV);
    ls_ctx_destroy(CPU);
    LS_TEST_END();
}
