/* stub_nccl.h: the knobs and counters of the stand-in NCCL (stub_nccl.c). */
#ifndef LOCKSTEP_STUB_NCCL_H
#define LOCKSTEP_STUB_NCCL_H

#include <nccl.h>

extern int stub_nccl_fail_unique_id;                /* 1: ncclGetUniqueId fails (ncclSystemError) */
extern volatile ncclResult_t stub_nccl_async_error; /* what ncclCommGetAsyncError reports */
extern ncclResult_t stub_nccl_fail_colls;           /* not ncclSuccess: every collective call fails with it */
extern long stub_nccl_inits, stub_nccl_destroys,    /* ncclCommInitRank, ncclCommDestroy, */
    stub_nccl_colls;                                /* and collective calls */
extern volatile long stub_nccl_aborts;              /* ncclCommAbort calls (the watchdog's too) */
extern int stub_nccl_async_delay_us;                /* > 0: ncclCommGetAsyncError takes this long */
extern volatile long stub_nccl_used_aborted;        /* calls on (or during the abort of) an aborted comm */

#endif
