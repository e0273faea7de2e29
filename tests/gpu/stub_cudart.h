/* stub_cudart.h: the knobs and counters of the stand-in CUDA runtime (stub_cudart.c). */
#ifndef LOCKSTEP_STUB_CUDART_H
#define LOCKSTEP_STUB_CUDART_H

#include <cuda_runtime_api.h>
#include <stddef.h>

extern size_t stub_device_free, stub_device_total; /* cudaMemGetInfo; cudaMalloc fails past free */
extern long stub_mallocs, stub_frees, stub_syncs;   /* cudaMalloc, cudaFree, cudaStreamSynchronize calls */
extern size_t stub_out_bytes;                       /* bytes cudaMalloc'd and not yet freed */
extern cudaError_t stub_fail_malloc;                /* not cudaSuccess: cudaMalloc fails with it */

#endif
