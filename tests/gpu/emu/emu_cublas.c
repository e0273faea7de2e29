/* emu_cublas.c: cuBLAS and cuBLASLt stand-ins for the emulated backend (see cuda_emu_rt.h). They
 * compute what NVIDIA documents, independently of how lockstep calls them: column-major storage
 * (element (i, j) of a matrix with leading dimension ld at [i + j * ld]), op(X) = X or X^T,
 * D = alpha op(A) op(B) + beta C, C not read when beta is 0 (so a NaN-poisoned output stays out;
 * documented for cublasGemmEx, assumed here for cublasLtMatmul too), a bias epilogue adding
 * bias[i] to row i of D (a vector of D's type, as CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE defaults).
 * They also make the checks the libraries make: leading dimensions, the type combinations each
 * compute type takes, matrix layouts that agree with the operation, C == D only with one layout,
 * a workspace at least the algorithm's and 256-byte aligned, pointers as aligned as the
 * preferences promised, the bias as aligned as the one the heuristic saw. Sums are exact to f64
 * then rounded to the compute type; f32 inputs of CUBLAS_COMPUTE_32F_FAST_TF32 are first rounded
 * to TF32 (nearest, ties away, as PTX's cvt.rna.tf32.f32: NVIDIA documents that TF32 is allowed,
 * not how inputs are rounded, so the TF32 tolerance must cover either). cuBLAS may use its
 * workspace as scratch, so a product here overwrites the part it says it uses, before and after
 * computing: data a caller keeps there does not survive a GEMM, and an operand placed there comes
 * out wrong. Anything lockstep does not use aborts as not emulated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu_rt.h"
#include "emu_num.h"

#define EMU_LT_WORKSPACE ((size_t)1 << 20)  /* what every cuBLASLt "algorithm" here needs */
#define EMU_GEMM_SCRATCH ((size_t)64 << 10) /* what cublasGemmEx scribbles on in its workspace */

static void not_emulated(const char *what, long v) {
    fprintf(stderr, "emu_cublas: %s (%ld) is not emulated (lockstep does not use it)\n", what, v);
    abort();
}

static cublasStatus_t refuse(cublasStatus_t st, const char *call, const char *why) {
    fprintf(stderr, "emu_cublas: %s: %s\n", call, why);
    return st;
}

static emu_num num_of(cudaDataType_t t, const char *call) {
    switch (t) {
    case CUDA_R_32F: return EMU_F32;
    case CUDA_R_64F: return EMU_F64;
    case CUDA_R_16F: return EMU_F16;
    case CUDA_R_16BF: return EMU_BF16;
    default: not_emulated(call, (long)t);
    }
    return EMU_F32;
}

/* Whether (A/B type, C/D type, compute type, scale type) is one the libraries take (cuBLAS's
 * cublasGemmEx table; cuBLASLt's cublasLtMatmul table for these types). */
static int types_ok(cudaDataType_t ab, cudaDataType_t cd, cublasComputeType_t ct, cudaDataType_t scale) {
    switch (ct) {
    case CUBLAS_COMPUTE_64F: return ab == CUDA_R_64F && cd == CUDA_R_64F && scale == CUDA_R_64F;
    case CUBLAS_COMPUTE_32F_FAST_TF32: return ab == CUDA_R_32F && cd == CUDA_R_32F && scale == CUDA_R_32F;
    case CUBLAS_COMPUTE_32F:
        if (scale != CUDA_R_32F) return 0;
        if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
        if (ab == CUDA_R_16F || ab == CUDA_R_16BF) return cd == ab || cd == CUDA_R_32F;
        return 0;
    default: return 0;
    }
}

typedef struct emu_mat {
    emu_num t;
    const void *p;
    int64_t ld;
    int trans;
} emu_mat;

static double mat_at(const emu_mat *m, int64_t r, int64_t c, int tf32) {
    double v = m->trans ? emu_load(m->t, m->p, (size_t)(c + r * m->ld)) : emu_load(m->t, m->p, (size_t)(r + c * m->ld));
    return tf32 ? (double)emu_tf32((float)v) : v;
}

/* The rows x k elements x(r, p) as doubles (TF32-rounded when tf32), each r's k in a row: the
 * products below then read both operands in order (the same sums, several times faster than
 * reading each element through mat_at in the inner loop). */
static double *pack(const emu_mat *x, int64_t rows, int64_t k, int a_side, int tf32) {
    double *out = malloc(sizeof(double) * (size_t)(rows * k > 0 ? rows * k : 1));
    if (!out) {
        fprintf(stderr, "emu_cublas: no host memory for a %lld x %lld operand\n", (long long)rows, (long long)k);
        abort();
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t p = 0; p < k; p++) out[r * k + p] = a_side ? mat_at(x, r, p, tf32) : mat_at(x, p, r, tf32);
    return out;
}

/* D[m, n] (ldd) = alpha op(A) op(B) + beta C (+ bias[i]); C may be D. */
static void product(int64_t m, int64_t n, int64_t k, const emu_mat *a, const emu_mat *b, double alpha, double beta,
                    emu_num ct, const void *c, int64_t ldc, void *d, int64_t ldd, const void *bias, int f64, int tf32) {
    double *pa = pack(a, m, k, 1, tf32), *pb = pack(b, n, k, 0, tf32); /* op(A) by rows, op(B) by columns */
    for (int64_t j = 0; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            double s = 0;
            const double *ra = pa + i * k, *rb = pb + j * k;
            for (int64_t p = 0; p < k; p++) s += ra[p] * rb[p];
            if (!f64) s = (float)s; /* the f32 accumulator */
            double v = alpha * s;
            if (beta != 0) v += beta * emu_load(ct, c, (size_t)(i + j * ldc));
            if (bias) v += emu_load(ct, bias, (size_t)i);
            emu_store(ct, d, (size_t)(i + j * ldd), v);
        }
    free(pa);
    free(pb);
}

/* A product's work, taken when the call is made (the scalars read from the host then, as cuBLAS
 * does in its host pointer mode) and done when its stream gets to it (emu_stream_submit): the
 * workspace overwritten before and after, for Lt with C elsewhere C's columns copied into D first. */
typedef struct product_job {
    int64_t m, n, k;
    emu_mat a, b;
    double alpha, beta;
    emu_num ct;
    const void *c; /* C elsewhere than D (Lt, beta != 0), copied into D first; else NULL */
    int64_t ldc;
    void *d;
    int64_t ldd;
    const void *bias;
    int f64, tf32;
    void *ws;
    size_t ws_bytes;
    int ws_byte;
} product_job;

static void product_run(void *arg) {
    product_job *j = arg;
    if (j->ws_bytes) memset(j->ws, j->ws_byte, j->ws_bytes);
    if (j->c)
        for (int64_t col = 0; col < j->n; col++)
            for (int64_t i = 0; i < j->m; i++)
                emu_store(j->ct, j->d, (size_t)(i + col * j->ldd), emu_load(j->ct, j->c, (size_t)(i + col * j->ldc)));
    product(j->m, j->n, j->k, &j->a, &j->b, j->alpha, j->beta, j->ct, j->d, j->ldd, j->d, j->ldd, j->bias, j->f64,
            j->tf32);
    if (j->ws_bytes) memset(j->ws, j->ws_byte, j->ws_bytes);
    free(j);
}

static cublasStatus_t product_submit(cudaStream_t stream, const product_job *job) {
    product_job *j = malloc(sizeof *j);
    if (!j) return CUBLAS_STATUS_ALLOC_FAILED;
    *j = *job;
    emu_stream_submit(stream, product_run, j);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuBLAS ---- */
struct cublasContext {
    cudaStream_t stream;
    void *ws;
    size_t ws_bytes;
};

cublasStatus_t emu_cublasCreate(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t emu_cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasSetWorkspace(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !ws) return CUBLAS_STATUS_INVALID_VALUE;
    if (((uintptr_t)ws) % 256) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasSetWorkspace", "not 256-byte aligned");
    h->ws = ws;
    h->ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

const char *emu_cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(other)";
    }
}

const char *emu_cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : "refused by the cuBLAS stand-in (its message is on stderr)";
}

static cublasStatus_t gemm_ex(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                              const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                              cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                              cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    const char *call = "cublasGemmEx";
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
        not_emulated("cublasGemmEx with a conjugate transpose", (long)transa);
    if (algo != CUBLAS_GEMM_DEFAULT) not_emulated("cublasGemmEx with an algorithm", (long)algo);
    if (m < 0 || n < 0 || k < 0) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a negative size");
    const int arows = transa == CUBLAS_OP_N ? m : k, brows = transb == CUBLAS_OP_N ? k : n;
    if (lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || ldc < (m > 1 ? m : 1))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a leading dimension below the rows it holds");
    if (Atype != Btype) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "A and B of different types");
    const cudaDataType scale = ct == CUBLAS_COMPUTE_64F ? CUDA_R_64F : CUDA_R_32F;
    if (!types_ok(Atype, Ctype, ct, scale))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "a type combination cuBLAS does not take");
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const int f64 = ct == CUBLAS_COMPUTE_64F;
    double al = f64 ? *(const double *)alpha : *(const float *)alpha;
    double be = f64 ? *(const double *)beta : *(const float *)beta;
    const size_t scratch = h->ws ? (h->ws_bytes < EMU_GEMM_SCRATCH ? h->ws_bytes : EMU_GEMM_SCRATCH) : 0;
    const product_job job = {.m = m,
                             .n = n,
                             .k = k,
                             .a = {num_of(Atype, call), A, lda, transa == CUBLAS_OP_T},
                             .b = {num_of(Btype, call), B, ldb, transb == CUBLAS_OP_T},
                             .alpha = al,
                             .beta = be,
                             .ct = num_of(Ctype, call),
                             .d = C,
                             .ldd = ldc,
                             .f64 = f64,
                             .tf32 = ct == CUBLAS_COMPUTE_32F_FAST_TF32,
                             .ws = h->ws,
                             .ws_bytes = scratch,
                             .ws_byte = 0xa5};
    return product_submit(h->stream, &job);
}

/* ---- cuBLASLt ---- */
struct cublasLtContext {
    int unused;
};

typedef struct emu_lt_desc {
    cublasComputeType_t ct;
    cudaDataType_t scale;
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
} emu_lt_desc;

typedef struct emu_lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
} emu_lt_layout;

typedef struct emu_lt_pref {
    uint64_t max_ws;
    uint32_t align[4]; /* A, B, C, D: 0 = not given (256, cuBLASLt's default) */
} emu_lt_pref;

/* what an "algorithm" carries: the alignment it assumes of A, B, C, D and the workspace it needs */
typedef struct emu_lt_algo {
    uint64_t magic;
    uint64_t align[4];
    uint64_t bias_align; /* the bias pointer's alignment the heuristic saw (cublasLt.h: it decides
                            the alignment expected of the bias from the pointer set then) */
    uint64_t ws;
} emu_lt_algo;

static uint64_t align_of(const void *p) {
    uint64_t a = 256;
    while (a > 1 && (uintptr_t)p % a) a >>= 1;
    return a;
}
#define EMU_LT_MAGIC 0x6c6f636b73746570ull

cublasStatus_t emu_cublasLtCreate(cublasLtHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t emu_cublasLtDestroy(cublasLtHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t scale) {
    emu_lt_desc *e = calloc(1, sizeof *e);
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    e->ct = ct;
    e->scale = scale;
    e->transa = e->transb = CUBLAS_OP_N;
    e->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    *d = (cublasLtMatmulDesc_t)e;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                  const void *buf, size_t size) {
    const char *call = "cublasLtMatmulDescSetAttribute";
    emu_lt_desc *e = (emu_lt_desc *)d;
    if (!e || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (size != sizeof(int32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "TRANSA/B is an int32_t");
        int32_t v;
        memcpy(&v, buf, sizeof v);
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) not_emulated("a conjugate transpose", v);
        *(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &e->transa : &e->transb) = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "EPILOGUE is a uint32_t");
        memcpy(&e->epilogue, buf, sizeof e->epilogue);
        if (e->epilogue != CUBLASLT_EPILOGUE_DEFAULT && e->epilogue != CUBLASLT_EPILOGUE_BIAS)
            not_emulated("this epilogue", (long)e->epilogue);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (size != sizeof(void *)) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "BIAS_POINTER is a pointer");
        memcpy(&e->bias, buf, sizeof e->bias);
        return CUBLAS_STATUS_SUCCESS;
    default: not_emulated("this matmul descriptor attribute", (long)attr);
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t emu_cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
                                              uint64_t cols, int64_t ld) {
    if (ld < (int64_t)(rows > 1 ? rows : 1))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate", "ld below the rows");
    emu_lt_layout *e = calloc(1, sizeof *e);
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    e->type = type;
    e->rows = rows;
    e->cols = cols;
    e->ld = ld;
    *l = (cublasLtMatrixLayout_t)e;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    emu_lt_pref *e = calloc(1, sizeof *e);
    if (!e) return CUBLAS_STATUS_ALLOC_FAILED;
    *p = (cublasLtMatmulPreference_t)e;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                        cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                        size_t size) {
    const char *call = "cublasLtMatmulPreferenceSetAttribute";
    emu_lt_pref *e = (emu_lt_pref *)p;
    if (!e || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    int i = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
            : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
            : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
            : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES ? 3
                                                                 : -1;
    if (i >= 0) {
        if (size != sizeof(uint32_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "an alignment is a uint32_t");
        memcpy(&e->align[i], buf, sizeof e->align[i]);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (size != sizeof(uint64_t)) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "the workspace is a uint64_t");
        memcpy(&e->max_ws, buf, sizeof e->max_ws);
        return CUBLAS_STATUS_SUCCESS;
    }
    not_emulated("this preference attribute", (long)attr);
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* The problem the descriptors describe, checked as cuBLASLt checks it: m, n, k from D and A. */
static cublasStatus_t lt_problem(const char *call, const emu_lt_desc *d, const emu_lt_layout *a, const emu_lt_layout *b,
                                 const emu_lt_layout *c, const emu_lt_layout *dd, uint64_t *m, uint64_t *n,
                                 uint64_t *k) {
    if (!d || !a || !b || !c || !dd) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a NULL descriptor");
    *m = dd->rows;
    *n = dd->cols;
    *k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t am = d->transa == CUBLAS_OP_N ? a->rows : a->cols;
    const uint64_t bk = d->transb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (am != *m || bk != *k || bn != *n || c->rows != *m || c->cols != *n)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "the layouts do not make one product (m, n, k disagree)");
    if (a->type != b->type || c->type != dd->type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "A and B, or C and D, of different types");
    if (!types_ok(a->type, c->type, d->ct, d->scale))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "a type combination cuBLASLt does not take");
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS && !d->bias)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a bias epilogue without a bias pointer");
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t emu_cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                                  cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                                  cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                  cublasLtMatmulPreference_t pref, int requested,
                                                  cublasLtMatmulHeuristicResult_t results[], int *found) {
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested < 1 || !results || !found || !pref) return CUBLAS_STATUS_INVALID_VALUE;
    *found = 0;
    uint64_t m, n, k;
    cublasStatus_t st = lt_problem(call, (const emu_lt_desc *)desc, (const emu_lt_layout *)A, (const emu_lt_layout *)B,
                                   (const emu_lt_layout *)C, (const emu_lt_layout *)D, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const emu_lt_pref *p = (const emu_lt_pref *)pref;
    if (p->max_ws < EMU_LT_WORKSPACE) return CUBLAS_STATUS_NOT_SUPPORTED; /* no algorithm fits */
    const emu_lt_desc *d = (const emu_lt_desc *)desc;
    emu_lt_algo algo = {
        EMU_LT_MAGIC, {0, 0, 0, 0}, d->epilogue == CUBLASLT_EPILOGUE_BIAS ? align_of(d->bias) : 1, EMU_LT_WORKSPACE};
    for (int i = 0; i < 4; i++) algo.align[i] = p->align[i] ? p->align[i] : 256;
    memset(&results[0], 0, sizeof results[0]);
    memcpy(&results[0].algo, &algo, sizeof algo);
    results[0].workspaceSize = EMU_LT_WORKSPACE;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t lt_matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                                const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
    const char *call = "cublasLtMatmul";
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const emu_lt_desc *d = (const emu_lt_desc *)desc;
    const emu_lt_layout *a = (const emu_lt_layout *)Ad, *b = (const emu_lt_layout *)Bd, *c = (const emu_lt_layout *)Cd,
                        *dd = (const emu_lt_layout *)Dd;
    uint64_t m, n, k;
    cublasStatus_t st = lt_problem(call, d, a, b, c, dd, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!algo) not_emulated("cublasLtMatmul choosing its own algorithm", 0);
    emu_lt_algo al;
    memcpy(&al, algo, sizeof al);
    if (al.magic != EMU_LT_MAGIC) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "an algorithm not from a heuristic");
    if (ws_bytes < al.ws || (al.ws && !ws))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a workspace smaller than the algorithm's");
    if (al.ws && (uintptr_t)ws % 256)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a workspace not 256-byte aligned");
    if (C == D && (c->ld != dd->ld || c->type != dd->type))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "C == D with Cdesc and Ddesc that differ");
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if ((uintptr_t)ptr[i] % al.align[i])
            return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                          "a matrix less aligned than the preferences promised (the GPU would fault)");
    const emu_num ct = num_of(dd->type, call);
    if (d->epilogue == CUBLASLT_EPILOGUE_BIAS &&
        ((uintptr_t)d->bias % emu_num_size(ct) || align_of(d->bias) < al.bias_align))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                      "a bias less aligned than its element or than the one the heuristic saw (the GPU would fault)");
    const int f64 = d->ct == CUBLAS_COMPUTE_64F;
    double alv = f64 ? *(const double *)alpha : *(const float *)alpha;
    double bev = f64 ? *(const double *)beta : *(const float *)beta;
    const product_job job = {.m = (int64_t)m,
                             .n = (int64_t)n,
                             .k = (int64_t)k,
                             .a = {num_of(a->type, call), A, a->ld, d->transa == CUBLAS_OP_T},
                             .b = {num_of(b->type, call), B, b->ld, d->transb == CUBLAS_OP_T},
                             .alpha = alv,
                             .beta = bev,
                             .ct = ct,
                             /* D = ... + beta C with C elsewhere: C's columns copied into D first */
                             .c = C != D && bev != 0 ? C : NULL,
                             .ldc = c->ld,
                             .d = D,
                             .ldd = dd->ld,
                             .bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS ? d->bias : NULL,
                             .f64 = f64,
                             .tf32 = d->ct == CUBLAS_COMPUTE_32F_FAST_TF32,
                             .ws = ws,
                             .ws_bytes = al.ws,
                             .ws_byte = 0x5a};
    return product_submit(stream, &job);
}

/* The two products: checked when called, computed when their stream gets to them. */
cublasStatus_t emu_cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                                cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                                cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    emu_lock();
    cublasStatus_t st =
        gemm_ex(h, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, ct, algo);
    emu_unlock();
    return st;
}

cublasStatus_t emu_cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                                  cublasLtMatrixLayout_t Ad, const void *B, cublasLtMatrixLayout_t Bd, const void *beta,
                                  const void *C, cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                                  const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
    emu_lock();
    cublasStatus_t st = lt_matmul(h, desc, alpha, A, Ad, B, Bd, beta, C, Cd, D, Dd, algo, ws, ws_bytes, stream);
    emu_unlock();
    return st;
}
