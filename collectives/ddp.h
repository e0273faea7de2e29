/* ddp.h: data-parallel helpers over lists of tensors (not models): rank 0's parameters to every
 * rank at start, the model signature checked across ranks (a mismatch is an error on EVERY rank,
 * never a hang), and metrics summed or averaged across ranks. The gradient reducer is reducer.h. */
#ifndef LOCKSTEP_DDP_H
#define LOCKSTEP_DDP_H

#include "comm.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every rank receives rank 0's values of params[0..n) (on the communicator's device). */
ls_status ls_ddp_broadcast_params(ls_comm *c, int n, ls_tensor *const *params);
/* Every rank receives params[i] from rank roots[i] (each parameter from the rank that updated it:
 * a sharded optimizer's owners; roots NULL: rank 0), the broadcasts in flight together. stream_order
 * 1 completes them in stream order (ls_comm_wait_stream: on nccl the host does not wait; the device
 * work queued after the call does), 0 waits for them. */
ls_status ls_ddp_broadcast_owned(ls_comm *c, int n, ls_tensor *const *params, const int *roots, int stream_order);

/* Compare the parameter count, and each parameter's shape and dtype, with rank 0's. On any
 * difference every rank returns LS_ERR_MISMATCH with a message naming the first one (lowest
 * parameter index, then lowest rank), e.g.
 *   "model differs between ranks: parameter 3 (fc2.weight) has shape [256, 512] f32 on rank 1 but
 *    [256, 500] f32 on rank 0"      or      "model differs between ranks: rank 1 has 6 parameters,
 *    rank 0 has 4". names may be NULL (then only indices are named); the name shown is the
 * differing rank's. Fixed-size exchanges only, so it cannot hang on a mismatch. */
ls_status ls_ddp_check_signature(ls_comm *c, int n, ls_tensor *const *params, const char *const *names);

/* vals[0..n) (host) = their sum over ranks. */
ls_status ls_ddp_sum_metrics(ls_comm *c, double *vals, int n);
/* vals[0..n) (host) = their mean over ranks (sum / world). For a weighted mean, sum value*weight
 * and weight with ls_ddp_sum_metrics and divide. */
ls_status ls_ddp_average_metrics(ls_comm *c, double *vals, int n);

#ifdef __cplusplus
}
#endif
#endif
