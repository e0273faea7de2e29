/* autobatch.c: the batch-size search (trials under a lowered cap, outcomes and peaks agreed
 * across ranks, doubling then bisection) and a trial that runs one ls_trainer step. */
#include "autobatch.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnn.h"
#include "log.h"
#include "reducer.h"

/* The memory this host gives a process: its RAM, or a cgroup v2 limit below it; 0 when unknown. */
static size_t host_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        unsigned long long max;
        if (fscanf(f, "%llu", &max) == 1 && max > 0 && (!total || max < total)) total = (size_t)max;
        fclose(f);
    }
    return total;
}

/* Run one trial at batch b; *fit and *peak agreed over ranks; this rank's out-of-memory message
 * into oom (at most oom_len; emptied when it fit on this rank). An error other than out of memory is agreed
 * too: every rank returns it (a rank whose trial failed so returned at once, and left the others
 * waiting in the agreement's all-reduce until LOCKSTEP_COMM_TIMEOUT). */
static ls_status trial_at(ls_allocator *alloc, ls_comm *comm, ls_batch_trial_fn trial, void *user, int64_t b, int *fit,
                          size_t *peak, char *oom, size_t oom_len) {
    ls_memory_stats st;
    ls_allocator_reset_peak(alloc);
    ls_status s = trial(user, b);
    const int several = comm && ls_comm_world(comm) > 1;
    if (s != LS_OK && s != LS_ERR_OUT_OF_MEMORY) {
        s = ls_error_context(s, "batch-size trial at %lld", (long long)b);
        if (!several) return s;
    }
    ls_allocator_stats(alloc, &st);
    LS_LOG_I("batch-size search: %lld per rank %s, peak %zu bytes", (long long)b,
             s == LS_OK                  ? "fits"
             : s == LS_ERR_OUT_OF_MEMORY ? "is out of memory"
                                         : "failed",
             st.peak_bytes);
    if (s == LS_ERR_OUT_OF_MEMORY) {
        snprintf(oom, oom_len, "%s", ls_last_error());
        ls_error_clear();
    } else if (s == LS_OK && oom_len) {
        /* fit here: an earlier trial's message (at a larger batch) is not what ran out at this one;
         * it was quoted as batch 1's failure where only another rank failed batch 1 */
        oom[0] = '\0';
    }
    /* fits (min), the peak and another error's status (max) */
    const int failed = s != LS_OK && s != LS_ERR_OUT_OF_MEMORY;
    double v[3] = {s == LS_OK ? 1.0 : 0.0, (double)st.peak_bytes, failed ? (double)s : 0.0};
    if (several) {
        char own[1024] = "";
        if (failed) snprintf(own, sizeof own, "%s", ls_last_error()); /* kept past the all-reduces */
        double mn = v[0];
        LS_CHECK(ls_comm_allreduce_host(comm, &mn, 1, LS_F64, LS_REDUCE_MIN));
        LS_CHECK(ls_comm_allreduce_host(comm, &v[1], 2, LS_F64, LS_REDUCE_MAX));
        v[0] = mn;
        if (failed) return ls_error(s, "%s", own);
        if (v[2] > 0.5)
            return ls_error((ls_status)(int)v[2],
                            "batch-size trial at %lld: it failed on another rank (%s, said there)", (long long)b,
                            ls_status_name((ls_status)(int)v[2]));
    }
    *fit = v[0] > 0.5;
    *peak = (size_t)v[1];
    return LS_OK;
}

static ls_status record(ls_batch_search_result *r, int64_t b, int fit, size_t peak) {
    if (r->trials >= LS_BATCH_SEARCH_MAX_TRIALS)
        return ls_error(LS_ERR_INTERNAL, "batch-size search: more than %d trials", LS_BATCH_SEARCH_MAX_TRIALS);
    r->tried[r->trials] = b;
    r->fit[r->trials] = fit;
    r->peak[r->trials] = peak;
    r->trials++;
    return LS_OK;
}

ls_status ls_batch_size_search(ls_allocator *alloc, ls_comm *comm, const ls_batch_search_config *cfg,
                               ls_batch_trial_fn trial, void *user, ls_batch_search_result *out) {
    LS_CHECK_ARG(alloc && cfg && trial && out, "ls_batch_size_search: %s is NULL",
                 !alloc   ? "the allocator"
                 : !cfg   ? "the configuration"
                 : !trial ? "the trial function"
                          : "out");
    memset(out, 0, sizeof *out);
    if (cfg->start < 1 || cfg->max < cfg->start || !(cfg->headroom >= 0 && cfg->headroom < 1))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "batch-size search: start %lld, max %lld and headroom %g need 1 <= start <= max and "
                        "0 <= headroom < 1",
                        (long long)cfg->start, (long long)cfg->max, cfg->headroom);
    ls_memory_stats st;
    ls_allocator_stats(alloc, &st);
    /* each rank trials under its own cap (they may differ: --memory-cap is per host); the one that
     * binds, the smallest, is reported (it was this rank's, beside peaks over every rank) */
    const size_t own_cap = st.cap_bytes;
    /* where this rank's cap comes from (--memory-cap, LOCKSTEP_MEMORY_LIMIT, ...): the errors below
     * name it, as the allocator's own do (the trials run under a lowered cap, which has no source) */
    char from[160], own_from[176] = "";
    ls_allocator_get_cap_from(alloc, from, sizeof from);
    if (from[0]) snprintf(own_from, sizeof own_from, " (%s)", from);
    out->cap_bytes = own_cap;
    out->cap_rank = -1;
    if (comm && ls_comm_world(comm) > 1) {
        double c[2] = {(double)own_cap, -(double)own_cap}; /* min, -max */
        LS_CHECK(ls_comm_allreduce_host(comm, c, 2, LS_F64, LS_REDUCE_MIN));
        out->cap_bytes = (size_t)c[0];
        int32_t who = (double)own_cap == c[0] ? ls_comm_rank(comm) : INT32_MAX;
        LS_CHECK(ls_comm_allreduce_host(comm, &who, 1, LS_I32, LS_REDUCE_MIN));
        if (c[0] != -c[1]) out->cap_rank = (int)who;
    }
    /* agreed: a rank without a cap fails every rank here (it left the others in the first trial's
     * all-reduce) */
    if (out->cap_bytes == 0) {
        char r[64] = "";
        if (own_cap > 0) snprintf(r, sizeof r, " (rank %d has none)", out->cap_rank);
        /* a device's cap: LOCKSTEP_MEMORY_LIMIT caps host memory only */
        const int host = ls_allocator_device(alloc).type == LS_DEVICE_CPU;
        return ls_error(
            LS_ERR_INVALID_ARGUMENT, "the batch-size search needs a memory cap to fit in: set --memory-cap or %s%s",
            host ? "LOCKSTEP_MEMORY_LIMIT (e.g. 8GiB)" : "LOCKSTEP_GPU_MEMORY=limit:SIZE (e.g. limit:8GiB)", r);
    }
    out->limit_bytes = (size_t)((double)out->cap_bytes * (1.0 - cfg->headroom));
    const size_t own_limit = (size_t)((double)own_cap * (1.0 - cfg->headroom));
    /* host memory: a cap the host cannot give is no cap to search under. Linux hands out memory it
     * does not have (overcommit), so a trial between the host's memory and such a cap did not fail
     * as out of memory: it swapped, or the kernel's OOM killer stopped the rank (LOCKSTEP_MEMORY_LIMIT
     * set for a larger machine). Agreed, as the cap is. */
    size_t host_share = 0;
    int local = 1;
    if (ls_allocator_device(alloc).type == LS_DEVICE_CPU) {
        if (comm && ls_comm_rank_info(comm) && ls_comm_rank_info(comm)->local_world > 1)
            local = ls_comm_rank_info(comm)->local_world;
        host_share = host_memory_bytes() / (size_t)local;
    }
    double beyond = host_share && own_cap > host_share ? 1.0 : 0.0;
    if (comm && ls_comm_world(comm) > 1) LS_CHECK(ls_comm_allreduce_host(comm, &beyond, 1, LS_F64, LS_REDUCE_MAX));
    if (beyond > 0.5) {
        char c[32], h[32], e[32], each[96] = "";
        if (!(host_share && own_cap > host_share))
            return ls_error(LS_ERR_INVALID_ARGUMENT,
                            "the batch-size search's cap is more than the memory of another rank's host: a trial "
                            "there could be stopped by the kernel's out-of-memory killer rather than fail; give a cap "
                            "within it");
        if (local > 1)
            snprintf(each, sizeof each, ", %s for each of the %d ranks on it", ls_memory_format(host_share, e, 32),
                     local);
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "the batch-size search's cap %s%s is more than this host's memory (%s%s): a trial could be "
                        "stopped by the kernel's out-of-memory killer rather than fail; give a cap within it",
                        ls_memory_format(own_cap, c, 32), own_from, ls_memory_format(host_share * (size_t)local, h, 32),
                        each);
    }
    /* what is held already (the model) past the trials' cap: every trial's message would say "the
     * cap is 2.20 MiB, 2.36 MiB is already in use"; agreed, as the trials' outcomes are */
    double over = st.live_bytes >= own_limit ? 1.0 : 0.0;
    if (comm && ls_comm_world(comm) > 1) LS_CHECK(ls_comm_allreduce_host(comm, &over, 1, LS_F64, LS_REDUCE_MAX));
    if (over > 0.5) {
        char a[32], c[32], l[32];
        if (st.live_bytes < own_limit)
            return ls_error(LS_ERR_OUT_OF_MEMORY,
                            "the batch-size search has no room: on another rank the model holds more than the "
                            "cap less %.0f%% headroom (a larger cap, or a smaller model)",
                            100 * cfg->headroom);
        return ls_error(LS_ERR_OUT_OF_MEMORY,
                        "the batch-size search has no room: the model already holds %s, more than the %s it trains "
                        "within (the cap %s%s less %.0f%% headroom): a larger cap, or a smaller model",
                        ls_memory_format(st.live_bytes, a, 32), ls_memory_format(own_limit, l, 32),
                        ls_memory_format(own_cap, c, 32), own_from, 100 * cfg->headroom);
    }
    ls_allocator_set_cap(alloc, own_limit);
    char oom[512] = "";
    ls_status s = LS_OK;
    int64_t lo = 0, hi = 0, b = cfg->start; /* lo: largest fit so far; hi: smallest failure (0: none) */
    size_t lo_peak = 0;
    /* double until a failure or the maximum */
    while (s == LS_OK) {
        int fit;
        size_t peak;
        s = trial_at(alloc, comm, trial, user, b, &fit, &peak, oom, sizeof oom);
        if (s == LS_OK) s = record(out, b, fit, peak);
        if (s != LS_OK) break;
        if (!fit) {
            hi = b;
            break;
        }
        lo = b;
        lo_peak = peak;
        if (b >= cfg->max) break;
        b = b > cfg->max / 2 ? cfg->max : 2 * b;
    }
    /* bisect between the last fit (or 0) and the first failure */
    while (s == LS_OK && hi && hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        int fit;
        size_t peak;
        s = trial_at(alloc, comm, trial, user, mid, &fit, &peak, oom, sizeof oom);
        if (s == LS_OK) s = record(out, mid, fit, peak);
        if (s != LS_OK) break;
        if (fit) {
            lo = mid;
            lo_peak = peak;
        } else {
            hi = mid;
        }
    }
    ls_allocator_set_cap(alloc, own_cap);
    ls_allocator_reset_peak(alloc);
    if (s != LS_OK) return s;
    if (lo == 0) { /* what ran out at batch 1 on this rank (the model itself, often): it said nothing more */
        char a[32], c[32], r[240];
        /* the binding cap's source is known on its rank only */
        const int mine = comm && ls_comm_rank(comm) == out->cap_rank && from[0];
        if (out->cap_rank >= 0)
            snprintf(r, sizeof r, " (rank %d's, the smallest%s%s)", out->cap_rank, mine ? ": " : "", mine ? from : "");
        else
            snprintf(r, sizeof r, "%s", own_from);
        return ls_error(LS_ERR_OUT_OF_MEMORY,
                        "not even a batch of 1 per rank trains within %s (the cap %s%s less "
                        "%.0f%% headroom): %s",
                        ls_memory_format(out->limit_bytes, a, 32), ls_memory_format(out->cap_bytes, c, 32), r,
                        100 * cfg->headroom, oom[0] ? oom : "it ran out of memory on another rank");
    }
    out->batch = lo;
    out->peak_bytes = lo_peak;
    return LS_OK;
}

/* Host copies of the model's buffers (BatchNorm running statistics), to undo a trial's update. */
static ls_status buffers_save(ls_ctx *ctx, ls_module *m, int n, void **saved, int *n_saved) {
    for (int i = 0; i < n; i++) {
        ls_tensor *b = ls_cnn_buffer(m, i, NULL, 0);
        saved[i] = malloc(ls_tensor_nbytes(b) + 1);
        if (!saved[i]) return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory to save the model's buffers");
        ls_tensor h = ls_tensor_view(saved[i], b->dtype, ls_device_cpu(), b->ndim, b->shape);
        LS_CHECK(ls_tensor_copy(ctx->alloc, &h, b));
        *n_saved = i + 1;
    }
    return LS_OK;
}

static ls_status buffers_restore(ls_ctx *ctx, ls_module *m, int n, void **saved) {
    for (int i = 0; i < n; i++) {
        ls_tensor *b = ls_cnn_buffer(m, i, NULL, 0);
        ls_tensor h = ls_tensor_view(saved[i], b->dtype, ls_device_cpu(), b->ndim, b->shape);
        LS_CHECK(ls_tensor_copy(ctx->alloc, b, &h));
    }
    return LS_OK;
}

/* What ls_reducer_create would allocate beyond these gradients: the fusion buffers, or as bucket
 * views their padding. */
static ls_status reserve_buckets(const ls_trainer_trial *t, int np, ls_tensor *const *g, void **out) {
    ls_reducer_config rc;
    LS_CHECK(ls_reducer_config_resolve(&t->train->buckets, &rc));
    size_t *nbytes = calloc((size_t)np + 1, sizeof *nbytes), total = 0;
    int *bucket_of = calloc((size_t)np + 1, sizeof *bucket_of);
    if (!nbytes || !bucket_of) {
        free(nbytes);
        free(bucket_of);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory to plan gradient buckets");
    }
    for (int i = 0; i < np; i++) nbytes[i] = ls_tensor_nbytes(g[i]);
    ls_reducer_plan_buckets(np, nbytes, rc.first_bucket_bytes, rc.bucket_bytes, bucket_of);
    total = ls_reducer_extra_bytes(np, nbytes, bucket_of, rc.bucket_view > 0, rc.compress > 0);
    free(nbytes);
    free(bucket_of);
    return total ? ls_alloc(t->ctx->alloc, total, "gradient buckets", out) : LS_OK;
}

ls_status ls_trainer_trial_step(void *user, int64_t b) {
    LS_CHECK_ARG(user, "ls_trainer_trial_step: the trial (user) is NULL");
    ls_trainer_trial *t = user;
    int np = ls_module_num_params(t->model), nb = ls_cnn_num_buffers(t->model), n_saved = 0;
    int rank = t->comm ? ls_comm_rank(t->comm) : 0, world = t->comm ? ls_comm_world(t->comm) : 1;
    ls_tensor **p = calloc((size_t)np + 1, sizeof *p), **g = calloc((size_t)np + 1, sizeof *g);
    void **saved = calloc((size_t)nb + 1, sizeof *saved);
    int64_t *idx = malloc((size_t)b * sizeof *idx);
    ls_optimizer *opt = NULL;
    ls_trainer *tr = NULL;
    void *reserved = NULL;
    char hint[512];
    int hint_saved = 0;
    ls_status s = LS_OK;
    if (!p || !g || !saved || !idx) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "no host memory for a batch-size trial");
        goto done;
    }
    int n_grad = 0; /* the parameters that need a gradient (a frozen one is in no bucket nor optimizer) */
    for (int i = 0; i < np; i++)
        if (ls_module_requires_grad(t->model, i)) {
            p[n_grad] = ls_module_param(t->model, i);
            g[n_grad++] = ls_module_grad(t->model, i);
        }
    for (int64_t i = 0; i < b; i++) idx[i] = (rank * b + i) % t->data->n;
    LS_CHECK_GOTO(buffers_save(t->ctx, t->model, nb, saved, &n_saved), s, done);
    ls_cnn_release_activations(t->model);
    /* until the trial's trainer: what is allocated does not depend on the batch, so the program's
     * hint for a step (a smaller batch, bf16, checkpointing) would not help (restored at done) */
    ls_allocator_get_oom_hint(t->ctx->alloc, hint, sizeof hint);
    hint_saved = 1;
    ls_allocator_set_oom_hint(t->ctx->alloc, "The optimizer's state and the gradient buckets do not fit beside the "
                                             "model, whatever the batch: a larger cap, or a smaller model");
    ls_train_config tc = *t->train;
    tc.batch_per_rank = b;
    tc.accum_steps = 1;
    tc.lr.base_lr = 0; /* the parameters must not move */
    tc.lr.min_lr = 0;
    tc.no_timeline = 1; /* a trial trainer has no communicator: it would open the timeline as rank 0 of 1 */
    /* The step runs without the communicator, so a rank that runs out of memory cannot leave the
     * others waiting in a collective; the gradient buckets the reducer would hold are reserved
     * instead, and ls_batch_size_search agrees on the outcome afterwards. */
    if (world > 1) LS_CHECK_GOTO(reserve_buckets(t, n_grad, g, &reserved), s, done);
    ls_cnn_sync_local(t->model, 1); /* nor its SyncBatchNorms (undone at done) */
    /* one rank steps it, without the communicator. A sharded optimizer's trial keeps the state of
     * this rank's share only, as the run will: the partition is read off a sharded optimizer (its
     * state is this share's too, freed before the trial's own), and the trial's optimizer, unsharded,
     * holds this rank's parameters only (the others are not stepped; lr is 0 anyway). */
    ls_optim_config oc = *t->optim;
    int n_opt = n_grad;
    if (oc.shard_world > 1) {
        LS_CHECK_GOTO(ls_optimizer_create(t->ctx, n_grad, p, g, &oc, &opt), s, done);
        n_opt = 0;
        for (int i = 0; i < n_grad; i++) /* in place: p and g keep this rank's own, in order */
            if (ls_optimizer_owner(opt, i) == oc.shard_rank) {
                p[n_opt] = p[i];
                g[n_opt++] = g[i];
            }
        ls_optimizer_destroy(opt);
        opt = NULL;
    }
    oc.shard_rank = oc.shard_world = 0;
    LS_CHECK_GOTO(ls_optimizer_create(t->ctx, n_opt, p, g, &oc, &opt), s, done);
    ls_allocator_set_oom_hint(t->ctx->alloc, hint);
    hint_saved = 0;
    LS_CHECK_GOTO(ls_trainer_create(t->ctx, NULL, t->model, opt, &tc, &tr), s, done);
    /* two steps: the second is the steady state, where the buffers of the previous step are still held
     * while the next one allocates its workspaces */
    for (int k = 0; k < 2 && s == LS_OK; k++) s = ls_trainer_step(tr, t->data, idx, b, b, NULL);
    /* and an evaluation at that batch, as after each epoch, beside the training's memory (its set's
     * copy with LOCKSTEP_DATA_ON_DEVICE=on: a batch that fit the steps ran out in the evaluation) */
    if (s == LS_OK && t->eval && t->eval->n > 0) {
        double loss;
        int64_t correct;
        for (int64_t i = 0; i < b; i++) idx[i] = (rank * b + i) % t->eval->n;
        ls_cnn_release_activations(t->model); /* as the examples' evaluations do */
        s = ls_trainer_evaluate(tr, t->eval, idx, b, &loss, &correct);
    }
done:
    if (hint_saved) ls_allocator_set_oom_hint(t->ctx->alloc, hint);
    ls_cnn_sync_local(t->model, 0);
    ls_free(t->ctx->alloc, reserved);
    ls_trainer_destroy(tr);
    ls_optimizer_destroy(opt);
    ls_cnn_release_activations(t->model);
    if (n_saved == nb && nb > 0) {
        ls_status r = buffers_restore(t->ctx, t->model, nb, saved);
        if (s == LS_OK) s = r;
    }
    for (int i = 0; saved && i < nb; i++) free(saved[i]);
    free(saved);
    free(p);
    free(g);
    free(idx);
    return s;
}
