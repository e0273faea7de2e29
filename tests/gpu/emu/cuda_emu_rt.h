/* cuda_emu_rt.h: what the emulated backend calls instead of the CUDA runtime, cuBLAS, cuBLASLt
 * and cuDNN (translate.py renames the calls in the translated sources: cudaMalloc becomes
 * emu_cudaMalloc and so on). Included first in every translated file, C or C++. Each stand-in has
 * the library's own signature (redeclared through __typeof__ in C, so one that does not match it
 * does not compile).
 *  - the runtime (cuda_emu.cc): memory is host memory; work runs in its stream's order, in one of
 *    three schedules CUDA allows (EMU_SCHEDULE; by default kernels when launched and copies as
 *    late as allowed), so a missing synchronize or event wait shows;
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
cudaError_t emu_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags);
cudaError_t emu_cudaEventDestroy(cudaEvent_t e);
cudaError_t emu_cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t emu_cudaEventSynchronize(cudaEvent_t e);
cudaError_t emu_cudaEventQuery(cudaEvent_t e);
cudaError_t emu_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags);
cudaError_t emu_cudaGetDevice(int *device);
cudaError_t emu_cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t emu_cudaHostAlloc(void **p, size_t n, unsigned int flags);
cudaError_t emu_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags);
cudaError_t emu_cudaStreamDestroy(cudaStream_t s);
cudaError_t emu_cudaMalloc(void **p, size_t n);
cudaError_t emu_cudaFree(void *p);
cudaError_t emu_cudaMallocHost(void **p, size_t n);
cudaError_t emu_cudaFreeHost(void *p);

/* A library call's work on stream s: fn(job) runs when the stream gets to it (at once under the
 * late schedule, else when the stream's queue runs; see EMU_SCHEDULE in cuda_emu.cc); fn owns
 * job. */
void emu_stream_submit(cudaStream_t s, void (*fn)(void *job), void *job);
/* The emulator's one lock (recursive), held by a library call while it computes. */
void emu_lock(void);
void emu_unlock(void);
/* Every stream's queued work run (cudaDeviceSynchronize), for host code that reads "device"
 * memory directly (the parity tests' allocator). */
void emu_device_synchronize(void);

/* Kernels and library calls queued on any stream so far, and of them those that have run (under
 * the late schedule each runs when launched; under lazy only a wait makes it run): how far the
 * host ran ahead of the "device" (test_emu_run_ahead). */
void emu_work_counts(unsigned long long *queued, unsigned long long *done);
/* cudaMemsetAsync calls so far (not counted by emu_work_counts). */
unsigned long long emu_memset_count(void);
/* Host waits so far (stream and event synchronizes, copies to pageable memory) that found kernels
 * queued and left none: each is a moment the "device" would have gone idle. */
unsigned long long emu_host_drains(void);

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
/* the runtime calls declared above for C and C++, checked here against the runtime's own */
EMU_LIKE(cudaGetLastError);
EMU_LIKE(cudaMemsetAsync);
EMU_LIKE(cudaMemcpyAsync);
EMU_LIKE(cudaStreamSynchronize);
EMU_LIKE(cudaEventCreateWithFlags);
EMU_LIKE(cudaEventDestroy);
EMU_LIKE(cudaEventRecord);
EMU_LIKE(cudaEventSynchronize);
EMU_LIKE(cudaEventQuery);
EMU_LIKE(cudaStreamWaitEvent);
EMU_LIKE(cudaGetDevice);
EMU_LIKE(cudaMemGetInfo);
EMU_LIKE(cudaHostAlloc);
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
