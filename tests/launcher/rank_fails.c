/* rank_fails.c MODE: a lockstep program that fails on some ranks after a clean exit from lockstep
 * (its communicator destroyed, which finalizes MPI), the way a user's program reports a bad input:
 * it prints the error and returns 3. MODE "alone": rank 1 fails while the others wait for it in an
 * all-reduce; "all": every rank fails alike. The others exit 0 after the all-reduce, or 1 (after
 * ls_comm_abort) where it failed. */
#include <stdio.h>
#include <string.h>

#include "comm.h"

int main(int argc, char **argv) {
    const int all = argc > 1 && !strcmp(argv[1], "all");
    ls_comm *c = NULL;
    if (ls_comm_create(NULL, "mpi", &c) != LS_OK) {
        fprintf(stderr, "rank_fails: %s\n", ls_last_error());
        return 1;
    }
    const int rank = ls_comm_rank(c);
    if (all || rank == 1) {
        fprintf(stderr, "rank_fails: rank %d: bad input\n", rank);
        ls_comm_destroy(c);
        return 3;
    }
    double v = 1;
    ls_status s = ls_comm_allreduce_host(c, &v, 1, LS_F64, LS_REDUCE_SUM);
    if (s != LS_OK) {
        fprintf(stderr, "rank_fails: rank %d: %s\n", rank, ls_last_error());
        ls_comm_abort(c, "the all-reduce failed");
    }
    ls_comm_destroy(c);
    return s == LS_OK ? 0 : 1;
}
