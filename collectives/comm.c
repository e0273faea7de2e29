/* comm.c: the backend-neutral half of the communicator: argument checks, dispatch to the
 * backend's function table, requests (wait/test), accessors and destruction. Backend selection
 * and creation live in registry.c. */
#include "comm_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

#include "log.h"
#include "parse.h"
#include "timeline.h"

const char *ls_coll_kind_name(ls_coll_kind k) {
    switch (k) {
    case LS_COLL_ALLREDUCE: return "allreduce";
    case LS_COLL_BROADCAST: return "broadcast";
    case LS_COLL_ALLGATHER: return "allgather";
    case LS_COLL_REDUCE_SCATTER: return "reduce-scatter";
    case LS_COLL_BARRIER: return "barrier";
    case LS_COLL_REDUCE: return "reduce";
    }
    return "?";
}

const char *ls_reduce_op_name(ls_reduce_op op) {
    switch (op) {
    case LS_REDUCE_SUM: return "sum";
    case LS_REDUCE_AVG: return "avg";
    case LS_REDUCE_MAX: return "max";
    case LS_REDUCE_MIN: return "min";
    }
    return "?";
}

int64_t ls_coll_send_count(const ls_coll_op *op, int world) {
    switch (op->kind) {
    case LS_COLL_REDUCE_SCATTER: return op->count * world;
    case LS_COLL_BARRIER: return 0;
    default: return op->count;
    }
}

int64_t ls_coll_recv_count(const ls_coll_op *op, int world) {
    switch (op->kind) {
    case LS_COLL_ALLGATHER: return op->count * world;
    case LS_COLL_BARRIER: return 0;
    default: return op->count;
    }
}

ls_status ls_comm_timeout_from_env(double *out) {
    *out = 1800.0;
    const char *s = getenv("LOCKSTEP_COMM_TIMEOUT");
    if (!s || !*s) return LS_OK;
    double v;
    if (!ls_parse_decimal(s, &v)) /* strtod took "0x10" for 16 s, " 5", "+5", and 1e-400 for 0 (forever) */
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "LOCKSTEP_COMM_TIMEOUT=%s is not a number of seconds in decimal digits (e.g. 30 or 0.5; 0 "
                        "waits forever)",
                        s);
    /* a deadline past a 32-bit year does not fit a timespec: say 0 for no limit */
    if (v > LS_COMM_TIMEOUT_MAX_S)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "LOCKSTEP_COMM_TIMEOUT=%s is more than %.0f seconds (about 31 years); 0 waits forever", s,
                        LS_COMM_TIMEOUT_MAX_S);
    *out = v;
    return LS_OK;
}

static void ls_coll_describe(const ls_comm *c, const ls_coll_op *op, char *buf, size_t len) {
    if (op->kind == LS_COLL_BARRIER)
        snprintf(buf, len, "barrier");
    else
        snprintf(buf, len, "%s of %" PRId64 " %s", ls_coll_kind_name(op->kind), op->count, ls_dtype_name(op->dtype));
}

/* A collective's in-place form: the per-rank buffer `part` (count elements) may overlap the whole
 * one `whole` (world * count) only as this rank's block of it (whole + rank * count). */
static ls_status ls_check_in_place(const ls_comm *c, const ls_coll_op *op, size_t es, const char *what,
                                   const void *whole, const char *whole_name, const void *part, const char *part_name) {
    const uintptr_t w = (uintptr_t)whole, p = (uintptr_t)part;
    const uintptr_t bytes = (uintptr_t)op->count * es, slot = w + (uintptr_t)c->rank * bytes;
    /* the formula in the arguments' names: recv, send */
    const char *ws = strcmp(whole_name, "receive") ? whole_name : "recv";
    const char *ps = strcmp(part_name, "receive") ? part_name : "recv";
    if (p < w + bytes * (uintptr_t)c->world && w < p + bytes && p != slot)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "%s: the %s buffer overlaps the %s buffer but is not this rank's block of it (in place is "
                        "%s == %s + rank * count_per_rank, here %s + %d * %" PRId64 ")",
                        what, part_name, whole_name, ps, ws, ws, c->rank, op->count);
    return LS_OK;
}

static ls_status ls_coll_check(const ls_comm *c, const ls_coll_op *op) {
    if (!c) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: communicator is NULL", ls_coll_kind_name(op->kind));
    const char *what = ls_coll_kind_name(op->kind);
    if (c->aborted)
        return ls_error(LS_ERR_COMM, "%s on rank %d: the communicator was aborted (%s)", what, c->rank, c->abort_why);
    if (op->kind == LS_COLL_BARRIER) return LS_OK;
    size_t es = ls_dtype_size(op->dtype);
    if (es == 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", what, (int)op->dtype);
    if (op->count < 0) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: negative count %" PRId64, what, op->count);
    if (op->count > INT64_MAX / (int64_t)es / c->world)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: count %" PRId64 " overflows", what, op->count);
    if ((op->kind == LS_COLL_ALLREDUCE || op->kind == LS_COLL_REDUCE_SCATTER || op->kind == LS_COLL_REDUCE) &&
        ((int)op->op < LS_REDUCE_SUM || (int)op->op > LS_REDUCE_MIN))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: unknown reduction %d", what, (int)op->op);
    if (op->kind == LS_COLL_BROADCAST && (op->root < 0 || op->root >= c->world))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "broadcast: root %d is not a rank of %d", op->root, c->world);
    if (op->nseg) {
        int64_t sum = 0;
        for (int j = 0; j < op->nseg; j++) {
            if (op->seg_count[j] < 0)
                return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: segment %d has a negative count", what, j);
            if (op->seg_root[j] < 0 || op->seg_root[j] >= c->world)
                return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: segment %d's root %d is not a rank of %d", what, j,
                                op->seg_root[j], c->world);
            sum += op->seg_count[j];
        }
        if (sum != op->count) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the segments' counts overflow", what);
    }
    if (op->count > 0) {
        if (!op->recv) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: buffer is NULL", what);
        if ((op->kind == LS_COLL_ALLGATHER || op->kind == LS_COLL_REDUCE_SCATTER) && !op->send)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: send buffer is NULL", what);
        /* a send buffer inside the receive buffer other than this rank's block: MPI read it after
         * writing another rank's block over it (send == recv on rank 1 of 2 got rank 0's values
         * in its own block, without an error) */
        if (op->kind == LS_COLL_ALLGATHER)
            LS_CHECK(ls_check_in_place(c, op, es, "allgather", op->recv, "receive", op->send, "send"));
        /* the same for a reduce-scatter's receive buffer inside its send buffer: in place is NCCL's
         * form (ncclReduceScatter(data, data + rank * count)); MPI's (send == recv, the result at
         * the start) read on nccl as two overlapping buffers past rank 0 */
        if (op->kind == LS_COLL_REDUCE_SCATTER)
            LS_CHECK(ls_check_in_place(c, op, es, "reduce-scatter", op->send, "send", op->recv, "receive"));
    }
    return LS_OK;
}

ls_status ls_comm_run_op(ls_comm *c, const ls_coll_op *op) {
    LS_CHECK(ls_coll_check(c, op));
    ls_status s = c->iface->run(c->state, op);
    if (s != LS_OK) {
        char d[64];
        ls_coll_describe(c, op, d, sizeof d);
        return ls_error_context(s, "%s on rank %d (%s)", d, c->rank, c->iface->name);
    }
    return LS_OK;
}

static ls_status ls_comm_start_op(ls_comm *c, const ls_coll_op *op, ls_comm_request **req) {
    if (!req) return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: request pointer is NULL", ls_coll_kind_name(op->kind));
    *req = NULL;
    LS_CHECK(ls_coll_check(c, op));
    ls_comm_request *r = calloc(1, sizeof *r);
    if (!r) return ls_error(LS_ERR_OUT_OF_MEMORY, "%s: cannot allocate a request", ls_coll_kind_name(op->kind));
    r->comm = c;
    ls_coll_describe(c, op, r->what, sizeof r->what);
    ls_status s;
    if (c->iface->start) {
        s = c->iface->start(c->state, op, &r->handle);
    } else {
        s = c->iface->run(c->state, op);
        r->completed = 1;
        r->status = s;
    }
    if (s != LS_OK) {
        free(r);
        char d[64];
        ls_coll_describe(c, op, d, sizeof d);
        return ls_error_context(s, "%s on rank %d (%s)", d, c->rank, c->iface->name);
    }
    *req = r;
    return LS_OK;
}

ls_status ls_comm_wait(ls_comm_request **req) {
    if (!req || !*req) return LS_OK;
    ls_comm_request *r = *req;
    *req = NULL; /* freed below: a second wait on it is a no-op, as MPI_Wait on MPI_REQUEST_NULL */
    ls_comm *c = r->comm;
    ls_status s;
    if (r->completed) {
        s = r->status;
        if (s != LS_OK) ls_error(s, "%s on rank %d (%s) failed earlier", r->what, c->rank, c->iface->name);
    } else {
        s = c->iface->wait(c->state, r->handle);
        if (s != LS_OK) ls_error_context(s, "%s on rank %d (%s)", r->what, c->rank, c->iface->name);
    }
    free(r);
    return s;
}

ls_status ls_comm_wait_stream(ls_comm_request **req) {
    if (!req || !*req) return LS_OK;
    ls_comm_request *r = *req;
    ls_comm *c = r->comm;
    if (r->completed || !c->iface->wait_stream) return ls_comm_wait(req);
    *req = NULL;
    ls_status s = c->iface->wait_stream(c->state, r->handle, r->what);
    if (s != LS_OK) ls_error_context(s, "%s on rank %d (%s)", r->what, c->rank, c->iface->name);
    free(r);
    return s;
}

ls_status ls_comm_test(ls_comm_request *r, int *done) {
    if (!r || !done) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_comm_test: NULL request or flag");
    *done = 0;
    if (!r->completed) {
        ls_comm *c = r->comm;
        int d = 0;
        ls_status s = c->iface->test(c->state, r->handle, &d);
        if (s != LS_OK) return ls_error_context(s, "%s on rank %d (%s)", r->what, c->rank, c->iface->name);
        if (!d) return LS_OK;
        r->status = c->iface->wait(c->state, r->handle);
        if (r->status != LS_OK) ls_error_context(r->status, "%s on rank %d (%s)", r->what, c->rank, c->iface->name);
        r->handle = NULL;
        r->completed = 1;
    }
    *done = 1;
    return r->status;
}

/* ---- public wrappers ---- */

static ls_coll_op ls_op_make(ls_coll_kind kind, const void *send, void *recv, int64_t count, ls_dtype t,
                             ls_reduce_op op, int root, int host) {
    ls_coll_op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.send = send;
    o.recv = recv;
    o.count = count;
    o.dtype = t;
    o.op = op;
    o.root = root;
    o.host = host;
    return o;
}

ls_status ls_comm_allreduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op) {
    ls_coll_op o = ls_op_make(LS_COLL_ALLREDUCE, buf, buf, count, t, op, 0, 0);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_broadcast(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root) {
    ls_coll_op o = ls_op_make(LS_COLL_BROADCAST, buf, buf, count, t, LS_REDUCE_SUM, root, 0);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_allgather(ls_comm *c, const void *send, void *recv, int64_t n, ls_dtype t) {
    ls_coll_op o = ls_op_make(LS_COLL_ALLGATHER, send, recv, n, t, LS_REDUCE_SUM, 0, 0);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_reduce_scatter(ls_comm *c, const void *send, void *recv, int64_t n, ls_dtype t, ls_reduce_op op) {
    ls_coll_op o = ls_op_make(LS_COLL_REDUCE_SCATTER, send, recv, n, t, op, 0, 0);
    return ls_comm_run_op(c, &o);
}

/* A reduce to one root is a reduce in one segment: the backends have the one path for reduces.
 * count and root must outlive the op (the caller's arguments do). */
static ls_status ls_reduce_to_root(const ls_comm *c, void *buf, const int64_t *count, ls_dtype t, ls_reduce_op op,
                                   const int *root, ls_coll_op *o) {
    if (c && (*root < 0 || *root >= c->world))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "reduce: root %d is not a rank of %d", *root, c->world);
    *o = ls_op_make(LS_COLL_REDUCE, buf, buf, *count, t, op, *root, 0);
    o->nseg = 1;
    o->seg_count = count;
    o->seg_root = root;
    return LS_OK;
}

ls_status ls_comm_reduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op, int root) {
    ls_coll_op o;
    LS_CHECK(ls_reduce_to_root(c, buf, &count, t, op, &root, &o));
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_barrier(ls_comm *c) {
    ls_coll_op o = ls_op_make(LS_COLL_BARRIER, NULL, NULL, 0, LS_U8, LS_REDUCE_SUM, 0, 0);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_iallreduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op, ls_comm_request **req) {
    ls_coll_op o = ls_op_make(LS_COLL_ALLREDUCE, buf, buf, count, t, op, 0, 0);
    return ls_comm_start_op(c, &o, req);
}

ls_status ls_comm_ibroadcast(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root, ls_comm_request **req) {
    ls_coll_op o = ls_op_make(LS_COLL_BROADCAST, buf, buf, count, t, LS_REDUCE_SUM, root, 0);
    return ls_comm_start_op(c, &o, req);
}

ls_status ls_comm_iallgather(ls_comm *c, const void *send, void *recv, int64_t n, ls_dtype t, ls_comm_request **req) {
    ls_coll_op o = ls_op_make(LS_COLL_ALLGATHER, send, recv, n, t, LS_REDUCE_SUM, 0, 0);
    return ls_comm_start_op(c, &o, req);
}

ls_status ls_comm_ireduce_scatter(ls_comm *c, const void *send, void *recv, int64_t n, ls_dtype t, ls_reduce_op op,
                                  ls_comm_request **req) {
    ls_coll_op o = ls_op_make(LS_COLL_REDUCE_SCATTER, send, recv, n, t, op, 0, 0);
    return ls_comm_start_op(c, &o, req);
}

ls_status ls_comm_ireduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op, int root,
                          ls_comm_request **req) {
    if (req) *req = NULL;
    ls_coll_op o;
    LS_CHECK(ls_reduce_to_root(c, buf, &count, t, op, &root, &o));
    return ls_comm_start_op(c, &o, req);
}

/* A broadcast or reduce in segments: the arrays checked, the total counted (the per-segment checks
 * are ls_coll_check's). */
static ls_status ls_segments_start(ls_comm *c, ls_coll_kind kind, void *buf, void *const *bufs, int nseg,
                                   const int64_t *counts, const int *roots, ls_dtype t, ls_reduce_op op,
                                   ls_comm_request **req) {
    const char *what = kind == LS_COLL_REDUCE ? "reduce in segments" : "broadcast in segments";
    if (req) *req = NULL;
    if (nseg < 1 || !counts || !roots)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: %s", what,
                        nseg < 1  ? "no segments"
                        : !counts ? "counts is NULL"
                                  : "roots is NULL");
    int64_t total = 0;
    for (int j = 0; j < nseg; j++) {
        if (counts[j] > INT64_MAX - total)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: the segments' counts overflow", what);
        total += counts[j] > 0 ? counts[j] : 0;
        if (bufs && counts[j] > 0 && !bufs[j])
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: buffer %d is NULL", what, j);
        if (bufs && !buf && counts[j] > 0) buf = bufs[j]; /* the op's buffer: any of them */
    }
    ls_coll_op o = ls_op_make(kind, buf, buf, total, t, op, roots[0], 0);
    o.nseg = nseg;
    o.seg_count = counts;
    o.seg_root = roots;
    o.seg_ptr = bufs;
    return ls_comm_start_op(c, &o, req);
}

ls_status ls_comm_ireduce_segments(ls_comm *c, void *buf, int nseg, const int64_t *counts, const int *roots, ls_dtype t,
                                   ls_reduce_op op, ls_comm_request **req) {
    return ls_segments_start(c, LS_COLL_REDUCE, buf, NULL, nseg, counts, roots, t, op, req);
}

ls_status ls_comm_ibroadcast_segments(ls_comm *c, void *buf, int nseg, const int64_t *counts, const int *roots,
                                      ls_dtype t, ls_comm_request **req) {
    return ls_segments_start(c, LS_COLL_BROADCAST, buf, NULL, nseg, counts, roots, t, LS_REDUCE_SUM, req);
}

ls_status ls_comm_ibroadcast_many(ls_comm *c, int n, void *const *bufs, const int64_t *counts, const int *roots,
                                  ls_dtype t, ls_comm_request **req) {
    if (n > 0 && !bufs) {
        if (req) *req = NULL;
        return ls_error(LS_ERR_INVALID_ARGUMENT, "broadcast in segments: bufs is NULL");
    }
    return ls_segments_start(c, LS_COLL_BROADCAST, NULL, bufs, n, counts, roots, t, LS_REDUCE_SUM, req);
}

ls_status ls_comm_ibarrier(ls_comm *c, ls_comm_request **req) {
    ls_coll_op o = ls_op_make(LS_COLL_BARRIER, NULL, NULL, 0, LS_U8, LS_REDUCE_SUM, 0, 0);
    return ls_comm_start_op(c, &o, req);
}

ls_status ls_comm_allreduce_host(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op) {
    ls_coll_op o = ls_op_make(LS_COLL_ALLREDUCE, buf, buf, count, t, op, 0, 1);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_broadcast_host(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root) {
    ls_coll_op o = ls_op_make(LS_COLL_BROADCAST, buf, buf, count, t, LS_REDUCE_SUM, root, 1);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_allgather_host(ls_comm *c, const void *send, void *recv, int64_t n, ls_dtype t) {
    ls_coll_op o = ls_op_make(LS_COLL_ALLGATHER, send, recv, n, t, LS_REDUCE_SUM, 0, 1);
    return ls_comm_run_op(c, &o);
}

ls_status ls_comm_set_compute_stream(ls_comm *c, void *stream) {
    if (!c) return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_comm_set_compute_stream: communicator is NULL");
    if (!c->iface->set_compute_stream) return LS_OK;
    return c->iface->set_compute_stream(c->state, stream);
}

ls_status ls_comm_agree(ls_comm *c, ls_status s) {
    if (!c || c->world <= 1) return s;
    struct {
        int32_t status;
        char msg[1020];
    } er;
    memset(&er, 0, sizeof er);
    if (s != LS_OK) {
        er.status = (int32_t)s;
        snprintf(er.msg, sizeof er.msg, "%s", ls_last_error());
    }
    int32_t bad = s == LS_OK ? INT32_MAX : c->rank;
    LS_CHECK(ls_comm_allreduce_host(c, &bad, 1, LS_I32, LS_REDUCE_MIN));
    if (bad == INT32_MAX) return LS_OK;
    LS_CHECK(ls_comm_broadcast_host(c, &er, (int64_t)sizeof er, LS_U8, bad));
    er.msg[sizeof er.msg - 1] = '\0';
    if (c->rank == bad) return ls_error(s, "%s", er.msg);
    return ls_error(er.status ? (ls_status)er.status : LS_ERR_INTERNAL, "%s (on rank %d)", er.msg, (int)bad);
}

/* The parent of process pid (/proc/PID/stat's fourth field), or -1. */
static long parent_of(long pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces and ')' */
    long ppid = -1;
    if (!p || sscanf(p + 1, " %*c %ld", &ppid) != 1) return -1;
    return ppid;
}

/* Under lockstep-run's mpirun (LOCKSTEP_RUN_PID, set for the ranks on its host): tell lockstep-run
 * that this rank is aborting the job. mpirun's abort waits for ever on a host that hangs (stopped,
 * still on the network); lockstep-run then kills the job after its --abort-grace. SIGURG
 * (launcher/launch.h's LSR_ABORT_SIGNAL), sent only to an ancestor of this process: its default
 * action is to be ignored. */
void ls_comm_tell_launcher_abort(void) {
    const char *v = getenv("LOCKSTEP_RUN_PID");
    if (!v || !*v) return;
    char *end = NULL;
    errno = 0;
    long want = strtol(v, &end, 10);
    if (errno || *end || want <= 1) return;
    long p = (long)getppid();
    for (int depth = 0; p > 1 && depth < 64; depth++, p = parent_of(p))
        if (p == want) {
            kill((pid_t)want, SIGURG);
            return;
        }
}

void ls_comm_abort(ls_comm *c, const char *why) {
    if (!c) return;
    if (!why) why = "no reason given";
    LS_LOG_E("aborting the %s communicator (rank %d of %d): %s", c->iface->name, c->rank, c->world, why);
    if (c->world > 1) {
        ls_comm_tell_launcher_abort();
        /* the job's abort ends this process without its atexit handlers: its timeline lost the
         * events since the last step's flush (the failing step's, the ones to look at) and its
         * closing bracket */
        if (ls_timeline_close_nowait() != LS_OK) LS_LOG_W("%s", ls_last_error());
    }
    c->aborted = 1;
    snprintf(c->abort_why, sizeof c->abort_why, "%s", why);
    if (c->iface->abort) c->iface->abort(c->state, why);
}

/* ---- accessors, destruction ---- */

int ls_comm_rank(const ls_comm *c) { return c ? c->rank : 0; }
int ls_comm_world(const ls_comm *c) { return c ? c->world : 1; }
const char *ls_comm_backend_name(const ls_comm *c) { return c ? c->iface->name : "none"; }
const ls_rank_info *ls_comm_rank_info(const ls_comm *c) { return c ? &c->info : NULL; }
ls_device ls_comm_device(const ls_comm *c) { return c ? c->env.device : ls_device_cpu(); }

void ls_comm_free_shell(ls_comm *c) {
    if (!c) return;
    if (c->own_host) ls_allocator_destroy(c->own_host);
    free(c);
}

void ls_comm_destroy(ls_comm *c) {
    if (!c) return;
    if (c->iface && c->iface->destroy) c->iface->destroy(c->state);
    ls_comm_free_shell(c);
}
