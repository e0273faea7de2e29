/* mlp_run.h: for tests that train a small MLP and compare runs bit for bit: the model with its
 * SGD optimizer, and its parameters copied to one host array. */
#ifndef LOCKSTEP_TEST_MLP_RUN_H
#define LOCKSTEP_TEST_MLP_RUN_H

#include <stdlib.h>

#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

/* The device a test's argv[1] names: "cpu" (or none) or "cuda" (cuda:0; exits 77, CTest's skip,
 * where no GPU is usable); anything else exits 2. */
static inline ls_device mlp_device_arg(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(dev, "cuda")) {
        char why[256] = "";
        if (ls_device_cuda_count(why, sizeof why) == 0) LS_SKIP("no usable CUDA device: %s", why);
        return (ls_device){LS_DEVICE_CUDA, 0};
    }
    if (strcmp(dev, "cpu") != 0) {
        fprintf(stderr, "device '%s': use cpu or cuda\n", dev);
        exit(2);
    }
    return ls_device_cpu();
}

/* A features-40-10 ReLU MLP in f32 (seed 77: the same on every call) and SGD at lr. */
static inline void mlp_sgd(ls_ctx *c, int64_t features, float lr, ls_module **m, ls_optimizer **o) {
    int64_t sizes[3] = {features, 40, 10};
    LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 3, sizes, LS_ACT_RELU, 77, m));
    int np = ls_module_num_params(*m);
    ls_tensor *pa[8], *ga[8];
    LS_REQUIRE(np <= 8);
    for (int i = 0; i < np; i++) {
        pa[i] = ls_module_param(*m, i);
        ga[i] = ls_module_grad(*m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = lr;
    LS_REQUIRE_OK(ls_optimizer_create(c, np, pa, ga, &oc, o));
}

/* mlp_sgd's model and optimizer at lr 0.05, and a one-rank trainer of them: batch micro-batches of
 * accum, the lr constant, running totals when totals (ls_trainer_totals), the gradient norm
 * clipped to clip (0: off). */
static inline ls_trainer *mlp_trainer_ex(ls_ctx *c, int64_t features, int64_t batch, int accum, ls_precision precision,
                                         int totals, double clip, ls_module **m, ls_optimizer **o) {
    mlp_sgd(c, features, 0.05f, m, o); /* f32 masters under bf16 */
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = batch;
    tc.accum_steps = accum;
    tc.lr.base_lr = 0.05f;
    tc.precision = precision;
    tc.totals = totals;
    tc.clip_grad_norm = clip;
    ls_trainer *t = NULL;
    LS_REQUIRE_OK(ls_trainer_create(c, NULL, *m, *o, &tc, &t));
    return t;
}

static inline ls_trainer *mlp_trainer(ls_ctx *c, int64_t features, int64_t batch, int accum, ls_precision precision,
                                      ls_module **m, ls_optimizer **o) {
    return mlp_trainer_ex(c, features, batch, accum, precision, 0, 0.0, m, o);
}

/* n random points of f features in [-0.5, 0.5) (malloc'd) from seed, and labels in [0, 10) that
 * depend on the first feature. */
static inline float *mlp_points(int64_t n, int64_t f, uint64_t seed, int32_t *y) {
    float *x = malloc(sizeof(float) * (size_t)(n * f));
    LS_REQUIRE(x);
    uint64_t r = seed;
    for (int64_t i = 0; i < n * f; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((r >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    for (int64_t i = 0; i < n; i++) y[i] = (int32_t)((i * 3 + (int)(x[i * f] * 10 + 5)) % 10);
    return x;
}

/* Waits for the context, then returns the parameters in order (malloc'd) and their count. */
static inline float *params_to_host(ls_ctx *c, ls_module *m, int64_t *total_out) {
    LS_REQUIRE_OK(ls_ctx_synchronize(c));
    int np = ls_module_num_params(m);
    int64_t total = 0;
    for (int i = 0; i < np; i++) total += ls_tensor_numel(ls_module_param(m, i));
    float *out = malloc(sizeof(float) * (size_t)(total ? total : 1));
    LS_REQUIRE(out);
    int64_t off = 0;
    for (int i = 0; i < np; i++) {
        ls_tensor *p = ls_module_param(m, i);
        int64_t n = ls_tensor_numel(p);
        LS_REQUIRE_OK(ls_allocator_copy(c->alloc, out + off, 0, p->data, c->device.type != LS_DEVICE_CPU,
                                        sizeof(float) * (size_t)n));
        off += n;
    }
    *total_out = total;
    return out;
}

#endif
