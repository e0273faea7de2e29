/* elementwise.cu: the CUDA element-wise and reduction kernels: bias add, bias gradient (column
 * sums; into f32 master gradients for f16/bf16), ReLU/GELU forward and backward, multiply, scale,
 * axpy and the sum of squares. Element-wise kernels are grid-stride loops over 16-byte packs when
 * every pointer is 16-byte aligned, with a scalar tail; reductions are two-stage (per-block
 * partials in the scratch area, then one fixed-order pass) so results are deterministic, which
 * keeps data-parallel replicas bit-identical. */
#include <cfloat>

#include "cuda_common.cuh"
#include "philox.h"

namespace lsk {

__device__ __forceinline__ float d_erf(float x) { return erff(x); }
__device__ __forceinline__ double d_erf(double x) { return erf(x); }
__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }

/* out[i] = f(a[i], b[i]) (b only when TWO). out may alias a or b: each element is read before it
 * is written, by the same thread. */
template <typename T, bool TWO, typename F>
__global__ void ew_kernel(int64_t n, const T *a, const T *b, T *out, F f, int vec) {
    constexpr int N = vec_width<T>();
    const int64_t tid = global_tid(), stride = grid_stride();
    int64_t i0 = 0;
    if (vec) {
        const int64_t np = n / N;
        const Pack<T, N> *pa = reinterpret_cast<const Pack<T, N> *>(a);
        const Pack<T, N> *pb = reinterpret_cast<const Pack<T, N> *>(b);
        Pack<T, N> *po = reinterpret_cast<Pack<T, N> *>(out);
        for (int64_t p = tid; p < np; p += stride) {
            Pack<T, N> va = pa[p], vo;
            if constexpr (TWO) {
                Pack<T, N> vb = pb[p];
#pragma unroll
                for (int j = 0; j < N; j++) vo.v[j] = f(va.v[j], vb.v[j]);
            } else {
#pragma unroll
                for (int j = 0; j < N; j++) vo.v[j] = f(va.v[j], va.v[j]);
            }
            po[p] = vo;
        }
        i0 = np * N;
    }
    for (int64_t i = i0 + tid; i < n; i += stride) {
        if constexpr (TWO)
            out[i] = f(a[i], b[i]);
        else
            out[i] = f(a[i], a[i]);
    }
}

template <typename T, bool TWO, typename F>
static cudaError_t ew_launch(const ls_cuda_launch *l, int64_t n, const T *a, const T *b, T *out, F f) {
    if (n <= 0) return cudaSuccess;
    int vec = aligned_to(a, 16) && aligned_to(out, 16) && (!TWO || aligned_to(b, 16));
    int64_t work = vec ? n / vec_width<T>() + vec_width<T>() : n;
    ew_kernel<T, TWO, F><<<grid_for(l, work, 256), 256, 0, l->stream>>>(n, a, b, out, f, vec);
    return cudaGetLastError();
}

template <typename T> struct Relu {
    __device__ T operator()(T x, T) const {
        typename Acc<T>::type v = to_acc(x);
        return from_acc<T>(v <= 0 ? 0 : v); /* NaN stays NaN, as PyTorch's */
    }
};
template <typename T> struct Gelu { /* exact: x * Phi(x) */
    __device__ T operator()(T x, T) const {
        using A = typename Acc<T>::type;
        A v = to_acc(x);
        return from_acc<T>(A(0.5) * v * (A(1) + d_erf(v * A(0.70710678118654752440))));
    }
};
template <typename T> struct ReluBwd { /* (x, dy) */
    __device__ T operator()(T x, T dy) const { return from_acc<T>(to_acc(x) <= 0 ? 0 : to_acc(dy)); }
};
template <typename T> struct GeluBwd { /* (x, dy) */
    __device__ T operator()(T x, T dy) const {
        using A = typename Acc<T>::type;
        A v = to_acc(x);
        A cdf = A(0.5) * (A(1) + d_erf(v * A(0.70710678118654752440)));
        A pdf = d_exp(A(-0.5) * v * v) * A(0.39894228040143267794);
        return from_acc<T>(to_acc(dy) * (cdf + v * pdf));
    }
};
template <typename T> struct Scale {
    typename Acc<T>::type alpha;
    __device__ T operator()(T x, T) const { return from_acc<T>(to_acc(x) * alpha); }
};
template <typename T> struct Mul {
    __device__ T operator()(T a, T b) const { return from_acc<T>(to_acc(a) * to_acc(b)); }
};
template <typename T> struct Axpy { /* (x, y) -> y + alpha x */
    typename Acc<T>::type alpha;
    __device__ T operator()(T x, T y) const { return from_acc<T>(to_acc(y) + alpha * to_acc(x)); }
};

/* y[r, c] += b[c]; packs when cols is a multiple of the pack width (a pack never spans rows). */
template <typename T> __global__ void bias_add_kernel(int64_t rows, int64_t cols, const T *b, T *y, int vec) {
    constexpr int N = vec_width<T>();
    const int64_t tid = global_tid(), stride = grid_stride(), total = rows * cols;
    if (vec) {
        const int64_t np = total / N, cpn = cols / N;
        const Pack<T, N> *pb = reinterpret_cast<const Pack<T, N> *>(b);
        Pack<T, N> *py = reinterpret_cast<Pack<T, N> *>(y);
        for (int64_t p = tid; p < np; p += stride) {
            Pack<T, N> vy = py[p], vb = pb[p % cpn];
#pragma unroll
            for (int j = 0; j < N; j++) vy.v[j] = from_acc<T>(to_acc(vy.v[j]) + to_acc(vb.v[j]));
            py[p] = vy;
        }
        return;
    }
    for (int64_t i = tid; i < total; i += stride) y[i] = from_acc<T>(to_acc(y[i]) + to_acc(b[i % cols]));
}

/* Column sums of dy over the rows [blockIdx.y * rows_per_split, ...): block (32, 8) covers 32
 * columns; a warp reads 32 consecutive columns of a row (coalesced). The 8 row lanes are added
 * in a fixed order, then either added into db (one split) or written to partial[split][col].
 * db is of type O: T, or f32 for f16/bf16 dy (master gradients). */
template <typename T, typename O>
__global__ void colsum_kernel(int64_t rows, int64_t cols, const T *dy, int64_t rows_per_split,
                              typename Acc<T>::type *partial, O *db) {
    using A = typename Acc<T>::type;
    __shared__ A sh[8][33];
    const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.y * rows_per_split;
    const int64_t r1 = r0 + rows_per_split < rows ? r0 + rows_per_split : rows;
    A s = 0;
    if (c < cols)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += to_acc(dy[r * cols + c]);
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        A t = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) t += sh[j][threadIdx.x];
        if (partial)
            partial[(int64_t)blockIdx.y * cols + c] = t;
        else
            db[c] = from_acc<O>(to_acc(db[c]) + t);
    }
}

template <typename A, typename O>
__global__ void colsum_finish_kernel(int64_t cols, int splits, const A *partial, O *db) {
    for (int64_t c = global_tid(); c < cols; c += grid_stride()) {
        A t = 0;
        for (int s = 0; s < splits; s++) t += partial[(int64_t)s * cols + c];
        db[c] = from_acc<O>(to_acc(db[c]) + t);
    }
}

template <typename T, typename O>
static cudaError_t bias_grad_t(const ls_cuda_launch *l, int64_t rows, int64_t cols, const T *dy, O *db) {
    using A = typename Acc<T>::type;
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    const int64_t gx = (cols + 31) / 32;
    /* Split the rows so that about two blocks per SM run, each over at least 64 rows, with the
     * partials fitting the scratch area. */
    int64_t gy = (2 * (int64_t)l->sm_count + gx - 1) / gx;
    if (gy > (rows + 63) / 64) gy = (rows + 63) / 64;
    int64_t fit = (int64_t)(l->scratch_bytes / ((size_t)cols * sizeof(A)));
    if (gy > fit) gy = fit;
    if (gy > 65535) gy = 65535;
    if (gy < 1 || !l->scratch) gy = 1;
    if (gx > 2147483647) return cudaErrorInvalidValue;
    const int64_t per = (rows + gy - 1) / gy;
    gy = (rows + per - 1) / per;
    A *partial = gy > 1 ? static_cast<A *>(l->scratch) : nullptr;
    colsum_kernel<T, O>
        <<<dim3((unsigned)gx, (unsigned)gy), dim3(32, 8), 0, l->stream>>>(rows, cols, dy, per, partial, db);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || gy == 1) return e;
    colsum_finish_kernel<A, O><<<grid_for(l, cols, 256), 256, 0, l->stream>>>(cols, (int)gy, partial, db);
    return cudaGetLastError();
}

/* Sum of squares in double and a nonfinite flag: per-block partials {sum, flag}, then one warp
 * adds them in a fixed order. */
template <typename T> __global__ void sumsq_kernel(int64_t n, const T *x, int vec, double *partial) {
    constexpr int N = vec_width<T>();
    const int64_t tid = global_tid(), stride = grid_stride();
    double s = 0;
    int bad = 0;
    int64_t i0 = 0;
    if (vec) {
        const int64_t np = n / N;
        const Pack<T, N> *px = reinterpret_cast<const Pack<T, N> *>(x);
        for (int64_t p = tid; p < np; p += stride) {
            Pack<T, N> v = px[p];
#pragma unroll
            for (int j = 0; j < N; j++) {
                double d = (double)to_acc(v.v[j]);
                s += d * d;
                bad |= !isfinite(d);
            }
        }
        i0 = np * N;
    }
    for (int64_t i = i0 + tid; i < n; i += stride) {
        double d = (double)to_acc(x[i]);
        s += d * d;
        bad |= !isfinite(d);
    }
    block_sumsq_store(s, bad, partial);
}

__global__ void sumsq_finish_kernel(int blocks, const double *partial, double *out, int accumulate) {
    const int lane = threadIdx.x;
    double s = 0;
    int bad = 0;
    for (int b = lane; b < blocks; b += 32) {
        s += partial[2 * b];
        bad |= partial[2 * b + 1] != 0.0;
    }
    s = warp_sum(s);
    bad = __any_sync(0xffffffffu, bad);
    if (lane == 0) {
        if (accumulate) {
            out[0] += s;
            bad |= out[1] != 0.0;
        } else {
            out[0] = s;
        }
        out[1] = bad ? 1.0 : 0.0;
    }
}

/* Gradient-norm clipping: the coefficient from the accumulator {sum, flag, coef} (as
 * ls_clip_grad_norm's host path computes it: max_norm / (sqrt(sum) + 1e-6), used where below 1;
 * 1 when a gradient is not finite), then each tensor scaled by it where it is below 1. */
__global__ void clip_coef_kernel(double *acc, double max_norm) {
    double c = acc[1] != 0.0 ? 1.0 : max_norm / (sqrt(acc[0]) + 1e-6);
    acc[2] = c < 1.0 ? c : 1.0;
}

template <typename T> __global__ void clip_scale_kernel(int64_t n, T *x, const double *acc) {
    const double c = acc[2];
    if (!(c < 1.0)) return;
    const Scale<T> f{(typename Acc<T>::type)c}; /* the cast and product of ls_cuda_scale */
    const int64_t stride = grid_stride();
    for (int64_t i = global_tid(); i < n; i += stride) x[i] = f(x[i], x[i]);
}

/* GradScaler's update from the found-inf flag (one thread; as cpu_amp_update). */
__global__ void amp_update_kernel(double *ctl, ls_amp_update_params p) {
    const int found = ctl[LS_AMP_FOUND] != 0.0;
    ctl[LS_AMP_LAST] = ctl[LS_AMP_SCALE];
    ctl[LS_AMP_SKIPPED] += found;
    if (!p.enabled) return;
    if (found) {
        if (ctl[LS_AMP_SCALE] > LS_AMP_MIN_SCALE)
            ctl[LS_AMP_SCALE] = fmax(ctl[LS_AMP_SCALE] * p.backoff_factor, LS_AMP_MIN_SCALE);
        ctl[LS_AMP_TRACKER] = 0;
    } else if ((ctl[LS_AMP_TRACKER] += 1) >= (double)p.growth_interval) {
        const double grown = ctl[LS_AMP_SCALE] * p.growth_factor;
        if (grown <= FLT_MAX) ctl[LS_AMP_SCALE] = grown; /* as GradScaler: not to inf in f32 */
        ctl[LS_AMP_TRACKER] = 0;
    }
}

} // namespace lsk

using namespace lsk;

extern "C" cudaError_t ls_cuda_probe_kernels(void) {
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, sumsq_finish_kernel);
}

extern "C" cudaError_t ls_cuda_bias_add(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t cols, const void *b,
                                        void *y) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        int vec = cols % vec_width<T>() == 0 && aligned_to(b, 16) && aligned_to(y, 16);
        int64_t work = vec ? rows * cols / vec_width<T>() : rows * cols;
        bias_add_kernel<T><<<grid_for(l, work, 256), 256, 0, l->stream>>>(rows, cols, (const T *)b, (T *)y, vec);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_bias_grad(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t cols,
                                         const void *dy, void *db) {
    switch (t) {
    case LS_F32: return bias_grad_t(l, rows, cols, (const float *)dy, (float *)db);
    case LS_F64: return bias_grad_t(l, rows, cols, (const double *)dy, (double *)db);
    case LS_F16: return bias_grad_t(l, rows, cols, (const __half *)dy, (float *)db);
    case LS_BF16: return bias_grad_t(l, rows, cols, (const __nv_bfloat16 *)dy, (float *)db);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t ls_cuda_act_fwd(const ls_cuda_launch *l, ls_dtype t, ls_act act, int64_t n, const void *x,
                                       void *y) {
    LSK_DISPATCH_FLOAT(t, T, {
        if (act == LS_ACT_RELU) return ew_launch<T, false>(l, n, (const T *)x, (const T *)nullptr, (T *)y, Relu<T>{});
        if (act == LS_ACT_GELU) return ew_launch<T, false>(l, n, (const T *)x, (const T *)nullptr, (T *)y, Gelu<T>{});
        return cudaErrorInvalidValue;
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_act_bwd(const ls_cuda_launch *l, ls_dtype t, ls_act act, int64_t n, const void *x,
                                       const void *dy, void *dx) {
    LSK_DISPATCH_FLOAT(t, T, {
        if (act == LS_ACT_RELU) return ew_launch<T, true>(l, n, (const T *)x, (const T *)dy, (T *)dx, ReluBwd<T>{});
        if (act == LS_ACT_GELU) return ew_launch<T, true>(l, n, (const T *)x, (const T *)dy, (T *)dx, GeluBwd<T>{});
        return cudaErrorInvalidValue;
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_scale(const ls_cuda_launch *l, ls_dtype t, int64_t n, double alpha, void *x) {
    LSK_DISPATCH_FLOAT(t, T, {
        Scale<T> f{(typename Acc<T>::type)alpha};
        return ew_launch<T, false>(l, n, (const T *)x, (const T *)nullptr, (T *)x, f);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_mul(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *a, const void *b,
                                   void *y) {
    LSK_DISPATCH_FLOAT(t, T, return ew_launch<T, true>(l, n, (const T *)a, (const T *)b, (T *)y, Mul<T>{}));
    return cudaErrorInvalidValue;
}

/* Dropout's multipliers for up to LS_DROPOUT_KEYS rows, their keys passed by value: a work item is
 * one Philox block, four elements of one row. */
struct DropKeys {
    uint64_t k[LS_DROPOUT_KEYS];
};

template <typename T>
__global__ void dropout_mask_kernel(int64_t rows, int64_t per, DropKeys keys, uint32_t thr, typename Acc<T>::type keep,
                                    T *y) {
    const int64_t q = (per + 3) / 4, work = rows * q;
    for (int64_t w = global_tid(); w < work; w += grid_stride()) {
        const int64_t r = w / q, b = w % q;
        uint32_t u[4];
        ls_philox4x32_10((uint64_t)b, keys.k[r], u);
        T *row = y + r * per;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (b * 4 + j < per) row[b * 4 + j] = from_acc<T>((u[j] >> 8) >= thr ? keep : (typename Acc<T>::type)0);
    }
}

extern "C" cudaError_t ls_cuda_dropout_mask(const ls_cuda_launch *l, ls_dtype t, int64_t rows, int64_t per,
                                            const uint64_t *keys, uint32_t thr, double keep, void *y) {
    LSK_DISPATCH_FLOAT(t, T, {
        for (int64_t r0 = 0; r0 < rows; r0 += LS_DROPOUT_KEYS) {
            const int64_t nr = rows - r0 < LS_DROPOUT_KEYS ? rows - r0 : LS_DROPOUT_KEYS;
            DropKeys dk;
            for (int64_t i = 0; i < nr; i++) dk.k[i] = keys[r0 + i];
            dropout_mask_kernel<T><<<grid_for(l, nr * ((per + 3) / 4), 256), 256, 0, l->stream>>>(
                nr, per, dk, thr, (typename Acc<T>::type)keep, (T *)y + r0 * per);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) return e;
        }
        return cudaSuccess;
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_axpy(const ls_cuda_launch *l, ls_dtype t, int64_t n, double alpha, const void *x,
                                    void *y) {
    LSK_DISPATCH_FLOAT(t, T, {
        Axpy<T> f{(typename Acc<T>::type)alpha};
        return ew_launch<T, true>(l, n, (const T *)x, (const T *)y, (T *)y, f);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_sumsq(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *x, double *dev_out,
                                     int accumulate) {
    /* partials live in the scratch area after its first 256 bytes (where dev_out may sit) */
    double *partial = reinterpret_cast<double *>(static_cast<char *>(l->scratch) + 256);
    if (n <= 0) return accumulate ? cudaSuccess : cudaMemsetAsync(dev_out, 0, 2 * sizeof(double), l->stream);
    LSK_DISPATCH_FLOAT(t, T, {
        int vec = aligned_to(x, 16);
        int64_t work = vec ? n / vec_width<T>() + vec_width<T>() : n;
        unsigned blocks = grid_for(l, work, 256);
        size_t room = (l->scratch_bytes - 256) / (2 * sizeof(double));
        if (blocks > room) blocks = (unsigned)room;
        sumsq_kernel<T><<<blocks, 256, 0, l->stream>>>(n, (const T *)x, vec, partial);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        sumsq_finish_kernel<<<1, 32, 0, l->stream>>>((int)blocks, partial, dev_out, accumulate);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_sumsq_finish(const ls_cuda_launch *l, int blocks, const double *partial, double *dev_out,
                                            int accumulate) {
    sumsq_finish_kernel<<<1, 32, 0, l->stream>>>(blocks, partial, dev_out, accumulate);
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_clip_coef(const ls_cuda_launch *l, double *acc, double max_norm) {
    clip_coef_kernel<<<1, 1, 0, l->stream>>>(acc, max_norm);
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_clip_scale(const ls_cuda_launch *l, ls_dtype t, int64_t n, void *x, const double *acc) {
    if (n <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        clip_scale_kernel<T><<<grid_for(l, n, 256), 256, 0, l->stream>>>(n, (T *)x, acc);
        return cudaGetLastError();
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_amp_update(const ls_cuda_launch *l, double *ctl, const ls_amp_update_params *p) {
    amp_update_kernel<<<1, 1, 0, l->stream>>>(ctl, *p);
    return cudaGetLastError();
}
