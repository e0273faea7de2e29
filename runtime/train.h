/* train.h: the data-parallel training step and epoch loop shared by examples, tests and
 * benchmarks. A step is accum_steps micro-batches; each rank's micro-batch gradients are scaled
 * by 1/(global samples in the step), so summing across ranks and micro-steps gives exactly the
 * gradient of the mean loss over the global batch, whatever the split. Gradients are exchanged
 * only on the last micro-step, bucket by bucket while backward runs (DDP's no_sync before). */
#ifndef LOCKSTEP_TRAIN_H
#define LOCKSTEP_TRAIN_H

#include <stdint.h>

#include "amp.h"
#include "comm.h"
#include "data.h"
#include "ddp.h"
#include "nn.h"
#include "optim.h"
#include "reducer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most samples a step may take on a rank (batch_per_rank x accum_steps): 2^40. */
#define LS_MAX_STEP_SAMPLES ((int64_t)1 << 40)

typedef struct ls_train_config {
    int64_t batch_per_rank; /* micro-batch per rank */
    int accum_steps;        /* micro-batches per optimizer step (>= 1) */
    ls_lr_schedule lr;
    /* the gradients' global 2-norm clipped to it (0: off): the gradients of the parameters the
     * optimizer updates, as torch.nn.utils.clip_grad_norm_ of the parameters that require grad (a
     * frozen one, left out of the optimizer, is neither measured nor scaled) */
    double clip_grad_norm;
    ls_reducer_config buckets;
    ls_precision precision; /* fp32 (default), fp16 (with loss scaling) or bf16 */
    int no_timeline;        /* 1: do not open the LOCKSTEP_TIMELINE file (trial trainers) */
    int totals;             /* 1: keep running totals of every step (ls_trainer_totals) */
    /* cross-entropy's label smoothing in [0, 1) (torch.nn.CrossEntropyLoss's label_smoothing):
     * training's target is (1 - e) onehot + e / classes and the steps' losses are that objective;
     * ls_trainer_evaluate's loss is not smoothed (the plain cross-entropy, comparable across runs) */
    double label_smoothing;
    /* a sharded optimizer (ZeRO stage 1) over several ranks: 1 each gradient is reduced to the rank
     * that owns its parameter (ls_reducer_create_to_owners; the default), -1 all-reduced as without
     * sharding (PyTorch's ZeroRedundancyOptimizer: more bytes on the wire, the sums in the same
     * order as unsharded); 0: LOCKSTEP_SHARD_REDUCE=owner|all, else owner */
    int shard_reduce;
} ls_train_config;

typedef struct ls_step_stats {
    double loss_sum; /* sum of per-sample losses on this rank */
    int64_t correct; /* correct predictions on this rank */
    int64_t samples; /* samples on this rank */
    int64_t global_samples;
    float lr;
    double grad_norm;  /* before clipping, of the optimizer's gradients after the all-reduce (with a sharded
                        * optimizer's gradients reduced to their owners: of every owner's, summed
                        * over the ranks) (0 when clipping is off; inf or NaN where they were, as
                        * clip_grad_norm_ returns) */
    int skipped;       /* fp16, bf16: an inf/NaN gradient on some rank; the optimizer step was skipped */
    double loss_scale; /* the scale this step's backward used (1 without loss scaling) */
} ls_step_stats;

/* Sums over steps on this rank (ls_trainer_totals). */
typedef struct ls_train_totals {
    double loss_sum; /* of per-sample losses: the sum of the steps' ls_step_stats.loss_sum */
    int64_t correct;
    int64_t samples;
    int64_t steps;
    int64_t skipped; /* steps skipped for an inf/NaN gradient (fp16, bf16) */
} ls_train_totals;

typedef struct ls_trainer ls_trainer;

/* comm may be NULL (single process). Broadcasts rank 0's parameters, buffers (BatchNorm's
 * running statistics) and dropout seeds, and checks that every rank has the same model (parameter
 * count, shapes, dtypes; its layers in order, activations and each Dropout's p included, and what
 * shapes do not show, a convolution's stride, padding and groups, a batch norm's eps, momentum,
 * fused ReLU and synchronization, a pooling window; nested Sequentials and activation
 * checkpointing looked through) and the same settings (cfg's batch,
 * accumulation, schedule, clipping, precision, label smoothing and shard reduction; the
 * optimizer's kind, hyperparameters, sharding and each parameter's weight decay): LS_ERR_MISMATCH
 * on every rank, naming the first difference (ls_ddp_check_settings), before the first step. A
 * rank whose own checks fail (a NULL or bad argument, a bad environment variable) fails every
 * rank's create, the others with its status and message and " (on rank N)" (ls_comm_agree): it
 * left them waiting in the model's check. With LOCKSTEP_TIMELINE set (and cfg->no_timeline 0) the first
 * trainer opens this rank's timeline (timeline.h), which stays open, collecting the spans of every
 * later trainer too, until ls_timeline_close or the process exits. With several ranks the
 * model's gradients move into the reducer's buckets (reducer.h: gradients as bucket views, unless
 * cfg->buckets.bucket_view is -1 or LOCKSTEP_GRAD_AS_BUCKET_VIEW=0): the tensors stay, their ->data
 * changes, so read it when used; ls_trainer_destroy gives them their own memory back, and the
 * model must outlive the trainer (ls_module_destroy refuses to free it until ls_trainer_destroy). An optimizer sharded over the ranks (ZeRO stage 1: the config's
 * shard_rank and shard_world, or ls_optimizer_shard) must be sharded over comm's ranks: each
 * gradient is reduced to the rank that owns its parameter (cfg->shard_reduce), each rank steps its
 * own parameters and the trainer broadcasts each parameter from its owner after every step, so
 * that every rank holds the same parameters; a gradient of another rank's parameter holds this
 * rank's own part only after the step. On 2 ranks (and on any number with shard_reduce -1) the
 * parameters, and the checkpoint files (an unsharded save's), are the same bits as
 * unsharded; on more, MPI may sum the ranks' gradients in another order (equal within rounding).
 * With clip_grad_norm the norm is then that of the owners' gradients, summed over the ranks. */
ls_status ls_trainer_create(ls_ctx *ctx, ls_comm *comm, ls_module *model, ls_optimizer *opt, const ls_train_config *cfg,
                            ls_trainer **out);
void ls_trainer_destroy(ls_trainer *t);
/* With a sharded optimizer over several ranks: 1 when each gradient is reduced to its owner, -1 when
 * gradients are all-reduced (cfg->shard_reduce, LOCKSTEP_SHARD_REDUCE); 0 otherwise. */
int ls_trainer_shard_reduce(const ls_trainer *t);
/* The trainer's gradient reducer, to read its buckets (ls_reducer_num_buckets, ls_reducer_bucket):
 * its gradient i is the i-th of the model's parameters that need a gradient (frozen ones are in no
 * bucket); NULL on one rank, or where every parameter is frozen. */
const ls_reducer *ls_trainer_reducer(const ls_trainer *t);

/* One optimizer step over this rank's samples idx[0..count) (count <= accum_steps *
 * batch_per_rank, split into micro-batches), global_count = samples in the step over all ranks
 * (the gradient's divisor: on one rank it must be count; on several, the trainer's first step
 * checks, on every rank together, that it is the ranks' counts summed, and later steps trust it).
 * A model with Dropouts has each micro-batch's masks keyed to the step count and idx
 * (ls_module_key_dropout): the same masks for a sample at a step on any rank, in any micro-batch,
 * and after a resume that restores the step count (ls_trainer_set_num_steps).
 * A model with synchronized batch norm (SyncBatchNorm over several ranks) all-reduces in every
 * micro-batch with samples: a step whose micro-batches hold samples on one rank but not on another
 * (an exact sampler's short last step) is LS_ERR_INVALID_ARGUMENT on every rank, naming both (a
 * step short of every rank's full micro-batches costs it one all-reduce of the ranks' counts).
 * stats may be NULL: the step then neither counts correct predictions nor reads its loss, and on
 * a GPU it returns once its work is queued, without waiting for the device (as a PyTorch loop that
 * calls no loss.item()). fp16 and bf16 decide on the device too: the unscale, the found-inf check
 * (combined across ranks by an all-reduce in stream order with nccl), the skipped optimizer step
 * and the loss scale's update (amp.h). It still waits where it reads a value from the device (MPI
 * on a GPU: the gradients, staged through host memory, and the found-inf flag; clip_grad_norm
 * clips on the device, reading the norm only for stats), and before it rewrites one of the two
 * staging slots, for the copy made from it last: with data on the device or prefetched, the host
 * runs about a step ahead of the device. With
 * stats, the step waits for the device to read the loss and correct count.
 * On a GPU the trainer copies a data set it trains or evaluates on to the device once and gathers
 * each batch there, so a step moves only its indices (PyTorch users keep small sets on the GPU
 * for the same reason); it keeps the last two sets (training and test). LOCKSTEP_DATA_ON_DEVICE:
 * auto (default: on a GPU, a set of at most 2 GiB and, under a memory cap, at most a quarter of
 * it), on (always, the CPU included: a copy in the context's allocator), off (gather on the host
 * and copy each batch). */
ls_status ls_trainer_step(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                          int64_t global_count, ls_step_stats *stats);
/* With cfg.totals set, the trainer adds every step's loss, correct count and samples to running
 * totals; a step given stats NULL then counts correct predictions too, and queues copies of its
 * losses and count to pinned host memory instead of waiting for them (two steps' copies in
 * flight: a third step waits for the first's). ls_trainer_totals waits for the copies once and
 * gives the sums since the trainer was made or since the last call with reset 1: a loop can
 * report an epoch's loss and accuracy, or a progress line every N steps, while the host runs ahead
 * of the device (Keras' metrics, kept on the device and read at the end of an epoch; in PyTorch,
 * summing loss.detach() and calling .item() only when logging). The sums are those of the steps'
 * stats, in step order, bit for bit: loss_sum is the sum of the ls_step_stats.loss_sum (a step that
 * fails adds nothing, not even the micro-batches it ran). Without cfg.totals it is an error. */
ls_status ls_trainer_totals(ls_trainer *t, ls_train_totals *out, int reset);
/* The same without waiting (a progress line): steps counts every step, loss_sum, correct,
 * samples and skipped the steps whose copies have arrived (on a GPU up to two steps fewer; on the
 * CPU all). What it adds is added in step order: a later ls_trainer_totals gives the same sums. */
ls_status ls_trainer_totals_peek(ls_trainer *t, ls_train_totals *out);
/* Names the samples of the next ls_trainer_step (the same data, idx, count; call it before the
 * current step). Once the current step's work is queued, the trainer gathers the next step's
 * first micro-batch on the host into pinned memory and queues its copy to the device on a copy
 * stream, so the gather and the copy overlap the device's compute (PyTorch's DataLoader with
 * pin_memory and non_blocking copies). The next step uses it only if its first micro-batch is the
 * same samples of the same data set (same id: ls_dataset_changed in between makes it load
 * afresh), so a wrong hint costs time, never correctness. Used when a batch is copied from the
 * host: on a GPU whose data set stays on the host (LOCKSTEP_DATA_ON_DEVICE); LOCKSTEP_PREFETCH:
 * auto (default), off, or on (also on the CPU, through the context's allocator: for tests).
 * The hint belongs to the next ls_trainer_step call, which clears it even when it fails; data
 * must stay valid until that call returns. */
ls_status ls_trainer_prefetch(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count);
/* Batches that were found prefetched (hits) and prefetched batches not used (misses). */
void ls_trainer_prefetch_stats(const ls_trainer *t, int64_t *hits, int64_t *misses);
int64_t ls_trainer_num_steps(const ls_trainer *t);
/* Set the step count (and with it the learning-rate schedule's position), e.g. after loading a
 * checkpoint. */
void ls_trainer_set_num_steps(ls_trainer *t, int64_t steps);
/* The learning-rate schedule's position of the next step, where it is not the step count: after a
 * resume with another global batch, the steps of this run's size that the samples consumed make
 * (the schedule's total is counted in them), so the schedule goes on from where the data is, not
 * from the old step count (which, at twice the batch, was its end). Later steps advance both;
 * ls_trainer_set_num_steps keeps the difference. */
void ls_trainer_set_schedule_step(ls_trainer *t, int64_t schedule_step);

/* The loss scaler (fp16: GradScaler semantics; otherwise disabled), for checkpoints and reports:
 * get reads its state back from the device (scale, growth_tracker, skipped: a wait on a GPU); set
 * replaces it (a resumed run's; enabled must match the trainer's precision, the values valid).
 * Test hook: LOCKSTEP_AMP_INJECT_INF=STEP[:RANK] puts an inf into one gradient on RANK (default
 * the last rank) after the all-reduce of step STEP (counted from 1, as --metrics counts), so only
 * combining the found-inf flag across ranks makes the other ranks skip that step too. */
ls_status ls_trainer_get_loss_scaler(ls_trainer *t, ls_loss_scaler *out);
ls_status ls_trainer_set_loss_scaler(ls_trainer *t, const ls_loss_scaler *in);

/* Sum of loss and correct over samples idx[0..count) of a data set (no gradients, dropout off), in
 * chunks of the per-rank batch. Batch norm uses this rank's running statistics, which training
 * folded from this rank's batches only: ls_cnn_broadcast_buffers on every rank first evaluates
 * with rank 0's, as DDP's forward does (not collective itself: ranks may call it unequally). On a GPU the host runs up to two chunks ahead of the device: each
 * chunk's losses and count are copied to pinned memory in the background and added up in order
 * (the same sums as reading each chunk's), and the call waits for the device once, at its end. The
 * running totals' pending copies (cfg.totals) are folded into them first. */
ls_status ls_trainer_evaluate(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                              double *loss_sum, int64_t *correct);

#ifdef __cplusplus
}
#endif
#endif
