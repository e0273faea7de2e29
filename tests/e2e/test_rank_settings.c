/* test_rank_settings.c: ls_trainer_create compares the training settings across ranks. A rank
 * whose trainer or optimizer is configured otherwise (batch, accumulation, schedule, clipping,
 * precision, label smoothing, the optimizer's kind and hyperparameters, a parameter's own weight
 * decay, sharding and its reduction, its model's layers where the parameters agree: an activation,
 * a dropout, a convolution's stride, a batch norm's eps or synchronization, a pooling window)
 * makes EVERY rank's create fail with LS_ERR_MISMATCH naming the
 * setting and both values, instead of training apart or waiting in a collective the others never
 * reach; the ranks then agree again, and a trainer of equal settings trains; a first step whose
 * global_count is not the ranks' counts summed, or a module in another training mode (eval, train)
 * on one rank, fails on every rank. Run alone (every
 * check passes trivially) and under mpirun with 2 and 3 ranks (the last rank differs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "comm.h"
#include "data.h"
#include "ddp.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

static ls_ctx *X;
static ls_comm *C;
static int R, W;

typedef struct run {
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
} run;

/* The model and optimizer every rank builds alike: all changes the configs on every rank, last on
 * the last rank only (either may be NULL). */
typedef void (*tweak_fn)(ls_train_config *tc, ls_optim_config *oc, int *decay_param);

/* The model's build on every rank, and on the last (ReLU, no dropout, no activation checkpointing
 * unless set). */
typedef struct arch {
    ls_act act;
    float dropout;
    int segments;
} arch;
static arch all_arch, last_arch;
static int freeze_last; /* the last rank leaves the last parameter out of its optimizer (frozen) */

static ls_status make(tweak_fn all, tweak_fn last, run *r) {
    memset(r, 0, sizeof *r);
    int64_t sizes[3] = {12, 40, 10};
    const arch a = R == W - 1 ? last_arch : all_arch;
    LS_REQUIRE_OK(ls_mlp_create_dropout(X, LS_F32, 3, sizes, a.act, a.dropout, 77, &r->m));
    if (a.segments) LS_REQUIRE_OK(ls_checkpoint_sequential(r->m, a.segments, &r->m));
    ls_tensor *pa[4], *ga[4];
    for (int i = 0; i < 4; i++) {
        pa[i] = ls_module_param(r->m, i);
        ga[i] = ls_module_grad(r->m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_ADAMW);
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 16;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    tc.lr.warmup_steps = 2;
    tc.lr.total_steps = 10;
    int decay_param = -1;
    if (all) all(&tc, &oc, &decay_param);
    if (last && R == W - 1) last(&tc, &oc, &decay_param);
    if (oc.shard_world > 1) { /* sharded: over these ranks */
        oc.shard_rank = R;
        oc.shard_world = W;
    }
    LS_REQUIRE_OK(ls_optimizer_create(X, freeze_last && R == W - 1 ? 3 : 4, pa, ga, &oc, &r->o));
    if (decay_param >= 0) LS_REQUIRE_OK(ls_optimizer_set_weight_decay(r->o, decay_param, 0));
    return ls_trainer_create(X, C, r->m, r->o, &tc, &r->t);
}

/* A small CNN on 8 x 8 images whose parameters do not depend on what varies here: Reshape,
 * Conv2d(1 -> 4, 3 x 3), BatchNorm2d with a ReLU, a pooling window, GlobalAvgPool2d, Linear(4 -> 10). */
typedef struct cnn_arch {
    int stride, pool_kernel, sync;
    double eps;
} cnn_arch;
static const cnn_arch cnn_default = {1, 2, 0, 1e-5};

static ls_status make_cnn(cnn_arch a, run *r) {
    memset(r, 0, sizeof *r);
    ls_module *mods[6];
    ls_batchnorm_config bc = ls_batchnorm_defaults();
    bc.eps = a.eps;
    bc.relu = 1;
    bc.sync = a.sync ? C : NULL;
    LS_REQUIRE_OK(ls_reshape_create(X, 3, (int64_t[]){1, 8, 8}, &mods[0]));
    LS_REQUIRE_OK(ls_conv2d_create(X, LS_F32, 1, 4, 3, a.stride, 1, 1, 0, 5, "c", &mods[1]));
    LS_REQUIRE_OK(ls_batchnorm2d_create(X, LS_F32, 4, &bc, "bn", &mods[2]));
    LS_REQUIRE_OK(ls_pool2d_create(X, LS_POOL_MAX, a.pool_kernel, 2, a.pool_kernel / 2, &mods[3]));
    LS_REQUIRE_OK(ls_global_avgpool_create(X, &mods[4]));
    LS_REQUIRE_OK(ls_linear_create(X, LS_F32, 4, 10, 1, 6, "fc", &mods[5]));
    LS_REQUIRE_OK(ls_sequential_create(X, 6, mods, &r->m));
    const int np = ls_module_num_params(r->m);
    ls_tensor *pa[8], *ga[8];
    for (int i = 0; i < np; i++) {
        pa[i] = ls_module_param(r->m, i);
        ga[i] = ls_module_grad(r->m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    LS_REQUIRE_OK(ls_optimizer_create(X, np, pa, ga, &oc, &r->o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 16;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    tc.lr.total_steps = 10;
    return ls_trainer_create(X, C, r->m, r->o, &tc, &r->t);
}

static void drop(run *r) {
    ls_trainer_destroy(r->t);
    ls_optimizer_destroy(r->o);
    ls_module_destroy(r->m);
}

/* s and r from a create that must fail on every rank with fmt (%d: the differing rank), then r dropped. */
static void check_refused(ls_status s, run *r, const char *fmt) {
    char want[512];
    snprintf(want, sizeof want, fmt, W - 1);
    if (W == 1) {
        LS_EXPECT(s == LS_OK);
    } else {
        LS_EXPECT(s == LS_ERR_MISMATCH);
        LS_EXPECT(r->t == NULL);
        if (strcmp(ls_last_error(), want)) {
            fprintf(stderr, "rank %d: got      '%s'\n        expected '%s'\n", R, ls_last_error(), want);
            ls_test_failures++;
        }
    }
    drop(r);
    LS_REQUIRE_OK(ls_comm_barrier(C));
}

/* The trainer's create fails on every rank with fmt. */
static void expect(tweak_fn all, tweak_fn last, const char *fmt) {
    run r;
    ls_status s = make(all, last, &r);
    check_refused(s, &r, fmt);
}

/* The CNN's create fails on every rank with fmt when the last rank builds last. */
static void expect_cnn(cnn_arch last, const char *fmt) {
    run r;
    ls_status s = make_cnn(R == W - 1 ? last : cnn_default, &r);
    check_refused(s, &r, fmt);
}

static void batch(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->batch_per_rank = 8; }
static void accum(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->accum_steps = 2; }
static void total(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->lr.total_steps = 20; }
static void sched(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->lr.kind = LS_LR_LINEAR; }
static void clip(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->clip_grad_norm = 1; }
static void bf16(ls_train_config *tc, ls_optim_config *oc, int *d) {
    (void)oc, (void)d, tc->precision = LS_PRECISION_BF16;
}
static void smooth(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->label_smoothing = 0.1; }
static void olr(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)tc, (void)d, oc->lr = 2e-3f; }
static void beta2(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)tc, (void)d, oc->beta2 = 0.99f; }
static void sgd(ls_train_config *tc, ls_optim_config *oc, int *d) {
    (void)tc, (void)d;
    *oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc->lr = 1e-3f;
}
static void decay(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)tc, (void)oc, *d = 1; }
static void shard(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)tc, (void)d, oc->shard_world = 2; }
static void reduce_all(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->shard_reduce = -1; }
static void zero_batch(ls_train_config *tc, ls_optim_config *oc, int *d) { (void)oc, (void)d, tc->batch_per_rank = 0; }

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &X));
    LS_REQUIRE_OK(ls_comm_create(X, NULL, &C));
    R = ls_comm_rank(C);
    W = ls_comm_world(C);

    expect(NULL, batch, "the trainer's batch_per_rank is 8 on rank %d but 16 on rank 0");
    expect(NULL, accum, "the trainer's accum_steps is 2 on rank %d but 1 on rank 0");
    expect(NULL, total, "the trainer's lr.total_steps is 20 on rank %d but 10 on rank 0");
    expect(NULL, sched, "the trainer's lr.kind is 'linear' on rank %d but 'cosine' on rank 0");
    expect(NULL, clip, "the trainer's clip_grad_norm is 1 on rank %d but 0 on rank 0");
    expect(NULL, bf16, "the trainer's precision is 'bf16' on rank %d but 'fp32' on rank 0");
    expect(NULL, smooth, "the trainer's label_smoothing is 0.1 on rank %d but 0 on rank 0");
    expect(NULL, olr, "the optimizer's lr is 0.002 on rank %d but 0.001 on rank 0");
    expect(NULL, beta2, "the optimizer's beta2 is 0.99 on rank %d but 0.999 on rank 0");
    expect(NULL, sgd, "the optimizer's kind is 'sgd' on rank %d but 'adamw' on rank 0");
    expect(NULL, decay, "the weight decay of parameter 1 (0.bias) is 0 on rank %d but 0.01 on rank 0");
    /* a parameter frozen on one rank only (it said "the weight decay of parameter 3 is nan") */
    freeze_last = 1;
    expect(
        NULL, NULL,
        "parameter 3 (2.bias) is 'frozen (not in the optimizer)' on rank %d but 'updated by the optimizer' on rank 0");
    freeze_last = 0;
    expect(NULL, shard,
           "the optimizer's sharding (shard_world, ls_optimizer_shard: 1 sharded, 0 not) is 1 on rank %d but 0 on "
           "rank 0");
    /* sharded on every rank, the last all-reducing the gradients where the others reduce to owners */
    expect(shard, reduce_all,
           "the sharded optimizer's gradient reduction (shard_reduce, LOCKSTEP_SHARD_REDUCE) is 'all' on rank %d but "
           "'owner' on rank 0");

    /* the same parameters, other layers: an activation, a dropout, one more dropout */
    last_arch.act = LS_ACT_GELU;
    expect(NULL, NULL, "entry 1 of the model's layers is 'GELU' on rank %d but 'ReLU' on rank 0");
    all_arch.dropout = 0.25f, last_arch = all_arch, last_arch.dropout = 0.5f;
    expect(NULL, NULL, "entry 2 of the model's layers is 'Dropout(p=0.5)' on rank %d but 'Dropout(p=0.25)' on rank 0");
    all_arch.dropout = 0, last_arch.dropout = 0.25f;
    expect(NULL, NULL,
           "the model's number of layers (activations, Dropouts, branches included) is 4 on rank %d but 3 on "
           "rank 0");
    /* activation checkpointing on one rank only is the same math: the trainer is made */
    last_arch = all_arch, last_arch.segments = 2;
    {
        run rc;
        LS_REQUIRE_OK(make(NULL, NULL, &rc));
        drop(&rc);
    }
    last_arch = all_arch;

    /* a CNN's layers: what the shapes do not show (a stride, a batch norm's eps or synchronization
     * across the ranks, which would wait in an all-reduce the others never reach, a pooling window) */
    cnn_arch a = cnn_default;
    a.stride = 2;
    expect_cnn(a, "entry 1 of the model's layers is 'Conv2d(stride=2, padding=1, groups=1)' on rank %d but "
                  "'Conv2d(stride=1, padding=1, groups=1)' on rank 0");
    a = cnn_default, a.eps = 1e-3;
    expect_cnn(a, "entry 2 of the model's layers is 'BatchNorm2d(eps=0.001, momentum=0.1, relu)' on rank %d but "
                  "'BatchNorm2d(eps=1e-05, momentum=0.1, relu)' on rank 0");
    a = cnn_default, a.sync = 1;
    expect_cnn(a, "entry 2 of the model's layers is 'BatchNorm2d(eps=1e-05, momentum=0.1, relu, sync)' on rank %d "
                  "but 'BatchNorm2d(eps=1e-05, momentum=0.1, relu)' on rank 0");
    a = cnn_default, a.pool_kernel = 3;
    expect_cnn(a, "entry 3 of the model's layers is 'MaxPool2d(kernel_size=3, stride=2, padding=1)' on rank %d but "
                  "'MaxPool2d(kernel_size=2, stride=2, padding=1)' on rank 0");
    {
        run rc;
        LS_REQUIRE_OK(make_cnn(cnn_default, &rc));
        drop(&rc);
    }

    /* equal settings: the trainer is made and takes a step */
    run r;
    LS_REQUIRE_OK(make(NULL, NULL, &r));
    int32_t y[64];
    float *x = mlp_points(64, 12, 5, y);
    ls_dataset *d = NULL;
    LS_REQUIRE_OK(ls_dataset_from_arrays(64, 12, 10, x, y, &d));
    int64_t idx[16];
    for (int i = 0; i < 16; i++) idx[i] = (R * 16 + i) % 64;
    ls_step_stats st;
    LS_REQUIRE_OK(ls_trainer_step(r.t, d, idx, 16, 16 * W, &st));
    LS_EXPECT(st.samples == 16);
    LS_EXPECT(st.loss_sum > 0 && st.loss_sum < 16 * 10.0);
    drop(&r);

    /* a global_count that is not the sum of the ranks' counts (it divides the gradient: a wrong
     * one scaled every update, silently) fails every rank's first step, naming both; on one rank
     * it must be the count */
    const int64_t wrong[2] = {16, 16 * W + 1}; /* every rank's count 16: the sum is 16 W */
    for (int k = 0; k < 2; k++) {
        LS_REQUIRE_OK(make(NULL, NULL, &r));
        int64_t g = W > 1 ? wrong[k] : 17;
        char want[256];
        if (W > 1)
            snprintf(want, sizeof want,
                     "global_count must be the samples of the step on all ranks: the ranks' counts sum to %d, but "
                     "their global_count is %lld (this rank: count 16, global_count %lld)",
                     16 * W, (long long)g, (long long)g);
        else
            snprintf(want, sizeof want, "global_count 17 must be the samples of the step on all ranks: on one rank");
        LS_EXPECT_ERR(ls_trainer_step(r.t, d, idx, 16, g, &st), LS_ERR_INVALID_ARGUMENT, want);
        drop(&r);
    }
    /* a module in another training mode on the last rank (a Dropout, or the whole model, in eval
     * mode there: the ranks trained different models, silently) fails every rank's first step,
     * naming the module and the rank; compared in the all-reduce of the first step's counts */
    for (int k = 0; k < 2; k++) {
        all_arch.dropout = last_arch.dropout = 0.5f;
        LS_REQUIRE_OK(make(NULL, NULL, &r));
        all_arch.dropout = last_arch.dropout = 0;
        ls_module *drop_m = ls_module_child(r.m, 2); /* Linear, ReLU, Dropout, Linear */
        LS_REQUIRE(!strcmp(ls_module_kind(drop_m), "Dropout"));
        if (R == W - 1) ls_module_set_training(k ? r.m : drop_m, 0);
        ls_status s = ls_trainer_step(r.t, d, idx, 16, 16 * W, &st);
        char want[400];
        snprintf(want, sizeof want,
                 "ls_trainer_step: the training mode of module %s of the model is 'eval' on rank %d but 'train' on "
                 "rank 0: every rank must train in the same modes (ls_module_set_training), or they train "
                 "different models",
                 "3 (Dropout)", W - 1); /* only a Dropout's or a batch norm's mode is compared */
        if (W == 1) {
            LS_EXPECT(s == LS_OK);
        } else {
            LS_EXPECT(s == LS_ERR_MISMATCH);
            if (strcmp(ls_last_error(), want)) {
                fprintf(stderr, "rank %d: got      '%s'\n        expected '%s'\n", R, ls_last_error(), want);
                ls_test_failures++;
            }
        }
        drop(&r);
        LS_REQUIRE_OK(ls_comm_barrier(C));
    }
    if (W > 1) { /* global_count unequal over the ranks: the range is named */
        LS_REQUIRE_OK(make(NULL, NULL, &r));
        char want[96];
        snprintf(want, sizeof want, "their global_count is from %d to %d", 16 * W, 16 * W + 1);
        LS_EXPECT_ERR(ls_trainer_step(r.t, d, idx, 16, 16 * W + (R == W - 1), &st), LS_ERR_INVALID_ARGUMENT, want);
        drop(&r);
    }
    ls_dataset_destroy(d);
    free(x);

    /* a rank that fails its own checks (an argument, the environment) fails every rank's create, the
     * others with its message and rank: they waited for good in the model's check */
    {
        ls_status s = make(NULL, zero_batch, &r);
        char want[160];
        snprintf(want, sizeof want, "batch size is 0; it must be >= 1%s", R == W - 1 ? "" : W > 1 ? " (on rank " : "");
        LS_EXPECT(s == LS_ERR_INVALID_ARGUMENT && r.t == NULL);
        LS_EXPECT(strncmp(ls_last_error(), want, strlen(want)) == 0);
        if (strncmp(ls_last_error(), want, strlen(want)) != 0) fprintf(stderr, "rank %d: '%s'\n", R, ls_last_error());
        drop(&r);
        /* ls_ddp_check_settings with no settings on the last rank: the same */
        ls_setting one = ls_setting_num("n", 1);
        LS_EXPECT_ERR(ls_ddp_check_settings(C, 1, R == W - 1 ? NULL : &one), LS_ERR_INVALID_ARGUMENT,
                      "ls_ddp_check_settings: 1 settings at");
        LS_REQUIRE_OK(ls_ddp_check_settings(C, 1, &one)); /* and the ranks meet again */
    }

    int32_t fails = ls_test_failures;
    LS_REQUIRE_OK(ls_comm_allreduce_host(C, &fails, 1, LS_I32, LS_REDUCE_MAX));
    if (fails && !ls_test_failures) ls_test_failures = 1;
    ls_comm_destroy(C);
    ls_ctx_destroy(X);
    LS_TEST_END();
}
