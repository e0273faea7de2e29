/* cudnn_conv.c: the CUDA backend's NCHW conv2d entries (workspace size, forward, backward) and the
 * only file that calls cuDNN: the handle (ls_cudnn_init/fini, bound to the compute stream), the
 * error translation (ls_cudnn_error) and a cache of descriptors and algorithms per shape.
 * API: cuDNN's legacy convolution calls (cudnnConvolutionForward / BackwardData / BackwardFilter,
 * cudnnGet*Algorithm_v7). They are deprecated in cuDNN 9 but shipped, cover f32/f64/f16/bf16,
 * groups, strides and padding with documented semantics (alpha/beta blending, so dw can accumulate),
 * and fit in a page of C; the graph (backend) API would need a few hundred lines of descriptor
 * attributes per operation in C, each failure of which only shows on a GPU. Everything cuDNN-
 * specific is behind the op table in this file, the one to port when the legacy calls go.
 * Algorithms: per shape (dtype and TF32 flag included), cuDNN's heuristics rank the algorithms
 * once; candidates are those cuDNN accepts for the shape (its workspace query succeeds) with at most
 * 256 MiB of workspace, deterministic ones only for the backward passes when there is one, in the
 * heuristics' order. The first is used, so the workspace conv2d_workspace reports is a function of
 * the shape, the GPU and the cuDNN version: no timing runs (cudnnFind) whose winner may differ
 * between runs or ranks. Descriptors and candidates are cached for 64 shapes (round robin); if
 * cuDNN still rejects an algorithm when it runs, the next candidate within the same workspace is
 * taken, and kept.
 * Precision: f32 in f32 (FMA math, no tensor cores) unless the backend's TF32 flag is set
 * (LOCKSTEP_TF32=1), f16/bf16 in f32 on tensor cores, f64 in f64. Backward: dx is overwritten
 * (beta 0); dw accumulates (beta 1) into f32/f64 gradients directly. With f16/bf16 inputs cuDNN
 * writes dw only in the input dtype, so dw goes (beta 0) to the front of the workspace and a
 * kernel adds it into the f32 master, as PyTorch's autocast does (the low-precision weight copy's
 * gradient, added to the f32 .grad). The bias add and db (sums of dy per channel) are cnn.cu's. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "log.h"

#define LS_CONV_CACHE 64
#define LS_CONV_CANDIDATES 8
#define LS_CONV_WS_LIMIT ((size_t)256 << 20)
#define LS_CONV_PERF_MAX 16

enum { DIR_FWD = 0, DIR_BWD_DATA = 1, DIR_BWD_FILTER = 2, DIRS = 3 };
static const char *const dir_name[DIRS] = {"forward", "backward-data", "backward-filter"};

typedef struct conv_key {
    ls_dtype t;
    int tf32;
    int64_t N, C, H, W, K, R, S, P, Q, sh, sw, ph, pw, G;
} conv_key;

typedef struct conv_algo {
    int algo; /* a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math;
    size_t ws;
} conv_algo;

/* One direction's candidates, best first. */
typedef struct conv_dir {
    int ready;
    int n, cur; /* cur: the candidate in use */
    int warned;
    conv_algo c[LS_CONV_CANDIDATES];
} conv_dir;

typedef struct conv_entry {
    conv_key key;
    int used;
    cudnnTensorDescriptor_t x, y; /* y doubles as dy's, x as dx's */
    cudnnFilterDescriptor_t w;    /* w, and dw in the input dtype */
    cudnnConvolutionDescriptor_t conv;
    conv_dir dir[DIRS];
} conv_entry;

struct ls_cudnn_conv_cache {
    conv_entry e[LS_CONV_CACHE];
    int next;
};

/* ---- errors and the handle ---- */
ls_status ls_cudnn_error(cudnnStatus_t e, const char *expr, const char *file, int line) {
    char detail[384] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    ls_status s = LS_ERR_CUDA;
    if (CUDNN_STATUS_CATEGORY(e) == CUDNN_STATUS_NOT_SUPPORTED) s = LS_ERR_UNSUPPORTED;
    if (e == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        e == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        s = LS_ERR_OUT_OF_MEMORY;
    return ls_error(s, "cuDNN error %s (%d) in %s at %s:%d%s%s", cudnnGetErrorString(e), (int)e, expr, file, line,
                    detail[0] ? ": " : "", detail);
}

ls_status ls_cudnn_init(ls_cuda_state *s) {
    size_t v = cudnnGetVersion();
    if (v / 10000 != CUDNN_MAJOR)
        return ls_error(LS_ERR_DEVICE,
                        "the cuDNN library loaded is version %zu but lockstep was built against "
                        "%d.%d.%d",
                        v, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    ls_status st = LS_OK;
    LS_CUDNN_CHECK_GOTO(cudnnCreate(&s->dnn), st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnSetStream(s->dnn, s->stream), st, fail);
    s->conv_cache = calloc(1, sizeof *s->conv_cache);
    if (!s->conv_cache) {
        st = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the cuDNN convolution cache");
        goto fail;
    }
    LS_LOG_D("cuda:%d: cuDNN %zu (built against %d)", s->device, v, CUDNN_VERSION);
    return LS_OK;
fail:
    ls_cudnn_fini(s);
    return st;
}

static void entry_clear(conv_entry *e) {
    if (e->x) cudnnDestroyTensorDescriptor(e->x);
    if (e->y) cudnnDestroyTensorDescriptor(e->y);
    if (e->w) cudnnDestroyFilterDescriptor(e->w);
    if (e->conv) cudnnDestroyConvolutionDescriptor(e->conv);
    memset(e, 0, sizeof *e);
}

void ls_cudnn_fini(ls_cuda_state *s) {
    if (s->conv_cache) {
        for (int i = 0; i < LS_CONV_CACHE; i++) entry_clear(&s->conv_cache->e[i]);
        free(s->conv_cache);
        s->conv_cache = NULL;
    }
    if (s->dnn) cudnnDestroy(s->dnn);
    s->dnn = NULL;
}

/* ---- descriptors and algorithms ---- */
static const char *conv_str(const ls_conv2d_params *p, ls_dtype t, char *buf, size_t n) {
    snprintf(buf, n, "[%lld, %lld, %lld, %lld] * [%lld, %lld, %lld, %lld] stride %lld padding %lld groups %lld %s",
             (long long)p->N, (long long)p->C, (long long)p->H, (long long)p->W, (long long)p->K,
             (long long)(p->groups > 0 ? p->C / p->groups : 0), (long long)p->R, (long long)p->S,
             (long long)p->stride_h, (long long)p->pad_h, (long long)p->groups, ls_dtype_name(t));
    return buf;
}

static ls_conv2d_params key_params(const conv_key *k) {
    ls_conv2d_params p = {k->N, k->C, k->H, k->W, k->K, k->R, k->S, k->P, k->Q, k->sh, k->sw, k->ph, k->pw, k->G};
    return p;
}

static cudnnDataType_t dnn_type(ls_dtype t) {
    switch (t) {
    case LS_F64: return CUDNN_DATA_DOUBLE;
    case LS_F16: return CUDNN_DATA_HALF;
    case LS_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
    }
}

static int lowp(ls_dtype t) { return t == LS_F16 || t == LS_BF16; }

/* The math type the heuristics are asked for. */
static cudnnMathType_t want_math(const conv_key *k) {
    if (k->t == LS_F32) return k->tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    if (lowp(k->t)) return CUDNN_TENSOR_OP_MATH;
    return CUDNN_DEFAULT_MATH;
}

/* Whether an algorithm's math type keeps the dtype's precision: never f32 -> f16 conversion for
 * f32/f64; no tensor cores (TF32) for f32 unless the TF32 flag is set. */
static int math_ok(const conv_key *k, cudnnMathType_t m) {
    if ((k->t == LS_F32 || k->t == LS_F64) && m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return 0;
    if (k->t == LS_F32 && !k->tf32 && m == CUDNN_TENSOR_OP_MATH) return 0;
    return 1;
}

/* The math type an algorithm runs with: FMA for f32 without TF32 (CUDNN_DEFAULT_MATH would allow
 * TF32 on Ampere and later), else what the heuristics reported for it. */
static cudnnMathType_t run_math(const conv_key *k, cudnnMathType_t m) {
    return k->t == LS_F32 && !k->tf32 ? CUDNN_FMA_MATH : m;
}

static int fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

static ls_status entry_get(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, conv_entry **out) {
    char d[160];
    conv_key key;
    memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
    key.t = t;
    key.tf32 = t == LS_F32 && s->tf32;
    key.N = p->N, key.C = p->C, key.H = p->H, key.W = p->W, key.K = p->K, key.R = p->R, key.S = p->S;
    key.P = p->P, key.Q = p->Q, key.sh = p->stride_h, key.sw = p->stride_w, key.ph = p->pad_h, key.pw = p->pad_w;
    key.G = p->groups;
    struct ls_cudnn_conv_cache *c = s->conv_cache;
    for (int i = 0; i < LS_CONV_CACHE; i++)
        if (c->e[i].used && memcmp(&c->e[i].key, &key, sizeof key) == 0) {
            *out = &c->e[i];
            return LS_OK;
        }
    const int64_t dims[] = {p->N, p->C, p->H,        p->W,        p->K,     p->R,     p->S,
                            p->P, p->Q, p->stride_h, p->stride_w, p->pad_h, p->pad_w, p->groups};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (!fits_int(dims[i]))
            return ls_error(LS_ERR_UNSUPPORTED, "conv2d %s: a size exceeds cuDNN's 32-bit descriptors",
                            conv_str(p, t, d, sizeof d));
    /* cuDNN's descriptors also refuse a tensor of more than INT_MAX elements in all (checked with
     * cuDNN 9: CUDNN_STATUS_NOT_SUPPORTED); say so, and the batch that fits, rather than pass its
     * bare status on */
    int64_t per = p->C * p->H * p->W > p->K * p->P * p->Q ? p->C * p->H * p->W : p->K * p->P * p->Q;
    if (per > 0 && p->N > INT_MAX / per)
        return ls_error(LS_ERR_UNSUPPORTED,
                        "conv2d %s: a tensor of %lld elements is more than cuDNN takes (2^31 - 1); use a batch "
                        "of at most %lld samples per rank for this layer (--batch-size)",
                        conv_str(p, t, d, sizeof d), (long long)(p->N * per), (long long)(INT_MAX / per));
    conv_entry *e = &c->e[c->next];
    c->next = (c->next + 1) % LS_CONV_CACHE;
    entry_clear(e);
    ls_status st = LS_OK;
    const cudnnDataType_t dt = dnn_type(t), ct = t == LS_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    LS_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&e->x), st, fail);
    LS_CUDNN_CHECK_GOTO(
        cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NCHW, dt, (int)p->N, (int)p->C, (int)p->H, (int)p->W), st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&e->y), st, fail);
    LS_CUDNN_CHECK_GOTO(
        cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NCHW, dt, (int)p->N, (int)p->K, (int)p->P, (int)p->Q), st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnCreateFilterDescriptor(&e->w), st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnSetFilter4dDescriptor(e->w, dt, CUDNN_TENSOR_NCHW, (int)p->K, (int)(p->C / p->groups),
                                                   (int)p->R, (int)p->S),
                        st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnCreateConvolutionDescriptor(&e->conv), st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnSetConvolution2dDescriptor(e->conv, (int)p->pad_h, (int)p->pad_w, (int)p->stride_h,
                                                        (int)p->stride_w, 1, 1, CUDNN_CROSS_CORRELATION, ct),
                        st, fail);
    LS_CUDNN_CHECK_GOTO(cudnnSetConvolutionGroupCount(e->conv, (int)p->groups), st, fail);
    int on, oc, oh, ow;
    LS_CUDNN_CHECK_GOTO(cudnnGetConvolution2dForwardOutputDim(e->conv, e->x, e->w, &on, &oc, &oh, &ow), st, fail);
    if (on != p->N || oc != p->K || oh != p->P || ow != p->Q) {
        st = ls_error(LS_ERR_INTERNAL,
                      "conv2d %s: cuDNN computes a [%d, %d, %d, %d] output, the op table "
                      "[%lld, %lld, %lld, %lld]",
                      conv_str(p, t, d, sizeof d), on, oc, oh, ow, (long long)p->N, (long long)p->K, (long long)p->P,
                      (long long)p->Q);
        goto fail;
    }
    e->key = key;
    e->used = 1;
    *out = e;
    return LS_OK;
fail:
    entry_clear(e);
    return st;
}

/* cuDNN's workspace query for one algorithm of a direction (the math type set on e->conv). */
static cudnnStatus_t ws_query(ls_cuda_state *s, conv_entry *e, int dir, int algo, size_t *ws) {
    *ws = 0;
    switch (dir) {
    case DIR_FWD:
        return cudnnGetConvolutionForwardWorkspaceSize(s->dnn, e->x, e->w, e->conv, e->y,
                                                       (cudnnConvolutionFwdAlgo_t)algo, ws);
    case DIR_BWD_DATA:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(s->dnn, e->w, e->y, e->conv, e->x,
                                                            (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    default:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(s->dnn, e->x, e->y, e->conv, e->w,
                                                              (cudnnConvolutionBwdFilterAlgo_t)algo, ws);
    }
}

/* Add algo to d if cuDNN accepts it for e with math type m within the workspace limit. */
static void try_candidate(ls_cuda_state *s, conv_entry *e, int dir, int algo, cudnnMathType_t m) {
    conv_dir *d = &e->dir[dir];
    if (d->n == LS_CONV_CANDIDATES || !math_ok(&e->key, m)) return;
    for (int i = 0; i < d->n; i++)
        if (d->c[i].algo == algo) return;
    const cudnnMathType_t rm = run_math(&e->key, m);
    size_t ws = 0;
    if (cudnnSetConvolutionMathType(e->conv, rm) != CUDNN_STATUS_SUCCESS ||
        ws_query(s, e, dir, algo, &ws) != CUDNN_STATUS_SUCCESS) {
        char drop[256]; /* a refusal expected while searching: not the detail of a later error */
        cudnnGetLastErrorString(drop, sizeof drop);
        return;
    }
    if (ws > LS_CONV_WS_LIMIT) return;
    d->c[d->n].algo = algo;
    d->c[d->n].math = rm;
    d->c[d->n].ws = ws;
    d->n++;
}

/* One heuristic result, whichever direction it came from. */
typedef struct ranked {
    int algo;
    cudnnStatus_t status;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
} ranked;

#define LS_RANKED_FROM(perf, n, r)                                                                                     \
    for (int i_ = 0; i_ < (n); i_++) {                                                                                 \
        (r)[i_].algo = (int)(perf)[i_].algo;                                                                           \
        (r)[i_].status = (perf)[i_].status;                                                                            \
        (r)[i_].det = (perf)[i_].determinism;                                                                          \
        (r)[i_].math = (perf)[i_].mathType;                                                                            \
    }

/* Rank the algorithms of one direction (once per entry). */
static ls_status dir_prepare(ls_cuda_state *s, conv_entry *e, int dir) {
    conv_dir *d = &e->dir[dir];
    if (d->ready) return LS_OK;
    const conv_key *k = &e->key;
    ranked r[LS_CONV_PERF_MAX];
    int n = 0, max = 0, count;
    LS_CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, want_math(k)));
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[LS_CONV_PERF_MAX];
        LS_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(s->dnn, &max));
        if (max > LS_CONV_PERF_MAX) max = LS_CONV_PERF_MAX;
        LS_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(s->dnn, e->x, e->w, e->conv, e->y, max, &n, perf));
        LS_RANKED_FROM(perf, n, r);
        count = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[LS_CONV_PERF_MAX];
        LS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(s->dnn, &max));
        if (max > LS_CONV_PERF_MAX) max = LS_CONV_PERF_MAX;
        LS_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(s->dnn, e->w, e->y, e->conv, e->x, max, &n, perf));
        LS_RANKED_FROM(perf, n, r);
        count = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[LS_CONV_PERF_MAX];
        LS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(s->dnn, &max));
        if (max > LS_CONV_PERF_MAX) max = LS_CONV_PERF_MAX;
        LS_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(s->dnn, e->x, e->y, e->conv, e->w, max, &n, perf));
        LS_RANKED_FROM(perf, n, r);
        count = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    }
    d->n = d->cur = 0;
    /* deterministic first (backward: a replica's gradients repeat exactly), then any */
    for (int pass = 0; pass < 2 && d->n == 0; pass++)
        for (int i = 0; i < n; i++)
            if (r[i].status == CUDNN_STATUS_SUCCESS && (pass == 1 || dir == DIR_FWD || r[i].det == CUDNN_DETERMINISTIC))
                try_candidate(s, e, dir, r[i].algo, r[i].math);
    /* the heuristics offered nothing usable: every algorithm, in cuDNN's numbering */
    for (int a = 0; a < count && d->n == 0; a++) try_candidate(s, e, dir, a, want_math(k));
    if (d->n == 0) {
        char buf[160];
        ls_conv2d_params p = key_params(k);
        return ls_error(LS_ERR_UNSUPPORTED,
                        "conv2d %s: cuDNN %zu has no %s algorithm for it within a %zu MiB "
                        "workspace",
                        conv_str(&p, k->t, buf, sizeof buf), cudnnGetVersion(), dir_name[dir], LS_CONV_WS_LIMIT >> 20);
    }
    d->ready = 1;
    return LS_OK;
}

/* Bytes of dw in the input dtype at the front of a low-precision backward workspace (256-aligned). */
static size_t dw_stage_bytes(const ls_conv2d_params *p, ls_dtype t) {
    if (!lowp(t)) return 0;
    size_t n = (size_t)(p->K * (p->C / p->groups) * p->R * p->S) * ls_dtype_size(t);
    return (n + 255) / 256 * 256;
}

/* pass: LS_CONV_FORWARD, LS_CONV_BACKWARD (dx and dw) or LS_CONV_BACKWARD_WEIGHTS (dw only: the
 * backward-data algorithm's workspace, often the larger, is not asked for). */
static size_t entry_ws(const conv_entry *e, const ls_conv2d_params *p, int pass) {
    if (pass == LS_CONV_FORWARD) return e->dir[DIR_FWD].c[0].ws;
    size_t a = pass == LS_CONV_BACKWARD ? e->dir[DIR_BWD_DATA].c[0].ws : 0, b = e->dir[DIR_BWD_FILTER].c[0].ws;
    return dw_stage_bytes(p, e->key.t) + (a > b ? a : b);
}

/* The entry for p with the directions of the pass ranked. */
static ls_status conv_ready(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, int pass, conv_entry **out) {
    conv_entry *e;
    LS_CHECK(entry_get(s, t, p, &e));
    if (pass == LS_CONV_FORWARD) {
        LS_CHECK(dir_prepare(s, e, DIR_FWD));
    } else {
        if (pass == LS_CONV_BACKWARD) LS_CHECK(dir_prepare(s, e, DIR_BWD_DATA));
        LS_CHECK(dir_prepare(s, e, DIR_BWD_FILTER));
    }
    *out = e;
    return LS_OK;
}

/* Shapes with nothing for cuDNN to do (no images, no channels). */
static int conv_trivial(const ls_conv2d_params *p) { return p->N <= 0 || p->C <= 0 || p->K <= 0; }

static ls_status need_dnn(ls_cuda_state *s, const char *op) {
    if (s->dnn && s->conv_cache) return LS_OK;
    return ls_error(LS_ERR_DEVICE, "%s: cuDNN is unavailable on cuda:%d: %s", op, s->device,
                    s->dnn_error[0] ? s->dnn_error : "it was not initialized");
}

size_t ls_cudnn_conv2d_workspace(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, int pass) {
    conv_entry *e;
    if (!s->dnn || !s->conv_cache || conv_trivial(p)) return 0;
    /* an error here is reported again by the call the workspace is for */
    if (conv_ready(s, t, p, pass, &e) != LS_OK) return 0;
    return entry_ws(e, p, pass);
}

/* ---- running one direction ---- */
typedef struct conv_args {
    const void *x, *w, *dy;
    void *out;
    double beta;
    void *ws;
    size_t room; /* bytes of ws */
} conv_args;

static cudnnStatus_t conv_call(ls_cuda_state *s, conv_entry *e, int dir, const conv_algo *a, const conv_args *g) {
    const float one_f = 1.0f, beta_f = (float)g->beta;
    const double one_d = 1.0, beta_d = g->beta;
    const int dbl = e->key.t == LS_F64;
    const void *alpha = dbl ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = dbl ? (const void *)&beta_d : (const void *)&beta_f;
    cudnnStatus_t st = cudnnSetConvolutionMathType(e->conv, a->math);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    switch (dir) {
    case DIR_FWD:
        return cudnnConvolutionForward(s->dnn, alpha, e->x, g->x, e->w, g->w, e->conv,
                                       (cudnnConvolutionFwdAlgo_t)a->algo, g->ws, g->room, beta, e->y, g->out);
    case DIR_BWD_DATA:
        return cudnnConvolutionBackwardData(s->dnn, alpha, e->w, g->w, e->y, g->dy, e->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)a->algo, g->ws, g->room, beta, e->x, g->out);
    default:
        return cudnnConvolutionBackwardFilter(s->dnn, alpha, e->x, g->x, e->y, g->dy, e->conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)a->algo, g->ws, g->room, beta, e->w,
                                              g->out);
    }
}

#if CUDNN_MAJOR >= 9
#define LS_CUDNN_MISALIGNED(st) ((st) == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
#else
#define LS_CUDNN_MISALIGNED(st) 0
#endif

/* Run the direction with its current algorithm; if cuDNN rejects it (not supported, or a pointer
 * less aligned than it needs), the next candidate whose workspace fits g->room, which then stays
 * the current one. */
static ls_status conv_run(ls_cuda_state *s, conv_entry *e, int dir, const conv_args *g) {
    conv_dir *d = &e->dir[dir];
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int i = d->cur; i < d->n; i++) {
        if (d->c[i].ws > g->room) continue;
        last = conv_call(s, e, dir, &d->c[i], g);
        if (last == CUDNN_STATUS_SUCCESS) {
            d->cur = i;
            return LS_OK;
        }
        /* not supported, or (cuDNN 9) an alignment this algorithm needs: the next may take it */
        if (CUDNN_STATUS_CATEGORY(last) != CUDNN_STATUS_NOT_SUPPORTED && !LS_CUDNN_MISALIGNED(last)) break;
        if (!d->warned) {
            char buf[160];
            ls_conv2d_params p = key_params(&e->key);
            LS_LOG_W("conv2d %s: cuDNN rejected %s algorithm %d (%s); trying the next",
                     conv_str(&p, e->key.t, buf, sizeof buf), dir_name[dir], d->c[i].algo, cudnnGetErrorString(last));
            d->warned = 1;
        }
    }
    return ls_cudnn_error(last,
                          dir == DIR_FWD        ? "cudnnConvolutionForward"
                          : dir == DIR_BWD_DATA ? "cudnnConvolutionBackwardData"
                                                : "cudnnConvolutionBackwardFilter",
                          __FILE__, __LINE__);
}

static ls_status need_ws(const char *op, const ls_conv2d_params *p, ls_dtype t, size_t need, const void *ws) {
    char buf[160];
    if (need && !ws)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s %s: cuDNN needs a %zu-byte workspace and none was given "
                        "(size it with conv2d_workspace)",
                        op, conv_str(p, t, buf, sizeof buf), need);
    return LS_OK;
}

ls_status ls_cudnn_conv2d_fwd(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, const void *x, const void *w,
                              const void *b, void *y, void *ws) {
    if (p->N <= 0 || p->K <= 0 || p->P <= 0 || p->Q <= 0) return LS_OK; /* y is empty */
    if (p->C <= 0) {                                                    /* no input channels: y = b */
        LS_CUDA_CHECK(cudaMemsetAsync(y, 0, (size_t)(p->N * p->K * p->P * p->Q) * ls_dtype_size(t), s->stream));
    } else {
        conv_entry *e;
        LS_CHECK(need_dnn(s, "conv2d"));
        LS_CHECK(conv_ready(s, t, p, LS_CONV_FORWARD, &e));
        const size_t need = entry_ws(e, p, LS_CONV_FORWARD);
        LS_CHECK(need_ws("conv2d", p, t, need, ws));
        conv_args g = {x, w, NULL, y, 0.0, ws, need};
        LS_CHECK(conv_run(s, e, DIR_FWD, &g));
    }
    if (b) LS_CUDA_CHECK(ls_cuda_channel_bias_add(&s->launch, t, p->N, p->K, p->P * p->Q, b, y));
    return LS_OK;
}

ls_status ls_cudnn_conv2d_bwd(ls_cuda_state *s, ls_dtype t, const ls_conv2d_params *p, const void *dy, const void *x,
                              const void *w, void *dx, void *dw, void *db, void *ws) {
    if (p->N <= 0) return LS_OK; /* no samples: nothing to add, dx empty */
    if (conv_trivial(p)) {       /* no output channels: dx = 0; no input channels: dw and dx are empty */
        if (db && p->K > 0) LS_CUDA_CHECK(ls_cuda_channel_sum(&s->launch, t, p->N, p->K, p->P * p->Q, dy, db));
        if (dx && p->C > 0)
            LS_CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)(p->N * p->C * p->H * p->W) * ls_dtype_size(t), s->stream));
        return LS_OK;
    }
    conv_entry *e;
    LS_CHECK(need_dnn(s, "conv2d backward"));
    const int pass = dx ? LS_CONV_BACKWARD : LS_CONV_BACKWARD_WEIGHTS; /* as conv2d_workspace was asked */
    LS_CHECK(conv_ready(s, t, p, pass, &e));
    const size_t need = entry_ws(e, p, pass), stage = dw_stage_bytes(p, t);
    LS_CHECK(need_ws("conv2d backward", p, t, need, ws));
    /* db only once nothing before it can fail: an error leaves every gradient as it was */
    if (db) LS_CUDA_CHECK(ls_cuda_channel_sum(&s->launch, t, p->N, p->K, p->P * p->Q, dy, db));
    void *cws = stage ? (char *)ws + stage : ws;
    if (dx) {
        conv_args g = {NULL, w, dy, dx, 0.0, cws, need - stage};
        LS_CHECK(conv_run(s, e, DIR_BWD_DATA, &g));
    }
    if (dw && stage) { /* dw in the input dtype into the workspace, then added into the f32 master */
        conv_args g = {x, NULL, dy, ws, 0.0, cws, need - stage};
        LS_CHECK(conv_run(s, e, DIR_BWD_FILTER, &g));
        LS_CUDA_CHECK(ls_cuda_accumulate_master(&s->launch, t, p->K * (p->C / p->groups) * p->R * p->S, ws, dw));
    } else if (dw) { /* NULL: a frozen weight, no filter gradient */
        conv_args g = {x, NULL, dy, dw, 1.0, cws, need};
        LS_CHECK(conv_run(s, e, DIR_BWD_FILTER, &g));
    }
    return LS_OK;
}
