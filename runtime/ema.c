/* ema.c: the exponential moving average of a model's weights, through the backend's scale and
 * axpy entries (ema *= d; ema += (1 - d) * value), so on a GPU it stays on the compute stream. */
#include "ema.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "nn_impl.h"

struct ls_ema {
    ls_ctx *ctx;
    ls_module *model; /* counted in model->emas: ls_module_destroy refuses to free it before this */
    double decay;
    int warmup;
    int64_t updates;
    int n;           /* parameters, then buffers */
    ls_tensor **src; /* the model's tensors */
    ls_tensor **avg; /* the averages (owned) */
};

double ls_ema_decay_at(double decay, int warmup, int64_t t) {
    if (t <= 1) return 0; /* the first update copies, as timm's (get_decay(1)) and AveragedModel's */
    if (!warmup) return decay;
    double d = 1.0 - pow((double)t, -2.0 / 3.0);
    return d < decay ? (d > 0 ? d : 0) : decay;
}

void ls_ema_destroy(ls_ema *e) {
    if (!e) return;
    if (e->model) {
        e->model->emas--;
        e->ctx->live_emas--;
    }
    for (int i = 0; i < e->n; i++) ls_tensor_destroy(e->avg ? e->avg[i] : NULL);
    free(e->avg);
    free(e->src);
    free(e);
}

ls_status ls_ema_create(ls_ctx *ctx, ls_module *model, double decay, int warmup, ls_ema **out) {
    LS_CHECK_ARG(ctx && model && out, "ls_ema_create: %s is NULL", !ctx ? "the context" : !model ? "the model" : "out");
    *out = NULL;
    LS_CHECK_ARG(decay >= 0 && decay < 1, "the EMA's decay %g is not in [0, 1)", decay);
    LS_CHECK_ARG(ctx->ops && ctx->ops->scale && ctx->ops->axpy, "the EMA needs the backend's scale and axpy");
    int np = ls_module_num_params(model), nb = ls_cnn_num_buffers(model);
    ls_ema *e = calloc(1, sizeof *e);
    if (e) {
        e->src = calloc((size_t)(np + nb) + 1, sizeof *e->src);
        e->avg = calloc((size_t)(np + nb) + 1, sizeof *e->avg);
    }
    if (!e || !e->src || !e->avg) {
        ls_ema_destroy(e);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for the EMA's lists");
    }
    e->ctx = ctx;
    e->decay = decay;
    e->warmup = warmup ? 1 : 0;
    ls_status s = LS_OK;
    for (int i = 0; i < np + nb && s == LS_OK; i++) {
        ls_tensor *t = i < np ? ls_module_param(model, i) : ls_cnn_buffer(model, i - np, NULL, 0);
        e->src[i] = t;
        s = ls_tensor_create(ctx->alloc, t->dtype, t->ndim, t->shape, "EMA of the weights", &e->avg[i]);
        if (s == LS_OK) {
            e->n = i + 1;
            s = ls_tensor_copy(ctx->alloc, e->avg[i], t);
        }
    }
    if (s != LS_OK) {
        ls_ema_destroy(e);
        return s;
    }
    e->model = model;
    model->emas++;
    ctx->live_emas++; /* ls_ctx_destroy refuses while it is alive */
    *out = e;
    return LS_OK;
}

ls_status ls_ema_update(ls_ema *e) {
    LS_CHECK_ARG(e, "ls_ema_update: NULL");
    double d = ls_ema_decay_at(e->decay, e->warmup, e->updates + 1);
    const ls_ops *ops = e->ctx->ops;
    for (int i = 0; i < e->n; i++) {
        ls_tensor *a = e->avg[i];
        int64_t n = ls_tensor_numel(a);
        LS_CHECK(ops->scale(e->ctx->state, a->dtype, n, d, a->data));
        LS_CHECK(ops->axpy(e->ctx->state, a->dtype, n, 1.0 - d, e->src[i]->data, a->data));
    }
    e->updates++;
    return LS_OK;
}

ls_status ls_ema_swap(ls_ema *e) {
    LS_CHECK_ARG(e, "ls_ema_swap: NULL");
    int big = 0;
    for (int i = 1; i < e->n; i++)
        if (ls_tensor_nbytes(e->avg[i]) > ls_tensor_nbytes(e->avg[big])) big = i;
    if (e->n == 0) return LS_OK;
    void *tmp;
    LS_CHECK(ls_alloc(e->ctx->alloc, ls_tensor_nbytes(e->avg[big]), "EMA swap (one tensor)", &tmp));
    ls_status s = LS_OK;
    for (int i = 0; i < e->n && s == LS_OK; i++) {
        ls_tensor *a = e->avg[i], *m = e->src[i];
        ls_tensor t = ls_tensor_view(tmp, a->dtype, a->device, a->ndim, a->shape);
        s = ls_tensor_copy(e->ctx->alloc, &t, m);
        if (s == LS_OK) s = ls_tensor_copy(e->ctx->alloc, m, a);
        if (s == LS_OK) s = ls_tensor_copy(e->ctx->alloc, a, &t);
    }
    ls_free(e->ctx->alloc, tmp);
    return s;
}

ls_status ls_ema_reset(ls_ema *e) {
    LS_CHECK_ARG(e, "ls_ema_reset: NULL");
    for (int i = 0; i < e->n; i++) LS_CHECK(ls_tensor_copy(e->ctx->alloc, e->avg[i], e->src[i]));
    e->updates = 0;
    return LS_OK;
}

double ls_ema_decay(const ls_ema *e) { return e ? e->decay : NAN; }
int ls_ema_warmup(const ls_ema *e) { return e ? e->warmup : 0; }
int64_t ls_ema_num_updates(const ls_ema *e) { return e ? e->updates : 0; }
void ls_ema_set_num_updates(ls_ema *e, int64_t t) {
    if (e && t >= 0) e->updates = t;
}
int ls_ema_num_tensors(const ls_ema *e) { return e ? e->n : 0; }
ls_tensor *ls_ema_tensor(ls_ema *e, int i) { return e && i >= 0 && i < e->n ? e->avg[i] : NULL; }
