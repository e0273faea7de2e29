/* gather.cu: dst[r, :] = src[idx[r], :], the batch gather from a data set kept on the device
 * (runtime/train.c). One block per row at a time (grid-stride over rows), 16-byte copies when the
 * rows and both pointers allow, else 4-byte or single bytes. The gather from a set of bytes decodes
 * each through a 256-entry table held in shared memory, four bytes to a float4 where aligned. */
#include "cuda_common.cuh"

namespace {

template <typename V>
__global__ void gather_rows_kernel(int64_t rows, int64_t vcols, const V *__restrict__ src,
                                   const int64_t *__restrict__ idx, V *__restrict__ dst) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const V *s = src + idx[r] * vcols;
        V *d = dst + r * vcols;
        for (int64_t c = threadIdx.x; c < vcols; c += blockDim.x) d[c] = s[c];
    }
}

template <typename V>
cudaError_t launch(const ls_cuda_launch *l, int64_t rows, int64_t row_bytes, const void *src, const int64_t *idx,
                   void *dst) {
    int64_t vcols = row_bytes / (int64_t)sizeof(V);
    int threads = vcols >= 256 ? 256 : vcols >= 64 ? 128 : 32;
    int64_t most = (int64_t)(l->sm_count > 0 ? l->sm_count : 1) * 32;
    unsigned grid = (unsigned)(rows < most ? rows : most);
    gather_rows_kernel<V>
        <<<grid, threads, 0, l->stream>>>(rows, vcols, static_cast<const V *>(src), idx, static_cast<V *>(dst));
    return cudaGetLastError();
}

__global__ void gather_rows_lut_kernel(int64_t rows, int64_t cols, int vec4, const uint8_t *__restrict__ src,
                                       const int64_t *__restrict__ idx, const float *__restrict__ lut,
                                       float *__restrict__ dst) {
    __shared__ float t[256];
    for (int i = threadIdx.x; i < 256; i += blockDim.x) t[i] = lut[i];
    __syncthreads();
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint8_t *s = src + idx[r] * cols;
        float *d = dst + r * cols;
        if (vec4) {
            const uchar4 *s4 = reinterpret_cast<const uchar4 *>(s);
            float4 *d4 = reinterpret_cast<float4 *>(d);
            for (int64_t c = threadIdx.x; c < cols / 4; c += blockDim.x) {
                uchar4 b = s4[c];
                d4[c] = make_float4(t[b.x], t[b.y], t[b.z], t[b.w]);
            }
        } else {
            for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = t[s[c]];
        }
    }
}

} // namespace

extern "C" cudaError_t ls_cuda_gather_rows_lut(const ls_cuda_launch *l, int64_t rows, int64_t cols, const uint8_t *src,
                                               const int64_t *idx, const float *lut, float *dst) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    /* every row starts 4-byte aligned in src and 16-byte aligned in dst when cols % 4 == 0 */
    int vec4 = cols % 4 == 0 && lsk::aligned_to(src, 4) && lsk::aligned_to(dst, 16);
    int64_t work = vec4 ? cols / 4 : cols;
    int threads = work >= 256 ? 256 : work >= 64 ? 128 : 32;
    int64_t most = (int64_t)(l->sm_count > 0 ? l->sm_count : 1) * 32;
    unsigned grid = (unsigned)(rows < most ? rows : most);
    gather_rows_lut_kernel<<<grid, threads, 0, l->stream>>>(rows, cols, vec4, src, idx, lut, dst);
    return cudaGetLastError();
}

extern "C" cudaError_t ls_cuda_gather_rows(const ls_cuda_launch *l, size_t elem_bytes, int64_t rows, int64_t cols,
                                           const void *src, const int64_t *idx, void *dst) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int64_t row_bytes = (int64_t)elem_bytes * cols;
    if (row_bytes % 16 == 0 && lsk::aligned_to(src, 16) && lsk::aligned_to(dst, 16))
        return launch<uint4>(l, rows, row_bytes, src, idx, dst);
    if (row_bytes % 4 == 0 && lsk::aligned_to(src, 4) && lsk::aligned_to(dst, 4))
        return launch<uint32_t>(l, rows, row_bytes, src, idx, dst);
    return launch<uint8_t>(l, rows, row_bytes, src, idx, dst);
}
