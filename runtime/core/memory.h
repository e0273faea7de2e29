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
} ls_memory_stats;

/* What a backend supplies. alloc returns NULL on failure; copy/set return LS_OK or an error. */
typedef struct ls_allocator_vtable {
    const char *name; /* "host", "cuda", ... */
    void *(*alloc)(void *state, size_t bytes);
    void (*free)(void *state, void *ptr, size_t bytes);
    /* Copy n bytes; each side is either this allocator's device or host memory. */
    ls_status (*copy)(void *state, void *dst, int dst_on_device, const void *src, int src_on_device,
                      size_t n);
    ls_status (*set_zero)(void *state, void *ptr, size_t n);
    size_t (*reserved)(void *state); /* optional: bytes held from the system */
    void (*destroy)(void *state);    /* optional */
} ls_allocator_vtable;

/* Host memory (64-byte aligned). cap_bytes 0 means no cap. */
ls_status ls_host_allocator_create(size_t cap_bytes, ls_allocator **out);
/* Host allocator whose cap comes from LOCKSTEP_MEMORY_LIMIT (e.g. "2GiB"; unset: none). */
ls_status ls_host_allocator_create_from_env(ls_allocator **out);
/* An allocator over a backend's vtable; takes ownership of state (vtable->destroy). */
ls_status ls_allocator_create(const ls_allocator_vtable *vt, void *state, ls_device device,
                              size_t cap_bytes, ls_allocator **out);
void ls_allocator_destroy(ls_allocator *a);

/* Allocate bytes (0 gives a valid unique pointer); what names the request in errors. */
ls_status ls_alloc(ls_allocator *a, size_t bytes, const char *what, void **out);
void ls_free(ls_allocator *a, void *ptr);

ls_device ls_allocator_device(const ls_allocator *a);
void ls_allocator_stats(ls_allocator *a, ls_memory_stats *out);
void ls_allocator_reset_peak(ls_allocator *a);
void ls_allocator_set_cap(ls_allocator *a, size_t cap_bytes);
/* Text appended to out-of-memory errors (e.g. the remedies and their flags); copied. */
void ls_allocator_set_oom_hint(ls_allocator *a, const char *hint);

/* Copy/zero through the allocator's backend (host<->device as the flags say). */
ls_status ls_allocator_copy(ls_allocator *a, void *dst, int dst_on_device, const void *src,
                            int src_on_device, size_t n);
ls_status ls_allocator_set_zero(ls_allocator *a, void *ptr, size_t n);

/* Parse "2GiB", "512MiB", "1.5GB", "4096", "64k" into bytes (binary and decimal units). */
ls_status ls_memory_parse_size(const char *s, size_t *out);
/* "1.50 GiB" into buf. */
const char *ls_memory_format(size_t bytes, char *buf, int len);

#ifdef __cplusplus
}
#endif
#endif
