/* nn.h: modules with forward/backward and ordered parameter/gradient lists, a sequential
 * container, and the softmax cross-entropy loss. Modules own their output and input-gradient
 * buffers (reallocated when the batch size changes, from the context's allocator); forward keeps
 * a pointer to its input, which must stay alive until backward. Parameter gradients accumulate
 * (call ls_module_zero_grad between steps). A gradient hook, set on the root module, is called
 * with each parameter's index as soon as its gradient is final in backward (reverse order), which
 * is when the data-parallel reducer may launch that gradient's bucket. */
#ifndef LOCKSTEP_NN_H
#define LOCKSTEP_NN_H

#include <stdint.h>

#include "ops.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_module ls_module;
typedef ls_status (*ls_grad_hook)(void *user, int param_index);

/* Linear layer y = x w^T + b, w [out, in]; initialized like torch.nn.Linear
 * (U(-1/sqrt(in), 1/sqrt(in)) for w and b) from a Philox stream of seed. */
ls_status ls_linear_create(ls_ctx *ctx, ls_dtype dtype, int64_t in, int64_t out, int bias, uint64_t seed,
                           const char *name, ls_module **out_m);
ls_status ls_activation_create(ls_ctx *ctx, ls_act act, ls_module **out_m);
/* Takes ownership of the children (on success; a child listed twice is an error, and so is one
 * already inside a container: a module is in one container, which frees it). Parameter names
 * become "<i>.<child name>". */
ls_status ls_sequential_create(ls_ctx *ctx, int n, ls_module *const *children, ls_module **out_m);
/* An MLP: Linear(sizes[0], sizes[1]), act, ..., Linear(sizes[n-2], sizes[n-1]) (no act at the end);
 * layer i's init stream is seed + i. */
ls_status ls_mlp_create(ls_ctx *ctx, ls_dtype dtype, int n_sizes, const int64_t *sizes, ls_act act, uint64_t seed,
                        ls_module **out_m);
/* The same with a Dropout(dropout) after each hidden layer's activation when dropout > 0, numbered
 * as in PyTorch's nn.Sequential(Linear, act, Dropout, Linear, ...): the parameters are "0.weight",
 * "0.bias", "3.weight", ... The dropouts' streams are apart from the layers' init streams. */
ls_status ls_mlp_create_dropout(ls_ctx *ctx, ls_dtype dtype, int n_sizes, const int64_t *sizes, ls_act act,
                                float dropout, uint64_t seed, ls_module **out_m);
/* Frees m and the modules inside it (NULL: nothing). Destroy the trainers (ls_trainer_create),
 * EMAs (ls_ema_create) and optimizers (ls_optimizer_create over its parameters) made of m, or of a
 * module inside it, first: while one is held, m is left as it is, not freed, and the error
 * (ls_last_error, and logged) names how many hold it; call it again after their destroys. A leak
 * rather than a use after free, at their next call or destroy. A module inside a container
 * (ls_sequential_create, ls_checkpoint_create, ls_residual_create, the builders' blocks) is the
 * container's: destroying it alone is refused the same way; destroy the outermost container. */
void ls_module_destroy(ls_module *m);

/* Dropout with probability p (inverted: kept values scaled by 1/(1-p)); inactive when not
 * training; f32, f64, f16 and bf16 inputs. Its mask is a function of (seed, backward passes so
 * far), or, keyed (ls_module_key_dropout), each sample's row of (seed, step, the sample's id), so a
 * forward recomputed before the next backward (activation checkpointing) replays the same mask. */
ls_status ls_dropout_create(ls_ctx *ctx, float p, uint64_t seed, ls_module **out_m);
/* Keys the masks of every Dropout inside m to the samples of the next forwards: the mask of row i
 * (the batch's first dimension) is a function of (the Dropout's seed, step, rows[i]) alone, so a
 * sample draws the same mask at a step whichever rank or micro-batch it is in: with the same seeds
 * on every rank, data-parallel training with dropout is the same on any number of ranks and with
 * any accumulation split (within rounding), as without. The next forwards must have n rows (an
 * error names both counts). rows NULL: back to the default keying. ls_trainer_step keys each
 * micro-batch by its optimizer step and the sample indices it trains on. */
ls_status ls_module_key_dropout(ls_module *m, uint64_t step, const int64_t *rows, int64_t n);
/* The Dropouts inside m, in forward order: how many, and the i-th's seed (to read or set; NULL
 * where i is out of range). ls_trainer_create sets every rank's to rank 0's, as the parameters. */
int ls_module_num_dropouts(const ls_module *m);
uint64_t *ls_module_dropout_seed(ls_module *m, int i);
/* Activation checkpointing: wrap inner (ownership taken; one already inside a container is
 * refused) so forward keeps only the input and the output, and backward recomputes inner's
 * activations before its backward. */
ls_status ls_checkpoint_create(ls_ctx *ctx, ls_module *inner, ls_module **out_m);
/* torch.utils.checkpoint.checkpoint_sequential: split a Sequential's layers into segments (equal
 * sizes, the last takes the rest), each checkpointed but the last: as PyTorch's, the last segment
 * keeps its activations from forward to the backward that follows at once (recomputing them
 * would only hold the same at the same time, later), and frees them after its backward; so one
 * segment checkpoints nothing. Consumes seq; the parameter order and names are unchanged, and the
 * segments ("Checkpoint") become the returned model's children (ls_module_child). A seq that a
 * trainer holds as its model (made, not yet destroyed), or one inside a container, is
 * LS_ERR_INVALID_ARGUMENT: wrap it first.
 * On error seq and *out_m are left untouched (so out_m may be &seq). */
ls_status ls_checkpoint_sequential(ls_module *seq, int segments, ls_module **out_m);
/* Training mode (dropout active, batch norm on the batch's statistics) for m and everything
 * inside it; modules start in training mode. Set it on a module inside to freeze that one alone
 * (a batch norm in eval mode while the rest trains); ls_trainer_evaluate puts the modes back. */
void ls_module_set_training(ls_module *m, int training);
/* The module's kind, as PyTorch names its class: "Linear", "ReLU", "GELU", "Dropout",
 * "Sequential", "Checkpoint", "Conv2d", "BatchNorm2d", "MaxPool2d", "AvgPool2d",
 * "GlobalAvgPool2d", "Flatten", "Reshape", "Cast", "Residual" ("?" for NULL). */
const char *ls_module_kind(const ls_module *m);
/* The modules directly inside m (a Sequential's layers, a Checkpoint's wrapped module, a
 * Residual's body and then its shortcut): how many, and the i-th (NULL out of range); 0 and NULL
 * for the other kinds. A walk over them reaches every module, as PyTorch's model.modules(): e.g.
 * every BatchNorm2d of an ls_resnet_create model, to freeze them. */
int ls_module_num_children(const ls_module *m);
ls_module *ls_module_child(ls_module *m, int i);

/* y points at a buffer owned by the module, valid until the next forward. */
ls_status ls_module_forward(ls_module *m, const ls_tensor *x, const ls_tensor **y);
/* dx (if want_dx) points at a module-owned buffer. Gradients accumulate into the grads. */
ls_status ls_module_backward(ls_module *m, const ls_tensor *dy, int want_dx, const ls_tensor **dx);

/* Freezing, as PyTorch's p.requires_grad_(False): requires_grad 0 marks m's parameter i (i = -1: every
 * parameter of m, as module.requires_grad_(False)) as needing no gradient; 1 (the default) undoes
 * it. Backward then leaves its gradient as it is (zero unless written to): no weight-gradient GEMM
 * of a frozen Linear or Conv2d weight, no sums of a frozen BatchNorm2d's weight and bias, and no
 * input gradient for a layer with no parameter needing a gradient before it (a frozen backbone
 * costs its forward alone, as in PyTorch). The flag is the parameter's: a container (Sequential,
 * Residual, Checkpoint) sets and reads its layers' flags, so freezing ls_module_child(model, 0)
 * freezes the model's parameters of that layer. ls_trainer_create reads the flags: a parameter
 * needing no gradient must be left out of the optimizer, is not all-reduced (in no gradient
 * bucket), clipped or checked for inf/NaN, and must be frozen on every rank; change the flags
 * before the trainer is made (its steps refuse a change since). An index out of range is
 * LS_ERR_INVALID_ARGUMENT; ls_module_requires_grad gives 1 or 0, and -1 for one out of range. */
ls_status ls_module_set_requires_grad(ls_module *m, int i, int requires_grad);
int ls_module_requires_grad(const ls_module *m, int i);

/* The getters give 0 or NULL (the setters do nothing) for m NULL or i out of range. */
int ls_module_num_params(const ls_module *m);
ls_tensor *ls_module_param(ls_module *m, int i);
ls_tensor *ls_module_grad(ls_module *m, int i);
const char *ls_module_param_name(const ls_module *m, int i);
int64_t ls_module_num_elements(const ls_module *m); /* total parameter elements */
ls_status ls_module_zero_grad(ls_module *m);
void ls_module_set_grad_hook(ls_module *m, ls_grad_hook hook, void *user);
/* m's layers in order, as ranks (ls_trainer_create) and checkpoints (state.json's "layers")
 * compare them: Sequential and activation checkpointing looked through (they do not change the
 * math), each leaf by its kind and what its parameters' shapes do not show ("ReLU",
 * "Dropout(p=0.5)", "Conv2d(stride=2, padding=1, groups=1)", "BatchNorm2d(eps=1e-05, momentum=0.1,
 * relu)"), another container (a Residual) as its description and "[", its branches apart by "|",
 * then "]". Fills out[0..max-1] (out may be NULL with max 0) and returns the count of all. */
#define LS_LAYER_DESC_MAX 96
int ls_module_layers(const ls_module *m, char (*out)[LS_LAYER_DESC_MAX], int max);

/* Softmax cross-entropy over int32 labels, mean over the batch. */
typedef struct ls_xent ls_xent;
ls_status ls_xent_create(ls_ctx *ctx, ls_xent **out);
void ls_xent_destroy(ls_xent *l);
/* Label smoothing for the forwards from now on (and their backwards): torch.nn.CrossEntropyLoss's
 * label_smoothing, in [0, 1) (default 0); else LS_ERR_INVALID_ARGUMENT. */
ls_status ls_xent_set_label_smoothing(ls_xent *l, double smoothing);
/* Forward: mean loss into *loss (host). Keeps the probabilities for backward. loss NULL: no wait
 * for the device now (a GPU keeps running ahead); ls_xent_read gets it later. */
ls_status ls_xent_forward(ls_xent *l, const ls_tensor *logits, const ls_tensor *labels, double *loss);
/* dlogits = d(sum of losses)/dlogits * scale; scale = 1/B gives the gradient of the mean. */
ls_status ls_xent_backward(ls_xent *l, double scale, const ls_tensor **dlogits);
/* The same scaled by *scale_num / scale instead, scale_num a double in device memory (the loss
 * scale, kept on the device: no wait to read it); NULL: by scale. */
ls_status ls_xent_backward_num(ls_xent *l, double scale, const double *scale_num, const ls_tensor **dlogits);
/* Correct predictions in the last forward's logits (correct NULL: counted on the device, read
 * later with ls_xent_read). */
ls_status ls_xent_correct(ls_xent *l, const ls_tensor *logits, const ls_tensor *labels, int64_t *correct);
/* The last forward's mean loss and the last count of ls_xent_correct (either may be NULL), waiting
 * for the device once; valid until the next forward. */
ls_status ls_xent_read(ls_xent *l, double *mean_loss, int64_t *correct);
/* Deferred read: queues copies of the last forward's per-sample losses to host_losses (*count
 * values of *dtype, f32 or f64: room for the batch in f64 is enough) and, when host_correct is
 * not NULL, of the last count of ls_xent_correct, in download slot `slot` of the context's
 * allocator, without waiting for the device; after ls_allocator_download_wait(slot), reduce them
 * with ls_xent_mean. host_losses should come from ls_allocator_host_alloc (pinned). */
ls_status ls_xent_download(ls_xent *l, int slot, void *host_losses, int32_t *host_correct, ls_dtype *dtype,
                           int64_t *count);
/* The mean of count per-sample losses (f32 or f64) in host memory, summed as ls_xent_read does;
 * NAN for another dtype, or losses NULL with count > 0. */
double ls_xent_mean(ls_dtype dtype, const void *losses, int64_t count);

#ifdef __cplusplus
}
#endif
#endif
