/* gather.cu: dst[r, :] = src[idx[r], :], the batch gather from a data set kept on the device
 * (runtime/train.c). One block per row at a time (grid-stride over rows), 16-byte copies when the
 * rows and both pointers allow, else 4-byte or single bytes. */
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
cudaError_t launch(const ls_cuda_launch *l, int64_t rows, int64_t row_bytes, const void *src,
                   const int64_t *idx, void *dst) {
    int64_t vcols = row_bytes / (int64_t)sizeof(V);
    int threads = vcols >= 256 ? 256 : vcols >= 64 ? 128 : 32;
    int64_t most = (int64_t)(l->sm_count > 0 ? l->sm_count : 1) * 32;
    unsigned grid = (unsigned)(rows < most ? rows : most);
    gather_rows_kernel<V><<<grid, threads, 0, l->stream>>>(rows, vcols, static_cast<const V *>(src), idx,
                                                           static_cast<V *>(dst));
    return cudaGetLastError();
}

} // namespace

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
