/* train.c: the training step: gather a micro-batch (on the host, or on the device from a copy of
 * the data set kept there) into the device's input buffers (and cast it to f16/bf16 under mixed
 * precision), forward, loss (scaled for fp16), backward with the
 * reducer's gradient hook, unscale and inf/NaN check, clipping, optimizer step. */
#include "train.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "log.h"
#include "nn_impl.h" /* ls_module_cache_weight_casts */
#include "timeline.h"

struct ls_trainer {
    ls_ctx *ctx;
    int32_t classes; /* the loaded batch's data set's classes (its labels are below) */
    ls_comm *comm;   /* NULL or world 1: no exchange */
    ls_module *model;
    int holds_model; /* counted in model->trainers (a trainer made): uncounted by destroy */
    ls_optimizer *opt;
    ls_train_config cfg;
    ls_xent *loss;
    ls_reducer *reducer;
    int compress_f16; /* the reducer sends fp16: an inf check every step, whatever the precision */
    int dropouts;     /* the model holds Dropouts: each micro-batch keys their masks to its samples */
    int64_t steps;
    int counts_checked; /* the first step's counts agreed over the ranks (check_counts) */
    int owned_agreed;   /* the ranks agreed on the sharded optimizer's broadcasts (the first step) */
    int64_t lr_offset;  /* the schedule's position less the step count (ls_trainer_set_schedule_step) */
    int64_t cap;        /* rows the input buffers hold */
    int64_t features;   /* and the features per row */
    /* The input buffers. On the host path (a CPU context, data gathered on the host) x and y are
     * views of slot 0's staging memory. Otherwise each of the two slots has device tensors, and
     * its host staging memory (pinned where the backend can) is made on first use; x and y point
     * at the slot of the batch being trained. Slots alternate, so the next batch can be gathered
     * and copied into one while the device still computes on the other (ls_trainer_prefetch). */
    struct stage {
        void *mem;    /* host staging: hx [cap, features], then hy [cap] */
        size_t bytes; /* of mem */
        int pinned;
        float *hx; /* or, for a data set of bytes, its 256 values and then the bytes */
        int32_t *hy;
        ls_tensor *x, *y; /* device buffers */
        void *xb;         /* a set of bytes: the values and bytes copied, decoded into x on the device */
        int64_t decode;   /* rows staged in xb and not yet decoded into x */
        int64_t *hidx;    /* a data set on the device: the batch's indices staged on the host */
        int idx_pinned;   /* hidx is pinned memory */
        int64_t *didx;    /* and their device copy, which the gather reads */
    } st[LS_UPLOAD_SLOTS];
    int slot;           /* the slot of the last batch loaded */
    ls_tensor vx, vy;   /* the host path's views */
    ls_tensor *x, *y;   /* the batch being trained */
    int prefetch_mode;  /* LOCKSTEP_PREFETCH: PF_AUTO, PF_ON, PF_OFF */
    int gather_threads; /* LOCKSTEP_GATHER_THREADS (ls_dataset_gather_threads) */
    struct {            /* the samples of the next step's first micro-batch (ls_trainer_prefetch) */
        int set;
        const ls_dataset *data;
        int64_t n, cap;
        int64_t *idx;
    } hint;
    struct { /* a batch already in a slot (copied or being copied) */
        int valid, slot;
        uint64_t id;
        int64_t n, cap;
        int64_t *idx;
    } pf;
    int64_t pf_hits, pf_misses;
    int pf_warned;
    ls_tensor *xl; /* the batch cast to f16/bf16 [cap, features] (mixed precision) */
    int n_params;
    ls_tensor **grads;
    /* the gradients of the parameters that need one (ls_module_requires_grad, read at create):
     * the reducer's, zeroed and checked for inf/NaN at each step; a frozen parameter's gradient is
     * never computed, and the trainer leaves it as it is (PyTorch DDP leaves a parameter with
     * requires_grad False out of its buckets). requires[i]: parameter i's flag at create;
     * train_of[i]: its index among them, -1 when frozen. */
    int n_train;
    ls_tensor **train;
    unsigned char *requires;
    int *train_of;
    /* a sharded optimizer (ls_optimizer_shard): its parameters and their owners, each broadcast from
     * its owner after every step; NULL when unsharded */
    int n_owned;
    ls_tensor **owned;
    int *owners;
    /* gradients reduced to their owners (cfg.shard_reduce): the gradients of the parameters this
     * rank owns, the ones it can read after the reduction (clip_grad_norm's) */
    int reduce_owned;
    int n_own_grads;
    ls_tensor **own_grads;
    /* clip_grad_norm's gradients: those of the parameters the optimizer updates (a frozen one, left
     * out of it, has none in PyTorch, whose clip_grad_norm_ then neither measures nor scales it);
     * reduced to their owners, this rank's own among them. in_opt[i]: the model's parameter i is
     * the optimizer's. */
    int n_clip;
    ls_tensor **clip;
    unsigned char *in_opt;
    ls_loss_scaler scaler; /* its config; its state is amp's (read back by ls_trainer_get_loss_scaler) */
    double *amp;           /* the found-inf check's state on the device (amp.h), when steps are checked */
    int64_t inject_step;   /* LOCKSTEP_AMP_INJECT_INF: step and rank; -1 off */
    int inject_rank;
    int data_mode;    /* LOCKSTEP_DATA_ON_DEVICE: DATA_AUTO, DATA_ON, DATA_OFF */
    struct dev_data { /* data sets copied to the device, by ls_dataset.id (0: empty slot) */
        uint64_t id;
        const ls_dataset *set; /* the set copied: a newer id of it (ls_dataset_changed) replaces this copy */
        int64_t n, features;
        void *images, *labels; /* images: f32, or bytes decoded through lut */
        float *lut;            /* [256] on the device for a set of bytes, else NULL */
        uint64_t used;         /* for replacing the least recently used */
        int eval_only;         /* copied for an evaluation (on): freed by the next training step */
    } dev[2];
    uint64_t dev_clock;
    uint64_t refused[2]; /* ids of sets that did not fit on the device (auto): kept on the host */
    int n_refused;
    uint64_t train_id; /* the data set of the last training step (ls_dataset.id) */
    int evaluating;    /* inside ls_trainer_evaluate */
    int64_t *iota;     /* device 0, 1, ..., cap-1: decoding staged bytes is a gather of every row */
    /* cfg.totals: the running sums, and the losses and counts of steps given no stats, copied to
     * the host in the background, one step per download slot, the slots used in turn */
    ls_train_totals totals;
    struct dslot {
        void *mem; /* per micro-batch room for batch_per_rank f64 losses, then accum_steps int32 counts */
        size_t bytes;
        int pinned;
        int n_mb;    /* micro-batches whose copies are queued (0: nothing to read) */
        int flagged; /* the step's found-inf flag is copied too (after the counts) */
        struct dmb {
            int64_t n, count; /* samples, and losses copied */
            ls_dtype dtype;
        } * mb; /* [accum_steps] */
    } ds[LS_DOWNLOAD_SLOTS];
    int ds_next; /* the slot the next step without stats fills: the oldest */
    int ds_open; /* slot ds_next holds copies of the step under way (dropped if it fails) */
};

/* LOCKSTEP_DATA_ON_DEVICE and LOCKSTEP_PREFETCH: auto (unset), on or off */
enum { DATA_AUTO = 0, DATA_ON = 1, DATA_OFF = 2 };
enum { PF_AUTO = DATA_AUTO, PF_ON = DATA_ON, PF_OFF = DATA_OFF };

static ls_status env_auto_on_off(const char *name, int *out) {
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, "auto"))
        *out = DATA_AUTO;
    else if (!strcmp(v, "on") || !strcmp(v, "1"))
        *out = DATA_ON;
    else if (!strcmp(v, "off") || !strcmp(v, "0"))
        *out = DATA_OFF;
    else
        return ls_error(LS_ERR_INVALID_ARGUMENT, "%s='%s': use auto, on or off", name, v);
    return LS_OK;
}

/* The model's parameter i is final: the reducer's gradient of it, unless it is frozen (none). */
static ls_status reducer_hook(void *user, int i) {
    const ls_trainer *t = user;
    return t->train_of[i] < 0 ? LS_OK : ls_reducer_grad_ready(t->reducer, t->train_of[i]);
}

/* Input buffers: device tensors (in the context's allocator) on a GPU, when the data set is
 * kept "on the device" of a CPU context (LOCKSTEP_DATA_ON_DEVICE=on) or when staged copies are
 * forced there (LOCKSTEP_PREFETCH=on: to test that path); otherwise views of host staging. */
static int uses_buffers(const ls_trainer *t) {
    return t->ctx->device.type != LS_DEVICE_CPU || t->data_mode == DATA_ON || t->prefetch_mode == PF_ON;
}

/* Waits for the slots' copies, then frees every input buffer. */
static void free_batch_buffers(ls_trainer *t) {
    for (int i = 0; i < LS_UPLOAD_SLOTS; i++) {
        struct stage *g = &t->st[i];
        if (g->mem || g->x || g->hidx) (void)ls_allocator_upload_wait(t->ctx->alloc, i);
        ls_allocator_host_free(t->ctx->alloc, g->mem, g->bytes, g->pinned);
        ls_allocator_host_free(t->ctx->alloc, g->hidx, (size_t)t->cap * sizeof(int64_t), g->idx_pinned);
        if (g->didx) ls_free(t->ctx->alloc, g->didx);
        ls_tensor_destroy(g->x);
        ls_tensor_destroy(g->y);
        if (g->xb) ls_free(t->ctx->alloc, g->xb);
        memset(g, 0, sizeof *g);
    }
    if (t->iota) ls_free(t->ctx->alloc, t->iota);
    t->iota = NULL;
    t->x = t->y = NULL;
    t->cap = 0;
    if (t->pf.valid) t->pf_misses++; /* a prefetched batch dropped with the buffers */
    t->pf.valid = 0;
}

static void dev_data_free(ls_trainer *t, struct dev_data *d) {
    if (d->images) ls_free(t->ctx->alloc, d->images);
    if (d->labels) ls_free(t->ctx->alloc, d->labels);
    if (d->lut) ls_free(t->ctx->alloc, d->lut);
    memset(d, 0, sizeof *d);
}

/* The room for one micro-batch's losses in a download slot. */
static size_t dslot_room(const ls_trainer *t) { return (size_t)t->cfg.batch_per_rank * sizeof(double); }

/* A slot's correct counts: after the losses of accum_steps micro-batches. */
static int32_t *dslot_counts(const ls_trainer *t, const struct dslot *d) {
    return (int32_t *)((char *)d->mem + (size_t)t->cfg.accum_steps * dslot_room(t));
}

/* A slot's copy of its step's found-inf flag: after the counts, aligned. */
static double *dslot_flag(const ls_trainer *t, const struct dslot *d) {
    size_t off = (size_t)t->cfg.accum_steps * (dslot_room(t) + sizeof(int32_t));
    return (double *)((char *)d->mem + (off + 7) / 8 * 8);
}

/* Waits for a slot's copies and adds them to the totals, in micro-batch order (as read_loss adds
 * them to a step's stats). */
static ls_status totals_fold(ls_trainer *t, int slot) {
    struct dslot *d = &t->ds[slot];
    if (!d->n_mb && !d->flagged) return LS_OK;
    LS_CHECK(ls_allocator_download_wait(t->ctx->alloc, slot));
    const char *mem = d->mem;
    const int32_t *correct = dslot_counts(t, d);
    double loss = 0;
    for (int k = 0; k < d->n_mb; k++) {
        loss += ls_xent_mean(d->mb[k].dtype, mem + (size_t)k * dslot_room(t), d->mb[k].count) * (double)d->mb[k].n;
        t->totals.correct += correct[k];
        t->totals.samples += d->mb[k].n;
    }
    t->totals.loss_sum += loss;
    if (d->flagged) t->totals.skipped += *dslot_flag(t, d) != 0;
    d->n_mb = 0;
    d->flagged = 0;
    return LS_OK;
}

/* Every slot's copies into the totals, the oldest first. */
static ls_status totals_drain(ls_trainer *t) {
    for (int i = 0; i < LS_DOWNLOAD_SLOTS; i++) LS_CHECK(totals_fold(t, (t->ds_next + i) % LS_DOWNLOAD_SLOTS));
    return LS_OK;
}

/* A slot's host memory, taken on first use. */
static ls_status dslot_mem(ls_trainer *t, struct dslot *d) {
    if (!d->mem) {
        size_t bytes = (size_t)t->cfg.accum_steps * (dslot_room(t) + sizeof(int32_t)) + 8 + sizeof(double);
        if (!d->mb && !(d->mb = calloc((size_t)t->cfg.accum_steps, sizeof *d->mb)))
            return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for the step totals");
        LS_CHECK(ls_allocator_host_alloc(t->ctx->alloc, bytes, "step totals", &d->pinned, &d->mem));
        d->bytes = bytes;
    }
    return LS_OK;
}

/* The slot for this step's copies, emptied into the totals first (a step LS_DOWNLOAD_SLOTS back). */
static ls_status dslot_take(ls_trainer *t, struct dslot **out) {
    int slot = t->ds_next;
    struct dslot *d = &t->ds[slot];
    if (d->n_mb || d->flagged) {
        LS_TL_T0(t_wait);
        LS_CHECK(totals_fold(t, slot));
        LS_TL_SPAN(t_wait, "totals of an earlier step (waits for the device)", "sync");
    }
    LS_CHECK(dslot_mem(t, d));
    *out = d;
    return LS_OK;
}

static void dslots_free(ls_trainer *t) {
    for (int i = 0; i < LS_DOWNLOAD_SLOTS; i++) {
        struct dslot *d = &t->ds[i];
        if (d->mem) (void)ls_allocator_download_wait(t->ctx->alloc, i); /* no copy into freed memory */
        ls_allocator_host_free(t->ctx->alloc, d->mem, d->bytes, d->pinned);
        free(d->mb);
        memset(d, 0, sizeof *d);
    }
}

ls_status ls_trainer_totals_peek(ls_trainer *t, ls_train_totals *out) {
    LS_CHECK_ARG(t && out, "ls_trainer_totals_peek: %s is NULL", !t ? "the trainer" : "out");
    if (!t->cfg.totals)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_trainer_totals_peek: the trainer keeps no totals (set totals = 1 in its ls_train_config)");
    /* the slots whose copies have arrived, oldest first, stopping at the first that has not (the
     * sums stay in step order) */
    for (int i = 0; i < LS_DOWNLOAD_SLOTS; i++) {
        const int slot = (t->ds_next + i) % LS_DOWNLOAD_SLOTS;
        if (!t->ds[slot].n_mb && !t->ds[slot].flagged) continue;
        int done = 0;
        LS_CHECK(ls_allocator_download_done(t->ctx->alloc, slot, &done));
        if (!done) break;
        LS_CHECK(totals_fold(t, slot));
    }
    *out = t->totals;
    return LS_OK;
}

ls_status ls_trainer_totals(ls_trainer *t, ls_train_totals *out, int reset) {
    LS_CHECK_ARG(t && out, "ls_trainer_totals: %s is NULL", !t ? "the trainer" : "out");
    if (!t->cfg.totals)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "ls_trainer_totals: the trainer keeps no totals (set totals = 1 in its ls_train_config)");
    LS_TL_T0(t_read);
    LS_CHECK(totals_drain(t));
    LS_TL_SPAN(t_read, "read totals (waits for the device)", "sync");
    *out = t->totals;
    if (reset) memset(&t->totals, 0, sizeof t->totals);
    return LS_OK;
}

void ls_trainer_destroy(ls_trainer *t) {
    if (!t) return;
    dslots_free(t);
    if (t->pf_hits || t->pf_misses)
        LS_LOG_D("prefetch: %lld batches prefetched and used, %lld unused", (long long)t->pf_hits,
                 (long long)t->pf_misses);
    for (int i = 0; i < 2; i++) dev_data_free(t, &t->dev[i]);
    ls_reducer_destroy(t->reducer);
    if (t->amp) ls_free(t->ctx->alloc, t->amp);
    ls_xent_destroy(t->loss);
    free_batch_buffers(t);
    free(t->hint.idx);
    free(t->pf.idx);
    free(t->grads);
    free(t->train);
    free(t->requires);
    free(t->train_of);
    free(t->owned);
    free(t->owners);
    free(t->own_grads);
    free(t->clip);
    free(t->in_opt);
    ls_tensor_destroy(t->xl);
    if (t->model) ls_module_set_grad_hook(t->model, NULL, NULL);
    if (t->holds_model) {
        t->model->trainers--;
        t->ctx->live_trainers--;
    }
    free(t);
}

/* LOCKSTEP_TIMELINE=FILE: this rank's timeline, unless one is already being written; it stays open
 * for later trainers and is closed at exit. */
/* Decimal digits at *p (at least one, no sign or space), at most max: the value in *out and *p moved
 * past them; 0 where there are none or the value is larger. */
static int digits(const char **p, long long max, long long *out) {
    long long v = 0;
    const char *q = *p;
    for (; *q >= '0' && *q <= '9'; q++) {
        if (v > (max - (*q - '0')) / 10) return 0;
        v = v * 10 + (*q - '0');
    }
    if (q == *p) return 0;
    *p = q;
    *out = v;
    return 1;
}

static ls_status open_timeline(const ls_train_config *cfg, ls_comm *comm) {
    const char *pattern = getenv("LOCKSTEP_TIMELINE");
    if (cfg->no_timeline) return LS_OK;
    /* read without LOCKSTEP_TIMELINE too: a job script's typo is found where it is tried */
    ls_timeline_steps steps;
    LS_CHECK(ls_timeline_steps_parse(getenv("LOCKSTEP_TIMELINE_STEPS"), &steps));
    /* open: a trace this process writes, or one stopped by a failed write (a full disk), which
     * a later trainer (oom_challenge's next configuration) took for none and failed on, "already
     * being written", or one closed after its window of steps (a later trainer would truncate it) */
    if (!pattern || !*pattern || ls_timeline_is_open()) return LS_OK;
    int rank = comm ? ls_comm_rank(comm) : 0, world = comm ? ls_comm_world(comm) : 1;
    char path[4096];
    /* lockstep-run --max-restarts' count (its value checked by the launcher, which sets it): a
     * restart wrote over the failed attempt's trace, the one to look at */
    const char *rc = getenv("LOCKSTEP_RESTART_COUNT");
    char *end = NULL;
    long restart = rc ? strtol(rc, &end, 10) : 0;
    if (!rc || !*rc || *end || restart < 0 || restart > 1000000) restart = 0;
    if (ls_timeline_path_restart(pattern, rank, world, (int)restart, path, (int)sizeof path) != 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "LOCKSTEP_TIMELINE: the file name is too long");
    /* an earlier run's trace of that name (a resume by hand) is moved aside, not truncated, and
     * said (ls_timeline_open) */
    ls_status s = ls_timeline_open(path, rank);
    if (s == LS_OK) s = ls_timeline_set_steps(&steps);
    if (s != LS_OK) {
        (void)ls_timeline_close();
        return ls_error_context(s, "LOCKSTEP_TIMELINE");
    }
    ls_timeline_close_at_exit();
    if (rank == 0 && steps.by_default)
        LS_LOG_I("timeline: writing %s, its first %d steps, at most %lld MiB (LOCKSTEP_TIMELINE_STEPS for others; "
                 "open it in ui.perfetto.dev or chrome://tracing)",
                 path, LS_TIMELINE_DEFAULT_STEPS, LS_TIMELINE_DEFAULT_BYTES >> 20);
    else if (rank == 0)
        LS_LOG_I("timeline: writing %s, steps %s (LOCKSTEP_TIMELINE_STEPS; open it in ui.perfetto.dev or "
                 "chrome://tracing)",
                 path, steps.text);
    return LS_OK;
}

/* The optimizer updates the model's own tensors: each of its parameters is one of the model's, with
 * the model's gradient for it (some of them: a frozen parameter may be left out). An optimizer made
 * for another model would step tensors the trainer never computes. */
static ls_status check_optimizer(ls_module *model, const ls_optimizer *opt) {
    int n = ls_module_num_params(model), k = ls_optimizer_num_params(opt), last = -1;
    for (int i = 0; i < k; i++) {
        ls_tensor *g = NULL, *p = ls_optimizer_param(opt, i, &g);
        /* usually the model's next one (the optimizer made in the model's order): a search otherwise */
        int j = last + 1 < n && ls_module_param(model, last + 1) == p ? last + 1 : 0;
        while (j < n && ls_module_param(model, j) != p) j++;
        last = j;
        char d[64];
        if (j == n)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "the optimizer's parameter %d (%s) is not one of the model's: create the optimizer from "
                            "ls_module_param(model, i) and ls_module_grad(model, i)",
                            i, ls_tensor_describe(p, d, sizeof d));
        if (ls_module_grad(model, j) != g)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "the optimizer's parameter %d is the model's parameter %d, but its gradient is not "
                            "ls_module_grad(model, %d)",
                            i, j, j);
        /* torch.optim skips a parameter whose gradient is None; this optimizer would step it on a
         * gradient never computed (momentum and weight decay still moving it) */
        if (!ls_module_requires_grad(model, j))
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "the model's parameter %d (%s) needs no gradient (ls_module_set_requires_grad) but is the "
                            "optimizer's parameter %d, which would step it on a gradient never computed: leave it "
                            "out of the optimizer",
                            j, ls_module_param_name(model, j), i);
    }
    return LS_OK;
}

/* ZeRO stage 1: a sharded optimizer must be sharded over these ranks; the trainer then broadcasts
 * each parameter from its owner after every step. */
static ls_status shard_optimizer(ls_trainer *t) {
    int rank = t->comm ? ls_comm_rank(t->comm) : 0, world = t->comm ? ls_comm_world(t->comm) : 1;
    int k = ls_optimizer_num_params(t->opt);
    if (ls_optimizer_owner(t->opt, 0) < 0) return LS_OK;
    if (world == 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the optimizer is sharded over several ranks (ls_optimizer_shard) but the trainer has one");
    ls_status s = ls_optimizer_shard(t->opt, rank, world); /* the same ranks, or an error naming both */
    if (s != LS_OK) return ls_error_context(s, "the trainer's communicator has %d ranks", world);
    t->owned = calloc((size_t)k, sizeof *t->owned);
    t->owners = calloc((size_t)k, sizeof *t->owners);
    if (!t->owned || !t->owners) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer's owner list");
    for (int i = 0; i < k; i++) {
        t->owned[i] = ls_optimizer_param(t->opt, i, NULL);
        t->owners[i] = ls_optimizer_owner(t->opt, i);
    }
    t->n_owned = k;
    return LS_OK;
}

/* cfg.shard_reduce, else LOCKSTEP_SHARD_REDUCE: 1 owner, -1 all. */
static ls_status shard_reduce_mode(const ls_train_config *cfg, int *mode) {
    *mode = 1;
    if (cfg->shard_reduce) {
        if (cfg->shard_reduce != 1 && cfg->shard_reduce != -1)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "shard_reduce %d: expected 1 (to the owners), -1 (all-reduce) or 0", cfg->shard_reduce);
        *mode = cfg->shard_reduce;
        return LS_OK;
    }
    const char *e = getenv("LOCKSTEP_SHARD_REDUCE");
    if (!e || !*e || !strcmp(e, "owner")) return LS_OK; /* empty: unset, as every variable */
    if (!strcmp(e, "all")) {
        *mode = -1;
        return LS_OK;
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "LOCKSTEP_SHARD_REDUCE='%s': expected owner (gradients reduced to the rank that steps them) or "
                    "all (all-reduced)",
                    e);
}

/* With a sharded optimizer and shard_reduce 1: *out = each model gradient's owner (a parameter the
 * optimizer does not hold: rank 0, whose copy of it is then the reduced one), and the list of the
 * gradients this rank owns; *out NULL otherwise. */
static ls_status reduce_owners(ls_trainer *t, int **out) {
    *out = NULL;
    int mode;
    LS_CHECK(shard_reduce_mode(&t->cfg, &mode));
    if (!t->owners || mode < 0) return LS_OK;
    int *to = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), sizeof *to);
    t->own_grads = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), sizeof *t->own_grads);
    if (!to || !t->own_grads) {
        free(to);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the gradients' owner list");
    }
    const int rank = ls_comm_rank(t->comm);
    for (int i = 0; i < t->n_params; i++) {
        const ls_tensor *p = ls_module_param(t->model, i);
        for (int j = 0; j < t->n_owned; j++)
            if (t->owned[j] == p) {
                to[i] = t->owners[j];
                break;
            }
        if (to[i] == rank && t->train_of[i] >= 0) t->own_grads[t->n_own_grads++] = t->grads[i];
    }
    t->n_clip = 0;
    for (int i = 0; i < t->n_params; i++)
        if (to[i] == rank && t->in_opt[i]) t->clip[t->n_clip++] = t->grads[i];
    t->reduce_owned = 1;
    *out = to;
    return LS_OK;
}

/* clip_grad_norm when each rank holds its own parameters' gradients only: the squares summed over
 * them, then over the ranks; each rank scales its own. The host reads the sum (one wait). */
static ls_status clip_owned(ls_trainer *t, double max_norm, double *norm) {
    double v[2] = {0, 0}; /* the sum of squares, and the ranks that saw inf/NaN */
    int bad = 0;
    LS_CHECK(ls_grads_sumsq(t->ctx, t->n_clip, t->clip, &v[0], &bad));
    v[1] = bad;
    LS_CHECK(ls_comm_allreduce_host(t->comm, v, 2, LS_F64, LS_REDUCE_SUM));
    double total = v[1] > 0 ? NAN : sqrt(v[0]); /* as ls_clip_grad_norm */
    if (norm) *norm = total;
    if (v[1] > 0) return LS_OK;
    double coef = max_norm / (total + 1e-6);
    for (int i = 0; i < t->n_clip && coef < 1; i++) {
        ls_tensor *g = t->clip[i];
        LS_CHECK(t->ctx->ops->scale(t->ctx->state, g->dtype, ls_tensor_numel(g), coef, g->data));
    }
    return LS_OK;
}

/* Every rank's Dropouts take rank 0's seeds, as the parameters take its values: with the masks
 * keyed to the samples (step_run), the ranks together draw what one process would. */
static ls_status broadcast_dropout_seeds(ls_comm *comm, ls_module *model) {
    int32_t n = ls_module_num_dropouts(model);
    /* allocated before the ranks compare notes, so that a rank without the memory fails them all
     * rather than leaving the others in the broadcast */
    uint64_t *seeds = n > 0 ? malloc((size_t)n * sizeof *seeds) : NULL;
    int32_t v[3] = {n, -n, n == 0 || seeds != NULL};
    ls_status s = ls_comm_allreduce_host(comm, v, 3, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && v[0] != -v[1])
        s = ls_error(LS_ERR_MISMATCH, "the ranks' models hold different numbers of Dropouts (%d to %d)", (int)v[0],
                     (int)-v[1]);
    if (s == LS_OK && !v[2])
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "%s no memory for its %d dropout seeds",
                     seeds ? "a rank had" : "this rank has", (int)n);
    if (s != LS_OK || n == 0) {
        free(seeds);
        return s;
    }
    for (int i = 0; i < n; i++) seeds[i] = *ls_module_dropout_seed(model, i);
    s = ls_comm_broadcast_host(comm, seeds, (int64_t)n * (int64_t)sizeof *seeds, LS_U8, 0);
    for (int i = 0; i < n && s == LS_OK; i++) *ls_module_dropout_seed(model, i) = seeds[i];
    free(seeds);
    return s;
}

/* The second half of check_settings: each layer of the model (the counts agree by then). */
static ls_status check_layers(ls_comm *comm, const ls_module *model, int nl) {
    char(*desc)[LS_LAYER_DESC_MAX] = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *desc);
    char(*names)[48] = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *names);
    ls_setting *set = malloc((size_t)(nl > 0 ? nl : 1) * sizeof *set);
    int32_t ok = desc && names && set;
    ls_status s = ls_comm_allreduce_host(comm, &ok, 1, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && !ok)
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "%s no memory to compare the model's layers",
                     desc && names && set ? "a rank had" : "this rank has");
    if (s == LS_OK) {
        ls_module_layers(model, desc, nl);
        for (int i = 0; i < nl; i++) {
            snprintf(names[i], sizeof names[i], "entry %d of the model's layers", i);
            set[i] = ls_setting_str(names[i], desc[i]);
        }
        s = ls_ddp_check_settings(comm, nl, set);
    }
    free(desc);
    free(names);
    free(set);
    return s;
}

/* Every rank must train with the same settings: a rank with another batch, schedule, precision or
 * optimizer would take other steps (or wait in a collective the others never reach), silently.
 * The trainer's config, the optimizer's, each parameter's weight decay and the model's layers,
 * compared with rank 0's (ls_ddp_check_settings). */
static ls_status check_settings(ls_comm *comm, ls_module *model, ls_optimizer *opt, const ls_train_config *cfg,
                                int shard_mode, const char *inject) {
    enum { N_FIXED = 24 };
    const int np = ls_module_num_params(model);
    ls_setting *set = malloc((size_t)(N_FIXED + 2 * np) * sizeof *set);
    char(*names)[128] = malloc((size_t)(np > 0 ? 2 * np : 1) * sizeof *names);
    int32_t ok = set && names;
    ls_status s = ls_comm_allreduce_host(comm, &ok, 1, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && !ok)
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "%s no memory to compare the training settings",
                     set && names ? "a rank had" : "this rank has");
    if (s != LS_OK) {
        free(set);
        free(names);
        return s;
    }
    const ls_optim_config oc = ls_optimizer_config(opt);
    int n = 0;
    set[n++] = ls_setting_num("the trainer's batch_per_rank", (double)cfg->batch_per_rank);
    set[n++] = ls_setting_num("the trainer's accum_steps", cfg->accum_steps);
    set[n++] = ls_setting_num("the trainer's lr.base_lr", cfg->lr.base_lr);
    set[n++] = ls_setting_num("the trainer's lr.min_lr", cfg->lr.min_lr);
    set[n++] = ls_setting_num("the trainer's lr.warmup_steps", (double)cfg->lr.warmup_steps);
    set[n++] = ls_setting_num("the trainer's lr.total_steps", (double)cfg->lr.total_steps);
    set[n++] = ls_setting_str("the trainer's lr.kind", ls_lr_kind_name(cfg->lr.kind));
    set[n++] = ls_setting_num("the trainer's clip_grad_norm", cfg->clip_grad_norm);
    set[n++] = ls_setting_str("the trainer's precision", ls_precision_name(cfg->precision));
    set[n++] = ls_setting_num("the trainer's label_smoothing", cfg->label_smoothing);
    set[n++] = ls_setting_num("the optimizer's sharding (shard_world, ls_optimizer_shard: 1 sharded, 0 not)",
                              ls_optimizer_owner(opt, 0) >= 0);
    set[n++] = ls_setting_str("the sharded optimizer's gradient reduction (shard_reduce, LOCKSTEP_SHARD_REDUCE)",
                              ls_optimizer_owner(opt, 0) < 0 ? "none (not sharded)"
                              : shard_mode > 0               ? "owner"
                                                             : "all");
    set[n++] = ls_setting_str("the optimizer's kind", oc.kind == LS_OPTIM_SGD ? "sgd" : "adamw");
    set[n++] = ls_setting_num("the optimizer's lr", oc.lr);
    set[n++] = ls_setting_num("the optimizer's weight_decay", oc.weight_decay);
    set[n++] = ls_setting_num("the optimizer's momentum", oc.momentum);
    set[n++] = ls_setting_num("the optimizer's dampening", oc.dampening);
    set[n++] = ls_setting_num("the optimizer's nesterov", oc.nesterov);
    set[n++] = ls_setting_num("the optimizer's beta1", oc.beta1);
    set[n++] = ls_setting_num("the optimizer's beta2", oc.beta2);
    set[n++] = ls_setting_num("the optimizer's eps", oc.eps);
    set[n++] = ls_setting_num("the optimizer's no_decay_1d", oc.no_decay_1d);
    /* a rank with the hook all-reduces a found-inf flag after every step: one without it did not
     * (fp32: the next collective failed, "MPI_ERR_TRUNCATE", or waited) */
    set[n++] = ls_setting_str("the injected inf gradient (LOCKSTEP_AMP_INJECT_INF)", inject);
    /* the layers: their count here, each after (the same parameters may hide another activation or
     * dropout; before the decays, whose names number the layers) */
    const int nl = ls_module_layers(model, NULL, 0);
    set[n++] = ls_setting_num("the model's number of layers (activations, Dropouts, branches included)", nl);
    /* each parameter: whether the optimizer updates it (one left out is frozen), and its decay
     * (the optimizer's own index: with a parameter frozen on one rank the decays were compared
     * one parameter apart, "nan on rank 1") */
    const int no = ls_optimizer_num_params(opt);
    for (int i = 0; i < np; i++) {
        const char *pn = ls_module_param_name(model, i);
        const ls_tensor *p = ls_module_param(model, i);
        int j = 0;
        while (j < no && ls_optimizer_param(opt, j, NULL) != p) j++;
        snprintf(names[2 * i], sizeof names[2 * i], "parameter %d (%s)", i, pn ? pn : "unnamed");
        set[n++] = ls_setting_str(names[2 * i], !ls_module_requires_grad(model, i) ? "frozen (requires no gradient)"
                                                : j < no                           ? "updated by the optimizer"
                                                                                   : "frozen (not in the optimizer)");
        snprintf(names[2 * i + 1], sizeof names[2 * i + 1], "the weight decay of parameter %d (%s)", i,
                 pn ? pn : "unnamed");
        set[n++] = ls_setting_num(names[2 * i + 1], j < no ? ls_optimizer_weight_decay(opt, j) : 0);
    }
    s = ls_ddp_check_settings(comm, n, set);
    free(set);
    free(names);
    return s == LS_OK ? check_layers(comm, model, nl) : s;
}

/* ls_trainer_create's checks of its own arguments, before any other rank is asked. */
static ls_status check_config(ls_ctx *ctx, ls_module *model, ls_optimizer *opt, const ls_train_config *cfg,
                              ls_trainer **out) {
    LS_CHECK_ARG(out && cfg && ctx && model && opt, "ls_trainer_create: %s is NULL",
                 !out     ? "out"
                 : !cfg   ? "the config"
                 : !ctx   ? "the context"
                 : !model ? "the model"
                          : "the optimizer");
    if (cfg->batch_per_rank < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "batch size is %lld; it must be >= 1", (long long)cfg->batch_per_rank);
    if (cfg->accum_steps < 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "accumulation steps is %d; it must be >= 1", cfg->accum_steps);
    /* their product bounds a step's samples, and sizes the host memory of a step's losses (8 bytes a
     * sample): at most 2^40 (no memory holds such a batch), so that no size computed from them wraps
     * (INT64_MAX accepted here became a 64-byte buffer that evaluation wrote past) */
    if (cfg->batch_per_rank > LS_MAX_STEP_SAMPLES / cfg->accum_steps)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "batch size %lld x %d accumulation steps is more than 2^40 samples a step",
                        (long long)cfg->batch_per_rank, cfg->accum_steps);
    /* the schedule sets the optimizer's lr at every step: a zeroed or garbage one would train on it */
    const ls_lr_schedule *lr = &cfg->lr;
    if (!(lr->base_lr >= 0) || !isfinite(lr->base_lr) || !(lr->min_lr >= 0) || !isfinite(lr->min_lr)) {
        const int base = !(lr->base_lr >= 0) || !isfinite(lr->base_lr);
        return ls_error(LS_ERR_INVALID_ARGUMENT, "learning-rate schedule: %s is %g; it must be finite and >= 0",
                        base ? "base_lr" : "min_lr", (double)(base ? lr->base_lr : lr->min_lr));
    }
    if (lr->warmup_steps < 0 || lr->total_steps < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "learning-rate schedule: %s is %lld; it must be >= 0",
                        lr->warmup_steps < 0 ? "warmup_steps" : "total_steps",
                        (long long)(lr->warmup_steps < 0 ? lr->warmup_steps : lr->total_steps));
    if (!ls_lr_kind_name(lr->kind))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "learning-rate schedule: kind %d is not LS_LR_COSINE, LS_LR_LINEAR or LS_LR_CONSTANT",
                        (int)lr->kind);
    /* as the examples' --min-lr: compared in float, as the schedule uses them */
    if (lr->min_lr > lr->base_lr)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "learning-rate schedule: min_lr %g is above base_lr %g: the schedule would rise to it, not "
                        "decay; set min_lr at most base_lr",
                        (double)lr->min_lr, (double)lr->base_lr);
    if (lr->kind == LS_LR_CONSTANT && lr->min_lr > 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "learning-rate schedule: min_lr %g with the constant schedule, which never decays toward it: "
                        "use LS_LR_COSINE or LS_LR_LINEAR, or min_lr 0",
                        (double)lr->min_lr);
    if (!(cfg->clip_grad_norm >= 0) || !isfinite(cfg->clip_grad_norm))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "clip_grad_norm %g must be finite and >= 0 (0: off)",
                        cfg->clip_grad_norm);
    if (cfg->totals != 0 && cfg->totals != 1)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "totals %d must be 0 or 1", cfg->totals);
    if (!(cfg->label_smoothing >= 0 && cfg->label_smoothing < 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "label_smoothing %g must be in [0, 1)", cfg->label_smoothing);
    if (cfg->precision != LS_PRECISION_FP32 && cfg->precision != LS_PRECISION_FP16 &&
        cfg->precision != LS_PRECISION_BF16)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "precision %d is not LS_PRECISION_FP32, _FP16 or _BF16",
                        (int)cfg->precision);
    return check_optimizer(model, opt);
}

/* The trainer's own state, made before any other rank is asked (the environment read too). */
static ls_status init_local(ls_trainer *t, ls_ctx *ctx, ls_comm *comm, ls_module *model, ls_optimizer *opt,
                            const ls_train_config *cfg, int *shard_mode) {
    t->ctx = ctx;
    t->comm = comm && ls_comm_world(comm) > 1 ? comm : NULL;
    t->model = model;
    t->dropouts = ls_module_num_dropouts(model) > 0;
    t->opt = opt;
    t->cfg = *cfg;
    t->n_params = ls_module_num_params(model);
    t->inject_step = -1;
    t->grads = calloc((size_t)t->n_params, sizeof *t->grads);
    if (!t->grads) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer");
    for (int i = 0; i < t->n_params; i++) t->grads[i] = ls_module_grad(model, i);
    t->train = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), sizeof *t->train);
    t->requires = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), 1);
    t->train_of = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), sizeof *t->train_of);
    if (!t->train || !t->requires || !t->train_of) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer");
    for (int i = 0; i < t->n_params; i++) {
        t->requires[i] = (unsigned char)ls_module_requires_grad(model, i);
        t->train_of[i] = t->requires[i] ? t->n_train : -1;
        if (t->requires[i]) t->train[t->n_train++] = t->grads[i];
    }
    t->clip = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), sizeof *t->clip);
    t->in_opt = calloc((size_t)(t->n_params > 0 ? t->n_params : 1), 1);
    if (!t->clip || !t->in_opt) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer");
    /* the optimizer's parameters are the model's (check_optimizer), usually in its order */
    for (int j = 0, last = -1; j < ls_optimizer_num_params(opt); j++) {
        const ls_tensor *p = ls_optimizer_param(opt, j, NULL);
        int i = last + 1 < t->n_params && ls_module_param(model, last + 1) == p ? last + 1 : 0;
        while (i < t->n_params && ls_module_param(model, i) != p) i++;
        if (i < t->n_params) t->in_opt[i] = 1;
        last = i;
    }
    for (int i = 0; i < t->n_params; i++)
        if (t->in_opt[i]) t->clip[t->n_clip++] = t->grads[i];
    LS_CHECK(ls_xent_create(ctx, &t->loss));
    LS_CHECK(ls_xent_set_label_smoothing(t->loss, cfg->label_smoothing));
    ls_loss_scaler_init(&t->scaler, cfg->precision == LS_PRECISION_FP16);
    LS_CHECK(env_auto_on_off("LOCKSTEP_DATA_ON_DEVICE", &t->data_mode));
    LS_CHECK(env_auto_on_off("LOCKSTEP_PREFETCH", &t->prefetch_mode));
    LS_CHECK(shard_reduce_mode(cfg, shard_mode)); /* a bad LOCKSTEP_SHARD_REDUCE is an error without sharding too */
    LS_CHECK(ls_dataset_gather_threads(&t->gather_threads));
    LS_CHECK(open_timeline(cfg, comm));
    const char *inj = getenv("LOCKSTEP_AMP_INJECT_INF");
    if (inj && *inj) {
        /* digits only, STEP >= 1 and RANK one of this run's: "3:2" on 2 ranks, "3:-1", "3x" or a step
         * past 2^63 were taken, and a test that set them injected nothing (or at another step) */
        const int world = comm ? ls_comm_world(comm) : 1;
        const char *p = inj;
        long long st, rk = -1;
        int ok = digits(&p, INT64_MAX, &st) && st >= 1;
        if (ok && *p == ':') {
            p++;
            if (!digits(&p, INT64_MAX, &rk)) ok = 0;
        }
        if (!ok || *p != '\0')
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "LOCKSTEP_AMP_INJECT_INF='%s' is not STEP[:RANK] (STEP from 1, as --metrics counts)", inj);
        if (rk >= world)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "LOCKSTEP_AMP_INJECT_INF='%s': rank %lld is not one of this run's %d (0 to %d)", inj, rk,
                            world, world - 1);
        t->inject_step = st;
        t->inject_rank = rk >= 0 ? (int)rk : world - 1;
    }
    return LS_OK;
}

ls_status ls_trainer_create(ls_ctx *ctx, ls_comm *comm, ls_module *model, ls_optimizer *opt, const ls_train_config *cfg,
                            ls_trainer **out) {
    if (out) *out = NULL;
    ls_trainer *t = NULL;
    int shard_mode = 0;
    ls_status s = check_config(ctx, model, opt, cfg, out);
    /* a config zeroed but for the batch (the optimizer config's lr not copied to lr.base_lr): every
     * step at lr 0, no error and no change to the weights. Said once, by rank 0 (not by trials). */
    if (s == LS_OK && cfg->lr.base_lr == 0 && cfg->lr.min_lr == 0 && ls_optimizer_config(opt).lr > 0 &&
        !cfg->no_timeline && (!comm || ls_comm_rank(comm) == 0))
        LS_LOG_W("the trainer's lr.base_lr is 0 (the optimizer's lr is %g, which the schedule replaces at every "
                 "step): every step leaves the weights as they are; set lr.base_lr, usually to the optimizer's lr",
                 (double)ls_optimizer_config(opt).lr);
    if (s == LS_OK && !(t = calloc(1, sizeof *t))) s = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the trainer");
    if (s == LS_OK) s = init_local(t, ctx, comm, model, opt, cfg, &shard_mode);
    /* agreed before the first collective: a rank that failed its own checks (an argument, the
     * environment) fails every rank, instead of leaving them in the model's check for good */
    s = ls_comm_agree(comm, s);
    if (s != LS_OK) goto fail;
    if (t->comm) {
        ls_tensor **params = malloc((size_t)t->n_params * sizeof *params);
        const char **names = malloc((size_t)t->n_params * sizeof *names);
        if (!params || !names) {
            free(params);
            free(names);
            s = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the parameter list");
            goto fail;
        }
        for (int i = 0; i < t->n_params; i++) {
            params[i] = ls_module_param(model, i);
            names[i] = ls_module_param_name(model, i);
        }
        s = ls_ddp_check_signature(t->comm, t->n_params, params, names);
        char inject[64] = "unset";
        if (t->inject_step >= 0)
            snprintf(inject, sizeof inject, "step %lld, rank %d", (long long)t->inject_step, t->inject_rank);
        if (s == LS_OK) s = check_settings(t->comm, model, opt, cfg, shard_mode, inject);
        if (s == LS_OK) s = ls_ddp_broadcast_params(t->comm, t->n_params, params);
        if (s == LS_OK) s = ls_cnn_broadcast_buffers(t->comm, model); /* DDP's broadcast_buffers */
        if (s == LS_OK) s = broadcast_dropout_seeds(t->comm, model);
        free(params);
        free(names);
        if (s != LS_OK) goto fail;
        LS_CHECK_GOTO(shard_optimizer(t), s, fail);
        int *to = NULL; /* each gradient's owner, when they are reduced to their owners */
        LS_CHECK_GOTO(reduce_owners(t, &to), s, fail);
        if (to) /* the owners of the gradients the reducer holds: the trained ones */
            for (int i = 0; i < t->n_params; i++)
                if (t->train_of[i] >= 0) to[t->train_of[i]] = to[i];
        /* frozen parameters' gradients in no bucket (every rank froze the same: check_settings) */
        if (t->n_train > 0)
            s = ls_reducer_create_to_owners(t->comm, ctx, t->n_train, t->train, to, &cfg->buckets, &t->reducer);
        free(to);
        if (s != LS_OK) goto fail;
        if (t->reducer) t->compress_f16 = ls_reducer_get_config(t->reducer).compress == LS_REDUCER_F16;
    } else {
        /* one rank has no reducer, but a bad LOCKSTEP_GRAD_COMPRESS or bucket size is an error here
         * too, not first on the day the job runs on two */
        ls_reducer_config rc;
        LS_CHECK_GOTO(ls_reducer_config_resolve(&cfg->buckets, &rc), s, fail);
    }
    if (!t->comm) LS_CHECK_GOTO(shard_optimizer(t), s, fail); /* sharded on one rank: an error */
    /* mixed precision's check (and an f16 exchange's, and the test hook's) stays on the device */
    if (cfg->precision != LS_PRECISION_FP32 || t->inject_step >= 0 || t->compress_f16)
        LS_CHECK_GOTO(ls_amp_state_create(ctx, &t->scaler, &t->amp), s, fail);
    model->trainers++; /* ls_checkpoint_sequential must not consume it while this trainer holds it */
    t->holds_model = 1;
    ctx->live_trainers++; /* ls_ctx_destroy refuses while it is alive */
    *out = t;
    return LS_OK;
fail:
    ls_trainer_destroy(t);
    return s;
}

const ls_reducer *ls_trainer_reducer(const ls_trainer *t) { return t ? t->reducer : NULL; }

int ls_trainer_shard_reduce(const ls_trainer *t) { return !t || !t->owners ? 0 : t->reduce_owned ? 1 : -1; }

int64_t ls_trainer_num_steps(const ls_trainer *t) { return t ? t->steps : 0; }

void ls_trainer_set_num_steps(ls_trainer *t, int64_t steps) {
    if (t) t->steps = steps < 0 ? 0 : steps; /* a negative step would make the warmup's lr negative */
}

void ls_trainer_set_schedule_step(ls_trainer *t, int64_t schedule_step) {
    if (t) t->lr_offset = (schedule_step < 0 ? 0 : schedule_step) - t->steps;
}

/* The device copy of data, made now if the policy keeps it on the device; NULL to gather on the
 * host. A failed allocation under auto falls back to the host (logged once per set). */
static ls_status device_data(ls_trainer *t, const ls_dataset *data, struct dev_data **out) {
    *out = NULL;
    if (t->data_mode == DATA_OFF || !t->ctx->ops->gather_rows) return LS_OK;
    if (data->id == 0) return LS_OK; /* a struct filled by hand: no identity to cache it by */
    if (data->bytes ? !t->ctx->ops->gather_rows_lut : !data->images) return LS_OK;
    if (t->data_mode == DATA_AUTO && t->ctx->device.type == LS_DEVICE_CPU) return LS_OK;
    for (int i = 0; i < 2; i++)
        if (t->dev[i].id == data->id && t->dev[i].n == data->n && t->dev[i].features == data->features) {
            t->dev[i].used = ++t->dev_clock;
            *out = &t->dev[i];
            return LS_OK;
        }
    for (int i = 0; i < 2; i++)
        if (t->refused[i] == data->id) return LS_OK; /* tried once: no allocation (and log) per step */
    /* A set evaluated, not trained on: under auto it stays on the host (a copy would hold device
     * memory that the training step's batch, --batch-size auto's too, was sized without: epoch 2's
     * step ran out of memory beside the test set's copy); under on its copy lives until the next
     * training step (an evaluation comes in pieces, the EMA's after the model's) */
    if (t->evaluating && data->id != t->train_id && t->data_mode == DATA_AUTO) return LS_OK;
    size_t ib = ls_dataset_sample_bytes(data), lb = (size_t)data->n * sizeof(int32_t);
    if (t->data_mode == DATA_AUTO) {
        ls_memory_stats ms;
        ls_allocator_stats(t->ctx->alloc, &ms);
        size_t most = (size_t)2 << 30;
        if (ms.cap_bytes && ms.cap_bytes / 4 < most) most = ms.cap_bytes / 4;
        if (ib + lb > most) return LS_OK;
    }
    struct dev_data *d = t->dev[0].used <= t->dev[1].used ? &t->dev[0] : &t->dev[1];
    /* a copy of this set's old contents (changed in place since: --augment's next epoch) goes first:
     * kept beside the new one it held the set's memory twice for the rest of the run */
    for (int i = 0; i < 2; i++)
        if (t->dev[i].id && t->dev[i].set == data) d = &t->dev[i];
    dev_data_free(t, d);
    /* the program's hint is the training step's (a smaller batch, bf16...): none of it makes the
     * data set fit */
    char hint[512];
    ls_allocator_get_oom_hint(t->ctx->alloc, hint, sizeof hint);
    ls_allocator_set_oom_hint(t->ctx->alloc, "LOCKSTEP_DATA_ON_DEVICE=on keeps the whole data set on the device: "
                                             "auto or off keeps it on the host, or use fewer samples");
    ls_status s = ls_alloc(t->ctx->alloc, ib ? ib : 1, "data set on the device (LOCKSTEP_DATA_ON_DEVICE)", &d->images);
    if (s == LS_OK) s = ls_alloc(t->ctx->alloc, lb ? lb : 1, "data set labels on the device", &d->labels);
    if (s == LS_OK && data->bytes)
        s = ls_alloc(t->ctx->alloc, sizeof data->lut, "data set byte values", (void **)&d->lut);
    ls_allocator_set_oom_hint(t->ctx->alloc, hint);
    const void *samples = data->bytes ? (const void *)data->bytes : (const void *)data->images;
    if (s == LS_OK && ib) s = ls_allocator_copy(t->ctx->alloc, d->images, 1, samples, 0, ib);
    if (s == LS_OK && lb) s = ls_allocator_copy(t->ctx->alloc, d->labels, 1, data->labels, 0, lb);
    if (s == LS_OK && d->lut) s = ls_allocator_copy(t->ctx->alloc, d->lut, 1, data->lut, 0, sizeof data->lut);
    if (s != LS_OK) {
        dev_data_free(t, d);
        if (t->data_mode == DATA_ON) return s;
        LS_LOG_W("keeping the data set on the host (%.1f MiB did not fit on the device: %s)",
                 (double)(ib + lb) / 1048576.0, ls_last_error());
        t->refused[t->n_refused++ % 2] = data->id;
        return LS_OK;
    }
    d->id = data->id;
    d->set = data;
    d->n = data->n;
    d->features = data->features;
    d->used = ++t->dev_clock;
    d->eval_only = t->evaluating && data->id != t->train_id;
    LS_LOG_D("data set %llu (%lld samples, %.1f MiB) copied to the device", (unsigned long long)data->id,
             (long long)data->n, (double)(ib + lb) / 1048576.0);
    *out = d;
    return LS_OK;
}

/* x[0..n) and y[0..n) = the samples idx[0..n) of d, gathered on the device into the current
 * slot's buffers. The indices go as a staged upload (pinned memory, the copy stream), not a
 * synchronous copy: the host does not wait for the device to take them, only, before rewriting
 * the slot's staged indices, for the slot's last copy (a step or more back, as slots alternate). */
static ls_status gather_on_device(ls_trainer *t, const ls_dataset *data, struct dev_data *d, const int64_t *idx,
                                  int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= data->n)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "sample index %lld is outside the data set of %lld samples",
                            (long long)idx[i], (long long)data->n);
    int slot = t->slot;
    struct stage *g = &t->st[slot];
    size_t bytes = (size_t)t->cap * sizeof(int64_t);
    if (!g->hidx)
        LS_CHECK(ls_allocator_host_alloc(t->ctx->alloc, bytes, "a batch's indices", &g->idx_pinned, (void **)&g->hidx));
    if (!g->didx) {
        LS_CHECK(ls_alloc(t->ctx->alloc, bytes, "batch indices", (void **)&g->didx));
        /* as in use_slot: the new buffer may reuse memory that queued compute work still reads */
        LS_CHECK(ls_allocator_release(t->ctx->alloc, slot));
    }
    LS_CHECK(ls_allocator_upload_wait(t->ctx->alloc, slot)); /* its last copy has read the staged indices */
    memcpy(g->hidx, idx, (size_t)n * sizeof *idx);
    LS_CHECK(ls_allocator_upload(t->ctx->alloc, slot, g->didx, g->hidx, (size_t)n * sizeof *idx));
    LS_CHECK(ls_allocator_upload_join(t->ctx->alloc, slot)); /* the gathers read them after the copy */
    const ls_ops *o = t->ctx->ops;
    if (d->lut)
        LS_CHECK(o->gather_rows_lut(t->ctx->state, n, data->features, d->images, g->didx, d->lut, t->x->data));
    else
        LS_CHECK(o->gather_rows(t->ctx->state, sizeof(float), n, data->features, d->images, g->didx, t->x->data));
    return o->gather_rows(t->ctx->state, sizeof(int32_t), n, 1, d->labels, g->didx, t->y->data);
}

/* A data set of bytes is staged as such (4x less to gather and copy than f32) and decoded on the
 * device, where the backend can: its 256 values, then the rows. */
#define LS_LUT_BYTES (256 * sizeof(float))
static int stages_bytes(const ls_trainer *t, const ls_dataset *data) {
    return data->bytes && t->ctx->ops->gather_rows_lut;
}

static size_t staging_image_bytes(const ls_trainer *t) {
    size_t f32 = (size_t)(t->cap * t->features) * sizeof(float), b = LS_LUT_BYTES + (size_t)(t->cap * t->features);
    return ((f32 > b ? f32 : b) + 63) / 64 * 64;
}

static size_t staging_bytes(const ls_trainer *t) { return staging_image_bytes(t) + (size_t)t->cap * sizeof(int32_t); }

/* Slot i's host staging: images, then labels, in one block. */
static void set_staging(ls_trainer *t, int i, void *mem, size_t bytes, int pinned) {
    struct stage *g = &t->st[i];
    g->mem = mem;
    g->bytes = bytes;
    g->pinned = pinned;
    g->hx = mem;
    g->hy = (int32_t *)((char *)mem + staging_image_bytes(t));
}

/* The host staging memory of slot i (pinned where the backend can), made on first use. */
static ls_status ensure_staging(ls_trainer *t, int i) {
    if (t->st[i].mem) return LS_OK;
    int pinned = 0;
    void *mem = NULL;
    LS_CHECK(ls_allocator_host_alloc(t->ctx->alloc, staging_bytes(t), "a batch's host staging", &pinned, &mem));
    set_staging(t, i, mem, staging_bytes(t), pinned);
    return LS_OK;
}

/* Room for n rows of features in the input buffers: the host path's staging here, a slot's
 * device buffers when first used (use_slot). After a failure (an out-of-memory trial of
 * --batch-size auto) the next call starts again from no buffers. */
static ls_status ensure_buffers(ls_trainer *t, int64_t n, int64_t features) {
    if (t->cap && n <= t->cap && t->features == features) return LS_OK;
    int64_t cap = n > t->cap ? n : t->cap;
    free_batch_buffers(t);
    t->cap = cap;
    t->features = features;
    if (uses_buffers(t)) return LS_OK;
    void *mem = malloc(staging_bytes(t) + 1);
    if (!mem) {
        t->cap = 0;
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for a batch of %lld", (long long)cap);
    }
    set_staging(t, 0, mem, staging_bytes(t) + 1, 0);
    return LS_OK;
}

/* Slot i's device buffers, made on first use; then x and y are the slot's first n rows. */
static ls_status use_slot(ls_trainer *t, int i, int64_t n) {
    struct stage *g = &t->st[i];
    if (!g->x || !g->y) {
        ls_tensor_destroy(g->x);
        ls_tensor_destroy(g->y);
        g->x = g->y = NULL;
        ls_status s =
            ls_tensor_create(t->ctx->alloc, LS_F32, 2, (int64_t[]){t->cap, t->features}, "input batch", &g->x);
        if (s == LS_OK) s = ls_tensor_create(t->ctx->alloc, LS_I32, 1, (int64_t[]){t->cap}, "label batch", &g->y);
        /* new buffers may reuse memory that compute work queued before now still reads: copies
         * into them wait for that work */
        if (s == LS_OK) s = ls_allocator_release(t->ctx->alloc, i);
        if (s != LS_OK) {
            ls_tensor_destroy(g->x);
            ls_tensor_destroy(g->y);
            g->x = g->y = NULL;
            return s;
        }
    }
    t->slot = i;
    t->x = g->x;
    t->y = g->y;
    t->x->shape[0] = n; /* the buffers hold cap rows; use the first n */
    t->y->shape[0] = n;
    return LS_OK;
}

/* Slot i's device buffer for staged bytes, and the row indices that decode them. */
static ls_status ensure_byte_buffers(ls_trainer *t, int i) {
    struct stage *g = &t->st[i];
    if (!g->xb) {
        LS_CHECK(
            ls_alloc(t->ctx->alloc, LS_LUT_BYTES + (size_t)(t->cap * t->features), "a staged batch of bytes", &g->xb));
        /* as in use_slot: the new buffer may reuse memory that queued compute work still reads */
        LS_CHECK(ls_allocator_release(t->ctx->alloc, i));
    }
    if (!t->iota) {
        int64_t *h = malloc((size_t)t->cap * sizeof *h);
        if (!h) return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for %lld row indices", (long long)t->cap);
        for (int64_t r = 0; r < t->cap; r++) h[r] = r;
        void *d = NULL;
        ls_status s = ls_alloc(t->ctx->alloc, (size_t)t->cap * sizeof *h, "row indices", &d);
        if (s == LS_OK) s = ls_allocator_copy(t->ctx->alloc, d, 1, h, 0, (size_t)t->cap * sizeof *h);
        free(h);
        if (s != LS_OK) {
            if (d) ls_free(t->ctx->alloc, d);
            return s;
        }
        t->iota = d;
    }
    return LS_OK;
}

/* After slot i's copies are joined to the compute stream: decode the bytes staged there into x. */
static ls_status decode_staged(ls_trainer *t, int i) {
    struct stage *g = &t->st[i];
    int64_t n = g->decode;
    if (!n) return LS_OK;
    g->decode = 0;
    return t->ctx->ops->gather_rows_lut(t->ctx->state, n, t->features, (const uint8_t *)g->xb + LS_LUT_BYTES, t->iota,
                                        g->xb, g->x->data);
}

/* Gather idx[0..n) of data on the host into slot i's staging memory and queue its copies to the
 * slot's device buffers (they overlap the compute stream on a GPU); a set of bytes goes as bytes,
 * decoded when the slot is used (decode_staged). */
static ls_status stage_upload(ls_trainer *t, int i, const ls_dataset *data, const int64_t *idx, int64_t n) {
    struct stage *g = &t->st[i];
    LS_CHECK(ensure_staging(t, i));
    LS_CHECK(ls_allocator_upload_wait(t->ctx->alloc, i)); /* its last copies have read the staging memory */
    g->decode = 0;
    if (stages_bytes(t, data)) {
        LS_CHECK(ensure_byte_buffers(t, i));
        uint8_t *hb = (uint8_t *)g->hx;
        memcpy(hb, data->lut, LS_LUT_BYTES);
        LS_CHECK(ls_dataset_gather_bytes(data, idx, n, hb + LS_LUT_BYTES, g->hy));
        LS_CHECK(ls_allocator_upload(t->ctx->alloc, i, g->xb, hb, LS_LUT_BYTES + (size_t)(n * data->features)));
        LS_CHECK(ls_allocator_upload(t->ctx->alloc, i, g->y->data, g->hy, (size_t)n * sizeof(int32_t)));
        g->decode = n;
        return LS_OK;
    }
    /* several threads: on a GPU host the cores are otherwise idle while the device computes */
    LS_CHECK(ls_dataset_gather_parallel(data, idx, n, g->hx, g->hy, t->gather_threads));
    LS_CHECK(ls_allocator_upload(t->ctx->alloc, i, g->x->data, g->hx, (size_t)(n * data->features) * sizeof(float)));
    return ls_allocator_upload(t->ctx->alloc, i, g->y->data, g->hy, (size_t)n * sizeof(int32_t));
}

/* *idx holds at least n indices (*cap of them). */
static ls_status grow_indices(int64_t **idx, int64_t *cap, int64_t n) {
    if (n <= *cap) return LS_OK;
    int64_t *p = realloc(*idx, (size_t)n * sizeof *p);
    if (!p) return ls_error(LS_ERR_OUT_OF_MEMORY, "no memory for %lld prefetch indices", (long long)n);
    *idx = p;
    *cap = n;
    return LS_OK;
}

/* Put the samples idx[0..n) into the input buffers. The first micro-batch of a step (first) takes
 * the batch prefetched into a slot when it is the same samples of the same data set; other loads
 * leave a prefetched batch where it is. */
static ls_status load_batch(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t n, int first) {
    struct dev_data *dd = NULL;
    t->classes = data->num_classes;
    LS_CHECK(device_data(t, data, &dd));
    LS_CHECK(ensure_buffers(t, n, data->features));
    if (!uses_buffers(t)) {
        struct stage *g = &t->st[0];
        LS_CHECK(ls_dataset_gather(data, idx, n, g->hx, g->hy));
        t->vx = ls_tensor_view(g->hx, LS_F32, ls_device_cpu(), 2, (int64_t[]){n, data->features});
        t->vy = ls_tensor_view(g->hy, LS_I32, ls_device_cpu(), 1, (int64_t[]){n});
        t->x = &t->vx;
        t->y = &t->vy;
        return LS_OK;
    }
    if (first && t->pf.valid) {
        t->pf.valid = 0;
        if (!dd && t->pf.id == data->id && t->pf.n == n && !memcmp(t->pf.idx, idx, (size_t)n * sizeof *idx)) {
            t->pf_hits++;
            LS_CHECK(use_slot(t, t->pf.slot, n));
            LS_CHECK(ls_allocator_upload_join(t->ctx->alloc, t->slot)); /* the model reads it after its copies */
            return decode_staged(t, t->slot);
        }
        t->pf_misses++;
    }
    /* the other slot than the last batch's (the host stages indices or a batch while the device
     * may still compute on it), unless a prefetched batch waits there */
    int i = t->pf.valid ? (t->pf.slot + 1) % LS_UPLOAD_SLOTS : (t->slot + 1) % LS_UPLOAD_SLOTS;
    if (dd) {
        LS_CHECK(use_slot(t, i, n));
        /* a prefetch that missed may still be copying into this slot on the copy stream */
        LS_CHECK(ls_allocator_upload_join(t->ctx->alloc, i));
        t->st[i].decode = 0;
        return gather_on_device(t, data, dd, idx, n); /* on the compute stream, after the slot's readers */
    }
    LS_CHECK(use_slot(t, i, n));
    LS_CHECK(stage_upload(t, i, data, idx, n));
    LS_CHECK(ls_allocator_upload_join(t->ctx->alloc, i));
    return decode_staged(t, i);
}

/* Called once the step's work is queued, when the step was given a hint: gather the hinted batch
 * into the other slot and queue its copies, so the host's gather and the copy overlap the
 * device's compute (the step that uses it joins the copies). */
static ls_status prefetch_next(ls_trainer *t, int hinted) {
    if (!hinted) return LS_OK;
    const ls_dataset *data = t->hint.data;
    int64_t n = t->hint.n;
    if (t->prefetch_mode == PF_OFF || !uses_buffers(t)) return LS_OK;
    if (t->prefetch_mode == PF_AUTO && t->ctx->device.type == LS_DEVICE_CPU) return LS_OK; /* nothing to overlap */
    struct dev_data *dd = NULL;
    LS_CHECK(device_data(t, data, &dd));
    if (dd) return LS_OK; /* gathered on the device, in stream order: nothing to copy */
    LS_CHECK(ensure_buffers(t, n, data->features));
    int i = (t->slot + 1) % LS_UPLOAD_SLOTS;
    LS_CHECK(grow_indices(&t->pf.idx, &t->pf.cap, n));
    if (t->pf.valid) t->pf_misses++; /* a step without samples left it unused */
    t->pf.valid = 0;
    LS_CHECK(use_slot(t, i, n));
    LS_CHECK(stage_upload(t, i, data, t->hint.idx, n));
    memcpy(t->pf.idx, t->hint.idx, (size_t)n * sizeof *t->pf.idx);
    t->pf.n = n;
    t->pf.id = data->id;
    t->pf.slot = i;
    t->pf.valid = 1;
    return LS_OK;
}

ls_status ls_trainer_prefetch(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count) {
    LS_CHECK_ARG(t, "ls_trainer_prefetch: the trainer is NULL");
    t->hint.set = 0;
    LS_CHECK_ARG(idx || !data || count <= 0, "ls_trainer_prefetch: idx is NULL");
    if (!data || count <= 0 || data->id == 0) return LS_OK; /* nothing to prefetch, or no identity to match */
    int64_t n = count < t->cfg.batch_per_rank ? count : t->cfg.batch_per_rank;
    for (int64_t i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= data->n)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "prefetch: sample index %lld is outside the data set of %lld samples", (long long)idx[i],
                            (long long)data->n);
    LS_CHECK(grow_indices(&t->hint.idx, &t->hint.cap, n));
    memcpy(t->hint.idx, idx, (size_t)n * sizeof *idx);
    t->hint.n = n;
    t->hint.data = data;
    t->hint.set = 1;
    return LS_OK;
}

void ls_trainer_prefetch_stats(const ls_trainer *t, int64_t *hits, int64_t *misses) {
    if (hits) *hits = t->pf_hits;
    if (misses) *misses = t->pf_misses;
}

/* The model's input: the batch itself, or its f16/bf16 cast under mixed precision. */
static ls_status model_input(ls_trainer *t, const ls_tensor **in) {
    ls_dtype lt = ls_precision_dtype(t->cfg.precision);
    if (lt == LS_F32) {
        *in = t->x;
        return LS_OK;
    }
    if (!t->xl || t->xl->shape[1] != t->x->shape[1] || t->xl->shape[0] < t->x->shape[0]) {
        ls_tensor_destroy(t->xl);
        t->xl = NULL;
        LS_CHECK(ls_tensor_create(t->ctx->alloc, lt, 2, (int64_t[]){t->cap, t->x->shape[1]},
                                  "low-precision input batch", &t->xl));
    }
    t->xl->shape[0] = t->x->shape[0];
    LS_CHECK(ls_op_convert(t->ctx, t->x, t->xl));
    *in = t->xl;
    return LS_OK;
}

ls_status ls_trainer_get_loss_scaler(ls_trainer *t, ls_loss_scaler *out) {
    LS_CHECK_ARG(t && out, "ls_trainer_get_loss_scaler: %s is NULL", !t ? "the trainer" : "out");
    if (t->amp) LS_CHECK(ls_amp_state_read(t->ctx, t->amp, &t->scaler));
    *out = t->scaler;
    return LS_OK;
}

ls_status ls_trainer_set_loss_scaler(ls_trainer *t, const ls_loss_scaler *in) {
    LS_CHECK_ARG(t && in, "ls_trainer_set_loss_scaler: %s is NULL", !t ? "the trainer" : "the scaler");
    LS_CHECK_ARG(in->enabled == t->scaler.enabled,
                 "ls_trainer_set_loss_scaler: loss scaling is %s in this trainer (%s)",
                 t->scaler.enabled ? "on" : "off", ls_precision_name(t->cfg.precision));
    /* the one value that is wrong, named (it listed every rule with every value) */
    /* the backward scales by it in f32, where a larger one is inf (every step would overflow) */
    LS_CHECK_ARG(isfinite(in->scale) && in->scale > 0 && in->scale <= FLT_MAX,
                 "ls_trainer_set_loss_scaler: scale is %g; it must be finite and > 0, at most f32's largest value "
                 "(%g)",
                 in->scale, (double)FLT_MAX);
    LS_CHECK_ARG(in->growth_factor > 1, "ls_trainer_set_loss_scaler: growth factor is %g; it must be > 1",
                 in->growth_factor);
    LS_CHECK_ARG(in->backoff_factor > 0 && in->backoff_factor < 1,
                 "ls_trainer_set_loss_scaler: backoff factor is %g; it must be in (0, 1)", in->backoff_factor);
    LS_CHECK_ARG(in->growth_interval >= 1, "ls_trainer_set_loss_scaler: growth interval is %lld; it must be >= 1",
                 (long long)in->growth_interval);
    LS_CHECK_ARG(in->growth_tracker >= 0 && in->skipped >= 0, "ls_trainer_set_loss_scaler: %s is %lld; it must be >= 0",
                 in->growth_tracker < 0 ? "growth tracker" : "skipped",
                 (long long)(in->growth_tracker < 0 ? in->growth_tracker : in->skipped));
    if (t->amp) LS_CHECK(ls_amp_state_write(t->ctx, t->amp, in));
    t->scaler = *in;
    return LS_OK;
}

/* Test hook: an inf in one gradient element on one rank, after the exchange. */
static ls_status inject_inf(ls_trainer *t) {
    int rank = t->comm ? ls_comm_rank(t->comm) : 0;
    if (t->steps + 1 != t->inject_step || rank != t->inject_rank) return LS_OK; /* the step being taken */
    float inf = 1.0f / 0.0f;
    /* reduced to their owners: one of this rank's own, the gradients it checks */
    ls_tensor *g = t->reduce_owned && t->n_own_grads > 0 ? t->own_grads[0] : t->n_train > 0 ? t->train[0] : NULL;
    if (!g) return LS_OK; /* every parameter frozen: no gradient to put it in */
    ls_tensor one = ls_tensor_view(&inf, LS_F32, ls_device_cpu(), 1, (int64_t[]){1});
    ls_tensor dst = ls_tensor_view(g->data, LS_F32, g->device, 1, (int64_t[]){1});
    LS_LOG_W("LOCKSTEP_AMP_INJECT_INF: an inf gradient on rank %d at step %lld", rank, (long long)t->steps + 1);
    return ls_tensor_copy(t->ctx->alloc, &dst, &one);
}

/* Adds the last micro-batch's (n samples) loss and correct count to st. */
static ls_status read_loss(ls_trainer *t, int64_t n, ls_step_stats *st) {
    double mean_loss;
    int64_t correct;
    LS_CHECK(ls_xent_read(t->loss, &mean_loss, &correct));
    st->loss_sum += mean_loss * (double)n;
    st->correct += correct;
    st->samples += n;
    return LS_OK;
}

/* The model gives a score per class of the data set: a narrower output failed in the loss on the
 * first label past it ("label 4 of sample 0 is outside [0, 3)"), naming neither. */
static ls_status check_classes(const ls_trainer *t, const ls_tensor *logits) {
    const int64_t width = logits->shape[1];
    if (logits->ndim == 2 && width < t->classes) /* other shapes: the loss says what it takes */
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the model's output has %lld value%s a sample but the data set has %d classes (labels 0 to "
                        "%d): its last layer needs %d outputs",
                        (long long)width, width == 1 ? "" : "s", (int)t->classes, (int)t->classes - 1, (int)t->classes);
    return LS_OK;
}

/* Forward and backward of the loaded micro-batch, its loss scaled by scale; the correct count
 * too when count (the caller reads the step's stats). */
static ls_status forward_backward(ls_trainer *t, double scale, const double *scale_num, int count) {
    LS_TL_T0(t0);
    const ls_tensor *in, *logits, *dlogits;
    LS_CHECK(model_input(t, &in));
    LS_CHECK(ls_module_forward(t->model, in, &logits));
    LS_CHECK(check_classes(t, logits));
    /* loss and count stay on the device until the work after them is queued: a GPU runs
     * forward, backward (and, on the last micro-batch, the optimizer) without a wait */
    LS_CHECK(ls_xent_forward(t->loss, logits, t->y, NULL));
    if (count) LS_CHECK(ls_xent_correct(t->loss, logits, t->y, NULL));
    LS_TL_SPAN(t0, "forward", "compute");
    LS_TL_T0(t1);
    LS_CHECK(ls_xent_backward_num(t->loss, scale, scale_num, &dlogits));
    ls_status s = ls_module_backward(t->model, dlogits, 0, NULL);
    LS_TL_SPAN(t1, "backward", "compute");
    return s;
}

#define LS_MODE_NAME 256 /* "the training mode of module K (KIND PATH) of the model" */

/* Walk m (inside root; off: its first parameter's index in root's list) and the modules inside it,
 * m first then each child's, depth first (ls_module_training_get's order, *k the index there):
 * returns a digest of the training modes of its Dropouts and BatchNorm2ds (no other kind's mode
 * changes its math). With set, also one setting for each of those (*ns of them so far), named
 * "the training mode of module 4 (BatchNorm2d layer1.0.bn1) of the model" (the path from its first
 * parameter's name). */
static uint64_t modes_walk(const ls_module *root, const ls_module *m, int off, int *k, int *ns, ls_setting *set,
                           char (*names)[LS_MODE_NAME]) {
    uint64_t h = 14695981039346656037ull;
    /* the kinds whose forward reads the mode: another one's mode (a Linear's: 0 when made, 1 after
     * ls_module_set_training(model, 1)) changes nothing */
    if (!strcmp(ls_module_kind(m), "Dropout") || !strcmp(ls_module_kind(m), "BatchNorm2d")) {
        h = (h ^ (uint64_t)(m->training != 0 ? 2 : 1)) * 1099511628211ull;
        if (set) {
            char path[LS_NAME_MAX + 1] = "";
            if (m->n_params > 0 && off < ls_module_num_params(root)) {
                snprintf(path, sizeof path, " %s", ls_module_param_name(root, off));
                char *dot = strrchr(path, '.');
                if (dot)
                    *dot = '\0';
                else
                    path[0] = '\0';
            }
            snprintf(names[*ns], sizeof names[*ns], "the training mode of module %d (%.32s%.130s) of the model", *k,
                     ls_module_kind(m), path);
            set[*ns] = ls_setting_str(names[*ns], m->training ? "train" : "eval");
        }
        (*ns)++;
    }
    (*k)++;
    for (int i = 0, o = off; i < m->n_children; i++) {
        const ls_module *c = m->children[i];
        if (m->child_first) o = off + m->child_first[i];
        const uint64_t hc = modes_walk(root, c, o, k, ns, set, names);
        h = (h ^ hc) * 1099511628211ull;
        if (!m->child_first) o += c->n_params;
    }
    return h;
}

/* A digest of the training modes of model's modules (modes_walk), 52 bits: exact as a double. */
static double modes_digest(const ls_module *model) {
    int k = 0, ns = 0;
    return (double)(modes_walk(model, model, 0, &k, &ns, NULL, NULL) >> 12);
}

/* Collective, where the ranks' training modes differ (check_counts): every rank's error names the
 * first module that differs and the rank. */
static ls_status check_modes(ls_trainer *t) {
    const int n = ls_module_training_get(t->model, NULL); /* at least those without children */
    ls_setting *set = malloc((size_t)n * sizeof *set);
    char(*names)[LS_MODE_NAME] = malloc((size_t)n * sizeof *names);
    int32_t ok = set && names;
    ls_status s = ls_comm_allreduce_host(t->comm, &ok, 1, LS_I32, LS_REDUCE_MIN);
    if (s == LS_OK && !ok)
        s = ls_error(LS_ERR_MISMATCH,
                     "ls_trainer_step: the ranks' models are in different training modes (%s no "
                     "memory to say which)",
                     set && names ? "a rank had" : "this rank has");
    if (s == LS_OK) {
        int k = 0, ns = 0;
        modes_walk(t->model, t->model, 0, &k, &ns, set, names);
        s = ls_ddp_check_settings(t->comm, ns, set);
    }
    free(set);
    free(names);
    if (s != LS_ERR_MISMATCH) return s;
    char msg[600];
    snprintf(msg, sizeof msg, "%s", ls_last_error());
    return ls_error(s,
                    "ls_trainer_step: %s: every rank must train in the same modes (ls_module_set_training), or they "
                    "train different models",
                    msg);
}

/* Several ranks, the trainer's first step: every rank's global_count must be the sum of the
 * ranks' counts (it divides the gradient: a wrong one scales every step's update). Checked once,
 * where every rank takes its first step together (a collective: every rank reaches the same
 * verdict); later steps' counts are the caller's to keep right. */
static ls_status check_counts(ls_trainer *t, int64_t count, int64_t global_count) {
    t->counts_checked = 1;
    /* with the models' training modes (check_modes), in the same all-reduce */
    const double modes = modes_digest(t->model);
    double sum = (double)count, ext[4] = {(double)global_count, -(double)global_count, modes, -modes};
    LS_CHECK(ls_comm_allreduce_host(t->comm, &sum, 1, LS_F64, LS_REDUCE_SUM));
    LS_CHECK(ls_comm_allreduce_host(t->comm, ext, 4, LS_F64, LS_REDUCE_MAX));
    if (ext[0] == sum && -ext[1] == sum) return ext[2] == -ext[3] ? LS_OK : check_modes(t);
    char g[64];
    if (ext[0] == -ext[1])
        snprintf(g, sizeof g, "%.0f", ext[0]);
    else
        snprintf(g, sizeof g, "from %.0f to %.0f", -ext[1], ext[0]);
    return ls_error(LS_ERR_INVALID_ARGUMENT,
                    "global_count must be the samples of the step on all ranks: the ranks' counts sum to %.0f, but "
                    "their global_count is %s (this rank: count %lld, global_count %lld)",
                    sum, g, (long long)count, (long long)global_count);
}

/* Micro-batches of b that count samples fill (they are filled in order: the first ones full). */
static int64_t micro_batches(int64_t count, int64_t b) { return count > 0 ? (count + b - 1) / b : 0; }

/* A model with SyncBatchNorms all-reduces their statistics in the forward and backward of every
 * micro-batch with samples: a rank whose micro-batch is empty where another's is not skips those
 * all-reduces, and the ranks' collectives no longer pair (MPI_ERR_TRUNCATE, a hang, or one sum
 * taken for another). Every rank learns every rank's count and all refuse the step together. */
static ls_status check_sync_bn_counts(ls_trainer *t, int64_t count) {
    const int world = ls_comm_world(t->comm), rank = ls_comm_rank(t->comm);
    const int64_t b = t->cfg.batch_per_rank;
    double *c = calloc((size_t)world, sizeof *c);
    if (!c) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the ranks' sample counts");
    c[rank] = (double)count;
    ls_status s = ls_comm_allreduce_host(t->comm, c, world, LS_F64, LS_REDUCE_SUM);
    int lo = 0, hi = 0; /* ranks with the fewest and the most micro-batches */
    for (int r = 1; s == LS_OK && r < world; r++) {
        if (micro_batches((int64_t)c[r], b) < micro_batches((int64_t)c[lo], b)) lo = r;
        if (micro_batches((int64_t)c[r], b) > micro_batches((int64_t)c[hi], b)) hi = r;
    }
    if (s == LS_OK && micro_batches((int64_t)c[lo], b) != micro_batches((int64_t)c[hi], b)) {
        const int64_t nl = (int64_t)c[lo], nh = (int64_t)c[hi], ml = micro_batches(nl, b);
        s = ls_error(
            LS_ERR_INVALID_ARGUMENT,
            "synchronized batch norm needs samples on every rank in the same micro-batches, but at step %lld "
            "rank %d has %lld sample%s (%lld micro-batch%s of %lld) and rank %d has %lld (%lld): rank %d's batch "
            "norms would skip all-reduces the others wait in. Give every rank samples in as many "
            "micro-batches: a sampler that pads or drops the rest (LS_SAMPLER_PAD, LS_SAMPLER_DROP_LAST), "
            "not LS_SAMPLER_EXACT's short shards",
            (long long)t->steps + 1, lo, (long long)nl, nl == 1 ? "" : "s", (long long)ml, ml == 1 ? "" : "es",
            (long long)b, hi, (long long)nh, (long long)micro_batches(nh, b), lo);
    }
    free(c);
    return s;
}

/* Every index of idx[lo..hi) a sample of data, else the error names the first bad one by its place in
 * the caller's idx (a micro-batch's or a chunk's gather would name its place there). */
static ls_status check_indices(const char *fn, const ls_dataset *data, const int64_t *idx, int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++)
        if (idx[i] < 0 || idx[i] >= data->n)
            return ls_error(LS_ERR_INVALID_ARGUMENT, "%s: idx[%lld] = %lld is outside the data set of %lld samples", fn,
                            (long long)i, (long long)idx[i], (long long)data->n);
    return LS_OK;
}

/* The parameters needing a gradient are those of ls_trainer_create: its reducer, clipping and
 * inf/NaN check were planned for them (a parameter frozen since would be stepped on a zero
 * gradient, one unfrozen since would train on this rank's gradient alone, accumulating). */
static ls_status check_requires(const ls_trainer *t) {
    for (int i = 0; i < t->n_params; i++)
        if (ls_module_requires_grad(t->model, i) != t->requires[i])
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "ls_trainer_step: the model's parameter %d (%s) was %s (ls_module_set_requires_grad) "
                            "after the trainer was made, whose gradient exchange, clipping and inf/NaN checks "
                            "cover the parameters that needed a gradient then: set the flags before "
                            "ls_trainer_create (a new trainer for new ones)",
                            i, ls_module_param_name(t->model, i), t->requires[i] ? "frozen" : "unfrozen");
    return LS_OK;
}

static ls_status step_run(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                          int64_t global_count, ls_step_stats *stats) {
    LS_CHECK_ARG(t && data && (idx || count <= 0), "ls_trainer_step: %s is NULL",
                 !t      ? "the trainer"
                 : !data ? "the data set"
                         : "idx");
    int64_t b = t->cfg.batch_per_rank;
    int accum = t->cfg.accum_steps;
    int hinted = t->hint.set; /* the hint is this step's alone, even if the step fails */
    t->hint.set = 0;
    t->train_id = data->id;
    /* an evaluation's copy of its set goes (the queued work that read it was waited for): training
     * is sized without it */
    for (int i = 0; i < 2; i++)
        if (t->dev[i].eval_only) {
            if (t->dev[i].id == data->id)
                t->dev[i].eval_only = 0; /* now trained on */
            else
                dev_data_free(t, &t->dev[i]);
        }
    if (count < 0)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "ls_trainer_step: count %lld is negative (0 or more samples)",
                        (long long)count);
    if (count > b * accum)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "step of %lld samples exceeds %d micro-batches of %lld",
                        (long long)count, accum, (long long)b);
    if (global_count < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "a step needs at least one sample");
    /* before any work: a bad index in a later micro-batch would fail the step half done */
    LS_CHECK(check_indices("ls_trainer_step", data, idx, 0, count));
    /* the gradient is divided by global_count: all ranks' samples, this rank's among them (on one
     * rank, exactly them) */
    if (global_count < count || (!t->comm && global_count != count))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "global_count %lld must be the samples of the step on all ranks: %s %lld, this rank's "
                        "count",
                        (long long)global_count, t->comm ? "at least" : "on one rank,", (long long)count);
    if (t->comm && !t->counts_checked) {
        if (ls_comm_world(t->comm) > 1)
            LS_CHECK(check_counts(t, count, global_count));
        else if (global_count != count)
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "global_count %lld must be the samples of the step on all ranks: on one rank, %lld, this "
                            "rank's count",
                            (long long)global_count, (long long)count);
    }
    /* a step short of every rank's full micro-batches may leave some rank's last ones empty */
    if (t->comm && global_count < (int64_t)ls_comm_world(t->comm) * b * accum && ls_cnn_num_synced(t->model) > 0)
        LS_CHECK(check_sync_bn_counts(t, count));
    if (!t->cfg.no_timeline) ls_timeline_step_begin(t->steps + 1); /* LOCKSTEP_TIMELINE_STEPS: recorded? */
    LS_TL_T0(t_step);
    ls_step_stats st;
    memset(&st, 0, sizeof st);
    st.global_samples = global_count;
    LS_CHECK(check_requires(t));
    /* with the reducer's bucket views, one memset a bucket (not one a gradient); a frozen
     * parameter's gradient is left as it is */
    LS_CHECK(t->reducer ? ls_reducer_zero_grads(t->reducer) : ls_op_zero_many(t->ctx, t->n_train, t->train));
    /* the parameters stay as they are until the optimizer: f16/bf16 weight copies are cast once
     * (on a GPU all at once, in multi-tensor launches) for every micro-batch and recomputation */
    LS_CHECK(ls_module_cache_weight_casts(t->model, 1));
    st.loss_scale = 1;
    /* the loss scale (fp16) is read by the loss backward on the device: loss scale / global_count */
    const double *scale_num = t->scaler.enabled ? t->amp + LS_AMP_SCALE : NULL;
    double scale = scale_num ? (double)global_count : 1.0 / (double)global_count;
    int64_t pending = 0;        /* samples of the last micro-batch whose loss and count are still to read */
    struct dslot *defer = NULL; /* totals without stats: the copies of the losses and counts */
    if (t->cfg.totals && !stats) {
        LS_CHECK(dslot_take(t, &defer));
        t->ds_open = 1;
    }
    for (int k = 0; k < accum; k++) {
        int last = k == accum - 1;
        int64_t lo = k * b, hi = lo + b < count ? lo + b : count;
        int64_t n = hi > lo ? hi - lo : 0;
        if (last && t->reducer) {
            LS_CHECK(ls_reducer_begin(t->reducer, 1.0));
            ls_module_set_grad_hook(t->model, reducer_hook, t);
        }
        if (n > 0) {
            LS_TL_T0(t_load);
            LS_CHECK(load_batch(t, data, idx + lo, n, k == 0));
            LS_TL_SPAN(t_load, "load batch", "data");
            /* dropout's masks: a function of (step, sample), whichever rank and micro-batch */
            if (t->dropouts) LS_CHECK(ls_module_key_dropout(t->model, (uint64_t)t->steps, idx + lo, n));
            ls_status s = forward_backward(t, scale, scale_num, stats != NULL || t->cfg.totals);
            if (t->dropouts) ls_module_key_dropout(t->model, 0, NULL, 0);
            /* the batch's last reader is queued, also when a failure cut the work short: later
             * copies into its slot wait for what was queued */
            if (uses_buffers(t)) {
                ls_status r = ls_allocator_release(t->ctx->alloc, t->slot);
                if (s == LS_OK) s = r;
            }
            LS_CHECK(s);
            /* without stats nothing is read (totals: copied to the host in the background): on a
             * GPU the step returns without waiting */
            if (defer) {
                struct dmb *mb = &defer->mb[defer->n_mb];
                char *mem = defer->mem;
                int32_t *correct = dslot_counts(t, defer);
                LS_CHECK(ls_xent_download(t->loss, t->ds_next, mem + (size_t)defer->n_mb * dslot_room(t),
                                          correct + defer->n_mb, &mb->dtype, &mb->count));
                mb->n = n;
                defer->n_mb++;
            } else if (stats && last)
                pending = n;
            else if (stats)
                LS_CHECK(read_loss(t, n, &st));
        }
        if (last && t->reducer) {
            ls_module_set_grad_hook(t->model, NULL, NULL);
            LS_TL_T0(t_wait);
            LS_CHECK(ls_reducer_finish(t->reducer)); /* grads never marked ready (no samples) count as ready */
            LS_TL_SPAN(t_wait, "gradient all-reduce wait", "comm");
        }
    }
    LS_CHECK(ls_module_cache_weight_casts(t->model, 0)); /* the optimizer changes the parameters */
    if (t->inject_step >= 0) LS_CHECK(inject_inf(t));
    /* fp16 gradient compression can overflow to inf in fp32 training too: checked the same way.
     * GradScaler: unscale (fp16), skip the step on every rank if any rank saw inf/NaN, update the
     * scale; all decided on the device, the host does not wait (amp.h) */
    if (t->amp) {
        LS_TL_T0(t_unscale);
        /* reduced to their owners, each rank checks (and unscales) its own: every gradient is
         * checked once, and the flag is combined over the ranks */
        LS_CHECK(ls_amp_step(&t->scaler, t->ctx, t->comm, t->reduce_owned ? t->n_own_grads : t->n_train,
                             t->reduce_owned ? t->own_grads : t->train, t->amp));
        LS_TL_SPAN(t_unscale, "unscale and inf check", "amp");
        if (defer) { /* the flag goes to the totals with the step's losses */
            LS_CHECK(ls_allocator_download(t->ctx->alloc, t->ds_next, dslot_flag(t, defer), t->amp + LS_AMP_FOUND,
                                           sizeof(double)));
            defer->flagged = 1;
        }
    }
    const int64_t at = t->steps + t->lr_offset;
    st.lr = ls_lr_at(&t->cfg.lr, at < 0 ? 0 : at);
    LS_TL_T0(t_opt);
    if (t->cfg.clip_grad_norm > 0 && t->reduce_owned)
        LS_CHECK(clip_owned(t, t->cfg.clip_grad_norm, stats ? &st.grad_norm : NULL));
    else if (t->cfg.clip_grad_norm > 0) /* on unscaled gradients; a flagged step's are left as they are */
        LS_CHECK(ls_clip_grad_norm(t->ctx, t->n_clip, t->clip, t->cfg.clip_grad_norm,
                                   stats ? &st.grad_norm : NULL)); /* the norm is read for stats only */
    if (t->amp)
        LS_CHECK(ls_optimizer_step_unless(t->opt, st.lr, t->amp + LS_AMP_FOUND));
    else
        LS_CHECK(ls_optimizer_step(t->opt, st.lr));
    LS_TL_SPAN(t_opt, "optimizer", "compute");
    if (t->owners) { /* a sharded optimizer stepped this rank's parameters: the others come from their owners */
        LS_TL_T0(t_bc);
        /* the ranks agree on the list at the first step (a small all-reduce), then not again */
        if (t->owned_agreed)
            LS_CHECK(ls_ddp_rebroadcast_owned(t->comm, t->n_owned, t->owned, t->owners, 1));
        else
            LS_CHECK(ls_ddp_broadcast_owned(t->comm, t->n_owned, t->owned, t->owners, 1));
        t->owned_agreed = 1;
        LS_TL_SPAN(t_bc, "parameter broadcast (sharded optimizer)", "comm");
    }
    LS_TL_T0(t_pf);
    ls_status pf = prefetch_next(t, hinted);
    LS_TL_SPAN(t_pf, "prefetch next batch", "data");
    if (pf != LS_OK) { /* an optimization: its failure costs the next step a load */
        if (!t->pf_warned)
            LS_LOG_W("prefetching the next batch failed (%s); loading batches when used", ls_last_error());
        t->pf_warned = 1;
        t->pf.valid = 0;
    }
    if (pending) {
        LS_TL_T0(t_read);
        LS_CHECK(read_loss(t, pending, &st));
        LS_TL_SPAN(t_read, "read loss (waits for the device)", "sync");
    }
    if (stats && t->amp) { /* the flag and the scale this step used, after the loss (no further wait) */
        double v[LS_AMP_CTL];
        LS_CHECK(ls_allocator_copy(t->ctx->alloc, v, 0, t->amp, 1, sizeof v));
        st.skipped = v[LS_AMP_FOUND] != 0;
        st.loss_scale = v[LS_AMP_LAST];
    }
    t->steps++;
    if (t->cfg.totals) {
        if (defer) {
            t->ds_next = (t->ds_next + 1) % LS_DOWNLOAD_SLOTS;
            t->ds_open = 0;
        } else { /* after the steps before it */
            LS_CHECK(totals_drain(t));
            t->totals.loss_sum += st.loss_sum;
            t->totals.correct += st.correct;
            t->totals.samples += st.samples;
        }
        t->totals.steps++;
        if (!defer) t->totals.skipped += st.skipped; /* else with the slot's copies */
    }
    if (t_step > 0) {
        char name[48];
        snprintf(name, sizeof name, "step %lld", (long long)t->steps);
        ls_timeline_span(name, "step", t_step, ls_timeline_now());
    }
    /* flushed: a run that dies keeps its steps up to the last one; after the window's last step
     * the file is closed */
    if (!t->cfg.no_timeline)
        ls_timeline_step_end(t->steps);
    else if (t_step > 0)
        ls_timeline_flush();
    if (stats) *stats = st;
    return LS_OK;
}

ls_status ls_trainer_step(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                          int64_t global_count, ls_step_stats *stats) {
    ls_status s = step_run(t, data, idx, count, global_count, stats);
    if (t && s != LS_OK) (void)ls_module_cache_weight_casts(t->model, 0); /* a step cut short */
    if (t && s != LS_OK && t->ds_open) { /* its micro-batches' copies count in no totals */
        struct dslot *d = &t->ds[t->ds_next];
        if (d->n_mb || d->flagged) (void)ls_allocator_download_wait(t->ctx->alloc, t->ds_next);
        d->n_mb = 0;
        d->flagged = 0;
        t->ds_open = 0;
    }
    return s;
}

/* evaluate: one chunk's copies in a download slot (n 0: none) */
struct eval_chunk {
    int64_t n, count; /* samples, and losses copied */
    ls_dtype dtype;
};

/* Waits for chunk q's copies in download slot `slot` and adds them to the sums; frees q. */
static ls_status eval_fold(ls_trainer *t, int slot, struct eval_chunk *q, double *loss_sum, int64_t *correct) {
    if (!q->n) return LS_OK;
    const int64_t n = q->n;
    q->n = 0;
    LS_CHECK(ls_allocator_download_wait(t->ctx->alloc, slot));
    const char *mem = t->ds[slot].mem;
    *loss_sum += ls_xent_mean(q->dtype, mem, q->count) * (double)n;
    *correct += *dslot_counts(t, &t->ds[slot]);
    return LS_OK;
}

ls_status ls_trainer_evaluate(ls_trainer *t, const ls_dataset *data, const int64_t *idx, int64_t count,
                              double *loss_sum, int64_t *correct) {
    LS_CHECK_ARG(t && data && loss_sum && correct, "ls_trainer_evaluate: %s is NULL",
                 !t          ? "the trainer"
                 : !data     ? "the data set"
                 : !loss_sum ? "loss_sum"
                             : "correct");
    LS_CHECK_ARG(count >= 0, "ls_trainer_evaluate: count %lld < 0", (long long)count);
    LS_CHECK_ARG(idx || count == 0, "ls_trainer_evaluate: idx is NULL");
    /* chunks of the training micro-batch: the input buffers (two slots where batches are staged)
     * never grow past what training and --batch-size auto's trials use */
    int64_t chunk = t->cfg.batch_per_rank;
    *loss_sum = 0;
    *correct = 0;
    LS_TL_T0(t_eval);
    /* Each chunk's per-sample losses and correct count are copied to the host in a download slot
     * (the two used in turn) without a wait; the host waits only for the chunk two back before it
     * reuses its slot, and adds the chunks up in order (the sums of reading each chunk's loss). The
     * slots' training copies go into the totals first. */
    LS_CHECK(totals_drain(t));
    struct eval_chunk q[LS_DOWNLOAD_SLOTS];
    memset(q, 0, sizeof q);
    ls_status s = LS_OK;
    int k = 0;
    /* the program's modes, put back after (a module it keeps in eval mode stays so) */
    unsigned char *modes = malloc((size_t)ls_module_training_get(t->model, NULL));
    if (!modes) return ls_error(LS_ERR_OUT_OF_MEMORY, "ls_trainer_evaluate: out of host memory");
    ls_module_training_get(t->model, modes);
    t->evaluating = 1;
    ls_module_set_training(t->model, 0);           /* dropout off */
    s = ls_module_cache_weight_casts(t->model, 1); /* f16/bf16 weight copies cast once for every chunk */
    if (s == LS_OK) s = ls_xent_set_label_smoothing(t->loss, 0.0); /* the plain cross-entropy */
    for (int64_t lo = 0; lo < count && s == LS_OK; lo += chunk, k++) {
        int64_t n = count - lo < chunk ? count - lo : chunk;
        const int slot = k % LS_DOWNLOAD_SLOTS;
        struct dslot *d = &t->ds[slot];
        s = eval_fold(t, slot, &q[slot], loss_sum, correct); /* the chunk LS_DOWNLOAD_SLOTS back */
        const ls_tensor *in, *logits;
        if (s == LS_OK) s = dslot_mem(t, d);
        if (s == LS_OK) s = check_indices("ls_trainer_evaluate", data, idx, lo, lo + n);
        if (s == LS_OK) s = load_batch(t, data, idx + lo, n, 0);
        if (s != LS_OK) break;
        s = model_input(t, &in);
        if (s == LS_OK) s = ls_module_forward(t->model, in, &logits);
        if (s == LS_OK) s = check_classes(t, logits);
        if (s == LS_OK) s = ls_xent_forward(t->loss, logits, t->y, NULL);
        if (s == LS_OK) s = ls_xent_correct(t->loss, logits, t->y, NULL);
        if (s == LS_OK) s = ls_xent_download(t->loss, slot, d->mem, dslot_counts(t, d), &q[slot].dtype, &q[slot].count);
        if (uses_buffers(t)) { /* also after a failure: what was queued still reads the batch */
            ls_status r = ls_allocator_release(t->ctx->alloc, t->slot);
            if (s == LS_OK) s = r;
        }
        if (s == LS_OK) q[slot].n = n;
    }
    /* the last chunks, oldest first; after a failure, still wait (no copy into reused memory) */
    for (int i = 0; i < LS_DOWNLOAD_SLOTS; i++) {
        ls_status w = eval_fold(t, (k + i) % LS_DOWNLOAD_SLOTS, &q[(k + i) % LS_DOWNLOAD_SLOTS], loss_sum, correct);
        if (s == LS_OK) s = w;
    }
    ls_module_cache_weight_casts(t->model, 0);
    ls_module_training_put(t->model, modes);
    free(modes);
    (void)ls_xent_set_label_smoothing(t->loss, t->cfg.label_smoothing); /* checked at create */
    t->evaluating = 0;
    LS_TL_SPAN(t_eval, "evaluate", "eval");
    return s;
}
