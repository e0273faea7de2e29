/* cuda_backend.h (internal): what the CUDA backend's files share. The backend state (device,
 * compute stream, cuBLAS/cuBLASLt handles, workspace, pinned scratch), the CHECK macros that turn
 * CUDA/cuBLAS errors into ls_status with a message, and the extern "C" launchers of the .cu files.
 * Every launcher enqueues on the given stream and returns cudaGetLastError(); dtypes are checked
 * by the caller (cuda_ops.c), so a launcher only sees the types it instantiates. */
#ifndef LOCKSTEP_CUDA_BACKEND_H
#define LOCKSTEP_CUDA_BACKEND_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
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
    int device;               /* CUDA ordinal */
    int cc_major, cc_minor;   /* compute capability */
    char name[256];           /* "NVIDIA H200" */
    size_t total_mem;
    cudaStream_t stream;      /* the compute stream (non-blocking): every op runs on it */
    cublasHandle_t blas;      /* bound to stream */
    cublasLtHandle_t lt;
    void *workspace;          /* cuBLAS/cuBLASLt workspace, also the reductions' scratch */
    size_t workspace_bytes;
    double *host_scratch;     /* pinned, for scalar results (sumsq) */
    int tf32;                 /* LOCKSTEP_TF32=1: f32 GEMMs on TF32 tensor cores */
    ls_cuda_launch launch;
    struct ls_cuda_lt_cache *lt_cache; /* cuBLASLt descriptors and algorithms by shape */
} ls_cuda_state;

/* ---- errors ---- */
ls_status ls_cuda_error(cudaError_t e, const char *expr, const char *file, int line);
ls_status ls_cublas_error(cublasStatus_t e, const char *expr, const char *file, int line);

#define LS_CUDA_CHECK(expr)                                                                        \
    do {                                                                                           \
        cudaError_t ls_cu_e_ = (expr);                                                             \
        if (ls_cu_e_ != cudaSuccess) return ls_cuda_error(ls_cu_e_, #expr, __FILE__, __LINE__);    \
    } while (0)

#define LS_CUDA_CHECK_GOTO(expr, var, label)                                                       \
    do {                                                                                           \
        cudaError_t ls_cu_e_ = (expr);                                                             \
        if (ls_cu_e_ != cudaSuccess) {                                                             \
            (var) = ls_cuda_error(ls_cu_e_, #expr, __FILE__, __LINE__);                            \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

#define LS_CUBLAS_CHECK(expr)                                                                      \
    do {                                                                                           \
        cublasStatus_t ls_cb_e_ = (expr);                                                          \
        if (ls_cb_e_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return ls_cublas_error(ls_cb_e_, #expr, __FILE__, __LINE__);                           \
    } while (0)

#define LS_CUBLAS_CHECK_GOTO(expr, var, label)                                                     \
    do {                                                                                           \
        cublasStatus_t ls_cb_e_ = (expr);                                                          \
        if (ls_cb_e_ != CUBLAS_STATUS_SUCCESS) {                                                   \
            (var) = ls_cublas_error(ls_cb_e_, #expr, __FILE__, __LINE__);                          \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- the caching device allocator (cuda_alloc.c) ---- */
ls_status ls_cuda_allocator_create(ls_cuda_state *s, ls_device dev, ls_allocator **out);

/* ---- launchers (.cu files) ---- */
/* Whether the kernels of this build can run on the current device (cudaErrorNoKernelImageForDevice
 * when the build lacks its architecture). */
cudaError_t ls_cuda_probe_kernels(void);

/* elementwise.cu: t in f32, f64, f16, bf16. bias_grad's db is f32 when t is f16/bf16. */
cudaError_t ls_cuda_bias_add(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t cols,
                             const void *b, void *y);
cudaError_t ls_cuda_bias_grad(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t cols,
                              const void *dy, void *db);
cudaError_t ls_cuda_act_fwd(const ls_cuda_launch *l, ls_dtype t, ls_act act, int64_t n, const void *x,
                            void *y);
cudaError_t ls_cuda_act_bwd(const ls_cuda_launch *l, ls_dtype t, ls_act act, int64_t n, const void *x,
                            const void *dy, void *dx);
cudaError_t ls_cuda_mul(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *a, const void *b,
                         void *y);
cudaError_t ls_cuda_scale(const ls_cuda_launch *l, ls_dtype t, int64_t n, double alpha, void *x);
cudaError_t ls_cuda_axpy(const ls_cuda_launch *l, ls_dtype t, int64_t n, double alpha, const void *x,
                         void *y);
/* Writes {sum of squares, nonfinite flag (0 or 1)} as two doubles to dev_out (device memory). */
cudaError_t ls_cuda_sumsq(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *x,
                          double *dev_out);

/* convert.cu: any pair of f32, f64, f16, bf16 (src != dst). */
cudaError_t ls_cuda_convert(const ls_cuda_launch *l, int64_t n, ls_dtype src_t, const void *src,
                            ls_dtype dst_t, void *dst);

/* xent.cu: t in f32, f64, f16, bf16: the dtype of logits (fwd, argmax) and dlogits (bwd);
 * probs and losses are f32 when t is f16/bf16, else t. */
cudaError_t ls_cuda_xent_fwd(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C,
                             const void *logits, const int32_t *labels, void *probs, void *losses);
cudaError_t ls_cuda_xent_bwd(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C,
                             const void *probs, const int32_t *labels, double scale, void *dlogits);
cudaError_t ls_cuda_argmax(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C,
                           const void *logits, const int32_t *labels, int32_t *pred,
                           int32_t *correct);

/* optim.cu: multi-tensor steps, t in f32, f64; p/g/m/v/n are host arrays of device pointers. */
cudaError_t ls_cuda_sgd_step(const ls_cuda_launch *l, ls_dtype t, int k, void *const *p,
                             void *const *g, void *const *m, const int64_t *n,
                             const ls_sgd_params *hp);
cudaError_t ls_cuda_adamw_step(const ls_cuda_launch *l, ls_dtype t, int k, void *const *p,
                               void *const *g, void *const *m, void *const *v, const int64_t *n,
                               const ls_adamw_params *hp);

#ifdef __cplusplus
}
#endif
#endif
