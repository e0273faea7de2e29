/* convert.cu: dtype conversion between f32, f64, f16 and bf16 on the GPU, the pair of
 * kernels/cpu/convert.c. Rounds to nearest even (__float2half_rn, __float2bfloat16_rn); f64 to
 * f16/bf16 goes through f32 as on the CPU, so both backends give the same bits. Four elements per
 * thread step with vector loads and stores when both pointers allow it. */
#include "cuda_common.cuh"

namespace lsk {

/* One element from S to D, the way the CPU backend does it. */
template <typename S, typename D> struct Cvt {
    __device__ static D run(S v) { return from_acc<D>((typename Acc<D>::type)to_acc(v)); }
};
/* f64 -> f16/bf16 rounds to f32 first (as kernels/cpu/convert.c). */
template <> struct Cvt<double, __half> {
    __device__ static __half run(double v) { return __float2half_rn((float)v); }
};
template <> struct Cvt<double, __nv_bfloat16> {
    __device__ static __nv_bfloat16 run(double v) { return __float2bfloat16_rn((float)v); }
};

template <typename S, typename D> __global__ void convert_kernel(int64_t n, const S *src, D *dst, int vec) {
    constexpr int N = 4;
    const int64_t tid = global_tid(), stride = grid_stride();
    int64_t i0 = 0;
    if (vec) {
        const int64_t np = n / N;
        const Pack<S, N> *ps = reinterpret_cast<const Pack<S, N> *>(src);
        Pack<D, N> *pd = reinterpret_cast<Pack<D, N> *>(dst);
        for (int64_t p = tid; p < np; p += stride) {
            Pack<S, N> a = ps[p];
            Pack<D, N> b;
#pragma unroll
            for (int j = 0; j < N; j++) b.v[j] = Cvt<S, D>::run(a.v[j]);
            pd[p] = b;
        }
        i0 = np * N;
    }
    for (int64_t i = i0 + tid; i < n; i += stride) dst[i] = Cvt<S, D>::run(src[i]);
}

template <typename S, typename D>
static cudaError_t convert_t(const ls_cuda_launch *l, int64_t n, const void *src, void *dst) {
    int vec = aligned_to(src, sizeof(Pack<S, 4>)) && aligned_to(dst, sizeof(Pack<D, 4>));
    int64_t work = vec ? n / 4 + 4 : n;
    convert_kernel<S, D><<<grid_for(l, work, 256), 256, 0, l->stream>>>(n, (const S *)src, (D *)dst, vec);
    return cudaGetLastError();
}

template <typename S>
static cudaError_t convert_from(const ls_cuda_launch *l, int64_t n, const void *src, ls_dtype dst_t, void *dst) {
    LSK_DISPATCH_FLOAT(dst_t, D, return convert_t<S, D>(l, n, src, dst));
    return cudaErrorInvalidValue;
}

} // namespace lsk

using namespace lsk;

extern "C" cudaError_t ls_cuda_convert(const ls_cuda_launch *l, int64_t n, ls_dtype src_t, const void *src,
                                       ls_dtype dst_t, void *dst) {
    if (n <= 0) return cudaSuccess;
    if (src_t == dst_t) return cudaErrorInvalidValue; /* the caller copies */
    LSK_DISPATCH_FLOAT(src_t, S, return convert_from<S>(l, n, src, dst_t, dst));
    return cudaErrorInvalidValue;
}
