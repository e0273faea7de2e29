/* test_gradcheck.c: every differentiable CPU op's backward against central finite differences in
 * double precision. The scalar checked is L = sum(r * f(inputs)) for a random r. */
#include <stdlib.h>

#include "gradcheck.h"

static ls_ctx *C;
static ls_rng R;
#define EPS 1e-6
#define TOL 1e-6

/* numeric dL/dx for every element of x, where eval() recomputes L */
typedef double (*eval_fn)(void *user);
static void numeric(ls_tensor *x, eval_fn f, void *user, double *out) {
    double *d = x->data;
    for (int64_t i = 0; i < ls_tensor_numel(x); i++) {
        double keep = d[i];
        d[i] = keep + EPS;
        double up = f(user);
        d[i] = keep - EPS;
        double down = f(user);
        d[i] = keep;
        out[i] = (up - down) / (2 * EPS);
    }
}

typedef struct {
    ls_tensor *x, *w, *b, *y, *r;
} lin_t;
static double lin_eval(void *u) {
    lin_t *l = u;
    LS_REQUIRE_OK(ls_op_linear_forward(C, l->x, l->w, l->b, l->y));
    return gc_dot(l->y, l->r);
}

static void check_linear(int64_t B, int64_t in, int64_t out, int bias) {
    lin_t l;
    l.x = gc_tensor(C, LS_F64, 2, (int64_t[]){B, in});
    l.w = gc_tensor(C, LS_F64, 2, (int64_t[]){out, in});
    l.b = bias ? gc_tensor(C, LS_F64, 1, (int64_t[]){out}) : NULL;
    l.y = gc_tensor(C, LS_F64, 2, (int64_t[]){B, out});
    l.r = gc_tensor(C, LS_F64, 2, (int64_t[]){B, out});
    gc_fill(&R, l.x, 0);
    gc_fill(&R, l.w, 0);
    if (bias) gc_fill(&R, l.b, 0);
    gc_fill(&R, l.r, 0);
    ls_tensor *dx = gc_tensor(C, LS_F64, 2, l.x->shape), *dw = gc_tensor(C, LS_F64, 2, l.w->shape);
    ls_tensor *db = bias ? gc_tensor(C, LS_F64, 1, l.b->shape) : NULL;
    /* gradients accumulate: seed dw/db with 1 and expect analytic + 1 */
    for (int64_t i = 0; i < ls_tensor_numel(dw); i++) ((double *)dw->data)[i] = 1.0;
    LS_REQUIRE_OK(ls_op_linear_backward(C, l.r, l.x, l.w, dx, dw, db));
    for (int64_t i = 0; i < ls_tensor_numel(dw); i++) ((double *)dw->data)[i] -= 1.0;
    double *num = malloc(sizeof(double) * (size_t)(in * (B > out ? B : out) + out + 1));
    numeric(l.x, lin_eval, &l, num);
    LS_EXPECT(gc_relerr(dx->data, num, ls_tensor_numel(dx)) < TOL);
    numeric(l.w, lin_eval, &l, num);
    LS_EXPECT(gc_relerr(dw->data, num, ls_tensor_numel(dw)) < TOL);
    if (bias) {
        numeric(l.b, lin_eval, &l, num);
        LS_EXPECT(gc_relerr(db->data, num, out) < TOL);
    }
    free(num);
    ls_tensor_destroy(l.x);
    ls_tensor_destroy(l.w);
    ls_tensor_destroy(l.b);
    ls_tensor_destroy(l.y);
    ls_tensor_destroy(l.r);
    ls_tensor_destroy(dx);
    ls_tensor_destroy(dw);
    ls_tensor_destroy(db);
}

typedef struct {
    ls_act act;
    ls_tensor *x, *y, *r;
} act_t;
static double act_eval(void *u) {
    act_t *a = u;
    LS_REQUIRE_OK(ls_op_act_forward(C, a->act, a->x, a->y));
    return gc_dot(a->y, a->r);
}

static void check_act(ls_act act) {
    act_t a = {act, gc_tensor(C, LS_F64, 2, (int64_t[]){7, 9}), gc_tensor(C, LS_F64, 2, (int64_t[]){7, 9}),
               gc_tensor(C, LS_F64, 2, (int64_t[]){7, 9})};
    gc_fill(&R, a.x, act == LS_ACT_RELU ? 0.01 : 0); /* keep ReLU inputs off its kink */
    double *xs = a.x->data;
    for (int i = 0; i < 63; i++) xs[i] *= 3; /* GELU over [-3, 3] */
    gc_fill(&R, a.r, 0);
    ls_tensor *dx = gc_tensor(C, LS_F64, 2, a.x->shape);
    LS_REQUIRE_OK(ls_op_act_backward(C, act, a.x, a.r, dx));
    double num[63];
    numeric(a.x, act_eval, &a, num);
    LS_EXPECT(gc_relerr(dx->data, num, 63) < TOL);
    ls_tensor_destroy(a.x);
    ls_tensor_destroy(a.y);
    ls_tensor_destroy(a.r);
    ls_tensor_destroy(dx);
}

typedef struct {
    ls_tensor *z, *labels, *probs, *losses;
    double eps; /* label smoothing */
} xent_t;
static double xent_eval(void *u) {
    xent_t *x = u;
    double mean;
    LS_REQUIRE_OK(ls_op_xent_forward_smooth(C, x->z, x->labels, x->eps, x->probs, x->losses, &mean));
    return mean;
}

static void check_xent(void) {
    int64_t B = 6, K = 5;
    xent_t x = {gc_tensor(C, LS_F64, 2, (int64_t[]){B, K}), gc_tensor(C, LS_I32, 1, (int64_t[]){B}),
                gc_tensor(C, LS_F64, 2, (int64_t[]){B, K}), gc_tensor(C, LS_F64, 1, (int64_t[]){B}), 0.0};
    gc_fill(&R, x.z, 0);
    for (int64_t i = 0; i < B; i++) ((int32_t *)x.labels->data)[i] = (int32_t)(i % K);
    ((double *)x.z->data)[0] = 30; /* a large logit: stability */
    ls_tensor *dz = gc_tensor(C, LS_F64, 2, x.z->shape);
    double num[30];
    /* without and with label smoothing: the gradient against finite differences, and each loss
     * against torch.nn.CrossEntropyLoss(label_smoothing=e)'s definition, (1 - e) nll + e
     * mean_j(-log p_j), in double here */
    const double eps_list[3] = {0.0, 0.2, 0.9};
    for (int k = 0; k < 3; k++) {
        x.eps = eps_list[k];
        xent_eval(&x);
        LS_REQUIRE_OK(ls_op_xent_backward_num(C, x.probs, x.labels, x.eps, 1.0 / (double)B, NULL, dz));
        const double *zz = x.z->data, *ll = x.losses->data;
        for (int64_t r = 0; r < B; r++) {
            const double *zr = zz + r * K;
            double mx = zr[0], se = 0, mean_nlp = 0;
            for (int64_t j = 1; j < K; j++) mx = zr[j] > mx ? zr[j] : mx;
            for (int64_t j = 0; j < K; j++) se += exp(zr[j] - mx);
            const double lse = mx + log(se);
            for (int64_t j = 0; j < K; j++) mean_nlp += (lse - zr[j]) / (double)K;
            const double want = (1 - x.eps) * (lse - zr[((int32_t *)x.labels->data)[r]]) + x.eps * mean_nlp;
            LS_EXPECT_NEAR(ll[r], want, 1e-12 * (1 + fabs(want)));
        }
        numeric(x.z, xent_eval, &x, num); /* (leaves the losses of a perturbed z) */
        LS_EXPECT(gc_relerr(dz->data, num, B * K) < TOL);
    }
    /* logits [2, 0, 0], label 0, smoothing 0.3: ln(e^2 + 2) - 0.7 * 2 - 0.3 * 2 / 3, in f32 */
    {
        ls_tensor *z3 = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 3}), *p3 = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 3});
        ls_tensor *l3 = gc_tensor(C, LS_F32, 1, (int64_t[]){1}), *y3 = gc_tensor(C, LS_I32, 1, (int64_t[]){1});
        ls_tensor *d3 = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 3});
        float *zf = z3->data;
        zf[0] = 2, zf[1] = 0, zf[2] = 0;
        ((int32_t *)y3->data)[0] = 0;
        double mean;
        LS_REQUIRE_OK(ls_op_xent_forward_smooth(C, z3, y3, 0.3, p3, l3, &mean));
        LS_EXPECT_NEAR(mean, log(exp(2.0) + 2) - 1.6, 1e-6);
        /* the gradient is p - target, target (0.7 + 0.1, 0.1, 0.1) */
        LS_REQUIRE_OK(ls_op_xent_backward_num(C, p3, y3, 0.3, 1.0, NULL, d3));
        const float *pf = p3->data, *df = d3->data;
        LS_EXPECT_NEAR(df[0], pf[0] - 0.8, 1e-6);
        LS_EXPECT_NEAR(df[1], pf[1] - 0.1, 1e-6);
        LS_EXPECT_NEAR(df[0] + df[1] + df[2], 0.0, 1e-6);
        LS_EXPECT_ERR(ls_op_xent_forward_smooth(C, z3, y3, 1.0, p3, l3, &mean), LS_ERR_INVALID_ARGUMENT,
                      "softmax cross-entropy: label smoothing 1 is not in [0, 1)");
        LS_EXPECT_ERR(ls_op_xent_forward_smooth(C, z3, y3, -0.1, p3, l3, &mean), LS_ERR_INVALID_ARGUMENT,
                      "label smoothing -0.1 is not in [0, 1)");
        LS_EXPECT_ERR(ls_op_xent_backward_num(C, p3, y3, NAN, 1.0, NULL, d3), LS_ERR_INVALID_ARGUMENT,
                      "softmax cross-entropy backward: label smoothing nan is not in [0, 1)");
        ls_tensor_destroy(z3), ls_tensor_destroy(p3), ls_tensor_destroy(l3), ls_tensor_destroy(y3);
        ls_tensor_destroy(d3);
    }
    /* stability: logits of 1e4 do not overflow (f32) and give the exact loss */
    ls_tensor *z32 = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 3}), *p32 = gc_tensor(C, LS_F32, 2, (int64_t[]){1, 3});
    ls_tensor *l32 = gc_tensor(C, LS_F32, 1, (int64_t[]){1}), *lab = gc_tensor(C, LS_I32, 1, (int64_t[]){1});
    float *z = z32->data;
    z[0] = 1e4f;
    z[1] = 1e4f;
    z[2] = -1e4f;
    double mean;
    LS_REQUIRE_OK(ls_op_xent_forward(C, z32, lab, p32, l32, &mean));
    LS_EXPECT_NEAR(mean, log(2.0), 1e-6);
    ((int32_t *)lab->data)[0] = 3;
    LS_EXPECT_ERR(ls_op_xent_forward(C, z32, lab, p32, l32, &mean), LS_ERR_INVALID_ARGUMENT,
                  "label 3 of sample 0 is outside [0, 3)");
    ls_tensor_destroy(z32);
    ls_tensor_destroy(p32);
    ls_tensor_destroy(l32);
    ls_tensor_destroy(lab);
    ls_tensor_destroy(x.z);
    ls_tensor_destroy(x.labels);
    ls_tensor_destroy(x.probs);
    ls_tensor_destroy(x.losses);
    ls_tensor_destroy(dz);
}

typedef struct {
    ls_tensor *b, *y, *y0, *r;
} bias_t;
static double bias_eval(void *u) {
    bias_t *b = u;
    LS_REQUIRE_OK(ls_tensor_copy(NULL, b->y, b->y0));
    LS_REQUIRE_OK(ls_op_bias_add(C, b->b, b->y));
    return gc_dot(b->y, b->r);
}

static void check_bias(void) {
    bias_t b = {gc_tensor(C, LS_F64, 1, (int64_t[]){5}), gc_tensor(C, LS_F64, 2, (int64_t[]){4, 5}),
                gc_tensor(C, LS_F64, 2, (int64_t[]){4, 5}), gc_tensor(C, LS_F64, 2, (int64_t[]){4, 5})};
    gc_fill(&R, b.b, 0);
    gc_fill(&R, b.y0, 0);
    gc_fill(&R, b.r, 0);
    ls_tensor *db = gc_tensor(C, LS_F64, 1, (int64_t[]){5});
    LS_REQUIRE_OK(ls_op_bias_grad(C, b.r, db));
    double num[5];
    numeric(b.b, bias_eval, &b, num);
    LS_EXPECT(gc_relerr(db->data, num, 5) < TOL);
    ls_tensor_destroy(b.b);
    ls_tensor_destroy(b.y);
    ls_tensor_destroy(b.y0);
    ls_tensor_destroy(b.r);
    ls_tensor_destroy(db);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_rng_init(&R, 1234);
    check_linear(5, 7, 3, 1);
    check_linear(1, 4, 6, 0);
    check_linear(9, 1, 2, 1);
    check_act(LS_ACT_RELU);
    check_act(LS_ACT_GELU);
    check_xent();
    check_bias();
    /* shape errors name the op and both shapes */
    ls_tensor *x = gc_tensor(C, LS_F64, 2, (int64_t[]){2, 3}), *w = gc_tensor(C, LS_F64, 2, (int64_t[]){4, 5});
    ls_tensor *y = gc_tensor(C, LS_F64, 2, (int64_t[]){2, 4}), *wf = gc_tensor(C, LS_F32, 2, (int64_t[]){4, 3});
    LS_EXPECT_ERR(ls_op_linear_forward(C, x, w, NULL, y), LS_ERR_INVALID_ARGUMENT,
                  "linear: weight is [4, 5] f64 cpu, expected [4, 3] f64");
    LS_EXPECT_ERR(ls_op_linear_forward(C, x, wf, NULL, y), LS_ERR_INVALID_ARGUMENT,
                  "weight is [4, 3] f32 cpu, expected [4, 3] f64");
    ls_tensor *h = gc_tensor(C, LS_I32, 2, (int64_t[]){2, 3}), *hw = gc_tensor(C, LS_I32, 2, (int64_t[]){4, 3});
    ls_tensor *hy = gc_tensor(C, LS_I32, 2, (int64_t[]){2, 4});
    LS_EXPECT_ERR(ls_op_linear_forward(C, h, hw, NULL, hy), LS_ERR_UNSUPPORTED, "does not compute in i32");
    ls_tensor_destroy(x);
    ls_tensor_destroy(w);
    ls_tensor_destroy(y);
    ls_tensor_destroy(wf);
    ls_tensor_destroy(h);
    ls_tensor_destroy(hw);
    ls_tensor_destroy(hy);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
