/* test_gpu_parity.c: every entry of the CUDA op table from init to adamw_step against the CPU op
 * table on fresh random inputs, in f32, f64, f16 and bf16, and f32 GEMMs again with TF32 on (the
 * NCHW entries after adamw_step: test_gpu_cnn_parity.c); linear, GELU and ReLU also on views at an
 * odd element offset (no pointer 16-byte aligned).
 * f16/bf16 follow ops.h's mixed-precision rule (parameter gradients, probabilities and losses f32)
 * and are checked against the CPU's own f16/bf16 entries where it has them, else against f32 on
 * the same rounded inputs. Output buffers are poisoned (0xFF bytes: NaN) first, so an element the
 * GPU forgets to write fails. Error = max |gpu - cpu| / max |cpu| over the output;
 * tolerances: f64 1e-10, f32 1e-5, TF32 1e-3, f16/bf16 1e-2; any NaN the CPU lacks fails; argmax,
 * convert and counts must match exactly. Exits 77 where no CUDA device is usable.
 * --self runs the harness with the CPU as the "device" (checks the test itself). Without a GPU it
 * still checks that the CUDA op table has every entry, then exits 77. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "ops.h"
#include "optim.h"
#include "rng.h"
#include "testutil.h"
#include "gpu_values.h"
#include "parity_ctx.h"
#ifdef LS_PARITY_EMU
#include "cuda_emu_rt.h" /* emu_work_counts */
#endif

static ls_ctx *CPU, *DEV, *DEV_TF32;
static int self_mode;
static ls_rng R;
static int n_cases, n_skipped;
static double worst_f32, worst_tf32, worst_low; /* the largest errors seen, for the summary */

/* ---- host values: doubles (pack/unpack in gpu_values.h) ---- */
/* Random values (normal * scale), rounded to what dtype t can hold. */
static double *rnd(int64_t n, double scale, ls_dtype t) {
    double *v = calloc((size_t)(n > 0 ? n : 1), sizeof(double)); /* calloc: gcc sees n = 0 reads nothing */
    LS_REQUIRE(v);
    for (int64_t i = 0; i < n; i++) v[i] = ls_rng_normal(&R) * scale;
    round_to(v, t, n);
    return v;
}

/* The f32 (or f64) reference type of t, for the CPU entries without f16/bf16; also the dtype of
 * parameter gradients, probabilities and losses under f16/bf16 activations. */
static ls_dtype ref_type(ls_dtype t) { return t == LS_F64 ? LS_F64 : LS_F32; }
static ls_dtype master(ls_dtype t) { return ref_type(t); }

/* ---- device buffers ---- */
static void *dev_alloc(size_t bytes) {
    void *d = NULL;
    LS_REQUIRE_OK(ls_alloc(DEV->alloc, bytes ? bytes : 1, "parity test buffer", &d));
    return d;
}
static void *dev_bytes(const void *h, size_t bytes) {
    void *d = dev_alloc(bytes);
    if (bytes) LS_REQUIRE_OK(ls_allocator_copy(DEV->alloc, d, 1, h, 0, bytes));
    return d;
}
static void *dev_vals(const double *v, ls_dtype t, int64_t n) {
    void *h = pack(v, t, n);
    void *d = dev_bytes(h, (size_t)n * ls_dtype_size(t));
    free(h);
    return d;
}
static void *dev_poison(size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    LS_REQUIRE(h);
    memset(h, 0xFF, bytes);
    void *d = dev_bytes(h, bytes);
    free(h);
    return d;
}
static void dev_get(void *h, const void *d, size_t bytes) {
    if (bytes) LS_REQUIRE_OK(ls_allocator_copy(DEV->alloc, h, 0, d, 1, bytes));
}
static double *dev_read(const void *d, ls_dtype t, int64_t n) {
    void *h = malloc((size_t)(n > 0 ? n : 1) * ls_dtype_size(t));
    LS_REQUIRE(h);
    dev_get(h, d, (size_t)n * ls_dtype_size(t));
    double *v = unpack(h, t, n);
    free(h);
    return v;
}
static void dev_free(void *d) { ls_free(DEV->alloc, d); }

/* ---- comparison ---- */
static double tol_for(ls_dtype t, int tf32) {
    if (t == LS_F64) return 1e-10;
    if (t == LS_F32) return tf32 ? 1e-3 : 1e-5;
    return 1e-2;
}

static void note(ls_dtype t, int tf32, double err) {
    double *w = t == LS_F64 ? NULL : t == LS_F32 ? (tf32 ? &worst_tf32 : &worst_f32) : &worst_low;
    if (w && err > *w) *w = err;
}

static void check(const char *what, ls_dtype t, int tf32, const double *got, const double *ref, int64_t n) {
    double num = 0, den = 0;
    int64_t nan_at = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(got[i]) != isnan(ref[i]) || isinf(got[i]) != isinf(ref[i])) {
            if (nan_at < 0) nan_at = i;
            continue;
        }
        if (!isfinite(ref[i])) continue;
        num = fmax(num, fabs(got[i] - ref[i]));
        den = fmax(den, fabs(ref[i]));
    }
    double err = den > 0 ? num / den : num;
    double tol = tol_for(t, tf32);
    n_cases++;
    note(t, tf32, err);
    int ok = nan_at < 0 && err <= tol;
    printf("%-4s %-52s %-5s err %.3g (tol %.0e)%s\n", ok ? "ok" : "FAIL", what, tf32 ? "tf32" : ls_dtype_name(t), err,
           tol, nan_at >= 0 ? " NaN/inf mismatch" : "");
    if (nan_at >= 0)
        fprintf(stderr, "%s %s: element %lld is %g on the device, %g on the CPU\n", what, ls_dtype_name(t),
                (long long)nan_at, got[nan_at], ref[nan_at]);
    if (!ok) ls_test_failures++;
}

/* The device's answer to a call: LS_OK, or (in --self mode only) a skip for f16/bf16. */
static int dev_ok(ls_status s, const char *what, ls_dtype t) {
    if (s == LS_OK) return 1;
    if (self_mode && s == LS_ERR_UNSUPPORTED && (t == LS_F16 || t == LS_BF16)) {
        n_skipped++;
        return 0;
    }
    fprintf(stderr, "%s %s on the device failed: %s: %s\n", what, ls_dtype_name(t), ls_status_name(s), ls_last_error());
    ls_test_failures++;
    return 0;
}

static const ls_dtype FLOATS[] = {LS_F32, LS_F64, LS_F16, LS_BF16};
#define N_FLOATS 4

/* ---- gemm ---- */
static void case_gemm(ls_ctx *dev, ls_dtype t, int tf32, int ta, int tb, int64_t m, int64_t n, int64_t k, double beta) {
    ls_ctx *save = DEV;
    DEV = dev;
    ls_dtype rt = ref_type(t);
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int64_t lda = ac + 3, ldb = bc + 2, ldc = n + 1;
    int64_t na = ar * lda, nb = br * ldb, nc = m * ldc;
    double *a = rnd(na, 1.0, t), *b = rnd(nb, 1.0, t), *c = rnd(nc, 1.0, t);
    double alpha = 0.75;
    void *ha = pack(a, rt, na), *hb = pack(b, rt, nb), *hc = pack(c, rt, nc);
    LS_REQUIRE_OK(CPU->ops->gemm(CPU->state, rt, ta, tb, m, n, k, alpha, ha, lda, hb, ldb, beta, hc, ldc));
    double *ref = unpack(hc, rt, nc);
    void *da = dev_vals(a, t, na), *db = dev_vals(b, t, nb);
    void *dc = beta == 0 ? dev_poison((size_t)nc * ls_dtype_size(t)) : dev_vals(c, t, nc);
    char what[96];
    snprintf(what, sizeof what, "gemm %s%s [%lld x %lld x %lld] beta %g", ta ? "T" : "N", tb ? "T" : "N", (long long)m,
             (long long)n, (long long)k, beta);
    if (dev_ok(dev->ops->gemm(dev->state, t, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc), what, t)) {
        double *got = dev_read(dc, t, nc);
        /* compare the m x n part only: the padding is not the op's */
        double *g2 = malloc(sizeof(double) * (size_t)(m * n)), *r2 = malloc(sizeof(double) * (size_t)(m * n));
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                g2[i * n + j] = got[i * ldc + j];
                r2[i * n + j] = ref[i * ldc + j];
            }
        check(what, t, tf32, g2, r2, m * n);
        free(g2);
        free(r2);
        free(got);
    }
    dev_free(da);
    dev_free(db);
    dev_free(dc);
    free(a), free(b), free(c), free(ha), free(hb), free(hc), free(ref);
    DEV = save;
}

/* ---- linear forward / backward (the CPU computes f16/bf16 itself) ---- */
static void case_linear(ls_ctx *dev, ls_dtype t, int tf32, int64_t B, int64_t in, int64_t out, int with_bias,
                        int with_dx) {
    ls_ctx *save = DEV;
    DEV = dev;
    ls_dtype mt = master(t);
    size_t es = ls_dtype_size(t);
    double *x = rnd(B * in, 1.0, t), *w = rnd(out * in, 0.1, t), *b = rnd(out, 1.0, t);
    double *dy = rnd(B * out, 1.0, t), *dw0 = rnd(out * in, 1.0, mt), *db0 = rnd(out, 1.0, mt);
    char what[96];
    /* CPU */
    void *hx = pack(x, t, B * in), *hw = pack(w, t, out * in), *hb = pack(b, t, out), *hdy = pack(dy, t, B * out);
    void *hy = pack(dy, t, B * out), *hdx = pack(x, t, B * in), *hdw = pack(dw0, mt, out * in),
         *hdb = pack(db0, mt, out);
    LS_REQUIRE_OK(CPU->ops->linear_fwd(CPU->state, t, B, in, out, hx, hw, with_bias ? hb : NULL, hy));
    LS_REQUIRE_OK(CPU->ops->linear_bwd(CPU->state, t, B, in, out, hdy, hx, hw, with_dx ? hdx : NULL, hdw,
                                       with_bias ? hdb : NULL));
    /* device */
    void *dx_ = dev_vals(x, t, B * in), *dw_ = dev_vals(w, t, out * in), *db_ = dev_vals(b, t, out);
    void *ddy = dev_vals(dy, t, B * out), *dy_out = dev_poison((size_t)(B * out) * es);
    void *ddx = dev_poison((size_t)(B * in) * es);
    void *ddw = dev_vals(dw0, mt, out * in), *ddb = dev_vals(db0, mt, out);
    snprintf(what, sizeof what, "linear fwd [%lld, %lld] -> %lld%s", (long long)B, (long long)in, (long long)out,
             with_bias ? " +bias" : "");
    if (dev_ok(dev->ops->linear_fwd(dev->state, t, B, in, out, dx_, dw_, with_bias ? db_ : NULL, dy_out), what, t)) {
        double *got = dev_read(dy_out, t, B * out), *ref = unpack(hy, t, B * out);
        check(what, t, tf32, got, ref, B * out);
        free(got), free(ref);
    }
    snprintf(what, sizeof what, "linear bwd [%lld, %lld] -> %lld%s%s", (long long)B, (long long)in, (long long)out,
             with_bias ? " +db" : "", with_dx ? " +dx" : "");
    if (dev_ok(dev->ops->linear_bwd(dev->state, t, B, in, out, ddy, dx_, dw_, with_dx ? ddx : NULL, ddw,
                                    with_bias ? ddb : NULL),
               what, t)) {
        char w2[128];
        double *got = dev_read(ddw, mt, out * in), *ref = unpack(hdw, mt, out * in);
        snprintf(w2, sizeof w2, "%s: dw (%s)", what, ls_dtype_name(mt));
        check(w2, t, tf32, got, ref, out * in);
        free(got), free(ref);
        if (with_dx) {
            got = dev_read(ddx, t, B * in), ref = unpack(hdx, t, B * in);
            snprintf(w2, sizeof w2, "%s: dx", what);
            check(w2, t, tf32, got, ref, B * in);
            free(got), free(ref);
        }
        if (with_bias) {
            got = dev_read(ddb, mt, out), ref = unpack(hdb, mt, out);
            snprintf(w2, sizeof w2, "%s: db (%s)", what, ls_dtype_name(mt));
            check(w2, t, 0, got, ref, out);
            free(got), free(ref);
        }
    }
    void *ds[] = {dx_, dw_, db_, ddy, dy_out, ddx, ddw, ddb};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) dev_free(ds[i]);
    void *hs[] = {x, w, b, dy, dw0, db0, hx, hw, hb, hdy, hy, hdx, hdw, hdb};
    for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) free(hs[i]);
    DEV = save;
}

/* ---- views at an odd element offset: nothing 16-byte aligned (the unaligned paths: cuBLAS(Lt)
 * alignment handling, the bias added after the GEMM, the element-wise kernels' scalar loops) ---- */
/* n values at element off of a fresh device buffer (poisoned before them); *base is what to free. */
static void *dev_vals_at(const double *v, ls_dtype t, int64_t n, int64_t off, void **base) {
    size_t es = ls_dtype_size(t);
    *base = dev_poison((size_t)(n + off) * es);
    void *h = pack(v, t, n);
    char *d = (char *)*base + (size_t)off * es;
    if (n) LS_REQUIRE_OK(ls_allocator_copy(DEV->alloc, d, 1, h, 0, (size_t)n * es));
    free(h);
    return d;
}

static void case_offsets(ls_dtype t, int64_t B, int64_t in, int64_t out, int64_t off) {
    char what[96];
    void *bx, *bw, *bb, *by, *ba, *bd;
    double *x = rnd(B * in, 1.0, t), *w = rnd(out * in, 0.1, t), *b = rnd(out, 1.0, t);
    void *hx = pack(x, t, B * in), *hw = pack(w, t, out * in), *hb = pack(b, t, out), *hy = pack(x, t, B * out);
    void *dx = dev_vals_at(x, t, B * in, off, &bx), *dw = dev_vals_at(w, t, out * in, off, &bw);
    void *db = dev_vals_at(b, t, out, off, &bb), *dy = dev_vals_at(x, t, B * out, off, &by);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        LS_REQUIRE_OK(CPU->ops->linear_fwd(CPU->state, t, B, in, out, hx, hw, with_bias ? hb : NULL, hy));
        snprintf(what, sizeof what, "linear fwd [%lld, %lld] -> %lld%s, offset %lld", (long long)B, (long long)in,
                 (long long)out, with_bias ? " +bias" : "", (long long)off);
        if (dev_ok(DEV->ops->linear_fwd(DEV->state, t, B, in, out, dx, dw, with_bias ? db : NULL, dy), what, t)) {
            double *got = dev_read(dy, t, B * out), *ref = unpack(hy, t, B * out);
            check(what, t, 0, got, ref, B * out);
            free(got), free(ref);
        }
    }
    /* gelu forward out of place, then relu backward in place into dy, over n = B * in values */
    int64_t n = B * in;
    double *g = rnd(n, 1.0, t);
    void *hg = pack(g, t, n), *hgx = pack(g, t, n), *hd = pack(g, t, n);
    LS_REQUIRE_OK(CPU->ops->act_fwd(CPU->state, t, LS_ACT_GELU, n, hx, hgx));
    LS_REQUIRE_OK(CPU->ops->act_bwd(CPU->state, t, LS_ACT_RELU, n, hx, hg, hd));
    void *da = dev_vals_at(x, t, n, off, &ba), *dd = dev_vals_at(g, t, n, off, &bd);
    snprintf(what, sizeof what, "gelu fwd n=%lld, offset %lld", (long long)n, (long long)off);
    if (dev_ok(DEV->ops->act_fwd(DEV->state, t, LS_ACT_GELU, n, dx, da), what, t)) {
        double *got = dev_read(da, t, n), *ref = unpack(hgx, t, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    snprintf(what, sizeof what, "relu bwd n=%lld in place, offset %lld", (long long)n, (long long)off);
    if (dev_ok(DEV->ops->act_bwd(DEV->state, t, LS_ACT_RELU, n, dx, dd, dd), what, t)) {
        double *got = dev_read(dd, t, n), *ref = unpack(hd, t, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    dev_free(bx), dev_free(bw), dev_free(bb), dev_free(by), dev_free(ba), dev_free(bd);
    free(x), free(w), free(b), free(g), free(hx), free(hw), free(hb), free(hy), free(hg), free(hgx), free(hd);
}

/* ---- bias ---- */
static void case_bias(ls_dtype t, int64_t rows, int64_t cols) {
    ls_dtype rt = ref_type(t);
    double *y = rnd(rows * cols, 1.0, t), *b = rnd(cols, 1.0, t), *db0 = rnd(cols, 1.0, t);
    void *hy = pack(y, rt, rows * cols), *hb = pack(b, rt, cols), *hdb = pack(db0, rt, cols);
    /* bias_grad's db is f32 for f16/bf16 dy (a parameter gradient) */
    void *dy = dev_vals(y, t, rows * cols), *db = dev_vals(b, t, cols), *ddb = dev_vals(db0, master(t), cols);
    char what[96];
    LS_REQUIRE_OK(CPU->ops->bias_grad(CPU->state, rt, rows, cols, hy, hdb)); /* before y changes */
    LS_REQUIRE_OK(CPU->ops->bias_add(CPU->state, rt, rows, cols, hb, hy));
    snprintf(what, sizeof what, "bias_grad [%lld, %lld]", (long long)rows, (long long)cols);
    if (dev_ok(DEV->ops->bias_grad(DEV->state, t, rows, cols, dy, ddb), what, t)) {
        double *got = dev_read(ddb, master(t), cols), *ref = unpack(hdb, rt, cols);
        check(what, t, 0, got, ref, cols);
        free(got), free(ref);
    }
    snprintf(what, sizeof what, "bias_add [%lld, %lld]", (long long)rows, (long long)cols);
    if (dev_ok(DEV->ops->bias_add(DEV->state, t, rows, cols, db, dy), what, t)) {
        double *got = dev_read(dy, t, rows * cols), *ref = unpack(hy, rt, rows * cols);
        check(what, t, 0, got, ref, rows * cols);
        free(got), free(ref);
    }
    dev_free(dy), dev_free(db), dev_free(ddb);
    free(y), free(b), free(db0), free(hy), free(hb), free(hdb);
}

/* ---- activations ---- */
static void case_act(ls_dtype t, ls_act act, int64_t n, int in_place) {
    ls_dtype rt = t; /* the CPU computes f16/bf16 activations itself */
    size_t es = ls_dtype_size(t);
    double *x = rnd(n, 2.0, t), *dy = rnd(n, 1.0, t);
    /* non-finite inputs, as the CPU passes them (relu(NaN) = NaN; backward passes dy at a NaN) */
    x[n / 2] = NAN;
    if (act == LS_ACT_RELU) x[n / 3] = INFINITY, x[n / 4] = -INFINITY, x[n / 5] = -0.0;
    void *hx = pack(x, rt, n), *hy = pack(x, rt, n), *hdy = pack(dy, rt, n), *hdx = pack(dy, rt, n);
    LS_REQUIRE_OK(CPU->ops->act_fwd(CPU->state, rt, act, n, hx, hy));
    LS_REQUIRE_OK(CPU->ops->act_bwd(CPU->state, rt, act, n, hx, hdy, hdx));
    void *dx = dev_vals(x, t, n), *ddy = dev_vals(dy, t, n);
    void *dy_out = in_place ? dev_vals(x, t, n) : dev_poison((size_t)n * es);
    void *ddx = in_place ? ddy : dev_poison((size_t)n * es);
    const char *name = act == LS_ACT_RELU ? "relu" : "gelu";
    char what[96];
    snprintf(what, sizeof what, "%s fwd n=%lld%s", name, (long long)n, in_place ? " in place" : "");
    if (dev_ok(DEV->ops->act_fwd(DEV->state, t, act, n, in_place ? dy_out : dx, dy_out), what, t)) {
        double *got = dev_read(dy_out, t, n), *ref = unpack(hy, rt, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    snprintf(what, sizeof what, "%s bwd n=%lld%s", name, (long long)n, in_place ? " in place" : "");
    if (dev_ok(DEV->ops->act_bwd(DEV->state, t, act, n, dx, ddy, ddx), what, t)) {
        double *got = dev_read(ddx, t, n), *ref = unpack(hdx, rt, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    dev_free(dx), dev_free(ddy), dev_free(dy_out);
    if (!in_place) dev_free(ddx);
    free(x), free(dy), free(hx), free(hy), free(hdy), free(hdx);
}

/* ---- softmax cross-entropy (label smoothing eps) and argmax (the CPU computes f16/bf16 itself) ---- */
static void case_xent(ls_dtype t, int64_t B, int64_t C, int ties, double eps) {
    ls_dtype mt = master(t); /* probabilities and losses */
    double *z = rnd(B * C, 3.0, t);
    if (ties)
        for (int64_t i = 0; i < B * C; i++) z[i] = (double)(ls_rng_u32(&R) % 4);
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)B);
    for (int64_t i = 0; i < B; i++) lab[i] = (int32_t)ls_rng_below(&R, (uint32_t)C);
    double scale = 1.0 / (double)B;
    void *hz = pack(z, t, B * C), *hp = pack(z, mt, B * C), *hl = pack(z, mt, B), *hd = pack(z, t, B * C);
    int32_t *hpred = malloc(sizeof(int32_t) * (size_t)B), hcorrect = -1;
    LS_REQUIRE_OK(CPU->ops->xent_fwd(CPU->state, t, B, C, hz, lab, eps, hp, hl));
    LS_REQUIRE_OK(CPU->ops->xent_bwd(CPU->state, t, B, C, hp, lab, eps, scale, NULL, hd));
    LS_REQUIRE_OK(CPU->ops->argmax(CPU->state, t, B, C, hz, lab, hpred, &hcorrect));
    void *dz = dev_vals(z, t, B * C), *dlab = dev_bytes(lab, sizeof(int32_t) * (size_t)B);
    void *dp = dev_poison((size_t)(B * C) * ls_dtype_size(mt)), *dl = dev_poison((size_t)B * ls_dtype_size(mt));
    void *dd = dev_poison((size_t)(B * C) * ls_dtype_size(t));
    void *dpred = dev_poison(sizeof(int32_t) * (size_t)(B + 1));
    /* backward from the CPU's probabilities, so that it checks only itself */
    void *dp_cpu = dev_bytes(hp, (size_t)(B * C) * ls_dtype_size(mt));
    char what[96], sm[32] = "";
    if (eps != 0) snprintf(sm, sizeof sm, ", smoothing %g", eps);
    snprintf(what, sizeof what, "xent fwd [%lld, %lld]%s: probs (%s)", (long long)B, (long long)C, sm,
             ls_dtype_name(mt));
    if (dev_ok(DEV->ops->xent_fwd(DEV->state, t, B, C, dz, dlab, eps, dp, dl), what, t)) {
        double *got = dev_read(dp, mt, B * C), *ref = unpack(hp, mt, B * C);
        check(what, t, 0, got, ref, B * C);
        free(got), free(ref);
        snprintf(what, sizeof what, "xent fwd [%lld, %lld]%s: losses (%s)", (long long)B, (long long)C, sm,
                 ls_dtype_name(mt));
        got = dev_read(dl, mt, B), ref = unpack(hl, mt, B);
        check(what, t, 0, got, ref, B);
        free(got), free(ref);
    }
    snprintf(what, sizeof what, "xent bwd [%lld, %lld]%s", (long long)B, (long long)C, sm);
    if (dev_ok(DEV->ops->xent_bwd(DEV->state, t, B, C, dp_cpu, dlab, eps, scale, NULL, dd), what, t)) {
        double *got = dev_read(dd, t, B * C), *ref = unpack(hd, t, B * C);
        check(what, t, 0, got, ref, B * C);
        free(got), free(ref);
    }
    /* the loss scale read on the device: 65536 / B, as the CPU computes it on the host */
    const double num = 65536.0;
    double *dnum = dev_bytes(&num, sizeof num);
    LS_REQUIRE_OK(CPU->ops->xent_bwd(CPU->state, t, B, C, hp, lab, eps, num / (double)B, NULL, hd));
    snprintf(what, sizeof what, "xent bwd [%lld, %lld]%s scale on the device", (long long)B, (long long)C, sm);
    if (dev_ok(DEV->ops->xent_bwd(DEV->state, t, B, C, dp_cpu, dlab, eps, (double)B, dnum, dd), what, t)) {
        double *got = dev_read(dd, t, B * C), *ref = unpack(hd, t, B * C);
        check(what, t, 0, got, ref, B * C);
        free(got), free(ref);
    }
    dev_free(dnum);
    snprintf(what, sizeof what, "argmax [%lld, %lld]%s", (long long)B, (long long)C, ties ? " with ties" : "");
    int32_t *p = dpred;
    if (dev_ok(DEV->ops->argmax(DEV->state, t, B, C, dz, dlab, p, p + B), what, t)) {
        int32_t *got = malloc(sizeof(int32_t) * (size_t)(B + 1));
        dev_get(got, dpred, sizeof(int32_t) * (size_t)(B + 1));
        int64_t bad = 0;
        for (int64_t i = 0; i < B; i++) bad += got[i] != hpred[i];
        n_cases++;
        int ok = bad == 0 && got[B] == hcorrect;
        printf("%-4s %-52s %-5s %lld of %lld rows differ, correct %d vs %d\n", ok ? "ok" : "FAIL", what,
               ls_dtype_name(t), (long long)bad, (long long)B, got[B], hcorrect);
        if (!ok) ls_test_failures++;
        free(got);
    }
    dev_free(dz), dev_free(dlab), dev_free(dp), dev_free(dl), dev_free(dd), dev_free(dpred), dev_free(dp_cpu);
    free(z), free(lab), free(hz), free(hp), free(hl), free(hd), free(hpred);
}

/* ---- argmax with NaN (torch.argmax: NaN is the maximum, the first one wins): rows with none, one
 * or several NaNs at random columns (one in column 0, one in the last), the predictions and the
 * count equal to the CPU's ---- */
static void case_argmax_nan(ls_dtype t, int64_t B, int64_t C) {
    double *z = rnd(B * C, 3.0, t);
    for (int64_t r = 0; r < B; r++) {
        int k = r % 4; /* NaNs in this row */
        for (int j = 0; j < k; j++) z[r * C + ls_rng_below(&R, (uint32_t)C)] = NAN;
    }
    z[1 * C] = NAN, z[2 * C + C - 1] = NAN;
    int32_t *lab = malloc(sizeof(int32_t) * (size_t)B), *hpred = malloc(sizeof(int32_t) * (size_t)B);
    int32_t *got = malloc(sizeof(int32_t) * (size_t)(B + 1)), hcorrect = -1;
    LS_REQUIRE(lab && hpred && got);
    for (int64_t i = 0; i < B; i++) lab[i] = (int32_t)ls_rng_below(&R, (uint32_t)C);
    void *hz = pack(z, t, B * C);
    LS_REQUIRE_OK(CPU->ops->argmax(CPU->state, t, B, C, hz, lab, hpred, &hcorrect));
    void *dz = dev_vals(z, t, B * C), *dlab = dev_bytes(lab, sizeof(int32_t) * (size_t)B);
    void *dpred = dev_poison(sizeof(int32_t) * (size_t)(B + 1));
    char what[96];
    snprintf(what, sizeof what, "argmax with NaNs [%lld, %lld]", (long long)B, (long long)C);
    if (dev_ok(DEV->ops->argmax(DEV->state, t, B, C, dz, dlab, dpred, (int32_t *)dpred + B), what, t)) {
        dev_get(got, dpred, sizeof(int32_t) * (size_t)(B + 1));
        int64_t bad = 0;
        for (int64_t i = 0; i < B; i++) bad += got[i] != hpred[i];
        int ok = bad == 0 && got[B] == hcorrect && hpred[1] == 0 && isnan(z[2 * C + hpred[2]]);
        n_cases++;
        printf("%-4s %-52s %-5s %lld predictions differ, correct %d (cpu %d)\n", ok ? "ok" : "FAIL", what,
               ls_dtype_name(t), (long long)bad, got[B], hcorrect);
        if (!ok) ls_test_failures++;
    }
    dev_free(dz), dev_free(dlab), dev_free(dpred);
    free(z), free(lab), free(hpred), free(got), free(hz);
}

/* ---- convert: bit-exact against the CPU ---- */
static void case_convert(ls_dtype st, ls_dtype dt, int64_t n, int64_t offset) {
    double *v = malloc(sizeof(double) * (size_t)(n + offset));
    static const double scales[] = {1.0, 1e-6, 1e-3, 300.0, 7e4, 1e5};
    for (int64_t i = 0; i < n + offset; i++) v[i] = ls_rng_normal(&R) * scales[i % 6];
    v[0] = 65520.0;                              /* f16 overflow at the tie */
    if (n + offset > 1) v[1] = 1.0 + 1.0 / 2048; /* f16 tie to even */
    void *hs = pack(v, st, n + offset);
    size_t ds = ls_dtype_size(dt), ss = ls_dtype_size(st);
    void *hd = malloc((size_t)n * ds), *got = malloc((size_t)n * ds);
    LS_REQUIRE_OK(ls_cpu_convert(n, st, (char *)hs + offset * ss, dt, hd));
    void *dsrc = dev_bytes(hs, (size_t)(n + offset) * ss);
    void *ddst = dev_poison((size_t)(n + offset) * ds);
    char what[96];
    snprintf(what, sizeof what, "convert %s -> %s n=%lld offset %lld", ls_dtype_name(st), ls_dtype_name(dt),
             (long long)n, (long long)offset);
    ls_status s = DEV->ops->convert(DEV->state, n, st, (char *)dsrc + offset * ss, dt, (char *)ddst + offset * ds);
    if (dev_ok(s, what, (st == LS_F16 || st == LS_BF16) ? st : dt)) {
        dev_get(got, (char *)ddst + offset * ds, (size_t)n * ds);
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (memcmp((char *)got + i * ds, (char *)hd + i * ds, ds) != 0) {
                bad++;
                if (first < 0) first = i;
            }
        n_cases++;
        printf("%-4s %-52s %lld differ\n", bad ? "FAIL" : "ok", what, (long long)bad);
        if (bad) {
            fprintf(stderr, "%s: first difference at %lld (source value %.9g)\n", what, (long long)first,
                    v[first + offset]);
            ls_test_failures++;
        }
    }
    dev_free(dsrc), dev_free(ddst);
    free(v), free(hs), free(hd), free(got);
}

/* ---- convert_many (ls_op_convert_many): mixed precision's f32 -> f16/bf16 weight copies, K
 * tensors (more than a multi-tensor launch's 24; one past a 65536-element chunk; one empty; odd
 * sizes; one at an address that is not 16-byte aligned, converted element by element), bit for
 * bit against the CPU's convert of each, the bytes around each destination untouched. Emulated,
 * the work queued is counted: one launch per pack of 24, not one per tensor ---- */
static void case_convert_many(ls_dtype dt) {
    enum { K = 30 };
    int64_t n[K], off[K];
    size_t ds = ls_dtype_size(dt);
    void *hs[K], *want[K], *dsrc[K], *ddst[K];
    ls_tensor sv[K], dv[K];
    const ls_tensor *sp[K];
    ls_tensor *dp[K];
    static const double scales[] = {1.0, 1e-6, 1e-3, 300.0, 7e4, 1e5};
    for (int i = 0; i < K; i++) {
        n[i] = i == 3 ? 65536 * 2 + 5 : i == 11 ? 0 : 1 + (i * 97) % 3001;
        off[i] = i == 7 ? 1 : 0; /* 4 bytes past an aligned address */
        double *v = malloc(sizeof(double) * (size_t)(n[i] + 1));
        LS_REQUIRE(v);
        for (int64_t j = 0; j < n[i]; j++) v[j] = ls_rng_normal(&R) * scales[(i + j) % 6];
        if (n[i] > 1) v[0] = 65520.0, v[1] = 1.0 + 1.0 / 2048; /* f16 overflow and a tie at f16 */
        hs[i] = pack(v, LS_F32, n[i]);
        want[i] = malloc((size_t)(n[i] + 2) * ds);
        LS_REQUIRE(want[i]);
        memset(want[i], 0xFF, (size_t)(n[i] + 2) * ds); /* the poison around the destination */
        LS_REQUIRE_OK(ls_cpu_convert(n[i], LS_F32, hs[i], dt, (char *)want[i] + (size_t)off[i] * ds));
        dsrc[i] = dev_alloc((size_t)(n[i] + 1) * sizeof(float));
        if (n[i])
            LS_REQUIRE_OK(ls_allocator_copy(DEV->alloc, (float *)dsrc[i] + off[i], 1, hs[i], 0, (size_t)n[i] * 4));
        ddst[i] = dev_poison((size_t)(n[i] + 2) * ds);
        sv[i] = ls_tensor_view((float *)dsrc[i] + off[i], LS_F32, DEV->device, 1, &n[i]);
        dv[i] = ls_tensor_view((char *)ddst[i] + (size_t)off[i] * ds, dt, DEV->device, 1, &n[i]);
        sp[i] = &sv[i], dp[i] = &dv[i];
        free(v);
    }
    char what[96];
    snprintf(what, sizeof what, "convert_many f32 -> %s, %d tensors", ls_dtype_name(dt), K);
#ifdef LS_PARITY_EMU
    LS_REQUIRE_OK(ls_ctx_synchronize(DEV));
    unsigned long long q0, q1, done;
    emu_work_counts(&q0, &done);
#endif
    ls_status s = ls_op_convert_many(DEV, K, sp, dp);
#ifdef LS_PARITY_EMU
    emu_work_counts(&q1, &done);
    n_cases++;
    printf("%-4s %-52s %-5s %llu operations queued (at most 2)\n", q1 - q0 <= 2 ? "ok" : "FAIL", what,
           ls_dtype_name(dt), q1 - q0);
    if (q1 - q0 > 2) ls_test_failures++;
#endif
    if (dev_ok(s, what, dt)) {
        int64_t bad = 0;
        int first = -1;
        for (int i = 0; i < K; i++) {
            size_t bytes = (size_t)(n[i] + 2) * ds;
            void *got = malloc(bytes);
            LS_REQUIRE(got);
            dev_get(got, ddst[i], bytes);
            for (int64_t j = 0; j < n[i] + 2; j++)
                if (memcmp((char *)got + j * ds, (char *)want[i] + j * ds, ds) != 0) {
                    bad++;
                    if (first < 0) first = i;
                }
            free(got);
        }
        n_cases++;
        printf("%-4s %-52s %-5s %lld differ\n", bad ? "FAIL" : "ok", what, ls_dtype_name(dt), (long long)bad);
        if (bad) {
            fprintf(stderr, "%s: the first difference in tensor %d\n", what, first);
            ls_test_failures++;
        }
    }
    for (int i = 0; i < K; i++) dev_free(dsrc[i]), dev_free(ddst[i]), free(hs[i]), free(want[i]);
}

/* ---- zero_many (ls_op_zero_many, a step's gradients zeroed): K buffers of f32, f64, f16 (one
 * of an odd number of elements, not whole 32-bit words), one past a 65536-word chunk, one empty,
 * one at an address that is not 16-byte aligned, one of f16 at an address that is not 4-byte
 * aligned; every byte zero, the poison around each intact. Emulated, the work queued is counted:
 * one launch per pack of 24 and a memset for each buffer that is not whole aligned 32-bit words ----
 */
static void case_zero_many(void) {
    enum { K = 30 };
    int64_t n[K];
    size_t off[K], es[K];
    void *d[K];
    ls_tensor v[K], *tp[K];
    for (int i = 0; i < K; i++) {
        ls_dtype dt = i % 3 == 0 ? LS_F64 : i == 5 || i == 14 ? LS_F16 : LS_F32;
        n[i] = i == 3 ? 65536 * 2 + 5 : i == 11 ? 0 : i == 5 ? 7 : i == 14 ? 10 : 1 + (i * 131) % 2999;
        es[i] = ls_dtype_size(dt);
        /* 4 bytes past an aligned address; and whole 32-bit words (20 bytes of f16) at an address
         * that is not a multiple of 4, where a 32-bit store would fault on a GPU */
        off[i] = i == 8 ? 4 : i == 14 ? 2 : 0;
        d[i] = dev_poison((size_t)n[i] * es[i] + off[i] + 16);
        v[i] = ls_tensor_view((char *)d[i] + off[i], dt, DEV->device, 1, &n[i]);
        tp[i] = &v[i];
    }
#ifdef LS_PARITY_EMU
    LS_REQUIRE_OK(ls_ctx_synchronize(DEV));
    unsigned long long q0, q1, done, m0 = emu_memset_count();
    emu_work_counts(&q0, &done);
#endif
    ls_status s = ls_op_zero_many(DEV, K, tp);
#ifdef LS_PARITY_EMU
    emu_work_counts(&q1, &done);
    q1 += emu_memset_count() - m0;
    n_cases++;
    /* two multi-tensor launches and a memset for each of the two buffers that are not 32-bit words */
    printf("%-4s %-52s %-5s %llu operations and memsets queued (at most 4)\n", q1 - q0 <= 4 ? "ok" : "FAIL",
           "zero_many, 30 buffers", "any", q1 - q0);
    if (q1 - q0 > 4) ls_test_failures++;
#endif
    if (dev_ok(s, "zero_many", LS_F32)) {
        int64_t bad = 0;
        for (int i = 0; i < K; i++) {
            size_t all = (size_t)n[i] * es[i] + off[i] + 16, lo = off[i], hi = off[i] + (size_t)n[i] * es[i];
            unsigned char *h = malloc(all);
            LS_REQUIRE(h);
            dev_get(h, d[i], all);
            for (size_t j = 0; j < all; j++) bad += h[j] != (j >= lo && j < hi ? 0x00 : 0xFF);
            free(h);
        }
        n_cases++;
        printf("%-4s %-52s %-5s %lld bytes wrong\n", bad ? "FAIL" : "ok", "zero_many, 30 buffers", "any",
               (long long)bad);
        if (bad) ls_test_failures++;
    }
    for (int i = 0; i < K; i++) dev_free(d[i]);
}

/* ---- gather_rows: the batch gather from a data set on the device; bitwise ---- */
static void case_gather(size_t elem, int64_t n, int64_t rows, int64_t cols, int64_t offset) {
    size_t row = elem * (size_t)cols, src_bytes = (size_t)n * row + (size_t)offset * elem;
    unsigned char *hs = malloc(src_bytes), *want = malloc((size_t)rows * row + 1),
                  *got = malloc((size_t)rows * row + 1);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)rows);
    LS_REQUIRE(hs && want && got && idx);
    for (size_t i = 0; i < src_bytes; i++) hs[i] = (unsigned char)(ls_rng_u32(&R) >> 24);
    for (int64_t r = 0; r < rows; r++) idx[r] = (int64_t)ls_rng_below(&R, (uint32_t)n);
    idx[0] = n - 1; /* the last row, and a repeat */
    if (rows > 1) idx[rows - 1] = idx[0];
    LS_REQUIRE_OK(CPU->ops->gather_rows(CPU->state, elem, rows, cols, hs + offset * elem, idx, want));
    void *dsrc = dev_bytes(hs, src_bytes), *didx = dev_bytes(idx, sizeof(int64_t) * (size_t)rows);
    void *ddst = dev_poison((size_t)rows * row + (size_t)offset * elem);
    char what[96];
    snprintf(what, sizeof what, "gather_rows %zu-byte x %lld of %lld rows, offset %lld", elem, (long long)rows,
             (long long)n, (long long)offset);
    LS_REQUIRE_OK(DEV->ops->gather_rows(DEV->state, elem, rows, cols, (char *)dsrc + offset * elem, didx,
                                        (char *)ddst + offset * elem));
    dev_get(got, (char *)ddst + offset * elem, (size_t)rows * row);
    int64_t bad = 0;
    for (size_t i = 0; i < (size_t)rows * row; i++) bad += got[i] != want[i];
    n_cases++;
    printf("%-4s %-52s %lld bytes differ\n", bad ? "FAIL" : "ok", what, (long long)bad);
    if (bad) ls_test_failures++;
    dev_free(dsrc), dev_free(didx), dev_free(ddst);
    free(hs), free(want), free(got), free(idx);
}

/* ---- gather_rows_lut: the gather from a data set of bytes, decoded through 256 values; bitwise ---- */
static void case_gather_lut(int64_t n, int64_t rows, int64_t cols, int64_t offset) {
    size_t src_bytes = (size_t)(n * cols + offset), out = (size_t)(rows * cols);
    uint8_t *hs = malloc(src_bytes);
    float lut[256], *want = malloc(out * sizeof(float) + 1), *got = malloc(out * sizeof(float) + 1);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)rows);
    LS_REQUIRE(hs && want && got && idx);
    for (size_t i = 0; i < src_bytes; i++) hs[i] = (uint8_t)(ls_rng_u32(&R) >> 24);
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - 0.2860f) / 0.3530f + (float)(v % 3) * 1e-7f;
    for (int64_t r = 0; r < rows; r++) idx[r] = (int64_t)ls_rng_below(&R, (uint32_t)n);
    idx[0] = n - 1;
    if (rows > 1) idx[rows - 1] = idx[0];
    LS_REQUIRE_OK(CPU->ops->gather_rows_lut(CPU->state, rows, cols, hs + offset, idx, lut, want));
    void *dsrc = dev_bytes(hs, src_bytes), *didx = dev_bytes(idx, sizeof(int64_t) * (size_t)rows);
    void *dlut = dev_bytes(lut, sizeof lut), *ddst = dev_poison(out * sizeof(float) + (size_t)offset * sizeof(float));
    char what[96];
    snprintf(what, sizeof what, "gather_rows_lut %lld x %lld of %lld rows, offset %lld", (long long)rows,
             (long long)cols, (long long)n, (long long)offset);
    LS_REQUIRE_OK(DEV->ops->gather_rows_lut(DEV->state, rows, cols, (const uint8_t *)dsrc + offset, didx, dlut,
                                            (float *)ddst + offset));
    dev_get(got, (float *)ddst + offset, out * sizeof(float));
    int64_t bad = 0;
    for (size_t i = 0; i < out; i++) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
    n_cases++;
    printf("%-4s %-52s %lld values differ\n", bad ? "FAIL" : "ok", what, (long long)bad);
    if (bad) ls_test_failures++;
    dev_free(dsrc), dev_free(didx), dev_free(dlut), dev_free(ddst);
    free(hs), free(want), free(got), free(idx);
}

/* ---- scale, axpy, sumsq ---- */
static void case_blas1(ls_dtype t, int64_t n) {
    ls_dtype rt = ref_type(t);
    double *x = rnd(n, 1.0, t), *y = rnd(n, 1.0, t), *x2 = rnd(n, 1.0, t);
    void *hx = pack(x, rt, n), *hy = pack(y, rt, n), *hx2 = pack(x2, rt, n);
    LS_REQUIRE_OK(CPU->ops->scale(CPU->state, rt, n, -0.375, hx));
    LS_REQUIRE_OK(CPU->ops->axpy(CPU->state, rt, n, 1.5, hx2, hy));
    void *dx = dev_vals(x, t, n), *dy = dev_vals(y, t, n), *dx2 = dev_vals(x2, t, n);
    char what[96];
    snprintf(what, sizeof what, "scale n=%lld", (long long)n);
    if (dev_ok(DEV->ops->scale(DEV->state, t, n, -0.375, dx), what, t)) {
        double *got = dev_read(dx, t, n), *ref = unpack(hx, rt, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    snprintf(what, sizeof what, "axpy n=%lld", (long long)n);
    if (dev_ok(DEV->ops->axpy(DEV->state, t, n, 1.5, dx2, dy), what, t)) {
        double *got = dev_read(dy, t, n), *ref = unpack(hy, rt, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    /* mul (the CPU computes f16/bf16 itself), in place into its first operand */
    void *ha = pack(x2, t, n), *hb2 = pack(y, t, n), *da = dev_vals(x2, t, n), *db2 = dev_vals(y, t, n);
    LS_REQUIRE_OK(CPU->ops->mul(CPU->state, t, n, ha, hb2, ha));
    snprintf(what, sizeof what, "mul n=%lld in place", (long long)n);
    if (dev_ok(DEV->ops->mul(DEV->state, t, n, da, db2, da), what, t)) {
        double *got = dev_read(da, t, n), *ref = unpack(ha, t, n);
        check(what, t, 0, got, ref, n);
        free(got), free(ref);
    }
    free(ha), free(hb2);
    dev_free(da), dev_free(db2);
    free(x2), free(hx2);
    dev_free(dx2);
    /* sumsq: added onto what is there; twice for determinism; then with an inf and a NaN */
    double hs = 1.5, ds1 = 1.5, ds2 = 1.5;
    int hbad = 0, dbad1 = 0, dbad2 = 0;
    void *hy0 = pack(y, rt, n);
    void *dy0 = dev_vals(y, t, n);
    LS_REQUIRE_OK(CPU->ops->sumsq(CPU->state, rt, n, hy0, &hs, &hbad));
    snprintf(what, sizeof what, "sumsq n=%lld", (long long)n);
    if (dev_ok(DEV->ops->sumsq(DEV->state, t, n, dy0, &ds1, &dbad1), what, t) &&
        dev_ok(DEV->ops->sumsq(DEV->state, t, n, dy0, &ds2, &dbad2), what, t)) {
        double err = fabs(ds1 - hs) / fabs(hs);
        int ok = err <= 1e-10 && ds1 == ds2 && !dbad1 && !dbad2 && !hbad;
        n_cases++;
        printf("%-4s %-52s %-5s err %.3g, repeat %s\n", ok ? "ok" : "FAIL", what, ls_dtype_name(t), err,
               ds1 == ds2 ? "bit-identical" : "DIFFERS");
        if (!ok) ls_test_failures++;
        y[n / 3] = INFINITY;
        void *d_inf = dev_vals(y, t, n);
        y[n / 3] = NAN;
        void *d_nan = dev_vals(y, t, n);
        double s = 0;
        int b1 = 0, b2 = 0;
        LS_REQUIRE_OK(DEV->ops->sumsq(DEV->state, t, n, d_inf, &s, &b1));
        LS_REQUIRE_OK(DEV->ops->sumsq(DEV->state, t, n, d_nan, &s, &b2));
        n_cases++;
        printf("%-4s %-52s %-5s inf flagged %d, NaN flagged %d\n", b1 && b2 ? "ok" : "FAIL", "sumsq nonfinite",
               ls_dtype_name(t), b1, b2);
        if (!(b1 && b2)) ls_test_failures++;
        /* sumsq_many: three tensors (the clean one twice around the inf one) in one wait equal the
         * per-tensor calls added in order, and the inf is flagged */
        if (DEV->ops->sumsq_many) {
            const void *xs[3] = {dy0, d_inf, dy0};
            const int64_t ns[3] = {n, n, n / 2};
            double many = 1.5, one = 1.5;
            int bm = 0, bo = 0;
            LS_REQUIRE_OK(DEV->ops->sumsq_many(DEV->state, t, 3, xs, ns, &many, &bm));
            for (int i = 0; i < 3; i++) LS_REQUIRE_OK(DEV->ops->sumsq(DEV->state, t, ns[i], xs[i], &one, &bo));
            xs[1] = dy0; /* and without the inf: the clean sum */
            double clean_many = 0, clean_one = 0;
            int cm = 0, co = 0;
            LS_REQUIRE_OK(DEV->ops->sumsq_many(DEV->state, t, 3, xs, ns, &clean_many, &cm));
            for (int i = 0; i < 3; i++) LS_REQUIRE_OK(DEV->ops->sumsq(DEV->state, t, ns[i], xs[i], &clean_one, &co));
            double merr = fabs(clean_many - clean_one) / fabs(clean_one);
            int mok = bm && bo && !cm && !co && merr <= 1e-12;
            n_cases++;
            printf("%-4s %-52s %-5s err %.3g vs per-tensor, inf flagged %d\n", mok ? "ok" : "FAIL",
                   "sumsq_many (3 tensors)", ls_dtype_name(t), merr, bm);
            if (!mok) ls_test_failures++;
        }
        dev_free(d_inf), dev_free(d_nan);
    }
    dev_free(dx), dev_free(dy), dev_free(dy0);
    free(x), free(y), free(hx), free(hy), free(hy0);
}

/* ---- dropout's multipliers: bit for bit the CPU's (the same Philox draws, keep rounded the same
 * way), over several launches of keys (rows past LS_DROPOUT_KEYS) and rows not a multiple of 4;
 * the output poisoned first ---- */
static void case_dropout_mask(ls_dtype t, int64_t rows, int64_t per, double p) {
    uint64_t *keys = malloc((size_t)rows * sizeof *keys);
    LS_REQUIRE(keys);
    for (int64_t i = 0; i < rows; i++) keys[i] = ((uint64_t)ls_rng_u32(&R) << 32) | ls_rng_u32(&R);
    const uint32_t thr = (uint32_t)ceil(p * 16777216.0);
    const double keep = 1.0 / (1.0 - p);
    size_t bytes = (size_t)(rows * per) * ls_dtype_size(t);
    void *h = malloc(bytes + 1), *g = malloc(bytes + 1), *d = dev_poison(bytes);
    LS_REQUIRE(h && g);
    LS_REQUIRE_OK(CPU->ops->dropout_mask(CPU->state, t, rows, per, keys, thr, keep, h));
    char what[96];
    snprintf(what, sizeof what, "dropout mask %lld x %lld p=%g", (long long)rows, (long long)per, p);
    if (dev_ok(DEV->ops->dropout_mask(DEV->state, t, rows, per, keys, thr, keep, d), what, t)) {
        dev_get(g, d, bytes);
        double *v = unpack(h, t, rows * per);
        int64_t kept = 0;
        for (int64_t i = 0; i < rows * per; i++) kept += v[i] != 0;
        free(v);
        double frac = (double)kept / (double)(rows * per);
        int ok = memcmp(g, h, bytes) == 0 && fabs(frac - (1 - p)) < 0.05;
        n_cases++;
        printf("%-4s %-52s %-5s %s, %.3f kept\n", ok ? "ok" : "FAIL", what, ls_dtype_name(t),
               memcmp(g, h, bytes) == 0 ? "bit-identical" : "DIFFERS", frac);
        if (!ok) ls_test_failures++;
    }
    dev_free(d);
    free(h), free(g), free(keys);
}

/* ---- optimizers: k tensors of mixed sizes (one past a full launch of chunks), 3 steps; counted:
 * the step count on the device (ops.h's ctl) and the middle step skipped by a device flag, the
 * host's step numbers wrong on purpose (unused). AdamW and counted SGD with a weight decay per
 * tensor (some 0; the tensor that continues into a second launch its own) ---- */
static void case_optim(ls_dtype t, int adamw, int momentum, int counted) {
    enum { K = 30 };
    int64_t n[K];
    for (int i = 0; i < K; i++) n[i] = 1 + (int64_t)ls_rng_below(&R, 5000);
    n[3] = 65536, n[4] = 65537, n[7] = 200003, n[11] = 0;
    /* AdamW: one tensor of more than 320 chunks of 65536, so it continues into a second launch
     * (emulated, in f32 only: the f64 one takes as long and runs the same launches) */
    n[20] = adamw && !counted && (!parity_emulated || t == LS_F32) ? 21 * 1000 * 1000 + 5 : 1000003;
    void *hp[K], *hg[K], *hm[K], *hv[K], *dp[K], *dg[K], *dm[K], *dv[K];
    float wds[K];
    for (int i = 0; i < K; i++) wds[i] = i % 3 == 0 ? 0.0f : 0.01f * (float)(1 + i % 5);
    wds[20] = 0.25f;
    const float *per_tensor = adamw || counted ? wds : NULL;
    size_t es = ls_dtype_size(t);
    for (int i = 0; i < K; i++) {
        double *p = rnd(n[i], 1.0, t), *z = calloc((size_t)n[i] + 1, sizeof(double));
        hp[i] = pack(p, t, n[i]);
        hm[i] = pack(z, t, n[i]);
        hv[i] = pack(z, t, n[i]);
        hg[i] = malloc((size_t)n[i] * es + 1);
        dp[i] = dev_bytes(hp[i], (size_t)n[i] * es); /* (dev_vals of p and z: the same bytes) */
        dm[i] = dev_bytes(hm[i], (size_t)n[i] * es);
        dv[i] = dev_bytes(hv[i], (size_t)n[i] * es);
        dg[i] = dev_alloc((size_t)n[i] * es);
        free(p), free(z);
    }
    char name[64];
    snprintf(name, sizeof name, "%s%s%s",
             adamw      ? "adamw"
             : momentum ? "sgd momentum nesterov wd"
                        : "sgd plain",
             per_tensor ? ", wd per tensor" : "", counted ? ", counted, 2nd skipped" : "");
    double cctl[LS_OPTIM_CTL] = {0}, cskip = 0;
    double *dctl = counted ? dev_bytes(cctl, sizeof cctl) : NULL, *dskip = counted ? dev_bytes(&cskip, 8) : NULL;
    int ok_all = 1;
    for (int step = 0; step < 3; step++) {
        if (counted) {
            cskip = step == 1;
            LS_REQUIRE_OK(ls_allocator_copy(DEV->alloc, dskip, 1, &cskip, 0, sizeof cskip));
        }
        for (int i = 0; i < K; i++) { /* fresh gradients each step */
            double *g = rnd(n[i], 0.5, t);
            pack_into(hg[i], g, t, n[i]);
            if (n[i]) LS_REQUIRE_OK(ls_allocator_copy(DEV->alloc, dg[i], 1, hg[i], 0, (size_t)n[i] * es));
            free(g);
        }
        ls_status s;
        if (adamw) {
            ls_adamw_params hp_ = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, counted ? 7 : step + 1, NULL, NULL, per_tensor};
            if (counted) hp_.ctl = cctl, hp_.skip = &cskip;
            LS_REQUIRE_OK(CPU->ops->adamw_step(CPU->state, t, K, hp, hg, hm, hv, n, &hp_));
            if (counted) hp_.ctl = dctl, hp_.skip = dskip;
            s = DEV->ops->adamw_step(DEV->state, t, K, dp, dg, dm, dv, n, &hp_);
        } else {
            ls_sgd_params hp_ = {0.05f,
                                 momentum ? 0.9f : 0.0f,
                                 momentum ? 0.1f : 0.0f,
                                 0.01f,
                                 momentum,
                                 counted ? 0 : step == 0,
                                 NULL,
                                 NULL,
                                 per_tensor};
            if (counted) hp_.ctl = cctl, hp_.skip = &cskip;
            LS_REQUIRE_OK(CPU->ops->sgd_step(CPU->state, t, K, hp, hg, momentum ? hm : NULL, n, &hp_));
            if (counted) hp_.ctl = dctl, hp_.skip = dskip;
            s = DEV->ops->sgd_step(DEV->state, t, K, dp, dg, momentum ? dm : NULL, n, &hp_);
        }
        if (!dev_ok(s, name, t)) {
            ok_all = 0;
            break;
        }
    }
    if (ok_all) {
        /* compare every tensor's p (and m, v) as one vector */
        int64_t total = 0, most = 1;
        for (int i = 0; i < K; i++) total += n[i], most = n[i] > most ? n[i] : most;
        void *dh = malloc((size_t)most * es); /* a tensor's bytes read from the device */
        double *got = malloc(sizeof(double) * (size_t)total), *ref = malloc(sizeof(double) * (size_t)total);
        LS_REQUIRE(dh && got && ref);
        const char *part[3] = {"p", "m", "v"};
        for (int which = 0; which < 3; which++) {
            if (which == 1 && !adamw && !momentum) break;
            if (which == 2 && !adamw) break;
            int64_t off = 0;
            for (int i = 0; i < K; i++) {
                void *h = which == 0 ? hp[i] : which == 1 ? hm[i] : hv[i];
                void *d = which == 0 ? dp[i] : which == 1 ? dm[i] : dv[i];
                dev_get(dh, d, (size_t)n[i] * es);
                unpack_into(got + off, dh, t, n[i]);
                unpack_into(ref + off, h, t, n[i]);
                off += n[i];
            }
            char what[96];
            snprintf(what, sizeof what, "%s x3 steps, %d tensors: %s", name, K, part[which]);
            check(what, t, 0, got, ref, total);
        }
        free(dh), free(got), free(ref);
    }
    if (counted) { /* two steps taken on both */
        double got = -1;
        dev_get(&got, dctl, sizeof got);
        n_cases++;
        int ok = got == 2 && cctl[0] == 2;
        printf("%-4s %-52s %-5s steps %g on the device, %g on the CPU (2)\n", ok ? "ok" : "FAIL", name,
               ls_dtype_name(t), got, cctl[0]);
        if (!ok) ls_test_failures++;
        dev_free(dctl), dev_free(dskip);
    }
    for (int i = 0; i < K; i++) {
        dev_free(dp[i]), dev_free(dg[i]), dev_free(dm[i]), dev_free(dv[i]);
        free(hp[i]), free(hg[i]), free(hm[i]), free(hv[i]);
    }
}

/* ---- mixed precision on the device (amp_check, amp_update): K tensors (more than one
 * multi-tensor launch's 24; one of a million elements) unscaled (or not) and checked in two calls
 * (the second accumulating into the flag), an inf/NaN in a tensor of the second launch (found)
 * or none, then GradScaler's update; the tensors and the control block against the CPU's, which
 * applies the same entries to host memory. Emulated, the work queued is counted: a few launches,
 * not a few per tensor ---- */
static void case_amp(ls_dtype t, int unscale, int with_inf) {
    enum { K = 30 };
    int64_t n[K], total = 0;
    void *h[K], *d[K];
    for (int i = 0; i < K; i++) {
        n[i] = i == 4 ? 1000003 : i == 9 ? 0 : 1 + (i * 53) % 700;
        double *v = rnd(n[i], 3000.0, t);
        if (with_inf && i == 27) v[11] = with_inf == 1 ? INFINITY : NAN;
        h[i] = pack(v, t, n[i]);
        d[i] = dev_vals(v, t, n[i]);
        total += n[i];
        free(v);
    }
    double cctl[LS_AMP_CTL] = {0};
    cctl[LS_AMP_SCALE] = 1024, cctl[LS_AMP_TRACKER] = 1, cctl[LS_AMP_SKIPPED] = 4;
    cctl[LS_AMP_FOUND] = 1; /* stale: amp_check (not accumulating) replaces it */
    double *dctl = dev_bytes(cctl, sizeof cctl);
    ls_amp_update_params up = {unscale, 2.0, 0.5, 2};
    char what[96];
    snprintf(what, sizeof what, "amp check%s%s, %d tensors", unscale ? " unscale" : "",
             with_inf == 1 ? " inf"
             : with_inf    ? " nan"
                           : "",
             K);
    LS_REQUIRE_OK(CPU->ops->amp_check(CPU->state, t, 2, h, n, unscale, 0, cctl));
    LS_REQUIRE_OK(CPU->ops->amp_check(CPU->state, t, K - 2, h + 2, n + 2, unscale, 1, cctl));
    LS_REQUIRE_OK(CPU->ops->amp_update(CPU->state, cctl, &up));
#ifdef LS_PARITY_EMU
    LS_REQUIRE_OK(ls_ctx_synchronize(DEV));
    unsigned long long q0, q1, done;
    emu_work_counts(&q0, &done);
#endif
    ls_status s = DEV->ops->amp_check(DEV->state, t, 2, d, n, unscale, 0, dctl);
    if (s == LS_OK) s = DEV->ops->amp_check(DEV->state, t, K - 2, d + 2, n + 2, unscale, 1, dctl);
#ifdef LS_PARITY_EMU
    emu_work_counts(&q1, &done);
    n_cases++;
    printf("%-4s %-52s %-5s %llu operations queued (at most 4)\n", q1 - q0 <= 4 ? "ok" : "FAIL", what, ls_dtype_name(t),
           q1 - q0);
    if (q1 - q0 > 4) ls_test_failures++;
#endif
    if (s == LS_OK) s = DEV->ops->amp_update(DEV->state, dctl, &up);
    if (dev_ok(s, what, t)) {
        double *got = malloc(sizeof(double) * (size_t)total), *ref = malloc(sizeof(double) * (size_t)total);
        int64_t off = 0;
        for (int i = 0; i < K; i++) {
            double *g = dev_read(d[i], t, n[i]), *r = unpack(h[i], t, n[i]);
            memcpy(got + off, g, sizeof(double) * (size_t)n[i]);
            memcpy(ref + off, r, sizeof(double) * (size_t)n[i]);
            off += n[i];
            free(g), free(r);
        }
        check(what, t, 0, got, ref, total);
        free(got), free(ref);
        double dv[LS_AMP_CTL];
        dev_get(dv, dctl, sizeof dv);
        /* found: scale 1024 -> 512 (when enabled), skipped 5; clean: the tracker reaches 2, 2048 */
        double want_scale = !unscale ? 1024 : with_inf ? 512 : 2048;
        int ok = 1;
        for (int k = LS_AMP_FOUND; k <= LS_AMP_LAST; k++) ok &= dv[k] == cctl[k];
        ok &= cctl[LS_AMP_FOUND] == (with_inf != 0) && cctl[LS_AMP_SCALE] == want_scale && cctl[LS_AMP_LAST] == 1024 &&
              cctl[LS_AMP_SKIPPED] == 4 + (with_inf != 0);
        n_cases++;
        printf("%-4s %-52s %-5s found %g scale %g tracker %g skipped %g last %g (cpu %g %g %g %g %g)\n",
               ok ? "ok" : "FAIL", what, ls_dtype_name(t), dv[1], dv[2], dv[3], dv[4], dv[5], cctl[1], cctl[2], cctl[3],
               cctl[4], cctl[5]);
        if (!ok) ls_test_failures++;
    }
    for (int i = 0; i < K; i++) dev_free(d[i]), free(h[i]);
    dev_free(dctl);
}

/* ---- gradient-norm clipping (ls_clip_grad_norm): on the device without a wait, against the
 * CPU; K tensors (the last past a run of 64 of one dtype), scaled by the same coefficient;
 * max_norm below the norm (clipped) and above (untouched, bit for bit); an inf in one tensor
 * (NaN norm, nothing scaled); norm NULL (no read) equal bit for bit to the norm read ---- */
static void case_clip(ls_dtype t, double max_frac, int with_inf) {
    enum { K = 66 };
    int64_t n[K];
    double *h[K];
    void *d[K], *d2[K];
    ls_tensor hv[K], dv[K], dv2[K], *hp[K], *dp[K], *dp2[K];
    for (int i = 0; i < K; i++) {
        n[i] = i == 3 ? 4099 : 1 + (i * 37) % 300;
        h[i] = rnd(n[i], 0.5, t);
        if (with_inf && i == 5) h[i][7] = INFINITY;
        d[i] = dev_vals(h[i], t, n[i]);
        d2[i] = dev_vals(h[i], t, n[i]);
    }
    double *orig[K];
    for (int i = 0; i < K; i++) {
        orig[i] = malloc(sizeof(double) * (size_t)n[i]);
        LS_REQUIRE(orig[i]);
        memcpy(orig[i], h[i], sizeof(double) * (size_t)n[i]);
    }
    /* the CPU's reference in doubles, on tensors of dtype t */
    void *hb[K];
    for (int i = 0; i < K; i++) {
        hb[i] = pack(h[i], t, n[i]);
        hv[i] = ls_tensor_view(hb[i], t, ls_device_cpu(), 1, &n[i]);
        dv[i] = ls_tensor_view(d[i], t, DEV->device, 1, &n[i]);
        dv2[i] = ls_tensor_view(d2[i], t, DEV->device, 1, &n[i]);
        hp[i] = &hv[i], dp[i] = &dv[i], dp2[i] = &dv2[i];
    }
    double sq = 0;
    for (int i = 0; i < K; i++)
        for (int64_t j = 0; j < n[i]; j++) sq += h[i][j] * h[i][j];
    double max_norm = sqrt(sq) * max_frac, cpu_norm = 0, dev_norm = 0;
    if (!isfinite(max_norm)) max_norm = 1.0;
    LS_REQUIRE_OK(ls_clip_grad_norm(CPU, K, hp, max_norm, &cpu_norm));
    char what[96];
    snprintf(what, sizeof what, "ls_clip_grad_norm (%d tensors, max %.2g x norm%s)", K, max_frac,
             with_inf ? ", an inf" : "");
    if (!dev_ok(ls_clip_grad_norm(DEV, K, dp, max_norm, &dev_norm), what, t)) goto out;
#ifdef LS_PARITY_EMU
    unsigned long long q0, q1, done;
    emu_work_counts(&q0, &done);
#endif
    LS_REQUIRE_OK(ls_clip_grad_norm(DEV, K, dp2, max_norm, NULL));
#ifdef LS_PARITY_EMU
    /* multi-tensor launches: two runs of one dtype (64 + 2 tensors), 3 + 1 packs of 24 tensors,
     * each a sum and its finish, a coefficient per run and a scale per pack: 14, not 3 per tensor */
    emu_work_counts(&q1, &done);
    n_cases++;
    printf("%-4s %-52s %-5s %llu operations queued without the norm (at most 16)\n", q1 - q0 <= 16 ? "ok" : "FAIL",
           what, ls_dtype_name(t), q1 - q0);
    if (q1 - q0 > 16) ls_test_failures++;
#endif
    int same = 1, untouched = 1;
    double num = 0, den = 0;
    for (int i = 0; i < K; i++) {
        double *g = dev_read(d[i], t, n[i]), *g2 = dev_read(d2[i], t, n[i]), *c = unpack(hb[i], t, n[i]);
        for (int64_t j = 0; j < n[i]; j++) {
            same &= memcmp(&g[j], &g2[j], sizeof(double)) == 0;
            untouched &= memcmp(&g[j], &orig[i][j], sizeof(double)) == 0;
            if (isfinite(c[j])) {
                num = fmax(num, fabs(g[j] - c[j]));
                den = fmax(den, fabs(c[j]));
            } else if (memcmp(&g[j], &c[j], sizeof(double)) != 0) {
                num = INFINITY;
            }
        }
        free(g), free(g2), free(c);
    }
    double err = den > 0 ? num / den : num, tol = tol_for(t, 0);
    double nerr = isnan(cpu_norm) ? (isnan(dev_norm) ? 0 : INFINITY) : fabs(dev_norm - cpu_norm) / cpu_norm;
    /* clipped where max_frac < 1 and nothing is inf; else every gradient as it was */
    int want_untouched = with_inf || max_frac >= 1;
    int ok = err <= tol && nerr <= tol && same && untouched == want_untouched;
    n_cases++;
    note(t, 0, err);
    printf("%-4s %-52s %-5s err %.3g, norm %.9g vs %.9g, %s, norm NULL %s\n", ok ? "ok" : "FAIL", what,
           ls_dtype_name(t), err, dev_norm, cpu_norm, untouched ? "untouched" : "scaled",
           same ? "the same" : "DIFFERENT");
    if (!ok) ls_test_failures++;
out:
    for (int i = 0; i < K; i++) {
        dev_free(d[i]), dev_free(d2[i]);
        free(h[i]), free(orig[i]), free(hb[i]);
    }
}

/* ---- the tensor-level wrappers over device tensors (copies of results to the host) ---- */
static void case_wrappers(void) {
    int64_t B = 50, C = 10;
    double *z = rnd(B * C, 2.0, LS_F32);
    int32_t lab[50];
    for (int64_t i = 0; i < B; i++) lab[i] = (int32_t)ls_rng_below(&R, (uint32_t)C);
    void *hz = pack(z, LS_F32, B * C);
    ls_tensor hzt = ls_tensor_view(hz, LS_F32, ls_device_cpu(), 2, (int64_t[]){B, C});
    ls_tensor hlt = ls_tensor_view(lab, LS_I32, ls_device_cpu(), 1, (int64_t[]){B});
    ls_tensor *zt[2], *lt[2], *pt[2], *lo[2], *pr[2];
    double loss[2];
    int64_t correct[2];
    ls_ctx *ctx[2] = {CPU, DEV};
    for (int i = 0; i < 2; i++) {
        ls_allocator *a = ctx[i]->alloc;
        LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 2, (int64_t[]){B, C}, "logits", &zt[i]));
        LS_REQUIRE_OK(ls_tensor_create(a, LS_I32, 1, (int64_t[]){B}, "labels", &lt[i]));
        LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 2, (int64_t[]){B, C}, "probs", &pt[i]));
        LS_REQUIRE_OK(ls_tensor_create(a, LS_F32, 1, (int64_t[]){B}, "losses", &lo[i]));
        LS_REQUIRE_OK(ls_tensor_create(a, LS_I32, 1, (int64_t[]){B + 1}, "pred", &pr[i]));
        LS_REQUIRE_OK(ls_tensor_copy(a, zt[i], &hzt));
        LS_REQUIRE_OK(ls_tensor_copy(a, lt[i], &hlt));
        LS_REQUIRE_OK(ls_op_xent_forward(ctx[i], zt[i], lt[i], pt[i], lo[i], &loss[i]));
        LS_REQUIRE_OK(ls_op_accuracy(ctx[i], zt[i], lt[i], pr[i], &correct[i]));
    }
    int ok = fabs(loss[0] - loss[1]) <= 1e-5 * fabs(loss[0]) && correct[0] == correct[1];
    n_cases++;
    printf("%-4s %-52s %-5s loss %.7g vs %.7g, correct %lld vs %lld\n", ok ? "ok" : "FAIL",
           "ls_op_xent_forward + ls_op_accuracy (device tensors)", "f32", loss[1], loss[0], (long long)correct[1],
           (long long)correct[0]);
    if (!ok) ls_test_failures++;
    for (int i = 0; i < 2; i++) {
        ls_tensor_destroy(zt[i]), ls_tensor_destroy(lt[i]), ls_tensor_destroy(pt[i]);
        ls_tensor_destroy(lo[i]), ls_tensor_destroy(pr[i]);
    }
    free(z), free(hz);
}

/* 0 when every entry from init to the last (add) is set, else the 1-based index of the first
 * missing one (they are all function pointers, so they are read as an array). */
static int missing_entry(const ls_ops *o) {
    typedef void (*fn)(void);
    size_t n = (offsetof(ls_ops, add) - offsetof(ls_ops, init)) / sizeof(fn) + 1;
    const char *base = (const char *)o + offsetof(ls_ops, init);
    for (size_t i = 0; i < n; i++) {
        fn f;
        memcpy(&f, base + i * sizeof f, sizeof f);
        if (!f) return (int)i + 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    self_mode = argc > 1 && strcmp(argv[1], "--self") == 0;
    /* checked with or without a GPU: the CUDA table has every entry of ops.h */
    const ls_ops *cuda_ops = ls_ops_for(LS_DEVICE_CUDA);
    LS_REQUIRE(cuda_ops != NULL);
    if (missing_entry(cuda_ops)) {
        fprintf(stderr, "the CUDA op table lacks entry %d counting from init (in ops.h order)\n",
                missing_entry(cuda_ops));
        return 1;
    }
    LS_REQUIRE(cuda_ops->gather_rows && cuda_ops->gather_rows_lut && cuda_ops->dropout_mask); /* optional in ops.h */
    char why[256] = "";
    if (!parity_emulated && !self_mode && ls_device_cuda_count(why, sizeof why) == 0)
        LS_SKIP("no usable CUDA device: %s", why);
    ls_device dev = self_mode ? ls_device_cpu() : (ls_device){LS_DEVICE_CUDA, 0};
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &CPU));
    unsetenv("LOCKSTEP_TF32");
    LS_REQUIRE_OK(parity_ctx_create(dev, 2, &DEV));
    setenv("LOCKSTEP_TF32", "1", 1);
    LS_REQUIRE_OK(parity_ctx_create(dev, 3, &DEV_TF32));
    unsetenv("LOCKSTEP_TF32");
    ls_rng_init(&R, 20240611);
    printf("parity: %s against cpu\n", parity_device_name(self_mode));

    for (int i = 0; i < N_FLOATS; i++) {
        ls_dtype t = FLOATS[i];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                case_gemm(DEV, t, 0, ta, tb, 37, 53, 29, 0.5);
                case_gemm(DEV, t, 0, ta, tb, 128, 96, 300, 0.0);
            }
        case_gemm(DEV, t, 0, 0, 0, 9, 7, 0, 0.5); /* k = 0: C = beta C */
        case_linear(DEV, t, 0, 64, 784, 512, 1, 1);
        case_linear(DEV, t, 0, 33, 70, 19, 1, 1);
        case_linear(DEV, t, 0, 33, 70, 19, 0, 0);
        case_linear(DEV, t, 0, 5, 0, 3, 1, 0);   /* in = 0: y = b */
        case_linear(DEV, t, 0, 1, 70, 19, 1, 1); /* a batch of one (a last partial batch) */
        case_linear(DEV, t, 0, 33, 70, 1, 1, 1); /* one output */
        case_offsets(t, 33, 70, 19, 1);
        case_bias(t, 67, 129);
        case_bias(t, 64, 256);
        case_bias(t, 3000, 300);
        case_bias(t, 5, 7);
        for (int a = 0; a < 2; a++) {
            case_act(t, (ls_act)a, 1000003, 0);
            case_act(t, (ls_act)a, 4096, 1);
        }
        case_xent(t, 128, 10, 0, 0.0);
        case_xent(t, 7, 5000, 0, 0.0);
        case_xent(t, 300, 1024, 0, 0.0);
        case_xent(t, 128, 10, 1, 0.0);
        case_xent(t, 9, 3000, 1, 0.0);
        case_xent(t, 128, 10, 0, 0.1); /* label smoothing: a warp a row, and a block a row */
        case_xent(t, 7, 5000, 0, 0.25);
        case_xent(t, 70, 1500, 0, 0.0); /* more rows than a small grid: a block takes several (2 SMs: 32 blocks) */
        case_argmax_nan(t, 200, 10);
        case_argmax_nan(t, 40, 3000);
        case_blas1(t, 1000003);
        case_blas1(t, 17);
        case_dropout_mask(t, 300, 37, 0.3);   /* two launches of keys, a row's last block partial */
        case_dropout_mask(t, 1, 100003, 0.1); /* one stream over a whole tensor (unkeyed) */
        case_dropout_mask(t, 128, 512, 0.5);
        for (int j = 0; j < N_FLOATS; j++) {
            case_convert(t, FLOATS[j], 1001, 0);
            case_convert(t, FLOATS[j], 4096, 1);
        }
    }
    case_zero_many();
    case_convert_many(LS_F16);
    case_convert_many(LS_BF16);
    case_gather(4, 60000, 4096, 784, 0);  /* Fashion-MNIST's shape: 16-byte rows */
    case_gather(4, 1000, 129, 1, 0);      /* labels */
    case_gather(4, 777, 33, 7, 1);        /* 4-byte copies */
    case_gather(1, 300, 65, 13, 3);       /* single bytes */
    case_gather_lut(60000, 4096, 784, 0); /* Fashion-MNIST kept as bytes: 4 bytes to a float4 */
    case_gather_lut(300, 65, 12, 4);      /* float4 at an offset */
    case_gather_lut(300, 65, 12, 2);      /* unaligned: one byte at a time */
    case_gather_lut(777, 33, 7, 1);       /* rows not a multiple of 4 */
    /* TF32: f32 GEMMs on tensor cores */
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) case_gemm(DEV_TF32, LS_F32, 1, ta, tb, 128, 96, 300, 0.5);
    case_linear(DEV_TF32, LS_F32, 1, 64, 784, 512, 1, 1);
    /* optimizers: f32 and f64 */
    for (int i = 0; i < 2; i++) {
        case_optim(FLOATS[i], 0, 0, 0);
        case_optim(FLOATS[i], 0, 1, 0);
        case_optim(FLOATS[i], 1, 0, 0);
    }
    case_optim(LS_F32, 0, 1, 1);
    case_optim(LS_F32, 1, 0, 1);
    for (int i = 0; i < 2; i++) { /* master gradients: f32, f64 */
        case_amp(FLOATS[i], 0, 0);
        case_amp(FLOATS[i], 1, 0);
        case_amp(FLOATS[i], 1, 1);
        case_amp(FLOATS[i], 1, 2);
        case_amp(FLOATS[i], 0, 1);
    }
    for (int i = 0; i < 2; i++) { /* gradients are f32 or f64 (master weights) */
        case_clip(FLOATS[i], 0.3, 0);
        case_clip(FLOATS[i], 2.0, 0);
        case_clip(FLOATS[i], 0.3, 1);
    }
    case_wrappers();
    /* unsupported dtypes: a clear error, not a crash */
    if (!self_mode) {
        void *p = NULL, *g = NULL;
        int64_t n1 = 1;
        ls_sgd_params hp = {0.1f, 0, 0, 0, 0, 1, NULL, NULL, NULL};
        LS_EXPECT_ERR(DEV->ops->sgd_step(DEV->state, LS_BF16, 1, &p, &g, NULL, &n1, &hp), LS_ERR_UNSUPPORTED,
                      "does not compute in bf16");
        LS_EXPECT_ERR(DEV->ops->scale(DEV->state, LS_I32, 1, 2.0, p), LS_ERR_UNSUPPORTED, "does not compute in i32");
        double *ctl = dev_alloc(LS_AMP_CTL * sizeof(double));
        LS_EXPECT_ERR(DEV->ops->amp_check(DEV->state, LS_F16, 1, &p, &n1, 1, 0, ctl), LS_ERR_UNSUPPORTED,
                      "inf/NaN check does not compute in f16");
        dev_free(ctl);
    }
    LS_REQUIRE_OK(ls_ctx_synchronize(DEV));
    printf("parity: %d comparisons, %d skipped, %d failed; worst error f32 %.3g, tf32 %.3g, f16/bf16 %.3g\n", n_cases,
           n_skipped, ls_test_failures, worst_f32, worst_tf32, worst_low);
    parity_ctx_destroy(DEV_TF32);
    parity_ctx_destroy(DEV);
    ls_ctx_destroy(CPU);
    LS_TEST_END();
}
