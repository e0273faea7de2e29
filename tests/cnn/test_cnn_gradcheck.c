/* test_cnn_gradcheck.c: the CNN ops' and modules' backward against central finite differences in
 * double precision: conv2d (strides 1 and 2, padding, groups 1 and 2, rectangular kernels, with and
 * without bias, the 1x1 direct path, chunks of several images), max and average pooling, global
 * average pooling, batch norm in training mode (with and without the fused ReLU) and eval mode, the
 * residual add, flatten, BasicBlocks with and without a projection, and a whole small ResNet
 * through the loss. The scalar checked is L = sum(r * f(inputs)) for a random r (the mean
 * cross-entropy for the ResNet). */
#include <stdlib.h>

#include "cnn.h"
#include "kernels/gradcheck.h"

static ls_ctx *C;
static ls_rng R;
#define EPS 1e-6
#define TOL 1e-6

typedef double (*eval_fn)(void *user);

/* max relative error of analytic vs central differences of f over every element of x */
static double check_against(ls_tensor *x, const double *analytic, eval_fn f, void *user) {
    double *d = x->data;
    int64_t n = ls_tensor_numel(x);
    double *num = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        double keep = d[i];
        d[i] = keep + EPS;
        double up = f(user);
        d[i] = keep - EPS;
        double down = f(user);
        d[i] = keep;
        num[i] = (up - down) / (2 * EPS);
    }
    double e = gc_relerr(analytic, num, n);
    free(num);
    return e;
}

static ls_tensor *t4(int64_t a, int64_t b, int64_t c, int64_t d) {
    return gc_tensor(C, LS_F64, 4, (int64_t[]){a, b, c, d});
}
static ls_tensor *t1(int64_t a) { return gc_tensor(C, LS_F64, 1, (int64_t[]){a}); }

/* ---- conv2d ---- */
typedef struct {
    ls_tensor *x, *w, *b, *y, *r;
    int stride, pad, groups;
} conv_t;
static double conv_eval(void *u) {
    conv_t *c = u;
    LS_REQUIRE_OK(ls_op_conv2d_forward(C, c->x, c->w, c->b, c->y, c->stride, c->pad, c->groups));
    return gc_dot(c->y, c->r);
}

static void check_conv(int64_t N, int64_t Cin, int64_t H, int64_t W, int64_t K, int64_t Rk, int64_t Sk, int stride,
                       int pad, int groups, int bias) {
    conv_t c = {t4(N, Cin, H, W), t4(K, Cin / groups, Rk, Sk), bias ? t1(K) : NULL, NULL, NULL, stride, pad, groups};
    int64_t P = ls_conv_out_size(H, Rk, stride, pad), Q = ls_conv_out_size(W, Sk, stride, pad);
    c.y = t4(N, K, P, Q);
    c.r = t4(N, K, P, Q);
    gc_fill(&R, c.x, 0);
    gc_fill(&R, c.w, 0);
    if (bias) gc_fill(&R, c.b, 0);
    gc_fill(&R, c.r, 0);
    ls_tensor *dx = t4(N, Cin, H, W), *dw = gc_tensor(C, LS_F64, 4, c.w->shape), *db = bias ? t1(K) : NULL;
    /* gradients accumulate: seed dw/db with 1 and expect analytic + 1 */
    for (int64_t i = 0; i < ls_tensor_numel(dw); i++) ((double *)dw->data)[i] = 1.0;
    if (bias)
        for (int64_t i = 0; i < K; i++) ((double *)db->data)[i] = 1.0;
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, c.r, c.x, c.w, dx, dw, db, stride, pad, groups));
    for (int64_t i = 0; i < ls_tensor_numel(dw); i++) ((double *)dw->data)[i] -= 1.0;
    if (bias)
        for (int64_t i = 0; i < K; i++) ((double *)db->data)[i] -= 1.0;
    double ex = check_against(c.x, dx->data, conv_eval, &c), ew = check_against(c.w, dw->data, conv_eval, &c);
    double eb = bias ? check_against(c.b, db->data, conv_eval, &c) : 0;
    if (!(ex < TOL && ew < TOL && eb < TOL))
        fprintf(stderr, "conv N%lld C%lld %lldx%lld K%lld %lldx%lld s%d p%d g%d b%d: dx %g dw %g db %g\n", (long long)N,
                (long long)Cin, (long long)H, (long long)W, (long long)K, (long long)Rk, (long long)Sk, stride, pad,
                groups, bias, ex, ew, eb);
    LS_EXPECT(ex < TOL);
    LS_EXPECT(ew < TOL);
    LS_EXPECT(eb < TOL);
    /* dx may be skipped: dw still accumulates the same */
    ls_tensor *dw2 = gc_tensor(C, LS_F64, 4, c.w->shape);
    LS_REQUIRE_OK(ls_op_conv2d_backward(C, c.r, c.x, c.w, NULL, dw2, NULL, stride, pad, groups));
    for (int64_t i = 0; i < ls_tensor_numel(dw); i++)
        LS_EXPECT_NEAR(((double *)dw2->data)[i], ((double *)dw->data)[i], 1e-12);
    ls_tensor *ts[] = {c.x, c.w, c.b, c.y, c.r, dx, dw, db, dw2};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ls_tensor_destroy(ts[i]);
}

/* ---- pooling ---- */
typedef struct {
    ls_tensor *x, *y, *r;
    ls_pool mode;
    int k, s, p;
} pool_t;
static double pool_eval(void *u) {
    pool_t *p = u;
    LS_REQUIRE_OK(ls_op_pool2d_forward(C, p->mode, p->k, p->s, p->p, p->x, p->y));
    return gc_dot(p->y, p->r);
}

static void check_pool(ls_pool mode, int k, int s, int pad) {
    int64_t N = 2, Ch = 3, H = 7, W = 6;
    int64_t P = ls_conv_out_size(H, k, s, pad), Q = ls_conv_out_size(W, k, s, pad);
    pool_t p = {t4(N, Ch, H, W), t4(N, Ch, P, Q), t4(N, Ch, P, Q), mode, k, s, pad};
    gc_fill(&R, p.x, 0);
    gc_fill(&R, p.r, 0);
    ls_tensor *dx = t4(N, Ch, H, W);
    LS_REQUIRE_OK(ls_op_pool2d_backward(C, mode, k, s, pad, p.x, p.r, dx));
    double e = check_against(p.x, dx->data, pool_eval, &p);
    if (!(e < TOL)) fprintf(stderr, "pool mode %d k%d s%d p%d: %g\n", (int)mode, k, s, pad, e);
    LS_EXPECT(e < TOL);
    ls_tensor_destroy(p.x);
    ls_tensor_destroy(p.y);
    ls_tensor_destroy(p.r);
    ls_tensor_destroy(dx);
}

/* ---- global average pooling ---- */
typedef struct {
    ls_tensor *x, *y, *r;
} gap_t;
static double gap_eval(void *u) {
    gap_t *g = u;
    LS_REQUIRE_OK(ls_op_global_avgpool_forward(C, g->x, g->y));
    return gc_dot(g->y, g->r);
}

static void check_gap(void) {
    gap_t g = {t4(3, 4, 5, 3), gc_tensor(C, LS_F64, 2, (int64_t[]){3, 4}), gc_tensor(C, LS_F64, 2, (int64_t[]){3, 4})};
    gc_fill(&R, g.x, 0);
    gc_fill(&R, g.r, 0);
    ls_tensor *dx = t4(3, 4, 5, 3);
    LS_REQUIRE_OK(ls_op_global_avgpool_backward(C, g.r, dx));
    LS_EXPECT(check_against(g.x, dx->data, gap_eval, &g) < TOL);
    ls_tensor_destroy(g.x);
    ls_tensor_destroy(g.y);
    ls_tensor_destroy(g.r);
    ls_tensor_destroy(dx);
}

/* ---- batch norm ---- */
typedef struct {
    ls_tensor *x, *g, *b, *mean, *var, *y, *r;
    int relu, train;
} bn_t;
static double bn_eval(void *u) {
    bn_t *b = u;
    if (b->train) LS_REQUIRE_OK(ls_op_batchnorm_stats(C, b->x, b->mean, b->var));
    LS_REQUIRE_OK(ls_op_batchnorm_forward(C, b->x, b->mean, b->var, b->g, b->b, 1e-5, b->relu, b->y));
    return gc_dot(b->y, b->r);
}

static void check_bn(int relu, int train, int four_d) {
    int64_t N = 4, Ch = 3, H = 3, W = 2;
    bn_t b;
    b.x = four_d ? t4(N, Ch, H, W) : gc_tensor(C, LS_F64, 2, (int64_t[]){N, Ch});
    b.g = t1(Ch);
    b.b = t1(Ch);
    b.mean = t1(Ch);
    b.var = t1(Ch);
    b.y = gc_tensor(C, LS_F64, b.x->ndim, b.x->shape);
    b.r = gc_tensor(C, LS_F64, b.x->ndim, b.x->shape);
    b.relu = relu;
    b.train = train;
    gc_fill(&R, b.x, 0);
    gc_fill(&R, b.g, 0.2);
    gc_fill(&R, b.b, 0);
    gc_fill(&R, b.r, 0);
    if (!train) { /* running statistics: any mean, a positive variance */
        gc_fill(&R, b.mean, 0);
        gc_fill(&R, b.var, 0.1);
        for (int i = 0; i < Ch; i++) ((double *)b.var->data)[i] = fabs(((double *)b.var->data)[i]);
    }
    bn_eval(&b);
    ls_tensor *sdy = t1(Ch), *sdx = t1(Ch), *dx = gc_tensor(C, LS_F64, b.x->ndim, b.x->shape);
    LS_REQUIRE_OK(ls_op_batchnorm_backward_reduce(C, b.r, b.x, b.y, b.mean, b.var, 1e-5, relu, sdy, sdx));
    double count = train ? (double)(ls_tensor_numel(b.x) / Ch) : 0.0;
    LS_REQUIRE_OK(ls_op_batchnorm_backward_dx(C, b.r, b.x, b.y, b.mean, b.var, b.g, sdy, sdx, 1e-5, relu, count, dx));
    double ex = check_against(b.x, dx->data, bn_eval, &b);
    double eg = check_against(b.g, sdx->data, bn_eval, &b); /* dgamma = sum(dy * xhat) */
    double eb = check_against(b.b, sdy->data, bn_eval, &b); /* dbeta = sum(dy) */
    if (!(ex < TOL && eg < TOL && eb < TOL))
        fprintf(stderr, "batch norm relu %d train %d 4d %d: dx %g dgamma %g dbeta %g\n", relu, train, four_d, ex, eg,
                eb);
    LS_EXPECT(ex < TOL);
    LS_EXPECT(eg < TOL);
    LS_EXPECT(eb < TOL);
    ls_tensor *ts[] = {b.x, b.g, b.b, b.mean, b.var, b.y, b.r, sdy, sdx, dx};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) ls_tensor_destroy(ts[i]);
}

/* ---- residual add ---- */
typedef struct {
    ls_tensor *a, *b, *y, *r;
} add_t;
static double add_eval(void *u) {
    add_t *a = u;
    LS_REQUIRE_OK(ls_op_add(C, a->a, a->b, a->y));
    return gc_dot(a->y, a->r);
}

static void check_add(void) {
    add_t a = {t4(2, 3, 2, 2), t4(2, 3, 2, 2), t4(2, 3, 2, 2), t4(2, 3, 2, 2)};
    gc_fill(&R, a.a, 0);
    gc_fill(&R, a.b, 0);
    gc_fill(&R, a.r, 0);
    /* d/da (a + b) . r = r, and the same for b */
    LS_EXPECT(check_against(a.a, a.r->data, add_eval, &a) < TOL);
    LS_EXPECT(check_against(a.b, a.r->data, add_eval, &a) < TOL);
    ls_tensor_destroy(a.a);
    ls_tensor_destroy(a.b);
    ls_tensor_destroy(a.y);
    ls_tensor_destroy(a.r);
}

/* ---- modules: L = sum(r * m(x)) over the input and every parameter ---- */
typedef struct {
    ls_module *m;
    ls_tensor *x, *r;
} mod_t;
static double mod_eval(void *u) {
    mod_t *t = u;
    const ls_tensor *y;
    LS_REQUIRE_OK(ls_module_forward(t->m, t->x, &y));
    return gc_dot(y, t->r);
}

static void check_module(const char *what, ls_module *m, ls_tensor *x) {
    mod_t t = {m, x, NULL};
    const ls_tensor *y, *dx;
    LS_REQUIRE_OK(ls_module_forward(m, x, &y));
    t.r = gc_tensor(C, LS_F64, y->ndim, y->shape);
    gc_fill(&R, t.r, 0);
    LS_REQUIRE_OK(ls_module_zero_grad(m));
    LS_REQUIRE_OK(ls_module_backward(m, t.r, 1, &dx));
    ls_tensor *dxc = gc_tensor(C, LS_F64, x->ndim, x->shape);
    LS_REQUIRE_OK(ls_tensor_copy(NULL, dxc, dx));
    double e = check_against(x, dxc->data, mod_eval, &t), worst = e;
    for (int i = 0; i < ls_module_num_params(m); i++) {
        double ep = check_against(ls_module_param(m, i), ls_module_grad(m, i)->data, mod_eval, &t);
        if (!(ep < TOL)) fprintf(stderr, "%s: parameter %s: %g\n", what, ls_module_param_name(m, i), ep);
        worst = fmax(worst, ep);
    }
    if (!(worst < TOL)) fprintf(stderr, "%s: input %g, worst %g\n", what, e, worst);
    LS_EXPECT(worst < TOL);
    ls_tensor_destroy(t.r);
    ls_tensor_destroy(dxc);
}

static void check_blocks(void) {
    ls_module *m;
    ls_tensor *x = t4(3, 2, 6, 5);
    gc_fill(&R, x, 0);
    LS_REQUIRE_OK(ls_basic_block_create(C, LS_F64, 2, 4, 2, 7, NULL, &m)); /* projection shortcut */
    LS_EXPECT(ls_module_num_params(m) == 6 + 3); /* body conv, bn (2), conv, bn (2) | shortcut conv, bn (2) */
    check_module("basic block, stride 2, projection", m, x);
    ls_module_destroy(m);
    LS_REQUIRE_OK(ls_basic_block_create(C, LS_F64, 2, 2, 1, 8, NULL, &m)); /* identity shortcut */
    check_module("basic block, identity", m, x);
    /* eval mode: running statistics are constants */
    ls_module_set_training(m, 0);
    check_module("basic block, eval mode", m, x);
    ls_module_destroy(m);
    /* pooling and flatten modules in a chain */
    ls_module *mods[4];
    LS_REQUIRE_OK(ls_conv2d_create(C, LS_F64, 2, 3, 3, 1, 1, 1, 1, 9, "", &mods[0]));
    LS_REQUIRE_OK(ls_pool2d_create(C, LS_POOL_MAX, 2, 2, 0, &mods[1]));
    LS_REQUIRE_OK(ls_flatten_create(C, &mods[2]));
    LS_REQUIRE_OK(ls_linear_create(C, LS_F64, 3 * 3 * 2, 4, 1, 10, "", &mods[3]));
    LS_REQUIRE_OK(ls_sequential_create(C, 4, mods, &m));
    check_module("conv, max pool, flatten, linear", m, x);
    ls_module_destroy(m);
    ls_tensor_destroy(x);
}

/* ---- a small ResNet through the mean cross-entropy ---- */
typedef struct {
    ls_module *m;
    ls_xent *loss;
    ls_tensor *x, *labels;
} net_t;
static double net_eval(void *u) {
    net_t *n = u;
    const ls_tensor *logits;
    double loss;
    LS_REQUIRE_OK(ls_module_forward(n->m, n->x, &logits));
    LS_REQUIRE_OK(ls_xent_forward(n->loss, logits, n->labels, &loss));
    return loss;
}

static void check_resnet(void) {
    ls_resnet_config cfg = {LS_F64, LS_F64, 1, 8, 8, 2, {3, 4}, 1, 5, 3, NULL, 0};
    net_t n;
    LS_REQUIRE_OK(ls_resnet_create(C, &cfg, &n.m));
    LS_REQUIRE_OK(ls_xent_create(C, &n.loss));
    int64_t B = 4;
    n.x = gc_tensor(C, LS_F64, 2, (int64_t[]){B, 64}); /* flat images, reshaped by the first layer */
    n.labels = gc_tensor(C, LS_I32, 1, (int64_t[]){B});
    gc_fill(&R, n.x, 0);
    for (int64_t i = 0; i < B; i++) ((int32_t *)n.labels->data)[i] = (int32_t)((i * 3) % 5);
    net_eval(&n);
    const ls_tensor *dl;
    LS_REQUIRE_OK(ls_module_zero_grad(n.m));
    LS_REQUIRE_OK(ls_xent_backward(n.loss, 1.0 / (double)B, &dl));
    LS_REQUIRE_OK(ls_module_backward(n.m, dl, 0, NULL));
    double worst = 0;
    for (int i = 0; i < ls_module_num_params(n.m); i++) {
        double e = check_against(ls_module_param(n.m, i), ls_module_grad(n.m, i)->data, net_eval, &n);
        if (!(e < TOL)) fprintf(stderr, "resnet parameter %s: %g\n", ls_module_param_name(n.m, i), e);
        worst = fmax(worst, e);
    }
    LS_EXPECT(worst < TOL);
    LS_EXPECT(ls_module_num_params(n.m) == 3 + 6 + 9 + 2); /* stem, identity block, projecting block, fc */
    ls_module_destroy(n.m);
    ls_xent_destroy(n.loss);
    ls_tensor_destroy(n.x);
    ls_tensor_destroy(n.labels);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_rng_init(&R, 4321);
    /* N, C, H, W, K, R, S, stride, pad, groups, bias */
    check_conv(2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1);
    check_conv(2, 4, 7, 6, 6, 3, 3, 2, 1, 2, 0);
    check_conv(1, 2, 6, 7, 3, 3, 2, 2, 0, 1, 1);   /* rectangular kernel, no padding */
    check_conv(2, 4, 4, 5, 4, 1, 1, 1, 0, 1, 1);   /* 1x1: the direct path */
    check_conv(2, 4, 4, 5, 2, 1, 1, 1, 0, 2, 0);   /* 1x1, groups */
    check_conv(2, 3, 5, 5, 4, 1, 1, 2, 0, 1, 0);   /* 1x1 stride 2: the projection shortcut */
    check_conv(1, 4, 5, 5, 4, 3, 3, 1, 2, 4, 1);   /* depthwise, padding 2 */
    check_conv(5, 1, 12, 12, 1, 3, 3, 1, 1, 1, 1); /* chunks of 4 images and a last one of 1 */
    check_pool(LS_POOL_MAX, 2, 2, 0);
    check_pool(LS_POOL_MAX, 3, 2, 1);
    check_pool(LS_POOL_AVG, 2, 2, 0);
    check_pool(LS_POOL_AVG, 3, 2, 1);
    check_pool(LS_POOL_AVG, 3, 1, 1);
    check_gap();
    check_bn(0, 1, 1);
    check_bn(1, 1, 1);
    check_bn(0, 0, 1);
    check_bn(1, 0, 1);
    check_bn(0, 1, 0);
    check_add();
    check_blocks();
    check_resnet();
    ls_ctx_destroy(C);
    LS_TEST_END();
}
