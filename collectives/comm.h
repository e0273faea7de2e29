/* comm.h: the communicator. One ls_comm per rank connects the ranks of a data-parallel job and
 * runs collectives (allreduce, broadcast, allgather, reduce-scatter, reduce, barrier), blocking or async,
 * over one of three backends behind one interface: self (one rank), mpi (host memory; device
 * buffers staged through the host unless the MPI is CUDA-aware) and nccl (device memory, its own
 * stream). Buffers live on the device of the ls_ctx the communicator was created with (host memory
 * for a CPU context); the _host variants take host memory whatever the device (small control data:
 * metrics, flags, signatures). Counts are elements, not bytes. Not thread-safe: one user thread
 * drives a communicator. */
#ifndef LOCKSTEP_COMM_H
#define LOCKSTEP_COMM_H

#include <stdint.h>

#include "ops.h"
#include "status.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_comm ls_comm;
typedef struct ls_comm_request ls_comm_request;

/* Floating-point max and min ignore NaN where another rank has a number (fmax and fmin, as NCCL's):
 * NaN only where every rank has NaN, whichever ranks hold it. Sums are in the buffer's type, as
 * NCCL's: an integer sum wraps (u8: 200 + 200 is 144), and so does the sum an integer avg divides
 * (u8 avg of 200 and 200 on 2 ranks: 72); an f16 or bf16 sum rounds each partial sum to 16 bits
 * (an f16 sum past 65504 is inf), in an order that depends on the backend and the world size. */
typedef enum ls_reduce_op {
    LS_REDUCE_SUM = 0,
    LS_REDUCE_AVG = 1, /* sum / world; integer types truncate toward zero */
    LS_REDUCE_MAX = 2,
    LS_REDUCE_MIN = 3
} ls_reduce_op;

/* Where this process sits in the job, read from the launcher's environment. */
typedef struct ls_rank_info {
    int rank, world;             /* global */
    int local_rank, local_world; /* on this node */
    char launcher[16];           /* "none", "mpi", "slurm", "torchrun" */
} ls_rank_info;

/* Rank discovery from the environment only (no MPI calls), first match wins:
 *   mpi:      OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (Open MPI),
 *             PMI_RANK/PMI_SIZE + MPI_LOCALRANKID/MPI_LOCALNRANKS (MPICH, Intel MPI)
 *   slurm:    SLURM_PROCID, SLURM_STEP_NUM_TASKS or SLURM_NTASKS, SLURM_LOCALID, and the local
 *             count from SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE at SLURM_NODEID;
 *             not in a batch script (SLURM_JOB_ID without SLURM_STEP_ID), which has SLURM_PROCID=0
 *             and the job's SLURM_NTASKS but is no task of srun's
 *   torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
 *   none:     rank 0 of 1.
 * A missing local rank/size means one node (local = global). Values that are not integers or are
 * inconsistent (rank >= world, local_rank >= local_world, ...) are LS_ERR_INVALID_ARGUMENT naming
 * the variables. */
ls_status ls_rank_discover(ls_rank_info *out);

/* Create the communicator for this rank. ctx: the compute context whose device holds the buffers
 * (NULL: CPU, host memory). backend: "self", "mpi", "nccl", or NULL/""/"auto" for LOCKSTEP_COMM,
 * then automatic: nccl when the build has it and every rank's ctx is on CUDA (agreed with an MPI
 * allreduce), else mpi when a launcher started ranks or MPI is already initialized, else self.
 * An unknown name, a backend this build lacks, nccl where a rank has no GPU, and self when a
 * launcher started several ranks are errors (the last two on every rank, without hanging).
 * Calls MPI_Init_thread (MPI_THREAD_MULTIPLE requested) if MPI is needed and not initialized; the
 * last communicator destroyed finalizes it in that case, so keep one communicator alive for the
 * life of the process. Sets the log's rank prefix when world > 1. ctx must outlive the comm. */
ls_status ls_comm_create(ls_ctx *ctx, const char *backend, ls_comm **out);
/* Free the communicator. Every request must have been waited for: one that was not is completed
 * first, without the host-side steps of its wait (an avg's division, the copy back of a staged
 * buffer), and must not be waited for afterwards. NULL is fine. Where the
 * application initialized MPI itself, lockstep leaves it initialized, and a communicator may be
 * destroyed after the application's MPI_Finalize (it then makes no MPI call). */
void ls_comm_destroy(ls_comm *c);

int ls_comm_rank(const ls_comm *c);
int ls_comm_world(const ls_comm *c);
const char *ls_comm_backend_name(const ls_comm *c);
/* What ls_rank_discover saw when the communicator was created (rank/world from the backend). */
const ls_rank_info *ls_comm_rank_info(const ls_comm *c);
ls_device ls_comm_device(const ls_comm *c);

/* ---- blocking collectives (device buffers) ---- */
/* buf[count] reduced across ranks, in place. */
ls_status ls_comm_allreduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op);
/* buf[count] from root to every rank, in place. */
ls_status ls_comm_broadcast(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root);
/* recv[world * count_per_rank] = concatenation of every rank's send[count_per_rank] in rank order.
 * In place when send == recv + rank * count_per_rank; a send buffer that overlaps recv otherwise is
 * LS_ERR_INVALID_ARGUMENT. */
ls_status ls_comm_allgather(ls_comm *c, const void *send, void *recv, int64_t count_per_rank, ls_dtype t);
/* recv[count_per_rank] = this rank's block of the reduction of send[world * count_per_rank].
 * In place when recv == send + rank * count_per_rank (NCCL's form: this rank's block of send; on
 * rank 0, recv == send); the other blocks of send may be overwritten. A receive buffer that
 * overlaps send otherwise is LS_ERR_INVALID_ARGUMENT: MPI's in-place form (recv == send on every
 * rank, the result at its start) among them, which NCCL reads as two overlapping buffers. */
ls_status ls_comm_reduce_scatter(ls_comm *c, const void *send, void *recv, int64_t count_per_rank, ls_dtype t,
                                 ls_reduce_op op);
/* buf[count] reduced across ranks into root's buf, in place (MPI_Reduce, ncclReduce): DeepSpeed's
 * reduction of gradients to the rank that owns them. The other ranks' buf is left as it was, their
 * input. The sum may add the ranks' values in another order than an all-reduce of the same
 * buffers (Open MPI on 3 or more ranks does): equal within rounding, not always bit for bit. */
ls_status ls_comm_reduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op, int root);
ls_status ls_comm_barrier(ls_comm *c);

/* ---- async collectives: start now, complete with ls_comm_wait ----
 * Buffers must stay untouched until the wait. Requests complete in the order they were started
 * on every rank, and every rank must start the same collectives in the same order. */
ls_status ls_comm_iallreduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op, ls_comm_request **req);
ls_status ls_comm_ibroadcast(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root, ls_comm_request **req);
ls_status ls_comm_iallgather(ls_comm *c, const void *send, void *recv, int64_t count_per_rank, ls_dtype t,
                             ls_comm_request **req);
ls_status ls_comm_ireduce_scatter(ls_comm *c, const void *send, void *recv, int64_t count_per_rank, ls_dtype t,
                                  ls_reduce_op op, ls_comm_request **req);
ls_status ls_comm_ireduce(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op, int root,
                          ls_comm_request **req);
ls_status ls_comm_ibarrier(ls_comm *c, ls_comm_request **req);
/* buf holds nseg consecutive segments of counts[j] elements; segment j is reduced (in place) to rank
 * roots[j] (ireduce_segments) or broadcast from it (ibroadcast_segments), every segment in flight
 * at once: with segments of several roots both directions of a link carry data together, where
 * one collective after the other would use one at a time (DeepSpeed's reduce of gradients to
 * their owners; a sharded optimizer's parameters from theirs). nseg 1 is ls_comm_ireduce or
 * _ibroadcast. The arrays are copied. A rank's segments of other roots keep its own values after a
 * reduce (as ls_comm_reduce's). */
ls_status ls_comm_ireduce_segments(ls_comm *c, void *buf, int nseg, const int64_t *counts, const int *roots, ls_dtype t,
                                   ls_reduce_op op, ls_comm_request **req);
ls_status ls_comm_ibroadcast_segments(ls_comm *c, void *buf, int nseg, const int64_t *counts, const int *roots,
                                      ls_dtype t, ls_comm_request **req);
/* The same over n buffers of their own: bufs[j] (counts[j] elements) from rank roots[j], all in
 * flight at once (a sharded optimizer's parameters, each from its owner). */
ls_status ls_comm_ibroadcast_many(ls_comm *c, int n, void *const *bufs, const int64_t *counts, const int *roots,
                                  ls_dtype t, ls_comm_request **req);
/* Block until *req completes (results then visible to the host and to later device work), free it,
 * set *req to NULL (a second wait on it is LS_OK, as MPI_Wait's MPI_REQUEST_NULL: it was a use after
 * free) and return its status. A request that does not complete within LOCKSTEP_COMM_TIMEOUT seconds
 * (default 1800, 0 = wait forever) is LS_ERR_COMM ("a rank may have failed or skipped this
 * collective"): call ls_comm_abort then. The bound holds for ls_comm_wait on every backend and for
 * blocking nccl collectives; with the mpi backend's thread progress, a blocking collective issued
 * while no request is in flight runs on the caller's thread unbounded (as MPI itself). With its
 * nonblocking progress (LOCKSTEP_MPI_PROGRESS=nonblocking) a request's MPI calls are posted from
 * its communicator's queue as that communicator's requests are tested and waited for: waits on
 * several communicators must come in the same order on every rank, and after a failed call or a
 * timeout every later collective of that communicator fails. req or *req NULL is LS_OK. */
ls_status ls_comm_wait(ls_comm_request **req);
/* Complete *req in stream order, as PyTorch's work.wait(): the device work queued on the compute
 * stream (ls_comm_set_compute_stream) after this call waits for the collective, and the host does
 * not; frees req. Results are then visible to that later device work only (the host sees them
 * after it synchronizes the stream). nccl: a watchdog thread of the communicator watches the
 * collective from then on; if it fails asynchronously or does not complete within
 * LOCKSTEP_COMM_TIMEOUT, the watchdog logs why and aborts the job (the NCCL communicator, then
 * every rank through MPI), since the work queued after it would otherwise use a result that never
 * arrived. Other backends (and nccl's host-memory collectives): ls_comm_wait. Returns what could be
 * checked now (an earlier asynchronous error, a failed CUDA call). Sets *req to NULL, as
 * ls_comm_wait; req or *req NULL is LS_OK. */
ls_status ls_comm_wait_stream(ls_comm_request **req);
/* *done = 1 once req has completed (then returns its status); drives progress. Does not free:
 * call ls_comm_wait(&req) afterwards. */
ls_status ls_comm_test(ls_comm_request *req, int *done);

/* ---- host-memory variants (work on every backend; nccl routes them over its MPI bootstrap) ---- */
ls_status ls_comm_allreduce_host(ls_comm *c, void *buf, int64_t count, ls_dtype t, ls_reduce_op op);
ls_status ls_comm_broadcast_host(ls_comm *c, void *buf, int64_t count, ls_dtype t, int root);
ls_status ls_comm_allgather_host(ls_comm *c, const void *send, void *recv, int64_t count_per_rank, ls_dtype t);

/* nccl: the CUDA stream (cudaStream_t) that produces and consumes the buffers; collectives wait
 * for the work queued on it so far. NULL: the legacy default stream. Other backends: no-op. */
ls_status ls_comm_set_compute_stream(ls_comm *c, void *stream);

/* Collective: whether any rank failed s, a step of its own (checking its arguments, reading a
 * file) before the ranks meet in a collective, so that a rank that failed does not leave the others
 * waiting there. Every rank returns LS_OK when none failed, else the lowest failing rank's status
 * with its message (" (on rank N)" added on the others). c NULL or of one rank: s. */
ls_status ls_comm_agree(ls_comm *c, ls_status s);

/* Give up: log why, and make every rank stop instead of hanging. mpi: MPI_Abort on the job (does
 * not return); nccl: ncclCommAbort, then MPI_Abort over its bootstrap; self: later calls fail with
 * LS_ERR_COMM. Of several ranks, this one's timeline (LOCKSTEP_TIMELINE) is closed first: the abort
 * skips the atexit handlers. */
void ls_comm_abort(ls_comm *c, const char *why);

const char *ls_reduce_op_name(ls_reduce_op op);

#ifdef __cplusplus
}
#endif
#endif
