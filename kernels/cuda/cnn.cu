/* cnn.cu: the CUDA kernels of the NCHW op-table entries other than the convolution itself
 * (max/average pooling, global average pooling, batch-norm statistics, forward and backward, the
 * residual add), and the helpers of cudnn_conv.c (channel bias add, bias-gradient sums, adding a
 * low-precision dw into f32 master gradients). Each kernel pairs a loop of
 * kernels/cpu/norm_pool_impl.inc and follows its arithmetic: values widened to Acc<T> (f32, f64
 * for f64), per-channel coefficients formed as the CPU forms them, products rounded on their own
 * (no FMA contraction) where the CPU rounds them so. Layout: x [N, C, H, W] row-major, a "plane"
 * is one image's [H, W] of one channel. Per-channel sums run in double in a fixed order: block
 * (channel, split) reduces a contiguous range of the channel's N*H*W values, partials go to the
 * scratch area and one thread per channel adds them in split order, so results are deterministic
 * for a given shape and GPU. Pooling backward gathers (each input element sums the windows that
 * chose it, in the CPU's order), so nothing needs atomics. */
#include "cuda_common.cuh"

namespace lsk {
namespace cnn {

/* Products and sums that must round on their own, as the CPU's (-ffp-contract=off) do. */
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }

constexpr int THREADS = 256;

/* ---- plane kernels: one warp per plane (grid-stride over planes), lanes over its elements in
 * 16-byte packs when every pointer is aligned and the plane is a whole number of packs. Op gives
 * per-channel coefficients (coef(c), c = plane % C) and out = op(coef, in0, in1, in2) for the
 * first NIN inputs. out may alias an input: each element is read before it is written, by the
 * same thread. ---- */
template <typename T, int NIN, typename Op>
__global__ void plane_kernel(int64_t planes, int64_t C, int64_t HW, const T *in0, const T *in1, const T *in2, T *out,
                             Op op, int vec) {
    constexpr int N = vec_width<T>();
    const int lane = threadIdx.x & 31;
    const int64_t w0 = global_tid() >> 5, nw = grid_stride() >> 5;
    for (int64_t pl = w0; pl < planes; pl += nw) {
        const auto k = op.coef(pl % C);
        const int64_t off = pl * HW;
        int64_t i0 = 0;
        if (vec) {
            const int64_t np = HW / N;
            for (int64_t q = lane; q < np; q += 32) {
                const int64_t e = off + q * N;
                Pack<T, N> a{}, b{}, d{}, o;
                if constexpr (NIN > 0) a = *reinterpret_cast<const Pack<T, N> *>(in0 + e);
                if constexpr (NIN > 1) b = *reinterpret_cast<const Pack<T, N> *>(in1 + e);
                if constexpr (NIN > 2) d = *reinterpret_cast<const Pack<T, N> *>(in2 + e);
#pragma unroll
                for (int j = 0; j < N; j++) o.v[j] = op(k, a.v[j], b.v[j], d.v[j]);
                *reinterpret_cast<Pack<T, N> *>(out + e) = o;
            }
            i0 = np * N;
        }
        for (int64_t i = i0 + lane; i < HW; i += 32) {
            const int64_t e = off + i;
            T a{}, b{}, d{};
            if constexpr (NIN > 0) a = in0[e];
            if constexpr (NIN > 1) b = in1[e];
            if constexpr (NIN > 2) d = in2[e];
            out[e] = op(k, a, b, d);
        }
    }
}

template <typename T, int NIN, typename Op>
static cudaError_t plane_launch(const ls_cuda_launch *l, int64_t planes, int64_t C, int64_t HW, const T *in0,
                                const T *in1, const T *in2, T *out, Op op) {
    if (planes <= 0 || HW <= 0 || C <= 0) return cudaSuccess;
    int vec = HW % vec_width<T>() == 0 && aligned_to(out, 16);
    if (NIN > 0) vec = vec && aligned_to(in0, 16);
    if (NIN > 1) vec = vec && aligned_to(in1, 16);
    if (NIN > 2) vec = vec && aligned_to(in2, 16);
    plane_kernel<T, NIN, Op>
        <<<grid_for(l, planes * 32, THREADS), THREADS, 0, l->stream>>>(planes, C, HW, in0, in1, in2, out, op, vec);
    return cudaGetLastError();
}

/* y + b[c] (the convolution's bias) */
template <typename T> struct BiasOp {
    using A = typename Acc<T>::type;
    const T *b;
    __device__ A coef(int64_t c) const { return to_acc(b[c]); }
    __device__ T operator()(A k, T y, T, T) const { return from_acc<T>(add_rn(to_acc(y), k)); }
};

/* batch norm: x * scale + shift, scale = gamma * (A)(1 / sqrt(var + eps)), shift = beta - mean * scale */
template <typename A> struct BnScale { A scale, shift; };
template <typename T, bool RELU> struct BnFwdOp {
    using A = typename Acc<T>::type;
    const A *mean, *var, *gamma, *beta;
    double eps;
    __device__ BnScale<A> coef(int64_t c) const {
        const A invstd = (A)(1.0 / sqrt((double)var[c] + eps));
        const A scale = mul_rn(gamma[c], invstd);
        return BnScale<A>{scale, sub_rn(beta[c], mul_rn(mean[c], scale))};
    }
    __device__ T operator()(const BnScale<A> &k, T x, T, T) const {
        A v = add_rn(mul_rn(to_acc(x), k.scale), k.shift);
        if (RELU) v = v <= A(0) ? A(0) : v; /* NaN stays NaN */
        return from_acc<T>(v);
    }
};

/* batch norm backward: dx = k * (g - a - (x - mu) * b), g = dy masked by y > 0 under RELU, with
 * k = gamma * invstd, a = sum_dy / count, b = sum_dy_xhat * invstd / count (a = b = 0 for count 0) */
template <typename A> struct BnGrad { A k, a, b, mu; };
template <typename T, bool RELU> struct BnDxOp {
    using A = typename Acc<T>::type;
    const A *mean, *var, *gamma, *sum_dy, *sum_dy_xhat;
    double eps, count;
    __device__ BnGrad<A> coef(int64_t c) const {
        const double invstd = 1.0 / sqrt((double)var[c] + eps);
        BnGrad<A> g;
        g.k = mul_rn(gamma[c], (A)invstd);
        g.a = count > 0 ? (A)((double)sum_dy[c] / count) : A(0);
        g.b = count > 0 ? (A)((double)sum_dy_xhat[c] * invstd / count) : A(0);
        g.mu = mean[c];
        return g;
    }
    __device__ T operator()(const BnGrad<A> &k, T dy, T x, T y) const {
        A g = to_acc(dy);
        if (RELU) g = to_acc(y) <= A(0) ? A(0) : g;
        if (!(count > 0)) return from_acc<T>(mul_rn(k.k, g)); /* eval: dx = k g (an inf x stays out of it) */
        const A v = sub_rn(sub_rn(g, k.a), mul_rn(sub_rn(to_acc(x), k.mu), k.b));
        return from_acc<T>(mul_rn(k.k, v));
    }
};

/* global average pooling backward: every element of plane pl is (T)(dy[pl] * (1 / hw)) */
template <typename T> struct GapBwdOp {
    using A = typename Acc<T>::type;
    const T *dy;
    A inv;
    __device__ T coef(int64_t pl) const { return from_acc<T>(mul_rn(to_acc(dy[pl]), inv)); }
    __device__ T operator()(T k, T, T, T) const { return k; }
};

/* ---- per-channel reductions over x [N, C, HW] ---- */
enum RedMode {
    RED_SUM = 0,     /* s0 = sum x */
    RED_SQDEV = 1,   /* s0 = sum (x - mean)^2 */
    RED_BN = 2,      /* s0 = sum g, s1 = sum g * (x - mean), g = dy */
    RED_BN_RELU = 3, /* the same with g = dy masked by y > 0 */
};

/* What becomes of a channel's sums. */
enum EpiKind {
    EPI_MEAN = 0, /* out0[c] = s0 / count (0 when count is 0) */
    EPI_ADD = 1,  /* out0[c] += s0 */
    EPI_BN = 2,   /* out0[c] = s0, out1[c] = s1 / sqrt(var[c] + eps) */
};
template <typename A> struct ChanEpi {
    int kind;
    A *out0, *out1;
    const A *var;
    double count, eps;
    __device__ void finish(int64_t c, double s0, double s1) const {
        if (kind == EPI_MEAN) {
            out0[c] = count > 0 ? (A)(s0 / count) : A(0);
        } else if (kind == EPI_ADD) {
            out0[c] = add_rn(out0[c], (A)s0);
        } else {
            out0[c] = (A)s0;
            out1[c] = (A)(s1 / sqrt((double)var[c] + eps));
        }
    }
};

/* The block's sum of v, valid in thread 0; sh holds THREADS / 32 values. Every thread calls it. */
__device__ __forceinline__ double block_sum(double v, double *sh) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0;
    if (threadIdx.x == 0)
        for (int w = 0; w < THREADS / 32; w++) t += sh[w];
    __syncthreads();
    return t;
}

/* Block (c, split) sums values j in [split * per, (split + 1) * per) of channel c, where value j is
 * element (n, c, i) with n = j / HW, i = j % HW. One split: the block finishes the channel itself;
 * else it writes {s0, s1} to partial[c][split]. */
template <typename T, int MODE>
__global__ void __launch_bounds__(THREADS)
    chan_reduce_kernel(int64_t N, int64_t C, int64_t HW, int64_t per, const T *x, const T *dy, const T *y,
                       const typename Acc<T>::type *mean, double *partial, ChanEpi<typename Acc<T>::type> epi) {
    using A = typename Acc<T>::type;
    __shared__ double sh[THREADS / 32];
    const int64_t c = blockIdx.x, split = blockIdx.y, M = N * HW;
    const int64_t j0 = split * per, j1 = j0 + per < M ? j0 + per : M;
    const A mu = MODE == RED_SUM ? A(0) : mean[c];
    double s0 = 0, s1 = 0;
    int64_t j = j0 + threadIdx.x;
    if (j < j1) {
        /* walk (n, i) by THREADS values per step without dividing */
        int64_t n = j / HW, i = j - n * HW;
        const int64_t sn = THREADS / HW, si = THREADS % HW;
        for (; j < j1; j += THREADS) {
            const int64_t e = (n * C + c) * HW + i;
            if constexpr (MODE == RED_SUM) {
                s0 += (double)to_acc(x[e]);
            } else if constexpr (MODE == RED_SQDEV) {
                const A d = sub_rn(to_acc(x[e]), mu);
                s0 += (double)mul_rn(d, d);
            } else {
                A g = to_acc(dy[e]);
                if constexpr (MODE == RED_BN_RELU) g = to_acc(y[e]) <= A(0) ? A(0) : g;
                s0 += (double)g;
                s1 += (double)mul_rn(g, sub_rn(to_acc(x[e]), mu));
            }
            i += si;
            n += sn;
            if (i >= HW) {
                i -= HW;
                n++;
            }
        }
    }
    s0 = block_sum(s0, sh);
    if (MODE == RED_BN || MODE == RED_BN_RELU) s1 = block_sum(s1, sh);
    if (threadIdx.x == 0) {
        if (gridDim.y == 1) {
            epi.finish(c, s0, s1);
        } else {
            partial[(c * gridDim.y + split) * 2] = s0;
            partial[(c * gridDim.y + split) * 2 + 1] = s1;
        }
    }
}

template <typename A>
__global__ void chan_finish_kernel(int64_t C, int64_t splits, const double *partial, ChanEpi<A> epi) {
    for (int64_t c = global_tid(); c < C; c += grid_stride()) {
        double s0 = 0, s1 = 0;
        for (int64_t s = 0; s < splits; s++) {
            s0 += partial[(c * splits + s) * 2];
            s1 += partial[(c * splits + s) * 2 + 1];
        }
        epi.finish(c, s0, s1);
    }
}

/* Splits per channel: about four blocks per SM in all, each over at least 4096 values (16 per
 * thread), with the partials fitting the scratch area. A function of the shape and the GPU only. */
static int64_t chan_splits(const ls_cuda_launch *l, int64_t C, int64_t M) {
    const int64_t want = 4 * (int64_t)(l->sm_count > 0 ? l->sm_count : 1);
    int64_t s = (want + C - 1) / C;
    const int64_t most = (M + 4095) / 4096;
    if (s > most) s = most;
    if (s > 65535) s = 65535;
    const int64_t fit = l->scratch ? (int64_t)(l->scratch_bytes / (2 * sizeof(double) * (size_t)C)) : 0;
    if (s > fit) s = fit;
    return s < 1 ? 1 : s;
}

template <typename T, int MODE>
static cudaError_t chan_reduce(const ls_cuda_launch *l, int64_t N, int64_t C, int64_t HW, const T *x, const T *dy,
                               const T *y, const typename Acc<T>::type *mean, ChanEpi<typename Acc<T>::type> epi) {
    using A = typename Acc<T>::type;
    if (C <= 0) return cudaSuccess;
    if (C > 2147483647) return cudaErrorInvalidValue;
    const int64_t M = N > 0 && HW > 0 ? N * HW : 0;
    if (M == 0) { /* no values: as the CPU, sums of nothing */
        N = HW = 0;
    }
    int64_t splits = chan_splits(l, C, M);
    const int64_t per = M > 0 ? (M + splits - 1) / splits : 0;
    if (M > 0) splits = (M + per - 1) / per;
    double *partial = splits > 1 ? static_cast<double *>(l->scratch) : nullptr;
    chan_reduce_kernel<T, MODE><<<dim3((unsigned)C, (unsigned)splits), THREADS, 0, l->stream>>>(
        N, C, HW > 0 ? HW : 1, per, x, dy, y, mean, partial, epi);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || splits == 1) return e;
    chan_finish_kernel<A><<<grid_for(l, C, THREADS), THREADS, 0, l->stream>>>(C, splits, partial, epi);
    return cudaGetLastError();
}

/* ---- pooling ---- */
/* The first window index (along one dimension) whose window [i*s - pad, i*s - pad + k) holds h. */
__device__ __forceinline__ int64_t first_window(int64_t h, int64_t k, int64_t s, int64_t pad) {
    const int64_t num = h + pad - k + 1;
    return num <= 0 ? 0 : (num + s - 1) / s;
}

template <typename T> __global__ void pool_fwd_kernel(ls_pool2d_params p, const T *x, T *y) {
    using A = typename Acc<T>::type;
    const int64_t total = p.N * p.C * p.P * p.Q;
    for (int64_t o = global_tid(); o < total; o += grid_stride()) {
        const int64_t j = o % p.Q, i = (o / p.Q) % p.P, pl = o / (p.P * p.Q);
        const T *xp = x + pl * p.H * p.W;
        const int64_t h0 = i * p.stride_h - p.pad_h, h1 = h0 + p.kh;
        const int64_t hs = h0 < 0 ? 0 : h0, he = h1 > p.H ? p.H : h1;
        const int64_t w0 = j * p.stride_w - p.pad_w, w1 = w0 + p.kw;
        const int64_t ws = w0 < 0 ? 0 : w0, we = w1 > p.W ? p.W : w1;
        A v;
        if (p.mode == LS_POOL_MAX) {
            v = -(A)INFINITY;
            for (int64_t h = hs; h < he; h++)
                for (int64_t w = ws; w < we; w++) {
                    const A e = to_acc(xp[h * p.W + w]);
                    if (e > v || isnan(e)) v = e;
                }
        } else {
            A s = 0;
            for (int64_t h = hs; h < he; h++)
                for (int64_t w = ws; w < we; w++) s = add_rn(s, to_acc(xp[h * p.W + w]));
            const int64_t cnt = p.count_include_pad ? p.kh * p.kw : (he - hs) * (we - ws);
            v = cnt > 0 ? s / (A)cnt : A(0);
        }
        y[o] = from_acc<T>(v);
    }
}

/* dx[h, w] = the sum, over the windows (i, j) holding (h, w) in row-major order, of dy[i, j] if
 * (h, w) is the window's first maximum (max) or of dy[i, j] / count (average): the CPU's
 * scatter-add, in its order, as a gather. */
template <typename T> __global__ void pool_bwd_kernel(ls_pool2d_params p, const T *x, const T *dy, T *dx) {
    using A = typename Acc<T>::type;
    const int64_t total = p.N * p.C * p.H * p.W;
    for (int64_t e = global_tid(); e < total; e += grid_stride()) {
        const int64_t w = e % p.W, h = (e / p.W) % p.H, pl = e / (p.H * p.W);
        const T *xp = x + pl * p.H * p.W;
        const T *dp = dy + pl * p.P * p.Q;
        const int64_t i0 = first_window(h, p.kh, p.stride_h, p.pad_h);
        const int64_t j0 = first_window(w, p.kw, p.stride_w, p.pad_w);
        int64_t i1 = (h + p.pad_h) / p.stride_h, j1 = (w + p.pad_w) / p.stride_w;
        if (i1 > p.P - 1) i1 = p.P - 1;
        if (j1 > p.Q - 1) j1 = p.Q - 1;
        const int64_t me = h * p.W + w;
        A g = 0;
        for (int64_t i = i0; i <= i1; i++) {
            const int64_t h0 = i * p.stride_h - p.pad_h, h1 = h0 + p.kh;
            const int64_t hs = h0 < 0 ? 0 : h0, he = h1 > p.H ? p.H : h1;
            for (int64_t j = j0; j <= j1; j++) {
                const int64_t w0 = j * p.stride_w - p.pad_w, w1 = w0 + p.kw;
                const int64_t ws = w0 < 0 ? 0 : w0, we = w1 > p.W ? p.W : w1;
                const A d = to_acc(dp[i * p.Q + j]);
                if (p.mode == LS_POOL_MAX) {
                    int64_t best = -1;
                    A v = -(A)INFINITY;
                    for (int64_t hh = hs; hh < he; hh++)
                        for (int64_t ww = ws; ww < we; ww++) {
                            const A x1 = to_acc(xp[hh * p.W + ww]);
                            if (best < 0 || x1 > v || (isnan(x1) && !isnan(v))) {
                                v = x1;
                                best = hh * p.W + ww;
                            }
                        }
                    if (best == me) g = add_rn(g, d);
                } else {
                    const int64_t cnt = p.count_include_pad ? p.kh * p.kw : (he - hs) * (we - ws);
                    g = add_rn(g, cnt > 0 ? d / (A)cnt : A(0));
                }
            }
        }
        dx[e] = from_acc<T>(g);
    }
}

/* ---- global average pooling: one warp per plane, summed in double ---- */
template <typename T> __global__ void gap_fwd_kernel(int64_t planes, int64_t hw, const T *x, T *y) {
    using A = typename Acc<T>::type;
    const int lane = threadIdx.x & 31;
    for (int64_t pl = global_tid() >> 5; pl < planes; pl += grid_stride() >> 5) {
        const T *xp = x + pl * hw;
        double s = 0;
        for (int64_t i = lane; i < hw; i += 32) s += (double)to_acc(xp[i]);
        s = warp_sum(s);
        if (lane == 0) y[pl] = from_acc<T>((A)(s / (double)hw));
    }
}

/* ---- element-wise ---- */
/* y = a + b (then ReLU), in 16-byte packs when every pointer is aligned; y may alias a or b. */
template <typename T, bool RELU> __global__ void add_kernel(int64_t n, const T *a, const T *b, T *y, int vec) {
    using A = typename Acc<T>::type;
    constexpr int N = vec_width<T>();
    const int64_t tid = global_tid(), stride = grid_stride();
    auto f = [](T u, T v) {
        A s = add_rn(to_acc(u), to_acc(v));
        if (RELU) s = s <= A(0) ? A(0) : s;
        return from_acc<T>(s);
    };
    int64_t i0 = 0;
    if (vec) {
        const int64_t np = n / N;
        for (int64_t q = tid; q < np; q += stride) {
            const Pack<T, N> va = reinterpret_cast<const Pack<T, N> *>(a)[q];
            const Pack<T, N> vb = reinterpret_cast<const Pack<T, N> *>(b)[q];
            Pack<T, N> vo;
#pragma unroll
            for (int j = 0; j < N; j++) vo.v[j] = f(va.v[j], vb.v[j]);
            reinterpret_cast<Pack<T, N> *>(y)[q] = vo;
        }
        i0 = np * N;
    }
    for (int64_t i = i0 + tid; i < n; i += stride) y[i] = f(a[i], b[i]);
}

/* dst (master type) += src (T) */
template <typename T> __global__ void accumulate_kernel(int64_t n, const T *src, typename Acc<T>::type *dst) {
    for (int64_t i = global_tid(); i < n; i += grid_stride()) dst[i] = add_rn(dst[i], to_acc(src[i]));
}

/* ops.h's bn_update: y = y * keep (rounded, as the scale op; skipped when keep is 1) + w * x, for
 * the two pairs, 2C threads' work in one launch. */
template <typename T>
__global__ void bn_update_kernel(int64_t C, int scale, T keep, T w1, const T *x1, T *y1, T w2, const T *x2, T *y2) {
    const int64_t stride = grid_stride();
    for (int64_t i = global_tid(); i < 2 * C; i += stride) {
        const bool second = i >= C;
        const int64_t j = second ? i - C : i;
        T *y = second ? y2 : y1;
        const T a = scale ? mul_rn(y[j], keep) : y[j];
        y[j] = add_rn(a, mul_rn(second ? w2 : w1, (second ? x2 : x1)[j])); /* the CPU's roundings */
    }
}

} // namespace cnn
} // namespace lsk

using namespace lsk;
using namespace lsk::cnn;

extern "C" cudaError_t ls_cuda_channel_bias_add(const ls_cuda_launch *l, ls_dtype t, int64_t N, int64_t C, int64_t HW,
                                                const void *b, void *y) {
    LSK_DISPATCH_FLOAT(t, T, {
        BiasOp<T> op{(const T *)b};
        return plane_launch<T, 1>(l, N * C, C, HW, (const T *)y, (const T *)nullptr, (const T *)nullptr, (T *)y, op);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_channel_sum(const ls_cuda_launch *l, ls_dtype t, int64_t N, int64_t C, int64_t HW,
                                           const void *dy, void *db) {
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        ChanEpi<A> epi{EPI_ADD, (A *)db, nullptr, nullptr, 0.0, 0.0};
        return chan_reduce<T, RED_SUM>(l, N, C, HW, (const T *)dy, nullptr, nullptr, nullptr, epi);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_accumulate_master(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *src,
                                                 void *dst) {
    if (n <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        accumulate_kernel<T><<<grid_for(l, n, THREADS), THREADS, 0, l->stream>>>(n, (const T *)src, (A *)dst);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_pool2d_fwd(const ls_cuda_launch *l, ls_dtype t, const ls_pool2d_params *p, const void *x,
                                          void *y) {
    const int64_t total = p->N * p->C * p->P * p->Q;
    if (total <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        pool_fwd_kernel<T><<<grid_for(l, total, THREADS), THREADS, 0, l->stream>>>(*p, (const T *)x, (T *)y);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_pool2d_bwd(const ls_cuda_launch *l, ls_dtype t, const ls_pool2d_params *p, const void *x,
                                          const void *dy, void *dx) {
    const int64_t total = p->N * p->C * p->H * p->W;
    if (total <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        pool_bwd_kernel<T>
            <<<grid_for(l, total, THREADS), THREADS, 0, l->stream>>>(*p, (const T *)x, (const T *)dy, (T *)dx);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_global_avgpool_fwd(const ls_cuda_launch *l, ls_dtype t, int64_t planes, int64_t hw,
                                                  const void *x, void *y) {
    if (planes <= 0 || hw <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        gap_fwd_kernel<T>
            <<<grid_for(l, planes * 32, THREADS), THREADS, 0, l->stream>>>(planes, hw, (const T *)x, (T *)y);
    });
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_global_avgpool_bwd(const ls_cuda_launch *l, ls_dtype t, int64_t planes, int64_t hw,
                                                  const void *dy, void *dx) {
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        GapBwdOp<T> op{(const T *)dy, (A)(1.0 / (double)hw)};
        return plane_launch<T, 0>(l, planes, planes, hw, (const T *)nullptr, (const T *)nullptr, (const T *)nullptr,
                                  (T *)dx, op);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_bn_stats(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *x,
                                        void *mean, void *var) {
    const double count = (double)(p->N * p->HW);
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        ChanEpi<A> em{EPI_MEAN, (A *)mean, nullptr, nullptr, count, 0.0};
        cudaError_t e = chan_reduce<T, RED_SUM>(l, p->N, p->C, p->HW, (const T *)x, nullptr, nullptr, nullptr, em);
        if (e != cudaSuccess) return e;
        ChanEpi<A> ev{EPI_MEAN, (A *)var, nullptr, nullptr, count, 0.0};
        return chan_reduce<T, RED_SQDEV>(l, p->N, p->C, p->HW, (const T *)x, nullptr, nullptr, (const A *)mean, ev);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_bn_fwd(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *x,
                                      const void *mean, const void *var, const void *gamma, const void *beta, void *y) {
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        const A *m = (const A *)mean, *v = (const A *)var, *g = (const A *)gamma, *b = (const A *)beta;
        if (p->relu)
            return plane_launch<T, 1>(l, p->N * p->C, p->C, p->HW, (const T *)x, (const T *)nullptr, (const T *)nullptr,
                                      (T *)y, BnFwdOp<T, true>{m, v, g, b, p->eps});
        return plane_launch<T, 1>(l, p->N * p->C, p->C, p->HW, (const T *)x, (const T *)nullptr, (const T *)nullptr,
                                  (T *)y, BnFwdOp<T, false>{m, v, g, b, p->eps});
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_bn_bwd_reduce(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *dy,
                                             const void *x, const void *y, const void *mean, const void *var,
                                             void *sum_dy, void *sum_dy_xhat) {
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        ChanEpi<A> epi{EPI_BN, (A *)sum_dy, (A *)sum_dy_xhat, (const A *)var, 0.0, p->eps};
        if (p->relu)
            return chan_reduce<T, RED_BN_RELU>(l, p->N, p->C, p->HW, (const T *)x, (const T *)dy, (const T *)y,
                                               (const A *)mean, epi);
        return chan_reduce<T, RED_BN>(l, p->N, p->C, p->HW, (const T *)x, (const T *)dy, nullptr, (const A *)mean, epi);
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_bn_bwd_dx(const ls_cuda_launch *l, ls_dtype t, const ls_bn_params *p, const void *dy,
                                         const void *x, const void *y, const void *mean, const void *var,
                                         const void *gamma, const void *sum_dy, const void *sum_dy_xhat, double count,
                                         void *dx) {
    LSK_DISPATCH_FLOAT(t, T, {
        using A = typename Acc<T>::type;
        const A *m = (const A *)mean, *v = (const A *)var, *g = (const A *)gamma;
        const A *s1 = (const A *)sum_dy, *s2 = (const A *)sum_dy_xhat;
        const int64_t planes = p->N * p->C;
        if (p->relu)
            return plane_launch<T, 3>(l, planes, p->C, p->HW, (const T *)dy, (const T *)x, (const T *)y, (T *)dx,
                                      BnDxOp<T, true>{m, v, g, s1, s2, p->eps, count});
        return plane_launch<T, 2>(l, planes, p->C, p->HW, (const T *)dy, (const T *)x, (const T *)nullptr, (T *)dx,
                                  BnDxOp<T, false>{m, v, g, s1, s2, p->eps, count});
    });
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_bn_update(const ls_cuda_launch *l, ls_dtype t, int64_t C, double keep, double w1,
                                         const void *x1, void *y1, double w2, const void *x2, void *y2) {
    if (C <= 0) return cudaSuccess;
    if (t == LS_F32)
        bn_update_kernel<float><<<grid_for(l, 2 * C, THREADS), THREADS, 0, l->stream>>>(
            C, keep != 1.0, (float)keep, (float)w1, (const float *)x1, (float *)y1, (float)w2, (const float *)x2,
            (float *)y2);
    else if (t == LS_F64)
        bn_update_kernel<double><<<grid_for(l, 2 * C, THREADS), THREADS, 0, l->stream>>>(
            C, keep != 1.0, keep, w1, (const double *)x1, (double *)y1, w2, (const double *)x2, (double *)y2);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_add(const ls_cuda_launch *l, ls_dtype t, int64_t n, const void *a, const void *b,
                                   int relu, void *y) {
    if (n <= 0) return cudaSuccess;
    LSK_DISPATCH_FLOAT(t, T, {
        const int vec = aligned_to(a, 16) && aligned_to(b, 16) && aligned_to(y, 16);
        const int64_t work = vec ? n / vec_width<T>() + vec_width<T>() : n;
        const unsigned blocks = grid_for(l, work, THREADS);
        if (relu)
            add_kernel<T, true><<<blocks, THREADS, 0, l->stream>>>(n, (const T *)a, (const T *)b, (T *)y, vec);
        else
            add_kernel<T, false><<<blocks, THREADS, 0, l->stream>>>(n, (const T *)a, (const T *)b, (T *)y, vec);
    });
    return cudaGetLastError();
}
