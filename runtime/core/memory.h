/* memory.h: allocators with live/peak statistics and an optional cap. The generic layer keeps
 * the statistics and the cap; a backend (host, CUDA) supplies raw alloc/free/copy/set through an
 * ls_allocator_vtable. Exceeding the cap is LS_ERR_OUT_OF_MEMORY with a message naming the
 * request, the cap and the peak. Thread-safe. */
#ifndef LOCKSTEP_MEMORY_H
#define LOCKSTEP_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_allocator ls_allocator;

typedef struct ls_memory_stats {
    size_t live_bytes;     /* bytes handed out and not yet freed */
    size_t peak_bytes;     /* highest live_bytes since creation or the last reset */
    size_t reserved_bytes; /* bytes held from the system (>= live for caching allocators) */
    size_t cap_bytes;      /* 0: no cap */
    uint64_t allocs;       /* successful allocations */
    uint64_t frees;
    size_t pinned_bytes; /* pinned host memory from ls_allocator_host_alloc (batch and MPI staging)
                              not yet freed; apart from live, peak and the cap */
} ls_memory_stats;

/* What a backend supplies. alloc returns NULL on failure; copy/set return LS_OK or an error. */
typedef struct ls_allocator_vtable {
    const char *name; /* "host", "cuda", ... */
    void *(*alloc)(void *state, size_t bytes);
    void (*free)(void *state, void *ptr, size_t bytes);
    /* Copy n bytes; each side is either this allocator's device or host memory. */
    ls_status (*copy)(void *state, void *dst, int dst_on_device, const void *src, int src_on_device, size_t n);
    ls_status (*set_zero)(void *state, void *ptr, size_t n);
    size_t (*reserved)(void *state); /* optional: bytes held from the system */
    void (*destroy)(void *state);    /* optional */
    /* Optional: staged uploads (see ls_allocator_upload). host_alloc gives pinned host memory
     * (NULL on failure); upload queues a host-to-device copy for a slot on a copy stream after
     * the slot's release point; join makes compute work queued from now on wait for the slot's
     * copies; upload_wait blocks until the slot's copies are done; release records the compute
     * work queued so far as the last user of the slot's device buffers. NULL: aligned host
     * memory, copy(), no-ops. */
    void *(*host_alloc)(void *state, size_t bytes);
    void (*host_free)(void *state, void *ptr);
    ls_status (*upload)(void *state, int slot, void *dst, const void *src, size_t n);
    ls_status (*join)(void *state, int slot);
    ls_status (*upload_wait)(void *state, int slot);
    ls_status (*release)(void *state, int slot);
    /* Optional: after alloc returned NULL, LS_OK when it was for want of memory, else the error
     * that stopped it (set with ls_error; ls_alloc returns it instead of LS_ERR_OUT_OF_MEMORY). */
    ls_status (*alloc_error)(void *state);
    /* Optional: deferred reads (see ls_allocator_download). download queues a device-to-host copy
     * into pinned memory after the compute work queued so far and records its end for the slot;
     * download_wait blocks until the slot's copies are done. NULL: copy() at once, no-op. */
    ls_status (*download)(void *state, int slot, void *dst, const void *src, size_t n);
    ls_status (*download_wait)(void *state, int slot);
    /* Optional: *done = 1 when the slot's copies have finished, without waiting. NULL: 1. */
    ls_status (*download_done)(void *state, int slot, int *done);
    /* Optional: after alloc returned NULL for want of memory, why, in words for the error (the
     * limit the backend keeps on what it holds, or the device's free memory), into buf. */
    void (*oom_detail)(void *state, char *buf, size_t len);
} ls_allocator_vtable;

/* Host memory (64-byte aligned). cap_bytes 0 means no cap. */
ls_status ls_host_allocator_create(size_t cap_bytes, ls_allocator **out);
/* Host allocator whose cap comes from LOCKSTEP_MEMORY_LIMIT (e.g. "2GiB"; unset: none). */
ls_status ls_host_allocator_create_from_env(ls_allocator **out);
/* An allocator over a backend's vtable; takes ownership of state (vtable->destroy). */
ls_status ls_allocator_create(const ls_allocator_vtable *vt, void *state, ls_device device, size_t cap_bytes,
                              ls_allocator **out);
void ls_allocator_destroy(ls_allocator *a);

/* Allocate bytes (0 gives a valid unique pointer); what names the request in errors. */
ls_status ls_alloc(ls_allocator *a, size_t bytes, const char *what, void **out);
/* NULL is fine; a pointer that is not a live allocation of a frees nothing and logs a warning. */
void ls_free(ls_allocator *a, void *ptr);
/* 1 when ptr is the start of a live allocation of a (not a pointer into one). */
int ls_allocator_owns(ls_allocator *a, const void *ptr);

ls_device ls_allocator_device(const ls_allocator *a);
void ls_allocator_stats(ls_allocator *a, ls_memory_stats *out);
void ls_allocator_reset_peak(ls_allocator *a);
void ls_allocator_set_cap(ls_allocator *a, size_t cap_bytes);
/* The same, naming where the cap comes from ("--memory-cap 2GiB"): out-of-memory errors say it
 * while the cap is that one (a later ls_allocator_set_cap to another size leaves it unsaid). */
void ls_allocator_set_cap_from(ls_allocator *a, size_t cap_bytes, const char *from);
/* Where the cap now set comes from, as ls_allocator_set_cap_from named it, into buf (empty: unsaid,
 * or the cap was changed to another size since). */
void ls_allocator_get_cap_from(ls_allocator *a, char *buf, size_t len);
/* Text appended to out-of-memory errors (e.g. the remedies and their flags); copied. */
void ls_allocator_set_oom_hint(ls_allocator *a, const char *hint);
/* The hint now set (empty: none), copied into buf. */
void ls_allocator_get_oom_hint(ls_allocator *a, char *buf, size_t len);

/* Copy/zero through the allocator's backend (host<->device as the flags say). */
ls_status ls_allocator_copy(ls_allocator *a, void *dst, int dst_on_device, const void *src, int src_on_device,
                            size_t n);
ls_status ls_allocator_set_zero(ls_allocator *a, void *ptr, size_t n);

/* Staged uploads: batches copied to the device from pinned host memory while the device computes.
 * There are LS_UPLOAD_SLOTS slots, each a staging buffer in host memory (ls_allocator_host_alloc)
 * and device buffers it is copied to. ls_allocator_upload queues a copy of n bytes from the
 * slot's staging memory src to device memory dst: on a GPU it runs on a copy stream once the
 * compute work recorded by the slot's last ls_allocator_release is done (so the device buffers
 * are free); elsewhere it copies at once. Before queueing an op that reads the slot's device
 * buffers, call ls_allocator_upload_join (the op waits for the copies, on the device). Before
 * rewriting a slot's staging memory, call ls_allocator_upload_wait (the host waits for the slot's
 * queued copies); after queueing the last op that reads a slot's device buffers, call
 * ls_allocator_release. Pinned memory is counted apart, in the statistics' pinned_bytes (host_free
 * takes the size that was asked for); *pinned says whether it could be had (else plain host
 * memory, copied without overlap, not counted). */
#define LS_UPLOAD_SLOTS 2
ls_status ls_allocator_host_alloc(ls_allocator *a, size_t bytes, const char *what, int *pinned, void **out);
void ls_allocator_host_free(ls_allocator *a, void *ptr, size_t bytes, int pinned);
ls_status ls_allocator_upload(ls_allocator *a, int slot, void *dst, const void *src, size_t n);
ls_status ls_allocator_upload_join(ls_allocator *a, int slot);
ls_status ls_allocator_upload_wait(ls_allocator *a, int slot);
ls_status ls_allocator_release(ls_allocator *a, int slot);

/* Deferred reads: a value the device computes, read without making the host wait now (PyTorch's
 * .to('cpu', non_blocking=True) into pinned memory). ls_allocator_download queues a copy of n
 * bytes from device memory src to host memory dst (from ls_allocator_host_alloc, so the copy can
 * run without the host) after the compute work queued so far, in one of LS_DOWNLOAD_SLOTS slots;
 * ls_allocator_download_wait makes the host wait for the slot's copies before it reads dst. On
 * the host (or a backend without them) the copy is made at once. */
#define LS_DOWNLOAD_SLOTS 2
ls_status ls_allocator_download(ls_allocator *a, int slot, void *dst, const void *src, size_t n);
ls_status ls_allocator_download_wait(ls_allocator *a, int slot);
/* *done = 1 when the slot's copies have finished (then download_wait does not wait); never waits. */
ls_status ls_allocator_download_done(ls_allocator *a, int slot, int *done);

/* Parse "2GiB", "512MiB", "1.5GB", "4096", "64k" into bytes (binary and decimal units). */
ls_status ls_memory_parse_size(const char *s, size_t *out);
/* The same for a cap, which must be at least a byte: 0 (or 0.5) is an error, not "no cap". */
ls_status ls_memory_parse_cap(const char *s, size_t *out);
/* "1.50 GiB" into buf. */
const char *ls_memory_format(size_t bytes, char *buf, int len);

/* LOCKSTEP_GPU_MEMORY's value (NULL or empty: grow on demand, no cap): comma-separated grow,
 * reserve:FRACTION (of the free memory, in (0, 1]), reserve:SIZE, limit:SIZE. Parsed by the CUDA
 * allocator, and checked by every context on any device, so that a typo is found where the job
 * script is tried, not on the GPU machine. */
typedef struct ls_gpu_memory_policy {
    double reserve_fraction; /* 0: none */
    size_t reserve_bytes;    /* 0: none (or use the fraction) */
    size_t limit;            /* 0: none */
} ls_gpu_memory_policy;
ls_status ls_gpu_memory_policy_parse(const char *env, ls_gpu_memory_policy *out);

#ifdef __cplusplus
}
#endif
#endif
