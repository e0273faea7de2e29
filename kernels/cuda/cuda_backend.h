/* cuda_backend.h (internal): what the CUDA backend's files share. The backend state (device,
 * compute stream, cuBLAS/cuBLASLt/cuDNN handles, workspace, pinned scratch), the CHECK macros that
 * turn CUDA/cuBLAS/cuDNN errors into ls_status with a message, the cuDNN convolution entries
 * (cudnn_conv.c) and the extern "C" launchers of the .cu files.
 * Every launcher enqueues on the given stream and returns cudaGetLastError(); dtypes are checked
 * by the caller (cuda_ops.c), so a launcher only sees the types it instantiates. */
#ifndef LOCKSTEP_CUDA_BACKEND_H
#define LOCKSTEP_CUDA_BACKEND_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a launcher runs: the stream, the SM count (grid sizing) and a device scratch area that
 * stream-ordered reductions may use for partial results (the cuBLASLt workspace: safe because
 * every user of it runs on this one stream). */
typedef struct ls_cuda_launch {
    cudaStream_t stream;
    int sm_count;
    void *scratch;
    size_t scratch_bytes;
} ls_cuda_launch;

/* Backend state behind ls_ctx.state. */
typedef struct ls_cuda_state {
    int device;             /* CUDA ordinal */
    int cc_major, cc_minor; /* compute capability */
    char name[256];         /* "NVIDIA H200" */
    size_t total_mem;
    cudaStream_t stream; /* the compute stream (non-blocking): every op runs on it */
    cublasHandle_t blas; /* bound to stream */
    cublasLtHandle_t lt;
    void *workspace; /* cuBLAS/cuBLASLt workspace, also the reductions' scratch */
    size_t workspace_bytes;
    double *host_scratch; /* pinned, for scalar results (sumsq) */
    int tf32;             /* LOCKSTEP_TF32=1: f32 GEMMs on TF32 tensor cores */
    ls_cuda_launch launch;
    struct ls_cuda_lt_cache *lt_cache;      /* cuBLASLt descriptors and algorithms by shape */
    cudnnHandle_t dnn;                      /* bound to stream; NULL when cuDNN could not start (dnn_error says why) */
    struct ls_cudnn_conv_cache *conv_cache; /* cuDNN descriptors and algorithms by convolution shape */
    char dnn_error[512];
} ls_cuda_state;

/* ---- errors ---- */
ls_status ls_cuda_error(cudaError_t e, const char *expr, const char *file, int line);
ls_status ls_cublas_error(cublasStatus_t e, const char *expr, const char *file, int line);
ls_status ls_cudnn_error(cudnnStatus_t e, const char *expr, const char *file, int line);
/* cuBLAS and cuBLASLt loaded (cublas_load.c; once per process, thread-safe): called before the
 * first cuBLAS call. LS_ERR_DEVICE with the loader's message when they cannot be loaded. */
ls_status ls_cublas_load(void);

#define LS_CUDA_CHECK(expr)                                                                                            \
    do {                                                                                                               \
        cudaError_t ls_cu_e_ = (expr);                                                                                 \
        if (ls_cu_e_ != cudaSuccess) return ls_cuda_error(ls_cu_e_, #expr, __FILE__, __LINE__);                        \
    } while (0)

#define LS_CUDA_CHECK_GOTO(expr, var, label)                                                                           \
    do {                                                                                                               \
        cudaError_t ls_cu_e_ = (expr);                                                                                 \
        if (ls_cu_e_ != cudaSuccess) {                                                                                 \
            (var) = ls_cuda_error(ls_cu_e_, #expr, __FILE__, __LINE__);                                                \
            goto label;                                                                                                \
        }                                                                                                              \
    } while (0)

#define LS_CUBLAS_CHECK(expr)                                                                                          \
    do {                                                                                                               \
        cublasStatus_t ls_cb_e_ = (expr);                                                                              \
        if (ls_cb_e_ != CUBLAS_STATUS_SUCCESS) return ls_cublas_error(ls_cb_e_, #expr, __FILE__, __LINE__);            \
    } while (0)

#define LS_CUBLAS_CHECK_GOTO(expr, var, label)                                                                         \
    do {                                                                                                               \
        cublasStatus_t ls_cb_e_ = (expr);                                                                              \
        if (ls_cb_e_ != CUBLAS_STATUS_SUCCESS) {                                                                       \
            (var) = ls_cublas_error(ls_cb_e_, #expr, __FILE__, __LINE__);                                              \
            goto label;                                                                                                \
        }                                                                                                              \
    } while (0)

#define LS_CUDNN_CHECK(expr)                                                                                           \
    do {                                                                                                               \
        cudnnStatus_t ls_dnn_e_ = (expr);                                                                              \
        if (ls_dnn_e_ != CUDNN_STATUS_SUCCESS) return ls_cudnn_error(ls_dnn_e_, #expr, __FILE__, __LINE__);            \
    } while (0)

#define LS_CUDNN_CHECK_GOTO(expr, var, label)                                                                          \
    do {                                                                                                               \
        cudnnStatus_t ls_dnn_e_ = (expr);                                                                              \
        if (ls_dnn_e_ != CUDNN_STATUS_SUCCESS) {                                                                       \
            (var) = ls_cudnn_error(ls_dnn_e_, #expr, __FILE__, __LINE__);                                              \
            goto label;                                                                                                \
        }                                                                                                              \
    } while (0)

/* ---- cuDNN convolutions (cudnn_conv.c, the only file that calls cuDNN) ---- */
/* Creates s->dnn on s->stream and the convolution cache. On failure s->dnn stays NULL: cu_init
 * keeps the reason in s->dnn_error, the convolution entries report it, the rest of the backend
 * works. */
ls_status ls_cudnn_init(ls_cuda_state *s);
void ls_cudnn_fini(ls_cuda_state *s);
/* The op-table entries of ops.h for t in f32, f64, f16, bf16 (checked by the caller). */
size_t ls_cudnn_conv2d_workspace(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, int pass);
ls_status ls_cudnn_conv2d_fwd(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                              const void *b, void *y, void *ws);
ls_status ls_cudnn_conv2d_bwd(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                              const void *w, void *dx, void *dw, void *db, void *ws);

/* ---- the caching device allocator (cuda_alloc.c) ---- */
ls_status ls_cuda_allocator_create(ls_cuda_state *s, ls_device dev, ls_allocator **out);

/* ---- launchers (.cu files) ---- */
/* Whether the kernels of this build can run on the current device (cudaErrorNoKernelImageForDevice
 * when the build lacks its architecture). */
cudaError_t ls_cuda_probe_kernels(void);

/* elementwise.cu: t in f32, f64, f16, bf16. bias_grad's db is f32 when t is f16/bf16. */
cudaError_t ls_cuda_bias_add(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t cols, const void *b, void *y);
cudaError_t ls_cuda_bias_grad(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t cols, const void *dy,
                              void *db);
cudaError_t ls_cuda_act_fwd(const ls_cuda_launch *l, ls_dtype t, ls_act act, int64_t n, const void *x, void *y);
cudaError_t ls_cuda_act_bwd(const ls_cuda_launch *l, ls_dtype t, ls_act act, int64_t n, const void *x, const void *dy,
                            void *dx);
cudaError_t ls_cuda_mul(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *a, const void *b, void *y);
/* ops.h's dropout_mask: keys (host memory) travel in the launches' arguments. */
cudaError_t ls_cuda_dropout_mask(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t per, const uint64_t *keys,
                                 uint32_t thr, double keep, void *y);
cudaError_t ls_cuda_scale(const ls_cuda_launch *l, ls_dtype t, int64_t n, double alpha, void *x);
cudaError_t ls_cuda_axpy(const ls_cuda_launch *l, ls_dtype t, int64_t n, double alpha, const void *x, void *y);
/* Writes {sum of squares, nonfinite flag (0 or 1)} as two doubles to dev_out (device memory);
 * accumulate: adds the sum to dev_out[0] and ORs the flag into dev_out[1] instead. */
cudaError_t ls_cuda_sumsq(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *x, double *dev_out,
                          int accumulate);
/* Gradient-norm clipping (cuda_ops.c's clip_*): acc {sum, flag} from ls_cuda_sumsq; clip_coef puts
 * the coefficient in acc[2] (1: no clipping), clip_scale scales x by it where it is below 1. */
cudaError_t ls_cuda_clip_coef(const ls_cuda_launch *l, double *acc, double max_norm);
cudaError_t ls_cuda_clip_scale(const ls_cuda_launch *l, ls_dtype t, int64_t n, void *x, const double *acc);
/* dev_out {sum, flag} from blocks partial {sum, flag} pairs, added in order (accumulate: into it). */
cudaError_t ls_cuda_sumsq_finish(const ls_cuda_launch *l, int blocks, const double *partial, double *dev_out,
                                 int accumulate);
/* optim.cu: the same for k tensors of f32 or f64 in multi-tensor launches (acc {sum, flag}: set,
 * or added to when accumulate), and clipping's scale by acc[2] where below 1. */
cudaError_t ls_cuda_clip_sumsq_mt(const ls_cuda_launch *l, ls_dtype t, int k, void *const *x, const int64_t *n,
                                  double *acc, int accumulate);
cudaError_t ls_cuda_clip_scale_mt(const ls_cuda_launch *l, ls_dtype t, int k, void *const *x, const int64_t *n,
                                  const double *acc);
/* Mixed precision on the device (ops.h's amp_update, ctl: LS_AMP_CTL doubles): GradScaler's update
 * from the flag. */
cudaError_t ls_cuda_amp_update(const ls_cuda_launch *l, double *ctl, const ls_amp_update_params *p);
/* optim.cu: amp_check over k tensors of f32 or f64 in multi-tensor launches (the flag cleared
 * first unless accumulate). */
cudaError_t ls_cuda_amp_check(const ls_cuda_launch *l, ls_dtype t, int k, void *const *x, const int64_t *n, int unscale,
                              int accumulate, double *ctl);

/* gather.cu: dst[r, :] = src[idx[r], :], rows of cols elements of elem_bytes; idx on the device. */
cudaError_t ls_cuda_gather_rows(const ls_cuda_launch *l, size_t elem_bytes, int64_t rows, int64_t cols, const void *src,
                                const int64_t *idx, void *dst);
/* dst[r, c] = lut[src[idx[r] * cols + c]] (f32); lut: 256 f32 on the device. */
cudaError_t ls_cuda_gather_rows_lut(const ls_cuda_launch *l, int64_t rows, int64_t cols, const uint8_t *src,
                                    const int64_t *idx, const float *lut, float *dst);

/* convert.cu: any pair of f32, f64, f16, bf16 (src != dst). */
cudaError_t ls_cuda_convert(const ls_cuda_launch *l, int64_t n, ls_dtype src_t, const void *src, ls_dtype dst_t,
                            void *dst);
/* optim.cu: k buffers of words[i] 32-bit words zeroed in multi-tensor launches. */
cudaError_t ls_cuda_zero_mt(const ls_cuda_launch *l, int k, void *const *x, const int64_t *words);
/* optim.cu: k tensors of f32 to dst_t (f16 or bf16), n[i] elements each, in multi-tensor launches;
 * the roundings of ls_cuda_convert. */
cudaError_t ls_cuda_convert_mt(const ls_cuda_launch *l, int k, const void *const *src, ls_dtype dst_t, void *const *dst,
                               const int64_t *n);

/* xent.cu: t in f32, f64, f16, bf16: the dtype of logits (fwd, argmax) and dlogits (bwd);
 * probs and losses are f32 when t is f16/bf16, else t. */
cudaError_t ls_cuda_xent_fwd(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C, const void *logits,
                             const int32_t *labels, double smoothing, void *probs, void *losses);
cudaError_t ls_cuda_xent_bwd(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C, const void *probs,
                             const int32_t *labels, double smoothing, double scale, const double *scale_num,
                             void *dlogits);
cudaError_t ls_cuda_argmax(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C, const void *logits,
                           const int32_t *labels, int32_t *pred, int32_t *correct);

/* optim.cu: multi-tensor steps, t in f32, f64; p/g/m/v/n are host arrays of device pointers. */
cudaError_t ls_cuda_sgd_step(const ls_cuda_launch *l, ls_dtype t, int k, void *const *p, void *const *g, void *const *m,
                             const int64_t *n, const ls_sgd_params *hp);
cudaError_t ls_cuda_adamw_step(const ls_cuda_launch *l, ls_dtype t, int k, void *const *p, void *const *g,
                               void *const *m, void *const *v, const int64_t *n, const ls_adamw_params *hp);

/* cnn.cu: NCHW pooling, batch normalization, the residual add and the convolution helpers; t in
 * f32, f64, f16, bf16. Per-channel tensors (mean, var, gamma, beta, the sums, db) and dw are in
 * the master type: f32, or f64 for f64. Reductions are two-stage through l->scratch in a fixed
 * order (deterministic). */
/* y[n, c, :] += b[c] over y [N, C, HW] (b of type t). */
cudaError_t ls_cuda_channel_bias_add(const ls_cuda_launch *l, ls_dtype t, int64_t N, int64_t C, int64_t HW,
                                     const void *b, void *y);
/* db[c] += sum over n, hw of dy[n, c, hw] (db in the master type). */
cudaError_t ls_cuda_channel_sum(const ls_cuda_launch *l, ls_dtype t, int64_t N, int64_t C, int64_t HW, const void *dy,
                                void *db);
/* dst[i] += src[i]: src of type t, dst in the master type (low-precision dw into f32 masters). */
cudaError_t ls_cuda_accumulate_master(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *src, void *dst);
cudaError_t ls_cuda_pool2d_fwd(const ls_cuda_launch *l, ls_dtype t, const ls_pool2d_params *p, const void *x, void *y);
cudaError_t ls_cuda_pool2d_bwd(const ls_cuda_launch *l, ls_dtype t, const ls_pool2d_params *p, const void *x,
                               const void *dy, void *dx);
cudaError_t ls_cuda_global_avgpool_fwd(const ls_cuda_launch *l, ls_dtype t, int64_t planes, int64_t hw, const void *x,
                                       void *y);
cudaError_t ls_cuda_global_avgpool_bwd(const ls_cuda_launch *l, ls_dtype t, int64_t planes, int64_t hw, const void *dy,
                                       void *dx);
cudaError_t ls_cuda_bn_stats(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *x, void *mean,
                             void *var);
cudaError_t ls_cuda_bn_fwd(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *x, const void *mean,
                           const void *var, const void *gamma, const void *beta, void *y);
cudaError_t ls_cuda_bn_bwd_reduce(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *dy,
                                  const void *x, const void *y, const void *mean, const void *var, void *sum_dy,
                                  void *sum_dy_xhat);
cudaError_t ls_cuda_bn_bwd_dx(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                              const void *y, const void *mean, const void *var, const void *gamma, const void *sum_dy,
                              const void *sum_dy_xhat, double count, void *dx);
/* ops.h's bn_update (t f32 or f64). */
cudaError_t ls_cuda_bn_update(const ls_cuda_launch *l, ls_dtype t, int64_t C, double keep, double w1, const void *x1,
                              void *y1, double w2, const void *x2, void *y2);
cudaError_t ls_cuda_add(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *a, const void *b, int relu,
                        void *y);

#ifdef __cplusplus
}
#endif
#endif
