/* xent.cu: fused, numerically stable softmax cross-entropy (forward: probabilities and per-row
 * losses in one kernel, both f32 for f16/bf16 logits; backward: (probs - onehot) * scale) and
 * the per-row argmax with the count of correct predictions. A row is handled by one warp when
 * it has at most 1024 classes, by a whole 256-thread block otherwise. Arithmetic in f32 (f64 for
 * f64); rows are [B, C] row-major. */
#include "cuda_common.cuh"

namespace lsk {

__device__ __forceinline__ float d_exp(float x) { return expf(x); }
__device__ __forceinline__ double d_exp(double x) { return exp(x); }
__device__ __forceinline__ float d_log(float x) { return logf(x); }
__device__ __forceinline__ double d_log(double x) { return log(x); }
/* Products that must not be fused into an FMA (to round as the CPU does). */
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }

/* Reductions over the TPR threads of a row: a warp (TPR 32) or the 256-thread block (TPR 256,
 * through sh[8]; every thread of the block calls it the same number of times). */
template <int TPR, typename A> __device__ __forceinline__ A row_max(A v, A *sh) {
    v = warp_max(v);
    if constexpr (TPR == 32) {
        return v;
    } else {
        __syncthreads(); /* sh may still be read from the previous reduction */
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = sh[0];
#pragma unroll
        for (int j = 1; j < TPR / 32; j++) v = fmax(v, sh[j]);
        return v;
    }
}
template <int TPR, typename A> __device__ __forceinline__ A row_sum(A v, A *sh) {
    v = warp_sum(v);
    if constexpr (TPR == 32) {
        return v;
    } else {
        __syncthreads();
        if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
        __syncthreads();
        v = sh[0];
#pragma unroll
        for (int j = 1; j < TPR / 32; j++) v += sh[j];
        return v;
    }
}

/* probs and losses are A: the logits' type, or f32 for f16/bf16 logits. With label smoothing e
 * (not 0) the loss is (1 - e) nll + e (log(sum) - mean(z - mx)), as the CPU computes it. */
template <typename T, int TPR>
__global__ void xent_fwd_kernel(int64_t B, int64_t C, const T *logits, const int32_t *labels, double smoothing,
                                typename Acc<T>::type *probs, typename Acc<T>::type *losses) {
    using A = typename Acc<T>::type;
    constexpr int RPB = 256 / TPR; /* rows per block step */
    __shared__ A sh[8];
    const int lane = threadIdx.x % TPR, sub = threadIdx.x / TPR;
    for (int64_t r = (int64_t)blockIdx.x * RPB + sub; r < B; r += (int64_t)gridDim.x * RPB) {
        const T *z = logits + r * C;
        A *p = probs + r * C;
        A mx = -INFINITY;
        for (int64_t j = lane; j < C; j += TPR) mx = fmax(mx, to_acc(z[j]));
        mx = row_max<TPR>(mx, sh);
        A sum = 0;
        for (int64_t j = lane; j < C; j += TPR) sum += d_exp(to_acc(z[j]) - mx);
        sum = row_sum<TPR>(sum, sh);
        const A inv = A(1) / sum;
        for (int64_t j = lane; j < C; j += TPR) p[j] = mul_rn(d_exp(to_acc(z[j]) - mx), inv);
        A zs = 0;
        if (smoothing != 0) { /* the same for every thread of the block: all reduce, or none */
            for (int64_t j = lane; j < C; j += TPR) zs += to_acc(z[j]) - mx;
            zs = row_sum<TPR>(zs, sh);
        }
        if (lane == 0) {
            const int32_t y = labels[r];
            /* -log softmax from the logits (never log(0)); a label outside [0, C) gives NaN */
            A loss = (y >= 0 && y < C) ? d_log(sum) + (mx - to_acc(z[y])) : A(NAN);
            if (smoothing != 0) {
                const A e = (A)smoothing;
                loss = mul_rn(A(1) - e, loss) + mul_rn(e, d_log(sum) - zs / (A)C);
            }
            losses[r] = loss;
        }
    }
}

/* dlogits (T) = probs (A) * scale less scale e / C, and less scale (1 - e) at the label (e: the
 * label smoothing; roundings as on the CPU); with num (device memory) the scale is *num / den,
 * computed in double as the CPU does. */
template <typename T>
__global__ void xent_bwd_kernel(int64_t B, int64_t C, const typename Acc<T>::type *probs, const int32_t *labels,
                                double smoothing, typename Acc<T>::type scale_in, const double *num, double den,
                                T *dlogits) {
    using A = typename Acc<T>::type;
    const A scale = num ? (A)(*num / den) : scale_in;
    const A off = mul_rn(scale, (A)(smoothing / (double)C)), hit = mul_rn(scale, (A)(1.0 - smoothing));
    const int64_t n = B * C;
    for (int64_t i = global_tid(); i < n; i += grid_stride()) {
        const int64_t r = i / C, j = i - r * C;
        A d = mul_rn(probs[i], scale) - off;
        if (labels[r] == j) d -= hit;
        dlogits[i] = from_acc<T>(d);
    }
}

/* (v, i) pairs: the larger value wins, the smaller index on ties (argmax's first maximum); NaN
 * counts as the maximum and ties with NaN (torch.argmax). */
template <typename A> __device__ __forceinline__ void better(A &v, int64_t &i, A v2, int64_t i2) {
    const bool n = v != v, n2 = v2 != v2;
    if (v2 > v || (n2 && !n) || ((v2 == v || (n2 && n)) && i2 < i)) {
        v = v2;
        i = i2;
    }
}

template <typename T, int TPR>
__global__ void argmax_kernel(int64_t B, int64_t C, const T *logits, const int32_t *labels, int32_t *pred,
                              int32_t *correct) {
    using A = typename Acc<T>::type;
    constexpr int RPB = 256 / TPR;
    __shared__ A sh_v[8];
    __shared__ int64_t sh_i[8];
    const int lane = threadIdx.x % TPR, sub = threadIdx.x / TPR;
    for (int64_t r = (int64_t)blockIdx.x * RPB + sub; r < B; r += (int64_t)gridDim.x * RPB) {
        const T *z = logits + r * C;
        /* each thread scans its strided columns with a strict >, so it keeps the first maximum (or
         * the first NaN) */
        A v = to_acc(z[lane < C ? lane : 0]);
        int64_t bi = lane < C ? lane : 0;
        for (int64_t j = lane + TPR; j < C; j += TPR) {
            A x = to_acc(z[j]);
            if (x > v || (x != x && v == v)) {
                v = x;
                bi = j;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            A v2 = __shfl_xor_sync(0xffffffffu, v, o);
            int64_t i2 = __shfl_xor_sync(0xffffffffu, bi, o);
            better(v, bi, v2, i2);
        }
        if constexpr (TPR > 32) {
            __syncthreads();
            if ((threadIdx.x & 31) == 0) {
                sh_v[threadIdx.x >> 5] = v;
                sh_i[threadIdx.x >> 5] = bi;
            }
            __syncthreads();
            v = sh_v[0];
            bi = sh_i[0];
#pragma unroll
            for (int w = 1; w < TPR / 32; w++) better(v, bi, sh_v[w], sh_i[w]);
        }
        if (lane == 0) {
            pred[r] = (int32_t)bi;
            if (labels && correct && labels[r] == (int32_t)bi) atomicAdd(correct, 1);
        }
    }
}

template <typename T>
static cudaError_t xent_fwd_t(const ls_cuda_launch *l, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                              double smoothing, void *probs, void *losses) {
    using A = typename Acc<T>::type;
    if (C <= 1024) {
        xent_fwd_kernel<T, 32><<<grid_for(l, B, 8), 256, 0, l->stream>>>(B, C, (const T *)logits, labels, smoothing,
                                                                         (A *)probs, (A *)losses);
    } else {
        xent_fwd_kernel<T, 256><<<grid_for(l, B, 1), 256, 0, l->stream>>>(B, C, (const T *)logits, labels, smoothing,
                                                                          (A *)probs, (A *)losses);
    }
    return cudaGetLastError();
}

template <typename T>
static cudaError_t argmax_t(const ls_cuda_launch *l, int64_t B, int64_t C, const void *logits, const int32_t *labels,
                            int32_t *pred, int32_t *correct) {
    if (C <= 1024) {
        argmax_kernel<T, 32><<<grid_for(l, B, 8), 256, 0, l->stream>>>(B, C, (const T *)logits, labels, pred, correct);
    } else {
        argmax_kernel<T, 256><<<grid_for(l, B, 1), 256, 0, l->stream>>>(B, C, (const T *)logits, labels, pred, correct);
    }
    return cudaGetLastError();
}

} // namespace lsk

using namespace lsk;

extern "C" cudaError_t ls_cuda_xent_fwd(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C, const void *logits,
                                        const int32_t *labels, double smoothing, void *probs, void *losses) {
    if (B <= 0 || C <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, return xent_fwd_t<T>(l, B, C, logits, labels, smoothing, probs, losses));
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_xent_bwd(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C, const void *probs,
                                        const int32_t *labels, double smoothing, double scale, const double *scale_num,
                                        void *dlogits) {
    if (B <= 0 || C <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        xent_bwd_kernel<T><<<grid_for(l, B * C, 256), 256, 0, l->stream>>>(
            B, C, (const typename Acc<T>::type *)probs, labels, smoothing, (typename Acc<T>::type)scale, scale_num,
            scale, (T *)dlogits);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_argmax(const ls_cuda_launch *l, ls_dtype t, int64_t B, int64_t C, const void *logits,
                                      const int32_t *labels, int32_t *pred, int32_t *correct) {
    if (correct) {
        cudaError_t e = cudaMemsetAsync(correct, 0, sizeof(int32_t), l->stream);
        if (e != cudaSuccess) return e;
    }
    if (B <= 0 || C <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, return argmax_t<T>(l, B, C, logits, labels, pred, correct));
    return cudaErrorInvalidValue;
}
