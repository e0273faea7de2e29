/* ops.c: the compute context and the tensor-level op wrappers. Each wrapper checks devices,
 * dtypes and shapes (an error names the op and both shapes) and calls the context's op table. */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"

ls_status ls_ctx_create(ls_device dev, ls_allocator *host, ls_ctx **out) {
    char dn[32];
    LS_CHECK_ARG(out, "ls_ctx_create: out is NULL");
    *out = NULL;
    /* the GPU's settings, on any device: a job script's typo is found on the CPU it is tried on */
    int tf32;
    ls_gpu_memory_policy pol;
    LS_CHECK(ls_env_tf32(&tf32));
    LS_CHECK(ls_gpu_memory_policy_parse(getenv("LOCKSTEP_GPU_MEMORY"), &pol));
    const ls_ops *ops = ls_ops_for(dev.type);
    if (!ops)
        return ls_error(LS_ERR_DEVICE, "this build of lockstep has no backend for device '%s'",
                        ls_device_str(dev, dn, sizeof dn));
    ls_ctx *c = calloc(1, sizeof *c);
    if (!c) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate a context");
    c->device = dev;
    c->ops = ops;
    ls_status s;
    if (host) {
        c->host = host;
    } else {
        LS_CHECK_GOTO(ls_host_allocator_create_from_env(&c->host), s, fail);
        c->owns_host = 1;
    }
    LS_CHECK_GOTO(ops->init(dev, &c->state), s, fail);
    if (ops->allocator_create)
        LS_CHECK_GOTO(ops->allocator_create(c->state, dev, &c->alloc), s, fail);
    else
        c->alloc = c->host;
    *out = c;
    return LS_OK;
fail:
    if (c->state) ops->fini(c->state);
    if (c->owns_host) ls_allocator_destroy(c->host);
    free(c);
    return s;
}

void ls_ctx_destroy(ls_ctx *c) {
    if (!c) return;
    if (c->live_modules || c->live_losses || c->live_optimizers || c->live_trainers || c->live_emas) {
        /* freed, their destroys would free into a freed allocator and backend */
        ls_error(LS_ERR_INVALID_ARGUMENT,
                 "ls_ctx_destroy: objects made with this context are still alive (%d module%s, those inside containers "
                 "counted, %d loss%s, %d "
                 "optimizer%s, %d trainer%s, %d EMA%s): destroy them first (ls_trainer_destroy, ls_ema_destroy, "
                 "ls_optimizer_destroy, ls_module_destroy on each outermost module, ls_xent_destroy), then the "
                 "context; it is left as it is, not freed",
                 c->live_modules, c->live_modules == 1 ? "" : "s", c->live_losses, c->live_losses == 1 ? "" : "es",
                 c->live_optimizers, c->live_optimizers == 1 ? "" : "s", c->live_trainers,
                 c->live_trainers == 1 ? "" : "s", c->live_emas, c->live_emas == 1 ? "" : "s");
        LS_LOG_E("%s", ls_last_error());
        return;
    }
    if (c->alloc && c->alloc != c->host) ls_allocator_destroy(c->alloc);
    c->ops->fini(c->state);
    if (c->owns_host) ls_allocator_destroy(c->host);
    free(c);
}

ls_status ls_ctx_synchronize(ls_ctx *c) {
    LS_CHECK_ARG(c, "ls_ctx_synchronize: the context is NULL");
    return c->ops->synchronize(c->state);
}

void *ls_ctx_compute_stream(const ls_ctx *c) {
    return c && c->ops->compute_stream ? c->ops->compute_stream(c->state) : NULL;
}

/* ---- validation helpers ---- */
static ls_status on_ctx(ls_ctx *c, const char *op, const char *name, const ls_tensor *t) {
    char a[64], d[32];
    if (!t) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: tensor %s is missing", op, name);
    if (!ls_device_equal(t->device, c->device))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s but the context is on %s", op, name,
                        ls_tensor_describe(t, a, 64), ls_device_str(c->device, d, 32));
    return LS_OK;
}

static ls_status want(const char *op, const char *name, const ls_tensor *t, ls_dtype dt, int ndim, int64_t d0,
                      int64_t d1) {
    char a[64];
    int ok = t->dtype == dt && t->ndim == ndim && t->shape[0] == d0 && (ndim < 2 || t->shape[1] == d1);
    if (!ok) {
        if (ndim == 1)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected [%lld] %s", op, name,
                            ls_tensor_describe(t, a, 64), (long long)d0, ls_dtype_name(dt));
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected [%lld, %lld] %s", op, name,
                        ls_tensor_describe(t, a, 64), (long long)d0, (long long)d1, ls_dtype_name(dt));
    }
    return LS_OK;
}

/* Parameter gradients, softmax probabilities and losses stay f32 when activations are f16/bf16. */
static ls_dtype master(ls_dtype t) { return t == LS_F16 || t == LS_BF16 ? LS_F32 : t; }

static ls_status matrix(const char *op, const char *name, const ls_tensor *t) {
    char a[64];
    if (t->ndim != 2)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected a matrix", op, name,
                        ls_tensor_describe(t, a, 64));
    return LS_OK;
}

ls_status ls_op_linear_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *w, const ls_tensor *b, ls_tensor *y) {
    const char *op = "linear";
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "weight", w));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(matrix(op, "input", x));
    LS_CHECK(matrix(op, "weight", w));
    int64_t B = x->shape[0], in = x->shape[1], out = w->shape[0];
    LS_CHECK(want(op, "weight", w, x->dtype, 2, out, in));
    if (b) {
        LS_CHECK(on_ctx(c, op, "bias", b));
        LS_CHECK(want(op, "bias", b, x->dtype, 1, out, 0));
    }
    LS_CHECK(want(op, "output", y, x->dtype, 2, B, out));
    return c->ops->linear_fwd(c->state, x->dtype, B, in, out, x->data, w->data, b ? b->data : NULL, y->data);
}

ls_status ls_op_linear_backward(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *w, ls_tensor *dx,
                                ls_tensor *dw, ls_tensor *db) {
    const char *op = "linear backward";
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "weight", w));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(matrix(op, "input", x));
    LS_CHECK(matrix(op, "weight", w));
    int64_t B = x->shape[0], in = x->shape[1], out = w->shape[0];
    ls_dtype t = x->dtype;
    LS_CHECK(want(op, "weight", w, t, 2, out, in));
    LS_CHECK(want(op, "output gradient", dy, t, 2, B, out));
    if (dw) { /* NULL: a frozen weight (no weight-gradient GEMM) */
        LS_CHECK(on_ctx(c, op, "weight gradient", dw));
        LS_CHECK(want(op, "weight gradient", dw, master(t), 2, out, in));
    }
    if (dx) {
        LS_CHECK(on_ctx(c, op, "input gradient", dx));
        LS_CHECK(want(op, "input gradient", dx, t, 2, B, in));
    }
    if (db) {
        LS_CHECK(on_ctx(c, op, "bias gradient", db));
        LS_CHECK(want(op, "bias gradient", db, master(t), 1, out, 0));
    }
    return c->ops->linear_bwd(c->state, t, B, in, out, dy->data, x->data, w->data, dx ? dx->data : NULL,
                              dw ? dw->data : NULL, db ? db->data : NULL);
}

ls_status ls_op_bias_add(ls_ctx *c, const ls_tensor *b, ls_tensor *y) {
    const char *op = "bias add";
    LS_CHECK(on_ctx(c, op, "bias", b));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(matrix(op, "output", y));
    LS_CHECK(want(op, "bias", b, y->dtype, 1, y->shape[1], 0));
    return c->ops->bias_add(c->state, y->dtype, y->shape[0], y->shape[1], b->data, y->data);
}

ls_status ls_op_bias_grad(ls_ctx *c, const ls_tensor *dy, ls_tensor *db) {
    const char *op = "bias gradient";
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(on_ctx(c, op, "bias gradient", db));
    LS_CHECK(matrix(op, "output gradient", dy));
    LS_CHECK(want(op, "bias gradient", db, dy->dtype, 1, dy->shape[1], 0));
    return c->ops->bias_grad(c->state, dy->dtype, dy->shape[0], dy->shape[1], dy->data, db->data);
}

static ls_status same(const char *op, const char *name, const ls_tensor *t, const ls_tensor *ref) {
    char a[64], b[64];
    if (t->dtype != ref->dtype || !ls_tensor_same_shape(t, ref))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s but the input is %s", op, name,
                        ls_tensor_describe(t, a, 64), ls_tensor_describe(ref, b, 64));
    return LS_OK;
}

ls_status ls_op_act_forward(ls_ctx *c, ls_act act, const ls_tensor *x, ls_tensor *y) {
    const char *op = act == LS_ACT_RELU ? "relu" : "gelu";
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(same(op, "output", y, x));
    return c->ops->act_fwd(c->state, x->dtype, act, ls_tensor_numel(x), x->data, y->data);
}

ls_status ls_op_act_backward(ls_ctx *c, ls_act act, const ls_tensor *x, const ls_tensor *dy, ls_tensor *dx) {
    const char *op = act == LS_ACT_RELU ? "relu backward" : "gelu backward";
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(on_ctx(c, op, "input gradient", dx));
    LS_CHECK(same(op, "output gradient", dy, x));
    LS_CHECK(same(op, "input gradient", dx, x));
    return c->ops->act_bwd(c->state, x->dtype, act, ls_tensor_numel(x), x->data, dy->data, dx->data);
}

/* Labels must be in [0, C): checked on the host when they live there. */
static ls_status check_labels(const char *op, const ls_tensor *labels, int64_t B, int64_t C) {
    char a[64];
    if (labels->dtype != LS_I32 || labels->ndim != 1 || labels->shape[0] != B)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: labels are %s, expected [%lld] i32", op,
                        ls_tensor_describe(labels, a, 64), (long long)B);
    if (labels->device.type == LS_DEVICE_CPU) {
        const int32_t *l = labels->data;
        for (int64_t i = 0; i < B; i++)
            if (l[i] < 0 || l[i] >= C)
                return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: label %d of sample %lld is outside [0, %lld)", op, l[i],
                                (long long)i, (long long)C);
    }
    return LS_OK;
}

/* label smoothing in [0, 1), as torch.nn.CrossEntropyLoss's label_smoothing (which takes 1 too:
 * a target that ignores the label) */
static ls_status check_smoothing(const char *op, double smoothing) {
    if (smoothing >= 0 && smoothing < 1) return LS_OK;
    return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: label smoothing %g is not in [0, 1)", op, smoothing);
}

ls_status ls_op_xent_forward(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, ls_tensor *probs,
                             ls_tensor *losses, double *host_loss) {
    return ls_op_xent_forward_smooth(c, logits, labels, 0.0, probs, losses, host_loss);
}

ls_status ls_op_xent_forward_smooth(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, double smoothing,
                                    ls_tensor *probs, ls_tensor *losses, double *host_loss) {
    const char *op = "softmax cross-entropy";
    LS_CHECK(check_smoothing(op, smoothing));
    LS_CHECK(on_ctx(c, op, "logits", logits));
    LS_CHECK(on_ctx(c, op, "labels", labels));
    LS_CHECK(on_ctx(c, op, "probabilities", probs));
    LS_CHECK(on_ctx(c, op, "losses", losses));
    LS_CHECK(matrix(op, "logits", logits));
    int64_t B = logits->shape[0], C = logits->shape[1];
    if (C < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: logits have no classes", op);
    LS_CHECK(check_labels(op, labels, B, C));
    LS_CHECK(want(op, "probabilities", probs, master(logits->dtype), 2, B, C));
    LS_CHECK(want(op, "losses", losses, master(logits->dtype), 1, B, 0));
    LS_CHECK(c->ops->xent_fwd(c->state, logits->dtype, B, C, logits->data, labels->data, smoothing, probs->data,
                              losses->data));
    if (host_loss) {
        double sum = 0;
        if (losses->device.type == LS_DEVICE_CPU) {
            for (int64_t i = 0; i < B; i++)
                sum += losses->dtype == LS_F64 ? ((double *)losses->data)[i] : ((float *)losses->data)[i];
        } else {
            void *h = malloc(ls_tensor_nbytes(losses) + 1);
            if (!h) return ls_error(LS_ERR_OUT_OF_MEMORY, "%s: no host memory for the losses", op);
            ls_tensor ht = ls_tensor_view(h, losses->dtype, ls_device_cpu(), 1, losses->shape);
            ls_status s = ls_tensor_copy(c->alloc, &ht, losses);
            for (int64_t i = 0; s == LS_OK && i < B; i++)
                sum += losses->dtype == LS_F64 ? ((double *)h)[i] : ((float *)h)[i];
            free(h);
            LS_CHECK(s);
        }
        *host_loss = B ? sum / (double)B : 0.0;
    }
    return LS_OK;
}

ls_status ls_op_xent_backward(ls_ctx *c, const ls_tensor *probs, const ls_tensor *labels, double scale,
                              ls_tensor *dlogits) {
    return ls_op_xent_backward_num(c, probs, labels, 0.0, scale, NULL, dlogits);
}

ls_status ls_op_xent_backward_num(ls_ctx *c, const ls_tensor *probs, const ls_tensor *labels, double smoothing,
                                  double scale, const double *scale_num, ls_tensor *dlogits) {
    const char *op = "softmax cross-entropy backward";
    LS_CHECK(check_smoothing(op, smoothing));
    LS_CHECK(on_ctx(c, op, "probabilities", probs));
    LS_CHECK(on_ctx(c, op, "labels", labels));
    LS_CHECK(on_ctx(c, op, "logit gradient", dlogits));
    LS_CHECK(matrix(op, "probabilities", probs));
    int64_t B = probs->shape[0], C = probs->shape[1];
    LS_CHECK(check_labels(op, labels, B, C));
    LS_CHECK(matrix(op, "logit gradient", dlogits));
    LS_CHECK(want(op, "probabilities", probs, master(dlogits->dtype), 2, B, C));
    LS_CHECK(want(op, "logit gradient", dlogits, dlogits->dtype, 2, B, C));
    return c->ops->xent_bwd(c->state, dlogits->dtype, B, C, probs->data, labels->data, smoothing, scale, scale_num,
                            dlogits->data);
}

ls_status ls_op_accuracy(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, ls_tensor *pred,
                         int64_t *host_correct) {
    const char *op = "accuracy";
    LS_CHECK(on_ctx(c, op, "logits", logits));
    LS_CHECK(on_ctx(c, op, "labels", labels));
    LS_CHECK(on_ctx(c, op, "predictions", pred));
    LS_CHECK(matrix(op, "logits", logits));
    int64_t B = logits->shape[0], C = logits->shape[1];
    LS_CHECK(check_labels(op, labels, B, C));
    if (pred->dtype != LS_I32 || ls_tensor_numel(pred) < B + 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: predictions need %lld i32 elements (B + 1)", op,
                        (long long)(B + 1));
    int32_t *p = pred->data;
    LS_CHECK(c->ops->argmax(c->state, logits->dtype, B, C, logits->data, labels->data, p, p + B));
    if (!host_correct) return LS_OK; /* the count stays in pred[B] */
    int32_t correct = 0;
    ls_tensor one = ls_tensor_view(&correct, LS_I32, ls_device_cpu(), 1, (int64_t[]){1});
    ls_tensor src = ls_tensor_view(p + B, LS_I32, pred->device, 1, (int64_t[]){1});
    LS_CHECK(ls_tensor_copy(c->alloc, &one, &src));
    *host_correct = correct;
    return LS_OK;
}

ls_status ls_op_convert(ls_ctx *c, const ls_tensor *src, ls_tensor *dst) {
    const char *op = "convert";
    char a[64], b[64];
    LS_CHECK(on_ctx(c, op, "source", src));
    LS_CHECK(on_ctx(c, op, "destination", dst));
    if (ls_tensor_numel(src) != ls_tensor_numel(dst))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: source %s and destination %s differ in size", op,
                        ls_tensor_describe(src, a, 64), ls_tensor_describe(dst, b, 64));
    return c->ops->convert(c->state, ls_tensor_numel(src), src->dtype, src->data, dst->dtype, dst->data);
}

ls_status ls_op_convert_many(ls_ctx *c, int k, const ls_tensor *const *src, ls_tensor *const *dst) {
    enum { RUN = 64 };
    const void *s[RUN];
    void *d[RUN];
    int64_t n[RUN];
    LS_CHECK_ARG(c && k >= 0 && (k == 0 || (src && dst)), "convert: %s",
                 !c      ? "the context is NULL"
                 : k < 0 ? "the tensor count is negative"
                         : "a tensor list is NULL");
    for (int i = 0; i < k; i++) {
        char a[64], b[64];
        LS_CHECK_ARG(src[i] && dst[i], "convert: %s %d is NULL", src[i] ? "destination" : "source", i);
        LS_CHECK(on_ctx(c, "convert", "source", src[i]));
        LS_CHECK(on_ctx(c, "convert", "destination", dst[i]));
        if (ls_tensor_numel(src[i]) != ls_tensor_numel(dst[i]))
            return ls_error(LS_ERR_INVALID_ARGUMENT, "convert: source %s and destination %s (pair %d) differ in size",
                            ls_tensor_describe(src[i], a, 64), ls_tensor_describe(dst[i], b, 64), i);
    }
    for (int i = 0; i < k;) {
        ls_dtype st = src[i]->dtype, dt = dst[i]->dtype;
        int m = 0;
        for (; i < k && m < RUN && src[i]->dtype == st && dst[i]->dtype == dt; i++, m++) {
            s[m] = src[i]->data;
            d[m] = dst[i]->data;
            n[m] = ls_tensor_numel(src[i]);
        }
        if (c->ops->convert_many && st != dt)
            LS_CHECK(c->ops->convert_many(c->state, m, st, s, dt, d, n));
        else
            for (int j = 0; j < m; j++) LS_CHECK(c->ops->convert(c->state, n[j], st, s[j], dt, d[j]));
    }
    return LS_OK;
}

ls_status ls_op_zero_many(ls_ctx *c, int k, ls_tensor *const *t) {
    enum { RUN = 64 };
    void *x[RUN];
    size_t bytes[RUN];
    LS_CHECK_ARG(c && k >= 0 && (k == 0 || t), "zero: %s",
                 !c      ? "the context is NULL"
                 : k < 0 ? "the tensor count is negative"
                         : "the tensor list is NULL");
    for (int i = 0; i < k; i++) {
        LS_CHECK_ARG(t[i], "zero: tensor %d is NULL", i);
        LS_CHECK(on_ctx(c, "zero", "a tensor", t[i]));
    }
    if (!c->ops->zero_many) {
        for (int i = 0; i < k; i++) LS_CHECK(ls_tensor_zero(t[i]));
        return LS_OK;
    }
    for (int i = 0; i < k;) {
        int m = 0;
        for (; i < k && m < RUN; i++, m++) {
            x[m] = t[i]->data;
            bytes[m] = ls_tensor_nbytes(t[i]);
        }
        LS_CHECK(c->ops->zero_many(c->state, m, x, bytes));
    }
    return LS_OK;
}

/* ---- NCHW convolution, pooling, batch normalization, residual add ---- */
int64_t ls_conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
    if (stride < 1 || kernel < 1 || pad < 0 || in + 2 * pad < kernel) return 0;
    return (in + 2 * pad - kernel) / stride + 1;
}

static ls_status entry(ls_ctx *c, const char *op, int present) {
    if (!present) return ls_error(LS_ERR_UNSUPPORTED, "%s is not implemented by the %s backend yet", op, c->ops->name);
    return LS_OK;
}

/* t must be [d0, d1, d2, d3] of dtype dt. */
static ls_status want4(const char *op, const char *name, const ls_tensor *t, ls_dtype dt, int64_t d0, int64_t d1,
                       int64_t d2, int64_t d3) {
    char a[64];
    if (t->dtype != dt || t->ndim != 4 || t->shape[0] != d0 || t->shape[1] != d1 || t->shape[2] != d2 ||
        t->shape[3] != d3)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected [%lld, %lld, %lld, %lld] %s", op, name,
                        ls_tensor_describe(t, a, 64), (long long)d0, (long long)d1, (long long)d2, (long long)d3,
                        ls_dtype_name(dt));
    return LS_OK;
}

static ls_status nchw(const char *op, const char *name, const ls_tensor *t) {
    char a[64];
    if (t->ndim != 4)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s is %s, expected [N, C, H, W]", op, name,
                        ls_tensor_describe(t, a, 64));
    return LS_OK;
}

/* Fill p from x [N, C, H, W] and w [K, C/groups, R, S]; checks the geometry. */
static ls_status conv_params(const char *op, const ls_tensor *x, const ls_tensor *w, int stride, int pad, int groups,
                             ls_conv2d_params *p) {
    char a[64], b[64];
    LS_CHECK(nchw(op, "input", x));
    LS_CHECK(nchw(op, "weight", w));
    if (stride < 1 || pad < 0 || groups < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: stride %d, padding %d and groups %d must be >= 1, >= 0, >= 1", op,
                        stride, pad, groups);
    *p = (ls_conv2d_params){0};
    p->N = x->shape[0];
    p->C = x->shape[1];
    p->H = x->shape[2];
    p->W = x->shape[3];
    p->K = w->shape[0];
    p->R = w->shape[2];
    p->S = w->shape[3];
    p->stride_h = p->stride_w = stride;
    p->pad_h = p->pad_w = pad;
    p->groups = groups;
    if (p->C % groups || p->K % groups)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: %lld input and %lld output channels are not divisible by %d groups", op, (long long)p->C,
                        (long long)p->K, groups);
    if (w->shape[1] != p->C / groups || p->R < 1 || p->S < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: weight %s does not fit input %s with %d groups (expected "
                        "[K, %lld, R, S])",
                        op, ls_tensor_describe(w, a, 64), ls_tensor_describe(x, b, 64), groups,
                        (long long)(p->C / groups));
    p->P = ls_conv_out_size(p->H, p->R, stride, pad);
    p->Q = ls_conv_out_size(p->W, p->S, stride, pad);
    if (p->P < 1 || p->Q < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: a %lldx%lld kernel does not fit the %lldx%lld input with padding %d", op, (long long)p->R,
                        (long long)p->S, (long long)p->H, (long long)p->W, pad);
    return LS_OK;
}

/* Workspace from the context's allocator for one call (NULL when none is needed). */
static ls_status conv_ws(ls_ctx *c, ls_dtype t, const ls_conv2d_params *p, int pass, void **ws) {
    size_t bytes = c->ops->conv2d_workspace ? c->ops->conv2d_workspace(c->state, t, p, pass) : 0;
    *ws = NULL;
    return bytes ? ls_alloc(c->alloc, bytes, "convolution workspace", ws) : LS_OK;
}

ls_status ls_op_conv2d_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *w, const ls_tensor *b, ls_tensor *y,
                               int stride, int pad, int groups) {
    const char *op = "conv2d";
    ls_conv2d_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "weight", w));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(conv_params(op, x, w, stride, pad, groups, &p));
    LS_CHECK(want4(op, "weight", w, x->dtype, p.K, p.C / groups, p.R, p.S));
    if (b) {
        LS_CHECK(on_ctx(c, op, "bias", b));
        LS_CHECK(want(op, "bias", b, x->dtype, 1, p.K, 0));
    }
    LS_CHECK(want4(op, "output", y, x->dtype, p.N, p.K, p.P, p.Q));
    LS_CHECK(entry(c, op, c->ops->conv2d_fwd != NULL));
    void *ws;
    LS_CHECK(conv_ws(c, x->dtype, &p, LS_CONV_FORWARD, &ws));
    ls_status s = c->ops->conv2d_fwd(c->state, x->dtype, &p, x->data, w->data, b ? b->data : NULL, y->data, ws);
    ls_free(c->alloc, ws);
    return s;
}

ls_status ls_op_conv2d_backward(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *w, ls_tensor *dx,
                                ls_tensor *dw, ls_tensor *db, int stride, int pad, int groups) {
    const char *op = "conv2d backward";
    ls_conv2d_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "weight", w));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(conv_params(op, x, w, stride, pad, groups, &p));
    ls_dtype t = x->dtype;
    LS_CHECK(want4(op, "weight", w, t, p.K, p.C / groups, p.R, p.S));
    LS_CHECK(want4(op, "output gradient", dy, t, p.N, p.K, p.P, p.Q));
    if (dw) { /* NULL: a frozen weight (no weight-gradient pass) */
        LS_CHECK(on_ctx(c, op, "weight gradient", dw));
        LS_CHECK(want4(op, "weight gradient", dw, master(t), p.K, p.C / groups, p.R, p.S));
    }
    if (dx) {
        LS_CHECK(on_ctx(c, op, "input gradient", dx));
        LS_CHECK(want4(op, "input gradient", dx, t, p.N, p.C, p.H, p.W));
    }
    if (db) {
        LS_CHECK(on_ctx(c, op, "bias gradient", db));
        LS_CHECK(want(op, "bias gradient", db, master(t), 1, p.K, 0));
    }
    LS_CHECK(entry(c, op, c->ops->conv2d_bwd != NULL));
    void *ws;
    LS_CHECK(conv_ws(c, t, &p, dx ? LS_CONV_BACKWARD : LS_CONV_BACKWARD_WEIGHTS, &ws));
    ls_status s = c->ops->conv2d_bwd(c->state, t, &p, dy->data, x->data, w->data, dx ? dx->data : NULL,
                                     dw ? dw->data : NULL, db ? db->data : NULL, ws);
    ls_free(c->alloc, ws);
    return s;
}

static ls_status pool_params(const char *op, ls_pool mode, int kernel, int stride, int pad, const ls_tensor *x,
                             ls_pool2d_params *p) {
    LS_CHECK(nchw(op, "input", x));
    if (mode != LS_POOL_MAX && mode != LS_POOL_AVG)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: unknown pooling mode %d", op, (int)mode);
    if (kernel < 1 || stride < 1 || pad < 0 || 2 * pad > kernel)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: kernel %d, stride %d, padding %d: need kernel >= 1, "
                        "stride >= 1 and 0 <= padding <= kernel/2",
                        op, kernel, stride, pad);
    *p = (ls_pool2d_params){0};
    p->N = x->shape[0];
    p->C = x->shape[1];
    p->H = x->shape[2];
    p->W = x->shape[3];
    p->kh = p->kw = kernel;
    p->stride_h = p->stride_w = stride;
    p->pad_h = p->pad_w = pad;
    p->mode = mode;
    p->count_include_pad = 1;
    p->P = ls_conv_out_size(p->H, kernel, stride, pad);
    p->Q = ls_conv_out_size(p->W, kernel, stride, pad);
    if (p->P < 1 || p->Q < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: a %dx%d window does not fit the %lldx%lld input with padding %d",
                        op, kernel, kernel, (long long)p->H, (long long)p->W, pad);
    return LS_OK;
}

ls_status ls_op_pool2d_forward(ls_ctx *c, ls_pool mode, int kernel, int stride, int pad, const ls_tensor *x,
                               ls_tensor *y) {
    const char *op = mode == LS_POOL_AVG ? "average pooling" : "max pooling";
    ls_pool2d_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(pool_params(op, mode, kernel, stride, pad, x, &p));
    LS_CHECK(want4(op, "output", y, x->dtype, p.N, p.C, p.P, p.Q));
    LS_CHECK(entry(c, op, c->ops->pool2d_fwd != NULL));
    return c->ops->pool2d_fwd(c->state, x->dtype, &p, x->data, y->data);
}

ls_status ls_op_pool2d_backward(ls_ctx *c, ls_pool mode, int kernel, int stride, int pad, const ls_tensor *x,
                                const ls_tensor *dy, ls_tensor *dx) {
    const char *op = mode == LS_POOL_AVG ? "average pooling backward" : "max pooling backward";
    ls_pool2d_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(on_ctx(c, op, "input gradient", dx));
    LS_CHECK(pool_params(op, mode, kernel, stride, pad, x, &p));
    LS_CHECK(want4(op, "output gradient", dy, x->dtype, p.N, p.C, p.P, p.Q));
    LS_CHECK(same(op, "input gradient", dx, x));
    LS_CHECK(entry(c, op, c->ops->pool2d_bwd != NULL));
    return c->ops->pool2d_bwd(c->state, x->dtype, &p, x->data, dy->data, dx->data);
}

ls_status ls_op_global_avgpool_forward(ls_ctx *c, const ls_tensor *x, ls_tensor *y) {
    const char *op = "global average pooling";
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(nchw(op, "input", x));
    LS_CHECK(want(op, "output", y, x->dtype, 2, x->shape[0], x->shape[1]));
    LS_CHECK(entry(c, op, c->ops->global_avgpool_fwd != NULL));
    if (x->shape[2] * x->shape[3] < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the input has no pixels", op);
    return c->ops->global_avgpool_fwd(c->state, x->dtype, x->shape[0] * x->shape[1], x->shape[2] * x->shape[3], x->data,
                                      y->data);
}

ls_status ls_op_global_avgpool_backward(ls_ctx *c, const ls_tensor *dy, ls_tensor *dx) {
    const char *op = "global average pooling backward";
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(on_ctx(c, op, "input gradient", dx));
    LS_CHECK(nchw(op, "input gradient", dx));
    LS_CHECK(want(op, "output gradient", dy, dx->dtype, 2, dx->shape[0], dx->shape[1]));
    LS_CHECK(entry(c, op, c->ops->global_avgpool_bwd != NULL));
    if (dx->shape[2] * dx->shape[3] < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the input has no pixels", op);
    return c->ops->global_avgpool_bwd(c->state, dx->dtype, dx->shape[0] * dx->shape[1], dx->shape[2] * dx->shape[3],
                                      dy->data, dx->data);
}

/* x [N, C] or [N, C, H, W]; every per-channel tensor [C] in the master dtype. */
static ls_status bn_params(const char *op, const ls_tensor *x, double eps, int relu, ls_bn_params *p) {
    char a[64];
    if (x->ndim != 2 && x->ndim != 4)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: input is %s, expected [N, C] or [N, C, H, W]", op,
                        ls_tensor_describe(x, a, 64));
    if (!(eps > 0)) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: epsilon %g must be > 0", op, eps);
    *p = (ls_bn_params){0};
    p->N = x->shape[0];
    p->C = x->shape[1];
    p->HW = x->ndim == 4 ? x->shape[2] * x->shape[3] : 1;
    p->eps = eps;
    p->relu = relu != 0;
    return LS_OK;
}

static ls_status per_channel(ls_ctx *c, const char *op, const char *name, const ls_tensor *t, const ls_tensor *x) {
    LS_CHECK(on_ctx(c, op, name, t));
    return want(op, name, t, master(x->dtype), 1, x->shape[1], 0);
}

ls_status ls_op_batchnorm_stats(ls_ctx *c, const ls_tensor *x, ls_tensor *mean, ls_tensor *var) {
    const char *op = "batch-norm statistics";
    ls_bn_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(bn_params(op, x, 1.0, 0, &p));
    LS_CHECK(per_channel(c, op, "mean", mean, x));
    LS_CHECK(per_channel(c, op, "variance", var, x));
    LS_CHECK(entry(c, op, c->ops->bn_stats != NULL));
    return c->ops->bn_stats(c->state, x->dtype, &p, x->data, mean->data, var->data);
}

ls_status ls_op_batchnorm_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *mean, const ls_tensor *var,
                                  const ls_tensor *gamma, const ls_tensor *beta, double eps, int relu, ls_tensor *y) {
    const char *op = "batch norm";
    ls_bn_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(bn_params(op, x, eps, relu, &p));
    LS_CHECK(per_channel(c, op, "mean", mean, x));
    LS_CHECK(per_channel(c, op, "variance", var, x));
    LS_CHECK(per_channel(c, op, "weight", gamma, x));
    LS_CHECK(per_channel(c, op, "bias", beta, x));
    LS_CHECK(same(op, "output", y, x));
    LS_CHECK(entry(c, op, c->ops->bn_fwd != NULL));
    return c->ops->bn_fwd(c->state, x->dtype, &p, x->data, mean->data, var->data, gamma->data, beta->data, y->data);
}

ls_status ls_op_batchnorm_backward_reduce(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *y,
                                          const ls_tensor *mean, const ls_tensor *var, double eps, int relu,
                                          ls_tensor *sum_dy, ls_tensor *sum_dy_xhat) {
    const char *op = "batch-norm backward";
    ls_bn_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(bn_params(op, x, eps, relu, &p));
    LS_CHECK(same(op, "output gradient", dy, x));
    if (relu) {
        LS_CHECK(on_ctx(c, op, "output", y));
        LS_CHECK(same(op, "output", y, x));
    }
    LS_CHECK(per_channel(c, op, "mean", mean, x));
    LS_CHECK(per_channel(c, op, "variance", var, x));
    LS_CHECK(per_channel(c, op, "sum of dy", sum_dy, x));
    LS_CHECK(per_channel(c, op, "sum of dy*xhat", sum_dy_xhat, x));
    LS_CHECK(entry(c, op, c->ops->bn_bwd_reduce != NULL));
    return c->ops->bn_bwd_reduce(c->state, x->dtype, &p, dy->data, x->data, relu ? y->data : NULL, mean->data,
                                 var->data, sum_dy->data, sum_dy_xhat->data);
}

ls_status ls_op_batchnorm_backward_dx(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *y,
                                      const ls_tensor *mean, const ls_tensor *var, const ls_tensor *gamma,
                                      const ls_tensor *sum_dy, const ls_tensor *sum_dy_xhat, double eps, int relu,
                                      double count, ls_tensor *dx) {
    const char *op = "batch-norm backward";
    ls_bn_params p;
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(on_ctx(c, op, "input gradient", dx));
    LS_CHECK(bn_params(op, x, eps, relu, &p));
    LS_CHECK(same(op, "output gradient", dy, x));
    LS_CHECK(same(op, "input gradient", dx, x));
    if (relu) {
        LS_CHECK(on_ctx(c, op, "output", y));
        LS_CHECK(same(op, "output", y, x));
    }
    LS_CHECK(per_channel(c, op, "mean", mean, x));
    LS_CHECK(per_channel(c, op, "variance", var, x));
    LS_CHECK(per_channel(c, op, "weight", gamma, x));
    if (count > 0) {
        LS_CHECK(per_channel(c, op, "sum of dy", sum_dy, x));
        LS_CHECK(per_channel(c, op, "sum of dy*xhat", sum_dy_xhat, x));
    }
    if (count < 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: sample count %g is negative", op, count);
    LS_CHECK(entry(c, op, c->ops->bn_bwd_dx != NULL));
    return c->ops->bn_bwd_dx(c->state, x->dtype, &p, dy->data, x->data, relu ? y->data : NULL, mean->data, var->data,
                             gamma->data, count > 0 ? sum_dy->data : NULL, count > 0 ? sum_dy_xhat->data : NULL, count,
                             dx->data);
}

static ls_status add_op(ls_ctx *c, const ls_tensor *a, const ls_tensor *b, int relu, ls_tensor *y) {
    const char *op = relu ? "add + relu" : "add";
    LS_CHECK(on_ctx(c, op, "first input", a));
    LS_CHECK(on_ctx(c, op, "second input", b));
    LS_CHECK(on_ctx(c, op, "output", y));
    LS_CHECK(same(op, "second input", b, a));
    LS_CHECK(same(op, "output", y, a));
    LS_CHECK(entry(c, op, c->ops->add != NULL));
    return c->ops->add(c->state, a->dtype, ls_tensor_numel(a), a->data, b->data, relu, y->data);
}

ls_status ls_op_add(ls_ctx *c, const ls_tensor *a, const ls_tensor *b, ls_tensor *y) { return add_op(c, a, b, 0, y); }

ls_status ls_op_add_relu(ls_ctx *c, const ls_tensor *a, const ls_tensor *b, ls_tensor *y) {
    return add_op(c, a, b, 1, y);
}
