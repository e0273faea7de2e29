/* rank_fails.c MODE: a lockstep program that fails on some ranks after a clean exit from lockstep
 * (its communicator destroyed, which finalizes MPI), the way a user's program reports a bad input:
 * it prints the error and returns 3. MODE "alone": rank 1 fails while the others wait for it in an
 * all-reduce; "all": every rank fails alike. The others exit 0 after the all-reduce, or 1 (after
 * ls_comm_abort) where it failed. "fork": every rank, its communicator gone, forks a child that
 * exits 5 (a helper process of the program): the child's exit is not the rank's (it neither waits
 * for the ranks nor aborts the job); the rank reports the child's status and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"

int main(int argc, char **argv) {
    const int all = argc > 1 && !strcmp(argv[1], "all");
    ls_comm *c = NULL;
    if (ls_comm_create(NULL, "mpi", &c) != LS_OK) {
        fprintf(stderr, "rank_fails: %s\n", ls_last_error());
        return 1;
    }
    const int rank = ls_comm_rank(c);
    if (argc > 1 && !strcmp(argv[1], "fork")) {
        ls_comm_destroy(c);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) exit(5);
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
        printf("rank_fails: rank %d: the child exited %d\n", rank, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        return 0;
    }
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
