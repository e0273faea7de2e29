/* amp.c: precision names and the dynamic loss scaler. */
#include "amp.h"
#include "optim.h"

#include <string.h>

ls_status ls_precision_parse(const char *s, ls_precision *out) {
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

ls_status ls_loss_scaler_unscale(ls_loss_scaler *s, ls_ctx *ctx, ls_comm *comm, int n, ls_tensor *const *grads,
                                 int *found_inf) {
    double sq = 0;
    int bad = 0;
    if (s->enabled && s->scale != 1.0)
        for (int i = 0; i < n; i++) {
            ls_tensor *g = grads[i];
            LS_CHECK(ctx->ops->scale(ctx->state, g->dtype, ls_tensor_numel(g), 1.0 / s->scale, g->data));
        }
    LS_CHECK(ls_grads_sumsq(ctx, n, grads, &sq, &bad)); /* one wait for the device, not one per tensor */
    double flag = bad ? 1.0 : 0.0;
    if (comm && ls_comm_world(comm) > 1) LS_CHECK(ls_comm_allreduce_host(comm, &flag, 1, LS_F64, LS_REDUCE_MAX));
    *found_inf = flag > 0;
    return LS_OK;
}

void ls_loss_scaler_update(ls_loss_scaler *s, int found_inf) {
    if (found_inf) s->skipped++;
    if (!s->enabled) return;
    if (found_inf) {
        s->scale *= s->backoff_factor;
        s->growth_tracker = 0;
    } else if (++s->growth_tracker >= s->growth_interval) {
        s->scale *= s->growth_factor;
        s->growth_tracker = 0;
    }
}
