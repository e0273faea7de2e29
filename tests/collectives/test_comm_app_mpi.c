/* test_comm_app_mpi.c: an application that initializes and finalizes MPI itself, around lockstep's
 * communicators. Destroying a communicator leaves the application's MPI initialized (lockstep
 * finalizes only an MPI it initialized); a communicator still held when the application finalizes
 * MPI is destroyed without calling MPI (it used to call MPI_Comm_free after MPI_Finalize, which
 * Open MPI answers by aborting the process: the library never exits). Alone (a singleton MPI) and
 * under mpirun, with either progress mode. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "testutil.h"

static void check_sum(ls_comm *c) {
    double v = 1 + ls_comm_rank(c), want = ls_comm_world(c) * (ls_comm_world(c) + 1) / 2.0;
    LS_REQUIRE_OK(ls_comm_allreduce_host(c, &v, 1, LS_F64, LS_REDUCE_SUM));
    LS_EXPECT(v == want);
}

int main(int argc, char **argv) {
    int provided = 0, fin = 0;
    LS_REQUIRE(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS);
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    /* the application's MPI outlives lockstep's communicators */
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &c));
    LS_EXPECT(ls_comm_world(c) == world);
    check_sum(c);
    ls_comm_destroy(c);
    MPI_Finalized(&fin);
    LS_EXPECT(!fin);

    /* a communicator held across the application's MPI_Finalize: its destroy makes no MPI call */
    LS_REQUIRE_OK(ls_comm_create(NULL, "mpi", &c));
    check_sum(c);
    MPI_Finalize();
    ls_comm_destroy(c);
    printf("destroyed after the application's MPI_Finalize\n");

    /* a communicator made now is refused with the reason, not an abort inside MPI */
    c = NULL;
    LS_EXPECT_ERR(ls_comm_create(NULL, "mpi", &c), LS_ERR_COMM, "MPI was already finalized");
    LS_EXPECT(c == NULL);
    LS_TEST_END();
}
