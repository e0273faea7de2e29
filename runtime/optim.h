/* optim.h: optimizers over parallel lists of parameter and gradient tensors (torch.optim's
 * SGD with momentum/dampening/nesterov/weight decay, and AdamW), the warmup + cosine
 * learning-rate schedule, and gradient-norm clipping. State (momentum, moments) lives on the
 * parameters' device and is reachable for checkpoints. */
#ifndef LOCKSTEP_OPTIM_H
#define LOCKSTEP_OPTIM_H

#include <stdint.h>

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ls_optim_kind { LS_OPTIM_SGD = 0, LS_OPTIM_ADAMW = 1 } ls_optim_kind;

typedef struct ls_optim_config {
    ls_optim_kind kind;
    float lr;           /* base learning rate (the schedule's peak) */
    float weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
    float momentum, dampening;
    int nesterov;
    float beta1, beta2, eps; /* AdamW's: betas in [0, 1), eps > 0 (0: a weight whose gradients are all
                              * 0 would step by 0/0 = NaN) */
    /* 1: no weight decay on parameters of fewer than 2 dimensions (biases, batch norm's scale and
     * shift), as timm and nanoGPT group them; 0 (the default): every parameter decays, as
     * torch.optim with one parameter group */
    int no_decay_1d;
    /* ZeRO stage 1 (ls_optimizer_shard), from the start: with shard_world > 1 the optimizer is rank
     * shard_rank's of shard_world (the communicator's rank and world) and allocates the state of its
     * own parameters only. 0 or 1 (the default): unsharded. */
    int shard_rank, shard_world;
} ls_optim_config;

/* SGD defaults: lr 0.1, momentum 0.9; AdamW defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0.01. */
ls_optim_config ls_optim_defaults(ls_optim_kind kind);
ls_status ls_optim_kind_parse(const char *s, ls_optim_kind *out);

typedef struct ls_optimizer ls_optimizer;
/* Keeps the tensors (which must outlive it) and reads their ->data at every step, so their memory
 * may move (the reducer's gradients as bucket views). The parameters are held (their holders) until
 * ls_optimizer_destroy: ls_tensor_destroy of one, or ls_module_destroy of the module they belong
 * to, is refused (logged, ls_last_error) before then. */
ls_status ls_optimizer_create(ls_ctx *ctx, int n, ls_tensor *const *params, ls_tensor *const *grads,
                              const ls_optim_config *cfg, ls_optimizer **out);
void ls_optimizer_destroy(ls_optimizer *o);
/* Parameter i's weight decay from now on, in place of the config's (a torch.optim parameter group
 * of its own): LS_ERR_INVALID_ARGUMENT for an index out of range or a decay not finite and >= 0.
 * Not saved in checkpoints (the config is): set it again after a resume. */
ls_status ls_optimizer_set_weight_decay(ls_optimizer *o, int i, float weight_decay);
/* The config the optimizer was created with (its kind, lr, decay, momentum, betas...); a zeroed
 * one for NULL. */
ls_optim_config ls_optimizer_config(const ls_optimizer *o);
/* Parameter i's weight decay; NAN for an index out of range. */
float ls_optimizer_weight_decay(const ls_optimizer *o, int i);
/* One step at learning rate lr (from the schedule). */
ls_status ls_optimizer_step(ls_optimizer *o, float lr);
/* The same unless *skip, a double in device memory, is not 0 at the step's turn on the device
 * (mixed precision's found-inf flag): then nothing changes, the step count neither. The host does
 * not wait for the flag: the step count is kept on the device from then on. */
ls_status ls_optimizer_step_unless(ls_optimizer *o, float lr, const double *skip);
/* Steps taken (waits for the device after ls_optimizer_step_unless). */
ls_status ls_optimizer_get_num_steps(ls_optimizer *o, int64_t *steps);
/* The tensors it updates: parameter i and (grad, if not NULL) its gradient; NULL out of range. */
int ls_optimizer_num_params(const ls_optimizer *o);
ls_tensor *ls_optimizer_param(const ls_optimizer *o, int i, ls_tensor **grad);
/* State tensors of parameter i: slot 0 = momentum / first moment, 1 = second moment (NULL if none,
 * or if another rank keeps it: ls_optimizer_shard). */
ls_tensor *ls_optimizer_state(ls_optimizer *o, int i, int slot);
/* State tensors a parameter has: 0 (SGD without momentum), 1 (SGD's momentum) or 2 (AdamW's moments). */
int ls_optimizer_num_state_slots(const ls_optimizer *o);

/* ZeRO stage 1, as torch.distributed.optim.ZeroRedundancyOptimizer: from now on this rank (of
 * world) steps, and keeps the state of, only the parameters it owns; the others' state is freed
 * (every rank held the same state until then, so nothing is lost; call it on every rank). The
 * config's shard_rank and shard_world do the same at create, without ever allocating the others'
 * state. The partition is ZeroRedundancyOptimizer's: largest parameters first, each to the rank
 * with the fewest elements so far (the lowest such rank); a parameter is never split. The
 * parameters a rank does not own are left as they are by its steps: after each step the caller
 * broadcasts every parameter from its owner (ls_trainer does for a sharded optimizer). world 1 does
 * nothing; the same rank and world again do nothing; another is LS_ERR_INVALID_ARGUMENT. */
ls_status ls_optimizer_shard(ls_optimizer *o, int rank, int world);
/* The rank that owns parameter i; -1 when the optimizer is not sharded (every rank steps it) or i is
 * out of range. */
int ls_optimizer_owner(const ls_optimizer *o, int i);
/* A sharded optimizer: all 1 allocates (zeroed) the state of the parameters other ranks own, so this
 * rank can gather a whole state (as ZeroRedundancyOptimizer's consolidate_state_dict; checkpoints
 * do not: ls_ckpt_save moves the others' states one tensor at a time); its steps still update only
 * its own. all 0 frees them again. Unsharded: nothing to do. */
ls_status ls_optimizer_hold_states(ls_optimizer *o, int all);
/* A negative count is refused (logged, ls_last_error; the count stays): AdamW's bias correction
 * made every weight NaN from it. */
void ls_optimizer_set_num_steps(ls_optimizer *o, int64_t steps);
/* SGD's momentum buffers (this rank's) zeroed, and the next step taken as a first one: each buffer
 * starts as that step's gradient (with weight decay), as torch.optim.SGD's does for a parameter
 * without one, whatever the dampening; the step count goes on. A resume whose checkpoint holds no
 * momentum (saved without) for a run with momentum. LS_ERR_INVALID_ARGUMENT for AdamW. */
ls_status ls_optimizer_restart_momentum(ls_optimizer *o);

/* After the warmup: cosine decay to min_lr at total (the default), linear decay to min_lr at total
 * (Hugging Face's get_linear_schedule_with_warmup; min_lr 0 is theirs), or constant. */
typedef enum ls_lr_kind { LS_LR_COSINE = 0, LS_LR_LINEAR = 1, LS_LR_CONSTANT = 2 } ls_lr_kind;
ls_status ls_lr_kind_parse(const char *s, ls_lr_kind *out); /* "cosine", "linear", "constant" */
const char *ls_lr_kind_name(ls_lr_kind k);                  /* NULL for a value not in the enum */

/* Linear warmup from lr/warmup to lr over warmup steps, then kind's decay to min_lr at total.
 * ls_trainer_create refuses (LS_ERR_INVALID_ARGUMENT, naming the values) a base_lr or min_lr
 * negative or not finite, min_lr above base_lr (a rise, not a decay), min_lr > 0 with the constant
 * kind (never reached), negative warmup or total steps, a kind not in the enum. ls_lr_at is NAN
 * for a NULL schedule, a negative step and a kind not in the enum (an optimizer's step refuses a
 * NaN rate). */
typedef struct ls_lr_schedule {
    float base_lr, min_lr;
    int64_t warmup_steps, total_steps; /* total 0 (or <= warmup): constant after warmup */
    ls_lr_kind kind;                   /* 0: cosine */
} ls_lr_schedule;
float ls_lr_at(const ls_lr_schedule *s, int64_t step);

/* *host_sumsq += the sum of squares of k tensors (in double, in order); *host_nonfinite (may be
 * NULL) |= whether any element is inf/NaN. On a GPU one wait per run of equal dtypes, not one
 * per tensor (the op table's sumsq_many). */
ls_status ls_grads_sumsq(ls_ctx *ctx, int k, ls_tensor *const *t, double *host_sumsq, int *host_nonfinite);
/* Mixed precision's check on the device, no wait: with unscale each tensor *= 1 / the loss scale in
 * ctl, then ctl's found-inf flag = any inf/NaN in them (ops.h's amp_check; ctl: LS_AMP_CTL doubles
 * of device memory). */
ls_status ls_grads_amp_check(ls_ctx *ctx, int k, ls_tensor *const *t, int unscale, double *ctl);

/* Scale the gradients so their global 2-norm is at most max_norm; *norm gets the norm before
 * clipping (inf/NaN if any gradient is not finite, in which case nothing is scaled). max_norm 0
 * only measures the norm (inf never clips); a negative or NaN one is an error. On a GPU the
 * norm, the coefficient and the scaling stay on the device: with norm NULL nothing waits for it
 * (as PyTorch's clip_grad_norm_, which scales by a device scalar); a norm asked for is read, once. */
ls_status ls_clip_grad_norm(ls_ctx *ctx, int n, ls_tensor *const *grads, double max_norm, double *norm);

#ifdef __cplusplus
}
#endif
#endif
