/* nn.c: Linear, activations, Sequential and the cross-entropy loss. Each module is a vtable plus
 * its state; Sequential holds the flat parameter list of its children in order and fires the
 * gradient hook for a child's parameters (last first) right after that child's backward. */
#include "nn.h"
#include "nn_impl.h"
#include "log.h"
#include "timeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ls_module_vt seq_vt, ckpt_vt;

/* Free the activation buffers of m and everything inside it (not parameters or gradients). */
static void release_buffers(ls_module *m) {
    ls_tensor_destroy(m->y);
    ls_tensor_destroy(m->dx);
    ls_tensor_destroy(m->mask);
    m->y = m->dx = m->mask = NULL;
    m->x = NULL;
    for (int i = 0; i < m->n_children; i++) release_buffers(m->children[i]);
}

ls_status ls_module_ensure(ls_ctx *ctx, ls_tensor **t, ls_dtype dtype, int ndim, const int64_t *shape,
                           const char *what) {
    if (*t && (*t)->dtype == dtype && (*t)->ndim == ndim) {
        int same = 1;
        for (int i = 0; i < ndim; i++) same &= (*t)->shape[i] == shape[i];
        if (same) return LS_OK;
    }
    ls_tensor_destroy(*t);
    *t = NULL;
    return ls_tensor_create(ctx->alloc, dtype, ndim, shape, what, t);
}

ls_status ls_module_alloc(ls_ctx *ctx, const ls_module_vt *vt, int n_params, size_t size, ls_module **out) {
    /* every ls_*_create comes here: a NULL context would be a crash at the first forward */
    LS_CHECK_ARG(ctx && out, "cannot create a %s module: %s is NULL", vt->kind, !ctx ? "the context" : "out");
    ls_module *m = calloc(1, size < sizeof *m ? sizeof *m : size);
    if (!m) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a %s module", vt->kind);
    m->vt = vt;
    m->ctx = ctx;
    m->n_params = n_params;
    ctx->live_modules++; /* ls_ctx_destroy refuses while it is alive */
    if (n_params) {
        m->params = calloc((size_t)n_params, sizeof *m->params);
        m->grads = calloc((size_t)n_params, sizeof *m->grads);
        m->names = calloc((size_t)n_params, sizeof *m->names);
        m->no_grad = calloc((size_t)n_params, sizeof *m->no_grad);
        if (!m->params || !m->grads || !m->names || !m->no_grad) {
            free(m->params);
            free(m->grads);
            free(m->names);
            free(m->no_grad);
            free(m);
            ctx->live_modules--;
            return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a %s module's parameter list", vt->kind);
        }
    }
    *out = m;
    return LS_OK;
}

/* The trainers and EMAs that hold m or a module inside it (added to *trainers and *emas). */
static void holders(const ls_module *m, int *trainers, int *emas) {
    *trainers += m->trainers;
    *emas += m->emas;
    for (int i = 0; i < m->n_children; i++)
        if (m->children[i]) holders(m->children[i], trainers, emas);
}

ls_status ls_module_check_free(const ls_module *c, const char *where, int index) {
    if (!c->parent) return LS_OK;
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "%s: module %d (%s) is already inside a %s, which owns it (a module can be in one container): "
                    "create another for this one",
                    where, index, c->vt->kind, c->parent->vt->kind);
}

void ls_module_adopt(ls_module *parent, ls_module *child) {
    if (child) child->parent = parent;
}

/* m and the modules inside it freed, unchecked: what ls_module_destroy does once its checks pass */
static void module_free(ls_module *m) {
    if (m->vt->destroy) m->vt->destroy(m);
    ls_tensor_destroy(m->y);
    ls_tensor_destroy(m->dx);
    ls_tensor_destroy(m->mask);
    free(m->key_rows);
    free(m->buf_refs);
    free(m->params);
    free(m->grads);
    free(m->names);
    free(m->no_grad);
    m->ctx->live_modules--;
    free(m);
}

/* the checks of the outermost container's destroy covered its children (their holders, their
 * parameters, which are in its list) */
void ls_module_destroy_child(ls_module *c) {
    if (!c) return;
    c->parent = NULL;
    module_free(c);
}

void ls_module_destroy(ls_module *m) {
    if (!m) return;
    if (m->parent) { /* the container frees it at its own destroy: a second free */
        ls_error(LS_ERR_INVALID_ARGUMENT,
                 "ls_module_destroy: the module (%s) is inside a %s, which owns it and frees it: destroy the "
                 "outermost container instead; the module is left as it is, not freed",
                 m->vt->kind, m->parent->vt->kind);
        LS_LOG_E("%s", ls_last_error());
        return;
    }
    int trainers = 0, emas = 0;
    holders(m, &trainers, &emas);
    if (trainers || emas) { /* freed, their use and their own destroys would write into freed memory */
        ls_error(LS_ERR_INVALID_ARGUMENT,
                 "ls_module_destroy: the module (%s) is still held by %d trainer%s and %d EMA%s (ls_trainer_create, "
                 "ls_ema_create, of it or of a module inside it) not yet destroyed: destroy them first "
                 "(ls_trainer_destroy, ls_ema_destroy), then the module; it is left as it is, not freed",
                 m->vt->kind, trainers, trainers == 1 ? "" : "s", emas, emas == 1 ? "" : "s");
        LS_LOG_E("%s", ls_last_error());
        return;
    }
    /* a container's list holds every parameter below it */
    int opts = 0;
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i] && m->params[i]->holders > opts) opts = m->params[i]->holders;
    if (opts) { /* freed, their steps and destroys would write into freed memory */
        ls_error(LS_ERR_INVALID_ARGUMENT,
                 "ls_module_destroy: the module's (%s) parameters are still held by %d optimizer%s "
                 "(ls_optimizer_create over them) not yet destroyed: destroy %s first (ls_optimizer_destroy), then "
                 "the module; it is left as it is, not freed",
                 m->vt->kind, opts, opts == 1 ? "" : "s", opts == 1 ? "it" : "them");
        LS_LOG_E("%s", ls_last_error());
        return;
    }
    module_free(m);
}

/* ---- Linear ---- */
static void linear_destroy(ls_module *m) {
    for (int i = 0; i < m->n_params; i++) {
        ls_tensor_destroy(m->params[i]);
        ls_tensor_destroy(m->grads[i]);
        ls_tensor_destroy(m->lowp[i]);
    }
}

/* The weights to compute with for input dtype t: the parameters themselves, or (autocast) their
 * f16/bf16 copies, cast from the f32 masters at every forward, or once per epoch of the context's
 * cast_epoch (ls_module_cache_weight_casts). */
ls_status ls_module_compute_weights(ls_module *m, ls_dtype t, const ls_tensor **w, const ls_tensor **b) {
    *w = m->params[0];
    *b = m->n_params > 1 ? m->params[1] : NULL;
    if (t == (*w)->dtype) return LS_OK;
    if ((t != LS_F16 && t != LS_BF16) || (*w)->dtype != LS_F32)
        return ls_error(LS_ERR_UNSUPPORTED, "%s: %s input with %s parameters (low precision needs f32 masters)",
                        m->names[0], ls_dtype_name(t), ls_dtype_name((*w)->dtype));
    uint64_t epoch = m->ctx->cast_epoch;
    if (!epoch || m->lowp_epoch != epoch || !m->lowp[0] || m->lowp[0]->dtype != t) {
        m->lowp_epoch = 0;
        for (int i = 0; i < m->n_params; i++) {
            ls_tensor *p = m->params[i];
            LS_CHECK(ls_module_ensure(m->ctx, &m->lowp[i], t, p->ndim, p->shape, "low-precision weight copy"));
            LS_CHECK(ls_op_convert(m->ctx, p, m->lowp[i]));
        }
        m->lowp_epoch = epoch;
    }
    *w = m->lowp[0];
    *b = m->n_params > 1 ? m->lowp[1] : NULL;
    return LS_OK;
}

/* The modules below m (m included) that hold a copy of every parameter, from f32 masters: with
 * src and dst, their pairs from *k on; with mods, the modules from *nm on; else only counted. */
static void find_copies(ls_module *m, const ls_tensor **src, ls_tensor **dst, int *k, ls_module **mods, int *nm) {
    int all = m->n_params > 0 && m->n_params <= 2;
    for (int i = 0; all && i < m->n_params; i++) all = m->lowp[i] && m->params[i]->dtype == LS_F32;
    if (all) {
        for (int i = 0; i < m->n_params; i++, ++*k)
            if (src) src[*k] = m->params[i], dst[*k] = m->lowp[i];
        if (mods) mods[*nm] = m;
        ++*nm;
    }
    for (int i = 0; i < m->n_children; i++) find_copies(m->children[i], src, dst, k, mods, nm);
}

ls_status ls_module_cache_weight_casts(ls_module *m, int on) {
    LS_CHECK_ARG(m, "ls_module_cache_weight_casts: the module is NULL");
    ls_ctx *ctx = m->ctx;
    ctx->cast_epoch = 0; /* no copy counts as cast until all are */
    if (!on) return LS_OK;
    if (!ctx->ops->convert_many) { /* each copy cast at its first forward, when its GEMM follows in cache */
        ctx->cast_epoch = ++ctx->cast_epochs;
        return LS_OK;
    }
    int k = 0, nm = 0;
    find_copies(m, NULL, NULL, &k, NULL, &nm);
    const ls_tensor **src = malloc(sizeof *src * (size_t)(k ? k : 1));
    ls_tensor **dst = malloc(sizeof *dst * (size_t)(k ? k : 1));
    ls_module **mods = malloc(sizeof *mods * (size_t)(nm ? nm : 1));
    ls_status s = src && dst && mods ? LS_OK : ls_error(LS_ERR_OUT_OF_MEMORY, "cannot list the weight copies");
    if (s == LS_OK) {
        k = nm = 0;
        find_copies(m, src, dst, &k, mods, &nm);
        s = ls_op_convert_many(ctx, k, src, dst);
    }
    if (s == LS_OK) {
        ctx->cast_epoch = ++ctx->cast_epochs;
        for (int i = 0; i < nm; i++) mods[i]->lowp_epoch = ctx->cast_epoch;
    }
    free(src);
    free(dst);
    free(mods);
    return s;
}

static ls_status linear_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    const ls_tensor *w, *b;
    char a[64];
    if (x->ndim != 2 || x->shape[1] != m->params[0]->shape[1])
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: input is %s, expected [batch, %lld]", m->names[0],
                        ls_tensor_describe(x, a, 64), (long long)m->params[0]->shape[1]);
    LS_CHECK(ls_module_compute_weights(m, x->dtype, &w, &b));
    LS_CHECK(ls_module_ensure(m->ctx, &m->y, x->dtype, 2, (int64_t[]){x->shape[0], w->shape[0]}, "linear output"));
    LS_CHECK(ls_op_linear_forward(m->ctx, x, w, b, m->y));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status linear_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: backward called before forward", m->names[0]);
    if (want_dx) LS_CHECK(ls_module_ensure(m->ctx, &m->dx, m->x->dtype, 2, m->x->shape, "linear input gradient"));
    const ls_tensor *w = m->x->dtype == m->params[0]->dtype ? m->params[0] : m->lowp[0];
    /* a frozen parameter's gradient is not computed (ls_module_set_requires_grad) */
    ls_tensor *dw = m->no_grad[0] ? NULL : m->grads[0];
    ls_tensor *db = m->n_params > 1 && !m->no_grad[1] ? m->grads[1] : NULL;
    if (want_dx || dw || db) LS_CHECK(ls_op_linear_backward(m->ctx, dy, m->x, w, want_dx ? m->dx : NULL, dw, db));
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

static const ls_module_vt linear_vt = {"Linear", linear_forward, linear_backward, linear_destroy, NULL, NULL};

ls_status ls_linear_create(ls_ctx *ctx, ls_dtype dtype, int64_t in, int64_t out, int bias, uint64_t seed,
                           const char *name, ls_module **out_m) {
    LS_CHECK_ARG(ctx && out_m, "ls_linear_create: %s is NULL", !ctx ? "the context" : "out");
    if (dtype != LS_F64 && dtype != LS_F32)
        return ls_error(LS_ERR_UNSUPPORTED, "linear layer%s%s: parameters must be f32 or f64, not %s",
                        name && *name ? " " : "", name ? name : "", ls_dtype_name(dtype));
    if (in <= 0 || out <= 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "linear layer %s: sizes must be positive, got in=%lld out=%lld",
                        name ? name : "", (long long)in, (long long)out);
    if (name && strlen(name) + sizeof ".weight" > LS_NAME_MAX)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "linear layer '%s': the name is longer than the %d bytes a parameter's can be with its "
                        "'.weight'",
                        name, LS_NAME_MAX - 1);
    ls_module *m;
    LS_CHECK(ls_module_alloc(ctx, &linear_vt, bias ? 2 : 1, 0, &m));
    ls_status s = LS_OK;
    int64_t wshape[2] = {out, in}, bshape[1] = {out};
    for (int i = 0; i < m->n_params && s == LS_OK; i++) {
        const int64_t *shape = i == 0 ? wshape : bshape;
        s = ls_tensor_create(ctx->alloc, dtype, 2 - i, shape, i == 0 ? "linear weight" : "linear bias", &m->params[i]);
        if (s == LS_OK) s = ls_tensor_create(ctx->alloc, dtype, 2 - i, shape, "linear gradient", &m->grads[i]);
        if (s == LS_OK) s = ls_tensor_zero(m->grads[i]);
        snprintf(m->names[i], LS_NAME_MAX, "%s%s%s", name ? name : "", name && *name ? "." : "",
                 i == 0 ? "weight" : "bias");
    }
    if (s != LS_OK) {
        ls_module_destroy(m);
        return s;
    }
    /* torch.nn.Linear's init: kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(in), 1/sqrt(in)); same for bias. */
    double bound = 1.0 / sqrt((double)in);
    ls_rng rng;
    ls_rng_init(&rng, seed);
    for (int i = 0; i < m->n_params && s == LS_OK; i++) {
        int64_t n = ls_tensor_numel(m->params[i]);
        size_t esz = ls_dtype_size(dtype);
        void *h = malloc((size_t)n * esz);
        if (!h) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory to initialize %s", m->names[i]);
            break;
        }
        for (int64_t j = 0; j < n; j++) {
            double v = (2.0 * (double)ls_rng_uniform(&rng) - 1.0) * bound;
            if (dtype == LS_F64)
                ((double *)h)[j] = v;
            else
                ((float *)h)[j] = (float)v;
        }
        ls_tensor ht = ls_tensor_view(h, dtype, ls_device_cpu(), m->params[i]->ndim, m->params[i]->shape);
        s = ls_tensor_copy(ctx->alloc, m->params[i], &ht);
        free(h);
    }
    if (s != LS_OK) {
        ls_module_destroy(m);
        return s;
    }
    *out_m = m;
    return LS_OK;
}

/* ---- activations ---- */
static ls_status act_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    LS_CHECK(ls_module_ensure(m->ctx, &m->y, x->dtype, x->ndim, x->shape, "activation output"));
    LS_CHECK(ls_op_act_forward(m->ctx, m->act, x, m->y));
    m->x = x;
    *y = m->y;
    return LS_OK;
}

static ls_status act_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return ls_error(LS_ERR_INVALID_ARGUMENT, "activation: backward called before forward");
    if (!want_dx) {
        if (dx) *dx = NULL;
        return LS_OK;
    }
    LS_CHECK(ls_module_ensure(m->ctx, &m->dx, m->x->dtype, m->x->ndim, m->x->shape, "activation input gradient"));
    LS_CHECK(ls_op_act_backward(m->ctx, m->act, m->x, dy, m->dx));
    if (dx) *dx = m->dx;
    return LS_OK;
}

static const ls_module_vt relu_vt = {"ReLU", act_forward, act_backward, NULL, NULL, NULL};
static const ls_module_vt gelu_vt = {"GELU", act_forward, act_backward, NULL, NULL, NULL};

ls_status ls_activation_create(ls_ctx *ctx, ls_act act, ls_module **out_m) {
    if (act != LS_ACT_RELU && act != LS_ACT_GELU)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "unknown activation %d", (int)act);
    LS_CHECK(ls_module_alloc(ctx, act == LS_ACT_RELU ? &relu_vt : &gelu_vt, 0, 0, out_m));
    (*out_m)->act = act;
    return LS_OK;
}

/* ---- Sequential ---- */
static ls_status seq_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    const ls_tensor *cur = x;
    for (int i = 0; i < m->n_children; i++) {
        ls_status s = ls_module_forward(m->children[i], cur, &cur);
        if (s != LS_OK) return ls_error_context(s, "layer %d (%s)", i, m->children[i]->vt->kind);
    }
    *y = cur;
    return LS_OK;
}

/* Backward through the layers from the last down to layer first, and the frozen prefix before it
 * (no gradient: each layer's per-step state alone); after each layer its parameters' hooks. */
static ls_status seq_pass(ls_module *m, const ls_tensor *dy, int want_dx, int first, const ls_tensor **dx) {
    const ls_tensor *cur = dy;
    for (int i = m->n_children - 1; i >= 0; i--) {
        ls_module *c = m->children[i];
        const ls_tensor *g = NULL;
        ls_status s = i < first ? ls_module_backward_frozen(c) : ls_module_backward(c, cur, i > first || want_dx, &g);
        if (s != LS_OK) return ls_error_context(s, "layer %d (%s) backward", i, c->vt->kind);
        /* the input gradient of a checkpointed segment after it, consumed: freed now, as the rest of
         * the segment's buffers (a plain layer keeps its buffers for the next step); not where this
         * layer's input gradient may be a view of it (a Reshape's): only after another segment,
         * whose input gradient is its own buffer, or a layer that gave none */
        ls_module *next = i + 1 < m->n_children ? m->children[i + 1] : NULL;
        if (next && next->vt == &ckpt_vt && next->dx == cur && (c->vt == &ckpt_vt || !g)) {
            ls_tensor_destroy(next->dx);
            next->dx = NULL;
            cur = NULL;
        }
        if (g) cur = g;
        if (m->hook)
            for (int p = c->n_params - 1; p >= 0; p--) LS_CHECK(m->hook(m->hook_user, m->child_first[i] + p));
    }
    if (dx) *dx = want_dx ? cur : NULL;
    return LS_OK;
}

static ls_status seq_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    /* the first layer with a parameter that needs a gradient: the layers up to it need no input
     * gradient, and those before it (the frozen prefix) get no gradient at all, only their
     * per-step state (a batch norm folds its next batch's statistics, a dropout counts its passes) */
    int first = 0;
    while (!want_dx && first < m->n_children && !ls_module_any_requires_grad(m->children[first])) first++;
    return seq_pass(m, dy, want_dx, first, dx);
}

/* every layer in the frozen prefix */
static ls_status seq_backward_frozen(ls_module *m) { return seq_pass(m, NULL, 0, m->n_children, NULL); }

static void seq_destroy(ls_module *m) {
    for (int i = 0; i < m->n_children; i++) ls_module_destroy_child(m->children[i]);
    free(m->children);
    free(m->child_first);
}

static const ls_module_vt seq_vt = {"Sequential", seq_forward, seq_backward, seq_destroy, NULL, seq_backward_frozen};

/* ls_sequential_create, or with names (not NULL) the parameters named names[0..] instead of
 * "<i>.<child's name>" (ls_checkpoint_sequential: the names of the container it replaces). */
static ls_status sequential_make(ls_ctx *ctx, int n, ls_module *const *children, char (*names)[LS_NAME_MAX],
                                 ls_module **out_m) {
    LS_CHECK_ARG(out_m && n >= 0 && (children || n == 0), "ls_sequential_create: %s",
                 !out_m  ? "out is NULL"
                 : n < 0 ? "a negative count of children"
                         : "children is NULL");
    *out_m = NULL;
    int total = 0;
    for (int i = 0; i < n; i++) {
        LS_CHECK_ARG(children[i], "ls_sequential_create: child %d is NULL", i);
        /* the container owns its children: one listed twice would be destroyed twice */
        for (int j = 0; j < i; j++)
            LS_CHECK_ARG(children[j] != children[i],
                         "ls_sequential_create: children %d and %d are the same module (a module can be in one "
                         "place: create another for the second)",
                         j, i);
        LS_CHECK(ls_module_check_free(children[i], "ls_sequential_create", i));
        total += children[i]->n_params;
        for (int p = 0; p < children[i]->n_params && !names; p++) {
            char nm[LS_NAME_MAX];
            if ((size_t)snprintf(nm, sizeof nm, "%d.%s", i, children[i]->names[p]) >= sizeof nm)
                return ls_error(LS_ERR_INVALID_ARGUMENT,
                                "ls_sequential_create: the parameter name '%d.%s' is longer than the %d bytes a "
                                "parameter's can be",
                                i, children[i]->names[p], LS_NAME_MAX - 1);
        }
    }
    ls_module *m;
    LS_CHECK(ls_module_alloc(ctx, &seq_vt, total, 0, &m));
    m->children = calloc((size_t)(n ? n : 1), sizeof *m->children);
    m->child_first = calloc((size_t)(n ? n : 1), sizeof *m->child_first);
    if (!m->children || !m->child_first) {
        ls_module_destroy(m);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a sequential container");
    }
    m->n_children = n;
    int k = 0;
    for (int i = 0; i < n; i++) {
        ls_module *c = children[i];
        m->children[i] = c;
        ls_module_adopt(m, c);
        m->child_first[i] = k;
        for (int p = 0; p < c->n_params; p++, k++) {
            m->params[k] = c->params[p];
            m->grads[k] = c->grads[p];
            if (names)
                memcpy(m->names[k], names[k], LS_NAME_MAX);
            else
                snprintf(m->names[k], LS_NAME_MAX, "%d.%s", i, c->names[p]);
        }
    }
    *out_m = m;
    return LS_OK;
}

ls_status ls_sequential_create(ls_ctx *ctx, int n, ls_module *const *children, ls_module **out_m) {
    return sequential_make(ctx, n, children, NULL, out_m);
}

ls_status ls_mlp_create(ls_ctx *ctx, ls_dtype dtype, int n_sizes, const int64_t *sizes, ls_act act, uint64_t seed,
                        ls_module **out_m) {
    return ls_mlp_create_dropout(ctx, dtype, n_sizes, sizes, act, 0, seed, out_m);
}

ls_status ls_mlp_create_dropout(ls_ctx *ctx, ls_dtype dtype, int n_sizes, const int64_t *sizes, ls_act act,
                                float dropout, uint64_t seed, ls_module **out_m) {
    LS_CHECK_ARG(ctx && sizes && out_m, "ls_mlp_create: %s is NULL", !ctx ? "ctx" : !sizes ? "sizes" : "out");
    if (n_sizes < 2) return ls_error(LS_ERR_INVALID_ARGUMENT, "an MLP needs at least 2 sizes, got %d", n_sizes);
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] < 1)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_mlp_create: sizes[%d] is %lld; every layer size must be >= 1",
                            i, (long long)sizes[i]);
    if (act != LS_ACT_RELU && act != LS_ACT_GELU) /* also where no hidden layer would use it */
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_mlp_create: unknown activation %d (LS_ACT_RELU or LS_ACT_GELU)",
                        (int)act);
    if (!(dropout >= 0 && dropout < 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "dropout probability %g is outside [0, 1)", dropout);
    const int with = dropout > 0;
    int n = (2 + with) * (n_sizes - 1) - 1 - with;
    ls_module **mods = calloc((size_t)n, sizeof *mods);
    if (!mods) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the MLP's layer list");
    ls_status s = LS_OK;
    int k = 0;
    for (int i = 0; i + 1 < n_sizes && s == LS_OK; i++) {
        s = ls_linear_create(ctx, dtype, sizes[i], sizes[i + 1], 1, seed + (uint64_t)i, "", &mods[k]);
        if (s != LS_OK) break;
        k++;
        if (i + 2 < n_sizes) {
            s = ls_activation_create(ctx, act, &mods[k]);
            if (s == LS_OK) k++;
            /* its stream: apart from the layers' init streams (seed + i) */
            if (s == LS_OK && with) s = ls_dropout_create(ctx, dropout, ~seed - (uint64_t)i, &mods[k]);
            if (s == LS_OK && with) k++;
        }
    }
    if (s == LS_OK) s = ls_sequential_create(ctx, n, mods, out_m);
    if (s != LS_OK)
        for (int i = 0; i < k; i++) ls_module_destroy(mods[i]);
    free(mods);
    return s;
}

/* ---- Dropout ---- */

static ls_status dropout_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    m->x = x;
    if (!m->training || m->p == 0) {
        *y = x;
        return LS_OK;
    }
    const ls_ops *ops = m->ctx->ops;
    if (!ops->mul || !ops->dropout_mask)
        return ls_error(LS_ERR_UNSUPPORTED, "dropout: the %s backend has no elementwise multiply or dropout mask",
                        ops->name);
    if (x->dtype != LS_F32 && x->dtype != LS_F64 && x->dtype != LS_F16 && x->dtype != LS_BF16)
        return ls_error(LS_ERR_UNSUPPORTED, "dropout: inputs must be f32, f64, f16 or bf16, not %s",
                        ls_dtype_name(x->dtype));
    int64_t n = ls_tensor_numel(x), rows = x->ndim > 0 ? x->shape[0] : 1, per = rows > 0 ? n / rows : 0;
    if (m->keyed && rows != m->key_n)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "dropout: its masks are keyed to %lld samples (ls_module_key_dropout) but the batch has %lld",
                        (long long)m->key_n, (long long)rows);
    LS_CHECK(ls_module_ensure(m->ctx, &m->y, x->dtype, x->ndim, x->shape, "dropout output"));
    LS_CHECK(ls_module_ensure(m->ctx, &m->mask, x->dtype, x->ndim, x->shape, "dropout mask"));
    /* One stream keyed by the number of backward passes so far, or (keyed) one per row keyed by
     * its sample and the step: a forward recomputed before the next backward (activation
     * checkpointing) draws exactly the same mask. A draw is kept where its top 24 bits, as a
     * fraction, are >= p (ls_rng_uniform(r) >= p). */
    uint64_t one, *keys = &one;
    if (m->keyed) {
        keys = malloc((size_t)rows * sizeof *keys + 1);
        if (!keys) return ls_error(LS_ERR_OUT_OF_MEMORY, "dropout: no memory for %lld row keys", (long long)rows);
        ls_rng k, r; /* a row's draws: a function of (seed, step, sample) alone */
        ls_rng_init_stream(&k, m->seed, m->key_step);
        for (int64_t i = 0; i < rows; i++) {
            ls_rng_init_stream(&r, k.seed, (uint64_t)m->key_rows[i]);
            keys[i] = r.seed;
        }
    } else {
        ls_rng r;
        ls_rng_init_stream(&r, m->seed, m->backward_passes);
        one = r.seed;
        per = n;
        rows = 1;
    }
    const uint32_t thr = (uint32_t)ceil((double)m->p * 16777216.0);
    ls_status s =
        ops->dropout_mask(m->ctx->state, x->dtype, rows, per, keys, thr, 1.0 / (1.0 - (double)m->p), m->mask->data);
    if (keys != &one) free(keys);
    LS_CHECK(s);
    LS_CHECK(ops->mul(m->ctx->state, x->dtype, n, x->data, m->mask->data, m->y->data));
    *y = m->y;
    return LS_OK;
}

static ls_status dropout_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return ls_error(LS_ERR_INVALID_ARGUMENT, "dropout: backward called before forward");
    m->backward_passes++; /* want_dx: with none wanted ls_module_backward comes to dropout_backward_frozen */
    if (!m->training || m->p == 0) {
        if (dx) *dx = dy;
        return LS_OK;
    }
    LS_CHECK(ls_module_ensure(m->ctx, &m->dx, dy->dtype, dy->ndim, dy->shape, "dropout input gradient"));
    LS_CHECK(m->ctx->ops->mul(m->ctx->state, dy->dtype, ls_tensor_numel(dy), dy->data, m->mask->data, m->dx->data));
    if (dx) *dx = m->dx;
    return LS_OK;
}

/* in the frozen prefix: the pass counted, the next forward's mask keyed to it (no mask, input or
 * gradient read: in a checkpointed segment there is none) */
static ls_status dropout_backward_frozen(ls_module *m) {
    m->backward_passes++;
    return LS_OK;
}

/* p with the fewest digits that read back to the same float: 0.3, not 0.300000012 */
static void dropout_describe(const ls_module *m, char *buf, size_t n) {
    char v[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(v, sizeof v, "%.*g", digits, (double)m->p);
        if (strtof(v, NULL) == m->p) break;
    }
    snprintf(buf, n, "Dropout(p=%s)", v);
}

static const ls_module_vt dropout_vt = {"Dropout", dropout_forward,  dropout_backward,
                                        NULL,      dropout_describe, dropout_backward_frozen};

ls_status ls_module_key_dropout(ls_module *m, uint64_t step, const int64_t *rows, int64_t n) {
    LS_CHECK_ARG(m, "ls_module_key_dropout: the module is NULL");
    LS_CHECK_ARG(n >= 0 && (rows || n == 0), "ls_module_key_dropout: %lld sample ids at %p", (long long)n,
                 (const void *)rows);
    if (m->vt == &dropout_vt) {
        if (!rows) {
            m->keyed = 0;
            return LS_OK;
        }
        if (n > m->key_cap) {
            int64_t *k = realloc(m->key_rows, (size_t)n * sizeof *k);
            if (!k) return ls_error(LS_ERR_OUT_OF_MEMORY, "dropout: no memory for %lld sample ids", (long long)n);
            m->key_rows = k;
            m->key_cap = n;
        }
        if (n) memcpy(m->key_rows, rows, (size_t)n * sizeof *rows);
        m->key_n = n;
        m->key_step = step;
        m->keyed = 1;
    }
    for (int i = 0; i < m->n_children; i++) LS_CHECK(ls_module_key_dropout(m->children[i], step, rows, n));
    return LS_OK;
}

/* The Dropouts inside m in forward order: counts them in *n; returns the one numbered want (or NULL). */
static ls_module *dropouts(ls_module *m, int want, int *n) {
    if (m->vt == &dropout_vt && (*n)++ == want) return m;
    for (int i = 0; i < m->n_children; i++) {
        ls_module *d = dropouts(m->children[i], want, n);
        if (d) return d;
    }
    return NULL;
}

int ls_module_num_dropouts(const ls_module *m) {
    int n = 0;
    if (m) dropouts((ls_module *)m, -1, &n);
    return n;
}

uint64_t *ls_module_dropout_seed(ls_module *m, int i) {
    int n = 0;
    ls_module *d = m && i >= 0 ? dropouts(m, i, &n) : NULL;
    return d ? &d->seed : NULL;
}

ls_status ls_dropout_create(ls_ctx *ctx, float p, uint64_t seed, ls_module **out_m) {
    if (!(p >= 0 && p < 1)) return ls_error(LS_ERR_INVALID_ARGUMENT, "dropout probability %g is outside [0, 1)", p);
    LS_CHECK(ls_module_alloc(ctx, &dropout_vt, 0, 0, out_m));
    (*out_m)->p = p;
    (*out_m)->seed = seed;
    (*out_m)->training = 1;
    return LS_OK;
}

/* ---- Checkpoint (activation recomputation) ---- */
/* The field of a module in m's tree that owns t (its output or input gradient), or NULL. */
static ls_tensor **buffer_owner(ls_module *m, const ls_tensor *t) {
    if (m->y == t) return &m->y;
    if (m->dx == t) return &m->dx;
    for (int i = 0; i < m->n_children; i++) {
        ls_tensor **f = buffer_owner(m->children[i], t);
        if (f) return f;
    }
    return NULL;
}

/* Keep t, a buffer of the segment's inner modules, in *keep beyond release_buffers(inner): taken
 * over where an inner module owns it (*home, where not NULL, gets the field it was in), else
 * copied. A copy held the segment's output (and its input gradient) twice, and beside the
 * recomputed activations, so segments of one layer needed more memory than no checkpointing
 * (fashion_mlp --hidden 512: 86 MiB against 70 at batch 8192). */
static ls_status keep_buffer(ls_module *m, ls_tensor **keep, ls_module *inner, const ls_tensor *t, const char *what,
                             ls_tensor ***home) {
    ls_tensor **owner = buffer_owner(inner, t);
    if (home) *home = NULL;
    if (owner && (*owner)->alloc == m->ctx->alloc) {
        ls_tensor_destroy(*keep);
        *keep = *owner;
        *owner = NULL;
        if (home) *home = owner;
        return LS_OK;
    }
    LS_CHECK(ls_module_ensure(m->ctx, keep, t->dtype, t->ndim, t->shape, what));
    return ls_tensor_copy(m->ctx->alloc, *keep, t);
}

static ls_status ckpt_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    const ls_tensor *out;
    ls_module *in = m->children[0];
    ls_tensor_destroy(m->y); /* the last forward's output, valid until this one: not held beside the new */
    m->y = NULL;
    m->held = NULL;
    m->y_home = NULL;
    LS_CHECK(ls_module_forward(in, x, &out));
    m->x = x;
    if (m->keep_acts) { /* the last segment: its backward comes next, with these activations */
        m->held = out;
        *y = out;
        return LS_OK;
    }
    LS_CHECK(keep_buffer(m, &m->y, in, out, "checkpoint segment output", &m->y_home));
    release_buffers(in); /* keep only the segment's input (x) and its output (y) */
    *y = m->y;
    return LS_OK;
}

/* After the backward of a forward that kept its activations: the output it handed out moves to m
 * (the same tensor: the caller's pointer stays valid until the next forward), then the layers'
 * buffers go as a recomputed segment's do. An output of another allocator than m's cannot be
 * moved: the layers then keep their buffers, as a plain Sequential's. */
static void release_held(ls_module *m, ls_module *in) {
    ls_tensor **owner = buffer_owner(in, m->held);
    m->held = NULL;
    if (owner && (*owner)->alloc != m->ctx->alloc) return;
    if (owner) {
        m->y = *owner;
        *owner = NULL;
    }
    release_buffers(in);
}

static ls_status ckpt_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!m->x) return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint: backward called before forward");
    ls_module *in = m->children[0];
    const ls_tensor *out = NULL, *g = NULL;
    ls_tensor_destroy(m->dx); /* the last backward's input gradient, used since */
    m->dx = NULL;
    /* recompute the segment's activations, unless its forward kept them (the last segment); the
     * output it keeps goes back to the layer it came from, which writes the same values into it
     * (the segment after this one, which read it, is done: backward runs the other way) */
    if (!m->held) {
        if (m->y_home && !*m->y_home) {
            *m->y_home = m->y;
            m->y = NULL;
        }
        LS_CHECK(ls_module_forward(in, m->x, &out));
    }
    LS_CHECK(ls_module_backward(in, dy, want_dx, &g));
    /* the output back from its layer, whose backward may have read it (a ReLU's) */
    if (!m->held && !m->y) LS_CHECK(keep_buffer(m, &m->y, in, out, "checkpoint segment output", &m->y_home));
    if (want_dx && g) LS_CHECK(keep_buffer(m, &m->dx, in, g, "checkpoint input gradient", NULL));
    if (m->held)
        release_held(m, in);
    else
        release_buffers(in);
    if (dx) *dx = want_dx ? m->dx : NULL;
    return LS_OK;
}

/* A segment in the frozen prefix: not recomputed, as nothing in it computes a gradient; its layers'
 * per-step state alone, which needs no activation. */
static ls_status ckpt_backward_frozen(ls_module *m) {
    ls_tensor_destroy(m->dx); /* the last backward's input gradient */
    m->dx = NULL;
    LS_CHECK(ls_module_backward_frozen(m->children[0]));
    if (m->held) release_held(m, m->children[0]);
    return LS_OK;
}

static void ckpt_destroy(ls_module *m) {
    ls_module_destroy_child(m->children[0]);
    free(m->children);
}

static const ls_module_vt ckpt_vt = {"Checkpoint", ckpt_forward, ckpt_backward,
                                     ckpt_destroy, NULL,         ckpt_backward_frozen};

ls_status ls_checkpoint_create(ls_ctx *ctx, ls_module *inner, ls_module **out_m) {
    LS_CHECK_ARG(inner && out_m, "ls_checkpoint_create: %s is NULL", !inner ? "the module" : "out");
    LS_CHECK(ls_module_check_free(inner, "ls_checkpoint_create", 0));
    ls_module *m;
    LS_CHECK(ls_module_alloc(ctx, &ckpt_vt, inner->n_params, 0, &m));
    m->children = calloc(1, sizeof *m->children);
    if (!m->children) {
        ls_module_destroy(m);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a checkpoint wrapper");
    }
    m->children[0] = inner;
    ls_module_adopt(m, inner);
    m->n_children = 1;
    for (int p = 0; p < inner->n_params; p++) {
        m->params[p] = inner->params[p];
        m->grads[p] = inner->grads[p];
        memcpy(m->names[p], inner->names[p], LS_NAME_MAX);
    }
    *out_m = m;
    return LS_OK;
}

ls_status ls_checkpoint_sequential(ls_module *seq, int segments, ls_module **out_m) {
    LS_CHECK_ARG(seq && out_m, "ls_checkpoint_sequential: %s is NULL", !seq ? "the module" : "out");
    if (seq->vt != &seq_vt)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "checkpoint_sequential needs a Sequential, got %s", seq->vt->kind);
    /* a trainer keeps its model: the container consumed here would be freed under it */
    if (seq->trainers > 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_checkpoint_sequential: the model is held by a trainer (ls_trainer_create), which would go "
                        "on with the container this call replaces: wrap the model before making the trainer (or "
                        "destroy the trainer first and make a new one for the wrapped model)");
    if (seq->emas > 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_checkpoint_sequential: the model is held by an EMA of its weights (ls_ema_create), which "
                        "holds the container this call replaces: wrap the model before making the EMA");
    /* consumed here, it would stay in its container's list, freed */
    if (seq->parent)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_checkpoint_sequential: the Sequential is inside a %s, which owns it: wrap it before "
                        "putting it in the container",
                        seq->parent->vt->kind);
    int n = seq->n_children;
    if (segments < 1 || segments > n)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "cannot split %d layer%s into %d checkpoint segments (at most %d)%s",
                        n, n == 1 ? "" : "s", segments, n,
                        n == 1 ? ": a single layer keeps no activations between layers to recompute" : "");
    ls_ctx *ctx = seq->ctx;
    ls_module **segs = calloc((size_t)segments, sizeof *segs);
    if (!segs) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the segment list");
    ls_status s = LS_OK;
    int made = 0, start = 0;
    /* the layers go to the segments: free of seq for sequential_make, given back to it on error */
    for (int i = 0; i < n; i++) seq->children[i]->parent = NULL;
    /* torch.utils.checkpoint.checkpoint_sequential: equal segments, the last takes the rest */
    int per = n / segments;
    for (int k = 0; k < segments && s == LS_OK; k++) {
        int end = k == segments - 1 ? n : start + per;
        ls_module *inner;
        /* the original parameter names ("<layer>.weight"), not ones composed anew: a name as long as
         * a name can be was refused with a segment's index put before it */
        s = sequential_make(ctx, end - start, seq->children + start, seq->names + seq->child_first[start], &inner);
        if (s == LS_OK) {
            s = ls_checkpoint_create(ctx, inner, &segs[k]);
            if (s != LS_OK) {
                inner->n_children = 0; /* the layers still belong to seq */
                module_free(inner);
            } else {
                /* the last segment is not recomputed: its backward follows its forward at once, so
                 * recomputing it would hold the same activations at the same time, later */
                segs[k]->keep_acts = k == segments - 1;
                made++;
            }
        }
        start = end;
    }
    /* into a variable of its own: out_m may point to the caller's seq (the guide's
     * ls_checkpoint_sequential(model, k, &model)), which an error leaves as it was */
    ls_module *wrapped = NULL;
    if (s == LS_OK) s = sequential_make(ctx, segments, segs, seq->names, &wrapped);
    if (s != LS_OK) {
        for (int k = 0; k < made; k++) {
            segs[k]->children[0]->n_children = 0;
            module_free(segs[k]);
        }
        free(segs);
        for (int i = 0; i < n; i++) seq->children[i]->parent = seq;
        return s;
    }
    free(segs);
    /* the layers now belong to the segments: dismantle the old container without them */
    wrapped->hook = seq->hook;
    wrapped->hook_user = seq->hook_user;
    /* not ls_module_destroy: its parameters, which an optimizer may hold, live on in wrapped */
    seq->n_children = 0;
    module_free(seq);
    *out_m = wrapped;
    return LS_OK;
}

void ls_module_set_training(ls_module *m, int training) {
    if (!m) return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++) ls_module_set_training(m->children[i], training);
}

const char *ls_module_kind(const ls_module *m) { return m ? m->vt->kind : "?"; }

int ls_module_num_children(const ls_module *m) { return m ? m->n_children : 0; }

ls_module *ls_module_child(ls_module *m, int i) { return m && i >= 0 && i < m->n_children ? m->children[i] : NULL; }

int ls_module_training_get(const ls_module *m, unsigned char *flags) {
    int n = 1;
    if (flags) flags[0] = (unsigned char)(m->training != 0);
    for (int i = 0; i < m->n_children; i++) n += ls_module_training_get(m->children[i], flags ? flags + n : NULL);
    return n;
}

int ls_module_training_put(ls_module *m, const unsigned char *flags) {
    int n = 1;
    m->training = flags[0];
    for (int i = 0; i < m->n_children; i++) n += ls_module_training_put(m->children[i], flags + n);
    return n;
}

/* ---- generic ---- */
/* A span of the timeline per module and pass (host time: on a GPU, the time to queue its work). */
static void module_span(const ls_module *m, const char *pass, double t0) {
    char name[64];
    snprintf(name, sizeof name, "%s %s", m->vt->kind, pass);
    ls_timeline_span(name, "module", t0, ls_timeline_now());
}

ls_status ls_module_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y) {
    LS_CHECK_ARG(m && x && y, "ls_module_forward: %s is NULL", !m ? "the module" : !x ? "the input" : "y");
    if (!ls_timeline_active()) return m->vt->forward(m, x, y);
    double t0 = ls_timeline_now();
    ls_status s = m->vt->forward(m, x, y);
    module_span(m, "forward", t0);
    return s;
}

static ls_status module_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    if (!want_dx && !ls_module_any_requires_grad(m)) { /* nothing to compute in m: no gradient for it */
        if (dx) *dx = NULL;
        return ls_module_backward_frozen(m);
    }
    if (m->vt != &seq_vt && m->hook) {
        LS_CHECK(m->vt->backward(m, dy, want_dx, dx));
        for (int p = m->n_params - 1; p >= 0; p--) LS_CHECK(m->hook(m->hook_user, p));
        return LS_OK;
    }
    return m->vt->backward(m, dy, want_dx, dx);
}

ls_status ls_module_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx) {
    LS_CHECK_ARG(m && dy, "ls_module_backward: %s is NULL", !m ? "the module" : "the output gradient");
    if (!ls_timeline_active()) return module_backward(m, dy, want_dx, dx);
    double t0 = ls_timeline_now();
    ls_status s = module_backward(m, dy, want_dx, dx);
    module_span(m, "backward", t0);
    return s;
}

ls_status ls_module_backward_frozen(ls_module *m) {
    LS_CHECK_ARG(m, "ls_module_backward_frozen: the module is NULL");
    const int span = ls_timeline_active();
    double t0 = span ? ls_timeline_now() : 0;
    if (m->vt->backward_frozen) LS_CHECK(m->vt->backward_frozen(m));
    if (m->vt != &seq_vt && m->hook) /* as module_backward: a Sequential fires its layers' */
        for (int p = m->n_params - 1; p >= 0; p--) LS_CHECK(m->hook(m->hook_user, p));
    if (span) module_span(m, "backward (frozen)", t0);
    return LS_OK;
}

/* The module without children below m (m itself if it has none) that holds m's parameter i, and
 * the parameter's index there in *at. Containers list their layers' parameters in the layers'
 * order: each level looks there first, then searches. */
static ls_module *param_home(ls_module *m, int i, int *at) {
    while (m->n_children > 0) {
        const ls_tensor *p = m->params[i];
        ls_module *next = NULL;
        int j = -1;
        for (int c = 0, k = 0; c < m->n_children && !next; k += m->children[c++]->n_params)
            if (i >= k && i - k < m->children[c]->n_params && m->children[c]->params[i - k] == p)
                next = m->children[c], j = i - k;
        for (int c = 0; c < m->n_children && !next; c++)
            for (int q = 0; q < m->children[c]->n_params && !next; q++)
                if (m->children[c]->params[q] == p) next = m->children[c], j = q;
        if (!next) break; /* a container's own parameter */
        m = next;
        i = j;
    }
    *at = i;
    return m;
}

ls_status ls_module_set_requires_grad(ls_module *m, int i, int requires_grad) {
    LS_CHECK_ARG(m, "ls_module_set_requires_grad: the module is NULL");
    LS_CHECK_ARG(i >= -1 && i < m->n_params,
                 "ls_module_set_requires_grad: parameter %d of a %s with %d parameter%s (-1: all of them)", i,
                 m->vt->kind, m->n_params, m->n_params == 1 ? "" : "s");
    for (int k = i < 0 ? 0 : i; k < (i < 0 ? m->n_params : i + 1); k++) {
        int at;
        ls_module *home = param_home(m, k, &at);
        home->no_grad[at] = !requires_grad;
    }
    return LS_OK;
}

int ls_module_requires_grad(const ls_module *m, int i) {
    if (!m || i < 0 || i >= m->n_params) return -1;
    int at;
    const ls_module *home = param_home((ls_module *)m, i, &at);
    return !home->no_grad[at];
}

int ls_module_any_requires_grad(const ls_module *m) {
    if (m->n_children == 0) {
        for (int i = 0; i < m->n_params; i++)
            if (!m->no_grad[i]) return 1;
        return 0;
    }
    for (int c = 0; c < m->n_children; c++)
        if (ls_module_any_requires_grad(m->children[c])) return 1;
    return 0;
}

int ls_module_num_params(const ls_module *m) { return m ? m->n_params : 0; }
ls_tensor *ls_module_param(ls_module *m, int i) { return m && i >= 0 && i < m->n_params ? m->params[i] : NULL; }
ls_tensor *ls_module_grad(ls_module *m, int i) { return m && i >= 0 && i < m->n_params ? m->grads[i] : NULL; }
const char *ls_module_param_name(const ls_module *m, int i) {
    return m && i >= 0 && i < m->n_params ? m->names[i] : NULL;
}
static int layers_walk(const ls_module *m, char (*out)[LS_LAYER_DESC_MAX], int max, int at) {
    if (!m) return at;
    const char *kind = m->vt->kind;
    /* and a Cast (mixed precision, compared as the precision) */
    const int flat = m->vt == &seq_vt || m->vt == &ckpt_vt || !strcmp(kind, "Cast");
    if (!flat) {
        if (at < max) {
            char d[LS_LAYER_DESC_MAX - 1] = "";
            if (m->vt->describe) m->vt->describe(m, d, sizeof d);
            snprintf(out[at], sizeof out[at], "%s%s", d[0] ? d : kind, m->n_children > 0 ? "[" : "");
        }
        at++;
    }
    for (int i = 0; i < m->n_children; i++) {
        if (!flat && i > 0) {
            if (at < max) snprintf(out[at], sizeof out[at], "|");
            at++;
        }
        at = layers_walk(m->children[i], out, max, at);
    }
    if (!flat && m->n_children > 0) {
        if (at < max) snprintf(out[at], sizeof out[at], "]");
        at++;
    }
    return at;
}

int ls_module_layers(const ls_module *m, char (*out)[LS_LAYER_DESC_MAX], int max) {
    return layers_walk(m, out, out ? max : 0, 0);
}

int64_t ls_module_num_elements(const ls_module *m) {
    int64_t n = 0;
    for (int i = 0; m && i < m->n_params; i++) n += ls_tensor_numel(m->params[i]);
    return n;
}

ls_status ls_module_zero_grad(ls_module *m) {
    LS_CHECK_ARG(m, "ls_module_zero_grad: the module is NULL");
    return ls_op_zero_many(m->ctx, m->n_params, m->grads); /* on a GPU, multi-tensor launches */
}

void ls_module_set_grad_hook(ls_module *m, ls_grad_hook hook, void *user) {
    if (!m) return;
    m->hook = hook;
    m->hook_user = user;
}

/* ---- loss ---- */
struct ls_xent {
    ls_ctx *ctx;
    ls_tensor *probs, *losses, *dlogits, *pred;
    const ls_tensor *labels;
    ls_dtype logit_dtype;
    double smoothing;     /* label smoothing of the next forward */
    double fwd_smoothing; /* the last forward's, which its backward uses */
};

ls_status ls_xent_create(ls_ctx *ctx, ls_xent **out) {
    LS_CHECK_ARG(ctx && out, "ls_xent_create: %s is NULL", !ctx ? "the context" : "out");
    *out = calloc(1, sizeof **out);
    if (!*out) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the loss");
    (*out)->ctx = ctx;
    ctx->live_losses++; /* ls_ctx_destroy refuses while it is alive */
    return LS_OK;
}

ls_status ls_xent_set_label_smoothing(ls_xent *l, double smoothing) {
    LS_CHECK_ARG(l, "ls_xent_set_label_smoothing: the loss is NULL");
    LS_CHECK_ARG(smoothing >= 0 && smoothing < 1, "label smoothing %g is not in [0, 1)", smoothing);
    l->smoothing = smoothing;
    return LS_OK;
}

void ls_xent_destroy(ls_xent *l) {
    if (!l) return;
    ls_tensor_destroy(l->probs);
    ls_tensor_destroy(l->losses);
    ls_tensor_destroy(l->dlogits);
    ls_tensor_destroy(l->pred);
    l->ctx->live_losses--;
    free(l);
}

ls_status ls_xent_forward(ls_xent *l, const ls_tensor *logits, const ls_tensor *labels, double *loss) {
    LS_CHECK_ARG(l && logits && labels, "ls_xent_forward: %s is NULL",
                 !l        ? "the loss"
                 : !logits ? "the logits"
                           : "the labels");
    ls_dtype t = logits->dtype == LS_F16 || logits->dtype == LS_BF16 ? LS_F32 : logits->dtype;
    LS_CHECK(ls_module_ensure(l->ctx, &l->probs, t, logits->ndim, logits->shape, "softmax probabilities"));
    LS_CHECK(ls_module_ensure(l->ctx, &l->losses, t, 1, logits->shape, "per-sample losses"));
    l->logit_dtype = logits->dtype;
    LS_CHECK(ls_op_xent_forward_smooth(l->ctx, logits, labels, l->smoothing, l->probs, l->losses, loss));
    l->labels = labels;
    l->fwd_smoothing = l->smoothing;
    return LS_OK;
}

ls_status ls_xent_backward(ls_xent *l, double scale, const ls_tensor **dlogits) {
    return ls_xent_backward_num(l, scale, NULL, dlogits);
}

ls_status ls_xent_backward_num(ls_xent *l, double scale, const double *scale_num, const ls_tensor **dlogits) {
    LS_CHECK_ARG(l && dlogits, "ls_xent_backward: %s is NULL", !l ? "the loss" : "dlogits");
    if (!l->labels) return ls_error(LS_ERR_INVALID_ARGUMENT, "loss backward called before forward");
    LS_CHECK(ls_module_ensure(l->ctx, &l->dlogits, l->logit_dtype, l->probs->ndim, l->probs->shape, "logit gradient"));
    LS_CHECK(ls_op_xent_backward_num(l->ctx, l->probs, l->labels, l->fwd_smoothing, scale, scale_num, l->dlogits));
    *dlogits = l->dlogits;
    return LS_OK;
}

ls_status ls_xent_correct(ls_xent *l, const ls_tensor *logits, const ls_tensor *labels, int64_t *correct) {
    LS_CHECK_ARG(l && logits && labels, "ls_xent_correct: %s is NULL",
                 !l        ? "the loss"
                 : !logits ? "the logits"
                           : "the labels");
    LS_CHECK(ls_module_ensure(l->ctx, &l->pred, LS_I32, 1, (int64_t[]){logits->shape[0] + 1}, "predictions"));
    return ls_op_accuracy(l->ctx, logits, labels, l->pred, correct);
}

double ls_xent_mean(ls_dtype dtype, const void *losses, int64_t count) {
    if ((count > 0 && !losses) || (dtype != LS_F32 && dtype != LS_F64)) return NAN;
    double sum = 0; /* the order and precision of ls_op_xent_forward's sum */
    for (int64_t i = 0; i < count; i++)
        sum += dtype == LS_F64 ? ((const double *)losses)[i] : ((const float *)losses)[i];
    return count ? sum / (double)count : 0.0;
}

ls_status ls_xent_download(ls_xent *l, int slot, void *host_losses, int32_t *host_correct, ls_dtype *dtype,
                           int64_t *count) {
    LS_CHECK_ARG(l && host_losses && dtype && count, "ls_xent_download: %s is NULL",
                 !l             ? "the loss"
                 : !host_losses ? "host_losses"
                                : "an output");
    if (!l->losses) return ls_error(LS_ERR_INVALID_ARGUMENT, "loss read before any forward");
    if (host_correct && !l->pred) return ls_error(LS_ERR_INVALID_ARGUMENT, "correct count read before ls_xent_correct");
    const ls_tensor *L = l->losses;
    ls_allocator *a = l->ctx->alloc;
    LS_CHECK(ls_allocator_download(a, slot, host_losses, L->data, ls_tensor_nbytes(L)));
    if (host_correct)
        LS_CHECK(ls_allocator_download(a, slot, host_correct, (int32_t *)l->pred->data + (l->pred->shape[0] - 1),
                                       sizeof(int32_t)));
    *dtype = L->dtype;
    *count = L->shape[0];
    return LS_OK;
}

ls_status ls_xent_read(ls_xent *l, double *mean_loss, int64_t *correct) {
    LS_CHECK_ARG(l, "ls_xent_read: the loss is NULL");
    if (mean_loss) {
        if (!l->losses) return ls_error(LS_ERR_INVALID_ARGUMENT, "loss read before any forward");
        const ls_tensor *L = l->losses;
        int64_t B = L->shape[0];
        const void *h = L->data;
        void *copy = NULL;
        if (L->device.type != LS_DEVICE_CPU) {
            copy = malloc(ls_tensor_nbytes(L) + 1);
            if (!copy) return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for the losses");
            ls_tensor ht = ls_tensor_view(copy, L->dtype, ls_device_cpu(), 1, L->shape);
            ls_status s = ls_tensor_copy(l->ctx->alloc, &ht, L);
            if (s != LS_OK) {
                free(copy);
                return s;
            }
            h = copy;
        }
        *mean_loss = ls_xent_mean(L->dtype, h, B);
        free(copy);
    }
    if (correct) {
        if (!l->pred) return ls_error(LS_ERR_INVALID_ARGUMENT, "correct count read before ls_xent_correct");
        int64_t B = l->pred->shape[0] - 1;
        int32_t c = 0;
        ls_tensor one = ls_tensor_view(&c, LS_I32, ls_device_cpu(), 1, (int64_t[]){1});
        ls_tensor src = ls_tensor_view((int32_t *)l->pred->data + B, LS_I32, l->pred->device, 1, (int64_t[]){1});
        LS_CHECK(ls_tensor_copy(l->ctx->alloc, &one, &src));
        *correct = c;
    }
    return LS_OK;
}
