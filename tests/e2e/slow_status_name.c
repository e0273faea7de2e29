/* An LD_PRELOAD library for check_rank_options.sh: liblockstep's ls_status_name, 2 s late on MPI
 * rank 1 (OMPI_COMM_WORLD_RANK). The examples' error line calls it, so rank 1 prints its line of a
 * failure every rank shares 2 s after rank 0: a rank 0 that then stopped the job (MPI_Abort) lost
 * rank 1's line. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "status.h"

const char *ls_status_name(ls_status s) {
    static const char *(*real)(ls_status);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "ls_status_name");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    /* the whole 2 s: a signal (the examples catch SIGTERM) does not cut it short */
    struct timespec left = {2, 0};
    if (rank && strcmp(rank, "1") == 0)
        while (nanosleep(&left, &left) != 0 && errno == EINTR) {}
    return real ? real(s) : "(ls_status_name not found)";
}
