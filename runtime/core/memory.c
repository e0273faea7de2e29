/* memory.c: the generic allocator (statistics, cap, pointer->size table) and the host backend.
 * Sizes are tracked in an open-addressing table keyed by pointer so device memory, which has
 * no room for a header, is handled the same way. */
#include "memory.h"

#include "log.h"
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

struct ls_allocator {
    const ls_allocator_vtable *vt;
    void *state;
    ls_device device;
    pthread_mutex_t mu;
    ls_memory_stats st;
    char hint[512];
    char cap_from[128]; /* where the cap of cap_from_bytes came from ("" unsaid) */
    size_t cap_from_bytes;
    /* pointer -> size table; keys NULL = empty, (void*)1 = deleted */
    void **keys;
    size_t *sizes;
    size_t cap_slots, used_slots;
};

#define LS_TOMBSTONE ((void *)1)

static size_t ls_hash_ptr(const void *p, size_t mask) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & mask;
}

static int ls_table_grow(ls_allocator *a) {
    size_t ncap = a->cap_slots ? a->cap_slots * 2 : 256;
    void **nk = calloc(ncap, sizeof *nk);
    size_t *ns = calloc(ncap, sizeof *ns);
    if (!nk || !ns) {
        free(nk);
        free(ns);
        return -1;
    }
    size_t used = 0;
    for (size_t i = 0; i < a->cap_slots; i++) {
        void *k = a->keys[i];
        if (!k || k == LS_TOMBSTONE) continue;
        size_t j = ls_hash_ptr(k, ncap - 1);
        while (nk[j]) j = (j + 1) & (ncap - 1);
        nk[j] = k;
        ns[j] = a->sizes[i];
        used++;
    }
    free(a->keys);
    free(a->sizes);
    a->keys = nk;
    a->sizes = ns;
    a->cap_slots = ncap;
    a->used_slots = used;
    return 0;
}

static int ls_table_put(ls_allocator *a, void *p, size_t n) {
    if ((a->used_slots + 1) * 2 > a->cap_slots && ls_table_grow(a) != 0) return -1;
    size_t mask = a->cap_slots - 1, j = ls_hash_ptr(p, mask);
    while (a->keys[j] && a->keys[j] != LS_TOMBSTONE) j = (j + 1) & mask;
    if (!a->keys[j]) a->used_slots++;
    a->keys[j] = p;
    a->sizes[j] = n;
    return 0;
}

/* The slot holding p, or -1. */
static ptrdiff_t ls_table_find(const ls_allocator *a, const void *p) {
    if (!a->cap_slots) return -1;
    size_t mask = a->cap_slots - 1, j = ls_hash_ptr(p, mask);
    while (a->keys[j]) {
        if (a->keys[j] == p) return (ptrdiff_t)j;
        j = (j + 1) & mask;
    }
    return -1;
}

static int ls_table_take(ls_allocator *a, void *p, size_t *n) {
    ptrdiff_t j = ls_table_find(a, p);
    if (j < 0) return -1;
    *n = a->sizes[j];
    a->keys[j] = LS_TOMBSTONE;
    return 0;
}

/* ---- host backend ---- */
static void *ls_host_alloc(void *state, size_t bytes) {
    (void)state;
    if (bytes > SIZE_MAX - 63) return NULL; /* the rounding would wrap to a tiny block */
    size_t rounded = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, rounded ? rounded : 64);
}
static void ls_host_free(void *state, void *ptr, size_t bytes) {
    (void)state;
    (void)bytes;
    free(ptr);
}
static ls_status ls_host_copy(void *state, void *dst, int dd, const void *src, int sd, size_t n) {
    (void)state;
    (void)dd;
    (void)sd;
    if (n) memmove(dst, src, n);
    return LS_OK;
}
static ls_status ls_host_zero(void *state, void *ptr, size_t n) {
    (void)state;
    if (n) memset(ptr, 0, n);
    return LS_OK;
}
static const ls_allocator_vtable ls_host_vtable = {
    "host", ls_host_alloc, ls_host_free, ls_host_copy, ls_host_zero, NULL, NULL, NULL, NULL,
    NULL,   NULL,          NULL,         NULL,         NULL,         NULL, NULL, NULL, NULL};

ls_status ls_allocator_create(const ls_allocator_vtable *vt, void *state, ls_device device, size_t cap_bytes,
                              ls_allocator **out) {
    LS_CHECK_ARG(vt && out, "ls_allocator_create: %s is NULL", !vt ? "the vtable" : "out");
    ls_allocator *a = calloc(1, sizeof *a);
    if (!a) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate an allocator object");
    a->vt = vt;
    a->state = state;
    a->device = device;
    a->st.cap_bytes = cap_bytes;
    pthread_mutex_init(&a->mu, NULL);
    *out = a;
    return LS_OK;
}

/* glibc's malloc, tuned once for a training loop's buffers: it hands a freed block of 128 KiB and
 * up back to the kernel (munmap, or trimming the heap's top), so a buffer freed and asked for
 * again every step was faulted in again every step. With activation checkpointing, which frees a
 * segment's activations after each forward and backward, ResNet steps on the CPU ran up to 7x
 * slower (docs/performance.md). A fixed mmap threshold of 32 MiB (glibc's largest) and no
 * trimming keep such blocks in the heap for the next step, as the threshold glibc raises by
 * itself does for the first sizes it sees. The heap then keeps its high-water mark, as a caching
 * allocator would. Left alone where the user tuned malloc (MALLOC_MMAP_THRESHOLD_,
 * MALLOC_TRIM_THRESHOLD_, GLIBC_TUNABLES) or set LOCKSTEP_MALLOC_TUNING=0 (off, false). */
/* LOCKSTEP_MALLOC_TUNING: *tune = 0 for 0, off or false, 1 for 1, on, true or unset; another
 * value is an error ("off" and "no" used to leave the tuning on without a word). */
static ls_status ls_malloc_tuning_env(int *tune) {
    const char *v = getenv("LOCKSTEP_MALLOC_TUNING");
    *tune = 1;
    if (!v || !*v || !strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true")) return LS_OK;
    if (!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false")) {
        *tune = 0;
        return LS_OK;
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "LOCKSTEP_MALLOC_TUNING=%s: expected 0, off or false (leave glibc's malloc as it is), or 1, on "
                    "or true (the default: freed buffers of up to 32 MiB stay in the heap)",
                    v);
}

static void ls_malloc_tune(void) {
#if defined(__GLIBC__)
    int tune = 1;
    if (ls_malloc_tuning_env(&tune) != LS_OK || !tune || getenv("MALLOC_MMAP_THRESHOLD_") ||
        getenv("MALLOC_TRIM_THRESHOLD_") || getenv("GLIBC_TUNABLES"))
        return;
    if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, INT_MAX) != 1)
        LS_LOG_I("could not tune malloc (mallopt): freed buffers may be faulted in again each step");
#endif
}

ls_status ls_host_allocator_create(size_t cap_bytes, ls_allocator **out) {
    LS_CHECK_ARG(out, "ls_host_allocator_create: out is NULL");
    int tune;
    LS_CHECK(ls_malloc_tuning_env(&tune)); /* a bad value is refused here, before any tuning */
    static pthread_once_t tuned = PTHREAD_ONCE_INIT;
    pthread_once(&tuned, ls_malloc_tune);
    return ls_allocator_create(&ls_host_vtable, NULL, ls_device_cpu(), cap_bytes, out);
}

ls_status ls_host_allocator_create_from_env(ls_allocator **out) {
    LS_CHECK_ARG(out, "ls_host_allocator_create_from_env: out is NULL");
    size_t cap = 0;
    const char *env = getenv("LOCKSTEP_MEMORY_LIMIT");
    if (env && *env && ls_memory_parse_cap(env, &cap) != LS_OK)
        return ls_error_context(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_MEMORY_LIMIT");
    LS_CHECK(ls_host_allocator_create(cap, out));
    if (cap) {
        char from[128];
        snprintf(from, sizeof from, "LOCKSTEP_MEMORY_LIMIT=%.100s", env);
        ls_allocator_set_cap_from(*out, cap, from);
    }
    return LS_OK;
}

void ls_allocator_destroy(ls_allocator *a) {
    if (!a) return;
    for (size_t i = 0; i < a->cap_slots; i++)
        if (a->keys[i] && a->keys[i] != LS_TOMBSTONE) a->vt->free(a->state, a->keys[i], a->sizes[i]);
    if (a->vt->destroy) a->vt->destroy(a->state);
    free(a->keys);
    free(a->sizes);
    pthread_mutex_destroy(&a->mu);
    free(a);
}

ls_status ls_alloc(ls_allocator *a, size_t bytes, const char *what, void **out) {
    char b1[32], b2[32], b3[32], b4[32], dev[32], hint[sizeof a->hint];
    LS_CHECK_ARG(a && out, "ls_alloc: %s is NULL", !a ? "the allocator" : "out");
    *out = NULL;
    pthread_mutex_lock(&a->mu);
    if (a->st.cap_bytes && (bytes > a->st.cap_bytes || a->st.live_bytes > a->st.cap_bytes - bytes)) {
        ls_memory_stats s = a->st;
        char from[sizeof a->cap_from + 4] = "";
        if (a->cap_from[0] && a->cap_from_bytes == s.cap_bytes) snprintf(from, sizeof from, " (%s)", a->cap_from);
        memcpy(hint, a->hint, sizeof hint); /* under mu: another thread may set it */
        pthread_mutex_unlock(&a->mu);
        return ls_error(LS_ERR_OUT_OF_MEMORY,
                        "out of memory on %s: cannot allocate %s for %s; the cap is %s%s, %s is "
                        "already in use, the peak so far is %s%s%s",
                        ls_device_str(a->device, dev, sizeof dev), ls_memory_format(bytes, b1, 32),
                        what ? what : "an unnamed buffer", ls_memory_format(s.cap_bytes, b2, 32), from,
                        ls_memory_format(s.live_bytes, b3, 32), ls_memory_format(s.peak_bytes, b4, 32),
                        hint[0] ? ". " : "", hint);
    }
    void *p = a->vt->alloc(a->state, bytes);
    if (!p && a->vt->alloc_error) {
        ls_status e = a->vt->alloc_error(a->state);
        if (e != LS_OK) {
            pthread_mutex_unlock(&a->mu);
            return e;
        }
    }
    if (!p || ls_table_put(a, p, bytes) != 0) {
        /* the backend's reason (a limit on what it holds, a full device): the cap checked above
         * was not what refused, and without it the error named no cap at all */
        char detail[384] = "";
        if (!p && a->vt->oom_detail) a->vt->oom_detail(a->state, detail, sizeof detail);
        if (p) a->vt->free(a->state, p, bytes);
        ls_memory_stats s = a->st;
        memcpy(hint, a->hint, sizeof hint);
        pthread_mutex_unlock(&a->mu);
        return ls_error(LS_ERR_OUT_OF_MEMORY,
                        "out of memory on %s: the %s allocator could not provide %s for %s%s%s%s; %s is "
                        "already in use, the peak so far is %s%s%s",
                        ls_device_str(a->device, dev, sizeof dev), a->vt->name, ls_memory_format(bytes, b1, 32),
                        what ? what : "an unnamed buffer", detail[0] ? " (" : "", detail, detail[0] ? ")" : "",
                        ls_memory_format(s.live_bytes, b3, 32), ls_memory_format(s.peak_bytes, b4, 32),
                        hint[0] ? ". " : "", hint);
    }
    a->st.live_bytes += bytes;
    if (a->st.live_bytes > a->st.peak_bytes) a->st.peak_bytes = a->st.live_bytes;
    a->st.allocs++;
    pthread_mutex_unlock(&a->mu);
    *out = p;
    return LS_OK;
}

void ls_free(ls_allocator *a, void *ptr) {
    if (!a || !ptr) return;
    size_t n = 0;
    pthread_mutex_lock(&a->mu);
    int found = ls_table_take(a, ptr, &n) == 0;
    if (found) {
        a->st.live_bytes -= n;
        a->st.frees++;
    }
    pthread_mutex_unlock(&a->mu);
    if (found)
        a->vt->free(a->state, ptr, n);
    else /* a bug in the caller: say so rather than free nothing in silence */
        LS_LOG_W("ls_free: %p is not a live allocation of the %s allocator (freed twice, never from it, or a "
                 "pointer into one); nothing freed",
                 ptr, a->vt->name);
}

int ls_allocator_owns(ls_allocator *a, const void *ptr) {
    if (!a || !ptr) return 0;
    pthread_mutex_lock(&a->mu);
    int found = ls_table_find(a, ptr) >= 0;
    pthread_mutex_unlock(&a->mu);
    return found;
}

ls_device ls_allocator_device(const ls_allocator *a) { return a->device; }

void ls_allocator_stats(ls_allocator *a, ls_memory_stats *out) {
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    out->reserved_bytes = a->vt->reserved ? a->vt->reserved(a->state) : a->st.live_bytes;
    pthread_mutex_unlock(&a->mu);
}

void ls_allocator_reset_peak(ls_allocator *a) {
    pthread_mutex_lock(&a->mu);
    a->st.peak_bytes = a->st.live_bytes;
    pthread_mutex_unlock(&a->mu);
}

void ls_allocator_set_cap(ls_allocator *a, size_t cap_bytes) {
    pthread_mutex_lock(&a->mu);
    a->st.cap_bytes = cap_bytes;
    pthread_mutex_unlock(&a->mu);
}

void ls_allocator_set_cap_from(ls_allocator *a, size_t cap_bytes, const char *from) {
    pthread_mutex_lock(&a->mu);
    a->st.cap_bytes = cap_bytes;
    snprintf(a->cap_from, sizeof a->cap_from, "%s", from ? from : "");
    a->cap_from_bytes = cap_bytes;
    pthread_mutex_unlock(&a->mu);
}

void ls_allocator_get_cap_from(ls_allocator *a, char *buf, size_t len) {
    if (!buf || !len) return;
    buf[0] = '\0';
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    if (a->cap_from[0] && a->cap_from_bytes == a->st.cap_bytes) snprintf(buf, len, "%s", a->cap_from);
    pthread_mutex_unlock(&a->mu);
}

void ls_allocator_set_oom_hint(ls_allocator *a, const char *hint) {
    pthread_mutex_lock(&a->mu);
    snprintf(a->hint, sizeof a->hint, "%s", hint ? hint : "");
    pthread_mutex_unlock(&a->mu);
}

void ls_allocator_get_oom_hint(ls_allocator *a, char *buf, size_t len) {
    if (!buf || !len) return;
    buf[0] = '\0';
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    snprintf(buf, len, "%s", a->hint);
    pthread_mutex_unlock(&a->mu);
}

ls_status ls_allocator_copy(ls_allocator *a, void *dst, int dst_on_device, const void *src, int src_on_device,
                            size_t n) {
    LS_CHECK_ARG(a && ((dst && src) || n == 0), "ls_allocator_copy: %s is NULL",
                 !a     ? "the allocator"
                 : !dst ? "dst"
                        : "src");
    return a->vt->copy(a->state, dst, dst_on_device, src, src_on_device, n);
}

ls_status ls_allocator_set_zero(ls_allocator *a, void *ptr, size_t n) {
    LS_CHECK_ARG(a && (ptr || n == 0), "ls_allocator_set_zero: %s is NULL", !a ? "the allocator" : "ptr");
    return a->vt->set_zero(a->state, ptr, n);
}

ls_status ls_allocator_host_alloc(ls_allocator *a, size_t bytes, const char *what, int *pinned, void **out) {
    LS_CHECK_ARG(a && pinned && out, "ls_allocator_host_alloc: %s is NULL",
                 !a        ? "the allocator"
                 : !pinned ? "pinned"
                           : "out");
    char b1[32];
    *pinned = 0;
    *out = a->vt->host_alloc ? a->vt->host_alloc(a->state, bytes ? bytes : 1) : NULL;
    if (*out) {
        *pinned = 1;
        pthread_mutex_lock(&a->mu);
        a->st.pinned_bytes += bytes;
        pthread_mutex_unlock(&a->mu);
        return LS_OK;
    }
    *out = ls_host_alloc(NULL, bytes);
    if (!*out)
        return ls_error(LS_ERR_OUT_OF_MEMORY, "out of host memory: cannot allocate %s for %s",
                        ls_memory_format(bytes, b1, 32), what ? what : "a staging buffer");
    return LS_OK;
}

void ls_allocator_host_free(ls_allocator *a, void *ptr, size_t bytes, int pinned) {
    if (!ptr) return;
    if (!pinned) {
        free(ptr);
        return;
    }
    a->vt->host_free(a->state, ptr);
    pthread_mutex_lock(&a->mu);
    a->st.pinned_bytes -= bytes < a->st.pinned_bytes ? bytes : a->st.pinned_bytes;
    pthread_mutex_unlock(&a->mu);
}

static ls_status ls_check_slot(int slot) {
    if (slot < 0 || slot >= LS_UPLOAD_SLOTS)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "upload slot %d is not in [0, %d)", slot, LS_UPLOAD_SLOTS);
    return LS_OK;
}

ls_status ls_allocator_upload(ls_allocator *a, int slot, void *dst, const void *src, size_t n) {
    LS_CHECK_ARG(a && ((dst && src) || n == 0), "ls_allocator_upload: %s is NULL",
                 !a     ? "the allocator"
                 : !dst ? "dst"
                        : "src");
    LS_CHECK(ls_check_slot(slot));
    if (a->vt->upload) return a->vt->upload(a->state, slot, dst, src, n);
    return a->vt->copy(a->state, dst, 1, src, 0, n);
}

ls_status ls_allocator_upload_join(ls_allocator *a, int slot) {
    LS_CHECK_ARG(a, "ls_allocator_upload_join: the allocator is NULL");
    LS_CHECK(ls_check_slot(slot));
    return a->vt->join ? a->vt->join(a->state, slot) : LS_OK;
}

ls_status ls_allocator_upload_wait(ls_allocator *a, int slot) {
    LS_CHECK_ARG(a, "ls_allocator_upload_wait: the allocator is NULL");
    LS_CHECK(ls_check_slot(slot));
    return a->vt->upload_wait ? a->vt->upload_wait(a->state, slot) : LS_OK;
}

ls_status ls_allocator_release(ls_allocator *a, int slot) {
    LS_CHECK_ARG(a, "ls_allocator_release: the allocator is NULL");
    LS_CHECK(ls_check_slot(slot));
    return a->vt->release ? a->vt->release(a->state, slot) : LS_OK;
}

static ls_status ls_check_download_slot(int slot) {
    if (slot < 0 || slot >= LS_DOWNLOAD_SLOTS)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "download slot %d is not in [0, %d)", slot, LS_DOWNLOAD_SLOTS);
    return LS_OK;
}

ls_status ls_allocator_download(ls_allocator *a, int slot, void *dst, const void *src, size_t n) {
    LS_CHECK_ARG(a && ((dst && src) || n == 0), "ls_allocator_download: %s is NULL",
                 !a     ? "the allocator"
                 : !dst ? "dst"
                        : "src");
    LS_CHECK(ls_check_download_slot(slot));
    if (a->vt->download) return a->vt->download(a->state, slot, dst, src, n);
    return a->vt->copy(a->state, dst, 0, src, 1, n);
}

ls_status ls_allocator_download_wait(ls_allocator *a, int slot) {
    LS_CHECK_ARG(a, "ls_allocator_download_wait: the allocator is NULL");
    LS_CHECK(ls_check_download_slot(slot));
    return a->vt->download_wait ? a->vt->download_wait(a->state, slot) : LS_OK;
}

ls_status ls_allocator_download_done(ls_allocator *a, int slot, int *done) {
    LS_CHECK_ARG(a && done, "ls_allocator_download_done: %s is NULL", !a ? "the allocator" : "done");
    *done = 1;
    LS_CHECK(ls_check_download_slot(slot));
    return a->vt->download_done ? a->vt->download_done(a->state, slot, done) : LS_OK;
}

ls_status ls_memory_parse_size(const char *s, size_t *out) {
    LS_CHECK_ARG(out, "ls_memory_parse_size: out is NULL");
    if (!s) return ls_error(LS_ERR_INVALID_ARGUMENT, "memory size is missing");
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    /* decimal digits only: strtod also reads hexadecimal ("0x100000" was a MiB) and "infinity" */
    int decimal = end > s && (isdigit((unsigned char)s[0]) || s[0] == '.');
    for (const char *c = s; decimal && c < end; c++) decimal = strchr("0123456789.eE+-", *c) != NULL;
    /* out of a double's range: 1e400 is too large (it was "not a number of bytes"), 1e-400 is 0 */
    if (decimal && errno == ERANGE && isinf(v))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "memory size '%s' is too large: more than 1.8e19 bytes", s);
    if (decimal && errno == ERANGE) errno = 0, v = 0;
    if (end == s || errno != 0 || !(v >= 0) || isinf(v) || !decimal)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "memory size '%s' is not a number of bytes with an optional unit (e.g. 2GiB, 512MiB)", s);
    while (isspace((unsigned char)*end)) end++;
    static const struct {
        const char *u;
        double m;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"k", 1024.0},
                 {"kib", 1024.0},
                 {"kb", 1e3},
                 {"m", 1048576.0},
                 {"mib", 1048576.0},
                 {"mb", 1e6},
                 {"g", 1073741824.0},
                 {"gib", 1073741824.0},
                 {"gb", 1e9},
                 {"t", 1099511627776.0},
                 {"tib", 1099511627776.0},
                 {"tb", 1e12}};
    char unit[8] = {0};
    for (size_t i = 0; strlen(end) < sizeof unit && end[i]; i++) unit[i] = (char)tolower((unsigned char)end[i]);
    for (size_t i = 0; strlen(end) < sizeof unit && i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(unit, units[i].u) == 0) {
            double bytes = v * units[i].m;
            if (bytes > 1.8e19) /* one message said "an unknown unit or too large" for both */
                return ls_error(LS_ERR_INVALID_ARGUMENT, "memory size '%s' is too large: more than 1.8e19 bytes", s);
            if (units[i].m == 1 && bytes != floor(bytes)) /* "1.5" was a cap of 1 byte */
                return ls_error(LS_ERR_INVALID_ARGUMENT,
                                "memory size '%s' is not a whole number of bytes (a unit: e.g. 1.5GiB, 512MiB)", s);
            *out = (size_t)bytes;
            return LS_OK;
        }
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "memory size '%s' has an unknown unit '%.40s' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s, end);
}

ls_status ls_memory_parse_cap(const char *s, size_t *out) {
    LS_CHECK(ls_memory_parse_size(s, out));
    if (*out == 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "memory cap '%s' is less than a byte (for no cap, leave it out)", s);
    return LS_OK;
}

const char *ls_memory_format(size_t bytes, char *buf, int len) {
    static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 4) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, (size_t)len, "%zu B", bytes);
    else
        snprintf(buf, (size_t)len, "%.2f %s", v, u[i]);
    return buf;
}

ls_status ls_gpu_memory_policy_parse(const char *env, ls_gpu_memory_policy *pol) {
    LS_CHECK_ARG(pol, "ls_gpu_memory_policy_parse: pol is NULL");
    memset(pol, 0, sizeof *pol);
    if (!env || !*env) return LS_OK;
    char buf[256];
    if (strlen(env) >= sizeof buf) return ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_GPU_MEMORY is too long");
    strcpy(buf, env);
    const char *reserve = NULL, *limit = NULL; /* the item that set each: a second one is refused */
    /* every item between commas, an empty one too (strtok skipped those of "grow," and ",grow") */
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = '\0';
        while (*item == ' ') item++;
        if (!*item) /* quoted as '' it read as a value that was not there */
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "LOCKSTEP_GPU_MEMORY='%s' holds an empty item: give grow, reserve:FRACTION, "
                            "reserve:SIZE or limit:SIZE (comma-separated), or unset it",
                            env);
        if (strcmp(item, "grow") == 0) continue;
        /* "reserve:0.9,reserve:0.5" took the last and "reserve:0.9,reserve:20GiB" the size, without a word */
        const char *seen = !strncmp(item, "reserve:", 8) ? reserve : !strncmp(item, "limit:", 6) ? limit : NULL;
        if (seen)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "LOCKSTEP_GPU_MEMORY=%s: '%s' after '%s': give reserve and limit at most once each", env,
                            item, seen);
        if (strncmp(item, "reserve:", 8) == 0) {
            reserve = item;
            const char *v = item + 8;
            double f; /* decimal digits: strtod took "0x.8" for a half, and a space or '+' */
            const int number = ls_parse_decimal(v, &f);
            if (number && f > 0 && f <= 1) {
                pol->reserve_fraction = f;
                continue;
            }
            if (number) /* reserve:1.5 or reserve:2 meant a fraction, not 2 bytes */
                return ls_error(LS_ERR_INVALID_ARGUMENT,
                                "LOCKSTEP_GPU_MEMORY: '%s': a number alone is a fraction of the free memory, in "
                                "(0, 1]; a size takes a unit (reserve:0.9, reserve:20GiB)",
                                item);
            /* the size's own fault is said ("limit:0" and "limit:99999999999TiB" only "wanted a size") */
            char why[256];
            if (ls_memory_parse_size(v, &pol->reserve_bytes) != LS_OK)
                snprintf(why, sizeof why, "%s", ls_last_error());
            else if (pol->reserve_bytes > 0)
                continue;
            else
                snprintf(why, sizeof why, "'%.100s' reserves nothing (for no reservation, leave reserve out)", v);
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "LOCKSTEP_GPU_MEMORY: '%s' wants a fraction of the free memory in (0, 1] or a "
                            "size (reserve:0.9, reserve:20GiB): %s",
                            item, why);
        }
        if (strncmp(item, "limit:", 6) == 0) {
            limit = item;
            if (ls_memory_parse_cap(item + 6, &pol->limit) == LS_OK) continue;
            char why[256];
            snprintf(why, sizeof why, "%s", ls_last_error());
            return ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_GPU_MEMORY: '%s' wants a size (limit:48GiB): %s", item,
                            why);
        }
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "LOCKSTEP_GPU_MEMORY: '%s' is not one of grow, reserve:FRACTION, reserve:SIZE, "
                        "limit:SIZE (comma-separated, e.g. reserve:0.9 or limit:48GiB)",
                        item);
    }
    return LS_OK;
}
