/* autobatch.h: --batch-size auto. Finds the largest per-rank batch whose training step fits in
 * the allocator's memory cap with a headroom kept free, by trial steps: the batch doubles from a
 * start until a trial runs out of memory, then bisects between the last fit and the first failure.
 * Every trial's outcome is agreed across ranks (it fits only if it fits on every rank), so all
 * ranks walk the same sequence and end with the same batch: the minimum over ranks. */
#ifndef LOCKSTEP_AUTOBATCH_H
#define LOCKSTEP_AUTOBATCH_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "data.h"
#include "memory.h"
#include "nn.h"
#include "optim.h"
#include "train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One training step at this per-rank batch, allocating what a real step allocates (activations,
 * workspace, optimizer state), and leaving the model as it found it. Return
 * LS_ERR_OUT_OF_MEMORY when it does not fit; any other error ends the search, on every rank (the
 * others return that it failed on another rank). It must return: a
 * C++ exception thrown out of it (or a longjmp) passes through the search, which then never
 * restores the allocator's cap (it stays at the lowered limit) and, with several ranks, leaves the
 * others waiting in the trial's agreement; catch inside it and return an error instead. */
typedef ls_status (*ls_batch_trial_fn)(void *user, int64_t batch_per_rank);

typedef struct ls_batch_search_config {
    int64_t start;   /* first batch tried (>= 1) */
    int64_t max;     /* largest batch worth trying (e.g. the data set's share per rank; >= start) */
    double headroom; /* fraction of the cap kept free, in [0, 1): 0.10 keeps 10% */
} ls_batch_search_config;

#define LS_BATCH_SEARCH_MAX_TRIALS 64

typedef struct ls_batch_search_result {
    int64_t batch;      /* the largest batch that fit on every rank */
    size_t peak_bytes;  /* its trial's peak (the largest over ranks) */
    size_t cap_bytes;   /* the allocator's cap: the smallest over ranks (the one that binds) */
    int cap_rank;       /* the rank of that cap; -1 when every rank has the same */
    size_t limit_bytes; /* cap * (1 - headroom): what the trials had to fit in (each rank under its own) */
    int trials;         /* trials run, in order: */
    int64_t tried[LS_BATCH_SEARCH_MAX_TRIALS];
    int fit[LS_BATCH_SEARCH_MAX_TRIALS];
    size_t peak[LS_BATCH_SEARCH_MAX_TRIALS]; /* peak of each trial (largest over ranks) */
} ls_batch_search_result;

/* Search with the allocator's cap (LS_ERR_INVALID_ARGUMENT when it has none: set one with
 * LOCKSTEP_MEMORY_LIMIT or --memory-cap). During the search the cap is lowered to the limit, so a
 * trial that would eat into the headroom fails like a real out-of-memory; it is restored after.
 * comm may be NULL (one process). LS_ERR_OUT_OF_MEMORY when not even a batch of 1 fits. A host
 * allocator's cap above the host's memory (RAM or cgroup v2 memory.max, divided by the ranks on the
 * host) is LS_ERR_INVALID_ARGUMENT on every rank: with overcommit a trial past the host's memory
 * does not fail, it swaps or is killed. */
ls_status ls_batch_size_search(ls_allocator *alloc, ls_comm *comm, const ls_batch_search_config *cfg,
                               ls_batch_trial_fn trial, void *user, ls_batch_search_result *out);

/* A trial that trains model with ls_trainer: user is an ls_trainer_trial. It builds the optimizer
 * and the trainer at the trial's batch (their state counts toward the peak), runs two steps (the
 * second is the steady state) at learning rate 0 on the first samples of data (so parameters do
 * not move) and, given an eval set, evaluates a batch of it, then frees them and the model's activations and restores BatchNorm's running
 * statistics. The steps run without the communicator: a rank that runs out of memory cannot leave
 * the others waiting in a collective (the reducer's gradient buckets are reserved instead). A
 * sharded optimizer (optim's shard_rank and shard_world) holds this rank's share of the state only,
 * as in the run. */
typedef struct ls_trainer_trial {
    ls_ctx *ctx;
    ls_comm *comm; /* NULL: one process */
    ls_module *model;
    const ls_optim_config *optim; /* the optimizer the run will use */
    const ls_train_config *train; /* the run's configuration; batch_per_rank is the trial's */
    const ls_dataset *data;
    const ls_dataset *eval; /* NULL, or the set evaluated after each epoch: the trial then also
                               evaluates a batch of it after its steps, as the run will */
} ls_trainer_trial;

ls_status ls_trainer_trial_step(void *user, int64_t batch_per_rank);

#ifdef __cplusplus
}
#endif
#endif
