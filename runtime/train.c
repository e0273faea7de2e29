/* train.c: the training step: gather a micro-batch (on the host, or on the device from a copy of
 * the data set kept there) into the device's input buffers (and cast it to f16/bf16 under mixed
 * precision), forward, loss (scaled for fp16), backward with the
 * reducer's gradient hook, unscale and inf/NaN check, clipping, optimizer step. */
#include "train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "log.h"

struct ls_trainer {
    ls_ctx *ctx;
    ls_comm *comm; /* NULL or world 1: no exchange */
    ls_module *model;
    ls_optimizer *opt;
    ls_train_config cfg;
    ls_xent *loss;
    ls_reducer *reducer;
    int64_t steps;
    int64_t cap;           /* rows the input buffers hold */
    float *hx;             /* host staging [cap, features] */
    int32_t *hy;
    ls_tensor *x, *y;      /* device copies */
    ls_tensor *xl;         /* the batch cast to f16/bf16 [cap, features] (mixed precision) */
    int n_params;
    ls_tensor **grads;
    ls_loss_scaler scaler;
    int64_t inject_step;   /* LOCKSTEP_AMP_INJECT_INF: step and rank; -1 off */
    int inject_rank;
    int data_mode;         /* LOCKSTEP_DATA_ON_DEVICE: DATA_AUTO, DATA_ON, DATA_OFF */
    struct dev_data {      /* data sets copied to the device, by ls_dataset.id (0: empty slot) */
        uint64_t id;
        int64_t n, features;
        void *images, *labels;
        uint64_t used;     /* for replacing the least recently used */
    } dev[2];
    uint64_t dev_clock;
    uint64_t refused[2];   /* ids of sets that did not fit on the device (auto): kept on the host */
    int n_refused;
    int64_t *didx;         /* device copy of a micro-batch's indices */
    int64_t didx_cap;
};

enum { DATA_AUTO = 0, DATA_ON = 1, DATA_OFF = 2 };

static ls_status reducer_hook(void *user, int i) { return ls_reducer_grad_ready(user, i); }

/* Input buffers: device tensors (in the context's allocator) on a GPU or when the data set is
 * kept "on the device" of a CPU context (LOCKSTEP_DATA_ON_DEVICE=on); otherwise views of the host
 * staging buffers. */
static int uses_buffers(const ls_trainer *t) {
    return t->ctx->device.type != LS_DEVICE_CPU || t->data_mode == DATA_ON;
}

static void free_batch_buffers(ls_trainer *t) {
    if (uses_buffers(t)) {
        ls_tensor_destroy(t->x);
        ls_tensor_destroy(t->y);
    } else {
        free(t->x);
        free(t->y);
    }
    t->x = t->y = NULL;
}

static void dev_data_free(ls_trainer *t, struct dev_data *d) {
    if (d->images) ls_free(t->ctx->alloc, d->images);
    if (d->labels) ls_free(t->ctx->alloc, d->labels);
    memset(d, 0, sizeof *d);
}

void ls_trainer_destroy(ls_trainer *t) {
    if (!t) return;
    for (int i = 0; i < 2; i++) dev_data_free(t, &t->dev[i]);
    if (t->didx) ls_free(t->ctx->alloc, t->didx);
    ls_reducer_destroy(t->reducer);
    ls_xent_destroy(t->loss);
    free_batch_buffers(t);
    free(t->hx);
    free(t->hy);
    free(t->grads);
    ls_tensor_destroy(t->xl);
    if (t->model) ls_module_set_grad_hook(t->model, NULL, NULL);
    free(t);
}

ls_status ls_trainer_create(ls_ctx *ctx, ls_comm *comm, ls_module *model, ls_optimizer *opt,
                            const ls_train_config *cfg, ls_trainer **out) {
    *out = NULL;
    if (cfg->batch_per_rank < 1 || cfg->accum_steps < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch size (%lld) and accumulation steps (%d) must be >= 1",
                        (long long)cfg->batch_per_rank, cfg->accum_steps);
    ls_trainer *t = calloc(1, sizeof *t);
    if (!t) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer");
    t->ctx = ctx;
    t->comm = comm && ls_comm_world(comm) > 1 ? comm : NULL;
    t->model = model;
    t->opt = opt;
    t->cfg = *cfg;
    t->n_params = ls_module_num_params(model);
    ls_status s = LS_OK;
    t->grads = calloc((size_t)t->n_params, sizeof *t->grads);
    if (!t->grads) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer");
        goto fail;
    }
    for (int i = 0; i < t->n_params; i++) t->grads[i] = ls_module_grad(model, i);
    LS_CHECK_GOTO(ls_xent_create(ctx, &t->loss), s, fail);
    ls_loss_scaler_init(&t->scaler, cfg->precision == LS_PRECISION_FP16);
    t->inject_step = -1;
    const char *dm = getenv("LOCKSTEP_DATA_ON_DEVICE");
    if (!dm || !*dm || !strcmp(dm, "auto")) t->data_mode = DATA_AUTO;
    else if (!strcmp(dm, "on") || !strcmp(dm, "1")) t->data_mode = DATA_ON;
    else if (!strcmp(dm, "off") || !strcmp(dm, "0")) t->data_mode = DATA_OFF;
    else {
        s = ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_DATA_ON_DEVICE='%s': use auto, on or off", dm);
        goto fail;
    }
    const char *inj = getenv("LOCKSTEP_AMP_INJECT_INF");
    if (inj && *inj) {
        long long st = -1;
        int rk = -1;
        if (sscanf(inj, "%lld:%d", &st, &rk) < 1 || st < 0) {
            s = ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_AMP_INJECT_INF='%s' is not STEP[:RANK]", inj);
            goto fail;
        }
        t->inject_step = st;
        t->inject_rank = rk >= 0 ? rk : (comm ? ls_comm_world(comm) - 1 : 0);
    }
    if (t->comm) {
        ls_tensor **params = malloc((size_t)t->n_params * sizeof *params);
        const char **names = malloc((size_t)t->n_params * sizeof *names);
        if (!params || !names) {
            free(params);
            free(names);
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the parameter list");
            goto fail;
        }
        for (int i = 0; i < t->n_params; i++) {
            params[i] = ls_module_param(model, i);
            names[i] = ls_module_param_name(model, i);
        }
        s = ls_ddp_check_signature(t->comm, t->n_params, params, names);
        if (s == LS_OK) s = ls_ddp_broadcast_params(t->comm, t->n_params, params);
        if (s == LS_OK) s = ls_cnn_broadcast_buffers(t->comm, model); /* DDP's broadcast_buffers */
        free(params);
        free(names);
        if (s != LS_OK) goto fail;
        LS_CHECK_GOTO(ls_reducer_create(t->comm, ctx, t->n_params, t->grads, &cfg->buckets, &t->reducer), s, fail);
    }
    *out = t;
    return LS_OK;
fail:
    ls_trainer_destroy(t);
    return s;
}

int64_t ls_trainer_num_steps(const ls_trainer *t) { return t->steps; }

void ls_trainer_set_num_steps(ls_trainer *t, int64_t steps) { t->steps = steps; }

/* The device copy of data, made now if the policy keeps it on the device; NULL to gather on the
 * host. A failed allocation under auto falls back to the host (logged once per set). */
static ls_status device_data(ls_trainer *t, const ls_dataset *data, struct dev_data **out) {
    *out = NULL;
    if (t->data_mode == DATA_OFF || !t->ctx->ops->gather_rows) return LS_OK;
    if (data->id == 0) return LS_OK; /* a struct filled by hand: no identity to cache it by */
    if (t->data_mode == DATA_AUTO && t->ctx->device.type == LS_DEVICE_CPU) return LS_OK;
    for (int i = 0; i < 2; i++)
        if (t->dev[i].id == data->id && t->dev[i].n == data->n && t->dev[i].features == data->features) {
            t->dev[i].used = ++t->dev_clock;
            *out = &t->dev[i];
            return LS_OK;
        }
    for (int i = 0; i < 2; i++)
        if (t->refused[i] == data->id) return LS_OK; /* tried once: no allocation (and log) per step */
    size_t ib = (size_t)data->n * (size_t)data->features * sizeof(float), lb = (size_t)data->n * sizeof(int32_t);
    if (t->data_mode == DATA_AUTO) {
        ls_memory_stats ms;
        ls_allocator_stats(t->ctx->alloc, &ms);
        size_t most = (size_t)2 << 30;
        if (ms.cap_bytes && ms.cap_bytes / 4 < most) most = ms.cap_bytes / 4;
        if (ib + lb > most) return LS_OK;
    }
    struct dev_data *d = t->dev[0].used <= t->dev[1].used ? &t->dev[0] : &t->dev[1];
    dev_data_free(t, d);
    ls_status s = ls_alloc(t->ctx->alloc, ib ? ib : 1, "data set on the device (LOCKSTEP_DATA_ON_DEVICE)", &d->images);
    if (s == LS_OK) s = ls_alloc(t->ctx->alloc, lb ? lb : 1, "data set labels on the device", &d->labels);
    if (s == LS_OK && ib) s = ls_allocator_copy(t->ctx->alloc, d->images, 1, data->images, 0, ib);
    if (s == LS_OK && lb) s = ls_allocator_copy(t->ctx->alloc, d->labels, 1, data->labels, 0, lb);
    if (s != LS_OK) {
        dev_data_free(t, d);
        if (t->data_mode == DATA_ON) return s;
        LS_LOG_W("keeping the data set on the host (%.1f MiB did not fit on the device: %s)",
                 (double)(ib + lb) / 1048576.0, ls_last_error());
        t->refused[t->n_refused++ % 2] = data->id;
        return LS_OK;
    }
    d->id = data->id;
    d->n = data->n;
    d->features = data->features;
    d->used = ++t->dev_clock;
    LS_LOG_D("data set %llu (%lld samples, %.1f MiB) copied to the device", (unsigned long long)data->id,
             (long long)data->n, (double)(ib + lb) / 1048576.0);
    *out = d;
    return LS_OK;
}

/* x[0..n) and y[0..n) = the samples idx[0..n) of d, gathered on the device. */
static ls_status gather_on_device(ls_trainer *t, const ls_dataset *data, struct dev_data *d, const int64_t *idx,
                                  int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= data->n)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "sample index %lld is outside the data set of %lld samples",
                            (long long)idx[i], (long long)data->n);
    if (n > t->didx_cap) {
        if (t->didx) ls_free(t->ctx->alloc, t->didx);
        t->didx = NULL;
        t->didx_cap = 0;
        LS_CHECK(ls_alloc(t->ctx->alloc, (size_t)n * sizeof(int64_t), "batch indices", (void **)&t->didx));
        t->didx_cap = n;
    }
    LS_CHECK(ls_allocator_copy(t->ctx->alloc, t->didx, 1, idx, 0, (size_t)n * sizeof(int64_t)));
    const ls_ops *o = t->ctx->ops;
    LS_CHECK(o->gather_rows(t->ctx->state, sizeof(float), n, data->features, d->images, t->didx, t->x->data));
    return o->gather_rows(t->ctx->state, sizeof(int32_t), n, 1, d->labels, t->didx, t->y->data);
}

/* Make room for n rows and put the samples idx[0..n) into the input buffers. */
static ls_status load_batch(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t n) {
    struct dev_data *dd = NULL;
    LS_CHECK(device_data(t, data, &dd));
    if (n > t->cap || !t->x || t->x->shape[1] != data->features) {
        /* all or nothing: after a failure (an out-of-memory trial of --batch-size auto) the next
         * call starts again from no buffers */
        int64_t cap = n > t->cap ? n : t->cap;
        free(t->hx);
        free(t->hy);
        free_batch_buffers(t);
        t->cap = 0;
        t->hx = malloc((size_t)(cap * data->features) * sizeof(float) + 1);
        t->hy = malloc((size_t)cap * sizeof(int32_t) + 1);
        ls_status s = t->hx && t->hy ? LS_OK
                                     : ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for a batch of %lld", (long long)cap);
        if (s == LS_OK && uses_buffers(t)) {
            s = ls_tensor_create(t->ctx->alloc, LS_F32, 2, (int64_t[]){cap, data->features}, "input batch", &t->x);
            if (s == LS_OK) s = ls_tensor_create(t->ctx->alloc, LS_I32, 1, (int64_t[]){cap}, "label batch", &t->y);
        } else if (s == LS_OK) {
            t->x = malloc(sizeof *t->x);
            t->y = malloc(sizeof *t->y);
            if (!t->x || !t->y) s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for a batch view");
        }
        if (s != LS_OK) {
            free(t->hx);
            free(t->hy);
            t->hx = NULL;
            t->hy = NULL;
            free_batch_buffers(t);
            return s;
        }
        t->cap = cap;
    }
    if (uses_buffers(t)) {
        t->x->shape[0] = n; /* the buffers hold cap rows; use the first n */
        t->y->shape[0] = n;
    }
    if (dd) return gather_on_device(t, data, dd, idx, n);
    LS_CHECK(ls_dataset_gather(data, idx, n, t->hx, t->hy));
    ls_tensor hx = ls_tensor_view(t->hx, LS_F32, ls_device_cpu(), 2, (int64_t[]){n, data->features});
    ls_tensor hy = ls_tensor_view(t->hy, LS_I32, ls_device_cpu(), 1, (int64_t[]){n});
    if (!uses_buffers(t)) {
        *t->x = hx;
        *t->y = hy;
        return LS_OK;
    }
    LS_CHECK(ls_tensor_copy(t->ctx->alloc, t->x, &hx));
    return ls_tensor_copy(t->ctx->alloc, t->y, &hy);
}

/* The model's input: the batch itself, or its f16/bf16 cast under mixed precision. */
static ls_status model_input(ls_trainer *t, const ls_tensor **in) {
    ls_dtype lt = ls_precision_dtype(t->cfg.precision);
    if (lt == LS_F32) {
        *in = t->x;
        return LS_OK;
    }
    if (!t->xl || t->xl->shape[1] != t->x->shape[1] || t->xl->shape[0] < t->x->shape[0]) {
        ls_tensor_destroy(t->xl);
        t->xl = NULL;
        LS_CHECK(ls_tensor_create(t->ctx->alloc, lt, 2, (int64_t[]){t->cap, t->x->shape[1]}, "low-precision input batch",
                                  &t->xl));
    }
    t->xl->shape[0] = t->x->shape[0];
    LS_CHECK(ls_op_convert(t->ctx, t->x, t->xl));
    *in = t->xl;
    return LS_OK;
}

ls_loss_scaler *ls_trainer_loss_scaler(ls_trainer *t) { return &t->scaler; }

/* Test hook: an inf in one gradient element on one rank, after the exchange. */
static ls_status inject_inf(ls_trainer *t) {
    int rank = t->comm ? ls_comm_rank(t->comm) : 0;
    if (t->steps != t->inject_step || rank != t->inject_rank) return LS_OK;
    float inf = 1.0f / 0.0f;
    ls_tensor *g = t->grads[0];
    ls_tensor one = ls_tensor_view(&inf, LS_F32, ls_device_cpu(), 1, (int64_t[]){1});
    ls_tensor dst = ls_tensor_view(g->data, LS_F32, g->device, 1, (int64_t[]){1});
    LS_LOG_W("LOCKSTEP_AMP_INJECT_INF: an inf gradient on rank %d at step %lld", rank, (long long)t->steps);
    return ls_tensor_copy(t->ctx->alloc, &dst, &one);
}

/* Adds the last micro-batch's (n samples) loss and correct count to st. */
static ls_status read_loss(ls_trainer *t, int64_t n, ls_step_stats *st) {
    double mean_loss;
    int64_t correct;
    LS_CHECK(ls_xent_read(t->loss, &mean_loss, &correct));
    st->loss_sum += mean_loss * (double)n;
    st->correct += correct;
    st->samples += n;
    return LS_OK;
}

ls_status ls_trainer_step(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                          int64_t global_count, ls_step_stats *stats) {
    int64_t b = t->cfg.batch_per_rank;
    int accum = t->cfg.accum_steps;
    if (count < 0 || count > b * accum)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "step of %lld samples exceeds %d micro-batches of %lld",
                        (long long)count, accum, (long long)b);
    if (global_count < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "a step needs at least one sample");
    ls_step_stats st;
    memset(&st, 0, sizeof st);
    st.global_samples = global_count;
    LS_CHECK(ls_module_zero_grad(t->model));
    st.loss_scale = t->scaler.scale;
    double scale = t->scaler.scale / (double)global_count;
    int64_t pending = 0; /* samples of the last micro-batch whose loss and count are still to read */
    for (int k = 0; k < accum; k++) {
        int last = k == accum - 1;
        int64_t lo = k * b, hi = lo + b < count ? lo + b : count;
        int64_t n = hi > lo ? hi - lo : 0;
        if (last && t->reducer) {
            LS_CHECK(ls_reducer_begin(t->reducer, 1.0));
            ls_module_set_grad_hook(t->model, reducer_hook, t->reducer);
        }
        if (n > 0) {
            LS_CHECK(load_batch(t, data, idx + lo, n));
            const ls_tensor *in, *logits, *dlogits;
            LS_CHECK(model_input(t, &in));
            LS_CHECK(ls_module_forward(t->model, in, &logits));
            /* loss and count stay on the device until the work after them is queued: a GPU runs
             * forward, backward (and, on the last micro-batch, the optimizer) without a wait */
            LS_CHECK(ls_xent_forward(t->loss, logits, t->y, NULL));
            LS_CHECK(ls_xent_correct(t->loss, logits, t->y, NULL));
            LS_CHECK(ls_xent_backward(t->loss, scale, &dlogits));
            LS_CHECK(ls_module_backward(t->model, dlogits, 0, NULL));
            if (last) pending = n;
            else LS_CHECK(read_loss(t, n, &st));
        }
        if (last && t->reducer) {
            ls_module_set_grad_hook(t->model, NULL, NULL);
            LS_CHECK(ls_reducer_finish(t->reducer)); /* grads never marked ready (no samples) count as ready */
        }
    }
    if (t->inject_step >= 0) LS_CHECK(inject_inf(t));
    if (t->cfg.precision != LS_PRECISION_FP32 || t->inject_step >= 0) {
        /* GradScaler: unscale (fp16), then skip the step on every rank if any rank saw inf/NaN */
        int found_inf = 0;
        LS_CHECK(ls_loss_scaler_unscale(&t->scaler, t->ctx, t->comm, t->n_params, t->grads, &found_inf));
        st.skipped = found_inf;
        ls_loss_scaler_update(&t->scaler, found_inf);
    }
    st.lr = ls_lr_at(&t->cfg.lr, t->steps);
    if (!st.skipped) {
        if (t->cfg.clip_grad_norm > 0) /* on unscaled gradients */
            LS_CHECK(ls_clip_grad_norm(t->ctx, t->n_params, t->grads, t->cfg.clip_grad_norm, &st.grad_norm));
        LS_CHECK(ls_optimizer_step(t->opt, st.lr));
    }
    if (pending) LS_CHECK(read_loss(t, pending, &st));
    t->steps++;
    if (stats) *stats = st;
    return LS_OK;
}

ls_status ls_trainer_evaluate(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                              double *loss_sum, int64_t *correct) {
    int64_t chunk = t->cfg.batch_per_rank * t->cfg.accum_steps;
    if (chunk < 256) chunk = 256;
    *loss_sum = 0;
    *correct = 0;
    ls_status s = LS_OK;
    ls_module_set_training(t->model, 0); /* dropout off */
    for (int64_t lo = 0; lo < count && s == LS_OK; lo += chunk) {
        int64_t n = count - lo < chunk ? count - lo : chunk;
        const ls_tensor *in, *logits;
        double mean_loss;
        int64_t c = 0;
        s = load_batch(t, data, idx + lo, n);
        if (s == LS_OK) s = model_input(t, &in);
        if (s == LS_OK) s = ls_module_forward(t->model, in, &logits);
        if (s == LS_OK) s = ls_xent_forward(t->loss, logits, t->y, &mean_loss);
        if (s == LS_OK) s = ls_xent_correct(t->loss, logits, t->y, &c);
        if (s == LS_OK) {
            *loss_sum += mean_loss * (double)n;
            *correct += c;
        }
    }
    ls_module_set_training(t->model, 1);
    return s;
}
