/* test_comm_alias.c: the MPI backend never hands MPI two overlapping buffers (the MPI standard
 * forbids aliased arguments; MPI's in place is MPI_IN_PLACE). A reduce-scatter in place is NCCL's
 * form, recv == send + rank * count (comm.h): past rank 0 it went to MPI_Reduce_scatter_block as a
 * send buffer holding the receive buffer, which Open MPI happens to get right. The test stands
 * between lockstep and MPI (PMPI: the calls defined here check their buffers and pass them on) and
 * runs reduce-scatters in place and not (blocking and async, f32 sum and avg, f16 max through f32):
 * no call overlaps, and every element is the reduction. Run under mpirun (label mpi), either
 * progress mode. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "commtest.h"
#include "testutil.h"

static atomic_long calls, overlapping;

/* sb[world * count] and rb[count] of dt, as MPI_Reduce_scatter_block takes them. */
static void check_buffers(const void *sb, void *rb, int count, MPI_Datatype dt, MPI_Comm comm) {
    atomic_fetch_add(&calls, 1);
    if (sb == MPI_IN_PLACE || count == 0) return;
    int size = 0, world = 0;
    MPI_Type_size(dt, &size);
    MPI_Comm_size(comm, &world);
    const uintptr_t s = (uintptr_t)sb, r = (uintptr_t)rb, n = (uintptr_t)count * (uintptr_t)size;
    if (r < s + n * (uintptr_t)world && s < r + n) atomic_fetch_add(&overlapping, 1);
}

int MPI_Reduce_scatter_block(const void *sb, void *rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm) {
    check_buffers(sb, rb, count, dt, comm);
    return PMPI_Reduce_scatter_block(sb, rb, count, dt, op, comm);
}

int MPI_Ireduce_scatter_block(const void *sb, void *rb, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm,
                              MPI_Request *req) {
    check_buffers(sb, rb, count, dt, comm);
    return PMPI_Ireduce_scatter_block(sb, rb, count, dt, op, comm, req);
}

int main(void) {
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &c));
    const int R = ls_comm_rank(c), W = ls_comm_world(c);
    static const ls_dtype ts[] = {LS_F32, LS_F32, LS_F16};
    static const ls_reduce_op ops[] = {LS_REDUCE_SUM, LS_REDUCE_AVG, LS_REDUCE_MAX};
    const int64_t n = 1000;
    for (int k = 0; k < 3; k++)
        for (int inplace = 0; inplace < 2; inplace++)
            for (int async = 0; async < 2; async++) {
                const ls_dtype t = ts[k];
                const size_t es = ls_dtype_size(t);
                char *send = malloc((size_t)n * (size_t)W * es), *own = malloc((size_t)n * es);
                LS_REQUIRE(send && own);
                for (int64_t j = 0; j < n * W; j++) ct_set(send, t, j, ct_val(t, R, j, k));
                void *recv = inplace ? send + (size_t)R * (size_t)n * es : own;
                if (async) {
                    ls_comm_request *q = NULL;
                    LS_REQUIRE_OK(ls_comm_ireduce_scatter(c, send, recv, n, t, ops[k], &q));
                    LS_REQUIRE_OK(ls_comm_wait(&q));
                } else {
                    LS_REQUIRE_OK(ls_comm_reduce_scatter(c, send, recv, n, t, ops[k]));
                }
                char what[96];
                snprintf(what, sizeof what, "reduce-scatter %s %s%s%s", ls_dtype_name(t), ls_reduce_op_name(ops[k]),
                         inplace ? " in place" : "", async ? ", async" : "");
                CT_CHECK_ELEMS(R, what, recv, t, n, ct_expect(t, ops[k], W, (int64_t)R * n + i, k));
                free(send);
                free(own);
            }
    /* every case reached MPI (none is trivial), none with overlapping buffers */
    LS_EXPECT(atomic_load(&calls) == 12);
    if (atomic_load(&overlapping))
        fprintf(stderr, "rank %d: %ld of %ld MPI reduce-scatter calls had overlapping buffers\n", R,
                atomic_load(&overlapping), atomic_load(&calls));
    LS_EXPECT(atomic_load(&overlapping) == 0);
    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce(c, &fails, 1, LS_I32, LS_REDUCE_SUM));
    ls_comm_destroy(c);
    if (fails && !ls_test_failures) ls_test_failures = 1;
    LS_TEST_END();
}
