/* stub_nccl.c: a stand-in for the NCCL calls collectives/comm_nccl.c makes, so that the NCCL
 * communicator's own logic (bootstrap, dtype and operation mapping, stream ordering, error
 * handling, timeouts, abort) runs on a machine without a GPU (test_comm_nccl_stub). Collectives
 * run at once over MPI_COMM_WORLD on the "device" buffers of stub_cudart.c (host memory), in f64
 * for reductions; a buffer that is not such device memory is refused as NCCL would fault on it.
 * Knobs make ncclGetUniqueId or the collectives fail, or ncclCommGetAsyncError report an error;
 * counters say what was called. Not NCCL: the real library is what test_gpu_comm runs on a GPU. */
#include "stub_nccl.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "half_impl.h"
#include "stub_cudart.h"

int stub_nccl_fail_unique_id;
volatile ncclResult_t stub_nccl_async_error = ncclSuccess;
ncclResult_t stub_nccl_fail_colls = ncclSuccess;
long stub_nccl_inits, stub_nccl_destroys, stub_nccl_colls;
volatile long stub_nccl_aborts;

struct ncclComm {
    int rank, world;
    int aborted; /* __atomic: ncclCommAbort's mark (the memory is kept, so a later use is seen) */
};

int stub_nccl_async_delay_us;
volatile long stub_nccl_used_aborted;

/* A call on c: one made on an aborted communicator, or one during which it was aborted (freed in
 * NCCL: a use after free), is counted. */
static void use(ncclComm_t c) {
    if (c && __atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        __atomic_add_fetch(&stub_nccl_used_aborted, 1, __ATOMIC_SEQ_CST);
}

static char last_error[256];

static ncclResult_t fail(ncclResult_t r, const char *what) {
    snprintf(last_error, sizeof last_error, "stub NCCL: %s", what);
    return r;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "stub NCCL error";
    }
}

const char *ncclGetLastError(ncclComm_t c) {
    use(c);
    return last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (stub_nccl_fail_unique_id) return fail(ncclSystemError, "no network interface found (injected)");
    memset(id, 0, sizeof *id);
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    snprintf(id->internal, sizeof id->internal, "stub-id from rank %d, pid %ld", r, (long)getpid());
    return ncclSuccess;
}

/* Every rank must pass the same id, its own MPI rank and the MPI world size. */
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank) {
    *c = NULL;
    int r = 0, w = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &w);
    uint64_t h = 1469598103934665603ULL, lo = 0, hi = 0;
    for (size_t i = 0; i < sizeof id.internal; i++) h = (h ^ (unsigned char)id.internal[i]) * 1099511628211ULL;
    MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    stub_nccl_inits++;
    if (lo != hi) return fail(ncclInvalidUsage, "the ranks passed different unique ids");
    if (nranks != w || rank != r) return fail(ncclInvalidArgument, "rank or nranks differ from MPI's");
    *c = calloc(1, sizeof **c);
    if (!*c) return fail(ncclSystemError, "out of memory");
    (*c)->rank = rank;
    (*c)->world = nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    use(c);
    stub_nccl_destroys++;
    free(c);
    return ncclSuccess;
}

/* Marked, not freed (a few bytes a test): a later call on it is counted (use). */
ncclResult_t ncclCommAbort(ncclComm_t c) {
    use(c);
    stub_nccl_aborts++;
    if (c) __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
    use(c);
    if (stub_nccl_async_delay_us > 0) { /* a call that takes a while: an abort meanwhile is seen */
        struct timespec nap = {0, 1000L * stub_nccl_async_delay_us};
        nanosleep(&nap, NULL);
        use(c);
    }
    *e = __atomic_load_n(&stub_nccl_async_error, __ATOMIC_SEQ_CST); /* set by the test, read by the watchdog */
    if (*e != ncclSuccess) fail(*e, "a peer failed (injected)");
    return ncclSuccess;
}

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclFloat32: return 4;
    case ncclFloat64: return 8;
    default: return 0;
    }
}

static double get(const void *p, ncclDataType_t t, size_t i) {
    switch (t) {
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclFloat16: return ls_hi_f16_to_f32(((const uint16_t *)p)[i]);
    case ncclBfloat16: return ls_hi_bf16_to_f32(((const uint16_t *)p)[i]);
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void put(void *p, ncclDataType_t t, size_t i, double v) {
    switch (t) {
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclFloat16: ((uint16_t *)p)[i] = ls_hi_f32_to_f16((float)v); break;
    case ncclBfloat16: ((uint16_t *)p)[i] = ls_hi_f32_to_bf16((float)v); break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

static int is_device(const void *p) {
    struct cudaPointerAttributes a;
    return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeDevice;
}

/* What every collective checks first; counts and traces the call. */
static ncclResult_t enter(const char *name, const void *send, const void *recv, ncclDataType_t t, ncclComm_t c,
                          cudaStream_t s) {
    stub_trace_add(name, c, s);
    stub_nccl_colls++;
    use(c);
    if (!c) return fail(ncclInvalidArgument, "NULL communicator");
    if (stub_nccl_fail_colls != ncclSuccess) return fail(stub_nccl_fail_colls, "the collective failed (injected)");
    if (!type_size(t)) return fail(ncclInvalidArgument, "a data type lockstep does not use");
    if (!is_device(send) || !is_device(recv))
        return fail(ncclInvalidArgument, "a buffer is not device memory (NCCL would fault on it)");
    return ncclSuccess;
}

/* n elements of t at send, reduced with op over the ranks in f64, into out[0..n) (f64). */
static ncclResult_t reduce_f64(const void *send, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               double *out) {
    for (size_t i = 0; i < n; i++) out[i] = get(send, t, i);
    MPI_Op mop = op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : MPI_SUM;
    if (op != ncclSum && op != ncclAvg && op != ncclMax && op != ncclMin)
        return fail(ncclInvalidArgument, "an operation lockstep does not use");
    MPI_Allreduce(MPI_IN_PLACE, out, (int)n, MPI_DOUBLE, mop, MPI_COMM_WORLD);
    if (op == ncclAvg)
        for (size_t i = 0; i < n; i++)
            out[i] = t == ncclInt32 || t == ncclUint8 ? (double)((int64_t)out[i] / c->world) : out[i] / c->world;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
    ncclResult_t e = enter("allreduce", send, recv, t, c, s);
    if (e != ncclSuccess) return e;
    double *acc = malloc((n ? n : 1) * sizeof *acc);
    if (!acc) return fail(ncclSystemError, "out of memory");
    e = reduce_f64(send, n, t, op, c, acc);
    if (e == ncclSuccess)
        for (size_t i = 0; i < n; i++) put(recv, t, i, acc[i]);
    free(acc);
    return e;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t s) {
    ncclResult_t e = enter("reducescatter", send, recv, t, c, s);
    if (e != ncclSuccess) return e;
    const size_t all = n * (size_t)c->world;
    double *acc = malloc((all ? all : 1) * sizeof *acc);
    if (!acc) return fail(ncclSystemError, "out of memory");
    e = reduce_f64(send, all, t, op, c, acc);
    if (e == ncclSuccess)
        for (size_t i = 0; i < n; i++) put(recv, t, i, acc[(size_t)c->rank * n + i]);
    free(acc);
    return e;
}

/* Groups: each collective of the stand-in completes as it is called, so a group needs nothing more
 * (the calls come in the same order on every rank, as lockstep issues them). */
static int group_depth;
ncclResult_t ncclGroupStart(void); /* nccl.h declares them without a prototype: () */
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    group_depth--;
    return ncclSuccess;
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
    ncclResult_t e = enter("reduce", send, recv, t, c, s);
    if (e != ncclSuccess) return e;
    if (root < 0 || root >= c->world) return fail(ncclInvalidArgument, "root out of range");
    double *acc = malloc((n ? n : 1) * sizeof *acc);
    if (!acc) return fail(ncclSystemError, "out of memory");
    e = reduce_f64(send, n, t, op, c, acc);
    if (e == ncclSuccess && c->rank == root)
        for (size_t i = 0; i < n; i++) put(recv, t, i, acc[i]);
    free(acc);
    return e;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
    ncclResult_t e = enter("broadcast", send, recv, t, c, s);
    if (e != ncclSuccess) return e;
    if (root < 0 || root >= c->world) return fail(ncclInvalidArgument, "root out of range");
    if (c->rank == root && send != recv) memmove(recv, send, n * type_size(t));
    MPI_Bcast(recv, (int)(n * type_size(t)), MPI_BYTE, root, MPI_COMM_WORLD);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    ncclResult_t e = enter("allgather", send, recv, t, c, s);
    if (e != ncclSuccess) return e;
    const size_t bytes = n * type_size(t);
    const void *sb = send == (const char *)recv + (size_t)c->rank * bytes ? MPI_IN_PLACE : send;
    MPI_Allgather(sb, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    return ncclSuccess;
}
