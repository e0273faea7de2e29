/* cuda_alloc.c: the caching device allocator behind ls_allocator (the generic layer in
 * runtime/core/memory.c keeps live/peak statistics and the live-bytes cap; this file supplies the
 * memory). Segments come from cudaMalloc (or from one reserved arena) and are split into blocks:
 * requests up to 1 MiB are rounded to 512 B and served from 2 MiB segments (the small pool),
 * larger ones are rounded to 512 B and served from segments of 20 MiB (requests under 10 MiB) or
 * the request rounded to 2 MiB (the large pool). A freed block goes back to its pool's free list,
 * merged with free neighbours, and the best fit is reused: once a training step has run, later
 * steps make no cudaMalloc/cudaFree calls. Cached segments are released (cudaFree) only when a
 * cudaMalloc fails, after which it is tried once more.
 * Streams: every op of a context runs on its one compute stream, so a block freed on the host may
 * be handed out again at once; later work on the same stream is ordered after the earlier users.
 * Work on another stream (e.g. a communicator's) must be joined to the compute stream before the
 * buffers it uses are freed.
 * Policy (LOCKSTEP_GPU_MEMORY, comma-separated): "grow" (default) cudaMallocs on demand;
 * "reserve:F" takes the fraction F of the free device memory less 512 MiB (kept for NCCL, cuBLAS
 * and cuDNN's own allocations), or a size (reserve:20GiB), as one arena up front and sub-allocates
 * from it, growing past it only if it is full; "limit:SIZE" caps both the live bytes and the bytes
 * held from the driver, so a big card behaves like a smaller one. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "log.h"

#define LS_KIB ((size_t)1024)
#define LS_MIB (LS_KIB * 1024)
#define LS_ROUND (512)                /* every block size is a multiple of this */
#define LS_SMALL_MAX (1 * LS_MIB)     /* requests up to this go to the small pool */
#define LS_SMALL_SEGMENT (2 * LS_MIB) /* small-pool segment */
#define LS_LARGE_PACKED (20 * LS_MIB) /* segment for large requests under LS_LARGE_PACK_BELOW */
#define LS_LARGE_PACK_BELOW (10 * LS_MIB)
#define LS_LARGE_GRAIN (2 * LS_MIB)     /* other large segments: the request rounded to this */
#define LS_LARGE_SPLIT_MIN (1 * LS_MIB) /* a large block is split only if this much is left over */
#define LS_RESERVE_KEEP (512 * LS_MIB)  /* reserve:F leaves this much of the free memory alone */

enum { POOL_SMALL = 0, POOL_LARGE = 1 };
/* Where a segment's memory came from. */
enum { SEG_CUDA = 0, SEG_ARENA = 1, SEG_CARVED = 2 /* a block of the large pool */ };

typedef struct cu_block cu_block;
typedef struct cu_segment cu_segment;

struct cu_block {
    char *ptr;
    size_t size;
    int allocated;
    cu_segment *seg;
    cu_block *prev, *next;   /* neighbours by address within the segment */
    cu_block *fprev, *fnext; /* the pool's free list */
};

struct cu_segment {
    char *base;
    size_t size;
    int kind;         /* SEG_* */
    int pool;         /* POOL_* */
    cu_block *parent; /* SEG_CARVED: the large-pool block holding this segment */
    cu_block *head;   /* the block at base: never freed by merging (merges free the later block) */
    cu_segment *next;
};

typedef struct cu_pool {
    cu_block *free_list;
    cu_segment *segments;
} cu_pool;

typedef struct cu_alloc {
    ls_cuda_state *cs; /* the backend state: device and compute stream */
    int device;
    pthread_mutex_t mu;
    cu_pool pools[2];
    size_t reserved;        /* bytes held from the driver (cudaMalloc'd segments and the arena) */
    size_t cap;             /* limit on reserved (0: none) */
    int has_arena;          /* reserve mode: the large pool holds one SEG_ARENA segment */
    cudaError_t hard_error; /* this call's cudaMalloc failed for another reason than memory */
    size_t cap_refused;     /* this call's last segment refused by the cap (its size; 0: none) */
    char policy[256];       /* LOCKSTEP_GPU_MEMORY, for errors */
    uint64_t n_cuda_malloc, n_cuda_free;
    /* staged uploads (created on first use): a copy stream, and per slot the end of its last
     * copies (done) and the compute work that last reads its device buffers (released); deferred
     * reads: per slot the end of its last copy to the host (on the compute stream) */
    int up_ready;
    cudaStream_t up_stream;
    cudaEvent_t up_done[LS_UPLOAD_SLOTS], up_released[LS_UPLOAD_SLOTS];
    cudaEvent_t down_done[LS_DOWNLOAD_SLOTS];
    /* allocated blocks by pointer (open addressing; NULL empty, (void *)1 deleted) */
    cu_block **tab;
    size_t tab_cap, tab_used;
} cu_alloc;

#define LS_TAB_DELETED ((cu_block *)1)

static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

static size_t hash_ptr(const void *p, size_t mask) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & mask;
}

static int tab_put(cu_alloc *a, cu_block *b);

static int tab_grow(cu_alloc *a) {
    size_t old_cap = a->tab_cap;
    cu_block **old = a->tab;
    size_t ncap = old_cap ? old_cap * 2 : 256;
    cu_block **nt = calloc(ncap, sizeof *nt);
    if (!nt) return -1;
    a->tab = nt;
    a->tab_cap = ncap;
    a->tab_used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] && old[i] != LS_TAB_DELETED) tab_put(a, old[i]);
    free(old);
    return 0;
}

static int tab_put(cu_alloc *a, cu_block *b) {
    if ((a->tab_used + 1) * 2 > a->tab_cap && tab_grow(a) != 0) return -1;
    size_t mask = a->tab_cap - 1, j = hash_ptr(b->ptr, mask);
    while (a->tab[j] && a->tab[j] != LS_TAB_DELETED) j = (j + 1) & mask;
    if (!a->tab[j]) a->tab_used++;
    a->tab[j] = b;
    return 0;
}

static cu_block *tab_take(cu_alloc *a, const void *p) {
    if (!a->tab_cap) return NULL;
    size_t mask = a->tab_cap - 1, j = hash_ptr(p, mask);
    while (a->tab[j]) {
        if (a->tab[j] != LS_TAB_DELETED && a->tab[j]->ptr == p) {
            cu_block *b = a->tab[j];
            a->tab[j] = LS_TAB_DELETED;
            return b;
        }
        j = (j + 1) & mask;
    }
    return NULL;
}

/* ---- free lists ---- */
static void free_list_push(cu_pool *pool, cu_block *b) {
    b->fprev = NULL;
    b->fnext = pool->free_list;
    if (pool->free_list) pool->free_list->fprev = b;
    pool->free_list = b;
}

static void free_list_remove(cu_pool *pool, cu_block *b) {
    if (b->fprev)
        b->fprev->fnext = b->fnext;
    else
        pool->free_list = b->fnext;
    if (b->fnext) b->fnext->fprev = b->fprev;
    b->fprev = b->fnext = NULL;
}

/* Smallest free block of at least size (lowest address on ties, for reproducible layouts). */
static cu_block *best_fit(cu_pool *pool, size_t size) {
    cu_block *best = NULL;
    for (cu_block *b = pool->free_list; b; b = b->fnext)
        if (b->size >= size && (!best || b->size < best->size || (b->size == best->size && b->ptr < best->ptr)))
            best = b;
    return best;
}

/* Hand out size bytes of the free block b (removed from the free list), splitting off the rest
 * as a new free block when it is worth keeping (the whole block goes out when the rest is small,
 * or when there is no host memory for the new node). Returns b. */
static cu_block *take_block(cu_pool *pool, int pool_id, cu_block *b, size_t size) {
    free_list_remove(pool, b);
    size_t rest = b->size - size;
    size_t min_rest = pool_id == POOL_SMALL ? LS_ROUND : LS_LARGE_SPLIT_MIN;
    if (rest >= min_rest) {
        cu_block *r = calloc(1, sizeof *r);
        if (r) {
            r->ptr = b->ptr + size;
            r->size = rest;
            r->seg = b->seg;
            r->prev = b;
            r->next = b->next;
            if (b->next) b->next->prev = r;
            b->next = r;
            b->size = size;
            free_list_push(pool, r);
        } /* without memory for the node, hand out the whole block */
    }
    b->allocated = 1;
    return b;
}

/* Return b to its pool, merged with free neighbours. */
static void give_back(cu_pool *pool, cu_block *b) {
    b->allocated = 0;
    cu_block *p = b->prev, *n = b->next;
    if (p && !p->allocated) {
        free_list_remove(pool, p);
        p->size += b->size;
        p->next = n;
        if (n) n->prev = p;
        free(b);
        b = p;
    }
    n = b->next;
    if (n && !n->allocated) {
        free_list_remove(pool, n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        free(n);
    }
    free_list_push(pool, b);
}

static cu_block *pool_alloc(cu_alloc *a, int pool_id, size_t size);

/* Add a segment of seg_size bytes to the pool (from the large pool when the pool is the small
 * one and there is an arena, else from cudaMalloc within the cap). 0 on success. */
static int add_segment(cu_alloc *a, int pool_id, size_t seg_size, int arena) {
    cu_segment *s = calloc(1, sizeof *s);
    cu_block *b = calloc(1, sizeof *b);
    if (!s || !b) goto fail;
    s->size = seg_size;
    s->pool = pool_id;
    if (arena) {
        s->kind = SEG_ARENA;
    } else if (pool_id == POOL_SMALL && a->has_arena) {
        /* reserve mode: small segments are carved out of the arena's large pool */
        cu_block *parent = pool_alloc(a, POOL_LARGE, seg_size);
        if (!parent) goto fail;
        s->kind = SEG_CARVED;
        s->parent = parent;
        s->base = parent->ptr;
    } else {
        s->kind = SEG_CUDA;
    }
    if (s->kind != SEG_CARVED) {
        a->cap_refused = 0;
        if (a->cap && (seg_size > a->cap || a->reserved > a->cap - seg_size)) {
            a->cap_refused = seg_size;
            goto fail;
        }
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, seg_size);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
            /* anything else (a sticky error from an earlier kernel, a lost device) is no out of
             * memory: reported as itself (cu_alloc_error_fn), not retried */
            if (e != cudaErrorMemoryAllocation) a->hard_error = e;
            goto fail;
        }
        a->n_cuda_malloc++;
        a->reserved += seg_size;
        s->base = p;
    }
    b->ptr = s->base;
    b->size = seg_size;
    b->seg = s;
    s->head = b;
    if (arena) a->has_arena = 1;
    s->next = a->pools[pool_id].segments;
    a->pools[pool_id].segments = s;
    free_list_push(&a->pools[pool_id], b);
    return 0;
fail:
    free(s);
    free(b);
    return -1;
}

static void unlink_segment(cu_pool *pool, cu_segment *s) {
    for (cu_segment **pp = &pool->segments; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            return;
        }
}

/* Release every segment whose memory is entirely free (the small pool first: its carved
 * segments go back to the large pool). The arena is kept. Returns the bytes given back to the
 * driver. */
static size_t release_cached(cu_alloc *a) {
    size_t released = 0;
    int synced = 0;
    for (int pid = POOL_SMALL; pid <= POOL_LARGE; pid++) {
        cu_pool *pool = &a->pools[pid];
        cu_segment *s = pool->segments;
        while (s) {
            cu_segment *next = s->next;
            cu_block *b = s->head;
            if (s->kind != SEG_ARENA && !b->allocated && !b->next) {
                free_list_remove(pool, b);
                free(b);
                unlink_segment(pool, s);
                if (s->kind == SEG_CARVED) {
                    give_back(&a->pools[POOL_LARGE], s->parent);
                } else {
                    if (!synced) {
                        (void)cudaStreamSynchronize(a->cs->stream);
                        synced = 1;
                    }
                    (void)cudaFree(s->base);
                    a->n_cuda_free++;
                    a->reserved -= s->size;
                    released += s->size;
                }
                free(s);
            }
            s = next;
        }
    }
    return released;
}

static size_t segment_size(cu_alloc *a, int pool_id, size_t size) {
    if (pool_id == POOL_SMALL) return LS_SMALL_SEGMENT;
    if (size < LS_LARGE_PACK_BELOW) {
        /* pack several mid-sized requests into one segment, unless the cap says no */
        if (!a->cap || a->reserved + LS_LARGE_PACKED <= a->cap) return LS_LARGE_PACKED;
    }
    return round_up(size, LS_LARGE_GRAIN);
}

static cu_block *pool_alloc(cu_alloc *a, int pool_id, size_t size) {
    cu_pool *pool = &a->pools[pool_id];
    cu_block *b = best_fit(pool, size);
    if (!b) {
        size_t seg = segment_size(a, pool_id, size);
        if (add_segment(a, pool_id, seg, 0) != 0) {
            if (a->hard_error != cudaSuccess) return NULL;
            /* free what the cache holds and try once more (a smaller segment if packing); in
             * reserve mode the small pool's segments go back to the arena, where they may have
             * made a block that fits */
            release_cached(a);
            b = best_fit(pool, size);
            if (b) return take_block(pool, pool_id, b, size);
            seg = pool_id == POOL_SMALL ? LS_SMALL_SEGMENT : round_up(size, LS_LARGE_GRAIN);
            if (add_segment(a, pool_id, seg, 0) != 0) return NULL;
        }
        b = best_fit(pool, size);
        if (!b) return NULL;
    }
    return take_block(pool, pool_id, b, size);
}

/* ---- the vtable ---- */
static void *cu_alloc_fn(void *state, size_t bytes) {
    cu_alloc *a = state;
    size_t size = round_up(bytes ? bytes : 1, LS_ROUND);
    int pool_id = size <= LS_SMALL_MAX ? POOL_SMALL : POOL_LARGE;
    pthread_mutex_lock(&a->mu);
    int prev = -1;
    (void)cudaGetDevice(&prev);
    if (prev != a->device) (void)cudaSetDevice(a->device);
    a->hard_error = cudaSuccess;
    a->cap_refused = 0;
    cu_block *b = pool_alloc(a, pool_id, size);
    if (b && tab_put(a, b) != 0) {
        give_back(&a->pools[pool_id], b);
        b = NULL;
    }
    if (prev >= 0 && prev != a->device) (void)cudaSetDevice(prev);
    pthread_mutex_unlock(&a->mu);
    return b ? b->ptr : NULL;
}

/* After cu_alloc_fn returned NULL: LS_OK when the device (or the cap) had no room, else the CUDA
 * error that stopped it. */
static ls_status cu_alloc_error_fn(void *state) {
    cu_alloc *a = state;
    pthread_mutex_lock(&a->mu);
    cudaError_t e = a->hard_error;
    pthread_mutex_unlock(&a->mu);
    if (e == cudaSuccess) return LS_OK;
    return ls_error(LS_ERR_CUDA,
                    "cuda:%d: cudaMalloc failed with %s (%s): not out of memory; an earlier kernel or "
                    "copy may have failed (run with CUDA_LAUNCH_BLOCKING=1 to find it)",
                    a->device, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* After cu_alloc_fn returned NULL for want of memory: the limit that refused a segment (it counts
 * the memory held from the device, cached blocks and the rest of segments too, so it can refuse
 * where the blocks in use and the request are under it), or the device's free memory. */
static void cu_oom_detail_fn(void *state, char *buf, size_t len) {
    cu_alloc *a = state;
    char b1[32], b2[32], b3[32];
    pthread_mutex_lock(&a->mu);
    size_t held = a->reserved, seg = a->cap_refused;
    pthread_mutex_unlock(&a->mu);
    if (seg) {
        snprintf(buf, len,
                 "it holds %s from cuda:%d, and a segment of %s more would pass the limit of %s "
                 "(LOCKSTEP_GPU_MEMORY=%s)",
                 ls_memory_format(held, b1, 32), a->device, ls_memory_format(seg, b2, 32),
                 ls_memory_format(a->cap, b3, 32), a->policy);
        return;
    }
    size_t free_b = 0, total_b = 0;
    int prev = -1;
    (void)cudaGetDevice(&prev);
    if (prev != a->device) (void)cudaSetDevice(a->device);
    cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
    if (prev >= 0 && prev != a->device) (void)cudaSetDevice(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(buf, len, "it holds %s from cuda:%d", ls_memory_format(held, b1, 32), a->device);
        return;
    }
    snprintf(buf, len, "it holds %s from cuda:%d, which has %s free of %s", ls_memory_format(held, b1, 32), a->device,
             ls_memory_format(free_b, b2, 32), ls_memory_format(total_b, b3, 32));
}

static void cu_free_fn(void *state, void *ptr, size_t bytes) {
    (void)bytes;
    cu_alloc *a = state;
    pthread_mutex_lock(&a->mu);
    cu_block *b = tab_take(a, ptr);
    if (b) give_back(&a->pools[b->seg->pool], b);
    pthread_mutex_unlock(&a->mu);
}

static ls_status cu_copy_fn(void *state, void *dst, int dst_on_device, const void *src, int src_on_device, size_t n) {
    cu_alloc *a = state;
    if (!n) return LS_OK;
    enum cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                             : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (kind == cudaMemcpyHostToHost) {
        memmove(dst, src, n);
        return LS_OK;
    }
    LS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, a->cs->stream));
    /* device-to-device stays stream-ordered; a copy touching host memory completes before return */
    if (kind != cudaMemcpyDeviceToDevice) LS_CUDA_CHECK(cudaStreamSynchronize(a->cs->stream));
    return LS_OK;
}

/* ---- staged uploads (memory.h: ls_allocator_upload) ---- */
/* Switches the calling thread to the allocator's device for the scope of one call. */
static int dev_enter(const cu_alloc *a) {
    int prev = -1;
    (void)cudaGetDevice(&prev);
    if (prev != a->device) (void)cudaSetDevice(a->device);
    return prev;
}

static void dev_leave(const cu_alloc *a, int prev) {
    if (prev >= 0 && prev != a->device) (void)cudaSetDevice(prev);
}

static void up_destroy(cu_alloc *a) {
    if (a->up_stream) (void)cudaStreamSynchronize(a->up_stream);
    for (int i = 0; i < LS_UPLOAD_SLOTS; i++) {
        if (a->up_done[i]) (void)cudaEventDestroy(a->up_done[i]);
        if (a->up_released[i]) (void)cudaEventDestroy(a->up_released[i]);
        a->up_done[i] = a->up_released[i] = NULL;
    }
    for (int i = 0; i < LS_DOWNLOAD_SLOTS; i++) {
        if (a->down_done[i]) (void)cudaEventDestroy(a->down_done[i]);
        a->down_done[i] = NULL;
    }
    if (a->up_stream) (void)cudaStreamDestroy(a->up_stream);
    a->up_stream = NULL;
    a->up_ready = 0;
}

/* The copy stream and the slots' events (uploads' and downloads'), on the allocator's device;
 * all or nothing. */
static ls_status up_init(cu_alloc *a) {
    if (a->up_ready) return LS_OK;
    int prev = dev_enter(a);
    cudaError_t e = cudaStreamCreateWithFlags(&a->up_stream, cudaStreamNonBlocking);
    for (int i = 0; i < LS_UPLOAD_SLOTS && e == cudaSuccess; i++) {
        e = cudaEventCreateWithFlags(&a->up_done[i], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&a->up_released[i], cudaEventDisableTiming);
    }
    for (int i = 0; i < LS_DOWNLOAD_SLOTS && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&a->down_done[i], cudaEventDisableTiming);
    dev_leave(a, prev);
    if (e != cudaSuccess) {
        ls_status s = ls_cuda_error(e, "creating the upload stream and events", __FILE__, __LINE__);
        up_destroy(a);
        return s;
    }
    a->up_ready = 1;
    return LS_OK;
}

static void *cu_host_alloc_fn(void *state, size_t bytes) {
    (void)state;
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError(); /* the caller falls back to pageable memory */
        return NULL;
    }
    return p;
}

static void cu_host_free_fn(void *state, void *ptr) {
    (void)state;
    (void)cudaFreeHost(ptr);
}

static ls_status cu_upload_fn(void *state, int slot, void *dst, const void *src, size_t n) {
    cu_alloc *a = state;
    if (!n) return LS_OK;
    LS_CHECK(up_init(a));
    /* an event never recorded counts as complete: the first copies wait for nothing */
    LS_CUDA_CHECK(cudaStreamWaitEvent(a->up_stream, a->up_released[slot], 0));
    LS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, a->up_stream));
    LS_CUDA_CHECK(cudaEventRecord(a->up_done[slot], a->up_stream));
    return LS_OK;
}

static ls_status cu_join_fn(void *state, int slot) {
    cu_alloc *a = state;
    if (!a->up_ready) return LS_OK; /* nothing was ever uploaded */
    LS_CUDA_CHECK(cudaStreamWaitEvent(a->cs->stream, a->up_done[slot], 0));
    return LS_OK;
}

static ls_status cu_upload_wait_fn(void *state, int slot) {
    cu_alloc *a = state;
    if (!a->up_ready) return LS_OK;
    LS_CUDA_CHECK(cudaEventSynchronize(a->up_done[slot]));
    return LS_OK;
}

static ls_status cu_release_fn(void *state, int slot) {
    cu_alloc *a = state;
    LS_CHECK(up_init(a));
    LS_CUDA_CHECK(cudaEventRecord(a->up_released[slot], a->cs->stream));
    return LS_OK;
}

/* ---- deferred reads (memory.h: ls_allocator_download): on the compute stream, after the work
 * that computes what is read ---- */
static ls_status cu_download_fn(void *state, int slot, void *dst, const void *src, size_t n) {
    cu_alloc *a = state;
    if (!n) return LS_OK;
    LS_CHECK(up_init(a));
    LS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, a->cs->stream));
    LS_CUDA_CHECK(cudaEventRecord(a->down_done[slot], a->cs->stream));
    return LS_OK;
}

static ls_status cu_download_wait_fn(void *state, int slot) {
    cu_alloc *a = state;
    if (!a->up_ready) return LS_OK; /* nothing was ever downloaded */
    LS_CUDA_CHECK(cudaEventSynchronize(a->down_done[slot]));
    return LS_OK;
}

static ls_status cu_download_done_fn(void *state, int slot, int *done) {
    cu_alloc *a = state;
    *done = 1;
    if (!a->up_ready) return LS_OK;
    cudaError_t e = cudaEventQuery(a->down_done[slot]);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError(); /* a query's "not ready" stays as the last error otherwise */
        *done = 0;
        return LS_OK;
    }
    LS_CUDA_CHECK(e);
    return LS_OK;
}

static ls_status cu_zero_fn(void *state, void *ptr, size_t n) {
    cu_alloc *a = state;
    if (!n) return LS_OK;
    LS_CUDA_CHECK(cudaMemsetAsync(ptr, 0, n, a->cs->stream));
    return LS_OK;
}

static size_t cu_reserved_fn(void *state) {
    cu_alloc *a = state;
    pthread_mutex_lock(&a->mu);
    size_t r = a->reserved;
    pthread_mutex_unlock(&a->mu);
    return r;
}

static void cu_destroy_fn(void *state) {
    cu_alloc *a = state;
    (void)cudaStreamSynchronize(a->cs->stream);
    up_destroy(a);
    for (int pid = POOL_SMALL; pid <= POOL_LARGE; pid++) {
        cu_pool *pool = &a->pools[pid];
        for (cu_segment *s = pool->segments, *next; s; s = next) {
            next = s->next;
            for (cu_block *b = s->head, *bn; b; b = bn) {
                bn = b->next;
                free(b);
            }
            if (s->kind != SEG_CARVED) {
                (void)cudaFree(s->base);
                a->n_cuda_free++;
            }
            free(s);
        }
    }
    LS_LOG_D("cuda:%d allocator: %llu cudaMalloc and %llu cudaFree calls over its life", a->device,
             (unsigned long long)a->n_cuda_malloc, (unsigned long long)a->n_cuda_free);
    free(a->tab);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

static const ls_allocator_vtable ls_cuda_vtable = {
    "cuda caching", cu_alloc_fn,       cu_free_fn,      cu_copy_fn,          cu_zero_fn,          cu_reserved_fn,
    cu_destroy_fn,  cu_host_alloc_fn,  cu_host_free_fn, cu_upload_fn,        cu_join_fn,          cu_upload_wait_fn,
    cu_release_fn,  cu_alloc_error_fn, cu_download_fn,  cu_download_wait_fn, cu_download_done_fn, cu_oom_detail_fn};

/* ---- policy ---- */
ls_status ls_cuda_allocator_create(ls_cuda_state *cs, ls_device dev, ls_allocator **out) {
    char b1[32], b2[32], b3[32], hint[480];
    *out = NULL;
    ls_gpu_memory_policy pol;
    LS_CHECK(ls_gpu_memory_policy_parse(getenv("LOCKSTEP_GPU_MEMORY"), &pol));
    cu_alloc *a = calloc(1, sizeof *a);
    if (!a) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the CUDA allocator's state");
    a->cs = cs;
    a->device = cs->device;
    a->cap = pol.limit;
    snprintf(a->policy, sizeof a->policy, "%s", pol.limit ? getenv("LOCKSTEP_GPU_MEMORY") : "");
    pthread_mutex_init(&a->mu, NULL);
    ls_status s = LS_OK;
    if (pol.reserve_fraction > 0 || pol.reserve_bytes > 0) {
        size_t free_b = 0, total_b = 0;
        LS_CUDA_CHECK_GOTO(cudaMemGetInfo(&free_b, &total_b), s, fail);
        /* a fraction is of the free memory less LS_RESERVE_KEEP, so that reserve:1 still leaves
         * NCCL, cuBLAS and cuDNN room for their own allocations; a size is taken as asked */
        size_t avail = free_b > LS_RESERVE_KEEP ? free_b - LS_RESERVE_KEEP : 0;
        size_t want = pol.reserve_bytes ? pol.reserve_bytes : (size_t)((double)avail * pol.reserve_fraction);
        if (a->cap && want > a->cap) want = a->cap;
        want = want / LS_LARGE_GRAIN * LS_LARGE_GRAIN;
        if (want == 0 || add_segment(a, POOL_LARGE, want, 1) != 0) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "LOCKSTEP_GPU_MEMORY=%s: cannot reserve %s on cuda:%d (%s free of %s)",
                         getenv("LOCKSTEP_GPU_MEMORY"), ls_memory_format(want, b1, 32), cs->device,
                         ls_memory_format(free_b, b2, 32), ls_memory_format(total_b, b3, 32));
            goto fail;
        }
        /* add_segment made it SEG_ARENA; the arena is held until the allocator goes */
        LS_LOG_I("cuda:%d: reserved %s up front (LOCKSTEP_GPU_MEMORY=%s)", cs->device, ls_memory_format(want, b1, 32),
                 getenv("LOCKSTEP_GPU_MEMORY"));
    }
    ls_allocator *al = NULL;
    LS_CHECK_GOTO(ls_allocator_create(&ls_cuda_vtable, a, dev, pol.limit, &al), s, fail);
    if (pol.limit) {
        /* the cap's errors say where it comes from, also when a program sets a hint of its own */
        char from[sizeof a->policy + 32];
        snprintf(from, sizeof from, "LOCKSTEP_GPU_MEMORY=%s", a->policy);
        ls_allocator_set_cap_from(al, pol.limit, from);
        snprintf(hint, sizeof hint,
                 "To fit, use a smaller batch (--batch-size), mixed precision (--precision bf16 or --precision "
                 "fp16) or activation checkpointing (--checkpoint-activations)");
    } else
        snprintf(hint, sizeof hint,
                 "The GPU (%s) has %s in all, with no cap set (LOCKSTEP_GPU_MEMORY). To fit, use a smaller batch "
                 "(--batch-size), mixed precision (--precision bf16 or --precision fp16) or activation "
                 "checkpointing (--checkpoint-activations)",
                 cs->name, ls_memory_format(cs->total_mem, b1, 32));
    ls_allocator_set_oom_hint(al, hint);
    *out = al;
    return LS_OK;
fail:
    cu_destroy_fn(a);
    return s;
}
