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

typedef struct ls_sgd_params {
    float lr, momentum, dampening, weight_decay;
    int nesterov;
    int first_step; /* momentum buffer starts as the gradient (PyTorch semantics) */
} ls_sgd_params;

typedef struct ls_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t step; /* 1-based step for bias correction */
} ls_adamw_params;

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
    ls_status (*gemm)(void *st, ls_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t k,
                      double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                      double beta, void *c, int64_t ldc);
    /* y[rows, cols] += b[cols] for each row. */
    ls_status (*bias_add)(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *b, void *y);
    /* db[cols] += sum over rows of dy[rows, cols]. */
    ls_status (*bias_grad)(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *dy, void *db);
    /* y = x @ w^T + b (b may be NULL); x[B,in], w[out,in], y[B,out]. */
    ls_status (*linear_fwd)(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *x,
                            const void *w, const void *b, void *y);
    /* dx = dy @ w (dx may be NULL); dw += dy^T @ x; db += colsum(dy) (db may be NULL). */
    ls_status (*linear_bwd)(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *dy,
                            const void *x, const void *w, void *dx, void *dw, void *db);
    /* y = act(x) elementwise (y may alias x). */
    ls_status (*act_fwd)(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, void *y);
    /* dx = dy * act'(x) (dx may alias dy). For ReLU, x may be act's output. */
    ls_status (*act_bwd)(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, const void *dy,
                         void *dx);
    /* Numerically stable softmax cross-entropy: probs[B,C] = softmax(logits), losses[B] (same
     * dtype) = -log probs[label]. labels are int32 in [0, C). */
    ls_status (*xent_fwd)(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits,
                          const int32_t *labels, void *probs, void *losses);
    /* dlogits = (probs - onehot(label)) * scale. */
    ls_status (*xent_bwd)(void *st, ls_dtype t, int64_t B, int64_t C, const void *probs,
                          const int32_t *labels, double scale, void *dlogits);
    /* pred[B] = argmax over C (first on ties); correct[0] = count(pred == label) (int32). */
    ls_status (*argmax)(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits,
                        const int32_t *labels, int32_t *pred, int32_t *correct);
    /* dst = src converted between f32, f16, bf16, f64 (round to nearest even). */
    ls_status (*convert)(void *st, int64_t n, ls_dtype src_t, const void *src, ls_dtype dst_t, void *dst);
    /* y = a * b elementwise (y may alias a or b). Optional: NULL where a backend lacks it. */
    ls_status (*mul)(void *st, ls_dtype t, int64_t n, const void *a, const void *b, void *y);
    /* x *= alpha. */
    ls_status (*scale)(void *st, ls_dtype t, int64_t n, double alpha, void *x);
    /* y += alpha * x. */
    ls_status (*axpy)(void *st, ls_dtype t, int64_t n, double alpha, const void *x, void *y);
    /* host_out[0] += sum of x^2 (in double); also reports whether any element is inf/NaN. */
    ls_status (*sumsq)(void *st, ls_dtype t, int64_t n, const void *x, double *host_out,
                       int *host_nonfinite);
    /* Multi-tensor optimizer steps over k tensors (f32 or f64 master weights). */
    ls_status (*sgd_step)(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m,
                          const int64_t *n, const ls_sgd_params *hp);
    ls_status (*adamw_step)(void *st, ls_dtype t, int k, void *const *p, void *const *g,
                            void *const *m, void *const *v, const int64_t *n,
                            const ls_adamw_params *hp);
} ls_ops;

/* The op table for a device type, or NULL when this build lacks it (registry.c). */
const ls_ops *ls_ops_for(ls_device_type type);

/* A compute context: one per rank. */
typedef struct ls_ctx {
    ls_device device;
    const ls_ops *ops;
    void *state;          /* backend state */
    ls_allocator *alloc;  /* device memory (the host allocator on the CPU) */
    ls_allocator *host;   /* host memory */
    int owns_host;
} ls_ctx;

/* Create a context on dev. host: host allocator to use, or NULL to create one from
 * LOCKSTEP_MEMORY_LIMIT. On the CPU the device allocator is the host allocator. */
ls_status ls_ctx_create(ls_device dev, ls_allocator *host, ls_ctx **out);
void ls_ctx_destroy(ls_ctx *ctx);
ls_status ls_ctx_synchronize(ls_ctx *ctx);
/* The context's compute stream (cudaStream_t on CUDA); NULL on the CPU. */
void *ls_ctx_compute_stream(const ls_ctx *ctx);

/* ---- tensor-level ops: validate, then dispatch ---- */
ls_status ls_op_linear_forward(ls_ctx *c, const ls_tensor *x, const ls_tensor *w, const ls_tensor *b,
                               ls_tensor *y);
ls_status ls_op_linear_backward(ls_ctx *c, const ls_tensor *dy, const ls_tensor *x, const ls_tensor *w,
                                ls_tensor *dx, ls_tensor *dw, ls_tensor *db);
ls_status ls_op_bias_add(ls_ctx *c, const ls_tensor *b, ls_tensor *y);
ls_status ls_op_bias_grad(ls_ctx *c, const ls_tensor *dy, ls_tensor *db);
ls_status ls_op_act_forward(ls_ctx *c, ls_act act, const ls_tensor *x, ls_tensor *y);
ls_status ls_op_act_backward(ls_ctx *c, ls_act act, const ls_tensor *x, const ls_tensor *dy,
                             ls_tensor *dx);
/* Mean loss over the batch into *host_loss; probs kept for backward. labels: int32 [B]. */
ls_status ls_op_xent_forward(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels,
                             ls_tensor *probs, ls_tensor *losses, double *host_loss);
ls_status ls_op_xent_backward(ls_ctx *c, const ls_tensor *probs, const ls_tensor *labels, double scale,
                              ls_tensor *dlogits);
/* Number of rows whose argmax equals the label. pred: int32 [B] scratch. */
ls_status ls_op_accuracy(ls_ctx *c, const ls_tensor *logits, const ls_tensor *labels, ls_tensor *pred,
                         int64_t *host_correct);
ls_status ls_op_convert(ls_ctx *c, const ls_tensor *src, ls_tensor *dst);

#ifdef __cplusplus
}
#endif
#endif
