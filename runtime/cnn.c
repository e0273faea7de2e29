/* cnn.c: Conv2d, BatchNorm2d, pooling, global average pooling, reshape/flatten, cast, the residual
 * block and the ResNet builder. Each kind embeds struct ls_module (nn_impl.h) as its first member
 * and keeps its large activations in y, dx and mask, which Checkpoint releases; BatchNorm's running
 * statistics live in its own struct and are reached through ls_cnn_buffer. */
#include "cnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp.h"
#include "nn_impl.h"

/* ---- shared helpers (nn.c's are in nn_impl.h) ---- */
static ls_status cnn_alloc(ls_ctx *ctx, const ls_module_vt *vt, int n_params, size_t size, ls_module **out) {
    LS_CHECK(ls_module_alloc(ctx, vt, n_params, size, out));
    (*out)->training = 1;
    return LS_OK;
}

/* *t = a view (a malloc'd descriptor, no data of its own). */
static ls_status set_view(ls_tensor **t, void *data, ls_dtype dtype, ls_device dev, int ndim, const int64_t *shape) {
    if (*t && (*t)->alloc) {
        ls_tensor_destroy(*t);
        *t = NULL;
    }
    if (!*t) {
        *t = malloc(sizeof **t);
        if (!*t) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a tensor view");
    }
    **t = ls_tensor_view(data, dtype, dev, ndim, shape);
    return LS_OK;
}

static int is_lowp(ls_dtype t) { return t == LS_F16 || t == LS_BF16; }
static ls_dtype master_of(ls_dtype t) { return is_lowp(t) ? LS_F32 : t; }

/* Fill a parameter or buffer from a host function of the element index. */
static ls_status fill_host(ls_ctx *ctx, ls_tensor *t, double value, double bound, ls_rng *rng) {
    int64_t n = ls_tensor_numel(t);
    if (t->dtype != LS_F32 && t->dtype != LS_F64)
        return ls_error(LS_ERR_UNSUPPORTED, "parameters must be f32 or f64, got %s", ls_dtype_name(t->dtype));
    void *h = malloc((size_t)n * ls_dtype_size(t->dtype) + 1);
    if (!h) return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory to initialize %lld elements", (long long)n);
    for (int64_t j = 0; j < n; j++) {
        double v = rng ? (2.0 * (double)ls_rng_uniform(rng) - 1.0) * bound : value;
        if (t->dtype == LS_F64)
            ((double *)h)[j] = v;
        else
            ((float *)h)[j] = (float)v;
    }
    ls_tensor ht = ls_tensor_view(h, t->dtype, ls_device_cpu(), t->ndim, t->shape);
    ls_status s = ls_tensor_copy(ctx->alloc, t, &ht);
    free(h);
    return s;
}

/* Parameter i of m: tensor, zeroed gradient, name "<name>.<suffix>". */
static ls_status new_param(ls_module *m, int i, ls_dtype dtype, int ndim, const int64_t *shape, const char *name,
                           const char *suffix, const char *what) {
    if ((size_t)snprintf(m->names[i], LS_NAME_MAX, "%s%s%s", name ? name : "", name && *name ? "." : "", suffix) >=
        LS_NAME_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s '%s.%s': the name is longer than the %d bytes a parameter's can be", what, name, suffix,
                        LS_NAME_MAX - 1);
    LS_CHECK(ls_tensor_create(m->ctx->alloc, dtype, ndim, shape, what, &m->params[i]));
    LS_CHECK(ls_tensor_create(m->ctx->alloc, dtype, ndim, shape, "parameter gradient", &m->grads[i]));
    return ls_tensor_zero(m->grads[i]);
}

static void free_params(ls_module *m) {
    for (int i = 0; i < m->n_params; i++) {
        ls_tensor_destroy(m->params[i]);
        ls_tensor_destroy(m->grads[i]);
        m->params[i] = m->grads[i] = NULL;
    }
    for (int i = 0; i < 2; i++) {
        ls_tensor_destroy(m->lowp[i]);
        m->lowp[i] = NULL;
    }
    ls_tensor_destroy(m->mask);
    m->mask = NULL;
}

static ls_status no_input(const ls_module *m) {
    return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: backward called before forward", m->vt->kind);
}

/* ---- Conv2d ---- */
typedef struct conv_mod {
    ls_module base;
    int stride, pad, groups;
} conv_mod;

static ls_status conv_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    conv_mod *c = (conv_mod *)m;
    const ls_tensor *w, *b;
    char a[64];
    int64_t in = m->params[0]->shape[1] * c->groups;
    if (x->ndim != 4 || x->shape[1] != in)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: input is %s, expected [batch, %lld, H, W]", m->names[0],
                        ls_tensor_describe(x, a, 64), (long long)in);
    LS_CHECK(ls_module_compute_weights(m, x->dtype, &w, &b));
    int64_t P = ls_conv_out_size(x->shape[2], w->shape[2], c->stride, c->pad);
    int64_t Q = ls_conv_out_size(x->shape[3], w->shape[3], c->stride, c->pad);
    if (P < 1 || Q < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the input %s is smaller than the kernel", m->names[0],
                        ls_tensor_describe(x, a, 64));
    LS_CHECK(
        ls_module_ensure(m->ctx, &m->y, x->dtype, 4, (int64_t[]){x->shape[0], w->shape[0], P, Q}, "conv2d output"));
    LS_CHECK(ls_op_conv2d_forward(m->ctx, x, w, b, m->y, c->stride, c->pad, c->groups));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status conv_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    conv_mod *c = (conv_mod *)m;
    if (!m->x) return no_input(m);
    if (want_dx) LS_CHECK(ls_module_ensure(m->ctx, &m->dx, m->x->dtype, 4, m->x->shape, "conv2d input gradient"));
    const ls_tensor *w = m->x->dtype == m->params[0]->dtype ? m->params[0] : m->lowp[0];
    /* a frozen parameter's gradient is not computed (ls_module_set_requires_grad) */
    ls_tensor *dw = m->no_grad[0] ? NULL : m->grads[0];
    ls_tensor *db = m->n_params > 1 && !m->no_grad[1] ? m->grads[1] : NULL;
    if (want_dx || dw || db)
        LS_CHECK(
            ls_op_conv2d_backward(m->ctx, dy, m->x, w, want_dx ? m->dx : NULL, dw, db, c->stride, c->pad, c->groups));
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

static void conv_describe(const ls_module *m, char *buf, size_t n) {
    const conv_mod *c = (const conv_mod *)m;
    snprintf(buf, n, "Conv2d(stride=%d, padding=%d, groups=%d)", c->stride, c->pad, c->groups);
}

static const ls_module_vt conv_vt = {"Conv2d", conv_forward, conv_backward, free_params, conv_describe, NULL};

ls_status ls_conv2d_create(ls_ctx *ctx, ls_dtype dtype, int64_t in, int64_t out, int kernel, int stride, int pad,
                           int groups, int bias, uint64_t seed, const char *name, ls_module **out_m) {
    LS_CHECK_ARG(out_m, "ls_conv2d_create: out is NULL");
    /* the one value that is wrong, named (it listed every rule with every value) */
    const char *sp = name && *name ? " " : "", *nm = name ? name : "";
    const struct {
        const char *what;
        long long v;
        long long min;
    } lim[] = {{"input channels", in, 1}, {"output channels", out, 1}, {"kernel", kernel, 1},
               {"stride", stride, 1},     {"padding", pad, 0},         {"groups", groups, 1}};
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].v < lim[i].min)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "conv2d%s%s: %s is %lld; it must be >= %lld", sp, nm, lim[i].what,
                            lim[i].v, lim[i].min);
    if (in % groups || out % groups)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "conv2d%s%s: %s channels (%lld) are not divisible by groups (%d); both channel counts must be",
                        sp, nm, in % groups ? "input" : "output", (long long)(in % groups ? in : out), groups);
    if (dtype != LS_F32 && dtype != LS_F64)
        return ls_error(LS_ERR_UNSUPPORTED, "conv2d%s%s: parameters must be f32 or f64, not %s",
                        name && *name ? " " : "", name ? name : "", ls_dtype_name(dtype));
    ls_module *m = NULL;
    LS_CHECK(cnn_alloc(ctx, &conv_vt, bias ? 2 : 1, sizeof(conv_mod), &m));
    conv_mod *c = (conv_mod *)m;
    c->stride = stride;
    c->pad = pad;
    c->groups = groups;
    ls_status s =
        new_param(m, 0, dtype, 4, (int64_t[]){out, in / groups, kernel, kernel}, name, "weight", "conv2d weight");
    if (s == LS_OK && bias) s = new_param(m, 1, dtype, 1, (int64_t[]){out}, name, "bias", "conv2d bias");
    /* torch.nn.Conv2d's init: kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)); same for bias */
    ls_rng rng;
    ls_rng_init(&rng, seed);
    double bound = 1.0 / sqrt((double)(in / groups * kernel * kernel));
    for (int i = 0; i < m->n_params && s == LS_OK; i++) s = fill_host(ctx, m->params[i], 0, bound, &rng);
    if (s != LS_OK) {
        ls_module_destroy(m);
        return s;
    }
    *out_m = m;
    return LS_OK;
}

/* ---- BatchNorm2d ---- */
typedef struct bn_mod {
    ls_module base;
    ls_batchnorm_config cfg;
    ls_tensor *running_mean, *running_var; /* buffers [C] */
    ls_tensor *mean, *var;                 /* the statistics the last forward normalized with (batch) */
    ls_tensor *sum_dy, *sum_dy_xhat;       /* backward reductions [C] */
    int used_batch_stats;                  /* the last forward was in training mode */
    int local;                             /* SyncBatchNorm held to this rank's statistics (a trial) */
    int folded;                            /* running statistics updated since the last backward */
    double count;                          /* samples per channel behind the batch statistics */
    double *host;                          /* SyncBatchNorm: 3C + 1 doubles, then C floats, for the
                                            * all-reduces' host round trip (allocated with the module:
                                            * none per step, and no rank fails to allocate it midway
                                            * while the others wait in the all-reduce) */
} bn_mod;

static void bn_destroy(ls_module *m) {
    bn_mod *b = (bn_mod *)m;
    ls_tensor_destroy(b->running_mean);
    ls_tensor_destroy(b->running_var);
    ls_tensor_destroy(b->mean);
    ls_tensor_destroy(b->var);
    ls_tensor_destroy(b->sum_dy);
    ls_tensor_destroy(b->sum_dy_xhat);
    free(b->host);
    free_params(m);
}

static int synced(const bn_mod *b) { return b->cfg.sync && !b->local && ls_comm_world(b->cfg.sync) > 1; }

/* Host round trip of k per-channel tensors of C elements as doubles (f: C floats of scratch). */
static ls_status to_host(ls_ctx *ctx, int k, ls_tensor *const *t, double *h, float *f) {
    int64_t C = t[0]->shape[0];
    for (int i = 0; i < k; i++) {
        if (t[i]->dtype == LS_F64) {
            ls_tensor v = ls_tensor_view(h + i * C, LS_F64, ls_device_cpu(), 1, &C);
            LS_CHECK(ls_tensor_copy(ctx->alloc, &v, t[i]));
        } else {
            ls_tensor v = ls_tensor_view(f, LS_F32, ls_device_cpu(), 1, &C);
            LS_CHECK(ls_tensor_copy(ctx->alloc, &v, t[i]));
            for (int64_t j = 0; j < C; j++) h[i * C + j] = f[j];
        }
    }
    return LS_OK;
}

static ls_status from_host(ls_ctx *ctx, int k, ls_tensor *const *t, const double *h, float *f) {
    int64_t C = t[0]->shape[0];
    for (int i = 0; i < k; i++) {
        if (t[i]->dtype == LS_F64) {
            ls_tensor v = ls_tensor_view((void *)(h + i * C), LS_F64, ls_device_cpu(), 1, &C);
            LS_CHECK(ls_tensor_copy(ctx->alloc, t[i], &v));
        } else {
            for (int64_t j = 0; j < C; j++) f[j] = (float)h[i * C + j];
            ls_tensor v = ls_tensor_view(f, LS_F32, ls_device_cpu(), 1, &C);
            LS_CHECK(ls_tensor_copy(ctx->alloc, t[i], &v));
        }
    }
    return LS_OK;
}

/* SyncBatchNorm: combine every rank's (count, mean, biased var) into the global ones, in double. */
static ls_status bn_sync_stats(bn_mod *b) {
    ls_module *m = &b->base;
    int64_t C = b->mean->shape[0];
    double *h = b->host;
    float *f = (float *)(h + 3 * C + 1);
    ls_tensor *mv[2] = {b->mean, b->var};
    ls_status s = to_host(m->ctx, 2, mv, h, f);
    double n = b->count;
    if (s == LS_OK) {
        for (int64_t c = 0; c < C; c++) {
            double mu = h[c], var = h[C + c];
            h[c] = n * mu;
            h[C + c] = n * (var + mu * mu);
        }
        h[2 * C] = n;
        s = ls_comm_allreduce_host(b->cfg.sync, h, 2 * C + 1, LS_F64, LS_REDUCE_SUM);
    }
    if (s == LS_OK) {
        double total = h[2 * C];
        for (int64_t c = 0; c < C; c++) {
            double mu = total > 0 ? h[c] / total : 0, var = total > 0 ? h[C + c] / total - mu * mu : 0;
            h[c] = mu;
            h[C + c] = var > 0 ? var : 0;
        }
        b->count = total;
        s = from_host(m->ctx, 2, mv, h, f);
    }
    return s;
}

static ls_status bn_sync_sums(bn_mod *b) {
    int64_t C = b->sum_dy->shape[0];
    double *h = b->host;
    float *f = (float *)(h + 3 * C + 1);
    ls_tensor *t[2] = {b->sum_dy, b->sum_dy_xhat};
    ls_status s = to_host(b->base.ctx, 2, t, h, f);
    if (s == LS_OK) s = ls_comm_allreduce_host(b->cfg.sync, h, 2 * C, LS_F64, LS_REDUCE_SUM);
    if (s == LS_OK) s = from_host(b->base.ctx, 2, t, h, f);
    return s;
}

static ls_status bn_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    bn_mod *b = (bn_mod *)m;
    ls_ctx *ctx = m->ctx;
    char a[64];
    const ls_tensor *g = m->params[0], *be = m->params[1];
    int64_t C = g->shape[0];
    if ((x->ndim != 4 && x->ndim != 2) || x->shape[1] != C)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: input is %s, expected [batch, %lld, H, W] or [batch, %lld]",
                        m->names[0], ls_tensor_describe(x, a, 64), (long long)C, (long long)C);
    if (master_of(x->dtype) != g->dtype)
        return ls_error(LS_ERR_UNSUPPORTED, "%s: %s input with %s parameters", m->names[0], ls_dtype_name(x->dtype),
                        ls_dtype_name(g->dtype));
    LS_CHECK(ls_module_ensure(ctx, &m->y, x->dtype, x->ndim, x->shape, "batch-norm output"));
    if (!m->training) {
        b->used_batch_stats = 0;
        LS_CHECK(
            ls_op_batchnorm_forward(ctx, x, b->running_mean, b->running_var, g, be, b->cfg.eps, b->cfg.relu, m->y));
        m->x = x;
        *y = m->y;
        return LS_OK;
    }
    LS_CHECK(ls_module_ensure(ctx, &b->mean, g->dtype, 1, &C, "batch mean"));
    LS_CHECK(ls_module_ensure(ctx, &b->var, g->dtype, 1, &C, "batch variance"));
    LS_CHECK(ls_op_batchnorm_stats(ctx, x, b->mean, b->var));
    b->count = (double)(ls_tensor_numel(x) / C);
    if (synced(b)) LS_CHECK(bn_sync_stats(b));
    if (b->count < 2)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: training needs more than one value per channel, got %g "
                        "(input %s)",
                        m->names[0], b->count, ls_tensor_describe(x, a, 64));
    if (!b->folded) { /* PyTorch: running = (1 - momentum) running + momentum * batch (unbiased variance) */
        double mom = b->cfg.momentum, unbias = b->count / (b->count - 1);
        LS_CHECK(ctx->ops->bn_update(ctx->state, g->dtype, C, 1.0 - mom, mom, b->mean->data, b->running_mean->data,
                                     mom * unbias, b->var->data, b->running_var->data));
        b->folded = 1;
    }
    b->used_batch_stats = 1;
    LS_CHECK(ls_op_batchnorm_forward(ctx, x, b->mean, b->var, g, be, b->cfg.eps, b->cfg.relu, m->y));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status bn_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    bn_mod *b = (bn_mod *)m;
    ls_ctx *ctx = m->ctx;
    if (!m->x) return no_input(m);
    b->folded = 0;
    const ls_tensor *g = m->params[0];
    int64_t C = g->shape[0];
    /* ls_module_set_requires_grad; with neither, and no input gradient wanted, ls_module_backward
     * comes to bn_backward_frozen */
    const int dgamma = !m->no_grad[0], dbeta = !m->no_grad[1];
    const ls_tensor *mean = b->used_batch_stats ? b->mean : b->running_mean;
    const ls_tensor *var = b->used_batch_stats ? b->var : b->running_var;
    LS_CHECK(ls_module_ensure(ctx, &b->sum_dy, g->dtype, 1, &C, "batch-norm gradient sums"));
    LS_CHECK(ls_module_ensure(ctx, &b->sum_dy_xhat, g->dtype, 1, &C, "batch-norm gradient sums"));
    LS_CHECK(ls_op_batchnorm_backward_reduce(ctx, dy, m->x, m->y, mean, var, b->cfg.eps, b->cfg.relu, b->sum_dy,
                                             b->sum_dy_xhat));
    /* parameter gradients from this rank's samples (the reducer sums them across ranks); a frozen
     * one's left as it is */
    if (dgamma && dbeta)
        LS_CHECK(ctx->ops->bn_update(ctx->state, g->dtype, C, 1.0, 1.0, b->sum_dy_xhat->data, m->grads[0]->data, 1.0,
                                     b->sum_dy->data, m->grads[1]->data));
    else if (dgamma || dbeta)
        LS_CHECK(ctx->ops->axpy(ctx->state, g->dtype, C, 1.0, (dgamma ? b->sum_dy_xhat : b->sum_dy)->data,
                                m->grads[dgamma ? 0 : 1]->data));
    if (want_dx) {
        if (b->used_batch_stats && synced(b)) LS_CHECK(bn_sync_sums(b));
        LS_CHECK(ls_module_ensure(ctx, &m->dx, m->x->dtype, m->x->ndim, m->x->shape, "batch-norm input gradient"));
        LS_CHECK(ls_op_batchnorm_backward_dx(ctx, dy, m->x, m->y, mean, var, g, b->sum_dy, b->sum_dy_xhat, b->cfg.eps,
                                             b->cfg.relu, b->used_batch_stats ? b->count : 0.0, m->dx));
    }
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

/* in the frozen prefix: the next forward in training mode folds its batch's statistics into the
 * running ones (a recomputed forward, before this, does not fold them twice) */
static ls_status bn_backward_frozen(ls_module *m) {
    ((bn_mod *)m)->folded = 0;
    return LS_OK;
}

/* v with the fewest significant digits that read back to it */
static void shortest_number(char *buf, size_t n, double v) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) return;
    }
}

static void bn_describe(const ls_module *m, char *buf, size_t n) {
    const bn_mod *b = (const bn_mod *)m;
    char eps[32], momentum[32];
    shortest_number(eps, sizeof eps, b->cfg.eps);
    shortest_number(momentum, sizeof momentum, b->cfg.momentum);
    snprintf(buf, n, "BatchNorm2d(eps=%s, momentum=%s%s%s)", eps, momentum, b->cfg.relu ? ", relu" : "",
             b->cfg.sync ? ", sync" : "");
}

static const ls_module_vt bn_vt = {"BatchNorm2d", bn_forward, bn_backward, bn_destroy, bn_describe, bn_backward_frozen};

ls_batchnorm_config ls_batchnorm_defaults(void) {
    ls_batchnorm_config c = {1e-5, 0.1, 0, NULL};
    return c;
}

ls_status ls_batchnorm2d_create(ls_ctx *ctx, ls_dtype dtype, int64_t channels, const ls_batchnorm_config *cfg,
                                const char *name, ls_module **out_m) {
    LS_CHECK_ARG(out_m, "ls_batchnorm2d_create: out is NULL");
    ls_batchnorm_config c = cfg ? *cfg : ls_batchnorm_defaults();
    /* the one value that is wrong, named (it listed every rule with every value) */
    const char *sp = name && *name ? " " : "", *nm = name ? name : "";
    if (channels < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch norm%s%s: channels is %lld; it must be >= 1", sp, nm,
                        (long long)channels);
    if (!(c.eps > 0))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch norm%s%s: eps is %g; it must be > 0", sp, nm, c.eps);
    if (!(c.momentum >= 0 && c.momentum <= 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch norm%s%s: momentum is %g; it must be in [0, 1]", sp, nm,
                        c.momentum);
    if (dtype != LS_F32 && dtype != LS_F64)
        return ls_error(LS_ERR_UNSUPPORTED, "batch norm%s%s: parameters must be f32 or f64, not %s",
                        name && *name ? " " : "", name ? name : "", ls_dtype_name(dtype));
    ls_module *m = NULL;
    LS_CHECK(cnn_alloc(ctx, &bn_vt, 2, sizeof(bn_mod), &m));
    bn_mod *b = (bn_mod *)m;
    b->cfg = c;
    int64_t shape[1] = {channels};
    ls_status s = new_param(m, 0, dtype, 1, shape, name, "weight", "batch-norm weight");
    if (s == LS_OK) s = new_param(m, 1, dtype, 1, shape, name, "bias", "batch-norm bias");
    if (s == LS_OK) s = fill_host(ctx, m->params[0], 1.0, 0, NULL);
    if (s == LS_OK) s = fill_host(ctx, m->params[1], 0.0, 0, NULL);
    if (s == LS_OK) s = ls_tensor_create(ctx->alloc, dtype, 1, shape, "batch-norm running mean", &b->running_mean);
    if (s == LS_OK) s = ls_tensor_create(ctx->alloc, dtype, 1, shape, "batch-norm running variance", &b->running_var);
    if (s == LS_OK) s = fill_host(ctx, b->running_mean, 0.0, 0, NULL);
    if (s == LS_OK) s = fill_host(ctx, b->running_var, 1.0, 0, NULL);
    if (s == LS_OK && c.sync &&
        !(b->host = malloc((size_t)(3 * channels + 1) * sizeof(double) + (size_t)channels * sizeof(float))))
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "batch norm %s: no host memory for synchronized statistics",
                     name ? name : "");
    if (s != LS_OK) {
        ls_module_destroy(m);
        return s;
    }
    *out_m = m;
    return LS_OK;
}

/* ---- pooling ---- */
typedef struct pool_mod {
    ls_module base;
    ls_pool mode;
    int kernel, stride, pad;
} pool_mod;

static ls_status pool_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    pool_mod *p = (pool_mod *)m;
    char a[64];
    if (x->ndim != 4)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: input is %s, expected [N, C, H, W]", m->vt->kind,
                        ls_tensor_describe(x, a, 64));
    int64_t P = ls_conv_out_size(x->shape[2], p->kernel, p->stride, p->pad);
    int64_t Q = ls_conv_out_size(x->shape[3], p->kernel, p->stride, p->pad);
    if (P < 1 || Q < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the input %s is smaller than the %dx%d window", m->vt->kind,
                        ls_tensor_describe(x, a, 64), p->kernel, p->kernel);
    LS_CHECK(
        ls_module_ensure(m->ctx, &m->y, x->dtype, 4, (int64_t[]){x->shape[0], x->shape[1], P, Q}, "pooling output"));
    LS_CHECK(ls_op_pool2d_forward(m->ctx, p->mode, p->kernel, p->stride, p->pad, x, m->y));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status pool_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    pool_mod *p = (pool_mod *)m;
    if (!m->x) return no_input(m);
    if (want_dx) {
        LS_CHECK(ls_module_ensure(m->ctx, &m->dx, m->x->dtype, 4, m->x->shape, "pooling input gradient"));
        LS_CHECK(ls_op_pool2d_backward(m->ctx, p->mode, p->kernel, p->stride, p->pad, m->x, dy, m->dx));
    }
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

static void pool_describe(const ls_module *m, char *buf, size_t n) {
    const pool_mod *p = (const pool_mod *)m;
    snprintf(buf, n, "%s(kernel_size=%d, stride=%d, padding=%d)", m->vt->kind, p->kernel, p->stride, p->pad);
}

static const ls_module_vt maxpool_vt = {"MaxPool2d", pool_forward, pool_backward, NULL, pool_describe, NULL};
static const ls_module_vt avgpool_vt = {"AvgPool2d", pool_forward, pool_backward, NULL, pool_describe, NULL};

ls_status ls_pool2d_create(ls_ctx *ctx, ls_pool mode, int kernel, int stride, int pad, ls_module **out_m) {
    LS_CHECK_ARG(out_m, "ls_pool2d_create: out is NULL");
    /* the one value that is wrong, named (it listed every rule with every value) */
    if (mode != LS_POOL_MAX && mode != LS_POOL_AVG)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "pooling: mode %d is neither LS_POOL_MAX nor LS_POOL_AVG", (int)mode);
    if (kernel < 1 || stride < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "pooling: %s is %d; it must be >= 1", kernel < 1 ? "kernel" : "stride",
                        kernel < 1 ? kernel : stride);
    if (pad < 0 || 2 * pad > kernel)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "pooling: padding is %d; it must be in 0 <= padding <= kernel/2 (kernel %d), as PyTorch's", pad,
                        kernel);
    ls_module *m = NULL;
    LS_CHECK(cnn_alloc(ctx, mode == LS_POOL_MAX ? &maxpool_vt : &avgpool_vt, 0, sizeof(pool_mod), &m));
    pool_mod *p = (pool_mod *)m;
    p->mode = mode;
    p->kernel = kernel;
    p->stride = stride;
    p->pad = pad;
    *out_m = m;
    return LS_OK;
}

/* ---- global average pooling ---- */
static ls_status gap_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    char a[64];
    if (x->ndim != 4)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "global average pooling: input is %s, expected [N, C, H, W]",
                        ls_tensor_describe(x, a, 64));
    LS_CHECK(ls_module_ensure(m->ctx, &m->y, x->dtype, 2, x->shape, "global average pooling output"));
    LS_CHECK(ls_op_global_avgpool_forward(m->ctx, x, m->y));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status gap_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return no_input(m);
    if (want_dx) {
        LS_CHECK(
            ls_module_ensure(m->ctx, &m->dx, m->x->dtype, 4, m->x->shape, "global average pooling input gradient"));
        LS_CHECK(ls_op_global_avgpool_backward(m->ctx, dy, m->dx));
    }
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

static const ls_module_vt gap_vt = {"GlobalAvgPool2d", gap_forward, gap_backward, NULL, NULL, NULL};

ls_status ls_global_avgpool_create(ls_ctx *ctx, ls_module **out_m) {
    return cnn_alloc(ctx, &gap_vt, 0, sizeof(ls_module), out_m);
}

/* ---- reshape / flatten (views) ---- */
typedef struct reshape_mod {
    ls_module base;
    int ndim; /* per-sample dims; 0: flatten */
    int64_t shape[LS_MAX_DIMS];
} reshape_mod;

static ls_status reshape_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    reshape_mod *r = (reshape_mod *)m;
    char a[64];
    int64_t per = x->ndim ? ls_tensor_numel(x) / (x->shape[0] ? x->shape[0] : 1) : 0;
    int64_t shape[LS_MAX_DIMS] = {x->ndim ? x->shape[0] : 0, per, 1, 1};
    int nd = 2;
    if (r->ndim) {
        int64_t want = 1;
        for (int i = 0; i < r->ndim; i++) want *= r->shape[i];
        if (x->ndim < 1 || per != want)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "reshape: input %s has %lld values per sample, expected %lld",
                            ls_tensor_describe(x, a, 64), (long long)per, (long long)want);
        nd = r->ndim + 1;
        for (int i = 0; i < r->ndim; i++) shape[i + 1] = r->shape[i];
    } else if (x->ndim < 1) {
        return ls_error(LS_ERR_INVALID_ARGUMENT, "flatten: input %s has no batch dimension",
                        ls_tensor_describe(x, a, 64));
    }
    LS_CHECK(set_view(&m->y, x->data, x->dtype, x->device, nd, shape));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status reshape_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return no_input(m);
    if (want_dx) LS_CHECK(set_view(&m->dx, dy->data, dy->dtype, dy->device, m->x->ndim, m->x->shape));
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

static void reshape_describe(const ls_module *m, char *buf, size_t n) {
    const reshape_mod *r = (const reshape_mod *)m;
    int at = snprintf(buf, n, "Reshape(");
    for (int i = 0; i < r->ndim && at > 0 && (size_t)at < n; i++)
        at += snprintf(buf + at, n - (size_t)at, "%s%lld", i ? "x" : "", (long long)r->shape[i]);
    if (at > 0 && (size_t)at < n) snprintf(buf + at, n - (size_t)at, ")");
}

static const ls_module_vt reshape_vt = {"Reshape", reshape_forward, reshape_backward, NULL, reshape_describe, NULL};
static const ls_module_vt flatten_vt = {"Flatten", reshape_forward, reshape_backward, NULL, NULL, NULL};

ls_status ls_reshape_create(ls_ctx *ctx, int ndim, const int64_t *sample_shape, ls_module **out_m) {
    LS_CHECK_ARG(out_m && sample_shape, "ls_reshape_create: %s is NULL", !out_m ? "out" : "the sample shape");
    if (ndim < 1 || ndim > LS_MAX_DIMS - 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "reshape: %d per-sample dims, expected 1..%d", ndim, LS_MAX_DIMS - 1);
    for (int i = 0; i < ndim; i++)
        if (sample_shape[i] < 1)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "reshape: dimension %d is %lld, expected >= 1", i,
                            (long long)sample_shape[i]);
    ls_module *m = NULL;
    LS_CHECK(cnn_alloc(ctx, &reshape_vt, 0, sizeof(reshape_mod), &m));
    reshape_mod *r = (reshape_mod *)m;
    r->ndim = ndim;
    for (int i = 0; i < ndim; i++) r->shape[i] = sample_shape[i];
    *out_m = m;
    return LS_OK;
}

ls_status ls_flatten_create(ls_ctx *ctx, ls_module **out_m) {
    return cnn_alloc(ctx, &flatten_vt, 0, sizeof(reshape_mod), out_m);
}

/* ---- cast ---- */
typedef struct cast_mod {
    ls_module base;
    ls_dtype to;
} cast_mod;

static ls_status cast_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    cast_mod *c = (cast_mod *)m;
    m->x = x;
    if (x->dtype == c->to) {
        *y = x;
        return LS_OK;
    }
    LS_CHECK(ls_module_ensure(m->ctx, &m->y, c->to, x->ndim, x->shape, "cast output"));
    LS_CHECK(ls_op_convert(m->ctx, x, m->y));
    *y = m->y;
    return LS_OK;
}

static ls_status cast_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return no_input(m);
    if (!want_dx || m->x->dtype == dy->dtype) {
        if (dx) *dx = want_dx ? dy : NULL;
        return LS_OK;
    }
    LS_CHECK(ls_module_ensure(m->ctx, &m->dx, m->x->dtype, m->x->ndim, m->x->shape, "cast input gradient"));
    LS_CHECK(ls_op_convert(m->ctx, dy, m->dx));
    if (dx) *dx = m->dx;
    return LS_OK;
}

static void cast_describe(const ls_module *m, char *buf, size_t n) {
    snprintf(buf, n, "Cast(%s)", ls_dtype_name(((const cast_mod *)m)->to));
}

static const ls_module_vt cast_vt = {"Cast", cast_forward, cast_backward, NULL, cast_describe, NULL};

ls_status ls_cast_create(ls_ctx *ctx, ls_dtype dtype, ls_module **out_m) {
    LS_CHECK_ARG(out_m, "ls_cast_create: out is NULL");
    if (dtype != LS_F32 && dtype != LS_F64 && !is_lowp(dtype))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "cast: %s is not a floating-point dtype", ls_dtype_name(dtype));
    ls_module *m = NULL;
    LS_CHECK(cnn_alloc(ctx, &cast_vt, 0, sizeof(cast_mod), &m));
    ((cast_mod *)m)->to = dtype;
    *out_m = m;
    return LS_OK;
}

/* ---- residual ---- */
typedef struct res_mod {
    ls_module base; /* children: body[, shortcut]; mask: the gradient after the ReLU */
    int relu;
} res_mod;

static ls_status res_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    res_mod *r = (res_mod *)m;
    const ls_tensor *yb, *ys = x;
    char a[64], b[64];
    LS_CHECK(ls_module_forward(m->children[0], x, &yb));
    if (m->n_children > 1) LS_CHECK(ls_module_forward(m->children[1], x, &ys));
    if (!ls_tensor_same_shape(yb, ys) || yb->dtype != ys->dtype)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "residual: the body gives %s but the shortcut %s",
                        ls_tensor_describe(yb, a, 64), ls_tensor_describe(ys, b, 64));
    LS_CHECK(ls_module_ensure(m->ctx, &m->y, yb->dtype, yb->ndim, yb->shape, "residual output"));
    LS_CHECK(r->relu ? ls_op_add_relu(m->ctx, yb, ys, m->y) : ls_op_add(m->ctx, yb, ys, m->y));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status res_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    res_mod *r = (res_mod *)m;
    if (!m->x) return no_input(m);
    const ls_tensor *g = dy, *gb = NULL, *gs = NULL;
    if (r->relu) { /* something below trains or want_dx: else ls_module_backward came to res_backward_frozen */
        LS_CHECK(ls_module_ensure(m->ctx, &m->mask, dy->dtype, dy->ndim, dy->shape, "residual gradient"));
        LS_CHECK(ls_op_act_backward(m->ctx, LS_ACT_RELU, m->y, dy, m->mask)); /* ReLU's output masks too */
        g = m->mask;
    }
    LS_CHECK(ls_module_backward(m->children[0], g, want_dx, &gb));
    if (m->n_children > 1)
        LS_CHECK(ls_module_backward(m->children[1], g, want_dx, &gs));
    else
        gs = g;
    if (want_dx) {
        LS_CHECK(ls_module_ensure(m->ctx, &m->dx, m->x->dtype, m->x->ndim, m->x->shape, "residual input gradient"));
        LS_CHECK(ls_op_add(m->ctx, gb, gs, m->dx));
    }
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

static ls_status res_backward_frozen(ls_module *m) {
    for (int i = 0; i < m->n_children; i++) LS_CHECK(ls_module_backward_frozen(m->children[i]));
    return LS_OK;
}

static void res_destroy(ls_module *m) {
    for (int i = 0; i < m->n_children; i++) ls_module_destroy_child(m->children[i]);
    free(m->children);
    ls_tensor_destroy(m->mask);
    m->mask = NULL;
}

static void res_describe(const ls_module *m, char *buf, size_t n) {
    snprintf(buf, n, "%s", ((const res_mod *)m)->relu ? "Residual(relu)" : "Residual");
}

static const ls_module_vt res_vt = {"Residual",  res_forward,  res_backward,
                                    res_destroy, res_describe, res_backward_frozen};

ls_status ls_residual_create(ls_ctx *ctx, ls_module *body, ls_module *shortcut, int relu, ls_module **out_m) {
    /* one already in a container is its container's: not freed here, on this error or another */
    if ((body && body->parent) || (shortcut && shortcut->parent)) {
        const ls_module *in = body && body->parent ? body : shortcut;
        char msg[512];
        snprintf(msg, sizeof msg,
                 "ls_residual_create: the %s (%s) is already inside a %s, which owns it (a module can be in one "
                 "container): create another for this one",
                 in == body ? "body" : "shortcut", in->vt->kind, in->parent->vt->kind);
        if (body && !body->parent) ls_module_destroy(body);
        if (shortcut && !shortcut->parent) ls_module_destroy(shortcut);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s", msg);
    }
    if (!body) {
        ls_module_destroy(shortcut);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "residual: the body is missing");
    }
    /* one module as both would be destroyed twice, and its second forward would overwrite the
     * output of its first */
    if (body == shortcut) {
        ls_module_destroy(body);
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_residual_create: the body and the shortcut are the same module (create another for the "
                        "shortcut)");
    }
    if (!out_m) {
        ls_module_destroy(body);
        ls_module_destroy(shortcut);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_residual_create: out is NULL");
    }
    int n = body->n_params + (shortcut ? shortcut->n_params : 0);
    ls_module *m = NULL;
    ls_status s = LS_OK;
    const ls_module *kids[2] = {body, shortcut};
    for (int c = 0; c < 2 && s == LS_OK; c++) /* "body." or "shortcut." before each child's name */
        for (int p = 0; kids[c] && p < kids[c]->n_params && s == LS_OK; p++) {
            const char *nm = kids[c]->names[p], *pre = c ? "shortcut." : "body.";
            if (strlen(pre) + strlen(nm) >= LS_NAME_MAX)
                s = ls_error(LS_ERR_INVALID_ARGUMENT,
                             "residual: the parameter name '%s%s' is longer than the %d bytes a parameter's can be",
                             pre, nm, LS_NAME_MAX - 1);
        }
    if (s == LS_OK) s = cnn_alloc(ctx, &res_vt, n, sizeof(res_mod), &m);
    if (s == LS_OK) {
        m->children = calloc(2, sizeof *m->children);
        if (!m->children) {
            ls_module_destroy(m);
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a residual block");
        }
    }
    if (s != LS_OK) {
        ls_module_destroy(body);
        ls_module_destroy(shortcut);
        return s;
    }
    ((res_mod *)m)->relu = relu != 0;
    m->children[0] = body;
    m->children[1] = shortcut;
    ls_module_adopt(m, body);
    ls_module_adopt(m, shortcut);
    m->n_children = shortcut ? 2 : 1;
    int k = 0;
    for (int c = 0; c < m->n_children; c++) {
        ls_module *ch = m->children[c];
        for (int p = 0; p < ch->n_params; p++, k++) {
            m->params[k] = ch->params[p];
            m->grads[k] = ch->grads[p];
            snprintf(m->names[k], LS_NAME_MAX, "%s.%s", c == 0 ? "body" : "shortcut", ch->names[p]);
        }
    }
    *out_m = m;
    return LS_OK;
}

/* Sequential of n modules; on error the modules are destroyed. */
static ls_status seq_of(ls_ctx *ctx, int n, ls_module **mods, ls_module **out) {
    for (int i = 0; i < n; i++)
        if (!mods[i]) {
            for (int j = 0; j < n; j++) ls_module_destroy(mods[j]);
            return ls_error(LS_ERR_INTERNAL, "a layer of a sequential block is missing");
        }
    ls_status s = ls_sequential_create(ctx, n, mods, out);
    if (s != LS_OK)
        for (int j = 0; j < n; j++) ls_module_destroy(mods[j]);
    return s;
}

ls_status ls_basic_block_create(ls_ctx *ctx, ls_dtype dtype, int64_t in, int64_t out, int stride, uint64_t seed,
                                const ls_batchnorm_config *bn, ls_module **out_m) {
    LS_CHECK_ARG(out_m, "ls_basic_block_create: out is NULL");
    ls_batchnorm_config plain = bn ? *bn : ls_batchnorm_defaults(), fused = plain;
    plain.relu = 0;
    fused.relu = 1;
    ls_module *b[4] = {NULL, NULL, NULL, NULL}, *sc[2] = {NULL, NULL}, *body = NULL, *shortcut = NULL;
    ls_status s = ls_conv2d_create(ctx, dtype, in, out, 3, stride, 1, 1, 0, seed, "", &b[0]);
    if (s == LS_OK) s = ls_batchnorm2d_create(ctx, dtype, out, &fused, "", &b[1]);
    if (s == LS_OK) s = ls_conv2d_create(ctx, dtype, out, out, 3, 1, 1, 1, 0, seed + 1, "", &b[2]);
    if (s == LS_OK) s = ls_batchnorm2d_create(ctx, dtype, out, &plain, "", &b[3]);
    if (s == LS_OK) {
        s = seq_of(ctx, 4, b, &body);
    } else {
        for (int i = 0; i < 4; i++) ls_module_destroy(b[i]);
    }
    if (s == LS_OK && (stride != 1 || in != out)) {
        s = ls_conv2d_create(ctx, dtype, in, out, 1, stride, 0, 1, 0, seed + 2, "", &sc[0]);
        if (s == LS_OK) s = ls_batchnorm2d_create(ctx, dtype, out, &plain, "", &sc[1]);
        if (s == LS_OK) {
            s = seq_of(ctx, 2, sc, &shortcut);
        } else {
            ls_module_destroy(sc[0]);
            ls_module_destroy(sc[1]);
        }
    }
    if (s != LS_OK) {
        ls_module_destroy(body);
        return s;
    }
    return ls_residual_create(ctx, body, shortcut, 1, out_m);
}

/* ---- ResNet ---- */
int ls_resnet_num_layers(const ls_resnet_config *cfg) {
    if (!cfg) return 0;
    int drop = cfg->dropout > 0;
    return 1 + 2 + cfg->n_stages * cfg->blocks + 2 + drop;
}

ls_status ls_resnet_create(ls_ctx *ctx, const ls_resnet_config *cfg, ls_module **out_m) {
    LS_CHECK_ARG(ctx && cfg && out_m, "ls_resnet_create: %s is NULL", !ctx ? "ctx" : !cfg ? "cfg" : "out");
    if (cfg->n_stages < 1 || cfg->n_stages > LS_RESNET_MAX_STAGES || cfg->blocks < 1 || cfg->num_classes < 1 ||
        cfg->in_channels < 1 || cfg->in_h < 1 || cfg->in_w < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "resnet: %d stages (1..%d), %d blocks per stage, %lld classes and "
                        "a %lldx%lldx%lld input must all be positive",
                        cfg->n_stages, LS_RESNET_MAX_STAGES, cfg->blocks, (long long)cfg->num_classes,
                        (long long)cfg->in_channels, (long long)cfg->in_h, (long long)cfg->in_w);
    for (int i = 0; i < cfg->n_stages; i++)
        if (cfg->widths[i] < 1)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "resnet: stage %d has width %lld", i, (long long)cfg->widths[i]);
    if (!(cfg->dropout >= 0 && cfg->dropout < 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "resnet: dropout probability %g is outside [0, 1)",
                        (double)cfg->dropout);
    if (cfg->act_dtype != cfg->param_dtype && !(is_lowp(cfg->act_dtype) && cfg->param_dtype == LS_F32))
        return ls_error(LS_ERR_UNSUPPORTED, "resnet: %s activations with %s parameters (low precision needs f32)",
                        ls_dtype_name(cfg->act_dtype), ls_dtype_name(cfg->param_dtype));
    /* k: layer index; li: init stream of each block, counted apart from k (the layers of a model
     * with a Dropout initialize as those of one without) */
    int n = ls_resnet_num_layers(cfg), k = 0, li = 0;
    ls_module **mods = calloc((size_t)n, sizeof *mods);
    if (!mods) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the ResNet's layer list");
    ls_batchnorm_config bn = ls_batchnorm_defaults(), bn_relu;
    bn.sync = cfg->sync_bn;
    bn_relu = bn;
    bn_relu.relu = 1;
    ls_dtype pt = cfg->param_dtype;
    uint64_t seed = cfg->seed * 1000003u;
    ls_status s = ls_reshape_create(ctx, 3, (int64_t[]){cfg->in_channels, cfg->in_h, cfg->in_w}, &mods[k]);
    if (s == LS_OK && cfg->act_dtype != pt) {
        /* the cast to 16 bits in the first layer, with the reshape: the layers keep the f32 model's
         * numbers, so the parameters its names ("2.weight"): a layer of its own renamed them all, and
         * no f32 checkpoint or PyTorch state_dict loaded into a bf16 or fp16 model */
        ls_module *pre[2] = {mods[k], NULL};
        s = ls_cast_create(ctx, cfg->act_dtype, &pre[1]);
        if (s == LS_OK) s = ls_sequential_create(ctx, 2, pre, &mods[k]);
        if (s != LS_OK) {
            ls_module_destroy(pre[0]);
            ls_module_destroy(pre[1]);
            mods[k] = NULL;
        }
    }
    k++;
    if (s == LS_OK)
        s = ls_conv2d_create(ctx, pt, cfg->in_channels, cfg->widths[0], 3, 1, 1, 1, 0, seed, "", &mods[k++]);
    if (s == LS_OK) s = ls_batchnorm2d_create(ctx, pt, cfg->widths[0], &bn_relu, "", &mods[k++]);
    int64_t cin = cfg->widths[0];
    for (int st = 0; st < cfg->n_stages && s == LS_OK; st++) {
        for (int b = 0; b < cfg->blocks && s == LS_OK; b++) {
            int stride = st > 0 && b == 0 ? 2 : 1;
            s = ls_basic_block_create(ctx, pt, cin, cfg->widths[st], stride, seed + 16u * (uint64_t)(++li), &bn,
                                      &mods[k]);
            k++;
            cin = cfg->widths[st];
        }
    }
    if (s == LS_OK) s = ls_global_avgpool_create(ctx, &mods[k++]);
    if (s == LS_OK && cfg->dropout > 0) s = ls_dropout_create(ctx, cfg->dropout, ~seed, &mods[k++]);
    if (s == LS_OK) {
        s = ls_linear_create(ctx, pt, cin, cfg->num_classes, 1, seed + 16u * (uint64_t)(++li), "", &mods[k]);
        k++;
    }
    if (s == LS_OK && k != n) s = ls_error(LS_ERR_INTERNAL, "resnet: built %d layers, expected %d", k, n);
    if (s == LS_OK) s = ls_sequential_create(ctx, n, mods, out_m);
    if (s != LS_OK)
        for (int i = 0; i < n; i++) ls_module_destroy(mods[i]);
    free(mods);
    return s;
}

/* ---- buffers ---- */
struct ls_buffer_ref {
    ls_tensor *t;
    int which;               /* 0 running mean, 1 running variance */
    const ls_tensor *weight; /* its BatchNorm's weight (NULL: none) */
    const char *own_name;    /* the BatchNorm's own name for it */
    int param;               /* its index among the listing module's parameters (-1: not there) */
};

static int count_buffers(const ls_module *m) {
    int n = m->vt == &bn_vt ? 2 : 0;
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]) n += count_buffers(m->children[i]);
    return n;
}

/* depth-first, a module's own before its children's: the same order on every rank */
static void list_buffers(ls_module *m, struct ls_buffer_ref *out, int *at) {
    if (m->vt == &bn_vt) {
        bn_mod *b = (bn_mod *)m;
        for (int i = 0; i < 2; i++)
            out[(*at)++] = (struct ls_buffer_ref){i == 0 ? b->running_mean : b->running_var, i,
                                                  b->base.n_params > 0 ? b->base.params[0] : NULL,
                                                  b->base.n_params > 0 ? b->base.names[0] : "", -1};
    }
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]) list_buffers(m->children[i], out, at);
}

typedef struct {
    const ls_tensor *p;
    int i;
} param_at;

static int cmp_param_at(const void *a, const void *b) {
    const param_at *x = a, *y = b;
    if (x->p != y->p) return (uintptr_t)x->p < (uintptr_t)y->p ? -1 : 1;
    return (x->i > y->i) - (x->i < y->i);
}

/* m's buffer list (m->buf_refs), made at the first call; its length, or -1 without memory for it. */
static int buffer_refs(ls_module *m) {
    if (m->buf_refs) return m->n_buf_refs;
    int n = count_buffers(m), at = 0;
    if (n == 0) return 0;
    struct ls_buffer_ref *r = calloc((size_t)n, sizeof *r);
    param_at *pa = calloc((size_t)m->n_params + 1, sizeof *pa);
    if (!r || !pa) {
        free(r);
        free(pa);
        return -1;
    }
    list_buffers(m, r, &at);
    /* each BatchNorm's weight among m's parameters, by bisection (the first index where the same
     * tensor is listed twice): its name there ("3.body.1.weight") names the buffers */
    for (int p = 0; p < m->n_params; p++) pa[p] = (param_at){m->params[p], p};
    qsort(pa, (size_t)m->n_params, sizeof *pa, cmp_param_at);
    for (int k = 0; k < n; k++) {
        int lo = 0, hi = m->n_params; /* the first entry not below (weight, -1) */
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if ((uintptr_t)pa[mid].p < (uintptr_t)r[k].weight)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (r[k].weight && lo < m->n_params && pa[lo].p == r[k].weight) r[k].param = pa[lo].i;
    }
    free(pa);
    m->buf_refs = r;
    m->n_buf_refs = n;
    return n;
}

int ls_cnn_num_buffers(ls_module *m) { return count_buffers(m); }

/* Without memory for the list: buffer i found by a walk, its BatchNorm's weight by a search. */
static int nth_buffer(ls_module *m, int *i, struct ls_buffer_ref *out) {
    if (m->vt == &bn_vt && *i < 2) {
        struct ls_buffer_ref one[2];
        int at = 0;
        list_buffers(m, one, &at);
        *out = one[*i];
        return 1;
    }
    if (m->vt == &bn_vt) *i -= 2;
    for (int c = 0; c < m->n_children; c++)
        if (m->children[c] && nth_buffer(m->children[c], i, out)) return 1;
    return 0;
}

ls_tensor *ls_cnn_buffer(ls_module *m, int i, char *name, int len) {
    struct ls_buffer_ref one;
    const struct ls_buffer_ref *r = NULL;
    int n = i < 0 ? 0 : buffer_refs(m);
    if (n > i) {
        r = &m->buf_refs[i];
    } else if (n < 0 && nth_buffer(m, &i, &one)) {
        for (int p = 0; p < m->n_params && one.param < 0; p++)
            if (one.weight && m->params[p] == one.weight) one.param = p;
        r = &one;
    }
    if (!r) {
        if (name && len > 0) name[0] = '\0';
        return NULL;
    }
    if (name && len > 0) {
        const char *suffix = r->which == 0 ? "running_mean" : "running_var";
        const char *pname = r->param >= 0 ? m->names[r->param] : r->own_name;
        size_t l = strlen(pname);
        if (l >= 6 && strcmp(pname + l - 6, "weight") == 0) l -= 6;
        snprintf(name, (size_t)len, "%.*s%s", (int)l, pname, suffix);
    }
    return r->t;
}

ls_status ls_cnn_broadcast_buffers(ls_comm *comm, ls_module *m) {
    if (!comm || ls_comm_world(comm) < 2) return LS_OK;
    int n = ls_cnn_num_buffers(m);
    if (n == 0) return LS_OK;
    ls_tensor **b = malloc((size_t)n * sizeof *b);
    if (!b) /* the others are in the broadcast's agreement: this rank's failure is theirs */
        return ls_ddp_broadcast_abandon(
            comm, ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the list of %d batch-norm buffers to broadcast", n));
    for (int i = 0; i < n; i++) b[i] = ls_cnn_buffer(m, i, NULL, 0);
    ls_status s = ls_ddp_broadcast_params(comm, n, b);
    free(b);
    return s;
}

void ls_cnn_sync_local(ls_module *m, int local) {
    if (m->vt == &bn_vt) ((bn_mod *)m)->local = local;
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]) ls_cnn_sync_local(m->children[i], local);
}

int ls_cnn_num_synced(const ls_module *m) {
    if (!m) return 0;
    int n = m->vt == &bn_vt && synced((const bn_mod *)m);
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]) n += ls_cnn_num_synced(m->children[i]);
    return n;
}

void ls_cnn_release_activations(ls_module *m) {
    ls_tensor_destroy(m->y);
    ls_tensor_destroy(m->dx);
    ls_tensor_destroy(m->mask);
    m->y = m->dx = m->mask = NULL;
    m->x = NULL;
    if (m->vt == &bn_vt) {
        bn_mod *b = (bn_mod *)m;
        b->folded = 0;
    }
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]) ls_cnn_release_activations(m->children[i]);
}
