/* amp.h: mixed-precision policy and the dynamic loss scaler. --precision fp16|bf16 keeps f32
 * master weights and optimizer state while activations, GEMM inputs and activation gradients are
 * f16/bf16 (the input batch is cast and every layer follows its input's dtype). fp16 adds dynamic
 * loss scaling with torch.cuda.amp.GradScaler's semantics: initial scale 2^16, x2 after 2000
 * consecutive clean steps, x0.5 and the step skipped when any gradient is inf/NaN on any rank. */
#ifndef LOCKSTEP_AMP_H
#define LOCKSTEP_AMP_H

#include <stdint.h>

#include "comm.h"
#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ls_precision { LS_PRECISION_FP32 = 0, LS_PRECISION_FP16 = 1, LS_PRECISION_BF16 = 2 } ls_precision;

/* "fp32|fp16|bf16" (also float32, float16, bfloat16). */
ls_status ls_precision_parse(const char *s, ls_precision *out);
const char *ls_precision_name(ls_precision p);
/* Activation dtype of a precision: f32, f16 or bf16. */
ls_dtype ls_precision_dtype(ls_precision p);

typedef struct ls_loss_scaler {
    int enabled;             /* fp16 only */
    double scale;            /* current scale (1 when disabled) */
    double growth_factor;    /* 2 */
    double backoff_factor;   /* 0.5 */
    int64_t growth_interval; /* 2000 */
    int64_t growth_tracker;  /* clean steps since the last change */
    int64_t skipped;         /* steps skipped so far */
} ls_loss_scaler;

void ls_loss_scaler_init(ls_loss_scaler *s, int enabled);
/* Unscale the gradients (x 1/scale) and decide whether the step may be taken: *found_inf is 1 if
 * any gradient element on any rank is inf/NaN (comm may be NULL for one process). Nothing is
 * unscaled when disabled, but the inf/NaN check still runs when check is set. */
ls_status ls_loss_scaler_unscale(ls_loss_scaler *s, ls_ctx *ctx, ls_comm *comm, int n, ls_tensor *const *grads,
                                 int *found_inf);
/* After the step (taken or skipped): back off on inf, grow after growth_interval clean steps. */
void ls_loss_scaler_update(ls_loss_scaler *s, int found_inf);

#ifdef __cplusplus
}
#endif
#endif
