/* test_comm_mixed_progress.c: ranks whose LOCKSTEP_MPI_PROGRESS differs (rank 1 nonblocking,
 * the others thread) still communicate: MPI never pairs the communication thread's blocking
 * collectives with the nonblocking ones, so until the ranks agreed on the mode (all nonblocking, a
 * warning where it changed) the first collective waited forever (the ctest timeout catches that).
 * Every kind of call the reducer and a sharded optimizer make, results checked; LOCKSTEP_COMM_TIMEOUT
 * bounds each wait. Run under mpirun with 2 or more ranks (alone it exits 77). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "testutil.h"

int main(void) {
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    if (ri.world < 2) LS_SKIP("needs 2 or more ranks under mpirun");
    if (ri.rank == 1) setenv("LOCKSTEP_MPI_PROGRESS", "nonblocking", 1);
    setenv("LOCKSTEP_COMM_TIMEOUT", "30", 1); /* a hang fails here, before ctest's timeout */
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &c));
    const int r = ls_comm_rank(c), w = ls_comm_world(c);

    /* a blocking all-reduce in parts (LOCKSTEP_MPI_CHUNK is set small by the test) */
    enum { N = 50000 };
    float *x = malloc(N * sizeof *x);
    LS_REQUIRE(x);
    for (int i = 0; i < N; i++) x[i] = (float)(r + 1) * (float)(i % 97);
    LS_REQUIRE_OK(ls_comm_allreduce(c, x, N, LS_F32, LS_REDUCE_SUM));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += x[i] != (float)(w * (w + 1) / 2) * (float)(i % 97);
    LS_EXPECT(bad == 0);

    /* two async all-reduces in flight, then a reduce in segments to two roots and a broadcast of
     * two buffers from two roots */
    double a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = r + i, b[i] = 2.0 * r;
    ls_comm_request *ra = NULL, *rb = NULL;
    LS_REQUIRE_OK(ls_comm_iallreduce(c, a, 64, LS_F64, LS_REDUCE_SUM, &ra));
    LS_REQUIRE_OK(ls_comm_iallreduce(c, b, 64, LS_F64, LS_REDUCE_MAX, &rb));
    LS_REQUIRE_OK(ls_comm_wait(&ra));
    LS_REQUIRE_OK(ls_comm_wait(&rb));
    for (int i = 0; i < 64; i++) {
        LS_EXPECT(a[i] == w * (w - 1) / 2.0 + (double)w * i);
        LS_EXPECT(b[i] == 2.0 * (w - 1));
    }
    float seg[10];
    for (int i = 0; i < 10; i++) seg[i] = 1;
    int64_t counts[2] = {4, 6};
    int roots[2] = {0, 1};
    ls_comm_request *rs = NULL;
    LS_REQUIRE_OK(ls_comm_ireduce_segments(c, seg, 2, counts, roots, LS_F32, LS_REDUCE_SUM, &rs));
    LS_REQUIRE_OK(ls_comm_wait(&rs));
    for (int i = 0; i < 10; i++) LS_EXPECT(seg[i] == ((i < 4 ? r == 0 : r == 1) ? (float)w : 1.0f));
    float p0[3] = {(float)r, (float)r, (float)r}, p1[5] = {(float)r, (float)r, (float)r, (float)r, (float)r};
    void *bufs[2] = {p0, p1};
    int64_t bc[2] = {3, 5};
    int from[2] = {1, 0};
    ls_comm_request *rm = NULL;
    LS_REQUIRE_OK(ls_comm_ibroadcast_many(c, 2, bufs, bc, from, LS_F32, &rm));
    LS_REQUIRE_OK(ls_comm_wait(&rm));
    for (int i = 0; i < 3; i++) LS_EXPECT(p0[i] == 1.0f);
    for (int i = 0; i < 5; i++) LS_EXPECT(p1[i] == 0.0f);
    LS_REQUIRE_OK(ls_comm_barrier(c));

    free(x);
    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce_host(c, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(c);
    LS_TEST_END();
}
