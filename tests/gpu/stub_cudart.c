/* stub_cudart.c: a stand-in for the parts of the CUDA runtime that the caching device allocator
 * (kernels/cuda/cuda_alloc.c) and the NCCL communicator (collectives/comm_nccl.c) call, so that
 * their logic runs and is tested on a machine without a GPU (test_cuda_alloc_stub,
 * test_comm_nccl_stub). "Device" memory is host memory, handed out within a budget
 * (stub_device_free) and known to cudaPointerGetAttributes; streams are plain tokens, every copy is
 * done at once, and an event is complete once recorded unless stub_event_hang was set when it was
 * (then stub_event_complete completes it).
 * stub_fail_malloc makes cudaMalloc fail with that error, as a GPU does after a failed kernel. The
 * counters say how many segments were taken and given back, and how many bytes are out;
 * stub_trace lists the event records and waits (and the stand-in NCCL's collectives) in order. */
#include "stub_cudart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "status.h"

size_t stub_device_free = (size_t)1 << 30, stub_device_total = (size_t)1 << 30;
long stub_mallocs, stub_frees, stub_syncs;
size_t stub_out_bytes;
cudaError_t stub_fail_malloc = cudaSuccess;
int stub_event_hang, stub_event_polls;
volatile cudaError_t stub_event_error = cudaSuccess;
cudaError_t stub_fail_event_create = cudaSuccess;
volatile long stub_events_live;
int stub_stream_busy;
stub_call stub_trace[STUB_TRACE_MAX];
int stub_ntrace;

void stub_trace_add(const char *what, const void *a, const void *b) {
    if (stub_ntrace == STUB_TRACE_MAX) return;
    stub_call *c = &stub_trace[stub_ntrace++];
    snprintf(c->what, sizeof c->what, "%s", what);
    c->a = a;
    c->b = b;
}

/* An event: whether its last record will never complete. The NCCL watchdog's thread queries it
 * while the test's completes it: every access atomic (ThreadSanitizer). */
typedef struct stub_event {
    int hang;
    int polls; /* not-ready answers still to give before it completes */
} stub_event;

void stub_event_complete(cudaEvent_t e) { __atomic_store_n(&((stub_event *)e)->hang, 0, __ATOMIC_SEQ_CST); }

/* The live cudaMalloc blocks, to check cudaFree's argument and give back its size. */
typedef struct stub_rec {
    void *p;
    size_t n;
} stub_rec;
static stub_rec *recs;
static size_t n_recs, cap_recs;

cudaError_t cudaMalloc(void **p, size_t n) {
    *p = NULL;
    if (stub_fail_malloc != cudaSuccess) return stub_fail_malloc;
    if (n > stub_device_free) return cudaErrorMemoryAllocation;
    if (n_recs == cap_recs) {
        size_t nc = cap_recs ? 2 * cap_recs : 64;
        stub_rec *r = realloc(recs, nc * sizeof *r);
        if (!r) return cudaErrorMemoryAllocation;
        recs = r;
        cap_recs = nc;
    }
    void *m = aligned_alloc(512, (n + 511) / 512 * 512);
    if (!m) return cudaErrorMemoryAllocation;
    recs[n_recs++] = (stub_rec){m, n};
    stub_device_free -= n;
    stub_out_bytes += n;
    stub_mallocs++;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    for (size_t i = 0; i < n_recs; i++)
        if (recs[i].p == p) {
            stub_device_free += recs[i].n;
            stub_out_bytes -= recs[i].n;
            free(p);
            recs[i] = recs[--n_recs];
            stub_frees++;
            return cudaSuccess;
        }
    fprintf(stderr, "stub cudaFree(%p): not a live cudaMalloc block\n", p);
    return cudaErrorInvalidValue;
}

/* Device memory: inside a live cudaMalloc block. */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p) {
    memset(a, 0, sizeof *a);
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    for (size_t i = 0; i < n_recs; i++)
        if ((const char *)p >= (const char *)recs[i].p && (const char *)p < (const char *)recs[i].p + recs[i].n) {
            a->type = cudaMemoryTypeDevice;
            a->device = 0;
            a->devicePointer = (void *)p;
        }
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *free_b = stub_device_free;
    *total_b = stub_device_total;
    return cudaSuccess;
}

/* The calling thread's last error: what a failed call left (here only a query's not-ready, as
 * CUDA's runtime records it); cudaGetLastError returns it and resets it. */
static _Thread_local cudaError_t stub_last_error = cudaSuccess;
static cudaError_t stub_note(cudaError_t e) {
    if (e != cudaSuccess) stub_last_error = e;
    return e;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = stub_last_error;
    stub_last_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaErrorIllegalAddress     ? "cudaErrorIllegalAddress"
           : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation"
                                            : "cudaError";
}
const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorIllegalAddress ? "an illegal memory access was encountered" : "stub error";
}
cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    stub_syncs++;
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind k, cudaStream_t s) {
    (void)k, (void)s;
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    (void)s;
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
    (void)f;
    *s = calloc(1, 64); /* a distinct token */
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f) {
    (void)f;
    if (stub_fail_event_create != cudaSuccess) return stub_fail_event_create;
    stub_event *ev = calloc(1, sizeof *ev);
    if (!ev) return cudaErrorMemoryAllocation;
    __atomic_add_fetch(&stub_events_live, 1, __ATOMIC_SEQ_CST);
    *e = (cudaEvent_t)ev;
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (e) __atomic_sub_fetch(&stub_events_live, 1, __ATOMIC_SEQ_CST);
    free(e);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    __atomic_store_n(&((stub_event *)e)->hang, stub_event_hang, __ATOMIC_SEQ_CST);
    __atomic_store_n(&((stub_event *)e)->polls, stub_event_polls, __ATOMIC_SEQ_CST);
    stub_trace_add("record", e, s);
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    cudaError_t err = __atomic_load_n(&stub_event_error, __ATOMIC_SEQ_CST);
    if (err != cudaSuccess) return stub_note(err);
    stub_event *ev = (stub_event *)e;
    if (__atomic_load_n(&ev->polls, __ATOMIC_SEQ_CST) > 0) {
        __atomic_sub_fetch(&ev->polls, 1, __ATOMIC_SEQ_CST);
        return stub_note(cudaErrorNotReady);
    }
    return stub_note(__atomic_load_n(&ev->hang, __ATOMIC_SEQ_CST) ? cudaErrorNotReady : cudaSuccess);
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    (void)s;
    return stub_note(stub_stream_busy ? cudaErrorNotReady : cudaSuccess);
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    (void)e;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f) {
    (void)f;
    stub_trace_add("wait", s, e);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int f) {
    (void)f;
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}

/* The real one is in cuda_ops.c, which this test does not build. */
ls_status ls_cuda_error(cudaError_t e, const char *expr, const char *file, int line) {
    return ls_error(LS_ERR_CUDA, "%s failed: %s (%s:%d)", expr, cudaGetErrorName(e), file, line);
}
