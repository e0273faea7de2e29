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
 * work queued after the call does), 0 waits for them.
 * Both check their arguments, then agree on them over the ranks in one small all-reduce before any
 * broadcast: a rank's bad arguments (n < 0, params or one of them NULL, one on another device, a
 * root out of range) fail every rank (LS_ERR_INVALID_ARGUMENT, " (on rank N)" on the others), and
 * ranks given different calls (the count, or a parameter's elements, dtype or root) fail every rank
 * with LS_ERR_MISMATCH naming the first difference, e.g. "ls_ddp_broadcast_params: the ranks' calls
 * differ: parameter 2 is 100 f32 elements from rank 0 on rank 1 but 120 f32 elements from rank 0 on
 * rank 0", where the others used to wait in the broadcasts until LOCKSTEP_COMM_TIMEOUT. */
ls_status ls_ddp_broadcast_owned(ls_comm *c, int n, ls_tensor *const *params, const int *roots, int stream_order);
/* For a rank that cannot make its call of ls_ddp_broadcast_params or ls_ddp_broadcast_owned where
 * the others make theirs (building its list failed: status s, with its message): it meets them in
 * that call's agreement instead of leaving them in it for good, and every rank fails with s and its
 * message (" (on rank N)" on the others). Returns s (LS_ERR_INTERNAL where s is LS_OK). */
ls_status ls_ddp_broadcast_abandon(ls_comm *c, ls_status s);
/* ls_ddp_broadcast_owned without the agreement (no collective but the broadcasts; on nccl with
 * stream_order 1 the host does not wait): for a list that ls_ddp_broadcast_owned was given once on
 * every rank, passed again each step (the trainer's sharded optimizer). A rank's bad arguments
 * fail that rank alone, the others then wait in the broadcasts until LOCKSTEP_COMM_TIMEOUT. */
ls_status ls_ddp_rebroadcast_owned(ls_comm *c, int n, ls_tensor *const *params, const int *roots, int stream_order);

/* Compare the parameter count, and each parameter's shape and dtype, with rank 0's. On any
 * difference every rank returns LS_ERR_MISMATCH with a message naming the first one (lowest
 * parameter index, then lowest rank), e.g.
 *   "model differs between ranks: parameter 3 (fc2.weight) has shape [256, 512] f32 on rank 1 but
 *    [256, 500] f32 on rank 0"      or      "model differs between ranks: rank 1 has 6 parameters,
 *    rank 0 has 4". names may be NULL (then only indices are named); the name shown is the
 * differing rank's. Fixed-size exchanges only, so it cannot hang on a mismatch. A rank's bad
 * arguments (n < 0, params or one of them NULL) fail every rank (LS_ERR_INVALID_ARGUMENT,
 * " (on rank N)" on the others). */
ls_status ls_ddp_check_signature(ls_comm *c, int n, ls_tensor *const *params, const char *const *names);

/* One setting every rank must share (ls_ddp_check_settings): a number (num), a string (str; NULL:
 * not given) or a command-line flag (num != 0: given). name is how an error names it ("--epochs",
 * "the optimizer's lr"). */
typedef enum ls_setting_kind { LS_SETTING_NUM = 0, LS_SETTING_STR = 1, LS_SETTING_FLAG = 2 } ls_setting_kind;
typedef struct ls_setting {
    const char *name;
    double num;
    const char *str;
    ls_setting_kind kind;
} ls_setting;
static inline ls_setting ls_setting_num(const char *name, double value) {
    ls_setting s = {name, value, NULL, LS_SETTING_NUM};
    return s;
}
static inline ls_setting ls_setting_str(const char *name, const char *value) {
    ls_setting s = {name, 0, value, LS_SETTING_STR};
    return s;
}
static inline ls_setting ls_setting_flag(const char *name, int given) {
    ls_setting s = {name, given != 0 ? 1.0 : 0.0, NULL, LS_SETTING_FLAG}; /* a double: C++ refuses to narrow a bool */
    return s;
}

/* Compare settings[0..n) with rank 0's (the count, each name and value; numbers as doubles, 0 and
 * -0 alike, any NaN alike; strings whole). On any difference every rank returns LS_ERR_MISMATCH
 * naming the first one (lowest index, then lowest rank), e.g.
 *   "--epochs is 2 on rank 1 but 1 on rank 0"
 * so that ranks given different options fail at start instead of hanging in a collective one of
 * them never reaches, or training apart. Fixed-size exchanges only, so it cannot hang on a
 * mismatch. Every rank calls it; a rank's bad arguments (n < 0, settings NULL) fail every rank
 * (LS_ERR_INVALID_ARGUMENT, " (on rank N)" on the others). */
ls_status ls_ddp_check_settings(ls_comm *c, int n, const ls_setting *settings);

/* vals[0..n) (host) = their sum over ranks. Both check their arguments and agree on them and on n
 * over the ranks first (one small all-reduce): a rank's bad arguments (n < 0, vals NULL) fail every
 * rank (LS_ERR_INVALID_ARGUMENT, " (on rank N)" on the others), another n on some rank fails every
 * rank with LS_ERR_MISMATCH, "ls_ddp_sum_metrics: the ranks' calls differ: rank 1 sums 2 values,
 * rank 0 3". */
ls_status ls_ddp_sum_metrics(ls_comm *c, double *vals, int n);
/* vals[0..n) (host) = their mean over ranks (sum / world). For a weighted mean, sum value*weight
 * and weight with ls_ddp_sum_metrics and divide. */
ls_status ls_ddp_average_metrics(ls_comm *c, double *vals, int n);

#ifdef __cplusplus
}
#endif
#endif
