/* check_fail.h: the failure counter of the e2e file checkers (metrics_check.c, timeline_check.c):
 * BAD prints the first ten failures as "FAIL: ..." lines and counts them all in fails. */
#ifndef LOCKSTEP_CHECK_FAIL_H
#define LOCKSTEP_CHECK_FAIL_H

#include <stdio.h>

static int fails;
#define BAD(...)                                                                                                       \
    do {                                                                                                               \
        if (fails++ < 10) {                                                                                            \
            printf("FAIL: " __VA_ARGS__);                                                                              \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

#endif
