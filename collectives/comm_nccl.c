/* comm_nccl.c: the NCCL backend. Device buffers only; collectives run on a dedicated non-blocking
 * communication stream that first waits (event) for the work queued so far on the compute stream
 * (ls_comm_set_compute_stream; default the legacy stream). Waits poll the completion event and
 * ncclCommGetAsyncError, so a failed peer becomes an error (after ncclCommAbort) rather than a hang;
 * LOCKSTEP_COMM_TIMEOUT bounds the wait. A wait in stream order (ls_comm_wait_stream) makes the
 * compute stream wait for the completion event and hands the event to the communicator's watchdog
 * thread, which polls it and ncclCommGetAsyncError, and aborts the job on a failure or a timeout
 * (as PyTorch's NCCL watchdog tears the process down). The unique id travels over the MPI bootstrap
 * communicator, which also serves the host-memory collectives. Every CUDA/NCCL call is checked. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_impl.h"
#include "log.h"

typedef struct ls_nccl_state {
    ls_comm_env env;
    ls_comm *boot; /* mpi: unique id, host collectives, abort */
    ncclComm_t comm;
    int dev;
    int rank, world;
    cudaStream_t stream;  /* communication */
    cudaStream_t compute; /* producer/consumer of the buffers; NULL: legacy default stream */
    cudaEvent_t ready;    /* recorded on compute before each collective */
    int32_t *scratch;     /* one int on the device for the barrier */
    /* Held by this thread around its calls into the communicator and by the watchdog around its
     * ncclCommAbort, which frees it: a call the watchdog's abort landed in the middle of, or one
     * made after it (the flag checked, then the abort), used freed memory. The flag wd_failed is
     * set before the abort waits for it, and read under it, so no call follows the abort. */
    pthread_mutex_t use_lock;
    /* the watchdog: collectives waited for in stream order, oldest first, until they complete */
    pthread_mutex_t wd_lock;
    pthread_cond_t wd_wake;
    pthread_t wd;
    int wd_started, wd_stop, wd_failed;
    struct ls_nccl_watch *watch;
    int nwatch, cap_watch;
} ls_nccl_state;

typedef struct ls_nccl_watch {
    cudaEvent_t done; /* recorded after the collective on the communication stream */
    double since;     /* when the wait was handed over (the timeout counts from it) */
    char what[64];
} ls_nccl_watch;

typedef struct ls_nccl_req {
    void *boot_handle; /* host op delegated to the bootstrap */
    int delegated;
    int boot_done;
    cudaEvent_t done;
} ls_nccl_req;

static ls_status ls_cuda_status(cudaError_t e, const char *call) {
    if (e == cudaSuccess) return LS_OK;
    return ls_error(LS_ERR_CUDA, "%s failed: %s (%s)", call, cudaGetErrorString(e), cudaGetErrorName(e));
}

static ls_status ls_nccl_status(ls_nccl_state *st, ncclResult_t r, const char *call) {
    if (r == ncclSuccess) return LS_OK;
    const char *detail = st && st->comm ? ncclGetLastError(st->comm) : ncclGetLastError(NULL);
    return ls_error(LS_ERR_COMM, "%s failed: %s%s%s", call, ncclGetErrorString(r), detail && *detail ? ": " : "",
                    detail ? detail : "");
}

#define LS_CUDA_CHECK(call) LS_CHECK(ls_cuda_status((call), #call))
#define LS_NCCL_CHECK(st, call) LS_CHECK(ls_nccl_status((st), (call), #call))
#define LS_CUDA_CHECK_GOTO(call, s, label) LS_CHECK_GOTO(ls_cuda_status((call), #call), s, label)

static ncclDataType_t ls_nccl_dtype(ls_dtype t) {
    switch (t) {
    case LS_F32: return ncclFloat32;
    case LS_F16: return ncclFloat16;
    case LS_BF16: return ncclBfloat16;
    case LS_F64: return ncclFloat64;
    case LS_I32: return ncclInt32;
    case LS_U8: return ncclUint8;
    }
    return ncclFloat32;
}

static ncclRedOp_t ls_nccl_op(ls_reduce_op op) {
    switch (op) {
    case LS_REDUCE_SUM: return ncclSum;
    case LS_REDUCE_AVG: return ncclAvg;
    case LS_REDUCE_MAX: return ncclMax;
    case LS_REDUCE_MIN: return ncclMin;
    }
    return ncclSum;
}

static double ls_nccl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void ls_nccl_watchdog_stop(ls_nccl_state *st);

/* Abort the NCCL communicator after an asynchronous failure (peers' waits then fail too). The
 * watchdog stops first: it uses the communicator (unless it aborted it itself). */
static void ls_nccl_kill(ls_nccl_state *st) {
    ls_nccl_watchdog_stop(st);
    if (st->comm && !st->wd_failed) ncclCommAbort(st->comm);
    st->comm = NULL;
}

/* Whether the watchdog aborted the communicator; under use_lock. */
static int ls_nccl_aborted_locked(ls_nccl_state *st) {
    pthread_mutex_lock(&st->wd_lock);
    int failed = st->wd_failed;
    pthread_mutex_unlock(&st->wd_lock);
    return !st->comm || failed;
}

static ls_status ls_nccl_aborted_error(void) {
    return ls_error(LS_ERR_COMM, "the NCCL communicator was aborted after an earlier failure");
}

static ls_status ls_nccl_alive(ls_nccl_state *st) {
    pthread_mutex_lock(&st->use_lock);
    if (ls_nccl_aborted_locked(st)) {
        pthread_mutex_unlock(&st->use_lock);
        return ls_nccl_aborted_error();
    }
    ncclResult_t ar = ncclSuccess;
    ls_status s = ls_nccl_status(st, ncclCommGetAsyncError(st->comm, &ar), "ncclCommGetAsyncError");
    if (s == LS_OK && ar != ncclSuccess && ar != ncclInProgress)
        s = ls_nccl_status(st, ar, "NCCL (asynchronous error)");
    pthread_mutex_unlock(&st->use_lock); /* before the kill, which waits for the watchdog */
    if (s != LS_OK && ar != ncclSuccess && ar != ncclInProgress) ls_nccl_kill(st);
    return s;
}

/* Enqueue op on the communication stream. */
/* NCCL reads and writes its buffers from the GPU: plain (pageable) host memory there would fault
 * on the device, so it is refused with a pointer to the host-memory variants. */
static ls_status ls_nccl_device_buffer(const void *p, const char *what) {
    if (!p) return LS_OK;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return ls_cuda_status(e, "cudaPointerGetAttributes");
    }
    if (a.type == cudaMemoryTypeUnregistered)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "NCCL communicator: the %s buffer %p is host memory, which NCCL cannot use; for host "
                        "buffers call the _host collectives (ls_comm_allreduce_host, ls_comm_broadcast_host, "
                        "ls_comm_allgather_host)",
                        what, p);
    return LS_OK;
}

/* A failure that leaves this rank out of a collective its peers are in: abort the communicator so
 * that their waits end with an error (ncclCommAbort) instead of at the timeout. Returns s. */
static ls_status ls_nccl_fail(ls_nccl_state *st, ls_status s) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ls_last_error());
    ls_nccl_kill(st);
    return ls_error(s, "%s; the NCCL communicator was aborted", msg);
}

/* The CUDA calls that order the collective after the compute stream's work, then the collective. */
static ls_status ls_nccl_issue(ls_nccl_state *st, const ls_coll_op *op) {
    LS_CUDA_CHECK(cudaSetDevice(st->dev));
    LS_CUDA_CHECK(cudaEventRecord(st->ready, st->compute));
    LS_CUDA_CHECK(cudaStreamWaitEvent(st->stream, st->ready, 0));
    ncclDataType_t dt = ls_nccl_dtype(op->dtype);
    size_t n = (size_t)op->count;
    if (op->nseg > 0) { /* in segments: one NCCL group, so they run together */
        const size_t es = ls_dtype_size(op->dtype);
        size_t off = 0;
        LS_NCCL_CHECK(st, ncclGroupStart());
        ls_status s = LS_OK;
        for (int j = 0; j < op->nseg && s == LS_OK; j++) {
            char *p = op->seg_ptr ? (char *)op->seg_ptr[j] : (char *)op->recv + off * es;
            size_t c = (size_t)op->seg_count[j];
            off += c;
            if (c == 0) continue;
            ncclResult_t e = op->kind == LS_COLL_BROADCAST
                                 ? ncclBroadcast(p, p, c, dt, op->seg_root[j], st->comm, st->stream)
                                 : ncclReduce(p, p, c, dt, ls_nccl_op(op->op), op->seg_root[j], st->comm, st->stream);
            s = ls_nccl_status(st, e, op->kind == LS_COLL_BROADCAST ? "ncclBroadcast" : "ncclReduce");
        }
        ls_status g = ls_nccl_status(st, ncclGroupEnd(), "ncclGroupEnd"); /* ended also after a failure */
        return s != LS_OK ? s : g;
    }
    switch (op->kind) {
    case LS_COLL_ALLREDUCE:
        LS_NCCL_CHECK(st, ncclAllReduce(op->send, op->recv, n, dt, ls_nccl_op(op->op), st->comm, st->stream));
        break;
    case LS_COLL_BROADCAST:
        LS_NCCL_CHECK(st, ncclBroadcast(op->send, op->recv, n, dt, op->root, st->comm, st->stream));
        break;
    case LS_COLL_ALLGATHER: LS_NCCL_CHECK(st, ncclAllGather(op->send, op->recv, n, dt, st->comm, st->stream)); break;
    case LS_COLL_REDUCE_SCATTER:
        LS_NCCL_CHECK(st, ncclReduceScatter(op->send, op->recv, n, dt, ls_nccl_op(op->op), st->comm, st->stream));
        break;
    case LS_COLL_BARRIER:
        LS_NCCL_CHECK(st, ncclAllReduce(st->scratch, st->scratch, 1, ncclInt32, ncclSum, st->comm, st->stream));
        break;
    case LS_COLL_REDUCE: break; /* always in segments: above */
    }
    return LS_OK;
}

/* Enqueue op on the communication stream. A host buffer is refused before anything is queued (the
 * communicator stays usable); a CUDA or NCCL failure after that aborts it. */
static ls_status ls_nccl_enqueue(ls_nccl_state *st, const ls_coll_op *op) {
    LS_CHECK(ls_nccl_alive(st));
    if (op->kind != LS_COLL_BARRIER && op->count > 0) {
        LS_CHECK(ls_nccl_device_buffer(op->send, "send"));
        if (op->recv != op->send) LS_CHECK(ls_nccl_device_buffer(op->recv, "receive"));
    }
    pthread_mutex_lock(&st->use_lock);
    if (ls_nccl_aborted_locked(st)) { /* by the watchdog since the check above */
        pthread_mutex_unlock(&st->use_lock);
        return ls_nccl_aborted_error();
    }
    ls_status s = ls_nccl_issue(st, op);
    pthread_mutex_unlock(&st->use_lock);
    return s == LS_OK ? LS_OK : ls_nccl_fail(st, s);
}

/* cudaEventQuery/cudaStreamQuery: cudaErrorNotReady is also left as the thread's last error, which
 * the next kernel launch's check (cudaGetLastError) would then report as its failure: clear it,
 * as PyTorch does. */
static cudaError_t ls_nccl_query(cudaError_t e) {
    if (e == cudaErrorNotReady) (void)cudaGetLastError();
    return e;
}

static ls_status ls_nccl_poll(ls_nccl_state *st, cudaEvent_t ev, int *done) {
    *done = 0;
    cudaError_t e = ls_nccl_query(cudaEventQuery(ev));
    if (e == cudaSuccess) {
        *done = 1;
        return LS_OK;
    }
    if (e != cudaErrorNotReady) return ls_nccl_fail(st, ls_cuda_status(e, "cudaEventQuery"));
    return ls_nccl_alive(st);
}

static ls_status ls_nccl_wait_event(ls_nccl_state *st, cudaEvent_t ev) {
    double t0 = ls_nccl_now();
    for (;;) {
        int done = 0;
        LS_CHECK(ls_nccl_poll(st, ev, &done));
        if (done) return LS_OK;
        if (st->env.timeout_s > 0 && ls_nccl_now() - t0 > st->env.timeout_s) {
            ls_nccl_kill(st);
            return ls_error(LS_ERR_COMM,
                            "did not complete within %g s (LOCKSTEP_COMM_TIMEOUT): a rank may have "
                            "failed or skipped this collective; the NCCL communicator was aborted",
                            st->env.timeout_s);
        }
        sched_yield();
    }
}

static ls_status ls_nccl_start(void *sp, const ls_coll_op *op, void **handle) {
    ls_nccl_state *st = sp;
    ls_nccl_req *r = calloc(1, sizeof *r);
    if (!r) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate an NCCL request");
    ls_status s = LS_OK;
    if (op->host) {
        ls_comm *b = st->boot;
        r->delegated = 1;
        if (b->iface->start) {
            s = b->iface->start(b->state, op, &r->boot_handle);
        } else {
            s = b->iface->run(b->state, op);
            r->boot_done = 1;
        }
        if (s != LS_OK) goto fail;
    } else {
        /* the completion event first: once the collective is queued, nothing may fail quietly */
        LS_CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming), s, fail);
        s = ls_nccl_enqueue(st, op);
        if (s == LS_OK) {
            s = ls_cuda_status(cudaEventRecord(r->done, st->stream), "cudaEventRecord");
            if (s != LS_OK) s = ls_nccl_fail(st, s);
        }
        if (s != LS_OK) {
            cudaEventDestroy(r->done);
            goto fail;
        }
    }
    *handle = r;
    return LS_OK;
fail:
    free(r);
    return s;
}

static ls_status ls_nccl_wait(void *sp, void *h) {
    ls_nccl_state *st = sp;
    ls_nccl_req *r = h;
    ls_status s = LS_OK;
    if (r->delegated) {
        if (!r->boot_done) s = st->boot->iface->wait(st->boot->state, r->boot_handle);
    } else {
        s = ls_nccl_wait_event(st, r->done);
        cudaEventDestroy(r->done);
    }
    free(r);
    return s;
}

static ls_status ls_nccl_test(void *sp, void *h, int *done) {
    ls_nccl_state *st = sp;
    ls_nccl_req *r = h;
    if (r->delegated) {
        if (r->boot_done) {
            *done = 1;
            return LS_OK;
        }
        return st->boot->iface->test(st->boot->state, r->boot_handle, done);
    }
    return ls_nccl_poll(st, r->done, done);
}

static ls_status ls_nccl_run(void *sp, const ls_coll_op *op) {
    ls_nccl_state *st = sp;
    if (op->host) return st->boot->iface->run(st->boot->state, op);
    void *h = NULL;
    LS_CHECK(ls_nccl_start(sp, op, &h));
    return ls_nccl_wait(sp, h);
}

/* ---- the watchdog ---- */

static void (*ls_nccl_fatal)(const char *why); /* tests; NULL: abort the job */

void ls_comm_nccl_set_watchdog_fatal(void (*fatal)(const char *why)) { ls_nccl_fatal = fatal; }

/* Why w failed ("" while it may still complete): a CUDA error, an asynchronous NCCL error, or the
 * timeout. */
static void ls_nccl_watch_check(ls_nccl_state *st, const ls_nccl_watch *w, int *done, char *why, size_t n) {
    *done = 0;
    why[0] = 0;
    cudaError_t e = ls_nccl_query(cudaEventQuery(w->done));
    if (e == cudaSuccess) {
        *done = 1;
        return;
    }
    if (e != cudaErrorNotReady) {
        snprintf(why, n, "cudaEventQuery failed: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return;
    }
    ncclResult_t ar = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(st->comm, &ar);
    if (r != ncclSuccess) ar = r;
    if (ar != ncclSuccess && ar != ncclInProgress) {
        const char *detail = ncclGetLastError(st->comm);
        snprintf(why, n, "NCCL (asynchronous error) failed: %s%s%s", ncclGetErrorString(ar),
                 detail && *detail ? ": " : "", detail ? detail : "");
        return;
    }
    if (st->env.timeout_s > 0 && ls_nccl_now() - w->since > st->env.timeout_s)
        snprintf(why, n,
                 "did not complete within %g s (LOCKSTEP_COMM_TIMEOUT): a rank may have failed or skipped this "
                 "collective",
                 st->env.timeout_s);
}

/* The watchdog thread: polls the oldest watched collective until it completes (then the next),
 * sleeping 1 ms between polls of one that has not; on a failure it aborts the communicator and the
 * job. Stops when destroy asks. */
static void *ls_nccl_watchdog(void *arg) {
    ls_nccl_state *st = arg;
    cudaSetDevice(st->dev);
    pthread_mutex_lock(&st->wd_lock);
    while (!st->wd_stop) {
        if (st->nwatch == 0) {
            pthread_cond_wait(&st->wd_wake, &st->wd_lock);
            continue;
        }
        ls_nccl_watch w = st->watch[0];
        pthread_mutex_unlock(&st->wd_lock);
        int done = 0;
        char why[400];
        ls_nccl_watch_check(st, &w, &done, why, sizeof why);
        if (done) {
            cudaEventDestroy(w.done);
            pthread_mutex_lock(&st->wd_lock);
            memmove(st->watch, st->watch + 1, (size_t)--st->nwatch * sizeof *st->watch);
            continue;
        }
        if (why[0]) {
            char msg[600];
            snprintf(msg, sizeof msg, "%s on rank %d (nccl, seen by its watchdog): %s", w.what, st->rank, why);
            LS_LOG_E("%s; aborting the NCCL communicator and the job", msg);
            pthread_mutex_lock(&st->wd_lock);
            st->wd_failed = 1; /* later calls fail ("aborted after an earlier failure") */
            pthread_mutex_unlock(&st->wd_lock);
            /* after the call the training thread may be in (use_lock); one stuck in NCCL for 10 s
             * (a blocking call whose peer is gone) is what the abort is for: aborted anyway */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 10;
            int locked = pthread_mutex_timedlock(&st->use_lock, &until) == 0;
            ncclCommAbort(st->comm);
            if (locked) pthread_mutex_unlock(&st->use_lock);
            if (ls_nccl_fatal) {
                ls_nccl_fatal(msg);
                return NULL;
            }
            ls_comm_abort(st->boot, msg); /* MPI_Abort: every rank stops */
            _exit(1); /* one rank over a self bootstrap: nothing else stops the work queued after it */
        }
        struct timespec nap = {0, 1000000};
        nanosleep(&nap, NULL);
        pthread_mutex_lock(&st->wd_lock);
    }
    pthread_mutex_unlock(&st->wd_lock);
    return NULL;
}

/* Hand ev over to the watchdog (started on first use). */
static ls_status ls_nccl_watch_add(ls_nccl_state *st, cudaEvent_t ev, const char *what) {
    ls_status s = LS_OK;
    pthread_mutex_lock(&st->wd_lock);
    if (st->wd_stop) {
        s = ls_error(LS_ERR_COMM, "the NCCL communicator was aborted after an earlier failure");
        goto out;
    }
    if (!st->wd_started) {
        int e = pthread_create(&st->wd, NULL, ls_nccl_watchdog, st);
        if (e) {
            s = ls_error(LS_ERR_COMM, "cannot start the NCCL watchdog thread: %s", strerror(e));
            goto out;
        }
        st->wd_started = 1;
    }
    if (st->nwatch == st->cap_watch) {
        int cap = st->cap_watch ? 2 * st->cap_watch : 16;
        ls_nccl_watch *w = realloc(st->watch, (size_t)cap * sizeof *w);
        if (!w) {
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "NCCL watchdog: out of host memory");
            goto out;
        }
        st->watch = w;
        st->cap_watch = cap;
    }
    ls_nccl_watch *w = &st->watch[st->nwatch++];
    w->done = ev;
    w->since = ls_nccl_now();
    snprintf(w->what, sizeof w->what, "%s", what ? what : "a collective");
    pthread_cond_signal(&st->wd_wake);
out:
    pthread_mutex_unlock(&st->wd_lock);
    return s;
}

static ls_status ls_nccl_wait_stream(void *sp, void *h, const char *what) {
    ls_nccl_state *st = sp;
    ls_nccl_req *r = h;
    if (r->delegated) return ls_nccl_wait(sp, h);
    ls_status s = ls_nccl_alive(st);
    if (s == LS_OK) {
        s = ls_cuda_status(cudaStreamWaitEvent(st->compute, r->done, 0), "cudaStreamWaitEvent");
        if (s != LS_OK) s = ls_nccl_fail(st, s);
    }
    if (s == LS_OK && ls_nccl_watch_add(st, r->done, what) == LS_OK) {
        free(r);
        return LS_OK;
    }
    if (s == LS_OK) { /* no watchdog: wait on the host, as ls_comm_wait */
        LS_LOG_W("%s; waiting on the host instead", ls_last_error());
        return ls_nccl_wait(sp, h);
    }
    cudaEventDestroy(r->done);
    free(r);
    return s;
}

/* Stop the watchdog for good (before the communicator is aborted or destroyed); idempotent. */
static void ls_nccl_watchdog_stop(ls_nccl_state *st) {
    pthread_mutex_lock(&st->wd_lock);
    int started = st->wd_started;
    st->wd_stop = 1;
    st->wd_started = 0;
    pthread_cond_signal(&st->wd_wake);
    pthread_mutex_unlock(&st->wd_lock);
    if (started) pthread_join(st->wd, NULL);
}

static void ls_nccl_watch_free(ls_nccl_state *st) {
    for (int i = 0; i < st->nwatch; i++) cudaEventDestroy(st->watch[i].done);
    free(st->watch);
    st->watch = NULL;
    st->nwatch = st->cap_watch = 0;
}

static ls_status ls_nccl_set_compute_stream(void *sp, void *stream) {
    ls_nccl_state *st = sp;
    st->compute = (cudaStream_t)stream;
    return LS_OK;
}

static void ls_nccl_abort(void *sp, const char *why) {
    ls_nccl_state *st = sp;
    ls_nccl_kill(st);
    ls_comm_abort(st->boot, why);
}

/* Wait for the communication stream before ncclCommDestroy, as a wait does: an asynchronous error,
 * a CUDA error or LOCKSTEP_COMM_TIMEOUT aborts the communicator instead (a collective whose peer
 * died would otherwise keep destroy waiting for ever). */
static void ls_nccl_drain(ls_nccl_state *st) {
    double t0 = ls_nccl_now();
    for (;;) {
        cudaError_t e = ls_nccl_query(cudaStreamQuery(st->stream));
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) {
            LS_LOG_W("NCCL communicator destroyed after a CUDA error (%s): aborted", cudaGetErrorName(e));
            ls_nccl_kill(st);
            return;
        }
        if (ls_nccl_alive(st) != LS_OK) { /* aborted it */
            LS_LOG_W("NCCL communicator destroyed after an asynchronous error: %s", ls_last_error());
            return;
        }
        if (st->env.timeout_s > 0 && ls_nccl_now() - t0 > st->env.timeout_s) {
            LS_LOG_W("NCCL communicator destroyed with collectives unfinished after %g s (LOCKSTEP_COMM_TIMEOUT): "
                     "aborted",
                     st->env.timeout_s);
            ls_nccl_kill(st);
            return;
        }
        sched_yield();
    }
}

static void ls_nccl_destroy(void *sp) {
    ls_nccl_state *st = sp;
    if (!st) return;
    ls_nccl_watchdog_stop(st);
    if (st->wd_failed) st->comm = NULL; /* aborted by the watchdog */
    if (st->comm) {
        cudaSetDevice(st->dev);
        if (st->stream) ls_nccl_drain(st);
        if (st->comm) ncclCommDestroy(st->comm);
    }
    ls_nccl_watch_free(st); /* their events completed or the communicator was aborted */
    pthread_mutex_destroy(&st->wd_lock);
    pthread_mutex_destroy(&st->use_lock);
    pthread_cond_destroy(&st->wd_wake);
    if (st->scratch) cudaFree(st->scratch);
    if (st->ready) cudaEventDestroy(st->ready);
    if (st->stream) cudaStreamDestroy(st->stream);
    ls_comm_destroy(st->boot);
    free(st);
}

static const ls_comm_iface ls_nccl_iface = {
    .name = "nccl",
    .run = ls_nccl_run,
    .start = ls_nccl_start,
    .wait = ls_nccl_wait,
    .test = ls_nccl_test,
    .wait_stream = ls_nccl_wait_stream,
    .set_compute_stream = ls_nccl_set_compute_stream,
    .abort = ls_nccl_abort,
    .destroy = ls_nccl_destroy,
};

/* Local setup that can fail; done before the collective NCCL init so a failing rank cannot
 * leave the others waiting in ncclCommInitRank. */
static ls_status ls_nccl_local_setup(ls_nccl_state *st) {
    LS_CUDA_CHECK(cudaSetDevice(st->dev));
    LS_CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    LS_CUDA_CHECK(cudaEventCreateWithFlags(&st->ready, cudaEventDisableTiming));
    LS_CUDA_CHECK(cudaMalloc((void **)&st->scratch, sizeof(int32_t)));
    LS_CUDA_CHECK(cudaMemset(st->scratch, 0, sizeof(int32_t)));
    return LS_OK;
}

ls_status ls_comm_nccl_create(const ls_comm_env *env, ls_comm *boot, const ls_comm_iface **iface, void **state) {
    ls_nccl_state *st = calloc(1, sizeof *st);
    if (!st) return ls_error(LS_ERR_OUT_OF_MEMORY, "NCCL communicator: out of host memory");
    pthread_mutex_init(&st->wd_lock, NULL);
    pthread_mutex_init(&st->use_lock, NULL);
    pthread_cond_init(&st->wd_wake, NULL);
    st->env = *env;
    st->dev = env->device.index < 0 ? 0 : env->device.index; /* "cuda" unresolved: cuda:0, as the CUDA backend */
    st->rank = ls_comm_rank(boot);
    st->world = ls_comm_world(boot);

    /* 1. local setup, agreed by every rank (min of ok flags). */
    ls_status local = ls_nccl_local_setup(st);
    char local_msg[256];
    snprintf(local_msg, sizeof local_msg, "%s", local == LS_OK ? "" : ls_last_error());
    int32_t ok = local == LS_OK ? st->world : st->rank;
    ls_status s = ls_comm_allreduce_host(boot, &ok, 1, LS_I32, LS_REDUCE_MIN);
    if (s != LS_OK) goto fail;
    if (ok < st->world) {
        s = local != LS_OK ? ls_error(local, "NCCL setup on rank %d (cuda:%d): %s", st->rank, st->dev, local_msg)
                           : ls_error(LS_ERR_COMM, "NCCL setup failed on rank %d", (int)ok);
        goto fail;
    }

    /* 2. rank 0's unique id (with its status) to everyone. */
    struct {
        int32_t ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    if (st->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
        if (!msg.ok) ls_nccl_status(NULL, r, "ncclGetUniqueId");
    }
    s = ls_comm_broadcast_host(boot, &msg, (int64_t)sizeof msg, LS_U8, 0);
    if (s != LS_OK) goto fail;
    if (!msg.ok) {
        s = st->rank == 0 ? LS_ERR_COMM : ls_error(LS_ERR_COMM, "ncclGetUniqueId failed on rank 0");
        goto fail;
    }

    /* 3. the collective init. */
    s = ls_nccl_status(NULL, ncclCommInitRank(&st->comm, st->world, msg.id, st->rank), "ncclCommInitRank");
    if (s != LS_OK) {
        st->comm = NULL;
        goto fail;
    }
    st->boot = boot;
    LS_LOG_D("nccl communicator: rank %d of %d on cuda:%d", st->rank, st->world, st->dev);
    *iface = &ls_nccl_iface;
    *state = st;
    return LS_OK;
fail:
    st->boot = NULL; /* the caller keeps the bootstrap on failure */
    {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", ls_last_error());
        ls_nccl_destroy(st);
        ls_error(s, "%s", keep);
    }
    return s;
}
