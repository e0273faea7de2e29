/* ops.c: the compute context and the tensor-level op wrappers. Each wrapper checks devices,
 * dtypes and shapes (an error names the op and both shapes) and calls the context's op table. */
#include "ops.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"

ls_status ls_ctx_create(ls_device dev, ls_allocator *host, ls_ctx **out) {
    char dn[32];
    *out = NULL;
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
    if (c->alloc && c->alloc != c->host) ls_allocator_destroy(c->alloc);
    c->ops->fini(c->state);
    if (c->owns_host) ls_allocator_destroy(c->host);
    free(c);
}

ls_status ls_ctx_synchronize(ls_ctx *c) { return c->ops->synchronize(c->state); }

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

static ls_status want(const char *op, const char *name, const ls_tensor *t, ls_dtype dt, int ndim,
                      int64_t d0, int64_t d1) {
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

ls_status ls_op_linear_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *w, const ls_tensor *b,
                               ls_tensor *y) {
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

ls_status ls_op_linear_backward(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *w,
                                ls_tensor *dx, ls_tensor *dw, ls_tensor *db) {
    const char *op = "linear backward";
    LS_CHECK(on_ctx(c, op, "input", x));
    LS_CHECK(on_ctx(c, op, "weight", w));
    LS_CHECK(on_ctx(c, op, "output gradient", dy));
    LS_CHECK(on_ctx(c, op, "weight gradient", dw));
    LS_CHECK(matrix(op, "input", x));
    LS_CHECK(matrix(op, "weight", w));
    int64_t B = x->shape[0], in = x->shape[1], out = w->shape[0];
    ls_dtype t = x->dtype;
    LS_CHECK(want(op, "weight", w, t, 2, out, in));
    LS_CHECK(want(op, "output gradient", dy, t, 2, B, out));
    LS_CHECK(want(op, "weight gradient", dw, master(t), 2, out, in));
    if (dx) {
        LS_CHECK(on_ctx(c, op, "input gradient", dx));
        LS_CHECK(want(op, "input gradient", dx, t, 2, B, in));
    }
    if (db) {
        LS_CHECK(on_ctx(c, op, "bias gradient", db));
        LS_CHECK(want(op, "bias gradient", db, master(t), 1, out, 0));
    }
    return c->ops->linear_bwd(c->state, t, B, in, out, dy->data, x->data, w->data, dx ? dx->data : NULL,
                              dw->data, db ? db->data : NULL);
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
                return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: label %d of sample %lld is outside [0, %lld)",
                                op, l[i], (long long)i, (long long)C);
    }
    return LS_OK;
}

ls_status ls_op_xent_forward(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, ls_tensor *probs,
                             ls_tensor *losses, double *host_loss) {
    const char *op = "softmax cross-entropy";
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
    LS_CHECK(c->ops->xent_fwd(c->state, logits->dtype, B, C, logits->data, labels->data, probs->data,
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
    const char *op = "softmax cross-entropy backward";
    LS_CHECK(on_ctx(c, op, "probabilities", probs));
    LS_CHECK(on_ctx(c, op, "labels", labels));
    LS_CHECK(on_ctx(c, op, "logit gradient", dlogits));
    LS_CHECK(matrix(op, "probabilities", probs));
    int64_t B = probs->shape[0], C = probs->shape[1];
    LS_CHECK(check_labels(op, labels, B, C));
    LS_CHECK(matrix(op, "logit gradient", dlogits));
    LS_CHECK(want(op, "probabilities", probs, master(dlogits->dtype), 2, B, C));
    LS_CHECK(want(op, "logit gradient", dlogits, dlogits->dtype, 2, B, C));
    return c->ops->xent_bwd(c->state, dlogits->dtype, B, C, probs->data, labels->data, scale, dlogits->data);
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
