/* optim.cu: SGD (momentum, dampening, Nesterov, weight decay) and AdamW as fused multi-tensor
 * kernels, the formulas of torch.optim as in kernels/cpu/cpu_impl.inc. As in apex/PyTorch's
 * multi_tensor_apply, the host packs up to MT_TENSORS tensor addresses and a block -> (tensor,
 * chunk) map of up to MT_BLOCKS entries into the kernel's argument struct (under the 4 KiB
 * parameter limit) and launches once per pack: a whole model's step is a few launches. */
#include <math.h>
#include <string.h>

#include "cuda_common.cuh"

namespace lsk {

constexpr int MT_TENSORS = 24;
constexpr int MT_BLOCKS = 320;
constexpr int64_t MT_CHUNK = 65536; /* elements per block; a multiple of every pack width */

template <typename T> struct MTList {
    T *p[MT_TENSORS];
    T *g[MT_TENSORS];
    T *m[MT_TENSORS]; /* NULL: no such state (SGD without momentum, or SGD's v) */
    T *v[MT_TENSORS];
    int64_t n[MT_TENSORS];
    T w[MT_TENSORS];         /* the op's per-tensor constant (SGD's weight decay, AdamW's decay factor) */
    uint8_t vec[MT_TENSORS]; /* all of the tensor's pointers are 16-byte aligned */
    uint8_t tensor[MT_BLOCKS];
    int32_t chunk[MT_BLOCKS];
};
static_assert(sizeof(MTList<double>) <= 4000, "multi-tensor argument struct exceeds the parameter limit");

template <typename T, typename Op> __global__ void __launch_bounds__(256) mt_kernel(MTList<T> L, Op op_in) {
    Op op = op_in;
    if (!op.load()) return; /* a step skipped on the device */
    const int t = L.tensor[blockIdx.x];
    const int64_t n = L.n[t];
    const int64_t start = (int64_t)L.chunk[blockIdx.x] * MT_CHUNK;
    const int64_t end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
    T *p = L.p[t], *m = L.m[t], *v = L.v[t];
    const T *g = L.g[t];
    const T w = L.w[t];
    int64_t i0 = start;
    if (L.vec[t]) {
        constexpr int N = vec_width<T>();
        using P = Pack<T, N>;
        const int64_t np = (end - start) / N;
        for (int64_t q = threadIdx.x; q < np; q += blockDim.x) {
            const int64_t i = start + q * N;
            P vp = *reinterpret_cast<const P *>(p + i), vg = *reinterpret_cast<const P *>(g + i), vm, vv;
            if (m) vm = *reinterpret_cast<const P *>(m + i);
            if (v) vv = *reinterpret_cast<const P *>(v + i);
#pragma unroll
            for (int j = 0; j < N; j++) {
                if (!m) vm.v[j] = T(0);
                if (!v) vv.v[j] = T(0);
                op(vp.v[j], vg.v[j], vm.v[j], vv.v[j], w);
            }
            *reinterpret_cast<P *>(p + i) = vp;
            if (m) *reinterpret_cast<P *>(m + i) = vm;
            if (v) *reinterpret_cast<P *>(v + i) = vv;
        }
        i0 = start + np * N;
    }
    for (int64_t i = i0 + threadIdx.x; i < end; i += blockDim.x) {
        T pi = p[i], mi = m ? m[i] : T(0), vi = v ? v[i] : T(0);
        op(pi, g[i], mi, vi, w);
        p[i] = pi;
        if (m) m[i] = mi;
        if (v) v[i] = vi;
    }
}

/* torch.optim.SGD: d = g + wd p; buf = first ? d : momentum buf + (1 - dampening) d;
 * d = nesterov ? d + momentum buf : buf; p -= lr d. The tensor's wd comes as w. */
template <typename T> struct SgdOp {
    T lr, mom, damp;
    int nesterov, first, has_m;
    const double *ctl; /* the device step count: skipped, first (optim_prep_kernel) */
    __device__ bool load() {
        if (!ctl) return true;
        if (ctl[1] != 0.0) return false;
        first = ctl[2] != 0.0;
        return true;
    }
    __device__ void operator()(T &p, T g, T &m, T &, T wd) const {
        T d = g + wd * p;
        if (has_m) {
            T buf = first ? d : mom * m + damp * d;
            m = buf;
            d = nesterov ? d + mom * buf : buf;
        }
        p -= lr * d;
    }
};

/* torch.optim.AdamW: p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). The tensor's 1 - lr wd comes as w. */
template <typename T> struct AdamWOp {
    T b1, b2, eps, bc2_sqrt, step_size;
    const double *ctl; /* the device step count: skipped, bc2_sqrt, step_size (optim_prep_kernel) */
    __device__ bool load() {
        if (!ctl) return true;
        if (ctl[1] != 0.0) return false;
        bc2_sqrt = (T)ctl[2];
        step_size = (T)ctl[3];
        return true;
    }
    __device__ void operator()(T &p, T g, T &m, T &v, T decay) const {
        T mi = b1 * m + (T(1) - b1) * g;
        T vi = b2 * v + (T(1) - b2) * g * g;
        m = mi;
        v = vi;
        p = p * decay - step_size * mi / (sqrt(vi) / bc2_sqrt + eps);
    }
};

/* Mixed precision's check (ops.h's amp_check) over many tensors, one launch per pack, as
 * PyTorch's _amp_foreach_non_finite_check_and_unscale_: x *= 1 / the scale (read on the device;
 * the cast and product of ls_cuda_scale) when unscale, and the flag set where a result is inf/NaN
 * (every store writes the same 1: no race). x comes as both p and g (g is not written). */
template <typename T> struct AmpOp {
    double *ctl;
    int unscale;
    T inv;
    __device__ bool load() {
        if (unscale) inv = (T)(1.0 / ctl[LS_AMP_SCALE]);
        return true;
    }
    __device__ void operator()(T &p, T, T &, T &, T) const {
        if (unscale) p = p * inv;
        if (!isfinite(p)) ctl[LS_AMP_FOUND] = 1.0;
    }
};

/* A step counted on the device (ops.h's ctl): ctl[1] = skipped; if not, ctl[0] += 1 and the step's
 * constants from it, in the CPU backend's types and order: SGD ctl[2] = first step; AdamW ctl[2] =
 * sqrt(bc2), ctl[3] = lr / bc1 (values of T, exact in double). */
template <typename T>
__global__ void optim_prep_kernel(double *ctl, const double *skip, int adam, float lr, float beta1, float beta2) {
    const bool skipped = skip && *skip != 0.0;
    ctl[1] = skipped ? 1.0 : 0.0;
    if (skipped) return;
    const double step = ctl[0] + 1.0;
    ctl[0] = step;
    if (!adam) {
        ctl[2] = step == 1.0 ? 1.0 : 0.0;
        return;
    }
    const T bc1 = (T)1 - (T)pow((double)beta1, step);
    ctl[2] = (double)(T)sqrt(1.0 - pow((double)beta2, step));
    ctl[3] = (double)((T)lr / bc1);
}

template <typename T>
static cudaError_t optim_prep(const ls_cuda_launch *l, double *ctl, const double *skip, int adam, float lr, float b1,
                              float b2) {
    optim_prep_kernel<T><<<1, 1, 0, l->stream>>>(ctl, skip, adam, lr, b1, b2);
    return cudaGetLastError();
}

template <typename T, typename Op>
static cudaError_t mt_launch(const ls_cuda_launch *l, const MTList<T> &L, int blocks, Op op) {
    mt_kernel<T, Op><<<blocks, 256, 0, l->stream>>>(L, op);
    return cudaGetLastError();
}

/* Pack the tensors into argument structs and call launch(L, blocks) for each: a tensor whose chunks
 * do not all fit one launch continues in slot 0 of the next. Tensor t's constant w is w_of(t). */
template <typename T, typename W, typename Launch>
static cudaError_t mt_pack_w(int k, void *const *p, void *const *g, void *const *m, void *const *v, const int64_t *n,
                             W w_of, Launch launch) {
    MTList<T> L;
    memset(&L, 0, sizeof L);
    int nt = 0, nb = 0;
    for (int t = 0; t < k; t++) {
        if (n[t] <= 0) continue;
        L.p[nt] = static_cast<T *>(p[t]);
        L.g[nt] = static_cast<T *>(g[t]);
        L.m[nt] = m ? static_cast<T *>(m[t]) : nullptr;
        L.v[nt] = v ? static_cast<T *>(v[t]) : nullptr;
        L.n[nt] = n[t];
        L.w[nt] = w_of(t);
        L.vec[nt] =
            aligned_to(L.p[nt], 16) && aligned_to(L.g[nt], 16) && aligned_to(L.m[nt], 16) && aligned_to(L.v[nt], 16);
        const int64_t chunks = (n[t] + MT_CHUNK - 1) / MT_CHUNK;
        for (int64_t c = 0; c < chunks; c++) {
            L.tensor[nb] = (uint8_t)nt;
            L.chunk[nb] = (int32_t)c;
            nb++;
            const bool last = c == chunks - 1;
            if (nb == MT_BLOCKS || (last && nt + 1 == MT_TENSORS)) {
                cudaError_t e = launch(L, nb);
                if (e != cudaSuccess) return e;
                nb = 0;
                if (last) {
                    nt = -1; /* every slot is free again */
                } else {     /* this tensor goes on in slot 0 */
                    L.p[0] = L.p[nt];
                    L.g[0] = L.g[nt];
                    L.m[0] = L.m[nt];
                    L.v[0] = L.v[nt];
                    L.n[0] = L.n[nt];
                    L.w[0] = L.w[nt];
                    L.vec[0] = L.vec[nt];
                    nt = 0;
                }
            }
        }
        nt++;
    }
    return nb ? launch(L, nb) : cudaSuccess;
}

template <typename T, typename Launch>
static cudaError_t mt_pack(int k, void *const *p, void *const *g, void *const *m, void *const *v, const int64_t *n,
                           Launch launch) {
    return mt_pack_w<T>(
        k, p, g, m, v, n, [](int) { return T(0); }, launch);
}

template <typename T, typename Op, typename W>
static cudaError_t mt_apply_w(const ls_cuda_launch *l, int k, void *const *p, void *const *g, void *const *m,
                              void *const *v, const int64_t *n, Op op, W w_of) {
    return mt_pack_w<T>(k, p, g, m, v, n, w_of, [&](const MTList<T> &L, int nb) { return mt_launch<T>(l, L, nb, op); });
}

template <typename T, typename Op>
static cudaError_t mt_apply(const ls_cuda_launch *l, int k, void *const *p, void *const *g, void *const *m,
                            void *const *v, const int64_t *n, Op op) {
    return mt_apply_w<T>(l, k, p, g, m, v, n, op, [](int) { return T(0); });
}

/* Sum of squares in double and an inf/NaN flag over a pack (gradient-norm clipping): each block
 * its chunk's {sum, flag} into partial[2 block], [2 block + 1] (block_sumsq_store);
 * ls_cuda_sumsq_finish then adds a pack's partials in order. */
template <typename T> __global__ void __launch_bounds__(256) mt_sumsq_kernel(MTList<T> L, double *partial) {
    const int t = L.tensor[blockIdx.x];
    const int64_t n = L.n[t];
    const int64_t start = (int64_t)L.chunk[blockIdx.x] * MT_CHUNK;
    const int64_t end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
    const T *x = L.p[t];
    double s = 0;
    int bad = 0;
    for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        const double d = (double)x[i];
        s += d * d;
        bad |= !isfinite(d);
    }
    block_sumsq_store(s, bad, partial);
}

/* Clipping's scale over a pack: x *= the coefficient acc[2] where it is below 1 (the cast and
 * product of ls_cuda_scale; nothing where it is not). */
template <typename T> struct ClipOp {
    const double *acc;
    T c;
    __device__ bool load() {
        const double v = acc[2];
        if (!(v < 1.0)) return false;
        c = (T)v;
        return true;
    }
    __device__ void operator()(T &p, T, T &, T &, T) const { p = p * c; }
};

/* Mixed precision's weight copies over a pack (ops.h's convert_many, f32 to f16/bf16): dst = src
 * rounded to nearest even, as convert.cu (from_acc). The destination comes as p (its address held
 * in a float pointer), the source as g. */
template <typename D> __global__ void __launch_bounds__(256) mt_convert_kernel(MTList<float> L) {
    const int t = L.tensor[blockIdx.x];
    const int64_t n = L.n[t];
    const int64_t start = (int64_t)L.chunk[blockIdx.x] * MT_CHUNK;
    const int64_t end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
    const float *src = L.g[t];
    D *dst = reinterpret_cast<D *>(L.p[t]);
    int64_t i0 = start;
    if (L.vec[t]) {
        constexpr int N = vec_width<float>();
        const int64_t np = (end - start) / N;
        for (int64_t q = threadIdx.x; q < np; q += blockDim.x) {
            const int64_t i = start + q * N;
            const Pack<float, N> a = *reinterpret_cast<const Pack<float, N> *>(src + i);
            Pack<D, N> b;
#pragma unroll
            for (int j = 0; j < N; j++) b.v[j] = from_acc<D>(a.v[j]);
            *reinterpret_cast<Pack<D, N> *>(dst + i) = b;
        }
        i0 = start + np * N;
    }
    for (int64_t i = i0 + threadIdx.x; i < end; i += blockDim.x) dst[i] = from_acc<D>(src[i]);
}

/* Zeros over a pack (ops.h's zero_many): 32-bit words, four a store where 16-byte aligned. */
__global__ void __launch_bounds__(256) mt_zero_kernel(MTList<float> L) {
    const int t = L.tensor[blockIdx.x];
    const int64_t n = L.n[t];
    const int64_t start = (int64_t)L.chunk[blockIdx.x] * MT_CHUNK;
    const int64_t end = start + MT_CHUNK < n ? start + MT_CHUNK : n;
    float *p = L.p[t];
    int64_t i0 = start;
    if (L.vec[t]) {
        constexpr int N = vec_width<float>();
        const int64_t np = (end - start) / N;
        Pack<float, N> z;
#pragma unroll
        for (int j = 0; j < N; j++) z.v[j] = 0.0f;
        for (int64_t q = threadIdx.x; q < np; q += blockDim.x)
            *reinterpret_cast<Pack<float, N> *>(p + start + q * N) = z;
        i0 = start + np * N;
    }
    for (int64_t i = i0 + threadIdx.x; i < end; i += blockDim.x) p[i] = 0.0f;
}

template <typename D>
static cudaError_t convert_mt_t(const ls_cuda_launch *l, int k, const void *const *src, void *const *dst,
                                const int64_t *n) {
    return mt_pack<float>(k, dst, const_cast<void *const *>(src), nullptr, nullptr, n,
                          [&](const MTList<float> &L, int nb) {
                              mt_convert_kernel<D><<<nb, 256, 0, l->stream>>>(L);
                              return cudaGetLastError();
                          });
}

template <typename T>
static cudaError_t sgd_t(const ls_cuda_launch *l, int k, void *const *p, void *const *g, void *const *m,
                         const int64_t *n, const ls_sgd_params *hp) {
    SgdOp<T> op;
    op.lr = (T)hp->lr;
    op.mom = (T)hp->momentum;
    op.damp = (T)1 - (T)hp->dampening;
    op.nesterov = hp->nesterov;
    op.first = hp->first_step;
    op.has_m = m != nullptr;
    op.ctl = hp->ctl;
    if (hp->ctl) {
        cudaError_t e = optim_prep<T>(l, hp->ctl, hp->skip, 0, hp->lr, 0.f, 0.f);
        if (e != cudaSuccess) return e;
    }
    const float *wds = hp->weight_decays;
    const float wd = hp->weight_decay;
    return mt_apply_w<T>(l, k, p, g, m, nullptr, n, op, [&](int t) { return (T)(wds ? wds[t] : wd); });
}

template <typename T>
static cudaError_t adamw_t(const ls_cuda_launch *l, int k, void *const *p, void *const *g, void *const *m,
                           void *const *v, const int64_t *n, const ls_adamw_params *hp) {
    /* the same constants, computed the same way, as the CPU backend */
    AdamWOp<T> op;
    op.b1 = (T)hp->beta1;
    op.b2 = (T)hp->beta2;
    op.eps = (T)hp->eps;
    const T bc1 = (T)1 - (T)pow((double)hp->beta1, (double)hp->step);
    op.bc2_sqrt = (T)sqrt(1.0 - pow((double)hp->beta2, (double)hp->step));
    op.step_size = (T)hp->lr / bc1;
    op.ctl = hp->ctl;
    if (hp->ctl) {
        cudaError_t e = optim_prep<T>(l, hp->ctl, hp->skip, 1, hp->lr, hp->beta1, hp->beta2);
        if (e != cudaSuccess) return e;
    }
    /* the tensor's decay factor, computed on the host as the CPU backend does */
    const float *wds = hp->weight_decays;
    const float wd = hp->weight_decay, lr = hp->lr;
    return mt_apply_w<T>(l, k, p, g, m, v, n, op, [&](int t) { return (T)1 - (T)lr * (T)(wds ? wds[t] : wd); });
}

template <typename T>
static cudaError_t amp_check_t(const ls_cuda_launch *l, int k, void *const *x, const int64_t *n, int unscale,
                               double *ctl) {
    AmpOp<T> op;
    op.ctl = ctl;
    op.unscale = unscale;
    op.inv = T(1);
    return mt_apply<T>(l, k, x, x, nullptr, nullptr, n, op);
}

template <typename T>
static cudaError_t clip_sumsq_t(const ls_cuda_launch *l, int k, void *const *x, const int64_t *n, double *acc,
                                int accumulate) {
    double *partial = reinterpret_cast<double *>(static_cast<char *>(l->scratch) + 256);
    int packs = 0;
    cudaError_t e = mt_pack<T>(k, x, x, nullptr, nullptr, n, [&](const MTList<T> &L, int nb) {
        mt_sumsq_kernel<T><<<nb, 256, 0, l->stream>>>(L, partial);
        cudaError_t r = cudaGetLastError();
        if (r != cudaSuccess) return r;
        return ls_cuda_sumsq_finish(l, nb, partial, acc, accumulate || packs++ > 0);
    });
    if (e != cudaSuccess || packs || accumulate) return e;
    return cudaMemsetAsync(acc, 0, 2 * sizeof(double), l->stream); /* no elements: the sum is 0 */
}

template <typename T>
static cudaError_t clip_scale_t(const ls_cuda_launch *l, int k, void *const *x, const int64_t *n, const double *acc) {
    ClipOp<T> op;
    op.acc = acc;
    op.c = T(1);
    return mt_apply<T>(l, k, x, x, nullptr, nullptr, n, op);
}

} // namespace lsk

using namespace lsk;

extern "C" cudaError_t ls_cuda_convert_mt(const ls_cuda_launch *l, int k, const void *const *src, ls_dtype dst_t,
                                          void *const *dst, const int64_t *n) {
    if (dst_t == LS_F16) return convert_mt_t<__half>(l, k, src, dst, n);
    if (dst_t == LS_BF16) return convert_mt_t<__nv_bfloat16>(l, k, src, dst, n);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_zero_mt(const ls_cuda_launch *l, int k, void *const *x, const int64_t *words) {
    return mt_pack<float>(k, x, x, nullptr, nullptr, words, [&](const MTList<float> &L, int nb) {
        mt_zero_kernel<<<nb, 256, 0, l->stream>>>(L);
        return cudaGetLastError();
    });
}

extern "C" cudaError_t ls_cuda_clip_sumsq_mt(const ls_cuda_launch *l, ls_dtype t, int k, void *const *x,
                                             const int64_t *n, double *acc, int accumulate) {
    if (l->scratch_bytes < 256 + MT_BLOCKS * 2 * sizeof(double))
        return cudaErrorInvalidValue; /* no room for the partials */
    if (t == LS_F32) return clip_sumsq_t<float>(l, k, x, n, acc, accumulate);
    if (t == LS_F64) return clip_sumsq_t<double>(l, k, x, n, acc, accumulate);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_clip_scale_mt(const ls_cuda_launch *l, ls_dtype t, int k, void *const *x,
                                             const int64_t *n, const double *acc) {
    if (t == LS_F32) return clip_scale_t<float>(l, k, x, n, acc);
    if (t == LS_F64) return clip_scale_t<double>(l, k, x, n, acc);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_amp_check(const ls_cuda_launch *l, ls_dtype t, int k, void *const *x, const int64_t *n,
                                         int unscale, int accumulate, double *ctl) {
    if (!accumulate) {
        cudaError_t e = cudaMemsetAsync(ctl + LS_AMP_FOUND, 0, sizeof(double), l->stream);
        if (e != cudaSuccess) return e;
    }
    if (t == LS_F32) return amp_check_t<float>(l, k, x, n, unscale, ctl);
    if (t == LS_F64) return amp_check_t<double>(l, k, x, n, unscale, ctl);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_sgd_step(const ls_cuda_launch *l, ls_dtype t, int k, void *const *p, void *const *g,
                                        void *const *m, const int64_t *n, const ls_sgd_params *hp) {
    if (t == LS_F32) return sgd_t<float>(l, k, p, g, m, n, hp);
    if (t == LS_F64) return sgd_t<double>(l, k, p, g, m, n, hp);
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ls_cuda_adamw_step(const ls_cuda_launch *l, ls_dtype t, int k, void *const *p, void *const *g,
                                          void *const *m, void *const *v, const int64_t *n, const ls_adamw_params *hp) {
    if (t == LS_F32) return adamw_t<float>(l, k, p, g, m, v, n, hp);
    if (t == LS_F64) return adamw_t<double>(l, k, p, g, m, v, n, hp);
    return cudaErrorInvalidValue;
}
