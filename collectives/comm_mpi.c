/* comm_mpi.c: the MPI backend. Collectives run on host memory over a duplicate of MPI_COMM_WORLD.
 * Device buffers are staged through host memory with the context's allocator copy unless the MPI
 * is CUDA-aware (MPIX_Query_cuda_support, or LOCKSTEP_MPI_CUDA_AWARE=0|1). f16/bf16 sums go to MPI
 * as 16 bits, with a sum operator of our own (each partial sum computed in f32 and rounded to 16
 * bits, as NCCL does: half the bytes of f32 on the wire); their avg, max and min are staged through
 * f32 (one rounding of the f32 result back to 16 bits); avg is sum then divide. Float max and min
 * use operators of our own too (fmax, fmin: a NaN is ignored where another rank has a number, as
 * NCCL's).
 * Progress (LOCKSTEP_MPI_PROGRESS): "thread" (default when MPI gives MPI_THREAD_MULTIPLE): async
 * collectives are queued to one communication thread per communicator that runs them in order with
 * the blocking MPI calls, so they progress while the caller computes; blocking calls run on the
 * caller's thread when the queue is empty, else go through the queue (collectives stay ordered).
 * Thread discipline: MPI_Init_thread asks for MPI_THREAD_MULTIPLE; per communicator, calls are
 * serialized (the caller touches MPI only while its communication thread is idle), but several
 * communicators' threads may call MPI at once, hence MULTIPLE. Where MPI offers less, or with
 * "nonblocking": MPI_I* calls progressed by ls_comm_test/wait on the caller's thread (the reducer
 * tests its in-flight buckets on every grad_ready), posted in start order with at most
 * LOCKSTEP_MPI_WINDOW outstanding (default 2 on one node, 1 across nodes: many concurrent calls ran
 * 2-9x slower, see docs/performance.md), the next posted as earlier ones complete.
 * Staging copies and conversions always run on the caller's thread (at start and at wait). Staging
 * buffers are kept for reuse (as many as were in use at once, up to LS_MPI_STAGE_KEEP_BYTES in
 * all); for device buffers they are pinned host memory (the device allocator's host_alloc) where it
 * can, else plain host memory; pinned blocks are counted in the device allocator's pinned_bytes,
 * apart from its live and peak bytes (as pinned batches are).
 * An all-reduce over LOCKSTEP_MPI_CHUNK bytes (default 16 MiB on one node, 1 MiB across nodes; 0: no
 * limit) goes to MPI as several calls of at most that size (see ls_mpi_exec and ls_mpi_pump). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif

#include "comm_impl.h"
#include "half_impl.h"
#include "log.h"
#include "parse.h"
#include "timeline.h"

/* MPI is initialized once per process: count the communicators using it; an MPI that lockstep
 * initialized is finalized at the process's exit (ls_mpi_at_exit), once the last one is gone. */
static pthread_mutex_t ls_mpi_global_lock = PTHREAD_MUTEX_INITIALIZER;
static int ls_mpi_users = 0;
static int ls_mpi_we_initialized = 0;
static int ls_mpi_exit_hook = 0; /* ls_mpi_at_exit registered */
static pid_t ls_mpi_pid;         /* the process that initialized MPI (a fork()ed child's exit is not its) */

/* Seconds a rank that exits with a non-zero status waits for every rank to reach its exit before
 * it aborts the job (see ls_mpi_at_exit). */
#define LS_MPI_EXIT_GRACE_S 3.0

static ls_status ls_mpi_error(int rc, const char *call) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    return ls_error(LS_ERR_COMM, "%s failed: %s", call, s);
}

#define LS_MPI_CHECK(call, name)                                                                                       \
    do {                                                                                                               \
        int ls_mpi_rc_ = (call);                                                                                       \
        if (ls_mpi_rc_ != MPI_SUCCESS) return ls_mpi_error(ls_mpi_rc_, name);                                          \
    } while (0)

typedef struct ls_mpi_req ls_mpi_req;

/* One MPI call of a collective in segments (ls_comm_ireduce_segments): elements off.. of the
 * buffer, to or from root. */
typedef struct ls_mpi_call {
    int64_t off; /* elements from the collective's start */
    int count;
    int root;
    int seg;     /* its segment */
    int64_t rel; /* elements from its segment's start */
    void *p;     /* its data (staged or the caller's) */
} ls_mpi_call;

/* Staging blocks kept for the next collectives: at most this many, this many bytes in all (the
 * smallest go first); a kept block serves a request of at least half its size. */
#define LS_MPI_STAGE_KEEP 32
#define LS_MPI_STAGE_KEEP_BYTES ((size_t)1 << 30)
/* the default all-reduce part sizes (ls_mpi_agree_chunk): every rank on one node, ranks across nodes */
#define LS_MPI_CHUNK_NODE ((size_t)16 << 20)
#define LS_MPI_CHUNK_NET ((size_t)1 << 20)
/* nonblocking progress: the default number of MPI calls outstanding at once (LOCKSTEP_MPI_WINDOW)
 * where every rank is on one node, and where the ranks span nodes (see ls_mpi_pump) */
#define LS_MPI_WINDOW_NODE 2
#define LS_MPI_WINDOW_NET 1

typedef struct ls_stage_block {
    void *p;
    size_t bytes;
    int pinned;         /* from `from`'s host_alloc (else plain host memory) */
    ls_allocator *from; /* the allocator it came from, which frees it */
} ls_stage_block;

typedef struct ls_mpi_state {
    ls_comm_env env;
    MPI_Comm comm;
    int rank, world;
    int cuda_aware; /* device pointers may go to MPI directly */
    int threaded;   /* communication thread progress */
    size_t chunk;   /* largest all-reduce per MPI call in bytes, agreed by the ranks; 0: no limit */
    pthread_t worker;
    int worker_started;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    ls_mpi_req *head, *tail; /* queued, not yet started by the worker */
    int inflight;            /* queued + running on the worker */
    int orphans;             /* timed-out requests the worker still runs */
    int stop;
    pthread_mutex_t stage_mu; /* the kept staging blocks (requests end on either thread) */
    ls_stage_block kept[LS_MPI_STAGE_KEEP];
    int nkept;
    int closing; /* destroyed with a collective still running: blocks given back are leaked */
    /* nonblocking progress: requests started and not finished, in start order. Their MPI calls
     * are posted in that order (the same on every rank), at most `window` outstanding at once
     * (0: each request's calls all at once); ls_mpi_pump posts more as earlier ones complete. */
    ls_mpi_req *nb_head, *nb_tail;
    int nb_outstanding;
    int window;
    int spans_nodes;      /* the ranks are on more than one node */
    int broken;           /* nonblocking: a call failed or a wait timed out; every later one fails */
    char broken_why[300]; /* what broke it */
} ls_mpi_state;

/* One collective as MPI sees it, plus the staging around it. */
struct ls_mpi_req {
    ls_coll_op user;
    ls_coll_kind kind;
    const void *msend; /* NULL with in_place */
    void *mrecv;
    int in_place;
    int mcount;
    int64_t count; /* all-reduce: elements in all, sent as calls of at most per_call */
    int64_t per_call;
    size_t mes; /* bytes per MPI element */
    MPI_Datatype dt;
    MPI_Op mop;
    int root;
    /* in segments: the calls (each segment in parts of at most per_call), all posted at once */
    ls_mpi_call *calls;
    int ncalls;
    /* broadcast in segments of buffers of their own (ls_comm_ibroadcast_many), staged: each segment
     * copied in (where this rank is its root) and back (where it is not) on its own */
    int seg_stage, nseg;
    void **seg_dev;
    int64_t *seg_start, *seg_n;
    int *seg_root;
    ls_stage_block stage; /* host block owning the staging buffers (p NULL: none) */
    /* pre (caller's thread, at start): device -> host copy, then widen 16-bit -> f32 */
    const void *pre_dev;
    void *pre_host;
    size_t pre_bytes;
    const void *widen_src;
    float *widen_dst;
    int64_t widen_n;
    /* post (caller's thread, at completion): avg divide, narrow f32 -> 16-bit, host -> device */
    void *avg_buf;
    ls_dtype avg_type;
    int64_t avg_n;
    const float *narrow_src;
    void *narrow_dst;
    int64_t narrow_n;
    const void *post_host;
    void *post_dev;
    size_t post_bytes;
    /* post, host memory: a reduce-scatter in place past rank 0 (received beside send, then here) */
    const void *move_from;
    void *move_to;
    size_t move_bytes;
    ls_dtype user_dtype;
    /* progress */
    MPI_Request req;   /* nonblocking: the call, or with an all-reduce in parts, the first part */
    MPI_Request *reqs; /* the nreq calls: &req, or an array for the parts */
    int nreq;          /* calls in all */
    int nposted;       /* nonblocking: reqs[0..nposted) posted; MPI_REQUEST_NULL once complete */
    int first_open;    /* nonblocking: reqs[0..first_open) complete */
    int queued;        /* nonblocking: in the state's list of unfinished requests */
    ls_mpi_req *nb_next;
    int posted;   /* nonblocking: some of reqs were posted and may still be live */
    int done;     /* thread: worker finished */
    int orphaned; /* thread: the waiter gave up; the worker frees it */
    ls_status status;
    char err[256];
    ls_mpi_req *next;
};

/* The MPI buffer's elements from off on. */
static void *ls_mpi_at(const ls_mpi_req *r, int64_t off) { return (char *)r->mrecv + (size_t)off * r->mes; }

static MPI_Datatype ls_mpi_dtype(ls_dtype t) {
    switch (t) {
    case LS_F32: return MPI_FLOAT;
    case LS_F64: return MPI_DOUBLE;
    case LS_I32: return MPI_INT32_T;
    case LS_U8: return MPI_UINT8_T;
    case LS_F16:
    case LS_BF16: return MPI_UINT16_T; /* bytes: sums use ls_mpi_sum16, other reductions go through f32 */
    }
    return MPI_DATATYPE_NULL;
}

/* The f16 and bf16 sums: MPI has no 16-bit float types, so the data go as MPI_UINT16_T with these
 * (commutative) operators; made with the first communicator, freed after the last. */
static MPI_Op ls_mpi_sum16[2] = {MPI_OP_NULL, MPI_OP_NULL}; /* f16, bf16 */

static void ls_mpi_sum16_run(int bf, const uint16_t *in, uint16_t *inout, int len) {
    float a[512], b[512];
    for (int off = 0; off < len; off += 512) {
        int n = len - off < 512 ? len - off : 512;
        if (bf) {
            ls_half_bf16_to_f32_n(in + off, a, n);
            ls_half_bf16_to_f32_n(inout + off, b, n);
        } else {
            ls_half_f16_to_f32_n(in + off, a, n);
            ls_half_f16_to_f32_n(inout + off, b, n);
        }
        for (int i = 0; i < n; i++) b[i] += a[i];
        if (bf)
            ls_half_f32_to_bf16_n(b, inout + off, n);
        else
            ls_half_f32_to_f16_n(b, inout + off, n);
    }
}
static void ls_mpi_f16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    ls_mpi_sum16_run(0, in, inout, *len);
}
static void ls_mpi_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    ls_mpi_sum16_run(1, in, inout, *len);
}

/* The f32 and f64 max and min: NaN where every rank has NaN, else the max or min of the numbers
 * (fmax, fmin, as NCCL's). MPI_MAX and MPI_MIN compare with > and <, so a NaN won or lost by its
 * rank's place in the reduction: kept from rank 0, dropped from the last rank. Made with the first
 * communicator, freed after the last. */
static MPI_Op ls_mpi_minmax[2] = {MPI_OP_NULL, MPI_OP_NULL}; /* max, min */

static void ls_mpi_minmax_run(int max, const void *in, void *inout, int len, MPI_Datatype dt) {
    if (dt == MPI_DOUBLE) {
        const double *a = in;
        double *b = inout;
        for (int i = 0; i < len; i++) b[i] = max ? fmax(a[i], b[i]) : fmin(a[i], b[i]);
    } else {
        const float *a = in;
        float *b = inout;
        for (int i = 0; i < len; i++) b[i] = max ? fmaxf(a[i], b[i]) : fminf(a[i], b[i]);
    }
}
static void ls_mpi_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    ls_mpi_minmax_run(1, in, inout, *len, *dt);
}
static void ls_mpi_min(void *in, void *inout, int *len, MPI_Datatype *dt) {
    ls_mpi_minmax_run(0, in, inout, *len, *dt);
}

static MPI_Op ls_mpi_op(ls_reduce_op op, ls_dtype t) {
    const int fp = t == LS_F32 || t == LS_F64; /* 16-bit max and min go as f32 */
    switch (op) {
    case LS_REDUCE_MAX: return fp ? ls_mpi_minmax[0] : MPI_MAX;
    case LS_REDUCE_MIN: return fp ? ls_mpi_minmax[1] : MPI_MIN;
    default: return t == LS_F16 ? ls_mpi_sum16[0] : t == LS_BF16 ? ls_mpi_sum16[1] : MPI_SUM;
    }
}

/* ---- staging ---- */

static void ls_stage_free(ls_stage_block b) {
    if (b.p) ls_allocator_host_free(b.from, b.p, b.bytes, b.pinned);
}

/* A staging block of at least bytes: the smallest kept one that fits and is at most twice as
 * large, else a new one (pinned for device buffers where the device allocator can). */
static ls_status ls_stage_get(ls_mpi_state *st, size_t bytes, ls_stage_block *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&st->stage_mu);
    int best = -1;
    for (int i = 0; i < st->nkept; i++)
        if (st->kept[i].bytes >= bytes && st->kept[i].bytes / 2 <= bytes &&
            (best < 0 || st->kept[i].bytes < st->kept[best].bytes))
            best = i;
    if (best >= 0) {
        *out = st->kept[best];
        st->kept[best] = st->kept[--st->nkept];
    }
    pthread_mutex_unlock(&st->stage_mu);
    if (out->p) return LS_OK;
    /* rounded up, so that buckets of slightly different sizes share blocks */
    const size_t grain = (size_t)64 << 10;
    size_t n = bytes > grain ? (bytes + grain - 1) / grain * grain : bytes;
    /* the device allocator pins where it can; a CPU communicator's host allocator gives plain memory */
    ls_allocator *from = st->env.device.type != LS_DEVICE_CPU && st->env.dev ? st->env.dev : st->env.host;
    LS_CHECK(ls_allocator_host_alloc(from, n, "an MPI staging buffer", &out->pinned, &out->p));
    out->bytes = n;
    out->from = from;
    return LS_OK;
}

/* Keep b for a later collective (the smallest kept blocks make room), or free it. */
static void ls_stage_put(ls_mpi_state *st, ls_stage_block b) {
    if (!b.p) return;
    ls_stage_block drop[LS_MPI_STAGE_KEEP + 1];
    int ndrop = 0;
    pthread_mutex_lock(&st->stage_mu);
    if (st->closing) { /* the allocators may be gone: leak it */
        pthread_mutex_unlock(&st->stage_mu);
        return;
    }
    size_t total = b.bytes;
    for (int i = 0; i < st->nkept; i++) total += st->kept[i].bytes;
    if (b.bytes > LS_MPI_STAGE_KEEP_BYTES) {
        drop[ndrop++] = b;
    } else {
        while (st->nkept > 0 && (st->nkept == LS_MPI_STAGE_KEEP || total > LS_MPI_STAGE_KEEP_BYTES)) {
            int small = 0;
            for (int i = 1; i < st->nkept; i++)
                if (st->kept[i].bytes < st->kept[small].bytes) small = i;
            total -= st->kept[small].bytes;
            drop[ndrop++] = st->kept[small];
            st->kept[small] = st->kept[--st->nkept];
        }
        st->kept[st->nkept++] = b;
    }
    pthread_mutex_unlock(&st->stage_mu);
    for (int i = 0; i < ndrop; i++) ls_stage_free(drop[i]);
}

static void ls_mpi_req_free(ls_mpi_state *st, ls_mpi_req *r) {
    if (!r) return;
    ls_stage_put(st, r->stage);
    if (r->reqs != &r->req) free(r->reqs);
    free(r->calls);
    free(r->seg_dev);
    free(r->seg_start);
    free(r->seg_n);
    free(r->seg_root);
    free(r);
}

static void ls_widen(ls_dtype t, const void *src, float *dst, int64_t n) {
    if (t == LS_F16)
        ls_half_f16_to_f32_n(src, dst, n);
    else
        ls_half_bf16_to_f32_n(src, dst, n);
}

static void ls_narrow(ls_dtype t, const float *src, void *dst, int64_t n) {
    if (t == LS_F16)
        ls_half_f32_to_f16_n(src, dst, n);
    else
        ls_half_f32_to_bf16_n(src, dst, n);
}

static void ls_avg_divide(ls_dtype t, void *buf, int64_t n, int world) {
    switch (t) {
    case LS_F32: {
        float *x = buf, w = (float)world;
        for (int64_t i = 0; i < n; i++) x[i] /= w;
        break;
    }
    case LS_F64: {
        double *x = buf;
        for (int64_t i = 0; i < n; i++) x[i] /= world;
        break;
    }
    case LS_I32: {
        int32_t *x = buf;
        for (int64_t i = 0; i < n; i++) x[i] /= world;
        break;
    }
    case LS_U8: {
        uint8_t *x = buf;
        for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)(x[i] / world);
        break;
    }
    default: break;
    }
}

/* Plan the MPI call and the staging for op; allocates r->stage. */
static ls_status ls_mpi_prepare(ls_mpi_state *st, const ls_coll_op *op, ls_mpi_req **out) {
    *out = NULL;
    int64_t n = op->count;
    const int reduction =
        op->kind == LS_COLL_ALLREDUCE || op->kind == LS_COLL_REDUCE_SCATTER || op->kind == LS_COLL_REDUCE;
    /* 16-bit sums go as they are (our sum operator); the other 16-bit reductions through f32 */
    const int convert = reduction && (op->dtype == LS_F16 || op->dtype == LS_BF16) && op->op != LS_REDUCE_SUM;
    const ls_dtype mtype = convert ? LS_F32 : op->dtype;
    const size_t mes = ls_dtype_size(mtype);
    /* an all-reduce goes to MPI in calls of at most st->chunk bytes (see ls_mpi_exec); a collective
     * in segments, each segment (below) */
    int64_t per_call = n;
    if (op->kind == LS_COLL_ALLREDUCE && st->chunk) {
        per_call = (int64_t)(st->chunk / mes);
        if (per_call < 1) per_call = 1;
        if (per_call > INT_MAX) per_call = INT_MAX;
        if (per_call > n) per_call = n;
    }
    if (per_call > INT_MAX && !op->nseg)
        return ls_error(LS_ERR_UNSUPPORTED, "count %lld exceeds MPI's int count limit (%d)%s", (long long)n, INT_MAX,
                        op->kind == LS_COLL_ALLREDUCE
                            ? " (LOCKSTEP_MPI_CHUNK=0 turned off the splitting of large all-reduces)"
                            : "");
    ls_mpi_req *r = calloc(1, sizeof *r);
    if (!r) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate an MPI request");
    r->user = *op;
    r->kind = op->kind;
    r->mcount = (int)per_call;
    r->count = n;
    r->per_call = per_call;
    r->mes = mes;
    r->root = op->root;
    r->user_dtype = op->dtype;
    if (op->nseg > 0) { /* in segments: the calls, each segment in parts of at most per_call (chunk) */
        int64_t pc = st->chunk ? (int64_t)(st->chunk / mes) : INT_MAX, m = 0;
        if (pc < 1) pc = 1;
        if (pc > INT_MAX) pc = INT_MAX;
        for (int j = 0; j < op->nseg; j++) m += (op->seg_count[j] + pc - 1) / pc;
        if (m > INT_MAX / 2 || !(r->calls = calloc((size_t)(m > 0 ? m : 1), sizeof *r->calls))) {
            free(r);
            return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot plan a collective in %d segments", op->nseg);
        }
        int64_t off = 0;
        for (int j = 0; j < op->nseg; off += op->seg_count[j++])
            for (int64_t o = 0; o < op->seg_count[j]; o += pc) {
                ls_mpi_call *k = &r->calls[r->ncalls++];
                k->off = off + o;
                k->count = (int)(op->seg_count[j] - o < pc ? op->seg_count[j] - o : pc);
                k->root = op->seg_root[j];
                k->seg = j;
                k->rel = o;
            }
        /* the root of each call is its own; the request's mcount only tells "not trivial" */
        r->mcount = r->ncalls > 0 ? 1 : 0;
    }
    if (op->kind == LS_COLL_BARRIER || n == 0) {
        *out = r;
        return LS_OK;
    }
    const int world = st->world;
    const size_t es = ls_dtype_size(op->dtype);
    /* the f32 widening, the avg divide and our 16-bit sum operator run on the host: device buffers
     * are staged for them even where MPI could take device pointers */
    const int half16 = op->dtype == LS_F16 || op->dtype == LS_BF16;
    /* a reduce-scatter in place (NCCL's form: recv == send + rank * n) past rank 0: MPI's in place
     * is another (the result at the start of the buffer), and MPI takes no overlapping buffers */
    const int rs_in_place = op->kind == LS_COLL_REDUCE_SCATTER && st->rank > 0 &&
                            op->recv == (const void *)((const char *)op->send + (size_t)st->rank * (size_t)n * es);
    const int stage_dev =
        !op->host && st->env.device.type != LS_DEVICE_CPU &&
        (!st->cuda_aware || convert || rs_in_place || (reduction && (op->op == LS_REDUCE_AVG || half16)));
    if (!op->host && st->env.device.type != LS_DEVICE_CPU && !stage_dev && st->env.ctx) {
        /* MPI reads and writes the device buffer itself: the work queued on the compute stream
         * (the gradients of this bucket) must be done first. (Staged buffers are copied on that
         * stream, which orders them.) */
        ls_status s = ls_ctx_synchronize(st->env.ctx);
        if (s != LS_OK) {
            free(r);
            return s;
        }
    }
    r->dt = ls_mpi_dtype(mtype);
    r->mop = ls_mpi_op(op->op, mtype);
    const int avg = reduction && op->op == LS_REDUCE_AVG;
    size_t block = 0;
    char *b = NULL;

    switch (op->kind) {
    case LS_COLL_ALLREDUCE:
    case LS_COLL_REDUCE:
    case LS_COLL_BROADCAST: {
        /* is_root: this rank's buffer goes in (staged, widened); receives: the result comes back. In
         * segments: a reduce's every rank sends, and receives where it is a segment's root; a
         * broadcast's sends where it is one and receives where it is not (a segment a rank does not
         * receive comes back as it went) */
        int mine = 0, others = 0;
        for (int j = 0; j < op->nseg; j++) {
            mine |= op->seg_root[j] == st->rank && op->seg_count[j] > 0;
            others |= op->seg_root[j] != st->rank && op->seg_count[j] > 0;
        }
        const int is_root =
            op->nseg ? op->kind == LS_COLL_REDUCE || mine : op->kind == LS_COLL_ALLREDUCE || op->root == st->rank;
        const int receives = op->nseg ? (op->kind == LS_COLL_REDUCE ? mine : others)
                                      : op->kind == LS_COLL_ALLREDUCE || op->root != st->rank;
        if (!stage_dev && !convert) {
            r->mrecv = op->recv;
            r->in_place = 1;
        } else {
            block = (size_t)n * mes + (stage_dev && convert ? (size_t)n * es : 0);
        }
        if (block) {
            ls_status s = ls_stage_get(st, block, &r->stage);
            if (s != LS_OK) {
                free(r);
                return s;
            }
            b = r->stage.p;
            r->mrecv = b;
            r->in_place = 1;
            void *raw = convert ? (stage_dev ? (void *)(b + (size_t)n * mes) : op->recv) : (void *)b;
            if (is_root) {
                if (stage_dev) {
                    r->pre_dev = op->recv;
                    r->pre_host = raw;
                    r->pre_bytes = (size_t)n * es;
                }
                if (convert) {
                    r->widen_src = raw;
                    r->widen_dst = (float *)b;
                    r->widen_n = n;
                }
            }
            if (receives) {
                if (convert) {
                    r->narrow_src = (const float *)b;
                    r->narrow_dst = raw;
                    r->narrow_n = n;
                }
                if (stage_dev) {
                    r->post_host = raw;
                    r->post_dev = op->recv;
                    r->post_bytes = (size_t)n * es;
                }
            }
        }
        if (avg && receives) {
            r->avg_buf = r->mrecv;
            r->avg_type = mtype;
            r->avg_n = n;
        }
        break;
    }
    case LS_COLL_ALLGATHER: {
        const char *my_slot = (const char *)op->recv + (size_t)st->rank * (size_t)n * es;
        if (!stage_dev) {
            r->mrecv = op->recv;
            r->in_place = op->send == (const void *)my_slot;
            r->msend = r->in_place ? NULL : op->send;
        } else {
            block = (size_t)n * (size_t)world * es;
            ls_status s = ls_stage_get(st, block, &r->stage);
            if (s != LS_OK) {
                free(r);
                return s;
            }
            b = r->stage.p;
            r->mrecv = b;
            r->in_place = 1;
            r->pre_dev = op->send;
            r->pre_host = b + (size_t)st->rank * (size_t)n * es;
            r->pre_bytes = (size_t)n * es;
            r->post_host = b;
            r->post_dev = op->recv;
            r->post_bytes = block;
        }
        break;
    }
    case LS_COLL_REDUCE_SCATTER: {
        const int64_t ns = n * world;
        if (!stage_dev && !convert && rs_in_place) { /* host buffers: received beside, then moved */
            ls_status s = ls_stage_get(st, (size_t)n * es, &r->stage);
            if (s != LS_OK) {
                free(r);
                return s;
            }
            r->msend = op->send;
            r->mrecv = r->stage.p;
            r->move_from = r->stage.p;
            r->move_to = op->recv;
            r->move_bytes = (size_t)n * es;
        } else if (!stage_dev && !convert) {
            r->mrecv = op->recv;
            r->in_place = op->send == (const void *)op->recv; /* rank 0's in place: MPI's too */
            r->msend = r->in_place ? NULL : op->send;
        } else {
            size_t ms_bytes = (size_t)ns * mes, mr_bytes = (size_t)n * mes;
            size_t raw_bytes = stage_dev && convert ? (size_t)ns * es + (size_t)n * es : 0;
            block = ms_bytes + mr_bytes + raw_bytes;
            ls_status s = ls_stage_get(st, block, &r->stage);
            if (s != LS_OK) {
                free(r);
                return s;
            }
            b = r->stage.p;
            char *ms = b, *mr = b + ms_bytes;
            const void *raw_send = convert ? (stage_dev ? (const void *)(mr + mr_bytes) : op->send) : ms;
            void *raw_recv = convert ? (stage_dev ? (void *)(mr + mr_bytes + (size_t)ns * es) : op->recv) : (void *)mr;
            r->msend = ms;
            r->mrecv = mr;
            if (stage_dev) {
                r->pre_dev = op->send;
                r->pre_host = (void *)raw_send;
                r->pre_bytes = (size_t)ns * es;
                r->post_host = raw_recv;
                r->post_dev = op->recv;
                r->post_bytes = (size_t)n * es;
            }
            if (convert) {
                r->widen_src = raw_send;
                r->widen_dst = (float *)ms;
                r->widen_n = ns;
                r->narrow_src = (const float *)mr;
                r->narrow_dst = raw_recv;
                r->narrow_n = n;
            }
        }
        if (avg) {
            r->avg_buf = r->mrecv;
            r->avg_type = mtype;
            r->avg_n = n;
        }
        break;
    }
    case LS_COLL_BARRIER: break;
    }
    if (op->seg_ptr && stage_dev) { /* buffers of their own, staged one by one (ls_mpi_pre, _post) */
        r->pre_bytes = r->post_bytes = 0;
        r->seg_stage = 1;
        r->nseg = op->nseg;
        r->seg_dev = calloc((size_t)op->nseg, sizeof *r->seg_dev);
        r->seg_start = calloc((size_t)op->nseg, sizeof *r->seg_start);
        r->seg_n = calloc((size_t)op->nseg, sizeof *r->seg_n);
        r->seg_root = calloc((size_t)op->nseg, sizeof *r->seg_root);
        if (!r->seg_dev || !r->seg_start || !r->seg_n || !r->seg_root) {
            ls_mpi_req_free(st, r);
            return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot plan a broadcast of %d buffers", op->nseg);
        }
        for (int64_t j = 0, off = 0; j < op->nseg; off += op->seg_count[j++]) {
            r->seg_dev[j] = op->seg_ptr[j];
            r->seg_start[j] = off;
            r->seg_n[j] = op->seg_count[j];
            r->seg_root[j] = op->seg_root[j];
        }
    }
    for (int i = 0; i < r->ncalls; i++) { /* each call's data: in the staging block, or the caller's */
        ls_mpi_call *k = &r->calls[i];
        k->p =
            op->seg_ptr && !r->seg_stage ? (char *)op->seg_ptr[k->seg] + (size_t)k->rel * r->mes : ls_mpi_at(r, k->off);
    }
    *out = r;
    return LS_OK;
}

static ls_status ls_mpi_pre(ls_mpi_state *st, ls_mpi_req *r) {
    for (int j = 0; r->seg_stage && j < r->nseg; j++) /* the segments this rank sends */
        if (r->seg_root[j] == st->rank && r->seg_n[j] > 0) {
            ls_status s = ls_allocator_copy(st->env.dev, ls_mpi_at(r, r->seg_start[j]), 0, r->seg_dev[j], 1,
                                            (size_t)r->seg_n[j] * r->mes);
            if (s != LS_OK) return ls_error_context(s, "staging device buffer %d to host", j);
        }
    if (r->pre_bytes) {
        ls_status s = ls_allocator_copy(st->env.dev, r->pre_host, 0, r->pre_dev, 1, r->pre_bytes);
        if (s != LS_OK) return ls_error_context(s, "staging device buffer to host");
    }
    if (r->widen_n) ls_widen(r->user_dtype, r->widen_src, r->widen_dst, r->widen_n);
    return LS_OK;
}

static ls_status ls_mpi_post(ls_mpi_state *st, ls_mpi_req *r) {
    if (r->avg_n && r->calls) { /* in segments: the ones this rank received */
        for (int i = 0; i < r->ncalls; i++)
            if (r->calls[i].root == st->rank)
                ls_avg_divide(r->avg_type, (char *)r->avg_buf + (size_t)r->calls[i].off * r->mes, r->calls[i].count,
                              st->world);
    } else if (r->avg_n) {
        ls_avg_divide(r->avg_type, r->avg_buf, r->avg_n, st->world);
    }
    if (r->narrow_n) ls_narrow(r->user_dtype, r->narrow_src, r->narrow_dst, r->narrow_n);
    for (int j = 0; r->seg_stage && j < r->nseg; j++) /* the segments this rank received */
        if (r->seg_root[j] != st->rank && r->seg_n[j] > 0) {
            ls_status s = ls_allocator_copy(st->env.dev, r->seg_dev[j], 1, ls_mpi_at(r, r->seg_start[j]), 0,
                                            (size_t)r->seg_n[j] * r->mes);
            if (s != LS_OK) return ls_error_context(s, "copying result %d back to the device", j);
        }
    if (r->post_bytes) {
        ls_status s = ls_allocator_copy(st->env.dev, r->post_dev, 1, r->post_host, 0, r->post_bytes);
        if (s != LS_OK) return ls_error_context(s, "copying the result back to the device");
    }
    if (r->move_bytes) memcpy(r->move_to, r->move_from, r->move_bytes);
    return LS_OK;
}

static int ls_mpi_trivial(const ls_mpi_req *r) { return r->kind != LS_COLL_BARRIER && r->mcount == 0; }

/* An all-reduce's elements from off on, and how many of them one MPI call takes. */
static int ls_mpi_part(const ls_mpi_req *r, int64_t off) {
    return (int)(r->count - off < r->per_call ? r->count - off : r->per_call);
}

static const char *ls_mpi_call_name(ls_coll_kind k) {
    switch (k) {
    case LS_COLL_ALLREDUCE: return "MPI_Allreduce";
    case LS_COLL_BROADCAST: return "MPI_Bcast";
    case LS_COLL_ALLGATHER: return "MPI_Allgather";
    case LS_COLL_REDUCE_SCATTER: return "MPI_Reduce_scatter_block";
    case LS_COLL_BARRIER: return "MPI_Barrier";
    case LS_COLL_REDUCE: return "MPI_Reduce";
    }
    return "MPI";
}

/* Call i of a collective in segments, posted (MPI_Ireduce in place at its root, or MPI_Ibcast). */
static int ls_mpi_post_segment(ls_mpi_state *st, const ls_mpi_req *r, int i, MPI_Request *q) {
    const ls_mpi_call *k = &r->calls[i];
    void *p = k->p;
    if (r->kind == LS_COLL_BROADCAST) return MPI_Ibcast(p, k->count, r->dt, k->root, st->comm, q);
    return MPI_Ireduce(k->root == st->rank ? MPI_IN_PLACE : p, p, k->count, r->dt, r->mop, k->root, st->comm, q);
}

/* The MPI calls of r (any thread). */
static ls_status ls_mpi_exec_calls(ls_mpi_state *st, ls_mpi_req *r) {
    if (r->calls && !st->spans_nodes) { /* in segments on one node: one blocking call after the other */
        for (int i = 0; i < r->ncalls; i++) {
            const ls_mpi_call *k = &r->calls[i];
            if (r->kind == LS_COLL_BROADCAST)
                LS_MPI_CHECK(MPI_Bcast(k->p, k->count, r->dt, k->root, st->comm), "MPI_Bcast");
            else
                LS_MPI_CHECK(MPI_Reduce(k->root == st->rank ? MPI_IN_PLACE : k->p, k->p, k->count, r->dt, r->mop,
                                        k->root, st->comm),
                             "MPI_Reduce");
        }
        return LS_OK;
    }
    if (r->calls) { /* in segments across nodes: every call posted, then waited for together */
        MPI_Request *q = malloc((size_t)r->ncalls * sizeof *q);
        if (!q) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate %d MPI requests", r->ncalls);
        int rc = MPI_SUCCESS, posted = 0;
        for (; posted < r->ncalls && rc == MPI_SUCCESS; posted++) rc = ls_mpi_post_segment(st, r, posted, &q[posted]);
        if (rc != MPI_SUCCESS) posted--;
        int wrc = MPI_Waitall(posted, q, MPI_STATUSES_IGNORE); /* what was posted completes, even after a failure */
        free(q);
        LS_MPI_CHECK(rc, r->kind == LS_COLL_BROADCAST ? "MPI_Ibcast" : "MPI_Ireduce");
        LS_MPI_CHECK(wrc, "MPI_Waitall");
        return LS_OK;
    }
    const void *sb = r->in_place ? MPI_IN_PLACE : r->msend;
    switch (r->kind) {
    case LS_COLL_ALLREDUCE:
        /* In parts of at most LOCKSTEP_MPI_CHUNK bytes (always in place): Open MPI allocates a
         * temporary buffer the size of the message on every call, and glibc serves 32 MiB and up
         * with a fresh mmap each time, every page faulted in again (see docs/performance.md). */
        for (int64_t off = 0; off < r->count; off += r->per_call)
            LS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ls_mpi_at(r, off), ls_mpi_part(r, off), r->dt, r->mop, st->comm),
                         "MPI_Allreduce");
        break;
    case LS_COLL_BROADCAST: LS_MPI_CHECK(MPI_Bcast(r->mrecv, r->mcount, r->dt, r->root, st->comm), "MPI_Bcast"); break;
    case LS_COLL_ALLGATHER:
        LS_MPI_CHECK(MPI_Allgather(sb, r->mcount, r->dt, r->mrecv, r->mcount, r->dt, st->comm), "MPI_Allgather");
        break;
    case LS_COLL_REDUCE_SCATTER:
        LS_MPI_CHECK(MPI_Reduce_scatter_block(sb, r->mrecv, r->mcount, r->dt, r->mop, st->comm),
                     "MPI_Reduce_scatter_block");
        break;
    case LS_COLL_BARRIER: LS_MPI_CHECK(MPI_Barrier(st->comm), "MPI_Barrier"); break;
    case LS_COLL_REDUCE: break; /* always in segments: above */
    }
    return LS_OK;
}

/* The blocking MPI call (any thread), a span of the timeline when one is open. */
static ls_status ls_mpi_exec(ls_mpi_state *st, ls_mpi_req *r) {
    if (ls_mpi_trivial(r)) return LS_OK;
    LS_TL_T0(t0);
    ls_status s = ls_mpi_exec_calls(st, r);
    if (t0 > 0) {
        char name[64];
        snprintf(name, sizeof name, "%s %.2f MiB", ls_mpi_call_name(r->kind),
                 (double)r->count * (double)r->mes / 1048576.0);
        ls_timeline_span(name, "comm", t0, ls_timeline_now());
    }
    return s;
}

/* Nonblocking progress after a failed call or a timed-out wait: the calls still queued on this rank
 * could no longer pair with the other ranks' in order, so nothing more is posted or waited for. */
static void ls_mpi_break(ls_mpi_state *st, const char *why) {
    if (st->broken) return;
    st->broken = 1;
    snprintf(st->broken_why, sizeof st->broken_why, "%s", why);
}

static ls_status ls_mpi_broken_error(const ls_mpi_state *st) {
    return ls_error(LS_ERR_COMM, "the MPI communicator stopped after an earlier error (%s): call ls_comm_abort",
                    st->broken_why);
}

/* Posts r's next MPI call (caller's thread). */
static ls_status ls_mpi_post_call(ls_mpi_state *st, ls_mpi_req *r) {
    const void *sb = r->in_place ? MPI_IN_PLACE : r->msend;
    MPI_Request *q = &r->reqs[r->nposted];
    int rc = MPI_SUCCESS;
    const char *call = ls_mpi_call_name(r->kind);
    if (r->calls) {
        rc = ls_mpi_post_segment(st, r, r->nposted, q);
        call = r->kind == LS_COLL_BROADCAST ? "MPI_Ibcast" : "MPI_Ireduce";
    } else
        switch (r->kind) {
        case LS_COLL_ALLREDUCE: {
            int64_t off = (int64_t)r->nposted * r->per_call;
            rc = MPI_Iallreduce(MPI_IN_PLACE, ls_mpi_at(r, off), ls_mpi_part(r, off), r->dt, r->mop, st->comm, q);
            call = "MPI_Iallreduce";
            break;
        }
        case LS_COLL_BROADCAST:
            rc = MPI_Ibcast(r->mrecv, r->mcount, r->dt, r->root, st->comm, q);
            call = "MPI_Ibcast";
            break;
        case LS_COLL_ALLGATHER:
            rc = MPI_Iallgather(sb, r->mcount, r->dt, r->mrecv, r->mcount, r->dt, st->comm, q);
            call = "MPI_Iallgather";
            break;
        case LS_COLL_REDUCE_SCATTER:
            rc = MPI_Ireduce_scatter_block(sb, r->mrecv, r->mcount, r->dt, r->mop, st->comm, q);
            call = "MPI_Ireduce_scatter_block";
            break;
        case LS_COLL_BARRIER:
            rc = MPI_Ibarrier(st->comm, q);
            call = "MPI_Ibarrier";
            break;
        case LS_COLL_REDUCE: break; /* always in segments: above */
        }
    if (rc != MPI_SUCCESS) {
        r->nreq = r->nposted; /* nothing more of r is posted; waiting for it returns this error */
        r->status = ls_mpi_error(rc, call);
        snprintf(r->err, sizeof r->err, "%s", ls_last_error());
        ls_mpi_break(st, r->err);
        return r->status;
    }
    r->nposted++;
    r->posted = 1; /* live from the first call on, even if a later one fails */
    st->nb_outstanding++;
    return LS_OK;
}

/* Nonblocking progress (caller's thread): tests the outstanding calls of every unfinished request,
 * then posts the next calls in start order while fewer than the window are outstanding. */
static ls_status ls_mpi_pump(ls_mpi_state *st) {
    if (st->broken) return ls_mpi_broken_error(st);
    for (ls_mpi_req *r = st->nb_head; r; r = r->nb_next)
        for (int i = r->first_open; i < r->nposted; i++) {
            if (r->reqs[i] == MPI_REQUEST_NULL) continue;
            int flag = 0;
            int rc = MPI_Test(&r->reqs[i], &flag, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS) {
                ls_status e = ls_mpi_error(rc, "MPI_Test");
                ls_mpi_break(st, ls_last_error());
                return e;
            }
            if (flag) {
                r->reqs[i] = MPI_REQUEST_NULL;
                st->nb_outstanding--;
            }
            while (r->first_open < r->nposted && r->reqs[r->first_open] == MPI_REQUEST_NULL) r->first_open++;
        }
    for (ls_mpi_req *r = st->nb_head; r; r = r->nb_next)
        while (r->nposted < r->nreq) {
            /* across nodes a collective in segments goes all at once once its first call may go (its
             * segments' roots differ: together they use both directions of a link) */
            if (st->window > 0 && st->nb_outstanding >= st->window && !(r->calls && r->nposted > 0 && st->spans_nodes))
                return LS_OK;
            LS_CHECK(ls_mpi_post_call(st, r));
        }
    return LS_OK;
}

static void ls_mpi_unlink(ls_mpi_state *st, ls_mpi_req *r) {
    if (!r->queued) return;
    ls_mpi_req **pp = &st->nb_head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->nb_next;
    }
    if (*pp) *pp = r->nb_next;
    if (st->nb_tail == r) st->nb_tail = prev;
    r->queued = 0;
}

/* Queues r's nonblocking MPI calls behind the unfinished requests' and posts what the window
 * allows (caller's thread). */
static ls_status ls_mpi_post_nonblocking(ls_mpi_state *st, ls_mpi_req *r) {
    if (ls_mpi_trivial(r)) return LS_OK;
    if (st->broken) return ls_mpi_broken_error(st);
    r->reqs = &r->req;
    r->nreq = 1;
    if (r->calls) {
        if (r->ncalls > 1 && !(r->reqs = malloc((size_t)r->ncalls * sizeof *r->reqs)))
            return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate %d MPI requests", r->ncalls);
        r->nreq = r->ncalls;
    } else if (r->kind == LS_COLL_ALLREDUCE) {
        const int64_t parts = (r->count + r->per_call - 1) / r->per_call;
        if (parts > INT_MAX)
            return ls_error(LS_ERR_UNSUPPORTED,
                            "an all-reduce in %lld parts: more than MPI can wait for at once "
                            "(raise LOCKSTEP_MPI_CHUNK)",
                            (long long)parts);
        if (parts > 1 && !(r->reqs = malloc((size_t)parts * sizeof *r->reqs)))
            return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate %lld MPI requests for an all-reduce in parts",
                            (long long)parts);
        r->nreq = (int)parts;
    }
    for (int i = 0; i < r->nreq; i++) r->reqs[i] = MPI_REQUEST_NULL;
    r->nb_next = NULL;
    if (st->nb_tail)
        st->nb_tail->nb_next = r;
    else
        st->nb_head = r;
    st->nb_tail = r;
    r->queued = 1;
    ls_status s = ls_mpi_pump(st);
    if (s != LS_OK && !r->posted) ls_mpi_unlink(st, r); /* the caller frees r */
    return s;
}

/* ---- the communication thread ---- */

static void *ls_mpi_worker(void *arg) {
    ls_mpi_state *st = arg;
    ls_timeline_thread_name("mpi communication");
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->head && !st->stop) pthread_cond_wait(&st->work_cv, &st->mu);
        if (!st->head) break;
        ls_mpi_req *r = st->head;
        st->head = r->next;
        if (!st->head) st->tail = NULL;
        pthread_mutex_unlock(&st->mu);
        ls_status s = ls_mpi_exec(st, r);
        pthread_mutex_lock(&st->mu);
        r->status = s;
        if (s != LS_OK) snprintf(r->err, sizeof r->err, "%s", ls_last_error());
        r->done = 1;
        st->inflight--;
        ls_mpi_req *dead = r->orphaned ? r : NULL; /* its waiter gave up: free it here */
        if (dead) st->orphans--;
        pthread_cond_broadcast(&st->done_cv);
        if (dead) { /* not under mu: freeing pinned memory may synchronize the device */
            pthread_mutex_unlock(&st->mu);
            ls_mpi_req_free(st, dead);
            pthread_mutex_lock(&st->mu);
        }
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

static void ls_mpi_enqueue(ls_mpi_state *st, ls_mpi_req *r) {
    pthread_mutex_lock(&st->mu);
    r->next = NULL;
    if (st->tail)
        st->tail->next = r;
    else
        st->head = r;
    st->tail = r;
    st->inflight++;
    pthread_cond_signal(&st->work_cv);
    pthread_mutex_unlock(&st->mu);
}

static double ls_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ls_status ls_mpi_timeout_error(ls_mpi_state *st, const ls_mpi_req *r) {
    return ls_error(LS_ERR_COMM,
                    "did not complete within %g s (LOCKSTEP_COMM_TIMEOUT): a rank may have failed or "
                    "skipped this collective; call ls_comm_abort",
                    st->env.timeout_s);
}

/* Wait for the worker to finish r; frees r on timeout (via the worker). */
static ls_status ls_mpi_wait_thread(ls_mpi_state *st, ls_mpi_req *r, int *gave_up) {
    *gave_up = 0;
    pthread_mutex_lock(&st->mu);
    /* past LS_COMM_TIMEOUT_MAX_S the deadline would overflow time_t's conversion: no limit */
    if (st->env.timeout_s > 0 && st->env.timeout_s <= LS_COMM_TIMEOUT_MAX_S) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        double secs = st->env.timeout_s;
        dl.tv_sec += (time_t)secs;
        dl.tv_nsec += (long)((secs - (double)(time_t)secs) * 1e9);
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (!r->done) {
            if (pthread_cond_timedwait(&st->done_cv, &st->mu, &dl) == ETIMEDOUT && !r->done) {
                r->orphaned = 1;
                st->orphans++;
                *gave_up = 1;
                pthread_mutex_unlock(&st->mu);
                return ls_mpi_timeout_error(st, r);
            }
        }
    } else {
        while (!r->done) pthread_cond_wait(&st->done_cv, &st->mu);
    }
    pthread_mutex_unlock(&st->mu);
    if (r->status != LS_OK) return ls_error(r->status, "%s", r->err);
    return LS_OK;
}

/* Progress every unfinished request; *done: all of r's calls were posted and have finished. */
static ls_status ls_mpi_test_nonblocking(ls_mpi_state *st, ls_mpi_req *r, int *done) {
    *done = !r->queued;
    if (!r->queued) return r->status != LS_OK ? ls_error(r->status, "%s", r->err) : LS_OK;
    ls_status s = ls_mpi_pump(st);
    if (r->nposted == r->nreq && r->first_open == r->nreq) {
        ls_mpi_unlink(st, r);
        r->posted = 0;
        *done = 1;
        if (r->status != LS_OK) return ls_error(r->status, "%s", r->err);
    }
    return s;
}

static ls_status ls_mpi_wait_nonblocking(ls_mpi_state *st, ls_mpi_req *r) {
    double t0 = st->env.timeout_s > 0 ? ls_now() : 0;
    for (long spins = 0;; spins++) {
        int done = 0;
        LS_CHECK(ls_mpi_test_nonblocking(st, r, &done));
        if (done) return LS_OK;
        if (st->env.timeout_s > 0 && (spins & 1023) == 0 && ls_now() - t0 > st->env.timeout_s) {
            ls_status e = ls_mpi_timeout_error(st, r);
            ls_mpi_break(st, "a collective did not complete within LOCKSTEP_COMM_TIMEOUT");
            return e;
        }
    }
}

/* ---- the interface ---- */

static ls_status ls_mpi_start(void *sp, const ls_coll_op *op, void **handle) {
    ls_mpi_state *st = sp;
    ls_mpi_req *r = NULL;
    LS_CHECK(ls_mpi_prepare(st, op, &r));
    ls_status s = ls_mpi_pre(st, r);
    if (s == LS_OK) {
        if (ls_mpi_trivial(r))
            r->done = 1;
        else if (st->threaded)
            ls_mpi_enqueue(st, r);
        else
            s = ls_mpi_post_nonblocking(st, r);
    }
    if (s != LS_OK) {
        if (!r->posted) ls_mpi_req_free(st, r); /* else MPI may still write the buffers: leak r */
        return s;
    }
    *handle = r;
    return LS_OK;
}

static ls_status ls_mpi_wait(void *sp, void *h) {
    ls_mpi_state *st = sp;
    ls_mpi_req *r = h;
    ls_status s;
    if (ls_mpi_trivial(r)) {
        s = LS_OK;
    } else if (st->threaded) {
        int gave_up = 0;
        s = ls_mpi_wait_thread(st, r, &gave_up);
        if (gave_up) return s; /* the worker owns r now */
    } else {
        s = ls_mpi_wait_nonblocking(st, r);
        if (s != LS_OK && r->posted) return s; /* MPI may still write the buffers: leak r */
        ls_mpi_unlink(st, r);
    }
    if (s == LS_OK) s = ls_mpi_post(st, r);
    ls_mpi_req_free(st, r);
    return s;
}

static ls_status ls_mpi_test(void *sp, void *h, int *done) {
    ls_mpi_state *st = sp;
    ls_mpi_req *r = h;
    if (ls_mpi_trivial(r)) {
        *done = 1;
    } else if (st->threaded) {
        pthread_mutex_lock(&st->mu);
        *done = r->done;
        pthread_mutex_unlock(&st->mu);
    } else {
        LS_CHECK(ls_mpi_test_nonblocking(st, r, done));
    }
    return LS_OK;
}

static ls_status ls_mpi_run(void *sp, const ls_coll_op *op) {
    ls_mpi_state *st = sp;
    int idle = 1;
    if (st->threaded) {
        pthread_mutex_lock(&st->mu);
        idle = st->inflight == 0;
        pthread_mutex_unlock(&st->mu);
        /* A call on this thread has no time limit: with LOCKSTEP_COMM_TIMEOUT (on by default) the
         * worker makes it and this thread waits with the limit. A rank stopped before a host
         * collective (the per-step stop agreement, the loss totals) held the others in a blocking
         * MPI_Allreduce for ever, past the timeout. */
        if (st->env.timeout_s > 0 && st->env.timeout_s <= LS_COMM_TIMEOUT_MAX_S) idle = 0;
    } else {
        /* Always through the queue: whether it is empty depends on what each rank has tested so
         * far, and MPI does not pair a blocking call on one rank with a nonblocking one on another. */
        idle = 0;
    }
    if (!idle) { /* keep the order of the queued collectives */
        void *h = NULL;
        LS_CHECK(ls_mpi_start(sp, op, &h));
        return ls_mpi_wait(sp, h);
    }
    /* Idle (or no worker): only this thread touches MPI for this communicator now. */
    ls_mpi_req *r = NULL;
    LS_CHECK(ls_mpi_prepare(st, op, &r));
    ls_status s = ls_mpi_pre(st, r);
    if (s == LS_OK) s = ls_mpi_exec(st, r);
    if (s == LS_OK) s = ls_mpi_post(st, r);
    ls_mpi_req_free(st, r);
    return s;
}

static void ls_mpi_abort(void *sp, const char *why) {
    ls_mpi_state *st = sp;
    MPI_Abort(st->comm, 1);
}

/* The last communicator gone: lockstep's operators freed. MPI itself stays initialized until the
 * process exits (ls_mpi_at_exit), when its exit status says whether the ranks end together. */
static void ls_mpi_release(void) {
    pthread_mutex_lock(&ls_mpi_global_lock);
    if (--ls_mpi_users == 0) {
        int fin = 0;
        MPI_Finalized(&fin);
        for (int i = 0; i < 2 && !fin; i++) {
            if (ls_mpi_sum16[i] != MPI_OP_NULL) MPI_Op_free(&ls_mpi_sum16[i]);
            if (ls_mpi_minmax[i] != MPI_OP_NULL) MPI_Op_free(&ls_mpi_minmax[i]);
        }
        ls_mpi_sum16[0] = ls_mpi_sum16[1] = MPI_OP_NULL;
        ls_mpi_minmax[0] = ls_mpi_minmax[1] = MPI_OP_NULL;
    }
    pthread_mutex_unlock(&ls_mpi_global_lock);
}

/* Whether every rank of MPI_COMM_WORLD reaches this barrier within `grace` seconds (< 0: waits
 * for ever, as MPI_Finalize would). */
static int ls_mpi_exit_barrier(double grace) {
    MPI_Request req;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return 0;
    const double t0 = ls_now();
    for (;;) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return 0;
        if (done) return 1;
        if (grace >= 0 && ls_now() - t0 > grace) return 0;
        struct timespec ms = {0, 1000000L};
        nanosleep(&ms, NULL);
    }
}

/* At exit (on_exit: the status given to exit or returned by main), MPI that lockstep initialized
 * is finalized once its communicators are gone. MPI_Finalize is collective in Open MPI (a PMIx
 * fence): a rank that reported an error and returned non-zero while another waited for it in a
 * collective stayed in MPI_Finalize, and so never exited, until that collective's
 * LOCKSTEP_COMM_TIMEOUT (mpirun ends a job as soon as a rank exits non-zero, which it never did).
 * So every rank first meets the others in a barrier: one exiting 0 waits as MPI_Finalize would;
 * one exiting non-zero waits LS_MPI_EXIT_GRACE_S, then aborts the job naming itself, telling
 * lockstep-run first. Ranks that fail alike (and a stop every rank agreed on: 143) all reach it,
 * and finalize. Where communicators are still held, nothing is done (as before: the process exits
 * without MPI_Finalize, and mpirun ends the job). */
static void ls_mpi_at_exit(int status, void *arg) {
    (void)arg;
    pthread_mutex_lock(&ls_mpi_global_lock);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (!ls_mpi_we_initialized || ls_mpi_users > 0 || !inited || fin || getpid() != ls_mpi_pid) {
        pthread_mutex_unlock(&ls_mpi_global_lock);
        return;
    }
    ls_mpi_we_initialized = 0;
    const int code = status & 0xff;
    int rank = 0, world = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1 && !ls_mpi_exit_barrier(code ? LS_MPI_EXIT_GRACE_S : -1.0)) {
        LS_LOG_E("rank %d of %d exits with status %d, but the other ranks have not exited within %g s (one may wait "
                 "for this rank in a collective): aborting the job (MPI_Abort) rather than waiting for them in "
                 "MPI_Finalize",
                 rank, world, code, LS_MPI_EXIT_GRACE_S);
        ls_comm_tell_launcher_abort();
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    MPI_Finalize();
    pthread_mutex_unlock(&ls_mpi_global_lock);
}

/* Nonblocking progress, at destruction: the requests started and not waited for (comm.h asks for
 * every one to be waited for). Their MPI calls were pending, some not yet posted: MPI_Comm_free and
 * MPI_Finalize with them crashed in Open MPI's progress (the communication thread's progress runs
 * its queue to the end). They are completed now (the other ranks' calls pair with them) within
 * LOCKSTEP_COMM_TIMEOUT, and freed; 0 where one failed or timed out (MPI may still use them). */
static int ls_mpi_drain(ls_mpi_state *st) {
    if (!st->nb_head) return 1;
    int n = 0;
    for (ls_mpi_req *r = st->nb_head; r; r = r->nb_next) n++;
    LS_LOG_W("mpi communicator destroyed with %d collective(s) not waited for: completing them first (call "
             "ls_comm_wait on every request before ls_comm_destroy)",
             n);
    const double t0 = ls_now();
    for (long spins = 0; st->nb_head; spins++) {
        ls_mpi_req *r = st->nb_head;
        int done = 0;
        if (ls_mpi_test_nonblocking(st, r, &done) != LS_OK) {
            LS_LOG_W("%s", ls_last_error());
            return 0;
        }
        if (done) {
            ls_mpi_req_free(st, r);
        } else if (st->env.timeout_s > 0 && (spins & 1023) == 0 && ls_now() - t0 > st->env.timeout_s) {
            LS_LOG_W("the collectives not waited for did not complete within %g s (LOCKSTEP_COMM_TIMEOUT)",
                     st->env.timeout_s);
            return 0;
        }
    }
    return 1;
}

static void ls_mpi_destroy(void *sp) {
    ls_mpi_state *st = sp;
    if (!st) return;
    if (!st->worker_started && !ls_mpi_drain(st)) {
        LS_LOG_W("mpi communicator destroyed with collectives MPI may still be running: its resources are left "
                 "behind (call ls_comm_abort after a failed collective)");
        pthread_mutex_lock(&st->stage_mu); /* as below: the kept staging blocks go now */
        st->closing = 1;
        for (int i = 0; i < st->nkept; i++) ls_stage_free(st->kept[i]);
        st->nkept = 0;
        pthread_mutex_unlock(&st->stage_mu);
        return;
    }
    if (st->worker_started) {
        pthread_mutex_lock(&st->mu);
        if (st->orphans) { /* the thread is stuck in a collective that timed out: leave it be */
            pthread_mutex_unlock(&st->mu);
            LS_LOG_W("mpi communicator destroyed with a timed-out collective still running: its "
                     "thread and resources are left behind (call ls_comm_abort after a timeout)");
            /* the kept staging blocks go now, while their allocator lives; the running one's is
             * leaked when it ends (its allocator may be gone by then) */
            pthread_mutex_lock(&st->stage_mu);
            st->closing = 1;
            for (int i = 0; i < st->nkept; i++) ls_stage_free(st->kept[i]);
            st->nkept = 0;
            pthread_mutex_unlock(&st->stage_mu);
            pthread_detach(st->worker);
            return;
        }
        st->stop = 1;
        pthread_cond_broadcast(&st->work_cv);
        pthread_mutex_unlock(&st->mu);
        pthread_join(st->worker, NULL);
    }
    /* an application that initialized MPI itself may have finalized it already: MPI then refuses
     * every call (Open MPI aborts the process), and the communicator went with it */
    int fin = 0;
    MPI_Finalized(&fin);
    if (st->comm != MPI_COMM_NULL && !fin) MPI_Comm_free(&st->comm);
    for (int i = 0; i < st->nkept; i++) ls_stage_free(st->kept[i]);
    pthread_mutex_destroy(&st->stage_mu);
    pthread_cond_destroy(&st->work_cv);
    pthread_cond_destroy(&st->done_cv);
    pthread_mutex_destroy(&st->mu);
    free(st);
    ls_mpi_release();
}

static const ls_comm_iface ls_mpi_iface = {
    .name = "mpi",
    .run = ls_mpi_run,
    .start = ls_mpi_start,
    .wait = ls_mpi_wait,
    .test = ls_mpi_test,
    .set_compute_stream = NULL,
    .abort = ls_mpi_abort,
    .destroy = ls_mpi_destroy,
};

/* An MPI in use: the application's, or lockstep's while a communicator holds it (once the last is
 * gone, lockstep's waits only for the exit to be finalized). */
int ls_comm_mpi_initialized(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    pthread_mutex_lock(&ls_mpi_global_lock);
    const int lingering = ls_mpi_we_initialized && ls_mpi_users == 0;
    pthread_mutex_unlock(&ls_mpi_global_lock);
    return inited && !fin && !lingering;
}

/* Open MPI busy-polls without yielding unless it knows the node is oversubscribed; with a
 * communication thread per rank, ranks x 2 busy threads on fewer CPUs can starve each other (a
 * spinning thread holds the CPU another rank's thread needs: steps 50x slower). So where this
 * process initializes MPI, the launcher says local_world ranks share this node, and
 * 2 * local_world exceeds the online CPUs, ask Open MPI to yield when idle (unless set). */
static void ls_mpi_tune_yield(void) {
    if (getenv("OMPI_MCA_mpi_yield_when_idle")) return;
    ls_rank_info ri;
    if (ls_rank_discover(&ri) != LS_OK) return;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus > 0 && 2L * ri.local_world > cpus) {
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        LS_LOG_D("%d ranks with communication threads on %ld CPUs: OMPI_MCA_mpi_yield_when_idle=1", ri.local_world,
                 cpus);
    }
}

static ls_status ls_mpi_acquire(int *thread_level) {
    pthread_mutex_lock(&ls_mpi_global_lock);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (fin) {
        pthread_mutex_unlock(&ls_mpi_global_lock);
        return ls_error(LS_ERR_COMM, "MPI was already finalized (by the application): create "
                                     "lockstep's communicators before MPI_Finalize");
    }
    if (!inited) {
        ls_mpi_tune_yield();
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            pthread_mutex_unlock(&ls_mpi_global_lock);
            return ls_mpi_error(rc, "MPI_Init_thread");
        }
        ls_mpi_we_initialized = 1;
        ls_mpi_pid = getpid();
        if (!ls_mpi_exit_hook && on_exit(ls_mpi_at_exit, NULL) == 0) ls_mpi_exit_hook = 1;
    }
    MPI_Query_thread(thread_level);
    if (ls_mpi_sum16[0] == MPI_OP_NULL) {
        int rc = MPI_Op_create(ls_mpi_f16_sum, 1, &ls_mpi_sum16[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Op_create(ls_mpi_bf16_sum, 1, &ls_mpi_sum16[1]);
        if (rc == MPI_SUCCESS) rc = MPI_Op_create(ls_mpi_max, 1, &ls_mpi_minmax[0]);
        if (rc == MPI_SUCCESS) rc = MPI_Op_create(ls_mpi_min, 1, &ls_mpi_minmax[1]);
        if (rc != MPI_SUCCESS) {
            for (int i = 0; i < 2; i++) {
                if (ls_mpi_sum16[i] != MPI_OP_NULL) MPI_Op_free(&ls_mpi_sum16[i]);
                if (ls_mpi_minmax[i] != MPI_OP_NULL) MPI_Op_free(&ls_mpi_minmax[i]);
            }
            ls_mpi_sum16[0] = ls_mpi_sum16[1] = MPI_OP_NULL;
            ls_mpi_minmax[0] = ls_mpi_minmax[1] = MPI_OP_NULL;
            pthread_mutex_unlock(&ls_mpi_global_lock);
            return ls_mpi_error(rc, "MPI_Op_create (the f16 and bf16 sums, the float max and min)");
        }
    }
    ls_mpi_users++;
    pthread_mutex_unlock(&ls_mpi_global_lock);
    return LS_OK;
}

/* LOCKSTEP_MPI_CUDA_AWARE: 1 or on, 0 or off (checked with the other settings), else the MPI's answer */
static int ls_mpi_query_cuda_aware(void) {
    const char *e = getenv("LOCKSTEP_MPI_CUDA_AWARE");
    if (e && *e) return !strcmp(e, "1") || !strcmp(e, "on");
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support();
#else
    return 0;
#endif
}

/* The all-reduce part size (st->chunk). `given` is LOCKSTEP_MPI_CHUNK's value (`text`), (size_t)-1
 * where it is not set: then 16 MiB where every rank is on this node (shared memory: parts keep Open
 * MPI's temporary buffers under glibc's mmap threshold) and 1 MiB where the ranks span nodes (over
 * TCP, parts of 1 MiB reach 87% of a 1 Gbit/s link against 53% for 16 MiB: docs/performance.md).
 * Parts of different sizes would pair different MPI calls, so the ranks agree on the smallest. So
 * with the progress: *threaded (this rank's wish, LOCKSTEP_MPI_PROGRESS and MPI's thread level)
 * becomes 0 on every rank where any rank is not threaded, since MPI never pairs the blocking
 * collectives of the communication thread with the nonblocking ones of the other mode (the ranks
 * waited for each other forever). The same exchange carries `failed` (this rank refused its
 * settings): then every rank fails, the others with LS_ERR_COMM, instead of waiting for it.
 * Collective: every rank calls this. */
static ls_status ls_mpi_agree_chunk(ls_mpi_state *st, size_t given, const char *text, int failed, int *threaded) {
    size_t chunk = given;
    if (st->world == 1) {
        st->chunk = given == (size_t)-1 ? LS_MPI_CHUNK_NODE : given;
        return LS_OK;
    }
    MPI_Comm node = MPI_COMM_NULL;
    int node_size = st->world;
    int rc = MPI_Comm_split_type(st->comm, MPI_COMM_TYPE_SHARED, st->rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return ls_mpi_error(rc, "MPI_Comm_split_type (the ranks on this node)");
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    st->spans_nodes = node_size < st->world;
    if (given == (size_t)-1) chunk = st->spans_nodes ? LS_MPI_CHUNK_NET : LS_MPI_CHUNK_NODE;
    /* the smallest size (0, no limit, is the largest), whether any rank failed (0), and whether any
     * rank has nonblocking progress (0) */
    unsigned long long mine[3] = {chunk ? (unsigned long long)chunk : ULLONG_MAX, failed ? 0ULL : 1ULL,
                                  *threaded ? 1ULL : 0ULL};
    unsigned long long agreed[3] = {0, 0, 0};
    rc = MPI_Allreduce(mine, agreed, 3, MPI_UNSIGNED_LONG_LONG, MPI_MIN, st->comm);
    if (rc != MPI_SUCCESS) return ls_mpi_error(rc, "MPI_Allreduce (agreeing on the all-reduce part size)");
    if (failed) return LS_OK; /* the caller reports its own error */
    if (!agreed[1])
        return ls_error(LS_ERR_COMM, "MPI communicator: another rank refused its settings (LOCKSTEP_MPI_CHUNK, "
                                     "LOCKSTEP_MPI_PROGRESS or LOCKSTEP_MPI_WINDOW; its error names the value)");
    st->chunk = agreed[0] == ULLONG_MAX ? 0 : (size_t)agreed[0];
    if (agreed[0] != mine[0])
        LS_LOG_W("LOCKSTEP_MPI_CHUNK differs between ranks (here %s, %zu bytes): all use the smallest, %zu bytes",
                 text ? text : "unset", chunk, st->chunk);
    if (agreed[2] != mine[2])
        LS_LOG_W("the MPI progress differs between ranks (here thread, elsewhere nonblocking: "
                 "LOCKSTEP_MPI_PROGRESS, or an MPI without MPI_THREAD_MULTIPLE): all use nonblocking");
    *threaded = agreed[2] != 0;
    return LS_OK;
}

ls_status ls_comm_mpi_create(const ls_comm_env *env, const ls_comm_iface **iface, void **state, int *rank, int *world) {
    /* A bad setting fails this rank; where the launcher started several, they all fail with it
     * (ls_mpi_agree_chunk) instead of waiting in MPI_Comm_dup for this one. */
    ls_status refused = LS_OK;
    const char *prog = getenv("LOCKSTEP_MPI_PROGRESS");
    int want_thread = 1;
    if (prog && *prog) {
        if (!strcmp(prog, "thread"))
            want_thread = 1;
        else if (!strcmp(prog, "nonblocking"))
            want_thread = 0;
        else
            refused =
                ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_MPI_PROGRESS=%s: expected thread or nonblocking", prog);
    }
    size_t chunk = 0;
    const char *ch = getenv("LOCKSTEP_MPI_CHUNK");
    const int chunk_given = ch && *ch;
    if (refused == LS_OK && chunk_given && ls_memory_parse_size(ch, &chunk) != LS_OK)
        refused = ls_error(LS_ERR_INVALID_ARGUMENT,
                           "LOCKSTEP_MPI_CHUNK=%s: expected a size such as 16MiB, 4096 or 0 (0: one MPI call per "
                           "all-reduce)",
                           ch);
    if (refused == LS_OK && chunk && chunk < 4096)
        refused = ls_error(LS_ERR_INVALID_ARGUMENT,
                           "LOCKSTEP_MPI_CHUNK=%s: below the 4 KiB minimum (a call per few elements); 0 turns the "
                           "splitting off",
                           ch);
    long window = -1;
    const char *wi = getenv("LOCKSTEP_MPI_WINDOW");
    if (refused == LS_OK && wi && *wi) {
        long long w = -1; /* digits only: strtol took a space and a '+' */
        if (ls_parse_count(wi, 1000000, &w))
            window = (long)w;
        else
            refused = ls_error(LS_ERR_INVALID_ARGUMENT,
                               "LOCKSTEP_MPI_WINDOW=%s: expected a count of MPI calls from 0 to 1000000 (0: no "
                               "limit)",
                               wi);
    }
    const char *ca = getenv("LOCKSTEP_MPI_CUDA_AWARE");
    if (refused == LS_OK && ca && *ca && strcmp(ca, "1") && strcmp(ca, "on") && strcmp(ca, "0") && strcmp(ca, "off"))
        refused = ls_error(LS_ERR_INVALID_ARGUMENT,
                           "LOCKSTEP_MPI_CUDA_AWARE=%s: expected 1 or on (device buffers to MPI), 0 or off (staged "
                           "through host memory)",
                           ca);
    char refused_msg[512] = "";
    if (refused != LS_OK) {
        ls_rank_info ri;
        if (ls_rank_discover(&ri) != LS_OK || ri.world <= 1) return refused;
        snprintf(refused_msg, sizeof refused_msg, "%s", ls_last_error());
    }
    int level = MPI_THREAD_SINGLE;
    LS_CHECK(ls_mpi_acquire(&level));
    ls_mpi_state *st = calloc(1, sizeof *st);
    if (!st) {
        ls_mpi_release();
        return ls_error(LS_ERR_OUT_OF_MEMORY, "MPI communicator: out of host memory");
    }
    st->env = *env;
    st->comm = MPI_COMM_NULL;

    pthread_mutex_init(&st->mu, NULL);
    pthread_mutex_init(&st->stage_mu, NULL);
    pthread_cond_init(&st->work_cv, NULL);
    pthread_cond_init(&st->done_cv, NULL);
    ls_status s = LS_OK;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &st->comm);
    if (rc != MPI_SUCCESS) {
        s = ls_mpi_error(rc, "MPI_Comm_dup");
        goto fail;
    }
    MPI_Comm_set_errhandler(st->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(st->comm, &st->rank);
    MPI_Comm_size(st->comm, &st->world);
    int threaded = want_thread && level >= MPI_THREAD_MULTIPLE;
    s = ls_mpi_agree_chunk(st, chunk_given && refused == LS_OK ? chunk : (size_t)-1, ch, refused != LS_OK, &threaded);
    if (s == LS_OK && refused != LS_OK) s = ls_error(refused, "%s", refused_msg);
    if (s != LS_OK) goto fail;
    st->window = window >= 0 ? (int)window : st->spans_nodes ? LS_MPI_WINDOW_NET : LS_MPI_WINDOW_NODE;
    st->cuda_aware = env->device.type != LS_DEVICE_CPU && ls_mpi_query_cuda_aware();
    st->threaded = threaded;
    if (want_thread && level < MPI_THREAD_MULTIPLE && prog && *prog)
        LS_LOG_W("LOCKSTEP_MPI_PROGRESS=thread needs MPI_THREAD_MULTIPLE; this MPI gives level %d: "
                 "using nonblocking progress",
                 level);
    if (st->threaded) {
        if (pthread_create(&st->worker, NULL, ls_mpi_worker, st) != 0) {
            s = ls_error(LS_ERR_COMM, "cannot start the MPI communication thread");
            goto fail;
        }
        st->worker_started = 1;
    }
    char progress[48] = "thread";
    if (!st->threaded) snprintf(progress, sizeof progress, "nonblocking (window %d)", st->window);
    LS_LOG_D("mpi communicator: rank %d of %d, progress %s, device buffers %s, all-reduce parts of %zu bytes at most "
             "(0: no limit)",
             st->rank, st->world, progress, st->cuda_aware ? "direct (CUDA-aware)" : "staged", st->chunk);
    *iface = &ls_mpi_iface;
    *state = st;
    *rank = st->rank;
    *world = st->world;
    return LS_OK;
fail:
    ls_mpi_destroy(st);
    return s;
}
