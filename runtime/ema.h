/* ema.h: an exponential moving average (EMA) of a model's weights, as timm's ModelEmaV3 (and
 * torch.optim.swa_utils.AveragedModel with get_ema_multi_avg_fn). After every optimizer step
 * each average moves toward the model's value:
 *     ema = d_t * ema + (1 - d_t) * value        (t = 1, 2, ... the updates so far)
 * over the parameters and the buffers (BatchNorm's running statistics), as timm averages both.
 * d_1 = 0: the first update copies the model, as timm's training loop (model_ema.update(model,
 * step=num_updates), num_updates counted from 1) and torch.optim.swa_utils.AveragedModel do; then
 * d_t is the decay, or with warmup timm's min(decay, 1 - t^(-2/3)) (its get_decay(t)), so that the
 * average follows the model closely at first. The averages live where the model does (one more
 * copy of its weights); to evaluate with them, swap them into the model and back.
 * Data parallel: every rank holds the same parameters after a step, so every rank's average of
 * them is the same; the buffers are each rank's, as the model's (evaluate with rank 0's:
 * ls_cnn_broadcast_buffers). On a GPU every call is queued on the compute stream: none waits. */
#ifndef LOCKSTEP_EMA_H
#define LOCKSTEP_EMA_H

#include <stdint.h>

#include "nn.h"
#include "ops.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_ema ls_ema;

/* The decay of update t (1, 2, ...): 0 for the first (a copy), then decay, or with warmup
 * min(decay, 1 - t^(-2/3)), as timm's ModelEmaV3.get_decay(t). */
double ls_ema_decay_at(double decay, int warmup, int64_t t);

/* An average of model's parameters and buffers, starting from their values now (copies; the
 * model must outlive it: ls_module_destroy of the model, or of a container holding it, refuses to
 * free it until ls_ema_destroy). decay in [0, 1): LS_ERR_INVALID_ARGUMENT otherwise. */
ls_status ls_ema_create(ls_ctx *ctx, ls_module *model, double decay, int warmup, ls_ema **out);
void ls_ema_destroy(ls_ema *e);

/* After an optimizer step: the next update (t + 1) of every average toward the model (also after
 * a step that mixed precision skipped for inf/NaN gradients, as timm's loop updates: toward
 * unchanged weights then). */
ls_status ls_ema_update(ls_ema *e);
/* Exchange the averages and the model's values (bit for bit): swap, evaluate, swap back. Needs
 * room for a copy of the largest tensor while it runs. */
ls_status ls_ema_swap(ls_ema *e);
/* Start again from the model's values now, with no update so far. */
ls_status ls_ema_reset(ls_ema *e);

double ls_ema_decay(const ls_ema *e);
int ls_ema_warmup(const ls_ema *e);
/* Updates so far (t); set after loading the averages from a checkpoint. */
int64_t ls_ema_num_updates(const ls_ema *e);
void ls_ema_set_num_updates(ls_ema *e, int64_t t);
/* The averages: the model's parameters in order, then its buffers (ls_cnn_buffer's order); each
 * has its tensor's dtype and shape. NULL out of range. */
int ls_ema_num_tensors(const ls_ema *e);
ls_tensor *ls_ema_tensor(ls_ema *e, int i);

#ifdef __cplusplus
}
#endif
#endif
