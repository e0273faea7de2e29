/* amp.c: precision names and the dynamic loss scaler. */
#include "amp.h"
#include "optim.h"

#include <string.h>

ls_status ls_precision_parse(const char *s, ls_precision *out) {
    LS_CHECK_ARG(out, "ls_precision_parse: out is NULL");
    static const struct {
        const char *n;
        ls_precision p;
    } names[] = {{"fp32", LS_PRECISION_FP32}, {"float32", LS_PRECISION_FP32}, {"f32", LS_PRECISION_FP32},
                 {"fp16", LS_PRECISION_FP16}, {"float16", LS_PRECISION_FP16}, {"f16", LS_PRECISION_FP16},
                 {"bf16", LS_PRECISION_BF16}, {"bfloat16", LS_PRECISION_BF16}};
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i].n) == 0) {
            *out = names[i].p;
            return LS_OK;
        }
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "precision '%s' is not one of fp32, fp16, bf16", s ? s : "(null)");
}

const char *ls_precision_name(ls_precision p) {
    return p == LS_PRECISION_FP16 ? "fp16" : p == LS_PRECISION_BF16 ? "bf16" : "fp32";
}

ls_dtype ls_precision_dtype(ls_precision p) {
    return p == LS_PRECISION_FP16 ? LS_F16 : p == LS_PRECISION_BF16 ? LS_BF16 : LS_F32;
}

void ls_loss_scaler_init(ls_loss_scaler *s, int enabled) {
    memset(s, 0, sizeof *s);
    s->enabled = enabled;
    s->scale = enabled ? 65536.0 : 1.0;
    s->growth_factor = 2.0;
    s->backoff_factor = 0.5;
    s->growth_interval = 2000;
}

ls_status ls_amp_state_create(ls_ctx *ctx, const ls_loss_scaler *s, double **ctl) {
    LS_CHECK_ARG(ctx && s && ctl, "ls_amp_state_create: %s is NULL", !ctx ? "the context" : !s ? "the scaler" : "ctl");
    *ctl = NULL;
    double *c;
    LS_CHECK(ls_alloc(ctx->alloc, LS_AMP_CTL * sizeof(double), "loss scaler state", (void **)&c));
    ls_status st = ls_amp_state_write(ctx, c, s);
    if (st != LS_OK) {
        ls_free(ctx->alloc, c);
        return st;
    }
    *ctl = c;
    return LS_OK;
}

ls_status ls_amp_state_write(ls_ctx *ctx, double *ctl, const ls_loss_scaler *s) {
    LS_CHECK_ARG(ctx && ctl && s, "ls_amp_state_write: %s is NULL",
                 !ctx   ? "the context"
                 : !ctl ? "the control block"
                        : "the loss scaler");
    double v[LS_AMP_CTL] = {0};
    v[LS_AMP_SCALE] = s->enabled ? s->scale : 1.0;
    v[LS_AMP_TRACKER] = (double)s->growth_tracker;
    v[LS_AMP_SKIPPED] = (double)s->skipped;
    v[LS_AMP_LAST] = v[LS_AMP_SCALE];
    return ls_allocator_copy(ctx->alloc, ctl, 1, v, 0, sizeof v);
}

ls_status ls_amp_state_read(ls_ctx *ctx, const double *ctl, ls_loss_scaler *s) {
    LS_CHECK_ARG(ctx && ctl && s, "ls_amp_state_read: %s is NULL",
                 !ctx   ? "the context"
                 : !ctl ? "the control block"
                        : "the loss scaler");
    double v[LS_AMP_CTL];
    LS_CHECK(ls_allocator_copy(ctx->alloc, v, 0, ctl, 1, sizeof v));
    s->scale = v[LS_AMP_SCALE];
    s->growth_tracker = (int64_t)v[LS_AMP_TRACKER];
    s->skipped = (int64_t)v[LS_AMP_SKIPPED];
    return LS_OK;
}

ls_status ls_amp_step(const ls_loss_scaler *s, ls_ctx *ctx, ls_comm *comm, int n, ls_tensor *const *grads,
                      double *ctl) {
    LS_CHECK_ARG(s && ctx && ctl, "ls_amp_step: %s is NULL",
                 !s     ? "the loss scaler"
                 : !ctx ? "the context"
                        : "the control block");
    LS_CHECK(ls_grads_amp_check(ctx, n, grads, s->enabled, ctl));
    if (comm && ls_comm_world(comm) > 1) { /* every rank skips if one saw inf/NaN */
        ls_comm_request *req = NULL;
        LS_CHECK(ls_comm_iallreduce(comm, ctl + LS_AMP_FOUND, 1, LS_F64, LS_REDUCE_MAX, &req));
        LS_CHECK(ls_comm_wait_stream(&req)); /* nccl: in stream order, the host does not wait */
    }
    ls_amp_update_params p = {s->enabled, s->growth_factor, s->backoff_factor, s->growth_interval};
    return ctx->ops->amp_update(ctx->state, ctl, &p);
}
