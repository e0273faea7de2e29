/* cuda_emu_rt.h: what the emulated backend calls instead of the CUDA runtime, cuBLAS, cuBLASLt
 * and cuDNN (translate.py renames the calls in the translated sources: cudaMalloc becomes
 * emu_cudaMalloc and so on). Included first in every translated file, C or C++. Each stand-in has
 * the library's own signature (declared through __typeof__, so a call that does not match it
 * does not compile).
 *  - the runtime (cuda_emu.cc): memory is host memory and work is done when it is enqueued, except
 *    that a copy to the host lands at the synchronize of its stream (so one missing shows);
 *  - cuBLAS and cuBLASLt (emu_cublas.c): the column-major GEMMs as NVIDIA documents them,
 *    computed directly, with the library's argument checks;
 *  - cuDNN (emu_cudnn.c): NCHW descriptors and the three convolutions, computed directly.
 * None is NVIDIA's library: they show that the backend asks for the right product, not how fast
 * or how exactly the GPU computes it. */
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

/* The SM count the emulated device reports (cudaGetDeviceProperties); kernels size grids by it. */
extern int emu_sm_count;

#ifdef __cplusplus
}
#endif

/* The library calls of the backend's C files (cuda_ops.c, cudnn_conv.c). In C only: C++ sees
 * overloads of some of these names. */
#ifndef __cplusplus
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#define EMU_LIKE(f) extern __typeof__(f) emu_##f
EMU_LIKE(cudaSetDevice);
EMU_LIKE(cudaGetDeviceProperties);
EMU_LIKE(cudaStreamCreateWithFlags);
EMU_LIKE(cudaStreamDestroy);
EMU_LIKE(cudaMalloc);
EMU_LIKE(cudaFree);
EMU_LIKE(cudaMallocHost);
EMU_LIKE(cudaFreeHost);

EMU_LIKE(cublasCreate);
EMU_LIKE(cublasDestroy);
EMU_LIKE(cublasSetStream);
EMU_LIKE(cublasSetWorkspace);
EMU_LIKE(cublasGemmEx);
EMU_LIKE(cublasGetStatusName);
EMU_LIKE(cublasGetStatusString);
EMU_LIKE(cublasLtCreate);
EMU_LIKE(cublasLtDestroy);
EMU_LIKE(cublasLtMatmulDescCreate);
EMU_LIKE(cublasLtMatmulDescSetAttribute);
EMU_LIKE(cublasLtMatmulDescDestroy);
EMU_LIKE(cublasLtMatrixLayoutCreate);
EMU_LIKE(cublasLtMatrixLayoutDestroy);
EMU_LIKE(cublasLtMatmulPreferenceCreate);
EMU_LIKE(cublasLtMatmulPreferenceSetAttribute);
EMU_LIKE(cublasLtMatmulPreferenceDestroy);
EMU_LIKE(cublasLtMatmulAlgoGetHeuristic);
EMU_LIKE(cublasLtMatmul);

EMU_LIKE(cudnnGetVersion);
EMU_LIKE(cudnnGetErrorString);
EMU_LIKE(cudnnGetLastErrorString);
EMU_LIKE(cudnnCreate);
EMU_LIKE(cudnnDestroy);
EMU_LIKE(cudnnSetStream);
EMU_LIKE(cudnnCreateTensorDescriptor);
EMU_LIKE(cudnnSetTensor4dDescriptor);
EMU_LIKE(cudnnDestroyTensorDescriptor);
EMU_LIKE(cudnnCreateFilterDescriptor);
EMU_LIKE(cudnnSetFilter4dDescriptor);
EMU_LIKE(cudnnDestroyFilterDescriptor);
EMU_LIKE(cudnnCreateConvolutionDescriptor);
EMU_LIKE(cudnnSetConvolution2dDescriptor);
EMU_LIKE(cudnnSetConvolutionGroupCount);
EMU_LIKE(cudnnSetConvolutionMathType);
EMU_LIKE(cudnnDestroyConvolutionDescriptor);
EMU_LIKE(cudnnGetConvolution2dForwardOutputDim);
EMU_LIKE(cudnnGetConvolutionForwardAlgorithmMaxCount);
EMU_LIKE(cudnnGetConvolutionBackwardDataAlgorithmMaxCount);
EMU_LIKE(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount);
EMU_LIKE(cudnnGetConvolutionForwardAlgorithm_v7);
EMU_LIKE(cudnnGetConvolutionBackwardDataAlgorithm_v7);
EMU_LIKE(cudnnGetConvolutionBackwardFilterAlgorithm_v7);
EMU_LIKE(cudnnGetConvolutionForwardWorkspaceSize);
EMU_LIKE(cudnnGetConvolutionBackwardDataWorkspaceSize);
EMU_LIKE(cudnnGetConvolutionBackwardFilterWorkspaceSize);
EMU_LIKE(cudnnConvolutionForward);
EMU_LIKE(cudnnConvolutionBackwardData);
EMU_LIKE(cudnnConvolutionBackwardFilter);
#undef EMU_LIKE
#endif

#endif
