/* emu_cudnn.c: cuDNN stand-ins for the emulated backend (see cuda_emu_rt.h): the legacy
 * convolution calls lockstep's cudnn_conv.c makes, computed as cuDNN documents them, not as
 * lockstep's CPU backend does. NCHW tensors and KCRS filters (packed), cross-correlation (or
 * convolution: the filter flipped), padding, strides, dilation and groups from the descriptors;
 * y = alpha op + beta y with y not read when beta is 0; f16/bf16 data in f32, f32 in TF32 unless
 * the math type is CUDNN_FMA_MATH (cuDNN allows TF32 under CUDNN_DEFAULT_MATH too), f64 in f64.
 * The checks cuDNN makes: descriptors set and agreeing (the output dims, channels a multiple of
 * the groups, one data type, a compute type the data type takes), a workspace at least the
 * algorithm's. The algorithms are names with properties, all computing the same sums: the
 * heuristics rank them, some are non-deterministic (as cuDNN's backward ALGO_0 and ALGO_3), one
 * is refused outright, IMPLICIT_PRECOMP_GEMM needs 16-byte aligned pointers (cuDNN 9's
 * CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER otherwise), and each overwrites the workspace it
 * asked for before and after computing (an input or output placed in it comes out wrong). The
 * heuristics list each algorithm twice, with tensor-op math and with the default math (f64: the
 * default only), whatever math type the descriptor asks for: a result's math type is its own, and
 * lockstep must choose among them (an assumption about which cuDNN lists; its API allows it). So
 * f32 without TF32 computes in TF32 here unless lockstep sets CUDNN_FMA_MATH before running.
 * Anything lockstep does not use aborts as not emulated. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_emu_rt.h"
#include "emu_num.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static char last_error[256];

static cudnnStatus_t refuse(cudnnStatus_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

static void not_emulated(const char *what, long v) {
    fprintf(stderr, "emu_cudnn: %s (%ld) is not emulated (lockstep does not use it)\n", what, v);
    abort();
}

size_t emu_cudnnGetVersion(void) { return CUDNN_VERSION; }

const char *emu_cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    default: return "CUDNN_STATUS_(other)";
    }
}

void emu_cudnnGetLastErrorString(char *message, size_t max_size) {
    if (max_size) snprintf(message, max_size, "%s", last_error);
    last_error[0] = '\0';
}

struct cudnnContext {
    cudaStream_t stream;
};
struct cudnnTensorStruct {
    int set;
    cudnnDataType_t dt;
    int n, c, h, w;
};
struct cudnnFilterStruct {
    int set;
    cudnnDataType_t dt;
    int k, c, r, s;
};
struct cudnnConvolutionStruct {
    int set;
    int ph, pw, u, v, dh, dw, groups;
    cudnnConvolutionMode_t mode;
    cudnnDataType_t ct;
    cudnnMathType_t math;
};

cudnnStatus_t emu_cudnnCreate(cudnnHandle_t *h) {
    *h = calloc(1, sizeof **h);
    return *h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t emu_cudnnDestroy(cudnnHandle_t h) {
    free(h);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t emu_cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    if (!h) return CUDNN_STATUS_BAD_PARAM;
    h->stream = s;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *d) {
    *d = calloc(1, sizeof **d);
    return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t emu_cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t emu_cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *d) {
    *d = calloc(1, sizeof **d);
    return *d ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_ALLOC_FAILED;
}
cudnnStatus_t emu_cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t emu_cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *d) {
    *d = calloc(1, sizeof **d);
    if (!*d) return CUDNN_STATUS_ALLOC_FAILED;
    (*d)->groups = 1;
    (*d)->math = CUDNN_DEFAULT_MATH;
    return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t emu_cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

static int data_type_ok(cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE || t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16;
}

cudnnStatus_t emu_cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t f, cudnnDataType_t t, int n,
                                             int c, int h, int w) {
    if (f != CUDNN_TENSOR_NCHW) not_emulated("a tensor format other than NCHW", (long)f);
    if (!data_type_ok(t)) not_emulated("this data type", (long)t);
    if (!d || n <= 0 || c <= 0 || h <= 0 || w <= 0)
        return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetTensor4dDescriptor: a dimension of %d x %d x %d x %d", n, c, h,
                      w);
    *d = (struct cudnnTensorStruct){1, t, n, c, h, w};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t t, cudnnTensorFormat_t f, int k,
                                             int c, int r, int s) {
    if (f != CUDNN_TENSOR_NCHW) not_emulated("a filter format other than NCHW (KCRS)", (long)f);
    if (!data_type_ok(t)) not_emulated("this data type", (long)t);
    if (!d || k <= 0 || c <= 0 || r <= 0 || s <= 0)
        return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetFilter4dDescriptor: a dimension of %d x %d x %d x %d", k, c, r,
                      s);
    *d = (struct cudnnFilterStruct){1, t, k, c, r, s};
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int ph, int pw, int u, int v, int dh,
                                                  int dw, cudnnConvolutionMode_t mode, cudnnDataType_t ct) {
    if (!d || ph < 0 || pw < 0 || u <= 0 || v <= 0 || dh <= 0 || dw <= 0)
        return refuse(CUDNN_STATUS_BAD_PARAM,
                      "cudnnSetConvolution2dDescriptor: padding %d,%d stride %d,%d dilation %d,%d", ph, pw, u, v, dh,
                      dw);
    if (mode != CUDNN_CROSS_CORRELATION && mode != CUDNN_CONVOLUTION) return CUDNN_STATUS_BAD_PARAM;
    d->set = 1;
    d->ph = ph, d->pw = pw, d->u = u, d->v = v, d->dh = dh, d->dw = dw;
    d->mode = mode;
    d->ct = ct;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
    if (!d || groups < 1) return refuse(CUDNN_STATUS_BAD_PARAM, "cudnnSetConvolutionGroupCount: %d groups", groups);
    d->groups = groups;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t m) {
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
        m != CUDNN_FMA_MATH)
        return CUDNN_STATUS_BAD_PARAM;
    d->math = m;
    return CUDNN_STATUS_SUCCESS;
}

static int out_dim(int in, int pad, int k, int dil, int stride) {
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

cudnnStatus_t emu_cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t c,
                                                        const cudnnTensorDescriptor_t x,
                                                        const cudnnFilterDescriptor_t w, int *n, int *k, int *p,
                                                        int *q) {
    if (!c || !x || !w || !c->set || !x->set || !w->set) return refuse(CUDNN_STATUS_BAD_PARAM, "a descriptor not set");
    if (x->c != w->c * c->groups || w->k % c->groups)
        return refuse(CUDNN_STATUS_BAD_PARAM,
                      "cudnnGetConvolution2dForwardOutputDim: %d input channels, a filter of %d x %d, %d groups", x->c,
                      w->k, w->c, c->groups);
    *n = x->n;
    *k = w->k;
    *p = out_dim(x->h, c->ph, w->r, c->dh, c->u);
    *q = out_dim(x->w, c->pw, w->s, c->dw, c->v);
    if (*p <= 0 || *q <= 0) return refuse(CUDNN_STATUS_BAD_PARAM, "an empty output (%d x %d)", *p, *q);
    return CUDNN_STATUS_SUCCESS;
}

/* ---- the problem, checked ---- */
typedef struct problem {
    int N, C, H, W, K, Cg, R, S, P, Q, G;
    const struct cudnnConvolutionStruct *conv;
    emu_num t;
    int f64, tf32;
} problem;

static cudnnStatus_t problem_of(const char *call, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
                                const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y, problem *pr) {
    int n, k, p, q;
    cudnnStatus_t st = emu_cudnnGetConvolution2dForwardOutputDim(c, x, w, &n, &k, &p, &q);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (!y || !y->set || y->n != n || y->c != k || y->h != p || y->w != q)
        return refuse(CUDNN_STATUS_BAD_PARAM, "%s: the output descriptor is not the convolution's %d x %d x %d x %d",
                      call, n, k, p, q);
    if (x->dt != w->dt || x->dt != y->dt)
        return refuse(CUDNN_STATUS_BAD_PARAM, "%s: the tensors and the filter differ in data type", call);
    const cudnnDataType_t t = x->dt, ct = c->ct;
    const int ct_ok = t == CUDNN_DATA_DOUBLE ? ct == CUDNN_DATA_DOUBLE
                      : t == CUDNN_DATA_HALF ? ct == CUDNN_DATA_FLOAT || ct == CUDNN_DATA_HALF
                                             : ct == CUDNN_DATA_FLOAT;
    if (!ct_ok) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "%s: compute type %d for data type %d", call, ct, t);
    if (t == CUDNN_DATA_HALF && ct == CUDNN_DATA_HALF) not_emulated("f16 compute (pseudo-half)", ct);
    if ((t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE) && c->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
        not_emulated("f32 data converted to f16", c->math);
    *pr = (problem){x->n, x->c, x->h, x->w, w->k, w->c, w->r, w->s, p, q, c->groups, c, EMU_F32, 0, 0};
    pr->t = t == CUDNN_DATA_DOUBLE     ? EMU_F64
            : t == CUDNN_DATA_HALF     ? EMU_F16
            : t == CUDNN_DATA_BFLOAT16 ? EMU_BF16
                                       : EMU_F32;
    pr->f64 = t == CUDNN_DATA_DOUBLE;
    pr->tf32 = t == CUDNN_DATA_FLOAT && c->math != CUDNN_FMA_MATH;
    return CUDNN_STATUS_SUCCESS;
}

/* ---- algorithms ---- */
enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER };
static const int algo_count[3] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

/* The heuristics' order per direction; the last of each is refused (not supported). */
static const int rank_fwd[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_FFT};
static const int rank_bwd_data[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
                                    CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT};
static const int rank_bwd_filter[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3,
                                      CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT};

static int refused(int dir, int algo) {
    return (dir == DIR_FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT) ||
           (dir == DIR_BWD_DATA && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT) ||
           (dir == DIR_BWD_FILTER && algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
}

static int deterministic(int dir, int algo) {
    if (dir == DIR_BWD_DATA) return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
    if (dir == DIR_BWD_FILTER)
        return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    return 1;
}

/* The workspace an algorithm asks for: 0 for the implicit ones, else a function of the shape,
 * twice as large per filter element for the backward-data algorithms (so a backward pass without
 * dx asks for less, as with cuDNN on a network's first convolution). */
static cudnnStatus_t ws_for(int dir, int algo, const problem *p, size_t *ws) {
    *ws = 0;
    if (algo < 0 || algo >= algo_count[dir]) return refuse(CUDNN_STATUS_BAD_PARAM, "algorithm %d out of range", algo);
    if (refused(dir, algo)) return refuse(CUDNN_STATUS_NOT_SUPPORTED, "algorithm %d: not for this shape", algo);
    if (dir == DIR_FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return CUDNN_STATUS_SUCCESS;
    *ws = (size_t)(algo + 1) * 4096 + (size_t)p->Cg * p->R * p->S * (dir == DIR_BWD_DATA ? 128 : 64);
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t ranked(cudnnHandle_t h, int dir, const problem *p, int requested, int *returned, int *algo,
                            cudnnStatus_t *status, size_t *memory, cudnnDeterminism_t *det) {
    if (!h || requested < 1 || !returned) return CUDNN_STATUS_BAD_PARAM;
    const int *order = dir == DIR_FWD ? rank_fwd : dir == DIR_BWD_DATA ? rank_bwd_data : rank_bwd_filter;
    const int n = dir == DIR_FWD        ? (int)(sizeof rank_fwd / sizeof *rank_fwd)
                  : dir == DIR_BWD_DATA ? (int)(sizeof rank_bwd_data / sizeof *rank_bwd_data)
                                        : (int)(sizeof rank_bwd_filter / sizeof *rank_bwd_filter);
    *returned = n < requested ? n : requested;
    for (int i = 0; i < *returned; i++) {
        algo[i] = order[i];
        status[i] = ws_for(dir, order[i], p, &memory[i]);
        det[i] = deterministic(dir, order[i]) ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
    }
    last_error[0] = '\0';
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t h, int *count) {
    *count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    return h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}
cudnnStatus_t emu_cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t h, int *count) {
    *count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    return h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}
cudnnStatus_t emu_cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t h, int *count) {
    *count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    return h ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

#define EMU_PERF(perf, i, a, s, m, d, math)                                                                            \
    do {                                                                                                               \
        memset(&(perf)[i], 0, sizeof(perf)[i]);                                                                        \
        (perf)[i].algo = (a);                                                                                          \
        (perf)[i].status = (s);                                                                                        \
        (perf)[i].time = -1.0f;                                                                                        \
        (perf)[i].memory = (m);                                                                                        \
        (perf)[i].determinism = (d);                                                                                   \
        (perf)[i].mathType = (math);                                                                                   \
    } while (0)

#define EMU_RANKED_V7(dir, perf, algo_t)                                                                               \
    do {                                                                                                               \
        int a_[16];                                                                                                    \
        cudnnStatus_t s_[16];                                                                                          \
        size_t m_[16];                                                                                                 \
        cudnnDeterminism_t d_[16];                                                                                     \
        int n_ = 0;                                                                                                    \
        st = ranked(h, dir, &p, 16, &n_, a_, s_, m_, d_);                                                              \
        if (st != CUDNN_STATUS_SUCCESS) return st;                                                                     \
        /* each algorithm with tensor-op math, then with the default math (f64: the default only) */                   \
        const int per_ = p.f64 ? 1 : 2;                                                                                \
        *returned = n_ * per_ < requested ? n_ * per_ : requested;                                                     \
        for (int i = 0; i < *returned; i++)                                                                            \
            EMU_PERF(perf, i, (algo_t)a_[i / per_], s_[i / per_], m_[i / per_], d_[i / per_],                          \
                     per_ == 2 && i % 2 == 0 ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH);                             \
    } while (0)

cudnnStatus_t emu_cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                         const cudnnFilterDescriptor_t w,
                                                         const cudnnConvolutionDescriptor_t c,
                                                         const cudnnTensorDescriptor_t y, const int requested,
                                                         int *returned, cudnnConvolutionFwdAlgoPerf_t *perf) {
    problem p;
    cudnnStatus_t st = problem_of("cudnnGetConvolutionForwardAlgorithm_v7", x, w, c, y, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    EMU_RANKED_V7(DIR_FWD, perf, cudnnConvolutionFwdAlgo_t);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                              const cudnnTensorDescriptor_t dy,
                                                              const cudnnConvolutionDescriptor_t c,
                                                              const cudnnTensorDescriptor_t dx, const int requested,
                                                              int *returned, cudnnConvolutionBwdDataAlgoPerf_t *perf) {
    problem p;
    cudnnStatus_t st = problem_of("cudnnGetConvolutionBackwardDataAlgorithm_v7", dx, w, c, dy, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    EMU_RANKED_V7(DIR_BWD_DATA, perf, cudnnConvolutionBwdDataAlgo_t);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                                const cudnnTensorDescriptor_t dy,
                                                                const cudnnConvolutionDescriptor_t c,
                                                                const cudnnFilterDescriptor_t dw, const int requested,
                                                                int *returned,
                                                                cudnnConvolutionBwdFilterAlgoPerf_t *perf) {
    problem p;
    cudnnStatus_t st = problem_of("cudnnGetConvolutionBackwardFilterAlgorithm_v7", x, dw, c, dy, &p);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    EMU_RANKED_V7(DIR_BWD_FILTER, perf, cudnnConvolutionBwdFilterAlgo_t);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t emu_cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                          const cudnnFilterDescriptor_t w,
                                                          const cudnnConvolutionDescriptor_t c,
                                                          const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t a,
                                                          size_t *ws) {
    problem p;
    cudnnStatus_t st =
        h ? problem_of("cudnnGetConvolutionForwardWorkspaceSize", x, w, c, y, &p) : CUDNN_STATUS_BAD_PARAM;
    return st != CUDNN_STATUS_SUCCESS ? st : ws_for(DIR_FWD, (int)a, &p, ws);
}

cudnnStatus_t emu_cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t w,
                                                               const cudnnTensorDescriptor_t dy,
                                                               const cudnnConvolutionDescriptor_t c,
                                                               const cudnnTensorDescriptor_t dx,
                                                               cudnnConvolutionBwdDataAlgo_t a, size_t *ws) {
    problem p;
    cudnnStatus_t st =
        h ? problem_of("cudnnGetConvolutionBackwardDataWorkspaceSize", dx, w, c, dy, &p) : CUDNN_STATUS_BAD_PARAM;
    return st != CUDNN_STATUS_SUCCESS ? st : ws_for(DIR_BWD_DATA, (int)a, &p, ws);
}

cudnnStatus_t emu_cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
                                                                 const cudnnTensorDescriptor_t dy,
                                                                 const cudnnConvolutionDescriptor_t c,
                                                                 const cudnnFilterDescriptor_t dw,
                                                                 cudnnConvolutionBwdFilterAlgo_t a, size_t *ws) {
    problem p;
    cudnnStatus_t st =
        h ? problem_of("cudnnGetConvolutionBackwardFilterWorkspaceSize", x, dw, c, dy, &p) : CUDNN_STATUS_BAD_PARAM;
    return st != CUDNN_STATUS_SUCCESS ? st : ws_for(DIR_BWD_FILTER, (int)a, &p, ws);
}

/* ---- running ---- */
static double scalar(const problem *p, const void *v) { return p->f64 ? *(const double *)v : *(const float *)v; }

static double in_val(const problem *p, const void *buf, size_t i) {
    double v = emu_load(p->t, buf, i);
    return p->tf32 ? (double)emu_tf32((float)v) : v;
}

/* in_val of each of buf's n elements (malloc'd). */
static double *in_vals(const problem *p, const void *buf, size_t n) {
    double *v = malloc(sizeof(double) * (n ? n : 1));
    if (!v) {
        fprintf(stderr, "emu_cudnn: no host memory for a convolution's input\n");
        abort();
    }
    for (size_t i = 0; i < n; i++) v[i] = in_val(p, buf, i);
    return v;
}

/* The workspace the algorithm of the call being checked uses (run_checks). An algorithm uses its
 * workspace while it computes: conv_run overwrites it before and after the sums, so an input or
 * an output in the workspace comes out wrong. */
static size_t scribble_bytes;

/* Checks shared by the three calls: the workspace, the alignment IMPLICIT_PRECOMP_GEMM needs. */
static cudnnStatus_t run_checks(const char *call, int dir, int algo, const problem *p, void *ws, size_t ws_bytes,
                                const void *a, const void *b, const void *c) {
    size_t need;
    cudnnStatus_t st = ws_for(dir, algo, p, &need);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    if (ws_bytes < need || (need && !ws))
        return refuse(CUDNN_STATUS_BAD_PARAM, "%s: algorithm %d needs a %zu-byte workspace, given %zu", call, algo,
                      need, ws_bytes);
    if (dir == DIR_FWD && algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM &&
        (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) % 16))
        return refuse(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, "%s: algorithm %d needs 16-byte aligned tensors", call,
                      algo);
    scribble_bytes = need;
    return CUDNN_STATUS_SUCCESS;
}

/* Visits every (output element, filter tap) pair that meets an input element. */
#define EMU_CONV_LOOP(p, BODY)                                                                                         \
    for (int n = 0; n < (p)->N; n++)                                                                                   \
        for (int k = 0; k < (p)->K; k++) {                                                                             \
            const int g = k / ((p)->K / (p)->G);                                                                       \
            for (int oh = 0; oh < (p)->P; oh++)                                                                        \
                for (int ow = 0; ow < (p)->Q; ow++)                                                                    \
                    for (int c = 0; c < (p)->Cg; c++)                                                                  \
                        for (int r = 0; r < (p)->R; r++) {                                                             \
                            const int ih = oh * (p)->conv->u - (p)->conv->ph + r * (p)->conv->dh;                      \
                            if (ih < 0 || ih >= (p)->H) continue;                                                      \
                            for (int s = 0; s < (p)->S; s++) {                                                         \
                                const int iw = ow * (p)->conv->v - (p)->conv->pw + s * (p)->conv->dw;                  \
                                if (iw < 0 || iw >= (p)->W) continue;                                                  \
                                const int fr = (p)->conv->mode == CUDNN_CONVOLUTION ? (p)->R - 1 - r : r;              \
                                const int fs = (p)->conv->mode == CUDNN_CONVOLUTION ? (p)->S - 1 - s : s;              \
                                const size_t xi =                                                                      \
                                    (((size_t)n * (p)->C + (size_t)g * (p)->Cg + c) * (p)->H + ih) * (p)->W + iw;      \
                                const size_t wi = (((size_t)k * (p)->Cg + c) * (p)->R + fr) * (p)->S + fs;             \
                                const size_t yi = (((size_t)n * (p)->K + k) * (p)->P + oh) * (p)->Q + ow;              \
                                BODY;                                                                                  \
                            }                                                                                          \
                        }                                                                                              \
        }

/* The direction's sums into acc, from the inputs converted to doubles (the stand-in's own arrays,
 * sized by the same problem: AddressSanitizer's checks of these accesses, left out, would double
 * the emulated CNN tests' time; the reads of the device buffers, in in_vals, are checked). */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_NO_ASAN __attribute__((no_sanitize_address))
#else
#define EMU_NO_ASAN
#endif
EMU_NO_ASAN static void conv_sums(const problem *p, int dir, const double *xv, const double *wv, const double *yv,
                                  double *acc) {
    if (dir == DIR_FWD) EMU_CONV_LOOP(p, acc[yi] += xv[xi] * wv[wi]);
    if (dir == DIR_BWD_DATA) EMU_CONV_LOOP(p, acc[xi] += yv[yi] * wv[wi]);
    if (dir == DIR_BWD_FILTER) EMU_CONV_LOOP(p, acc[wi] += xv[xi] * yv[yi]);
}

/* out[i] = alpha acc[i] + beta out[i] (out not read when beta is 0), acc rounded as the compute. */
static void blend(const problem *p, double alpha, double beta, const double *acc, void *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double v = p->f64 ? acc[i] : (double)(float)acc[i];
        v *= alpha;
        if (beta != 0) v += beta * emu_load(p->t, out, i);
        emu_store(p->t, out, i, v);
    }
}

/* A convolution's work, taken at the call and done when its stream gets to it
 * (emu_stream_submit): the workspace overwritten before and after the sums. */
typedef struct conv_job {
    problem p;
    struct cudnnConvolutionStruct conv;
    int dir;
    double alpha, beta;
    const void *x, *w, *y;
    void *out, *ws;
    size_t ws_bytes;
} conv_job;

static void conv_run(void *arg) {
    conv_job *j = arg;
    const problem *p = &j->p;
    const void *x = j->x, *w = j->w, *y = j->y;
    const size_t n = j->dir == DIR_FWD        ? (size_t)p->N * p->K * p->P * p->Q
                     : j->dir == DIR_BWD_DATA ? (size_t)p->N * p->C * p->H * p->W
                                              : (size_t)p->K * p->Cg * p->R * p->S;
    double *acc = calloc(n ? n : 1, sizeof *acc);
    if (!acc) {
        fprintf(stderr, "emu_cudnn: no host memory for a convolution's sums\n");
        abort();
    }
    if (j->ws_bytes) memset(j->ws, 0x3c, j->ws_bytes);
    const size_t nx = (size_t)p->N * p->C * p->H * p->W, nw = (size_t)p->K * p->Cg * p->R * p->S,
                 ny = (size_t)p->N * p->K * p->P * p->Q;
    /* the two inputs as in_val reads them, converted once: the same sums in the same order */
    double *xv = j->dir == DIR_BWD_DATA ? NULL : in_vals(p, x, nx),
           *wv = j->dir == DIR_BWD_FILTER ? NULL : in_vals(p, w, nw),
           *yv = j->dir == DIR_FWD ? NULL : in_vals(p, y, ny);
    conv_sums(p, j->dir, xv, wv, yv, acc);
    free(xv);
    free(wv);
    free(yv);
    blend(p, j->alpha, j->beta, acc, j->out, n);
    free(acc);
    if (j->ws_bytes) memset(j->ws, 0x3c, j->ws_bytes);
    free(j);
}

/* One direction: the sums of the two inputs the direction reads (x and w, dy and w, x and dy)
 * into out (y, dx or dw), blended with alpha and beta. */
static cudnnStatus_t convolve_on_stream(const char *call, int dir, cudnnHandle_t h, const void *alpha, const void *beta,
                                        const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t wd,
                                        const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd,
                                        const void *x, const void *w, const void *y, void *out, int algo, void *ws,
                                        size_t ws_bytes) {
    problem p;
    cudnnStatus_t st = h ? problem_of(call, xd, wd, cd, yd, &p) : CUDNN_STATUS_BAD_PARAM;
    if (st == CUDNN_STATUS_SUCCESS)
        st = run_checks(call, dir, algo, &p, ws, ws_bytes, dir == DIR_BWD_DATA ? out : x,
                        dir == DIR_BWD_FILTER ? out : w, dir == DIR_FWD ? out : y);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    conv_job *j = malloc(sizeof *j);
    if (!j) return CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
    *j = (conv_job){.p = p,
                    .conv = *p.conv,
                    .dir = dir,
                    .alpha = scalar(&p, alpha),
                    .beta = scalar(&p, beta),
                    .x = x,
                    .w = w,
                    .y = y,
                    .out = out,
                    .ws = ws,
                    .ws_bytes = scribble_bytes};
    j->p.conv = &j->conv; /* the descriptor as it was at the call */
    emu_stream_submit(h->stream, conv_run, j);
    return CUDNN_STATUS_SUCCESS;
}

/* A convolution: checked when called (under the emulator's lock), computed when its stream gets
 * to it. */
static cudnnStatus_t convolve(const char *call, int dir, cudnnHandle_t h, const void *alpha, const void *beta,
                              const cudnnTensorDescriptor_t xd, const cudnnFilterDescriptor_t wd,
                              const cudnnConvolutionDescriptor_t cd, const cudnnTensorDescriptor_t yd, const void *x,
                              const void *w, const void *y, void *out, int algo, void *ws, size_t ws_bytes) {
    emu_lock();
    cudnnStatus_t st = convolve_on_stream(call, dir, h, alpha, beta, xd, wd, cd, yd, x, w, y, out, algo, ws, ws_bytes);
    emu_unlock();
    return st;
}

cudnnStatus_t emu_cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                                          const void *x, const cudnnFilterDescriptor_t wd, const void *w,
                                          const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo,
                                          void *ws, size_t ws_bytes, const void *beta, const cudnnTensorDescriptor_t yd,
                                          void *y) {
    return convolve("cudnnConvolutionForward", DIR_FWD, h, alpha, beta, xd, wd, cd, yd, x, w, NULL, y, (int)algo, ws,
                    ws_bytes);
}

cudnnStatus_t emu_cudnnConvolutionBackwardData(cudnnHandle_t h, const void *alpha, const cudnnFilterDescriptor_t wd,
                                               const void *w, const cudnnTensorDescriptor_t dyd, const void *dy,
                                               const cudnnConvolutionDescriptor_t cd,
                                               cudnnConvolutionBwdDataAlgo_t algo, void *ws, size_t ws_bytes,
                                               const void *beta, const cudnnTensorDescriptor_t dxd, void *dx) {
    return convolve("cudnnConvolutionBackwardData", DIR_BWD_DATA, h, alpha, beta, dxd, wd, cd, dyd, NULL, w, dy, dx,
                    (int)algo, ws, ws_bytes);
}

cudnnStatus_t emu_cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t xd,
                                                 const void *x, const cudnnTensorDescriptor_t dyd, const void *dy,
                                                 const cudnnConvolutionDescriptor_t cd,
                                                 cudnnConvolutionBwdFilterAlgo_t algo, void *ws, size_t ws_bytes,
                                                 const void *beta, const cudnnFilterDescriptor_t dwd, void *dw) {
    return convolve("cudnnConvolutionBackwardFilter", DIR_BWD_FILTER, h, alpha, beta, xd, dwd, cd, dyd, x, NULL, dy, dw,
                    (int)algo, ws, ws_bytes);
}
