/* test_comm_fault.c: failures end a job instead of hanging it (2+ ranks under mpirun).
 *   timeout: ranks other than 0 skip a collective; rank 0's wait returns LS_ERR_COMM after
 *            LOCKSTEP_COMM_TIMEOUT seconds, prints "timeout detected: <message>" and aborts.
 *   timeout-blocking: the same with a blocking host all-reduce (as the per-step stop agreement
 *            makes): it was made on the caller's thread with no time limit, and waited for ever.
 *   abort:   rank 1 calls ls_comm_abort while rank 0 waits in an allreduce; MPI_Abort ends the job.
 * CTest matches the expected output (the exit status of an aborted job is not zero by design). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "testutil.h"

static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    ls_comm *c = NULL;
    LS_REQUIRE_OK(ls_comm_create(NULL, NULL, &c));
    const int rank = ls_comm_rank(c);
    if (ls_comm_world(c) < 2) LS_SKIP("needs 2 or more ranks");
    LS_REQUIRE_OK(ls_comm_barrier(c));
    float x[4] = {1, 2, 3, 4};
    if (!strcmp(mode, "timeout")) {
        if (rank == 0) {
            ls_comm_request *r = NULL;
            LS_REQUIRE_OK(ls_comm_iallreduce(c, x, 4, LS_F32, LS_REDUCE_SUM, &r));
            ls_status s = ls_comm_wait(&r);
            printf("timeout detected: %s: %s\n", ls_status_name(s), ls_last_error());
            fflush(stdout);
            ls_comm_abort(c, "collective timed out");
        }
        nap(60); /* never reaches the collective; ended by rank 0's abort */
    } else if (!strcmp(mode, "timeout-blocking")) {
        if (rank == 0) {
            ls_status s = ls_comm_allreduce_host(c, x, 4, LS_F32, LS_REDUCE_SUM);
            printf("timeout detected: %s: %s\n", ls_status_name(s), ls_last_error());
            fflush(stdout);
            ls_comm_abort(c, "collective timed out");
        }
        nap(60);
    } else if (!strcmp(mode, "abort")) {
        if (rank == 1) {
            nap(0.2);
            ls_comm_abort(c, "rank 1 gives up");
        } else {
            ls_comm_allreduce(c, x, 4, LS_F32, LS_REDUCE_SUM);
        }
        nap(60);
    } else {
        fprintf(stderr, "usage: test_comm_fault timeout|timeout-blocking|abort\n");
        return 2;
    }
    printf("not reached\n");
    return 1;
}
