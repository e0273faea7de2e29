/* reducer.c: the DDP gradient reducer: bucket plan (reverse parameter order, capped sizes), one
 * fusion buffer per multi-gradient bucket on the gradients' device (the gradients' home when they
 * are bucket views, else copied in and back), async allreduce launched in bucket order as buckets
 * fill, then scale (and copy back) at finish. With owners (ZeRO), each bucket's runs of gradients of
 * one owner are reduced to that rank instead (DeepSpeed's reduce of gradients to their partition's
 * owner): each rank then holds the averaged gradients of the parameters it steps only. */
#include "reducer.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_impl.h"
#include "log.h"
#include "parse.h"
#include "timeline.h"

#define LS_MIB ((size_t)1 << 20)
#define LS_VIEW_ALIGN ((size_t)256) /* a bucket view's offsets: the CUDA allocator's alignment */

/* A stretch of a bucket's reduced region whose gradients one rank owns (the whole bucket, owner -1,
 * without owners): a segment of the bucket's reduce to the owners. */
typedef struct ls_run {
    int64_t start, numel; /* elements from the region's start */
    int owner;            /* -1: all-reduced */
} ls_run;

typedef struct ls_bucket {
    int lo, hi;
    size_t bytes;
    int64_t numel;
    void *fusion;        /* NULL: single gradient reduced in place */
    size_t start;        /* the reduced region's byte offset in fusion (a view's leading pad) */
    ls_allocator *owner; /* fusion's allocator (NULL: malloc) */
    int view;            /* the gradients live in fusion */
    void *wire;          /* compression: the 16-bit copy that is all-reduced (r->alloc's, else malloc) */
    int pending;         /* gradients not yet ready this step */
    ls_run *runs;        /* [nruns]: one run (owner -1) without owners */
    int nruns;
    int64_t *seg_count; /* with owners: the runs' counts and owners, for ls_comm_ireduce_segments */
    int *seg_root;
    ls_comm_request *req; /* in flight */
    int launched;
    double t_launch, t_done; /* timeline: launched, first seen complete (0: not yet) */
} ls_bucket;

struct ls_reducer {
    ls_comm *comm;
    ls_ctx *ctx;
    ls_allocator *alloc; /* device memory of the gradients */
    int on_device;
    int n;
    ls_tensor **grads; /* [n] */
    int *bucket_of;    /* [n] */
    int *owners;       /* [n] the rank each gradient is reduced to; NULL: all-reduced */
    int rank;
    size_t *offset;        /* [n] byte offset within the bucket's fusion buffer */
    unsigned char *viewed; /* [n] grads[i]->data points into its bucket (its own memory was freed) */
    unsigned char *ready;  /* [n] */
    ls_bucket *b;
    int nb;
    int next_launch;
    int active;
    double scale;
    ls_status err; /* first error of the step */
    ls_reducer_config cfg;
};

static ls_status ls_env_mib(const char *name, size_t *out) {
    const char *s = getenv(name);
    if (!s || !*s) return LS_OK;
    double v; /* decimal digits: strtod took "0x10" for 16 MiB, and a space or '+' */
    if (!ls_parse_decimal(s, &v) || !(v > 0) || v > 1e6)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s=%s: expected a positive size in MiB (e.g. 25 or 0.5)", name, s);
    size_t bytes = (size_t)llround(v * (double)LS_MIB);
    *out = bytes ? bytes : 1;
    return LS_OK;
}

ls_status ls_reducer_config_resolve(const ls_reducer_config *cfg, ls_reducer_config *out) {
    LS_CHECK_ARG(out, "ls_reducer_config_resolve: out is NULL");
    ls_reducer_config r = {LS_MIB, 25 * LS_MIB, 1, -1};
    LS_CHECK(ls_env_mib("LOCKSTEP_FIRST_BUCKET_MB", &r.first_bucket_bytes));
    LS_CHECK(ls_env_mib("LOCKSTEP_BUCKET_MB", &r.bucket_bytes));
    const char *v = getenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW");
    if (v && *v) {
        if (!strcmp(v, "1") || !strcmp(v, "on"))
            r.bucket_view = 1;
        else if (!strcmp(v, "0") || !strcmp(v, "off"))
            r.bucket_view = -1;
        else
            return ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_GRAD_AS_BUCKET_VIEW=%s: expected 1, on, 0 or off", v);
    }
    v = getenv("LOCKSTEP_GRAD_COMPRESS");
    if (v && *v) {
        if (!strcmp(v, "none") || !strcmp(v, "off"))
            r.compress = -1;
        else if (!strcmp(v, "fp16") || !strcmp(v, "f16"))
            r.compress = LS_REDUCER_F16;
        else if (!strcmp(v, "bf16"))
            r.compress = LS_REDUCER_BF16;
        else
            return ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_GRAD_COMPRESS=%s: expected none, fp16 or bf16", v);
    }
    if (cfg && cfg->compress) r.compress = cfg->compress;
    if (r.compress != -1 && r.compress != LS_REDUCER_F16 && r.compress != LS_REDUCER_BF16)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "gradient compression %d: expected LS_REDUCER_F16 or LS_REDUCER_BF16",
                        r.compress);
    if (cfg && cfg->first_bucket_bytes) r.first_bucket_bytes = cfg->first_bucket_bytes;
    if (cfg && cfg->bucket_bytes) r.bucket_bytes = cfg->bucket_bytes;
    if (cfg && cfg->bucket_view) r.bucket_view = cfg->bucket_view > 0 ? 1 : -1;
    *out = r;
    return LS_OK;
}

int ls_reducer_plan_buckets(int n, const size_t *nbytes, size_t first_cap, size_t cap, int *bucket_of) {
    int nb = 0;
    size_t fill = 0;
    int open = 0; /* the current bucket has gradients */
    for (int i = n - 1; i >= 0; i--) {
        size_t limit = nb == 0 ? first_cap : cap;
        if (open && fill + nbytes[i] > limit) {
            nb++;
            fill = 0;
            open = 0;
            limit = cap;
        }
        bucket_of[i] = nb;
        fill += nbytes[i];
        open = 1;
        if (fill > limit) { /* oversized gradient alone in its bucket: close it */
            nb++;
            fill = 0;
            open = 0;
        }
    }
    return open ? nb + 1 : nb;
}

/* A fused bucket's reduced region: the gradients' offsets in it (hi down to lo), each aligned;
 * returns its size. The same whether the gradients live there or are copied in, so every rank
 * reduces the same count (and sums each element in the same order) whatever it chose. The buffer is
 * LS_VIEW_ALIGN larger: the region starts at its first aligned address past the buffer's start (so
 * no gradient's data is the allocation itself). off may be NULL. */
static size_t ls_bucket_layout(int lo, int hi, const size_t *nbytes, size_t *off) {
    size_t o = 0;
    for (int i = hi; i >= lo; i--) {
        o = (o + LS_VIEW_ALIGN - 1) / LS_VIEW_ALIGN * LS_VIEW_ALIGN;
        if (off) off[i] = o;
        o += nbytes[i];
    }
    return o;
}

size_t ls_reducer_extra_bytes(int n, const size_t *nbytes, const int *bucket_of, int view, int compress) {
    size_t total = 0;
    for (int hi = n - 1; hi >= 0;) {
        int lo = hi;
        size_t sum = nbytes[hi];
        while (lo > 0 && bucket_of[lo - 1] == bucket_of[hi]) sum += nbytes[--lo];
        size_t region = lo < hi ? ls_bucket_layout(lo, hi, nbytes, NULL) : sum;
        if (lo < hi) total += region + LS_VIEW_ALIGN - (view ? sum : 0);
        if (compress) total += region / 2 ? region / 2 : 1;
        hi = lo - 1;
    }
    return total;
}

static ls_dtype ls_wire_type(const ls_reducer *r) { return r->cfg.compress == LS_REDUCER_F16 ? LS_F16 : LS_BF16; }

/* n elements from f32 to the wire type (to_wire) or back, on the gradients' device. */
static ls_status ls_wire_convert(ls_reducer *r, int to_wire, void *f32, void *wire, int64_t n) {
    ls_dtype wt = ls_wire_type(r);
    if (r->ctx && r->ctx->ops && r->ctx->ops->convert)
        return to_wire ? r->ctx->ops->convert(r->ctx->state, n, LS_F32, f32, wt, wire)
                       : r->ctx->ops->convert(r->ctx->state, n, wt, wire, LS_F32, f32);
    if (r->on_device) return ls_error(LS_ERR_UNSUPPORTED, "gradient reducer: the device's op table has no convert op");
    if (to_wire) {
        if (wt == LS_F16)
            ls_half_f32_to_f16_n(f32, wire, n);
        else
            ls_half_f32_to_bf16_n(f32, wire, n);
    } else {
        if (wt == LS_F16)
            ls_half_f16_to_f32_n(wire, f32, n);
        else
            ls_half_bf16_to_f32_n(wire, f32, n);
    }
    return LS_OK;
}

/* Copies and fills of the gradients' memory go through a (their allocator) on a device; host ones
 * are plain. to_dev/from_dev: whether each side is that memory (else host memory). */
static ls_status ls_dev_copy2(ls_reducer *r, ls_allocator *a, void *dst, int to_dev, const void *src, int from_dev,
                              size_t bytes) {
    if (!bytes || dst == src) return LS_OK;
    if (!r->on_device) {
        memcpy(dst, src, bytes);
        return LS_OK;
    }
    return ls_allocator_copy(a, dst, to_dev, src, from_dev, bytes);
}

static ls_status ls_dev_copy(ls_reducer *r, ls_allocator *a, void *dst, const void *src, size_t bytes) {
    return ls_dev_copy2(r, a, dst, 1, src, 1, bytes);
}

static ls_status ls_dev_zero(ls_reducer *r, ls_allocator *a, void *p, size_t bytes) {
    if (!r->on_device) {
        memset(p, 0, bytes);
        return LS_OK;
    }
    return ls_allocator_set_zero(a, p, bytes);
}

/* Bucket k's gradients can live in its buffer: each one allocation (not a view, nor already
 * another reducer's bucket view, nor listed twice) of one allocator: on a device, the context's
 * (whose stream orders the copies and frees). */
static int ls_view_ok(const ls_reducer *r, const ls_bucket *b) {
    ls_allocator *a = r->grads[b->lo]->alloc;
    if (!a || ls_allocator_device(a).type != r->grads[b->lo]->device.type || (r->on_device && a != r->alloc)) return 0;
    for (int i = b->lo; i <= b->hi; i++) {
        if (r->grads[i]->alloc != a || !ls_allocator_owns(a, r->grads[i]->data)) return 0;
        for (int j = b->lo; j < i; j++)
            if (r->grads[j] == r->grads[i] || r->grads[j]->data == r->grads[i]->data) return 0;
    }
    return 1;
}

/* Bucket k's buffer (zeroed: the padding is reduced too) and, as views, its gradients moved in
 * (their own memory freed). On failure the ones moved so far are marked, for destroy to undo. */
static ls_status ls_make_bucket(ls_reducer *r, int k, const size_t *nbytes, int view) {
    ls_bucket *b = &r->b[k];
    ls_allocator *a = view ? r->grads[b->lo]->alloc : r->alloc;
    size_t region = ls_bucket_layout(b->lo, b->hi, nbytes, r->offset), bytes = region + LS_VIEW_ALIGN;
    if (a) {
        char what[48];
        snprintf(what, sizeof what, "gradient bucket %d", k);
        LS_CHECK(ls_alloc(a, bytes, what, &b->fusion));
    } else if (!(b->fusion = malloc(bytes))) {
        return ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: fusion buffer %d of %zu bytes", k, bytes);
    }
    b->owner = a;
    b->start = LS_VIEW_ALIGN - (size_t)((uintptr_t)b->fusion % LS_VIEW_ALIGN);
    b->numel = (int64_t)(region / sizeof(float));
    for (int i = b->lo; i <= b->hi; i++) r->offset[i] += b->start;
    LS_CHECK(ls_dev_zero(r, a, b->fusion, bytes));
    if (!view) return LS_OK;
    b->view = 1;
    for (int i = b->hi; i >= b->lo; i--) {
        ls_tensor *g = r->grads[i];
        void *dst = (char *)b->fusion + r->offset[i];
        LS_CHECK(ls_dev_copy(r, a, dst, g->data, nbytes[i]));
        ls_free(a, g->data);
        g->data = dst;
        r->viewed[i] = 1;
    }
    return LS_OK;
}

/* Give bucket k's gradients their own memory back, with their values, and free its buffer. The
 * values go through host memory and the buffer is freed first, so this needs no device memory
 * beyond what the bucket held (a trainer is often destroyed after running out of it). */
static void ls_undo_view(ls_reducer *r, int k) {
    ls_bucket *b = &r->b[k];
    size_t total = 0;
    for (int i = b->lo; i <= b->hi; i++)
        if (r->viewed[i]) total += ls_tensor_nbytes(r->grads[i]);
    char *host = malloc(total ? total : 1);
    const char *why = host ? NULL : "out of host memory";
    size_t o = 0;
    for (int i = b->hi; i >= b->lo && !why; i--) {
        if (!r->viewed[i]) continue;
        size_t n = ls_tensor_nbytes(r->grads[i]);
        if (ls_dev_copy2(r, b->owner, host + o, 0, r->grads[i]->data, 1, n) != LS_OK) why = ls_last_error();
        o += n;
    }
    if (why) { /* the gradients keep living in the bucket */
        LS_LOG_W("gradient reducer: cannot give bucket %d's gradients their own memory back (%s); its buffer "
                 "stays allocated",
                 k, why);
        free(host);
        return;
    }
    ls_free(b->owner, b->fusion);
    b->fusion = NULL;
    o = 0;
    for (int i = b->hi; i >= b->lo; i--) {
        if (!r->viewed[i]) continue;
        ls_tensor *g = r->grads[i];
        size_t n = ls_tensor_nbytes(g);
        void *p = NULL;
        if (ls_alloc(b->owner, n, "a gradient", &p) != LS_OK ||
            ls_dev_copy2(r, b->owner, p, 1, host + o, 0, n) != LS_OK) {
            LS_LOG_E("gradient reducer: gradient %d has no memory after its bucket was freed: %s", i, ls_last_error());
            if (p) ls_free(b->owner, p);
            p = NULL;
        }
        g->data = p;
        r->viewed[i] = 0;
        o += n;
    }
    free(host);
}

/* Every rank must plan the same buckets (LOCKSTEP_BUCKET_MB and LOCKSTEP_FIRST_BUCKET_MB may
 * differ between ranks): else a bucket's all-reduce has different counts on different ranks, which
 * overruns buffers or hangs. One small all-reduce of a hash of the plan at create, which also
 * tells every rank whether one failed to make its buckets (failed: this one did), so that all
 * return an error rather than some wait for the others in their first step. */
static ls_status ls_check_plan(ls_reducer *r, int failed) {
    if (ls_comm_world(r->comm) <= 1) return LS_OK;
    uint64_t h = 1469598103934665603ULL;
    int64_t items[3];
    for (int k = -1; k < r->nb; k++) {
        int m = 2;
        items[0] = r->nb;
        items[1] = r->cfg.compress;
        if (k >= 0) {
            items[0] = r->b[k].lo;
            items[1] = r->b[k].hi;
            items[2] = r->b[k].numel;
            m = 3;
        }
        for (int j = 0; j < m; j++) {
            h ^= (uint64_t)items[j];
            h *= 1099511628211ULL;
        }
    }
    for (int i = 0; r->owners && i < r->n; i++) { /* the owners too: a run reduced to different roots hangs */
        h ^= (uint64_t)(r->owners[i] + 2);
        h *= 1099511628211ULL;
    }
    /* max of the halves and of their negations: the largest and the smallest hash on any rank */
    int32_t v[5] = {(int32_t)(h & 0x7fffffff), (int32_t)((h >> 31) & 0x7fffffff), 0, 0, failed != 0};
    v[2] = -v[0];
    v[3] = -v[1];
    LS_CHECK(ls_comm_allreduce_host(r->comm, v, 5, LS_I32, LS_REDUCE_MAX));
    if (v[4] && !failed)
        return ls_error(LS_ERR_COMM, "gradient reducer: another rank could not make its gradient buckets (its "
                                     "own error says why)");
    if (v[0] != -v[2] || v[1] != -v[3])
        return ls_error(
            LS_ERR_MISMATCH,
            "gradient buckets differ between ranks (here %d buckets, first cap %zu B, cap %zu B, %s%s): "
            "LOCKSTEP_BUCKET_MB, LOCKSTEP_FIRST_BUCKET_MB, LOCKSTEP_GRAD_COMPRESS%s must be the same "
            "on every rank",
            r->nb, r->cfg.first_bucket_bytes, r->cfg.bucket_bytes,
            r->cfg.compress > 0 ? ls_dtype_name(ls_wire_type(r)) : "f32", r->owners ? ", reduced to their owners" : "",
            r->owners ? " and the gradients' owners (LOCKSTEP_SHARD_REDUCE, the optimizer's partition)" : "");
    return LS_OK;
}

/* This rank cannot make its reducer: it still takes part in the plan check, as failed, so that the
 * other ranks return an error too rather than wait for it; returns s (its message kept). */
static ls_status ls_refuse(ls_comm *c, ls_status s) {
    if (ls_comm_world(c) <= 1) return s;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ls_last_error());
    int32_t v[5] = {0, 0, 0, 0, 1};
    (void)ls_comm_allreduce_host(c, v, 5, LS_I32, LS_REDUCE_MAX);
    return ls_error(s, "%s", msg);
}

static ls_status ls_dev_scale(ls_reducer *r, void *buf, int64_t n) {
    if (r->scale == 1.0 || n == 0) return LS_OK;
    if (!r->on_device) {
        float *x = buf, s = (float)r->scale;
        for (int64_t i = 0; i < n; i++) x[i] *= s;
        return LS_OK;
    }
    if (!r->ctx || !r->ctx->ops || !r->ctx->ops->scale)
        return ls_error(LS_ERR_UNSUPPORTED, "gradient reducer: the device's op table has no scale op");
    return r->ctx->ops->scale(r->ctx->state, LS_F32, n, r->scale, buf);
}

void ls_reducer_destroy(ls_reducer *r) {
    if (!r) return;
    for (int k = 0; r->b && k < r->nb; k++) {
        if (r->b[k].req) ls_comm_wait(&r->b[k].req);
        free(r->b[k].runs);
        free(r->b[k].seg_count);
        free(r->b[k].seg_root);
        if (r->alloc)
            ls_free(r->alloc, r->b[k].wire);
        else
            free(r->b[k].wire);
        if (r->b[k].view) {
            ls_undo_view(r, k); /* frees the buffer, unless the gradients must stay in it */
            continue;
        }
        if (r->b[k].owner)
            ls_free(r->b[k].owner, r->b[k].fusion);
        else
            free(r->b[k].fusion);
    }
    free(r->b);
    free(r->grads);
    free(r->bucket_of);
    free(r->owners);
    free(r->offset);
    free(r->viewed);
    free(r->ready);
    free(r);
}

/* Bucket k's runs: its gradients in layout order (hi down to lo), split where the owner changes;
 * a run reaches to the next one's start (the padding between them is zero). */
static ls_status ls_make_runs(ls_reducer *r, int k) {
    ls_bucket *b = &r->b[k];
    int m = 1;
    for (int i = b->hi - 1; r->owners && i >= b->lo; i--) m += r->owners[i] != r->owners[i + 1];
    if (!(b->runs = calloc((size_t)m, sizeof *b->runs)))
        return ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: out of host memory");
    b->nruns = m;
    int j = 0;
    b->runs[0].owner = r->owners ? r->owners[b->hi] : -1;
    for (int i = b->hi - 1; r->owners && i >= b->lo; i--) {
        if (r->owners[i] == r->owners[i + 1]) continue;
        ls_run *run = &b->runs[++j];
        run->owner = r->owners[i];
        run->start = (int64_t)((r->offset[i] - b->start) / sizeof(float)); /* m > 1: a fused bucket */
    }
    for (j = 0; j < m; j++) b->runs[j].numel = (j + 1 < m ? b->runs[j + 1].start : b->numel) - b->runs[j].start;
    if (!r->owners) return LS_OK;
    b->seg_count = calloc((size_t)m, sizeof *b->seg_count);
    b->seg_root = calloc((size_t)m, sizeof *b->seg_root);
    if (!b->seg_count || !b->seg_root) return ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: out of host memory");
    for (j = 0; j < m; j++) {
        b->seg_count[j] = b->runs[j].numel;
        b->seg_root[j] = b->runs[j].owner;
    }
    return LS_OK;
}

ls_status ls_reducer_create(ls_comm *c, ls_ctx *ctx, int n, ls_tensor *const *grads, const ls_reducer_config *cfg,
                            ls_reducer **out) {
    return ls_reducer_create_to_owners(c, ctx, n, grads, NULL, cfg, out);
}

ls_status ls_reducer_create_to_owners(ls_comm *c, ls_ctx *ctx, int n, ls_tensor *const *grads, const int *owners,
                                      const ls_reducer_config *cfg, ls_reducer **out) {
    if (!c) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_create: communicator is NULL");
    /* from here on every failure goes through ls_refuse: the other ranks learn of it */
    if (!out) return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_create: out is NULL"));
    *out = NULL;
    if (n < 0 || (n > 0 && !grads))
        return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_create: bad gradient list (%d)", n));
    ls_reducer_config rc;
    ls_status s = ls_reducer_config_resolve(cfg, &rc);
    if (s != LS_OK) return ls_refuse(c, s);
    ls_device dev = ls_comm_device(c);
    if (ctx && ctx->device.type != dev.type)
        return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT,
                                     "ls_reducer_create: the context and the communicator are on different devices"));
    for (int i = 0; i < n; i++) {
        char d[64];
        if (!grads[i])
            return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_create: gradient %d is NULL", i));
        if (grads[i]->dtype != LS_F32)
            return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT,
                                         "ls_reducer_create: gradient %d is %s; the reducer takes f32", i,
                                         ls_tensor_describe(grads[i], d, sizeof d)));
        if (grads[i]->device.type != dev.type)
            return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT,
                                         "ls_reducer_create: gradient %d is %s, not on the communicator's device", i,
                                         ls_tensor_describe(grads[i], d, sizeof d)));
        if (ls_tensor_numel(grads[i]) > 0 && !grads[i]->data)
            return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_create: gradient %d has no data", i));
        if (owners && (owners[i] < 0 || owners[i] >= ls_comm_world(c)))
            return ls_refuse(c, ls_error(LS_ERR_INVALID_ARGUMENT,
                                         "ls_reducer_create: gradient %d's owner %d is not a rank of %d", i, owners[i],
                                         ls_comm_world(c)));
    }
    ls_reducer *r = calloc(1, sizeof *r);
    if (!r) return ls_refuse(c, ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: out of host memory"));
    r->comm = c;
    r->ctx = ctx;
    r->cfg = rc;
    r->on_device = dev.type != LS_DEVICE_CPU;
    r->alloc = ctx ? ctx->alloc : NULL;
    if (r->on_device && !r->alloc) {
        free(r);
        return ls_refuse(c,
                         ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_create: device gradients need their context"));
    }
    r->n = n;
    r->rank = ls_comm_rank(c);
    size_t nn = (size_t)(n > 0 ? n : 1);
    r->grads = calloc(nn, sizeof *r->grads);
    r->bucket_of = calloc(nn, sizeof *r->bucket_of);
    r->offset = calloc(nn, sizeof *r->offset);
    r->ready = calloc(nn, 1);
    r->viewed = calloc(nn, 1);
    size_t *nbytes = calloc(nn, sizeof *nbytes);
    int voted = 0; /* the plan check ran */
    if (owners && (r->owners = malloc(nn * sizeof *r->owners))) memcpy(r->owners, owners, (size_t)n * sizeof *owners);
    if (!r->grads || !r->bucket_of || !r->offset || !r->ready || !r->viewed || !nbytes || (owners && !r->owners)) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: out of host memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        r->grads[i] = grads[i];
        nbytes[i] = ls_tensor_nbytes(grads[i]);
    }
    r->nb = ls_reducer_plan_buckets(n, nbytes, rc.first_bucket_bytes, rc.bucket_bytes, r->bucket_of);
    r->b = calloc((size_t)(r->nb > 0 ? r->nb : 1), sizeof *r->b);
    if (!r->b) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: out of host memory");
        goto fail;
    }
    for (int k = 0; k < r->nb; k++) r->b[k].lo = n, r->b[k].hi = -1;
    for (int i = n - 1; i >= 0; i--) {
        ls_bucket *b = &r->b[r->bucket_of[i]];
        if (b->hi < 0) b->hi = i;
        b->lo = i;
        b->bytes += nbytes[i];
        b->numel += ls_tensor_numel(grads[i]); /* a fused bucket's (padded) count: ls_make_bucket */
    }
    int views = 0;
    for (int k = 0; k < r->nb && s == LS_OK; k++) {
        ls_bucket *b = &r->b[k];
        if (b->hi == b->lo) continue; /* single gradient: in place */
        int view = rc.bucket_view > 0 && ls_view_ok(r, b);
        s = ls_make_bucket(r, k, nbytes, view);
        views += view;
    }
    for (int k = 0; k < r->nb && s == LS_OK; k++) s = ls_make_runs(r, k);
    for (int k = 0; k < r->nb && s == LS_OK && rc.compress > 0; k++) { /* the 16-bit copies */
        ls_bucket *b = &r->b[k];
        size_t wb = (size_t)b->numel * 2;
        if (r->alloc) {
            char what[48];
            snprintf(what, sizeof what, "gradient bucket %d (%s)", k, ls_dtype_name(ls_wire_type(r)));
            s = ls_alloc(r->alloc, wb ? wb : 1, what, &b->wire);
        } else if (!(b->wire = malloc(wb ? wb : 1))) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "gradient reducer: 16-bit copy of bucket %d (%zu bytes)", k, wb);
        }
    }
    /* the freed gradient memory may be reused by work on another stream (a batch upload): let the
     * copies out of it finish first */
    if (s == LS_OK && views && r->on_device) s = ls_ctx_synchronize(ctx);
    char msg[512] = "";
    if (s != LS_OK) snprintf(msg, sizeof msg, "%s", ls_last_error());
    ls_status agreed = ls_check_plan(r, s != LS_OK); /* on every rank, also one that failed */
    voted = 1;
    if (s != LS_OK) {
        s = ls_error(s, "%s", msg);
        goto fail;
    }
    LS_CHECK_GOTO(agreed, s, fail);
    free(nbytes);
    int runs = 0;
    for (int k = 0; k < r->nb; k++) runs += r->b[k].nruns;
    char own[64] = "";
    if (owners) snprintf(own, sizeof own, ", reduced to their owners in %d runs", runs);
    LS_LOG_D("gradient reducer: %d gradients in %d buckets (first cap %zu B, cap %zu B), %d of the gradients views "
             "into their bucket%s",
             n, r->nb, rc.first_bucket_bytes, rc.bucket_bytes, views, own);
    *out = r;
    return LS_OK;
fail:
    free(nbytes);
    ls_reducer_destroy(r);
    return voted ? s : ls_refuse(c, s);
}

ls_status ls_reducer_zero_grads(ls_reducer *r) {
    if (!r) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_zero_grads: reducer is NULL");
    if (r->active)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_reducer_zero_grads: a step is in progress (between ls_reducer_begin and finish)");
    for (int k = 0; k < r->nb; k++) {
        ls_bucket *b = &r->b[k];
        if (b->view) {
            LS_CHECK(ls_dev_zero(r, b->owner, (char *)b->fusion + b->start, (size_t)b->numel * sizeof(float)));
            continue;
        }
        for (int i = b->lo; i <= b->hi; i++) LS_CHECK(ls_tensor_zero(r->grads[i]));
    }
    return LS_OK;
}

ls_status ls_reducer_begin(ls_reducer *r, double post_scale) {
    if (!r) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_begin: reducer is NULL");
    if (r->active)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_reducer_begin: the previous step was not finished (ls_reducer_finish)");
    if (!isfinite(post_scale))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_begin: post_scale %g is not finite", post_scale);
    r->active = 1;
    r->scale = post_scale;
    r->next_launch = 0;
    r->err = LS_OK;
    memset(r->ready, 0, (size_t)(r->n > 0 ? r->n : 1));
    for (int k = 0; k < r->nb; k++) {
        r->b[k].pending = r->b[k].hi - r->b[k].lo + 1;
        r->b[k].launched = 0;
        r->b[k].req = NULL;
    }
    return LS_OK;
}

static ls_status ls_bucket_launch(ls_reducer *r, int k) {
    ls_bucket *b = &r->b[k];
    void *buf = b->fusion ? (char *)b->fusion + b->start : r->grads[b->lo]->data;
    b->launched = 1;
    b->t_launch = ls_timeline_active() ? ls_timeline_now() : 0.0;
    b->t_done = 0;
    ls_status s = LS_OK;
    if (b->wire) s = ls_wire_convert(r, 1, buf, b->wire, b->numel);
    const ls_dtype t = b->wire ? ls_wire_type(r) : LS_F32;
    void *p = b->wire ? b->wire : buf;
    /* with owners, each run to its owner, all at once (the runs of different owners use both
     * directions of a link together) */
    if (s == LS_OK)
        s = b->seg_count
                ? ls_comm_ireduce_segments(r->comm, p, b->nruns, b->seg_count, b->seg_root, t, LS_REDUCE_SUM, &b->req)
                : ls_comm_iallreduce(r->comm, p, b->numel, t, LS_REDUCE_SUM, &b->req);
    if (s != LS_OK) return ls_error_context(s, "gradient bucket %d (%zu bytes)", k, b->bytes);
    return LS_OK;
}

/* Mark i ready (copy into its fusion buffer), then launch the buckets that can go, in order. */
static ls_status ls_mark(ls_reducer *r, int i) {
    ls_bucket *b = &r->b[r->bucket_of[i]];
    r->ready[i] = 1;
    if (b->fusion && !b->view) {
        ls_status s = ls_dev_copy(r, r->alloc, (char *)b->fusion + r->offset[i], r->grads[i]->data,
                                  ls_tensor_nbytes(r->grads[i]));
        if (s != LS_OK) return ls_error_context(s, "copying gradient %d into its bucket", i);
    }
    b->pending--;
    while (r->next_launch < r->nb && r->b[r->next_launch].pending == 0) LS_CHECK(ls_bucket_launch(r, r->next_launch++));
    return LS_OK;
}

ls_status ls_reducer_grad_ready(ls_reducer *r, int i) {
    if (!r) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_grad_ready: reducer is NULL");
    if (!r->active)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_grad_ready(%d) outside a step (ls_reducer_begin)", i);
    if (i < 0 || i >= r->n)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_grad_ready: gradient %d is not in 0..%d", i, r->n - 1);
    if (r->ready[i])
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_grad_ready: gradient %d marked ready twice in one step",
                        i);
    if (r->err != LS_OK) return ls_error(r->err, "gradient reducer: an earlier error in this step");
    ls_status s = ls_mark(r, i);
    if (s != LS_OK) {
        r->err = s;
        return s;
    }
    /* Drive progress of what is in flight (needed by nonblocking MPI progress). */
    for (int k = 0; k < r->next_launch; k++) {
        if (!r->b[k].req) continue;
        int done = 0;
        s = ls_comm_test(r->b[k].req, &done);
        if (s != LS_OK) {
            r->err = s;
            return s;
        }
        if (!done) break;
        if (r->b[k].t_launch > 0 && r->b[k].t_done == 0) r->b[k].t_done = ls_timeline_now();
    }
    return LS_OK;
}

/* The timeline's row for bucket k: from its launch to the moment it was first seen complete. */
static void ls_bucket_span(const ls_bucket *b, int k) {
    if (!ls_timeline_active() || b->t_launch <= 0) return;
    char lane[32], name[64];
    snprintf(lane, sizeof lane, "bucket %d", k);
    snprintf(name, sizeof name, "%s %.2f MiB (bucket %d)", b->runs[0].owner < 0 ? "allreduce" : "reduce to owners",
             (double)b->bytes / (double)LS_MIB, k);
    ls_timeline_lane_span(lane, name, "comm", b->t_launch, b->t_done > 0 ? b->t_done : ls_timeline_now());
}

ls_status ls_reducer_finish(ls_reducer *r) {
    if (!r) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_finish: reducer is NULL");
    if (!r->active) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_finish outside a step (ls_reducer_begin)");
    ls_status err = r->err;
    char msg[512] = "";
    if (err != LS_OK) snprintf(msg, sizeof msg, "%s", ls_last_error());
    /* Unmarked gradients count as ready, in backward (reverse) order. */
    for (int i = r->n - 1; i >= 0 && err == LS_OK; i--) {
        if (r->ready[i]) continue;
        err = ls_mark(r, i);
        if (err != LS_OK) snprintf(msg, sizeof msg, "%s", ls_last_error());
    }
    for (int k = 0; k < r->nb; k++) {
        ls_bucket *b = &r->b[k];
        if (!b->launched) continue;
        /* In stream order (nccl: the host goes on while the last buckets are in flight, the
         * scaling below waits on the device); on the host under the timeline, whose bucket rows
         * end when the host saw them complete. */
        ls_status s = ls_timeline_active() ? ls_comm_wait(&b->req) : ls_comm_wait_stream(&b->req);
        b->req = NULL;
        ls_bucket_span(b, k);
        if (s == LS_OK && err == LS_OK) {
            /* only the runs this rank received: another owner's hold this rank's own gradients */
            char *buf = b->fusion ? (char *)b->fusion + b->start : r->grads[b->lo]->data;
            for (int j = 0; j < b->nruns && s == LS_OK; j++) {
                const ls_run *run = &b->runs[j];
                if (run->owner >= 0 && run->owner != r->rank) continue;
                float *x = (float *)buf + run->start;
                if (b->wire) s = ls_wire_convert(r, 0, x, (uint16_t *)b->wire + run->start, run->numel);
                if (s == LS_OK) s = ls_dev_scale(r, x, run->numel);
            }
            for (int i = b->hi; i >= b->lo && s == LS_OK && b->fusion && !b->view; i--)
                if (!r->owners || r->owners[i] == r->rank)
                    s = ls_dev_copy(r, r->alloc, r->grads[i]->data, (char *)b->fusion + r->offset[i],
                                    ls_tensor_nbytes(r->grads[i]));
        }
        if (s != LS_OK && err == LS_OK) {
            err = ls_error_context(s, "gradient bucket %d (%zu bytes)", k, b->bytes);
            snprintf(msg, sizeof msg, "%s", ls_last_error());
        }
    }
    r->active = 0;
    r->err = LS_OK;
    if (err != LS_OK) return ls_error(err, "%s", msg);
    return LS_OK;
}

int ls_reducer_num_buckets(const ls_reducer *r) { return r ? r->nb : 0; }

ls_status ls_reducer_bucket(const ls_reducer *r, int k, ls_reducer_bucket_info *out) {
    if (!r || !out || k < 0 || k >= r->nb)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_reducer_bucket: no bucket %d", k);
    out->lo = r->b[k].lo;
    out->hi = r->b[k].hi;
    out->bytes = r->b[k].bytes;
    out->fused = r->b[k].fusion != NULL;
    out->view = r->b[k].view;
    return LS_OK;
}

int ls_reducer_bucket_of(const ls_reducer *r, int i) {
    if (!r || i < 0 || i >= r->n) return -1;
    return r->bucket_of[i];
}

int ls_reducer_launched(const ls_reducer *r) { return r ? r->next_launch : 0; }

ls_reducer_config ls_reducer_get_config(const ls_reducer *r) {
    ls_reducer_config z = {0, 0, 0, 0};
    return r ? r->cfg : z;
}
