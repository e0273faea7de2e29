/* optim.c: SGD and AdamW driving the backend's multi-tensor step entries, the learning-rate
 * schedule and gradient clipping. */
#include "optim.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct ls_optimizer {
    int holds; /* made: counted in its parameters' holders and the context's live_optimizers */
    ls_ctx *ctx;
    ls_optim_config cfg;
    int n;
    ls_dtype dtype;
    ls_tensor **p, **g, **m, **v;
    void **pp, **gp, **mp, **vp;
    int64_t *numel;
    float *wd; /* each parameter's weight decay */
    int need_m, need_v;
    /* sharded (ls_optimizer_shard): owner[i] is the rank that steps parameter i and keeps its state;
     * NULL: unsharded, every rank steps every parameter */
    int *owner;
    int rank, world;
    int held;                    /* ls_optimizer_hold_states(o, 1): others' states allocated too */
    void **sp, **sg, **sm, **sv; /* the step's lists: the parameters this rank steps */
    int64_t *sn;
    float *sw;
    int wd_mixed;    /* some differ from cfg.weight_decay: the steps pass wd */
    int64_t steps;   /* steps taken, unless only the device knows (COUNT_DEVICE) */
    double *ctl;     /* LS_OPTIM_CTL doubles of device memory: the count on the device (ops.h) */
    int count;       /* where the step count is current: COUNT_* */
    double host_ctl; /* the count read back or to write */
    /* SGD: the steps taken before its momentum (re)started (ls_optimizer_restart_momentum; else 0):
     * the step after them is a first step, and the device counts from them (ctl[0] = steps - it) */
    int64_t restart;
};

/* The step count is in steps and ctl[0] alike, in steps only (stepped on the host since), or in
 * ctl[0] only (counted on the device: steps may have been skipped there). */
enum { COUNT_BOTH, COUNT_HOST, COUNT_DEVICE };

ls_optim_config ls_optim_defaults(ls_optim_kind kind) {
    ls_optim_config c;
    memset(&c, 0, sizeof c);
    c.kind = kind;
    c.beta1 = 0.9f;
    c.beta2 = 0.999f;
    c.eps = 1e-8f;
    if (kind == LS_OPTIM_SGD) {
        c.lr = 0.1f;
        c.momentum = 0.9f;
    } else {
        c.lr = 1e-3f;
        c.weight_decay = 0.01f;
    }
    return c;
}

ls_status ls_optim_kind_parse(const char *s, ls_optim_kind *out) {
    LS_CHECK_ARG(out, "ls_optim_kind_parse: out is NULL");
    if (s && strcmp(s, "sgd") == 0) {
        *out = LS_OPTIM_SGD;
        return LS_OK;
    }
    if (s && strcmp(s, "adamw") == 0) {
        *out = LS_OPTIM_ADAMW;
        return LS_OK;
    }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer '%s' is not one of sgd, adamw", s ? s : "(null)");
}

void ls_optimizer_destroy(ls_optimizer *o) {
    if (!o) return;
    if (o->holds) {
        for (int i = 0; i < o->n; i++) o->p[i]->holders--;
        o->ctx->live_optimizers--;
    }
    if (o->ctl) ls_free(o->ctx->alloc, o->ctl);
    for (int i = 0; i < o->n; i++) {
        if (o->m) ls_tensor_destroy(o->m[i]);
        if (o->v) ls_tensor_destroy(o->v[i]);
    }
    free(o->p);
    free(o->g);
    free(o->m);
    free(o->v);
    free(o->pp);
    free(o->gp);
    free(o->mp);
    free(o->vp);
    free(o->numel);
    free(o->wd);
    free(o->owner);
    free(o->sp);
    free(o->sg);
    free(o->sm);
    free(o->sv);
    free(o->sn);
    free(o->sw);
    free(o);
}

/* Parameter i's state tensors (momentum / moments), zeroed, where the kind keeps them and they are not there yet. */
static ls_status state_alloc(ls_optimizer *o, int i) {
    ls_tensor *p = o->p[i];
    if (o->need_m && !o->m[i]) {
        LS_CHECK(ls_tensor_create(o->ctx->alloc, o->dtype, p->ndim, p->shape, "optimizer state", &o->m[i]));
        o->mp[i] = o->m[i]->data;
        LS_CHECK(ls_tensor_zero(o->m[i]));
    }
    if (o->need_v && !o->v[i]) {
        LS_CHECK(ls_tensor_create(o->ctx->alloc, o->dtype, p->ndim, p->shape, "optimizer state", &o->v[i]));
        o->vp[i] = o->v[i]->data;
        LS_CHECK(ls_tensor_zero(o->v[i]));
    }
    return LS_OK;
}

static void state_free(ls_optimizer *o, int i) {
    if (o->m) {
        ls_tensor_destroy(o->m[i]);
        o->m[i] = NULL;
        o->mp[i] = NULL;
    }
    if (o->v) {
        ls_tensor_destroy(o->v[i]);
        o->v[i] = NULL;
        o->vp[i] = NULL;
    }
}

static int mine(const ls_optimizer *o, int i) { return !o->owner || o->owner[i] == o->rank; }

ls_status ls_optimizer_create(ls_ctx *ctx, int n, ls_tensor *const *params, ls_tensor *const *grads,
                              const ls_optim_config *cfg, ls_optimizer **out) {
    char a[64], b[64];
    LS_CHECK_ARG(out && cfg && ctx, "ls_optimizer_create: %s is NULL",
                 !out   ? "out"
                 : !cfg ? "the config"
                        : "the context");
    *out = NULL;
    if (n < 1) return ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer: no parameters");
    LS_CHECK_ARG(params && grads, "optimizer: the %s list is NULL", !params ? "parameter" : "gradient");
    for (int i = 0; i < n; i++)
        LS_CHECK_ARG(params[i] && grads[i], "optimizer: %s %d is NULL", !params[i] ? "parameter" : "gradient", i);
    /* a tensor listed twice would be stepped twice a step (torch.optim refuses a parameter in two
     * groups for the same reason) */
    for (int i = 0; i < n; i++) {
        if (ls_tensor_numel(params[i]) == 0) continue; /* nothing to step twice */
        for (int j = 0; j < i; j++) {
            LS_CHECK_ARG(params[i]->data != params[j]->data,
                         "optimizer: parameters %d and %d are the same tensor; list each once", j, i);
            LS_CHECK_ARG(grads[i]->data != grads[j]->data,
                         "optimizer: gradients %d and %d are the same tensor; each parameter needs its own", j, i);
        }
    }
    /* an uninitialized config: its kind picks the update kernel */
    if (cfg->kind != LS_OPTIM_SGD && cfg->kind != LS_OPTIM_ADAMW)
        return ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer: kind %d is neither LS_OPTIM_SGD nor LS_OPTIM_ADAMW",
                        (int)cfg->kind);
    /* each hyperparameter by name, finite (a float overflowed to inf trained into NaN, or an inf eps
     * into updates of 0, without a word) and in its range: from 0 to max (below max where below) */
    const struct {
        const char *name;
        float v, max;
        int below;
        const char *range;
    } hp[] = {{"lr", cfg->lr, FLT_MAX, 0, "finite and >= 0"},
              {"weight_decay", cfg->weight_decay, FLT_MAX, 0, "finite and >= 0"},
              {"momentum", cfg->momentum, FLT_MAX, 0, "finite and >= 0"},
              {"dampening", cfg->dampening, 1, 0, "from 0 to 1"},
              {"beta1", cfg->beta1, 1, 1, "from 0 to below 1"},
              {"beta2", cfg->beta2, 1, 1, "from 0 to below 1"},
              {"eps", cfg->eps, FLT_MAX, 0, "finite and >= 0"}};
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++)
        if (!(hp[i].v >= 0 && (hp[i].below ? hp[i].v < hp[i].max : hp[i].v <= hp[i].max)))
            return ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer: %s %g must be %s", hp[i].name, (double)hp[i].v,
                            hp[i].range);
    /* AdamW divides by sqrt(v) + eps: with eps 0 an element whose gradients were all 0 steps by 0/0 = NaN */
    if (cfg->kind == LS_OPTIM_ADAMW && !(cfg->eps > 0))
        return ls_error(LS_ERR_INVALID_ARGUMENT,
                        "optimizer: AdamW's eps %g must be > 0 (with 0, a weight whose gradients are all 0 steps by "
                        "0/0 = NaN)",
                        (double)cfg->eps);
    if (cfg->shard_world < 0 || (cfg->shard_world > 1 && (cfg->shard_rank < 0 || cfg->shard_rank >= cfg->shard_world)))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer: shard_rank %d is not a rank of shard_world %d",
                        cfg->shard_rank, cfg->shard_world);
    if (cfg->nesterov && (cfg->momentum <= 0 || cfg->dampening != 0))
        return ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer: nesterov needs momentum > 0 and dampening 0");
    ls_optimizer *o = calloc(1, sizeof *o);
    if (!o) return ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the optimizer");
    o->ctx = ctx;
    o->cfg = *cfg;
    o->n = n;
    o->dtype = params[0]->dtype;
    int need_m = cfg->kind == LS_OPTIM_ADAMW || cfg->momentum > 0, need_v = cfg->kind == LS_OPTIM_ADAMW;
    size_t np = (size_t)n;
    o->p = calloc(np, sizeof *o->p);
    o->g = calloc(np, sizeof *o->g);
    o->pp = calloc(np, sizeof *o->pp);
    o->gp = calloc(np, sizeof *o->gp);
    o->numel = calloc(np, sizeof *o->numel);
    o->wd = calloc(np, sizeof *o->wd);
    o->sp = calloc(np, sizeof *o->sp);
    o->sg = calloc(np, sizeof *o->sg);
    o->sm = calloc(np, sizeof *o->sm);
    o->sv = calloc(np, sizeof *o->sv);
    o->sn = calloc(np, sizeof *o->sn);
    o->sw = calloc(np, sizeof *o->sw);
    o->need_m = need_m;
    o->need_v = need_v;
    o->world = 1;
    if (need_m) {
        o->m = calloc(np, sizeof *o->m);
        o->mp = calloc(np, sizeof *o->mp);
    }
    if (need_v) {
        o->v = calloc(np, sizeof *o->v);
        o->vp = calloc(np, sizeof *o->vp);
    }
    ls_status s = LS_OK;
    if (!o->p || !o->g || !o->pp || !o->gp || !o->numel || !o->wd || !o->sp || !o->sg || !o->sm || !o->sv || !o->sn ||
        !o->sw || (need_m && (!o->m || !o->mp)) || (need_v && (!o->v || !o->vp))) {
        s = ls_error(LS_ERR_OUT_OF_MEMORY, "cannot allocate the optimizer's lists");
        goto fail;
    }
    /* the device's step count, 0 (written now: a step counted there later need not wait to write it) */
    LS_CHECK_GOTO(ls_alloc(ctx->alloc, LS_OPTIM_CTL * sizeof(double), "optimizer step count", (void **)&o->ctl), s,
                  fail);
    LS_CHECK_GOTO(ls_allocator_set_zero(ctx->alloc, o->ctl, LS_OPTIM_CTL * sizeof(double)), s, fail);
    o->count = COUNT_BOTH;
    for (int i = 0; i < n; i++) {
        if (params[i]->dtype != o->dtype || grads[i]->dtype != o->dtype ||
            ls_tensor_numel(params[i]) != ls_tensor_numel(grads[i])) {
            s = ls_error(LS_ERR_INVALID_ARGUMENT, "optimizer: parameter %d is %s but its gradient is %s", i,
                         ls_tensor_describe(params[i], a, 64), ls_tensor_describe(grads[i], b, 64));
            goto fail;
        }
        o->p[i] = params[i];
        o->g[i] = grads[i];
        o->pp[i] = params[i]->data;
        o->gp[i] = grads[i]->data;
        o->numel[i] = ls_tensor_numel(params[i]);
        o->wd[i] = cfg->no_decay_1d && params[i]->ndim < 2 ? 0.0f : cfg->weight_decay;
        if (o->wd[i] != cfg->weight_decay) o->wd_mixed = 1;
    }
    /* sharded from the start: the other ranks' state is never allocated */
    if (cfg->shard_world > 1) LS_CHECK_GOTO(ls_optimizer_shard(o, cfg->shard_rank, cfg->shard_world), s, fail);
    for (int i = 0; i < n; i++)
        if (mine(o, i)) LS_CHECK_GOTO(state_alloc(o, i), s, fail);
    /* the parameters are held (ls_tensor_destroy and ls_module_destroy refuse to free them) and the
     * context counted (ls_ctx_destroy refuses) until this optimizer is destroyed */
    for (int i = 0; i < n; i++) params[i]->holders++;
    ctx->live_optimizers++;
    o->holds = 1;
    *out = o;
    return LS_OK;
fail:
    ls_optimizer_destroy(o);
    return s;
}

/* The step count from the device to the host (a wait on a GPU) or back. */
static ls_status count_to_host(ls_optimizer *o) {
    if (o->count != COUNT_DEVICE) return LS_OK;
    LS_CHECK(ls_allocator_copy(o->ctx->alloc, &o->host_ctl, 0, o->ctl, 1, sizeof(double)));
    o->steps = (int64_t)o->host_ctl + o->restart;
    o->count = COUNT_BOTH;
    return LS_OK;
}

static ls_status count_to_device(ls_optimizer *o) {
    if (o->count != COUNT_HOST) return LS_OK;
    o->host_ctl = (double)(o->steps - o->restart);
    LS_CHECK(ls_allocator_copy(o->ctx->alloc, o->ctl, 1, &o->host_ctl, 0, sizeof(double)));
    o->count = COUNT_BOTH;
    return LS_OK;
}

static ls_status step(ls_optimizer *o, float lr, int counted, const double *skip) {
    LS_CHECK_ARG(o, "ls_optimizer_step: the optimizer is NULL");
    LS_CHECK_ARG(lr >= 0 && isfinite(lr), "ls_optimizer_step: lr %g must be finite and >= 0", (double)lr);
    LS_CHECK(counted ? count_to_device(o) : count_to_host(o));
    double *ctl = counted ? o->ctl : NULL;
    const ls_ops *ops = o->ctx->ops;
    const float *wds = o->wd_mixed ? o->wd : NULL;
    /* the parameters this rank steps (all, unsharded), read afresh: the tensors' memory may have
     * moved since create (the reducer's gradients as bucket views) */
    int k = 0;
    for (int i = 0; i < o->n; i++) {
        o->pp[i] = o->p[i]->data;
        o->gp[i] = o->g[i]->data;
        if (!mine(o, i)) continue;
        o->sp[k] = o->pp[i];
        o->sg[k] = o->gp[i];
        o->sm[k] = o->m ? o->mp[i] : NULL;
        o->sv[k] = o->v ? o->vp[i] : NULL;
        o->sn[k] = o->numel[i];
        o->sw[k] = o->wd[i];
        k++;
    }
    if (wds) wds = o->sw;
    if (o->cfg.kind == LS_OPTIM_SGD) {
        ls_sgd_params hp = {lr,
                            o->cfg.momentum,
                            o->cfg.dampening,
                            o->cfg.weight_decay,
                            o->cfg.nesterov,
                            o->steps == o->restart,
                            ctl,
                            skip,
                            wds};
        LS_CHECK(ops->sgd_step(o->ctx->state, o->dtype, k, o->sp, o->sg, o->m ? o->sm : NULL, o->sn, &hp));
    } else {
        ls_adamw_params hp = {lr,           o->cfg.beta1, o->cfg.beta2, o->cfg.eps, o->cfg.weight_decay,
                              o->steps + 1, ctl,          skip,         wds};
        LS_CHECK(ops->adamw_step(o->ctx->state, o->dtype, k, o->sp, o->sg, o->sm, o->sv, o->sn, &hp));
    }
    if (counted)
        o->count = COUNT_DEVICE;
    else {
        o->steps++;
        o->count = COUNT_HOST;
    }
    return LS_OK;
}

ls_status ls_optimizer_step(ls_optimizer *o, float lr) { return step(o, lr, 0, NULL); }

ls_status ls_optimizer_step_unless(ls_optimizer *o, float lr, const double *skip) {
    LS_CHECK_ARG(!o || skip, "ls_optimizer_step_unless: the skip flag is NULL");
    return step(o, lr, 1, skip);
}

int ls_optimizer_num_params(const ls_optimizer *o) { return o ? o->n : 0; }

ls_status ls_optimizer_set_weight_decay(ls_optimizer *o, int i, float weight_decay) {
    LS_CHECK_ARG(o, "ls_optimizer_set_weight_decay: the optimizer is NULL");
    LS_CHECK_ARG(i >= 0 && i < o->n, "ls_optimizer_set_weight_decay: parameter %d is not in 0..%d", i, o->n - 1);
    LS_CHECK_ARG(isfinite(weight_decay) && weight_decay >= 0,
                 "ls_optimizer_set_weight_decay: weight decay %g for parameter %d must be finite and >= 0",
                 (double)weight_decay, i);
    o->wd[i] = weight_decay;
    o->wd_mixed = 0;
    for (int j = 0; j < o->n; j++)
        if (o->wd[j] != o->cfg.weight_decay) o->wd_mixed = 1;
    return LS_OK;
}

float ls_optimizer_weight_decay(const ls_optimizer *o, int i) { return o && i >= 0 && i < o->n ? o->wd[i] : NAN; }

ls_tensor *ls_optimizer_param(const ls_optimizer *o, int i, ls_tensor **grad) {
    if (!o || i < 0 || i >= o->n) return NULL;
    if (grad) *grad = o->g[i];
    return o->p[i];
}

ls_status ls_optimizer_get_num_steps(ls_optimizer *o, int64_t *steps) {
    LS_CHECK_ARG(o && steps, "ls_optimizer_get_num_steps: %s is NULL", !o ? "the optimizer" : "steps");
    LS_CHECK(count_to_host(o));
    *steps = o->steps;
    return LS_OK;
}

void ls_optimizer_set_num_steps(ls_optimizer *o, int64_t steps) {
    if (!o) return;
    if (steps < 0) { /* AdamW's bias correction at a step <= 0 made every weight NaN, silently */
        ls_error(LS_ERR_INVALID_ARGUMENT,
                 "ls_optimizer_set_num_steps: %lld steps is negative; the count is left at "
                 "its value",
                 (long long)steps);
        LS_LOG_E("%s", ls_last_error());
        return;
    }
    o->steps = steps;
    o->restart = 0;
    o->count = COUNT_HOST; /* written to the device by the next counted step */
}

ls_status ls_optimizer_restart_momentum(ls_optimizer *o) {
    LS_CHECK_ARG(o, "ls_optimizer_restart_momentum: the optimizer is NULL");
    LS_CHECK_ARG(o->cfg.kind == LS_OPTIM_SGD, "ls_optimizer_restart_momentum: the optimizer is not SGD");
    LS_CHECK(count_to_host(o));
    for (int i = 0; o->m && i < o->n; i++)
        if (o->m[i]) LS_CHECK(ls_tensor_zero(o->m[i]));
    o->restart = o->steps;
    o->count = COUNT_HOST; /* the device's count, from the restart, written by the next counted step */
    return LS_OK;
}

ls_tensor *ls_optimizer_state(ls_optimizer *o, int i, int slot) {
    if (!o || i < 0 || i >= o->n) return NULL;
    if (slot == 0) return o->m ? o->m[i] : NULL;
    if (slot == 1) return o->v ? o->v[i] : NULL;
    return NULL;
}

int ls_optimizer_num_state_slots(const ls_optimizer *o) { return o ? o->need_m + o->need_v : 0; }

/* ZeroRedundancyOptimizer's partition: largest parameters first (a stable sort: equal sizes in
 * list order), each to the rank with the fewest elements so far, the lowest such rank. */
ls_status ls_optimizer_shard(ls_optimizer *o, int rank, int world) {
    LS_CHECK_ARG(o, "ls_optimizer_shard: the optimizer is NULL");
    LS_CHECK_ARG(world >= 1 && rank >= 0 && rank < world, "ls_optimizer_shard: rank %d of %d ranks", rank, world);
    if (o->owner && o->world == world && o->rank == rank) return LS_OK;
    LS_CHECK_ARG(!o->owner, "ls_optimizer_shard: already sharded as rank %d of %d, not again as rank %d of %d", o->rank,
                 o->world, rank, world);
    LS_CHECK_ARG(!o->held, "ls_optimizer_shard: the optimizer holds every state (ls_optimizer_hold_states)");
    if (world == 1) return LS_OK;
    int *order = malloc((size_t)o->n * sizeof *order);
    int *owner = malloc((size_t)o->n * sizeof *owner);
    int64_t *load = calloc((size_t)world, sizeof *load);
    if (!order || !owner || !load) {
        free(order);
        free(owner);
        free(load);
        return ls_error(LS_ERR_OUT_OF_MEMORY, "ls_optimizer_shard: no memory for the partition");
    }
    for (int i = 0; i < o->n; i++) { /* insertion sort by size, descending: stable */
        int j = i;
        while (j > 0 && o->numel[order[j - 1]] < o->numel[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int k = 0; k < o->n; k++) {
        int best = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[best]) best = r;
        owner[order[k]] = best;
        load[best] += o->numel[order[k]];
    }
    free(order);
    free(load);
    o->owner = owner;
    o->rank = rank;
    o->world = world;
    /* every rank held the same state until now: the owner's copy is every copy */
    for (int i = 0; i < o->n; i++)
        if (!mine(o, i)) state_free(o, i);
    return LS_OK;
}

ls_optim_config ls_optimizer_config(const ls_optimizer *o) {
    ls_optim_config c;
    memset(&c, 0, sizeof c);
    return o ? o->cfg : c;
}

int ls_optimizer_owner(const ls_optimizer *o, int i) {
    if (!o || !o->owner || i < 0 || i >= o->n) return -1;
    return o->owner[i];
}

ls_status ls_optimizer_hold_states(ls_optimizer *o, int all) {
    LS_CHECK_ARG(o, "ls_optimizer_hold_states: the optimizer is NULL");
    if (!o->owner) return LS_OK;
    for (int i = 0; i < o->n; i++) {
        if (mine(o, i)) continue;
        if (!all) {
            state_free(o, i);
            continue;
        }
        ls_status s = state_alloc(o, i);
        if (s != LS_OK) {
            for (int j = 0; j <= i; j++)
                if (!mine(o, j)) state_free(o, j);
            return s;
        }
    }
    o->held = all != 0;
    return LS_OK;
}

static const char *const lr_kinds[] = {"cosine", "linear", "constant"};

ls_status ls_lr_kind_parse(const char *s, ls_lr_kind *out) {
    LS_CHECK_ARG(out, "ls_lr_kind_parse: out is NULL");
    for (int k = 0; k < 3; k++)
        if (s && strcmp(s, lr_kinds[k]) == 0) {
            *out = (ls_lr_kind)k;
            return LS_OK;
        }
    return ls_error(LS_ERR_INVALID_ARGUMENT, "learning-rate schedule '%s' is not one of cosine, linear, constant",
                    s ? s : "(null)");
}

const char *ls_lr_kind_name(ls_lr_kind k) { return (unsigned)k < 3 ? lr_kinds[k] : NULL; }

float ls_lr_at(const ls_lr_schedule *s, int64_t step) {
    if (!s) return NAN; /* an optimizer's step refuses it */
    /* before the first step there is no rate (a warmup's would be negative, a decay's above the peak),
     * and a kind not in the enum has no curve: NAN, refused by a step, as for NULL */
    if (step < 0 || (s->kind != LS_LR_COSINE && s->kind != LS_LR_LINEAR && s->kind != LS_LR_CONSTANT)) return NAN;
    if (s->warmup_steps > 0 && step < s->warmup_steps) return s->base_lr * (float)(step + 1) / (float)s->warmup_steps;
    if (s->total_steps <= s->warmup_steps || s->kind == LS_LR_CONSTANT) return s->base_lr;
    double t = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
    if (t > 1) t = 1;
    const double f = s->kind == LS_LR_LINEAR ? 1.0 - t : 0.5 * (1.0 + cos(M_PI * t));
    return s->min_lr + (s->base_lr - s->min_lr) * (float)f;
}

/* The multi-tensor ops take runs of up to RUN tensors of one dtype: the run starting at t[*i] into
 * x and n, *i moved past it; returns its length. */
enum { RUN = 64 };
static int next_run(int k, ls_tensor *const *t, int *i, void **x, int64_t *n) {
    int m = 0;
    for (ls_dtype dt = t[*i]->dtype; *i < k && m < RUN && t[*i]->dtype == dt; ++*i, m++) {
        x[m] = t[*i]->data;
        n[m] = ls_tensor_numel(t[*i]);
    }
    return m;
}

ls_status ls_grads_sumsq(ls_ctx *c, int k, ls_tensor *const *t, double *host_sumsq, int *host_nonfinite) {
    void *x[RUN];
    int64_t n[RUN];
    int bad = 0;
    LS_CHECK_ARG(c && host_sumsq && k >= 0 && (t || k == 0), "ls_grads_sumsq: %s",
                 !c            ? "the context is NULL"
                 : !host_sumsq ? "host_sumsq is NULL"
                 : k < 0       ? "the tensor count is negative"
                               : "the tensor list is NULL");
    for (int i = 0; i < k; i++) LS_CHECK_ARG(t[i], "ls_grads_sumsq: tensor %d is NULL", i);
    for (int i = 0; i < k;) {
        ls_dtype dt = t[i]->dtype;
        if (!c->ops->sumsq_many) {
            LS_CHECK(c->ops->sumsq(c->state, dt, ls_tensor_numel(t[i]), t[i]->data, host_sumsq, &bad));
            i++;
            continue;
        }
        int m = next_run(k, t, &i, x, n);
        LS_CHECK(c->ops->sumsq_many(c->state, dt, m, (const void *const *)x, n, host_sumsq, &bad));
    }
    if (host_nonfinite) *host_nonfinite |= bad;
    return LS_OK;
}

ls_status ls_grads_amp_check(ls_ctx *c, int k, ls_tensor *const *t, int unscale, double *ctl) {
    void *x[RUN];
    int64_t n[RUN];
    LS_CHECK_ARG(c && ctl && k >= 0 && (t || k == 0), "ls_grads_amp_check: %s",
                 !c      ? "the context is NULL"
                 : !ctl  ? "the control block is NULL"
                 : k < 0 ? "the tensor count is negative"
                         : "the tensor list is NULL");
    for (int i = 0; i < k; i++) LS_CHECK_ARG(t[i], "ls_grads_amp_check: tensor %d is NULL", i);
    if (k == 0) return c->ops->amp_check(c->state, LS_F32, 0, NULL, NULL, unscale, 0, ctl);
    for (int i = 0; i < k;) {
        int first = i;
        ls_dtype dt = t[i]->dtype;
        int m = next_run(k, t, &i, x, n);
        LS_CHECK(c->ops->amp_check(c->state, dt, m, x, n, unscale, first > 0, ctl));
    }
    return LS_OK;
}

/* ls_clip_grad_norm on a backend with clip ops: the sum, the coefficient and the scaling stay on
 * the device (runs of one dtype, as ls_grads_sumsq); the host waits only to read the norm. */
static ls_status clip_on_device(ls_ctx *c, int k, ls_tensor *const *t, double max_norm, double *norm) {
    void *x[RUN];
    int64_t n[RUN];
    if (k == 0) LS_CHECK(c->ops->clip_sumsq(c->state, LS_F32, 0, NULL, NULL, 0)); /* the sum is 0 */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && norm) LS_CHECK(c->ops->clip_norm(c->state, norm)); /* the norm before clipping */
        for (int i = 0; i < k;) {
            int first = i;
            ls_dtype dt = t[i]->dtype;
            int m = next_run(k, t, &i, x, n);
            if (pass == 0)
                LS_CHECK(c->ops->clip_sumsq(c->state, dt, m, (const void *const *)x, n, first > 0));
            else
                LS_CHECK(c->ops->clip_scale(c->state, dt, m, x, n, max_norm));
        }
    }
    return LS_OK;
}

ls_status ls_clip_grad_norm(ls_ctx *ctx, int n, ls_tensor *const *grads, double max_norm, double *norm) {
    LS_CHECK_ARG(ctx && (grads || n == 0), "ls_clip_grad_norm: %s is NULL", !ctx ? "ctx" : "grads");
    for (int i = 0; i < n; i++) LS_CHECK_ARG(grads[i], "ls_clip_grad_norm: gradient %d is NULL", i);
    LS_CHECK_ARG(max_norm >= 0, "ls_clip_grad_norm: max_norm %g must be >= 0 (0: measures the norm only)", max_norm);
    if (ctx->ops->clip_sumsq && ctx->ops->clip_norm && ctx->ops->clip_scale && max_norm > 0)
        return clip_on_device(ctx, n, grads, max_norm, norm);
    double sq = 0;
    int bad = 0;
    LS_CHECK(ls_grads_sumsq(ctx, n, grads, &sq, &bad));
    double total = bad ? NAN : sqrt(sq);
    if (norm) *norm = total;
    if (bad || !(max_norm > 0)) return LS_OK;
    double coef = max_norm / (total + 1e-6);
    if (coef < 1)
        for (int i = 0; i < n; i++)
            LS_CHECK(ctx->ops->scale(ctx->state, grads[i]->dtype, ls_tensor_numel(grads[i]), coef, grads[i]->data));
    return LS_OK;
}
