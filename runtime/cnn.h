/* cnn.h: convolutional modules over NCHW tensors, built on nn.h's module system (forward/backward,
 * parameter lists, Sequential, Checkpoint, gradient hooks): Conv2d, BatchNorm2d (optionally with
 * a fused ReLU and synchronized statistics), max/average pooling, global average pooling,
 * reshape/flatten, a dtype cast, a residual block, and a small ResNet builder. BatchNorm's running
 * statistics are buffers, not parameters: ls_cnn_buffer lists them so data-parallel training can
 * broadcast rank 0's (as DDP's broadcast_buffers) and checkpoints can save them. */
#ifndef LOCKSTEP_CNN_H
#define LOCKSTEP_CNN_H

#include <stdint.h>

#include "comm.h"
#include "nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Conv2d: weight [out, in/groups, kernel, kernel] (+ bias [out]), initialized like torch.nn.Conv2d
 * (U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in/groups*kernel^2) from a Philox stream of seed.
 * dtype: f32 or f64 parameters; f16/bf16 inputs compute with low-precision copies of the f32
 * masters (as Linear). Input [N, in, H, W], output [N, out, P, Q]. */
ls_status ls_conv2d_create(ls_ctx *ctx, ls_dtype dtype, int64_t in, int64_t out, int kernel, int stride, int pad,
                           int groups, int bias, uint64_t seed, const char *name, ls_module **out_m);

typedef struct ls_batchnorm_config {
    double eps;      /* 1e-5 */
    double momentum; /* 0.1: running = (1 - momentum) * running + momentum * batch statistic */
    int relu;        /* fuse a ReLU after the normalization */
    ls_comm *sync;   /* NULL: per-rank statistics (DDP); else statistics over all of sync's ranks */
} ls_batchnorm_config;

/* PyTorch's defaults: eps 1e-5, momentum 0.1, no ReLU, no synchronization. */
ls_batchnorm_config ls_batchnorm_defaults(void);

/* BatchNorm2d over [N, C, H, W] (or BatchNorm1d over [N, C]): weight 1, bias 0 (parameters, dtype
 * f32 or f64), running mean 0 and running variance 1 (buffers, same dtype). Training mode
 * normalizes with the batch mean and biased variance and folds them into the running statistics
 * (the unbiased variance), once per step: a forward repeated before the next backward (activation
 * checkpointing's recomputation) does not fold them in again. Eval mode normalizes with the running
 * statistics. cfg NULL: ls_batchnorm_defaults(). */
ls_status ls_batchnorm2d_create(ls_ctx *ctx, ls_dtype dtype, int64_t channels, const ls_batchnorm_config *cfg,
                                const char *name, ls_module **out_m);

/* Max or average pooling with a square window (average counts padding, PyTorch's default). */
ls_status ls_pool2d_create(ls_ctx *ctx, ls_pool mode, int kernel, int stride, int pad, ls_module **out_m);
/* [N, C, H, W] -> [N, C]: the mean of each plane. */
ls_status ls_global_avgpool_create(ls_ctx *ctx, ls_module **out_m);
/* [N, ...] -> [N, product of the rest] (a view: no copy). */
ls_status ls_flatten_create(ls_ctx *ctx, ls_module **out_m);
/* [N, ...] -> [N, sample_shape...] (a view), e.g. a [B, 784] batch into [B, 1, 28, 28]. ndim is the
 * number of per-sample dims (1..3); their product must equal the input's per-sample size. */
ls_status ls_reshape_create(ls_ctx *ctx, int ndim, const int64_t *sample_shape, ls_module **out_m);
/* Converts its input to dtype (and the gradient back): the autocast point of mixed precision.
 * The identity when the input already has that dtype. */
ls_status ls_cast_create(ls_ctx *ctx, ls_dtype dtype, ls_module **out_m);

/* y = ReLU(body(x) + shortcut(x)) (ReLU when relu is set), shortcut NULL: the identity. Takes
 * ownership of body and shortcut (also on error; one module as both is an error, and so is one
 * already inside a container, which is left to its container). Parameters:
 * body's ("body.<name>"), then shortcut's ("shortcut.<name>"). */
ls_status ls_residual_create(ls_ctx *ctx, ls_module *body, ls_module *shortcut, int relu, ls_module **out_m);

/* ResNet's BasicBlock: body conv3x3(in->out, stride)-BN-ReLU-conv3x3(out->out)-BN, shortcut the
 * identity, or conv1x1(in->out, stride)-BN when stride != 1 or in != out; then ReLU. Convolutions
 * have no bias; conv i of the block draws its init stream from seed + i. */
ls_status ls_basic_block_create(ls_ctx *ctx, ls_dtype dtype, int64_t in, int64_t out, int stride, uint64_t seed,
                                const ls_batchnorm_config *bn, ls_module **out_m);

#define LS_RESNET_MAX_STAGES 8

typedef struct ls_resnet_config {
    ls_dtype param_dtype;            /* f32 (f64 for gradient checks) */
    ls_dtype act_dtype;              /* activations: f32, f16 or bf16 (a cast after the reshape) */
    int64_t in_channels, in_h, in_w; /* the input: [B, in_channels*in_h*in_w] or [B, in_channels, in_h, in_w] */
    int n_stages;                    /* 1..LS_RESNET_MAX_STAGES */
    int64_t widths[LS_RESNET_MAX_STAGES];
    int blocks; /* BasicBlocks per stage (stages after the first start with stride 2) */
    int64_t num_classes;
    uint64_t seed;
    ls_comm *sync_bn; /* synchronized batch norm (NULL: per-rank statistics) */
    float dropout;    /* timm's drop_rate: a Dropout(dropout) before the classifier; 0: none */
} ls_resnet_config;

/* A Sequential: reshape (with act_dtype's cast, where that is not param_dtype, in the same layer: the
 * parameters are named as in the f32 model), stem conv3x3(in_channels->widths[0])-BN-ReLU, the blocks of every
 * stage, global average pooling, [Dropout(dropout)], Linear(widths[last], num_classes). The
 * Dropout takes no initialization stream: with it, the weights are those of the model without. Logits [B, num_classes] in
 * act_dtype. Its top-level layers are what ls_checkpoint_sequential splits into segments. */
ls_status ls_resnet_create(ls_ctx *ctx, const ls_resnet_config *cfg, ls_module **out_m);
/* Number of top-level layers of such a ResNet (for choosing checkpoint segments). */
int ls_resnet_num_layers(const ls_resnet_config *cfg);

/* ---- buffers: persistent state that is not a parameter (BatchNorm's running statistics) ---- */
/* Buffers of m and every module inside it, in a fixed depth-first order (the same on every rank). */
int ls_cnn_num_buffers(ls_module *m);
/* Buffer i (NULL if out of range); name (may be NULL) gets its name, after the parameter names:
 * "3.body.1.running_mean" for the BatchNorm whose weight is "3.body.1.weight". */
ls_tensor *ls_cnn_buffer(ls_module *m, int i, char *name, int len);
/* Every rank receives rank 0's buffers (DDP's broadcast_buffers). comm NULL or world 1: nothing. */
ls_status ls_cnn_broadcast_buffers(ls_comm *comm, ls_module *m);
/* Free the activation and gradient buffers that m and every module inside it hold (reallocated by
 * the next forward); parameters, gradients and buffers stay. */
void ls_cnn_release_activations(ls_module *m);
/* local 1: m's SyncBatchNorms normalize with this rank's statistics alone, without a collective,
 * until called with 0 (a batch-size trial runs one rank's step without the communicator: a
 * SyncBatchNorm's all-reduce in it met another rank's next collective, or a rank that had run out
 * of memory). The same memory: its host buffers are the module's. */
void ls_cnn_sync_local(ls_module *m, int local);
/* The SyncBatchNorms in m (m itself and every module inside it) that all-reduce their statistics
 * now: over a communicator of several ranks, not held local by ls_cnn_sync_local (0 for NULL). */
int ls_cnn_num_synced(const ls_module *m);

#ifdef __cplusplus
}
#endif
#endif
