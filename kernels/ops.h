/* ops.h: the op table. Each backend (kernels/cpu, kernels/cuda) fills one ls_ops struct of
 * function pointers over raw device pointers; an ls_ctx binds a device to its table, its
 * allocator and its backend state (streams, cuBLAS handles). The ls_op_* wrappers below take
 * tensors, check shapes, dtypes and devices, and dispatch on the context's device.
 * Layout: row-major; a linear layer's weight is [out, in] (PyTorch's), activations [batch, features].
 * Backward entries ACCUMULATE into parameter gradients (dw += ...), so micro-steps add up.
 * Mixed precision: with f16/bf16 activations (dtype t), weights come as low-precision copies of
 * the f32 masters, while parameter gradients (dw, db), softmax probabilities and losses are f32. */
#ifndef LOCKSTEP_OPS_H
#define LOCKSTEP_OPS_H

#include <stdint.h>

#include "memory.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ls_act { LS_ACT_RELU = 0, LS_ACT_GELU = 1 } ls_act;

/* Optimizer steps counted on the device (mixed precision skips a step without a host wait): ctl
 * points to LS_OPTIM_CTL doubles of device memory, ctl[0] the steps taken so far. When skip is
 * given and *skip (device memory) is not 0, nothing changes (ctl[0] neither); else ctl[0] += 1 and
 * the step's number comes from it (SGD's first step is number 1). ctl[1..] are the backend's.
 * ctl NULL: the host's first_step / step below. */
enum { LS_OPTIM_CTL = 4 };

typedef struct ls_sgd_params {
    float lr, momentum, dampening, weight_decay;
    int nesterov;
    int first_step;     /* momentum buffer starts as the gradient (PyTorch semantics) */
    double *ctl;        /* NULL, or the device step count (above) */
    const double *skip; /* with ctl: NULL, or the device skip flag */
    /* NULL: weight_decay for every tensor; else k values (host memory), tensor i's decay (as
     * torch.optim's parameter groups; weight_decay is then not read) */
    const float *weight_decays;
} ls_sgd_params;

typedef struct ls_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step;               /* 1-based step for bias correction */
    double *ctl;                /* NULL, or the device step count (above) */
    const double *skip;         /* with ctl: NULL, or the device skip flag */
    const float *weight_decays; /* NULL, or one per tensor, as ls_sgd_params */
} ls_adamw_params;

/* Mixed precision's inf/NaN check and loss scaling kept on the device (amp.c): ctl points to
 * LS_AMP_CTL doubles of device memory: */
enum {
    LS_AMP_SUM = 0,     /* scratch (a sum of squares) */
    LS_AMP_FOUND = 1,   /* 1: a gradient is inf/NaN (this step is skipped), else 0 */
    LS_AMP_SCALE = 2,   /* the loss scale of the next backward (1 without loss scaling) */
    LS_AMP_TRACKER = 3, /* clean steps since the scale last changed */
    LS_AMP_SKIPPED = 4, /* steps skipped so far */
    LS_AMP_LAST = 5,    /* the scale the last step's backward used */
    LS_AMP_CTL = 8
};
/* GradScaler's update (torch.cuda.amp): on found, scale *= backoff and the tracker restarts; else
 * after growth_interval clean steps scale *= growth, unless that is not finite in f32 (the scale
 * stays, the tracker restarts). enabled 0: the scale stays (bf16). A backoff
 * stops at LS_AMP_MIN_SCALE (a scale already below it stays): a run whose every step overflowed
 * (a model gone inf/NaN) halved it to 0 after 1075 steps, which every step then skipped on, and
 * whose checkpoint its resume refused. */
#define LS_AMP_MIN_SCALE 1.1754943508222875e-38 /* FLT_MIN, 2^-126: 1/scale is still finite in f32 */
typedef struct ls_amp_update_params {
    int enabled;
    double growth_factor, backoff_factor;
    int64_t growth_interval;
} ls_amp_update_params;

/* NCHW convolution, pooling and batch-normalization parameters (op-table entries at the end of
 * ls_ops). Output sizes use floor division: P = (H + 2*pad_h - R) / stride_h + 1. */
typedef struct ls_conv2d_params {
    int64_t N, C, H, W; /* input [N, C, H, W] */
    int64_t K, R, S;    /* weight [K, C/groups, R, S]; bias [K] */
    int64_t P, Q;       /* output [N, K, P, Q] */
    int64_t stride_h, stride_w, pad_h, pad_w, groups;
} ls_conv2d_params;

typedef enum ls_pool { LS_POOL_MAX = 0, LS_POOL_AVG = 1 } ls_pool;

typedef struct ls_pool2d_params {
    int64_t N, C, H, W, P, Q; /* x [N, C, H, W], y [N, C, P, Q] */
    int64_t kh, kw, stride_h, stride_w, pad_h, pad_w;
    ls_pool mode;          /* max: padding never wins; avg: see count_include_pad */
    int count_include_pad; /* avg: divide by kh*kw (PyTorch's default) rather than the valid count */
} ls_pool2d_params;

/* Per-channel statistics and affine parameters are in the master dtype (f32 for f32/f16/bf16
 * activations, f64 for f64). relu: the op is ReLU(BN(x)), and backward zeroes dy where y <= 0. */
typedef struct ls_bn_params {
    int64_t N, C, HW; /* x [N, C, H, W] with HW = H*W */
    double eps;
    int relu;
} ls_bn_params;

/* What a convolution's workspace is for (conv2d_workspace). */
enum { LS_CONV_FORWARD = 0, LS_CONV_BACKWARD = 1, LS_CONV_BACKWARD_WEIGHTS = 2 };

/* The op table. All pointers are on the backend's device unless named host_. Float ops take a
 * dtype: every backend supports LS_F32; the CPU also LS_F64 (reference, gradient checks). */
typedef struct ls_ops {
    const char *name;
    ls_status (*init)(ls_device dev, void **state);
    void (*fini)(void *state);
    ls_status (*synchronize)(void *state);
    /* Device allocator for this backend (NULL: host memory is the device memory). */
    ls_status (*allocator_create)(void *state, ls_device dev, ls_allocator **out);
    /* The stream every op is enqueued on (a cudaStream_t on CUDA), for other components to order
     * their work against (NCCL). Optional: NULL where ops run synchronously. */
    void *(*compute_stream)(void *state);

    /* C[m,n] = alpha * op(A) @ op(B) + beta * C, row-major, op = transpose when ta/tb. */
    ls_status (*gemm)(void *st, ls_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
    /* y[rows, cols] += b[cols] for each row. */
    ls_status (*bias_add)(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *b, void *y);
    /* db[cols] += sum over rows of dy[rows, cols]. */
    ls_status (*bias_grad)(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *dy, void *db);
    /* y = x @ w^T + b (b may be NULL); x[B,in], w[out,in], y[B,out]. */
    ls_status (*linear_fwd)(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *x, const void *w,
                            const void *b, void *y);
    /* dx = dy @ w (dx may be NULL); dw += dy^T @ x (dw may be NULL: a frozen weight); db += colsum(dy)
     * (db may be NULL). */
    ls_status (*linear_bwd)(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *dy, const void *x,
                            const void *w, void *dx, void *dw, void *db);
    /* y = act(x) elementwise (y may alias x). */
    ls_status (*act_fwd)(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, void *y);
    /* dx = dy * act'(x) (dx may alias dy). For ReLU, x may be act's output. ReLU as PyTorch's: a NaN
     * stays NaN forward, and backward zeroes dy where x <= 0 only (a NaN x passes dy); the fused
     * ReLUs below (bn, add) do the same. */
    ls_status (*act_bwd)(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, const void *dy, void *dx);
    /* Numerically stable softmax cross-entropy: probs[B,C] = softmax(logits), losses[B] (same
     * dtype) = -log probs[label]; with label smoothing e in (0, 1), torch.nn.CrossEntropyLoss's
     * (1 - e) (-log probs[label]) + e mean_j(-log probs[j]). labels are int32 in [0, C). */
    ls_status (*xent_fwd)(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                          double smoothing, void *probs, void *losses);
    /* dlogits = (probs - target) * s, target = (1 - e) onehot(label) + e / C (e: the smoothing),
     * computed as probs s - s e / C, less s (1 - e) at the label; s = scale, or s = *scale_num /
     * scale when scale_num (a device double: the loss scale, kept on the device) is given. */
    ls_status (*xent_bwd)(void *st, ls_dtype t, int64_t B, int64_t C, const void *probs, const int32_t *labels,
                          double smoothing, double scale, const double *scale_num, void *dlogits);
    /* pred[B] = argmax over C (first on ties; NaN counts as the maximum, as torch.argmax);
     * correct[0] = count(pred == label) (int32). */
    ls_status (*argmax)(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                        int32_t *pred, int32_t *correct);
    /* dst = src converted between f32, f16, bf16, f64 (round to nearest even). */
    ls_status (*convert)(void *st, int64_t n, ls_dtype src_t, const void *src, ls_dtype dst_t, void *dst);
    /* The same for k pairs of one source and one destination dtype (src_t != dst_t), n[i] elements
     * each: mixed precision's f16/bf16 weight copies in a few multi-tensor launches, not one per
     * tensor. Optional: NULL where a backend converts tensor by tensor (ls_op_convert_many). */
    ls_status (*convert_many)(void *st, int k, ls_dtype src_t, const void *const *src, ls_dtype dst_t, void *const *dst,
                              const int64_t *n);
    /* Zero k buffers of bytes[i] bytes (the gradients at the start of a step): a few multi-tensor
     * launches, not a memset per buffer. Optional: NULL where a memset per buffer costs no more. */
    ls_status (*zero_many)(void *st, int k, void *const *x, const size_t *bytes);
    /* y = a * b elementwise (y may alias a or b). Optional: NULL where a backend lacks it. */
    ls_status (*mul)(void *st, ls_dtype t, int64_t n, const void *a, const void *b, void *y);
    /* x *= alpha. */
    ls_status (*scale)(void *st, ls_dtype t, int64_t n, double alpha, void *x);
    /* y += alpha * x. */
    ls_status (*axpy)(void *st, ls_dtype t, int64_t n, double alpha, const void *x, void *y);
    /* host_out[0] += sum of x^2 (in double); also reports whether any element is inf/NaN. */
    ls_status (*sumsq)(void *st, ls_dtype t, int64_t n, const void *x, double *host_out, int *host_nonfinite);
    /* Multi-tensor optimizer steps over k tensors (f32 or f64 master weights). */
    ls_status (*sgd_step)(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m, const int64_t *n,
                          const ls_sgd_params *hp);
    ls_status (*adamw_step)(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m, void *const *v,
                            const int64_t *n, const ls_adamw_params *hp);
    /* ---- NCHW convolution, pooling, normalization (CPU; CUDA: cuDNN convolutions, own kernels) ---- */
    /* Bytes of workspace the call needs, the caller provides it: pass LS_CONV_FORWARD for conv2d_fwd,
     * LS_CONV_BACKWARD for conv2d_bwd with dx, LS_CONV_BACKWARD_WEIGHTS for conv2d_bwd without dx
     * (a network's first convolution: no room for the data gradient's algorithm). */
    size_t (*conv2d_workspace)(void *st, ls_dtype t, const ls_conv2d_params *p, int pass);
    /* y = conv(x, w) + b (b may be NULL). */
    ls_status (*conv2d_fwd)(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                            const void *b, void *y, void *ws);
    /* dx = conv^T(dy, w) (dx may be NULL, else overwritten); dw += corr(dy, x) (dw may be NULL: a
     * frozen weight); db += sums of dy (db may be NULL). dw, db in the master dtype. */
    ls_status (*conv2d_bwd)(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                            const void *w, void *dx, void *dw, void *db, void *ws);
    ls_status (*pool2d_fwd)(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, void *y);
    /* dx (overwritten) from dy; max pooling routes each window's gradient to its first maximum in x. */
    ls_status (*pool2d_bwd)(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, const void *dy, void *dx);
    /* y[planes] = mean of each of the planes of x[planes, hw]; backward dx = dy / hw broadcast. */
    ls_status (*global_avgpool_fwd)(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *x, void *y);
    ls_status (*global_avgpool_bwd)(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *dy, void *dx);
    /* mean[C], var[C] = per-channel batch mean and biased variance of x. */
    ls_status (*bn_stats)(void *st, ls_dtype t, const ls_bn_params *p, const void *x, void *mean, void *var);
    /* y = (x - mean) / sqrt(var + eps) * gamma + beta (then ReLU if p->relu); y may alias x. */
    ls_status (*bn_fwd)(void *st, ls_dtype t, const ls_bn_params *p, const void *x, const void *mean, const void *var,
                        const void *gamma, const void *beta, void *y);
    /* Per channel (overwritten): sum_dy = sum(g), sum_dy_xhat = sum(g * xhat), where g = dy (masked by
     * y <= 0 zeroed if p->relu; y unused otherwise) and xhat = (x - mean) / sqrt(var + eps). */
    ls_status (*bn_bwd_reduce)(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                               const void *y, const void *mean, const void *var, void *sum_dy, void *sum_dy_xhat);
    /* dx = gamma / sqrt(var + eps) * (g - (sum_dy + xhat * sum_dy_xhat) / count); count is the number
     * of samples per channel the statistics came from (N*HW, or over all ranks for synchronized
     * statistics); count 0: statistics are constants (eval mode), dx = gamma / sqrt(var + eps) * g. */
    ls_status (*bn_bwd_dx)(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x, const void *y,
                           const void *mean, const void *var, const void *gamma, const void *sum_dy,
                           const void *sum_dy_xhat, double count, void *dx);
    /* y = a + b elementwise, then ReLU if relu (y may alias a or b): the residual join. */
    ls_status (*add)(void *st, ls_dtype t, int64_t n, const void *a, const void *b, int relu, void *y);
    /* sumsq over k tensors of dtype t (x[i], n[i] elements) in order, waiting for the device once:
     * host_out[0] += the sum, *host_nonfinite |= any inf/NaN. Optional: NULL where sumsq costs no
     * wait (the CPU); ls_grads_sumsq (optim.h) then calls sumsq per tensor. */
    ls_status (*sumsq_many)(void *st, ls_dtype t, int k, const void *const *x, const int64_t *n, double *host_out,
                            int *host_nonfinite);
    /* dst[r, :] = src[idx[r], :] for r < rows, rows of cols elements of elem_bytes each; idx (int64,
     * on the device) lies in [0, rows of src): the caller checks. The batch gather from a data set
     * kept on the device (train.c). */
    ls_status (*gather_rows)(void *st, size_t elem_bytes, int64_t rows, int64_t cols, const void *src,
                             const int64_t *idx, void *dst);
    /* The same from a data set kept as bytes: dst[r, c] = lut[src[idx[r] * cols + c]] (f32), lut
     * 256 f32 on the device. */
    ls_status (*gather_rows_lut)(void *st, int64_t rows, int64_t cols, const uint8_t *src, const int64_t *idx,
                                 const float *lut, float *dst);
    /* Gradient-norm clipping on the device, without a wait (ls_clip_grad_norm). Optional, all three
     * or none: NULL where reading the norm costs no wait (the CPU). clip_sumsq: the sum of squares
     * of k tensors of dtype t, in order (as sumsq_many), into the backend's clip accumulator, added
     * to it when accumulate, else replacing it, with an inf/NaN flag; clip_norm: sqrt of the sum, or
     * NaN when flagged, to the host (waits); clip_scale: x *= max_norm / (sqrt(sum) + 1e-6) where
     * that is below 1 and nothing was flagged, the coefficient computed on the device in double (as
     * ls_clip_grad_norm's host path does). */
    ls_status (*clip_sumsq)(void *st, ls_dtype t, int k, const void *const *x, const int64_t *n, int accumulate);
    ls_status (*clip_norm)(void *st, double *host_norm);
    ls_status (*clip_scale)(void *st, ls_dtype t, int k, void *const *x, const int64_t *n, double max_norm);
    /* Mixed precision without a wait (ctl: LS_AMP_CTL doubles of device memory, layout above).
     * amp_check (k tensors of f32 or f64: master gradients): with unscale, each x *= 1 /
     * ctl[LS_AMP_SCALE] (the scale op's cast and product);
     * ctl[LS_AMP_FOUND] = 1 if an element of the k tensors is inf/NaN, else 0, or ORed into it when
     * accumulate. amp_update, once the flag is final (all ranks): ctl[LS_AMP_LAST] = the scale,
     * ctl[LS_AMP_SKIPPED] += the flag, then GradScaler's update (ls_amp_update_params). */
    ls_status (*amp_check)(void *st, ls_dtype t, int k, void *const *x, const int64_t *n, int unscale, int accumulate,
                           double *ctl);
    ls_status (*amp_update)(void *st, double *ctl, const ls_amp_update_params *p);
    /* Two per-channel updates in one call, C elements of f32 or f64 each: y1 = y1 * keep + w1 * x1
     * and y2 = y2 * keep + w2 * x2, as the scale op (by keep, skipped when keep is 1) then axpy
     * compute them. Batch norm's running statistics (keep 1 - momentum) and its parameter
     * gradients (keep 1): one launch where there were four or two. */
    ls_status (*bn_update)(void *st, ls_dtype t, int64_t C, double keep, double w1, const void *x1, void *y1, double w2,
                           const void *x2, void *y2);
    /* Dropout's multipliers into y, rows x per elements of f32, f64, f16 or bf16: element j of row
     * r is keep (rounded to t) where draw j of stream keys[r] (Philox4x32-10 of counters 0, 1, ...
     * under the key, four 32-bit draws a counter, as ls_rng_u32 draws them) has its top 24 bits >=
     * thr, else 0. keys: rows keys in host memory (the CUDA backend passes them in its launches'
     * arguments, LS_DROPOUT_KEYS rows a launch: no copy to wait for). */
    ls_status (*dropout_mask)(void *st, ls_dtype t, int64_t rows, int64_t per, const uint64_t *keys, uint32_t thr,
                              double keep, void *y);
} ls_ops;

/* Rows of keys one CUDA launch of dropout_mask takes (2 KiB of its arguments). */
#define LS_DROPOUT_KEYS 256

/* The op table for a device type, or NULL when this build lacks it (registry.c). */
const ls_ops *ls_ops_for(ls_device_type type);

/* A compute context: one per rank. */
typedef struct ls_ctx {
    ls_device device;
    const ls_ops *ops;
    void *state;         /* backend state */
    ls_allocator *alloc; /* device memory (the host allocator on the CPU) */
    ls_allocator *host;  /* host memory */
    int owns_host;
    /* Mixed precision's f16/bf16 weight copies (runtime/nn.c): while cast_epoch is nonzero the
     * parameters do not change (a trainer's step up to its optimizer, an evaluation), so a copy cast
     * in this epoch is used again (micro-batches, recomputation, evaluation chunks); 0: cast at
     * every forward. cast_epochs counts the epochs begun. */
    uint64_t cast_epoch;
    uint64_t cast_epochs;
    /* The objects made with this context and not yet destroyed, counted by their creates and
     * destroys (runtime/): ls_ctx_destroy refuses while one is left. */
    int live_modules, live_losses, live_optimizers, live_trainers, live_emas;
} ls_ctx;

/* Create a context on dev. host: host allocator to use, or NULL to create one from
 * LOCKSTEP_MEMORY_LIMIT. On the CPU the device allocator is the host allocator. */
ls_status ls_ctx_create(ls_device dev, ls_allocator *host, ls_ctx **out);
/* Destroy what was made with the context first (trainers, EMAs, optimizers, modules, losses,
 * tensors, data sets kept on the device): they use its allocator and backend to the end. While a
 * module, loss, optimizer, trainer or EMA made with it is left (the live_ counts), the context is
 * left as it is, not freed, and the error (ls_last_error, and logged) names how many of each
 * remain: destroy them, then call it again. A leak rather than a use after free at their destroys.
 * Tensors and data sets are not counted. */
void ls_ctx_destroy(ls_ctx *ctx);
ls_status ls_ctx_synchronize(ls_ctx *ctx);
/* The context's compute stream (cudaStream_t on CUDA); NULL on the CPU. */
void *ls_ctx_compute_stream(const ls_ctx *ctx);

/* ---- tensor-level ops: validate, then dispatch ---- */
ls_status ls_op_linear_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *w, const ls_tensor *b, ls_tensor *y);
ls_status ls_op_linear_backward(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *w, ls_tensor *dx,
                                ls_tensor *dw, ls_tensor *db);
ls_status ls_op_bias_add(ls_ctx *c, const ls_tensor *b, ls_tensor *y);
ls_status ls_op_bias_grad(ls_ctx *c, const ls_tensor *dy, ls_tensor *db);
ls_status ls_op_act_forward(ls_ctx *c, ls_act act, const ls_tensor *x, ls_tensor *y);
ls_status ls_op_act_backward(ls_ctx *c, ls_act act, const ls_tensor *x, const ls_tensor *dy, ls_tensor *dx);
/* Mean loss over the batch into *host_loss (NULL: the per-sample losses stay in losses, no wait
 * for the device); probs kept for backward. labels: int32 [B]. */
ls_status ls_op_xent_forward(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, ls_tensor *probs,
                             ls_tensor *losses, double *host_loss);
/* The same with label smoothing (in [0, 1); 0 is ls_op_xent_forward), as the op table's xent_fwd. */
ls_status ls_op_xent_forward_smooth(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, double smoothing,
                                    ls_tensor *probs, ls_tensor *losses, double *host_loss);
ls_status ls_op_xent_backward(ls_ctx *c, const ls_tensor *probs, const ls_tensor *labels, double scale,
                              ls_tensor *dlogits);
/* The same with label smoothing (the forward's), scaled by *scale_num / scale, scale_num a double
 * in device memory (the loss scale kept on the device); NULL: by scale. */
ls_status ls_op_xent_backward_num(ls_ctx *c, const ls_tensor *probs, const ls_tensor *labels, double smoothing,
                                  double scale, const double *scale_num, ls_tensor *dlogits);
/* Number of rows whose argmax equals the label. pred: int32 [B + 1] scratch; the count is also
 * left in pred[B], and host_correct NULL leaves it only there (no wait for the device). */
ls_status ls_op_accuracy(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, ls_tensor *pred,
                         int64_t *host_correct);
ls_status ls_op_convert(ls_ctx *c, const ls_tensor *src, ls_tensor *dst);
/* dst[i] = src[i] converted, for k pairs (runs of one dtype pair through the backend's convert_many
 * where it has one). */
ls_status ls_op_convert_many(ls_ctx *c, int k, const ls_tensor *const *src, ls_tensor *const *dst);
/* Every element of t[0..k) zero (the backend's zero_many where it has one, else ls_tensor_zero). */
ls_status ls_op_zero_many(ls_ctx *c, int k, ls_tensor *const *t);

/* ---- NCHW convolution, pooling, batch normalization, residual add (CPU and CUDA; a backend whose
 * entry is NULL gives LS_ERR_UNSUPPORTED). Square kernels, strides and paddings at this level. ---- */
/* Output size of a convolution or pooling window along one dimension (0 or less: invalid). */
int64_t ls_conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad);
/* x [N, C, H, W], w [K, C/groups, R, S], b [K] or NULL, y [N, K, P, Q]. The workspace comes from the
 * context's allocator for the duration of the call (it counts toward the peak). */
ls_status ls_op_conv2d_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *w, const ls_tensor *b, ls_tensor *y,
                               int stride, int pad, int groups);
/* dx, dw and db may be NULL (dw NULL: a frozen weight, no weight-gradient pass); dw and db
 * accumulate, in the master dtype (f32 for f16/bf16). */
ls_status ls_op_conv2d_backward(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *w, ls_tensor *dx,
                                ls_tensor *dw, ls_tensor *db, int stride, int pad, int groups);
/* Max or average pooling with a square window (average counts the padding, as PyTorch's default). */
ls_status ls_op_pool2d_forward(ls_ctx *c, ls_pool mode, int kernel, int stride, int pad, const ls_tensor *x,
                               ls_tensor *y);
ls_status ls_op_pool2d_backward(ls_ctx *c, ls_pool mode, int kernel, int stride, int pad, const ls_tensor *x,
                                const ls_tensor *dy, ls_tensor *dx);
/* x [N, C, H, W] -> y [N, C]. */
ls_status ls_op_global_avgpool_forward(ls_ctx *c, const ls_tensor *x, ls_tensor *y);
ls_status ls_op_global_avgpool_backward(ls_ctx *c, const ls_tensor *dy, ls_tensor *dx);
/* Batch normalization over x [N, C, H, W] (or [N, C]); mean, var, gamma, beta, sums: [C] master dtype. */
ls_status ls_op_batchnorm_stats(ls_ctx *c, const ls_tensor *x, ls_tensor *mean, ls_tensor *var);
ls_status ls_op_batchnorm_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *mean, const ls_tensor *var,
                                  const ls_tensor *gamma, const ls_tensor *beta, double eps, int relu, ls_tensor *y);
/* y: the forward output (used when relu). */
ls_status ls_op_batchnorm_backward_reduce(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *y,
                                          const ls_tensor *mean, const ls_tensor *var, double eps, int relu,
                                          ls_tensor *sum_dy, ls_tensor *sum_dy_xhat);
ls_status ls_op_batchnorm_backward_dx(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *y,
                                      const ls_tensor *mean, const ls_tensor *var, const ls_tensor *gamma,
                                      const ls_tensor *sum_dy, const ls_tensor *sum_dy_xhat, double eps, int relu,
                                      double count, ls_tensor *dx);
/* y = a + b (same shape and dtype; y may alias a or b); _relu: y = ReLU(a + b). */
ls_status ls_op_add(ls_ctx *c, const ls_tensor *a, const ls_tensor *b, ls_tensor *y);
ls_status ls_op_add_relu(ls_ctx *c, const ls_tensor *a, const ls_tensor *b, ls_tensor *y);

#ifdef __cplusplus
}
#endif
#endif
