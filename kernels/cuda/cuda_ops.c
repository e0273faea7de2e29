/* cuda_ops.c: the CUDA op table (ls_cuda_ops), the pair of kernels/cpu/cpu_ops.c. The state holds
 * one non-blocking compute stream on which every op is enqueued, cuBLAS, cuBLASLt and cuDNN handles
 * bound to it and a 32 MiB workspace cuBLAS and the reductions share (stream order makes the
 * sharing safe; convolutions get theirs from the caller). GEMMs go through
 * cublasGemmEx (row-major via the column-major transpose identity: C^T = op(B)^T op(A)^T);
 * linear_fwd through cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS fusing the bias. f16/bf16 GEMMs
 * run on tensor cores with f32 accumulation; f32 uses TF32 tensor cores when LOCKSTEP_TF32=1.
 * Supported dtypes per entry:
 *   gemm, linear_fwd, linear_bwd, bias_add, bias_grad, act_fwd, act_bwd, xent_fwd, xent_bwd,
 *   argmax, mul, scale, axpy, sumsq, clip_sumsq, clip_scale: f32, f64, f16, bf16 (f16/bf16 compute in f32; following
 *   ops.h's mixed-precision rule, with f16/bf16 the parameter gradients of linear_bwd and
 *   bias_grad and the probabilities and losses of xent_fwd/xent_bwd are f32)
 *   convert, convert_many: any pair of f32, f64, f16, bf16 (convert_many: f32 to f16/bf16 multi-tensor)
 *   zero_many: any buffers (multi-tensor where whole, 4-byte aligned 32-bit words)
 *   sgd_step, adamw_step: f32, f64 (master weights)
 *   conv2d_workspace, conv2d_fwd, conv2d_bwd (cuDNN, cudnn_conv.c), pool2d_fwd/bwd,
 *   global_avgpool_fwd/bwd, bn_stats, bn_fwd, bn_bwd_reduce, bn_bwd_dx, add (cnn.cu): f32, f64,
 *   f16, bf16 (f16/bf16 compute in f32; conv's dw/db and batch norm's per-channel tensors are f32)
 * Anything else is LS_ERR_UNSUPPORTED with a message. Ops return once the work is enqueued; only
 * sumsq and clip_norm (host results), synchronize and the allocator's host copies wait for the stream. A cuDNN
 * that fails to start does not fail the context: the convolutions then report why. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "log.h"

#ifndef LS_CUDA_ARCHS
#define LS_CUDA_ARCHS "unknown"
#endif

#define LS_CUDA_WORKSPACE ((size_t)32 << 20)
#define LS_LT_CACHE 64

/* ---- errors ---- */
ls_status ls_cuda_error(cudaError_t e, const char *expr, const char *file, int line) {
    ls_status s = LS_ERR_CUDA;
    if (e == cudaErrorMemoryAllocation) s = LS_ERR_OUT_OF_MEMORY;
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e == cudaErrorInvalidDevice) s = LS_ERR_DEVICE;
    /* a launch or allocation failure is not sticky; clear it so later calls see their own */
    (void)cudaGetLastError();
    return ls_error(s, "CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e), cudaGetErrorString(e), expr, file,
                    line);
}

ls_status ls_cublas_error(cublasStatus_t e, const char *expr, const char *file, int line) {
    ls_status s = e == CUBLAS_STATUS_ALLOC_FAILED    ? LS_ERR_OUT_OF_MEMORY
                  : e == CUBLAS_STATUS_NOT_SUPPORTED ? LS_ERR_UNSUPPORTED
                                                     : LS_ERR_CUDA;
    return ls_error(s, "cuBLAS error %s (%s) in %s at %s:%d", cublasGetStatusName(e), cublasGetStatusString(e), expr,
                    file, line);
}

static ls_status bad_dtype(const char *op, ls_dtype t, const char *supported) {
    return ls_error(LS_ERR_UNSUPPORTED, "the CUDA backend's %s does not compute in %s (it supports %s)", op,
                    ls_dtype_name(t), supported);
}

static int is_float(ls_dtype t) { return t == LS_F32 || t == LS_F64 || t == LS_F16 || t == LS_BF16; }

#define LS_FLOATS "f32, f64, f16 and bf16"
#define NEED_FLOAT(op, t)                                                                                              \
    do {                                                                                                               \
        if (!is_float(t)) return bad_dtype(op, t, LS_FLOATS);                                                          \
    } while (0)

/* ---- cuBLASLt: descriptors and the chosen algorithm, cached by problem ---- */
typedef struct lt_key {
    ls_dtype t;
    int tf32;
    cublasOperation_t opa, opb;
    int64_t m, n, k, lda, ldb, ldc;
    cublasLtEpilogue_t epi;
    uint32_t align_a, align_b, align_c, align_bias;
} lt_key;

typedef struct lt_entry {
    lt_key key;
    int used;
    int supported; /* 0: no algorithm for this problem (callers fall back) */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

struct ls_cuda_lt_cache {
    lt_entry e[LS_LT_CACHE];
    int next;
};

static void lt_entry_clear(lt_entry *e) {
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->lc) cublasLtMatrixLayoutDestroy(e->lc);
    memset(e, 0, sizeof *e);
}

static uint32_t ptr_align(const void *p) {
    uintptr_t u = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 1 && (u % a) != 0) a >>= 1;
    return a;
}

static cudaDataType_t cuda_type(ls_dtype t) {
    switch (t) {
    case LS_F64: return CUDA_R_64F;
    case LS_F16: return CUDA_R_16F;
    case LS_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
    }
}

static cublasComputeType_t compute_type(const ls_cuda_state *s, ls_dtype t) {
    if (t == LS_F64) return CUBLAS_COMPUTE_64F;
    if (t == LS_F32 && s->tf32) return CUBLAS_COMPUTE_32F_FAST_TF32;
    return CUBLAS_COMPUTE_32F;
}

/* The dtype of parameter gradients, probabilities and losses for activations of dtype t. */
static ls_dtype master(ls_dtype t) { return t == LS_F16 || t == LS_BF16 ? LS_F32 : t; }

static int fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* Build (or find) the cached entry for key; its bias pointer is set per call. */
static ls_status lt_prepare(ls_cuda_state *s, const lt_key *key, const void *bias, lt_entry **out) {
    struct ls_cuda_lt_cache *c = s->lt_cache;
    for (int i = 0; i < LS_LT_CACHE; i++)
        if (c->e[i].used && memcmp(&c->e[i].key, key, sizeof *key) == 0) {
            *out = &c->e[i];
            return LS_OK;
        }
    lt_entry *e = &c->e[c->next];
    c->next = (c->next + 1) % LS_LT_CACHE;
    lt_entry_clear(e);
    ls_status st = LS_OK;
    cublasLtMatmulPreference_t pref = NULL;
    cudaDataType_t dt = cuda_type(key->t);
    cudaDataType_t scale_t = key->t == LS_F64 ? CUDA_R_64F : CUDA_R_32F;
    cublasComputeType_t ct = key->t == LS_F64                  ? CUBLAS_COMPUTE_64F
                             : (key->t == LS_F32 && key->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                               : CUBLAS_COMPUTE_32F;
    LS_CUBLAS_CHECK_GOTO(cublasLtMatmulDescCreate(&e->desc, ct, scale_t), st, fail);
    LS_CUBLAS_CHECK_GOTO(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &key->opa, sizeof key->opa), st, fail);
    LS_CUBLAS_CHECK_GOTO(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &key->opb, sizeof key->opb), st, fail);
    LS_CUBLAS_CHECK_GOTO(
        cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &key->epi, sizeof key->epi), st, fail);
    if (bias)
        LS_CUBLAS_CHECK_GOTO(
            cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), st, fail);
    /* stored (pre-op) shapes, column-major */
    uint64_t ar = key->opa == CUBLAS_OP_N ? (uint64_t)key->m : (uint64_t)key->k;
    uint64_t ac = key->opa == CUBLAS_OP_N ? (uint64_t)key->k : (uint64_t)key->m;
    uint64_t br = key->opb == CUBLAS_OP_N ? (uint64_t)key->k : (uint64_t)key->n;
    uint64_t bc = key->opb == CUBLAS_OP_N ? (uint64_t)key->n : (uint64_t)key->k;
    LS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&e->la, dt, ar, ac, key->lda), st, fail);
    LS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&e->lb, dt, br, bc, key->ldb), st, fail);
    LS_CUBLAS_CHECK_GOTO(cublasLtMatrixLayoutCreate(&e->lc, dt, (uint64_t)key->m, (uint64_t)key->n, key->ldc), st,
                         fail);
    LS_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceCreate(&pref), st, fail);
    size_t ws = s->workspace_bytes;
    LS_CUBLAS_CHECK_GOTO(
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), st, fail);
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        uint32_t v;
    } aligns[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key->align_a},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key->align_b},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key->align_c},
                  {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key->align_c}};
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
        LS_CUBLAS_CHECK_GOTO(
            cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &aligns[i].v, sizeof aligns[i].v), st, fail);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(s->lt, e->desc, e->la, e->lb, e->lc, e->lc, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    pref = NULL;
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) {
        st = ls_cublas_error(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
        goto fail;
    }
    e->key = *key;
    e->used = 1;
    e->supported = hs == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    if (e->supported) e->algo = res.algo;
    *out = e;
    return LS_OK;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    lt_entry_clear(e);
    return st;
}

/* Row-major C[m,n] = alpha op(A) op(B) + beta C (+ bias[n] broadcast over rows when bias) through
 * cuBLASLt. *done = 0 when cuBLASLt has no algorithm for it or the bias is not 16-byte aligned (the
 * caller falls back). */
static ls_status lt_gemm(ls_cuda_state *s, ls_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const void *a, int64_t lda, const void *b, int64_t ldb, float beta, void *c, int64_t ldc,
                         const void *bias, int *done) {
    *done = 0;
    /* The bias epilogue reads the bias vector with vector loads. Unlike A, B and C there is no
     * preference for its alignment: the heuristic takes it from the bias pointer set before it
     * (cublasLt.h), so the cache key holds that alignment, and a bias view at an odd offset might
     * still get a vectorized algorithm that faults (cudaErrorMisalignedAddress, which is sticky).
     * Leave such a bias to the caller's fallback. */
    if (bias && ptr_align(bias) < 16) return LS_OK;
    lt_key key;
    memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
    key.t = t;
    key.tf32 = t == LS_F32 && s->tf32;
    /* column-major: C^T[n,m] = op(B)^T[n,k] op(A)^T[k,m] */
    key.opa = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    key.opb = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    key.m = n;
    key.n = m;
    key.k = k;
    key.lda = ldb;
    key.ldb = lda;
    key.ldc = ldc;
    key.epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    key.align_a = ptr_align(b);
    key.align_b = ptr_align(a);
    key.align_c = ptr_align(c);
    key.align_bias = bias ? ptr_align(bias) : 0;
    lt_entry *e = NULL;
    LS_CHECK(lt_prepare(s, &key, bias, &e));
    if (!e->supported) return LS_OK;
    if (bias)
        LS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    cublasStatus_t ms = cublasLtMatmul(s->lt, e->desc, &alpha, b, e->la, a, e->lb, &beta, c, e->lc, c, e->lc, &e->algo,
                                       s->workspace, s->workspace_bytes, s->stream);
    if (ms == CUBLAS_STATUS_NOT_SUPPORTED) { /* remember, and let the caller fall back */
        e->supported = 0;
        return LS_OK;
    }
    if (ms != CUBLAS_STATUS_SUCCESS) return ls_cublas_error(ms, "cublasLtMatmul", __FILE__, __LINE__);
    *done = 1;
    return LS_OK;
}

/* ---- context ---- */
static void cu_fini(void *st);

static ls_status cu_init(ls_device dev, void **state) {
    *state = NULL;
    ls_cuda_state *s = calloc(1, sizeof *s);
    if (!s) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the CUDA backend's state");
    s->device = dev.index < 0 ? 0 : dev.index;
    ls_status st = LS_OK;
    cudaError_t e = cudaSetDevice(s->device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(s);
        return ls_error(LS_ERR_DEVICE,
                        "cannot use CUDA device cuda:%d: %s (%s); run on the CPU with --device cpu or "
                        "LOCKSTEP_DEVICE=cpu",
                        dev.index < 0 ? 0 : dev.index, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    struct cudaDeviceProp prop;
    LS_CUDA_CHECK_GOTO(cudaGetDeviceProperties(&prop, s->device), st, fail);
    snprintf(s->name, sizeof s->name, "%s", prop.name);
    s->cc_major = prop.major;
    s->cc_minor = prop.minor;
    s->total_mem = prop.totalGlobalMem;
    e = ls_cuda_probe_kernels();
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
        (void)cudaGetLastError();
        st = ls_error(LS_ERR_DEVICE,
                      "this build of lockstep has no kernels for %s (sm_%d%d): it was built for "
                      "CMAKE_CUDA_ARCHITECTURES=\"%s\"; rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
                      s->name, s->cc_major, s->cc_minor, LS_CUDA_ARCHS, s->cc_major, s->cc_minor);
        goto fail;
    }
    LS_CUDA_CHECK_GOTO(e, st, fail);
    LS_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), st, fail);
    st = ls_cublas_load();
    if (st != LS_OK) goto fail;
    LS_CUBLAS_CHECK_GOTO(cublasCreate(&s->blas), st, fail);
    LS_CUBLAS_CHECK_GOTO(cublasSetStream(s->blas, s->stream), st, fail);
    LS_CUBLAS_CHECK_GOTO(cublasLtCreate(&s->lt), st, fail);
    s->workspace_bytes = LS_CUDA_WORKSPACE;
    LS_CUDA_CHECK_GOTO(cudaMalloc(&s->workspace, s->workspace_bytes), st, fail);
    LS_CUBLAS_CHECK_GOTO(cublasSetWorkspace(s->blas, s->workspace, s->workspace_bytes), st, fail);
    LS_CUDA_CHECK_GOTO(cudaMallocHost((void **)&s->host_scratch, 4 * sizeof(double)), st, fail);
    s->lt_cache = calloc(1, sizeof *s->lt_cache);
    if (!s->lt_cache) {
        st = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the cuBLASLt cache");
        goto fail;
    }
    if (ls_cudnn_init(s) != LS_OK) {
        snprintf(s->dnn_error, sizeof s->dnn_error, "%s", ls_last_error());
        LS_LOG_W("cuda:%d: cuDNN did not start, so convolutions will fail: %s", s->device, s->dnn_error);
    }
    st = ls_env_tf32(&s->tf32);
    if (st != LS_OK) goto fail;
    s->launch.stream = s->stream;
    s->launch.sm_count = prop.multiProcessorCount;
    s->launch.scratch = s->workspace;
    s->launch.scratch_bytes = s->workspace_bytes;
    char mem[32];
    LS_LOG_I("cuda:%d: %s (sm_%d%d, %d SMs, %s), f32 GEMMs %s", s->device, s->name, s->cc_major, s->cc_minor,
             prop.multiProcessorCount, ls_memory_format(s->total_mem, mem, sizeof mem),
             s->tf32 ? "on TF32 tensor cores (LOCKSTEP_TF32=1)" : "in full f32 (LOCKSTEP_TF32=1 for TF32)");
    *state = s;
    return LS_OK;
fail:
    cu_fini(s);
    return st;
}

static void cu_fini(void *st) {
    ls_cuda_state *s = st;
    if (!s) return;
    if (s->stream) (void)cudaStreamSynchronize(s->stream);
    if (s->lt_cache) {
        for (int i = 0; i < LS_LT_CACHE; i++) lt_entry_clear(&s->lt_cache->e[i]);
        free(s->lt_cache);
    }
    ls_cudnn_fini(s);
    if (s->lt) cublasLtDestroy(s->lt);
    if (s->blas) cublasDestroy(s->blas);
    if (s->workspace) (void)cudaFree(s->workspace);
    if (s->host_scratch) (void)cudaFreeHost(s->host_scratch);
    if (s->stream) (void)cudaStreamDestroy(s->stream);
    (void)cudaGetLastError();
    free(s);
}

static ls_status cu_sync(void *st) {
    ls_cuda_state *s = st;
    LS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    return LS_OK;
}

static void *cu_compute_stream(void *st) { return ((ls_cuda_state *)st)->stream; }

static ls_status cu_allocator_create(void *st, ls_device dev, ls_allocator **out) {
    return ls_cuda_allocator_create(st, dev, out);
}

/* ---- GEMM ---- */
/* Row-major C[m,n] = alpha op(A) op(B) + beta C through cublasGemmEx; A and B are t, C is ct
 * (t, or f32 for f16/bf16 inputs accumulating into f32 master gradients). */
static ls_status gemm_ex(ls_cuda_state *s, ls_dtype t, ls_dtype ct, int ta, int tb, int64_t m, int64_t n, int64_t k,
                         double alpha, const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                         int64_t ldc) {
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) || !fits_int(ldc))
        return ls_error(LS_ERR_UNSUPPORTED, "gemm: [%lld x %lld x %lld] exceeds cuBLAS's 32-bit sizes", (long long)m,
                        (long long)n, (long long)k);
    cudaDataType_t dt = cuda_type(t);
    float af = (float)alpha, bf = (float)beta;
    const void *pa = t == LS_F64 ? (const void *)&alpha : (const void *)&af;
    const void *pb = t == LS_F64 ? (const void *)&beta : (const void *)&bf;
    LS_CUBLAS_CHECK(cublasGemmEx(s->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n,
                                 (int)m, (int)k, pa, b, dt, (int)ldb, a, dt, (int)lda, pb, c, cuda_type(ct), (int)ldc,
                                 compute_type(s, t), CUBLAS_GEMM_DEFAULT));
    return LS_OK;
}

/* C = beta C for a k = 0 product (cuBLAS wants k >= 1 for leading dimensions). */
static ls_status scale_rows(ls_cuda_state *s, ls_dtype t, int64_t m, int64_t n, double beta, void *c, int64_t ldc) {
    size_t es = ls_dtype_size(t);
    if (beta == 0 && ldc == n) {
        LS_CUDA_CHECK(cudaMemsetAsync(c, 0, (size_t)(m * n) * es, s->stream));
        return LS_OK;
    }
    if (ldc == n) {
        LS_CUDA_CHECK(ls_cuda_scale(&s->launch, t, m * n, beta, c));
        return LS_OK;
    }
    for (int64_t r = 0; r < m; r++) {
        char *row = (char *)c + (size_t)(r * ldc) * es;
        if (beta == 0)
            LS_CUDA_CHECK(cudaMemsetAsync(row, 0, (size_t)n * es, s->stream));
        else
            LS_CUDA_CHECK(ls_cuda_scale(&s->launch, t, n, beta, row));
    }
    return LS_OK;
}

static ls_status cu_gemm(void *st, ls_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                         const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
    ls_cuda_state *s = st;
    NEED_FLOAT("gemm", t);
    if (m <= 0 || n <= 0) return LS_OK;
    if (k <= 0) return scale_rows(s, t, m, n, beta, c, ldc);
    return gemm_ex(s, t, t, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

static ls_status cu_bias_add(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *b, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("bias_add", t);
    LS_CUDA_CHECK(ls_cuda_bias_add(&s->launch, t, rows, cols, b, y));
    return LS_OK;
}

static ls_status cu_bias_grad(void *st, ls_dtype t, int64_t rows, int64_t cols, const void *dy, void *db) {
    ls_cuda_state *s = st;
    NEED_FLOAT("bias_grad", t);
    LS_CUDA_CHECK(ls_cuda_bias_grad(&s->launch, t, rows, cols, dy, db));
    return LS_OK;
}

/* y[B,out] = x[B,in] @ w[out,in]^T (+ b): one cuBLASLt matmul with the bias epilogue; if cuBLASLt
 * has no algorithm for the case (or for f64, or a dimension of 1, where PyTorch also keeps away
 * from cuBLASLt's bias epilogue: a batch of one sample is a last partial batch), cublasGemmEx and
 * the bias kernel. */
static ls_status cu_linear_fwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *x, const void *w,
                               const void *b, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("linear", t);
    if (B <= 0 || out <= 0) return LS_OK;
    if (in <= 0) {
        LS_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(B * out) * ls_dtype_size(t), s->stream));
        if (b) LS_CUDA_CHECK(ls_cuda_bias_add(&s->launch, t, B, out, b, y));
        return LS_OK;
    }
    if (t != LS_F64 && B > 1 && out > 1 && in > 1) {
        int done = 0;
        LS_CHECK(lt_gemm(s, t, 0, 1, B, out, in, 1.0f, x, in, w, in, 0.0f, y, out, b, &done));
        if (done) return LS_OK;
    }
    LS_CHECK(gemm_ex(s, t, t, 0, 1, B, out, in, 1.0, x, in, w, in, 0.0, y, out));
    if (b) LS_CUDA_CHECK(ls_cuda_bias_add(&s->launch, t, B, out, b, y));
    return LS_OK;
}

/* dx = dy @ w; dw += dy^T @ x (beta = 1); db += colsum(dy) (the column-sum kernel: cuBLASLt's
 * BGRADB epilogue overwrites the bias gradient, and accumulation is what micro-steps need).
 * With f16/bf16 t, dw and db are f32 (the GEMM accumulates in f32 and adds into f32). */
static ls_status cu_linear_bwd(void *st, ls_dtype t, int64_t B, int64_t in, int64_t out, const void *dy, const void *x,
                               const void *w, void *dx, void *dw, void *db) {
    ls_cuda_state *s = st;
    NEED_FLOAT("linear backward", t);
    if (B <= 0) return LS_OK;
    if (dx && in > 0) {
        if (out <= 0)
            LS_CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)(B * in) * ls_dtype_size(t), s->stream));
        else
            LS_CHECK(gemm_ex(s, t, t, 0, 0, B, in, out, 1.0, dy, out, w, in, 0.0, dx, in));
    }
    if (dw && in > 0 && out > 0) /* dw NULL: a frozen weight */
        LS_CHECK(gemm_ex(s, t, master(t), 1, 0, out, in, B, 1.0, dy, out, x, in, 1.0, dw, in));
    if (db) LS_CUDA_CHECK(ls_cuda_bias_grad(&s->launch, t, B, out, dy, db));
    return LS_OK;
}

static ls_status cu_act_fwd(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("activation", t);
    if (act != LS_ACT_RELU && act != LS_ACT_GELU)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "activation %d is not relu or gelu", (int)act);
    LS_CUDA_CHECK(ls_cuda_act_fwd(&s->launch, t, act, n, x, y));
    return LS_OK;
}

static ls_status cu_act_bwd(void *st, ls_dtype t, ls_act act, int64_t n, const void *x, const void *dy, void *dx) {
    ls_cuda_state *s = st;
    NEED_FLOAT("activation backward", t);
    if (act != LS_ACT_RELU && act != LS_ACT_GELU)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "activation %d is not relu or gelu", (int)act);
    LS_CUDA_CHECK(ls_cuda_act_bwd(&s->launch, t, act, n, x, dy, dx));
    return LS_OK;
}

static ls_status cu_xent_fwd(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                             double smoothing, void *probs, void *losses) {
    ls_cuda_state *s = st;
    NEED_FLOAT("cross-entropy", t);
    LS_CUDA_CHECK(ls_cuda_xent_fwd(&s->launch, t, B, C, logits, labels, smoothing, probs, losses));
    return LS_OK;
}

static ls_status cu_xent_bwd(void *st, ls_dtype t, int64_t B, int64_t C, const void *probs, const int32_t *labels,
                             double smoothing, double scale, const double *scale_num, void *dlogits) {
    ls_cuda_state *s = st;
    NEED_FLOAT("cross-entropy backward", t);
    LS_CUDA_CHECK(ls_cuda_xent_bwd(&s->launch, t, B, C, probs, labels, smoothing, scale, scale_num, dlogits));
    return LS_OK;
}

static ls_status cu_argmax(void *st, ls_dtype t, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                           int32_t *pred, int32_t *correct) {
    ls_cuda_state *s = st;
    NEED_FLOAT("argmax", t);
    LS_CUDA_CHECK(ls_cuda_argmax(&s->launch, t, B, C, logits, labels, pred, correct));
    return LS_OK;
}

static ls_status cu_convert(void *st, int64_t n, ls_dtype src_t, const void *src, ls_dtype dst_t, void *dst) {
    ls_cuda_state *s = st;
    if (!is_float(src_t) || !is_float(dst_t))
        return ls_error(LS_ERR_UNSUPPORTED, "the CUDA backend cannot convert %s to %s (it converts between %s)",
                        ls_dtype_name(src_t), ls_dtype_name(dst_t), LS_FLOATS);
    if (n <= 0) return LS_OK;
    if (src_t == dst_t) {
        if (src != dst)
            LS_CUDA_CHECK(
                cudaMemcpyAsync(dst, src, (size_t)n * ls_dtype_size(src_t), cudaMemcpyDeviceToDevice, s->stream));
        return LS_OK;
    }
    LS_CUDA_CHECK(ls_cuda_convert(&s->launch, n, src_t, src, dst_t, dst));
    return LS_OK;
}

/* Mixed precision's weight copies: f32 to f16/bf16 in multi-tensor launches (optim.cu), other
 * pairs tensor by tensor. */
static ls_status cu_convert_many(void *st, int k, ls_dtype src_t, const void *const *src, ls_dtype dst_t,
                                 void *const *dst, const int64_t *n) {
    ls_cuda_state *s = st;
    if (src_t != LS_F32 || (dst_t != LS_F16 && dst_t != LS_BF16)) {
        for (int i = 0; i < k; i++) LS_CHECK(cu_convert(st, n[i], src_t, src[i], dst_t, dst[i]));
        return LS_OK;
    }
    LS_CUDA_CHECK(ls_cuda_convert_mt(&s->launch, k, src, dst_t, dst, n));
    return LS_OK;
}

/* Gradients zeroed at a step's start: buffers of whole 32-bit words at 4-byte aligned addresses
 * in multi-tensor launches (optim.cu: 32-bit stores, which fault on a GPU at an address that is
 * not a multiple of 4, e.g. an f16 view at an odd element), any other by a memset. */
static ls_status cu_zero_many(void *st, int k, void *const *x, const size_t *bytes) {
    ls_cuda_state *s = st;
    enum { RUN = 64 };
    void *w[RUN];
    int64_t words[RUN];
    int m = 0;
    for (int i = 0; i < k; i++) {
        if (!bytes[i]) continue;
        if (bytes[i] % 4 || (uintptr_t)x[i] % 4 || m == RUN) {
            LS_CUDA_CHECK(cudaMemsetAsync(x[i], 0, bytes[i], s->stream));
            continue;
        }
        w[m] = x[i];
        words[m++] = (int64_t)(bytes[i] / 4);
    }
    if (m) LS_CUDA_CHECK(ls_cuda_zero_mt(&s->launch, m, w, words));
    return LS_OK;
}

static ls_status cu_mul(void *st, ls_dtype t, int64_t n, const void *a, const void *b, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("mul", t);
    LS_CUDA_CHECK(ls_cuda_mul(&s->launch, t, n, a, b, y));
    return LS_OK;
}

static ls_status cu_scale(void *st, ls_dtype t, int64_t n, double alpha, void *x) {
    ls_cuda_state *s = st;
    NEED_FLOAT("scale", t);
    LS_CUDA_CHECK(ls_cuda_scale(&s->launch, t, n, alpha, x));
    return LS_OK;
}

static ls_status cu_axpy(void *st, ls_dtype t, int64_t n, double alpha, const void *x, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("axpy", t);
    LS_CUDA_CHECK(ls_cuda_axpy(&s->launch, t, n, alpha, x, y));
    return LS_OK;
}

/* The sum lands in the first bytes of the workspace, then in pinned host memory. */
static ls_status cu_sumsq(void *st, ls_dtype t, int64_t n, const void *x, double *host_out, int *host_nonfinite) {
    ls_cuda_state *s = st;
    NEED_FLOAT("sum of squares", t);
    double *dev = s->workspace;
    LS_CUDA_CHECK(ls_cuda_sumsq(&s->launch, t, n, x, dev, 0));
    LS_CUDA_CHECK(cudaMemcpyAsync(s->host_scratch, dev, 2 * sizeof(double), cudaMemcpyDeviceToHost, s->stream));
    LS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    *host_out += s->host_scratch[0];
    if (host_nonfinite) *host_nonfinite |= s->host_scratch[1] != 0.0;
    return LS_OK;
}

/* The tensors' sums accumulate on the device, in order; one copy back and one wait in all. */
static ls_status cu_sumsq_many(void *st, ls_dtype t, int k, const void *const *x, const int64_t *n, double *host_out,
                               int *host_nonfinite) {
    ls_cuda_state *s = st;
    NEED_FLOAT("sum of squares", t);
    if (k <= 0) return LS_OK;
    double *dev = s->workspace;
    for (int i = 0; i < k; i++) LS_CUDA_CHECK(ls_cuda_sumsq(&s->launch, t, n[i], x[i], dev, i > 0));
    LS_CUDA_CHECK(cudaMemcpyAsync(s->host_scratch, dev, 2 * sizeof(double), cudaMemcpyDeviceToHost, s->stream));
    LS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    *host_out += s->host_scratch[0];
    if (host_nonfinite) *host_nonfinite |= s->host_scratch[1] != 0.0;
    return LS_OK;
}

/* Gradient-norm clipping without a wait: the sum, flag and coefficient stay in the first bytes
 * of the workspace from clip_sumsq to clip_scale (the trainer queues nothing else between). */
static ls_status cu_clip_sumsq(void *st, ls_dtype t, int k, const void *const *x, const int64_t *n, int accumulate) {
    ls_cuda_state *s = st;
    NEED_FLOAT("sum of squares", t);
    double *acc = s->workspace;
    if (t == LS_F32 || t == LS_F64) { /* master gradients: multi-tensor launches */
        LS_CUDA_CHECK(ls_cuda_clip_sumsq_mt(&s->launch, t, k, (void *const *)x, n, acc, accumulate));
        return LS_OK;
    }
    if (k <= 0 && !accumulate) LS_CUDA_CHECK(cudaMemsetAsync(acc, 0, 2 * sizeof(double), s->stream));
    for (int i = 0; i < k; i++) LS_CUDA_CHECK(ls_cuda_sumsq(&s->launch, t, n[i], x[i], acc, accumulate || i > 0));
    return LS_OK;
}

static ls_status cu_clip_norm(void *st, double *host_norm) {
    ls_cuda_state *s = st;
    LS_CUDA_CHECK(
        cudaMemcpyAsync(s->host_scratch, s->workspace, 2 * sizeof(double), cudaMemcpyDeviceToHost, s->stream));
    LS_CUDA_CHECK(cudaStreamSynchronize(s->stream));
    *host_norm = s->host_scratch[1] != 0.0 ? NAN : sqrt(s->host_scratch[0]);
    return LS_OK;
}

static ls_status cu_clip_scale(void *st, ls_dtype t, int k, void *const *x, const int64_t *n, double max_norm) {
    ls_cuda_state *s = st;
    NEED_FLOAT("clip scale", t);
    double *acc = s->workspace;
    LS_CUDA_CHECK(ls_cuda_clip_coef(&s->launch, acc, max_norm));
    if (t == LS_F32 || t == LS_F64) {
        LS_CUDA_CHECK(ls_cuda_clip_scale_mt(&s->launch, t, k, x, n, acc));
        return LS_OK;
    }
    for (int i = 0; i < k; i++) LS_CUDA_CHECK(ls_cuda_clip_scale(&s->launch, t, n[i], x[i], acc));
    return LS_OK;
}

static ls_status cu_sgd_step(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m,
                             const int64_t *n, const ls_sgd_params *hp) {
    ls_cuda_state *s = st;
    if (t != LS_F32 && t != LS_F64) return bad_dtype("SGD", t, "f32 and f64 (keep f32 master weights)");
    if (k <= 0) return LS_OK;
    LS_CUDA_CHECK(ls_cuda_sgd_step(&s->launch, t, k, p, g, m, n, hp));
    return LS_OK;
}

static ls_status cu_adamw_step(void *st, ls_dtype t, int k, void *const *p, void *const *g, void *const *m,
                               void *const *v, const int64_t *n, const ls_adamw_params *hp) {
    ls_cuda_state *s = st;
    if (t != LS_F32 && t != LS_F64) return bad_dtype("AdamW", t, "f32 and f64 (keep f32 master weights)");
    if (k <= 0) return LS_OK;
    LS_CUDA_CHECK(ls_cuda_adamw_step(&s->launch, t, k, p, g, m, v, n, hp));
    return LS_OK;
}

/* Mixed precision without a wait: the unscale and the flag (multi-tensor launches, optim.cu) and
 * the scale's update all stay on the stream. */
static ls_status cu_amp_check(void *st, ls_dtype t, int k, void *const *x, const int64_t *n, int unscale,
                              int accumulate, double *ctl) {
    ls_cuda_state *s = st;
    if (t != LS_F32 && t != LS_F64) return bad_dtype("inf/NaN check", t, "f32 and f64 (master gradients)");
    LS_CUDA_CHECK(ls_cuda_amp_check(&s->launch, t, k, x, n, unscale, accumulate, ctl));
    return LS_OK;
}

static ls_status cu_amp_update(void *st, double *ctl, const ls_amp_update_params *p) {
    ls_cuda_state *s = st;
    LS_CUDA_CHECK(ls_cuda_amp_update(&s->launch, ctl, p));
    return LS_OK;
}

/* ---- NCHW convolution (cudnn_conv.c), pooling, batch normalization, residual add (cnn.cu) ---- */
static size_t cu_conv2d_workspace(void *st, ls_dtype t, const ls_conv2d_params *p, int pass) {
    return is_float(t) ? ls_cudnn_conv2d_workspace(st, t, p, pass) : 0;
}

static ls_status cu_conv2d_fwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                               const void *b, void *y, void *ws) {
    NEED_FLOAT("conv2d", t);
    return ls_cudnn_conv2d_fwd(st, t, p, x, w, b, y, ws);
}

static ls_status cu_conv2d_bwd(void *st, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                               const void *w, void *dx, void *dw, void *db, void *ws) {
    NEED_FLOAT("conv2d backward", t);
    return ls_cudnn_conv2d_bwd(st, t, p, dy, x, w, dx, dw, db, ws);
}

static ls_status pool_mode_ok(const ls_pool2d_params *p) {
    if (p->mode != LS_POOL_MAX && p->mode != LS_POOL_AVG)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "pooling mode %d is not max (%d) or average (%d)", (int)p->mode,
                        (int)LS_POOL_MAX, (int)LS_POOL_AVG);
    return LS_OK;
}

static ls_status cu_pool2d_fwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("pooling", t);
    LS_CHECK(pool_mode_ok(p));
    LS_CUDA_CHECK(ls_cuda_pool2d_fwd(&s->launch, t, p, x, y));
    return LS_OK;
}

static ls_status cu_pool2d_bwd(void *st, ls_dtype t, const ls_pool2d_params *p, const void *x, const void *dy,
                               void *dx) {
    ls_cuda_state *s = st;
    NEED_FLOAT("pooling backward", t);
    LS_CHECK(pool_mode_ok(p));
    LS_CUDA_CHECK(ls_cuda_pool2d_bwd(&s->launch, t, p, x, dy, dx));
    return LS_OK;
}

static ls_status cu_global_avgpool_fwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *x, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("global average pooling", t);
    LS_CUDA_CHECK(ls_cuda_global_avgpool_fwd(&s->launch, t, planes, hw, x, y));
    return LS_OK;
}

static ls_status cu_global_avgpool_bwd(void *st, ls_dtype t, int64_t planes, int64_t hw, const void *dy, void *dx) {
    ls_cuda_state *s = st;
    NEED_FLOAT("global average pooling backward", t);
    LS_CUDA_CHECK(ls_cuda_global_avgpool_bwd(&s->launch, t, planes, hw, dy, dx));
    return LS_OK;
}

static ls_status cu_bn_stats(void *st, ls_dtype t, const ls_bn_params *p, const void *x, void *mean, void *var) {
    ls_cuda_state *s = st;
    NEED_FLOAT("batch-norm statistics", t);
    LS_CUDA_CHECK(ls_cuda_bn_stats(&s->launch, t, p, x, mean, var));
    return LS_OK;
}

static ls_status cu_bn_fwd(void *st, ls_dtype t, const ls_bn_params *p, const void *x, const void *mean,
                           const void *var, const void *gamma, const void *beta, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("batch norm", t);
    LS_CUDA_CHECK(ls_cuda_bn_fwd(&s->launch, t, p, x, mean, var, gamma, beta, y));
    return LS_OK;
}

static ls_status cu_bn_bwd_reduce(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x,
                                  const void *y, const void *mean, const void *var, void *sum_dy, void *sum_dy_xhat) {
    ls_cuda_state *s = st;
    NEED_FLOAT("batch-norm backward", t);
    if (p->relu && !y)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch-norm backward with a fused ReLU needs the forward output");
    LS_CUDA_CHECK(ls_cuda_bn_bwd_reduce(&s->launch, t, p, dy, x, y, mean, var, sum_dy, sum_dy_xhat));
    return LS_OK;
}

static ls_status cu_bn_bwd_dx(void *st, ls_dtype t, const ls_bn_params *p, const void *dy, const void *x, const void *y,
                              const void *mean, const void *var, const void *gamma, const void *sum_dy,
                              const void *sum_dy_xhat, double count, void *dx) {
    ls_cuda_state *s = st;
    NEED_FLOAT("batch-norm backward", t);
    if (p->relu && !y)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch-norm backward with a fused ReLU needs the forward output");
    if (count > 0 && (!sum_dy || !sum_dy_xhat))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch-norm backward over %g samples needs the per-channel sums",
                        count);
    LS_CUDA_CHECK(ls_cuda_bn_bwd_dx(&s->launch, t, p, dy, x, y, mean, var, gamma, sum_dy, sum_dy_xhat, count, dx));
    return LS_OK;
}

static ls_status cu_add(void *st, ls_dtype t, int64_t n, const void *a, const void *b, int relu, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("add", t);
    LS_CUDA_CHECK(ls_cuda_add(&s->launch, t, n, a, b, relu, y));
    return LS_OK;
}

static ls_status cu_bn_update(void *st, ls_dtype t, int64_t C, double keep, double w1, const void *x1, void *y1,
                              double w2, const void *x2, void *y2) {
    ls_cuda_state *s = st;
    if (t != LS_F32 && t != LS_F64) return bad_dtype("batch-norm update", t, "f32 and f64 (per-channel values)");
    LS_CUDA_CHECK(ls_cuda_bn_update(&s->launch, t, C, keep, w1, x1, y1, w2, x2, y2));
    return LS_OK;
}

static ls_status cu_dropout_mask(void *st, ls_dtype t, int64_t rows, int64_t per, const uint64_t *keys, uint32_t thr,
                                 double keep, void *y) {
    ls_cuda_state *s = st;
    NEED_FLOAT("dropout mask", t);
    LS_CUDA_CHECK(ls_cuda_dropout_mask(&s->launch, t, rows, per, keys, thr, keep, y));
    return LS_OK;
}

static ls_status cu_gather_rows(void *st, size_t elem_bytes, int64_t rows, int64_t cols, const void *src,
                                const int64_t *idx, void *dst) {
    ls_cuda_state *s = st;
    LS_CUDA_CHECK(ls_cuda_gather_rows(&s->launch, elem_bytes, rows, cols, src, idx, dst));
    return LS_OK;
}

static ls_status cu_gather_rows_lut(void *st, int64_t rows, int64_t cols, const uint8_t *src, const int64_t *idx,
                                    const float *lut, float *dst) {
    ls_cuda_state *s = st;
    LS_CUDA_CHECK(ls_cuda_gather_rows_lut(&s->launch, rows, cols, src, idx, lut, dst));
    return LS_OK;
}

const ls_ops ls_cuda_ops = {
    .name = "cuda",
    .init = cu_init,
    .fini = cu_fini,
    .synchronize = cu_sync,
    .allocator_create = cu_allocator_create,
    .compute_stream = cu_compute_stream,
    .gemm = cu_gemm,
    .bias_add = cu_bias_add,
    .bias_grad = cu_bias_grad,
    .linear_fwd = cu_linear_fwd,
    .linear_bwd = cu_linear_bwd,
    .act_fwd = cu_act_fwd,
    .act_bwd = cu_act_bwd,
    .xent_fwd = cu_xent_fwd,
    .xent_bwd = cu_xent_bwd,
    .argmax = cu_argmax,
    .convert = cu_convert,
    .convert_many = cu_convert_many,
    .zero_many = cu_zero_many,
    .mul = cu_mul,
    .scale = cu_scale,
    .axpy = cu_axpy,
    .sumsq = cu_sumsq,
    .sumsq_many = cu_sumsq_many,
    .clip_sumsq = cu_clip_sumsq,
    .clip_norm = cu_clip_norm,
    .clip_scale = cu_clip_scale,
    .sgd_step = cu_sgd_step,
    .adamw_step = cu_adamw_step,
    .amp_check = cu_amp_check,
    .amp_update = cu_amp_update,
    .conv2d_workspace = cu_conv2d_workspace,
    .conv2d_fwd = cu_conv2d_fwd,
    .conv2d_bwd = cu_conv2d_bwd,
    .pool2d_fwd = cu_pool2d_fwd,
    .pool2d_bwd = cu_pool2d_bwd,
    .global_avgpool_fwd = cu_global_avgpool_fwd,
    .global_avgpool_bwd = cu_global_avgpool_bwd,
    .bn_stats = cu_bn_stats,
    .bn_fwd = cu_bn_fwd,
    .bn_bwd_reduce = cu_bn_bwd_reduce,
    .bn_bwd_dx = cu_bn_bwd_dx,
    .add = cu_add,
    .bn_update = cu_bn_update,
    .dropout_mask = cu_dropout_mask,
    .gather_rows = cu_gather_rows,
    .gather_rows_lut = cu_gather_rows_lut,
};
