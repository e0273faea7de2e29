/* reducer.h: the DDP gradient reducer. Gradients (f32, parameter order, on the communicator's
 * device) are grouped into buckets in REVERSE parameter order (the order backward produces them):
 * the first bucket holds at most first_bucket_bytes (default 1 MiB), the others at most
 * bucket_bytes (default 25 MiB); a gradient larger than the cap gets a bucket of its own (reduced
 * in place, no fusion copy). When every gradient of a bucket is ready (copied into the bucket's
 * fusion buffer, unless they live there: see below) an async allreduce (sum) starts; buckets start
 * strictly in bucket order (as DDP), so communication overlaps the rest of backward. finish waits
 * (in stream order), multiplies by post_scale (and copies back).
 *
 * Gradients as bucket views (DDP's gradient_as_bucket_view; on unless bucket_view is -1 or
 * LOCKSTEP_GRAD_AS_BUCKET_VIEW=0): at create, each fused bucket's gradients move into its fusion
 * buffer, each at a 256-byte aligned address (none at the buffer's start), and their own memory is
 * freed; backward then writes straight into the bucket and nothing is copied in or out, and the
 * gradients take no memory beyond the buckets. The tensors keep their descriptors (only ->data
 * changes: read it when used, do not cache it across ls_reducer_create) and their allocator, and
 * must not be destroyed while the reducer lives; destroy gives each its own memory back with its
 * values, through host memory after freeing the bucket (so a trainer destroyed after running out
 * of device memory needs none). A bucket whose gradients are views (no allocator), come from
 * different allocators (on a device: not the context's), are listed twice or are already another
 * reducer's bucket views is copied as before. A fused bucket has the same layout either way (and
 * so the same count on every rank, whatever each chose); create checks with one small all-reduce
 * that every rank planned the same buckets (LS_ERR_MISMATCH where the caps differ).
 *
 * Step protocol: begin(post_scale) -> grad_ready(i) as each gradient becomes final (any order;
 * optional) -> finish (treats unmarked gradients as ready). Gradient accumulation ("no_sync"):
 * on non-final micro-steps simply do not call begin/grad_ready/finish; gradients accumulate
 * locally and the final micro-step's reduction carries the sum.
 * The caps differ from PyTorch's in one respect: PyTorch closes a bucket once it reaches the cap;
 * here a bucket never exceeds its cap unless it holds a single oversized gradient. */
#ifndef LOCKSTEP_REDUCER_H
#define LOCKSTEP_REDUCER_H

#include <stddef.h>

#include "comm.h"
#include "ops.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ls_reducer ls_reducer;

typedef struct ls_reducer_config {
    size_t first_bucket_bytes; /* 0: LOCKSTEP_FIRST_BUCKET_MB, else 1 MiB */
    size_t bucket_bytes;       /* 0: LOCKSTEP_BUCKET_MB, else 25 MiB */
    int bucket_view;           /* gradients as bucket views: 1 on, -1 off, 0: LOCKSTEP_GRAD_AS_BUCKET_VIEW, else on */
    int compress;              /* sent as LS_REDUCER_F16 or _BF16, -1 f32; 0: LOCKSTEP_GRAD_COMPRESS, else f32 */
} ls_reducer_config;

/* ls_reducer_config.compress: each bucket is converted to 16 bits, all-reduced (summed) in 16 bits
 * and converted back, as DDP's fp16/bf16 compression hooks and Horovod's Compression.fp16: half the
 * bytes on the wire, at 16-bit precision (fp16 can overflow: inf, and the trainer then skips the
 * step on every rank; bf16 keeps f32's range). */
#define LS_REDUCER_F16 1
#define LS_REDUCER_BF16 2

typedef struct ls_reducer_bucket_info {
    int lo, hi;   /* parameters lo..hi (inclusive); filled from hi down to lo */
    size_t bytes; /* sum of the gradients' bytes */
    int fused;    /* 1: a fusion buffer; 0: one gradient reduced in place */
    int view;     /* 1: the gradients live in the fusion buffer (no copies) */
} ls_reducer_bucket_info;

/* Fill in the caps: a non-zero field wins, then the environment (MiB, fractions allowed), then the
 * defaults. cfg may be NULL. A bad environment value is LS_ERR_INVALID_ARGUMENT. */
ls_status ls_reducer_config_resolve(const ls_reducer_config *cfg, ls_reducer_config *out);

/* The bucket assignment alone: bucket_of[i] for gradients of nbytes[i] bytes (i = 0..n-1).
 * Returns the number of buckets. Bucket 0 holds the last parameters. */
int ls_reducer_plan_buckets(int n, const size_t *nbytes, size_t first_bucket_bytes, size_t bucket_bytes,
                            int *bucket_of);

/* The bytes a reducer would allocate beyond the gradients' own, for gradients of nbytes[i] bytes
 * (all from one allocator) in the buckets of ls_reducer_plan_buckets: the fusion buffers, or with
 * bucket views (view 1) their alignment padding, and with compression (compress 1) every bucket's
 * 16-bit copy. A batch-size trial reserves them. */
size_t ls_reducer_extra_bytes(int n, const size_t *nbytes, const int *bucket_of, int view, int compress);
/* grads[0..n): the gradient tensors in parameter order (the reducer keeps the pointers; the tensors
 * must outlive it). ctx: their context (NULL: CPU). */
ls_status ls_reducer_create(ls_comm *c, ls_ctx *ctx, int n, ls_tensor *const *grads, const ls_reducer_config *cfg,
                            ls_reducer **out);
/* ZeRO (a sharded optimizer): owners[i] is the rank that steps parameter i (the same on every rank;
 * NULL: ls_reducer_create). Each bucket's runs of gradients of one owner are reduced (summed) to
 * that rank only, the runs of a bucket all in flight at once (ls_comm_ireduce_segments; DeepSpeed's
 * reduce of gradients to their partition's owner): each rank sends its gradients of the others'
 * parameters once, where an all-reduce sends them and receives them back, and the parameters'
 * broadcast after the step takes the place of the second half. After finish a rank's own gradients are reduced and scaled; those of parameters
 * other ranks own hold this rank's local gradient (undefined for any use). The sums may come in
 * another order than an all-reduce's (Open MPI on 3 or more ranks: comm.h), so training is equal
 * to the all-reduced one within rounding there, and bit for bit on 2 ranks. */
ls_status ls_reducer_create_to_owners(ls_comm *c, ls_ctx *ctx, int n, ls_tensor *const *grads, const int *owners,
                                      const ls_reducer_config *cfg, ls_reducer **out);
void ls_reducer_destroy(ls_reducer *r);

/* A synchronized backward begins; after the sum, gradients are multiplied by post_scale
 * (1/world averages). */
ls_status ls_reducer_begin(ls_reducer *r, double post_scale);
/* grads[i] is final for this step. Launches every bucket that became ready, in bucket order, and
 * drives the progress of those in flight. Marking a gradient twice in a step is an error. */
ls_status ls_reducer_grad_ready(ls_reducer *r, int i);
/* Launch what remains (unmarked gradients count as ready), wait for every bucket, scale and copy
 * back. After an error in the step, still waits for what was launched and returns the first error.
 * The waits are in stream order (ls_comm_wait_stream): with nccl the host returns once the scaling
 * is queued behind the last all-reduce, and the compute stream's later work (the optimizer) waits
 * for them on the device; under the timeline they are host waits. */
ls_status ls_reducer_finish(ls_reducer *r);

/* Every gradient zeroed, as the module's zero_grad would (a trainer's step begins with it): a
 * bucket whose gradients are views in one call over its region (its padding is zero anyway), the
 * others gradient by gradient; on a device in stream order. Not between begin and finish. */
ls_status ls_reducer_zero_grads(ls_reducer *r);

int ls_reducer_num_buckets(const ls_reducer *r);
ls_status ls_reducer_bucket(const ls_reducer *r, int b, ls_reducer_bucket_info *out);
/* The bucket holding parameter i (-1 when out of range). */
int ls_reducer_bucket_of(const ls_reducer *r, int i);
/* Buckets launched so far in the current (or last) step. */
int ls_reducer_launched(const ls_reducer *r);
/* The caps in use. */
ls_reducer_config ls_reducer_get_config(const ls_reducer *r);

#ifdef __cplusplus
}
#endif
#endif
