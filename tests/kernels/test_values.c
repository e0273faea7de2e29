/* test_values.c: f32 ops against straightforward f64 reference loops: the OpenBLAS linear
 * forward and backward, argmax/accuracy, label-smoothed cross-entropy at extreme logits, the
 * loss scaler's update at f32's limits, SGD (momentum, nesterov, weight decay) and AdamW against
 * torch.optim's formulas written out. */
#include <float.h>
#include <stdlib.h>

#include "gradcheck.h"

static ls_ctx *C;

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_rng r;
    ls_rng_init(&r, 99);
    int64_t B = 33, in = 70, out = 19;
    float *x = malloc(sizeof(float) * B * in), *w = malloc(sizeof(float) * out * in), b[19];
    float *y = malloc(sizeof(float) * B * out), *dy = malloc(sizeof(float) * B * out);
    float *dx = malloc(sizeof(float) * B * in), *dw = calloc((size_t)(out * in), sizeof(float)), db[19] = {0};
    for (int64_t i = 0; i < B * in; i++) x[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < out * in; i++) w[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < out; i++) b[i] = ls_rng_normal(&r);
    for (int64_t i = 0; i < B * out; i++) dy[i] = ls_rng_normal(&r);
    LS_REQUIRE_OK(C->ops->linear_fwd(C->state, LS_F32, B, in, out, x, w, b, y));
    LS_REQUIRE_OK(C->ops->linear_bwd(C->state, LS_F32, B, in, out, dy, x, w, dx, dw, db));
    double worst = 0;
    for (int64_t i = 0; i < B; i++)
        for (int64_t j = 0; j < out; j++) {
            double ref = b[j];
            for (int64_t k = 0; k < in; k++) ref += (double)x[i * in + k] * w[j * in + k];
            worst = fmax(worst, fabs(ref - y[i * out + j]) / fmax(1, fabs(ref)));
        }
    LS_EXPECT(worst < 1e-5);
    worst = 0;
    for (int64_t j = 0; j < out; j++)
        for (int64_t k = 0; k < in; k++) {
            double ref = 0;
            for (int64_t i = 0; i < B; i++) ref += (double)dy[i * out + j] * x[i * in + k];
            worst = fmax(worst, fabs(ref - dw[j * in + k]) / fmax(1, fabs(ref)));
        }
    LS_EXPECT(worst < 1e-5);
    worst = 0;
    for (int64_t i = 0; i < B; i++)
        for (int64_t k = 0; k < in; k++) {
            double ref = 0;
            for (int64_t j = 0; j < out; j++) ref += (double)dy[i * out + j] * w[j * in + k];
            worst = fmax(worst, fabs(ref - dx[i * in + k]) / fmax(1, fabs(ref)));
        }
    LS_EXPECT(worst < 1e-5);
    for (int64_t j = 0; j < out; j++) {
        double ref = 0;
        for (int64_t i = 0; i < B; i++) ref += dy[i * out + j];
        LS_EXPECT_NEAR(db[j], ref, 1e-4);
    }

    /* argmax: first maximum wins ties; counts matches */
    float logits[3 * 4] = {0, 2, 2, 1, 5, -1, 0, 0, -3, -2, -1, -1};
    int32_t labels[3] = {1, 0, 3}, pred[3], correct;
    LS_REQUIRE_OK(C->ops->argmax(C->state, LS_F32, 3, 4, logits, labels, pred, &correct));
    LS_EXPECT(pred[0] == 1 && pred[1] == 0 && pred[2] == 2 && correct == 2);
    /* NaN is the maximum, the first NaN wins (torch.argmax): rows with a NaN after, before and
     * between larger values, two NaNs, and a row of -inf */
    float nan_logits[5 * 4] = {1, 3,   NAN, 2,   NAN, 5,         -1,        0,         0,         NAN,
                               7, NAN, NAN, NAN, 1,   -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t nan_labels[5] = {2, 0, 1, 0, 0}, nan_pred[5];
    LS_REQUIRE_OK(C->ops->argmax(C->state, LS_F32, 5, 4, nan_logits, nan_labels, nan_pred, &correct));
    LS_EXPECT(nan_pred[0] == 2 && nan_pred[1] == 0 && nan_pred[2] == 1 && nan_pred[3] == 0 && nan_pred[4] == 0);
    LS_EXPECT(correct == 5);

    /* label smoothing e: (1 - e) (lse - z_y) + e (lse - mean(z)), softmax's shift invariance kept:
     * logits offset by 1e7 (f32 spacing 1), rows of one huge value (their sum overflows), a -inf
     * logit (torch's loss: inf) and a NaN one (NaN); the reference in double, from z - max */
    for (int wide = 0; wide < 2; wide++) {
        enum { R = 5, K = 10 };
        const double big = wide ? 0.3 * DBL_MAX : 0.3 * FLT_MAX, e = 0.1;
        double z[R * K];
        int32_t lab[R] = {3, 0, 7, 3, 3};
        for (int j = 0; j < K; j++) {
            z[0 * K + j] = 1e7 + j;
            z[1 * K + j] = big;
            z[2 * K + j] = -big;
            z[3 * K + j] = j;
            z[4 * K + j] = j;
        }
        z[3 * K + 5] = -INFINITY;
        z[4 * K + 8] = NAN;
        const size_t es = wide ? sizeof(double) : sizeof(float);
        void *zt = malloc(es * R * K), *pt = malloc(es * R * K), *lt = malloc(es * R);
        LS_REQUIRE(zt && pt && lt);
        for (int i = 0; i < R * K; i++)
            if (wide)
                ((double *)zt)[i] = z[i];
            else
                ((float *)zt)[i] = (float)z[i];
        LS_REQUIRE_OK(C->ops->xent_fwd(C->state, wide ? LS_F64 : LS_F32, R, K, zt, lab, e, pt, lt));
        for (int row = 0; row < R; row++) {
            const double *zr = z + row * K;
            double mx = zr[0], s = 0, zs = 0;
            for (int j = 1; j < K; j++) mx = zr[j] > mx ? zr[j] : mx;
            for (int j = 0; j < K; j++) {
                s += exp(zr[j] - mx);
                zs += zr[j] - mx;
            }
            double want = (1 - e) * (log(s) + (mx - zr[lab[row]])) + e * (log(s) - zs / K);
            double got = wide ? ((double *)lt)[row] : ((float *)lt)[row];
            if (row == 4) {
                LS_EXPECT(isnan(got));
            } else if (isinf(want)) {
                LS_EXPECT(got == want);
            } else {
                if (!(fabs(got - want) <= 1e-5 * fmax(1, fabs(want))))
                    fprintf(stderr, "smoothed loss %s row %d: %.9g, wanted %.9g\n", wide ? "f64" : "f32", row, got,
                            want);
                LS_EXPECT(fabs(got - want) <= 1e-5 * fmax(1, fabs(want)));
            }
        }
        free(zt), free(pt), free(lt);
    }

    /* the loss scaler's update at f32's limits (GradScaler's _amp_update_scale_: a growth whose
     * result is not finite in f32 is not taken, the tracker restarts all the same; a backoff stops
     * at LS_AMP_MIN_SCALE) */
    {
        ls_amp_update_params up = {1, 2.0, 0.5, 3};
        double ctl[LS_AMP_CTL] = {0};
        ctl[LS_AMP_SCALE] = ldexp(1, 126);
        ctl[LS_AMP_TRACKER] = 2;
        LS_REQUIRE_OK(C->ops->amp_update(C->state, ctl, &up));
        LS_EXPECT(ctl[LS_AMP_SCALE] == ldexp(1, 127) && ctl[LS_AMP_TRACKER] == 0);
        ctl[LS_AMP_TRACKER] = 2;
        LS_REQUIRE_OK(C->ops->amp_update(C->state, ctl, &up)); /* 2^128 is inf in f32: kept */
        LS_EXPECT(ctl[LS_AMP_SCALE] == ldexp(1, 127) && ctl[LS_AMP_TRACKER] == 0 && ctl[LS_AMP_LAST] == ldexp(1, 127));
        ctl[LS_AMP_SCALE] = FLT_MAX;
        ctl[LS_AMP_TRACKER] = 2;
        LS_REQUIRE_OK(C->ops->amp_update(C->state, ctl, &up));
        LS_EXPECT(ctl[LS_AMP_SCALE] == FLT_MAX && ctl[LS_AMP_TRACKER] == 0);
        ctl[LS_AMP_FOUND] = 1;
        LS_REQUIRE_OK(C->ops->amp_update(C->state, ctl, &up));
        LS_EXPECT(ctl[LS_AMP_SCALE] == FLT_MAX / 2 && ctl[LS_AMP_SKIPPED] == 1);
        ctl[LS_AMP_SCALE] = ldexp(1, -125);
        LS_REQUIRE_OK(C->ops->amp_update(C->state, ctl, &up));
        LS_REQUIRE_OK(C->ops->amp_update(C->state, ctl, &up));
        LS_EXPECT(ctl[LS_AMP_SCALE] == LS_AMP_MIN_SCALE && ctl[LS_AMP_SKIPPED] == 3);
    }

    /* SGD with momentum, dampening 0, weight decay, over 3 steps against the formula */
    double p = 1.0, m = 0, g[3] = {0.5, -0.25, 1.0};
    float pf = 1.0f, mf = 0, gf;
    for (int s = 0; s < 3; s++) {
        double d = g[s] + 0.01 * p;
        m = s == 0 ? d : 0.9 * m + d;
        p -= 0.1 * (d + 0.9 * m); /* nesterov */
        gf = (float)g[s];
        void *pp = &pf, *gp = &gf, *mp = &mf;
        int64_t n = 1;
        ls_sgd_params hp = {0.1f, 0.9f, 0.0f, 0.01f, 1, s == 0, NULL, NULL, NULL};
        LS_REQUIRE_OK(C->ops->sgd_step(C->state, LS_F32, 1, &pp, &gp, &mp, &n, &hp));
    }
    LS_EXPECT_NEAR(pf, p, 1e-6);
    /* AdamW over 3 steps */
    double ap = 0.5, am = 0, av = 0;
    float apf = 0.5f, amf = 0, avf = 0;
    for (int s = 1; s <= 3; s++) {
        double gg = g[s - 1];
        ap *= 1 - 1e-2 * 0.1;
        am = 0.9 * am + 0.1 * gg;
        av = 0.999 * av + 0.001 * gg * gg;
        double mh = am / (1 - pow(0.9, s)), vh = av / (1 - pow(0.999, s));
        ap -= 1e-2 * mh / (sqrt(vh) + 1e-8);
        gf = (float)gg;
        void *pp = &apf, *gp = &gf, *mp = &amf, *vp = &avf;
        int64_t n = 1;
        ls_adamw_params hp = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, s, NULL, NULL, NULL};
        LS_REQUIRE_OK(C->ops->adamw_step(C->state, LS_F32, 1, &pp, &gp, &mp, &vp, &n, &hp));
    }
    LS_EXPECT_NEAR(apf, ap, 1e-6);
    free(x);
    free(w);
    free(y);
    free(dy);
    free(dx);
    free(dw);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
