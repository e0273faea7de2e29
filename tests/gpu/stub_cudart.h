/* stub_cudart.h: the knobs and counters of the stand-in CUDA runtime (stub_cudart.c). */
#ifndef LOCKSTEP_STUB_CUDART_H
#define LOCKSTEP_STUB_CUDART_H

#include <cuda_runtime_api.h>
#include <stddef.h>

extern size_t stub_device_free, stub_device_total; /* cudaMemGetInfo; cudaMalloc fails past free */
extern long stub_mallocs, stub_frees, stub_syncs;  /* cudaMalloc, cudaFree, cudaStreamSynchronize calls */
extern size_t stub_out_bytes;                      /* bytes cudaMalloc'd and not yet freed */
extern cudaError_t stub_fail_malloc;               /* not cudaSuccess: cudaMalloc fails with it */
extern int stub_event_polls; /* events recorded from now on answer cudaEventQuery "not ready" so many times first */
extern int stub_event_hang;  /* 1: events recorded from now on never complete (cudaEventQuery: not ready) */
extern volatile cudaError_t stub_event_error; /* not cudaSuccess: cudaEventQuery returns it (a failed kernel) */
extern volatile long stub_events_live;        /* events created and not yet destroyed */
void stub_event_complete(cudaEvent_t e);      /* a hung event completes */
extern cudaError_t stub_fail_event_create;    /* not cudaSuccess: cudaEventCreateWithFlags fails with it */
extern int stub_stream_busy;                  /* 1: cudaStreamQuery says not ready */

/* The calls that order streams, in order: "record" (event, stream), "wait" (stream, event), and the
 * stand-in NCCL's collectives (their name, stream). */
#define STUB_TRACE_MAX 64
typedef struct stub_call {
    char what[16];
    const void *a, *b;
} stub_call;
extern stub_call stub_trace[STUB_TRACE_MAX];
extern int stub_ntrace;
void stub_trace_add(const char *what, const void *a, const void *b);

#endif
