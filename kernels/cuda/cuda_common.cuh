/* cuda_common.cuh (internal): device helpers shared by the .cu files. Element types T are
 * float, double, __half, __nv_bfloat16; arithmetic runs in Acc<T> (float, double for double),
 * conversions round to nearest even. Pack<T, N> is an aligned N-element vector for 16-byte loads. */
#ifndef LOCKSTEP_CUDA_COMMON_CUH
#define LOCKSTEP_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_backend.h"

namespace lsk {

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_acc(typename Acc<T>::type v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* N elements of T, aligned to their total size (16 bytes for the element-wise kernels). */
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

/* Elements per 16-byte vector. */
template <typename T> __host__ __device__ constexpr int vec_width() { return (int)(16 / sizeof(T)); }

__host__ __forceinline__ bool aligned_to(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* Blocks for a grid-stride loop over work items with threads per block: enough to fill the
 * GPU a few times over, never more than the work needs. */
__host__ __forceinline__ unsigned grid_for(const ls_cuda_launch *l, int64_t work, int threads) {
    int64_t need = (work + threads - 1) / threads;
    int64_t most = (int64_t)(l->sm_count > 0 ? l->sm_count : 1) * 16;
    if (need > most) need = most;
    if (need < 1) need = 1;
    return (unsigned)need;
}

__device__ __forceinline__ int64_t global_tid() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }

template <typename A> __device__ __forceinline__ A warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* A block's sum of squares s and inf/NaN flag bad (each thread's part) into partial[2 block] and
 * partial[2 block + 1]: warps, then the first warp, in a fixed order. Every thread calls it. */
__device__ __forceinline__ void block_sumsq_store(double s, int bad, double *partial) {
    __shared__ double sh_s[32];
    __shared__ int sh_b[32];
    s = warp_sum(s);
    bad = __any_sync(0xffffffffu, bad);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        sh_s[warp] = s;
        sh_b[warp] = bad;
    }
    __syncthreads();
    if (warp == 0) {
        const int nw = (blockDim.x + 31) >> 5;
        s = lane < nw ? sh_s[lane] : 0.0;
        bad = lane < nw ? sh_b[lane] : 0;
        s = warp_sum(s);
        bad = __any_sync(0xffffffffu, bad);
        if (lane == 0) {
            partial[2 * blockIdx.x] = s;
            partial[2 * blockIdx.x + 1] = bad ? 1.0 : 0.0;
        }
    }
}
template <typename A> __device__ __forceinline__ A warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

} // namespace lsk

/* Dispatch a templated call on an ls_dtype among the four float types; anything else returns
 * cudaErrorInvalidValue (cuda_ops.c rejects it first with a message). */
#define LSK_DISPATCH_FLOAT(t, T, ...)                                                                                  \
    switch (t) {                                                                                                       \
    case LS_F32: {                                                                                                     \
        using T = float;                                                                                               \
        __VA_ARGS__;                                                                                                   \
    } break;                                                                                                           \
    case LS_F64: {                                                                                                     \
        using T = double;                                                                                              \
        __VA_ARGS__;                                                                                                   \
    } break;                                                                                                           \
    case LS_F16: {                                                                                                     \
        using T = __half;                                                                                              \
        __VA_ARGS__;                                                                                                   \
    } break;                                                                                                           \
    case LS_BF16: {                                                                                                    \
        using T = __nv_bfloat16;                                                                                       \
        __VA_ARGS__;                                                                                                   \
    } break;                                                                                                           \
    default: return cudaErrorInvalidValue;                                                                             \
    }

#endif
