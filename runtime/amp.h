/* amp.h: mixed-precision policy and the dynamic loss scaler. --precision fp16|bf16 keeps f32
 * master weights and optimizer state while activations, GEMM inputs and activation gradients are
 * f16/bf16 (the input batch is cast and every layer follows its input's dtype). fp16 adds dynamic
 * loss scaling with torch.cuda.amp.GradScaler's semantics: initial scale 2^16, x2 after 2000
 * consecutive clean steps (unless that passes f32's largest value: the scale stays, as in
 * GradScaler), x0.5 and the step skipped when any gradient is inf/NaN on any rank (not below
 * LS_AMP_MIN_SCALE, 2^-126: a run whose every step overflows stops halving there, not at 0).
 * bf16 skips such a step too (without a scale). All of it is decided on the device. */
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

/* The scaler's settings and state. A trainer keeps the state (scale, growth_tracker, skipped) on
 * the device: ls_trainer_get_loss_scaler reads it back, ls_trainer_set_loss_scaler replaces it. */
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

/* The scaler's state on the device, so that a step is checked, skipped and the scale updated
 * without the host waiting (PyTorch's GradScaler keeps its scale and flag in device tensors too):
 * ctl is LS_AMP_CTL doubles of device memory (ops.h's LS_AMP_* layout), created from s's state
 * (ls_free to free), written from it (scale, growth_tracker, skipped) or read back into it (both
 * wait for the device). */
ls_status ls_amp_state_create(ls_ctx *ctx, const ls_loss_scaler *s, double **ctl);
ls_status ls_amp_state_write(ls_ctx *ctx, double *ctl, const ls_loss_scaler *s);
ls_status ls_amp_state_read(ls_ctx *ctx, const double *ctl, ls_loss_scaler *s);
/* After the gradients are final: unscale them (x 1/scale, when enabled) and set ctl's found-inf
 * flag if any element on any rank is inf/NaN (comm may be NULL for one process; an all-reduce of
 * the flag, in stream order on nccl), then count the skip and update the scale (GradScaler's
 * rule, when enabled). ctl[LS_AMP_FOUND] then tells the optimizer to skip the step
 * (ls_optimizer_step_unless); ctl[LS_AMP_LAST] is the scale this step's backward used. */
ls_status ls_amp_step(const ls_loss_scaler *s, ls_ctx *ctx, ls_comm *comm, int n, ls_tensor *const *grads, double *ctl);

#ifdef __cplusplus
}
#endif
#endif
