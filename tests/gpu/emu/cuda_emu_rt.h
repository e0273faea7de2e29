/* cuda_emu_rt.h: the CUDA runtime calls of the emulated backend (translate.py renames them in
 * the translated sources; cuda_emu.cc defines them). Included first in every translated file, C
 * or C++. Memory is host memory and there is no stream: a copy or a memset is done when the call
 * returns, and a synchronize has nothing to wait for. */
#ifndef LOCKSTEP_CUDA_EMU_RT_H
#define LOCKSTEP_CUDA_EMU_RT_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t emu_cudaGetLastError(void);
cudaError_t emu_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t emu_cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s);
cudaError_t emu_cudaStreamSynchronize(cudaStream_t s);
cudaError_t emu_cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *entry);

#ifdef __cplusplus
}
#endif
#endif
