/* comm_impl.h: what a communicator backend implements (internal). A backend fills one
 * ls_comm_iface of function pointers over an opaque state; comm.c validates arguments and
 * dispatches, registry.c (the only file that tests build flags) picks and creates the backend.
 * Optional entries (NULL) have fallbacks in comm.c: start NULL runs the collective at start. */
#ifndef LOCKSTEP_COMM_IMPL_H
#define LOCKSTEP_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

/* Library-internal: not exported from liblockstep. */
#define LS_COMM_INTERNAL __attribute__((visibility("hidden")))

typedef enum ls_coll_kind {
    LS_COLL_ALLREDUCE = 0,
    LS_COLL_BROADCAST = 1,
    LS_COLL_ALLGATHER = 2,
    LS_COLL_REDUCE_SCATTER = 3,
    LS_COLL_BARRIER = 4,
    LS_COLL_REDUCE = 5 /* in place, always in segments (one root: one segment); the others' buffers
                          are left as they were */
} ls_coll_kind;

/* One collective as comm.c hands it to a backend (arguments already validated). */
typedef struct ls_coll_op {
    ls_coll_kind kind;
    const void *send; /* allgather/reduce_scatter input; == recv for allreduce/broadcast/reduce */
    void *recv;
    int64_t count; /* allreduce/broadcast/reduce: elements; allgather/reduce_scatter: per rank */
    ls_dtype dtype;
    ls_reduce_op op; /* allreduce/reduce_scatter/reduce */
    int root;        /* broadcast/reduce */
    int host;        /* 1: buffers in host memory whatever the device */
    /* broadcast/reduce in segments (ls_comm_ireduce_segments): nseg > 0 consecutive segments of
     * buf, seg_count[j] elements each (summing to count), segment j to or from rank seg_root[j],
     * all in flight at once; root is then unused */
    int nseg;
    const int64_t *seg_count;
    const int *seg_root;
    void *const *seg_ptr; /* broadcast in segments: segment j at seg_ptr[j] (NULL: consecutive in recv) */
} ls_coll_op;

typedef struct ls_comm_iface {
    const char *name;
    /* Run op to completion. */
    ls_status (*run)(void *st, const ls_coll_op *op);
    /* Optional: start op, *handle completes through wait (which frees it) or test. */
    ls_status (*start)(void *st, const ls_coll_op *op, void **handle);
    ls_status (*wait)(void *st, void *handle);
    ls_status (*test)(void *st, void *handle, int *done);
    /* Optional (NULL: wait): complete handle in stream order, the compute stream's later work
     * waiting for it on the device and the host not; frees it. what names it for errors. */
    ls_status (*wait_stream)(void *st, void *handle, const char *what);
    /* Optional. */
    ls_status (*set_compute_stream)(void *st, void *stream);
    void (*abort)(void *st, const char *why);
    void (*destroy)(void *st);
} ls_comm_iface;

/* What every backend gets at creation. */
typedef struct ls_comm_env {
    ls_device device;
    ls_allocator *dev;  /* device memory allocator (the host allocator on the CPU) */
    ls_allocator *host; /* host memory (staging) */
    ls_ctx *ctx;        /* the compute context (NULL: none); mpi waits for it before handing
                           device pointers to a CUDA-aware MPI */
    double timeout_s;   /* LOCKSTEP_COMM_TIMEOUT; 0: none */
} ls_comm_env;

struct ls_comm {
    const ls_comm_iface *iface;
    void *state;
    ls_ctx *ctx; /* may be NULL (CPU) */
    ls_comm_env env;
    ls_allocator *own_host; /* host allocator created when ctx is NULL */
    ls_rank_info info;
    int rank, world;
    int aborted;
    char abort_why[200];
};

struct ls_comm_request {
    ls_comm *comm;
    void *handle; /* backend's; NULL once completed */
    int completed;
    ls_status status;
    char what[64]; /* "allreduce of 1000 f32" for errors */
};

/* Backends (compiled only when the build has them; registry.c guards the calls). */
LS_COMM_INTERNAL ls_status ls_comm_self_create(const ls_comm_env *env, const ls_comm_iface **iface, void **state);

LS_COMM_INTERNAL ls_status ls_comm_mpi_create(const ls_comm_env *env, const ls_comm_iface **iface, void **state,
                                              int *rank, int *world);
LS_COMM_INTERNAL int ls_comm_mpi_initialized(void);
/* Under lockstep-run's mpirun: tells lockstep-run (LOCKSTEP_RUN_PID) that this rank is aborting the
 * job, so that it bounds mpirun's abort (comm.c). */
LS_COMM_INTERNAL void ls_comm_tell_launcher_abort(void);

/* bootstrap: an mpi communicator the nccl backend takes over (destroys it) on success. */
LS_COMM_INTERNAL ls_status ls_comm_nccl_create(const ls_comm_env *env, ls_comm *bootstrap, const ls_comm_iface **iface,
                                               void **state);

/* Tests: what the NCCL watchdog calls, instead of aborting the job, when a collective it watches
 * fails or times out (NULL: back to aborting the job). */
LS_COMM_INTERNAL void ls_comm_nccl_set_watchdog_fatal(void (*fatal)(const char *why));

/* comm.c helpers shared with the backends. */
LS_COMM_INTERNAL const char *ls_coll_kind_name(ls_coll_kind k);
/* Elements of op's send and recv buffers for world ranks. */
LS_COMM_INTERNAL int64_t ls_coll_send_count(const ls_coll_op *op, int world);
LS_COMM_INTERNAL int64_t ls_coll_recv_count(const ls_coll_op *op, int world);
/* Run a host-memory collective on c (used by the nccl backend for host ops and bootstrap). */
LS_COMM_INTERNAL ls_status ls_comm_run_op(ls_comm *c, const ls_coll_op *op);
/* Free a comm's generic part only (the backend state must be gone). */
LS_COMM_INTERNAL void ls_comm_free_shell(ls_comm *c);
/* The longest timeout (seconds): a deadline must fit a timespec. */
#define LS_COMM_TIMEOUT_MAX_S 1e9
/* Parse LOCKSTEP_COMM_TIMEOUT (seconds). */
LS_COMM_INTERNAL ls_status ls_comm_timeout_from_env(double *out);

#endif
