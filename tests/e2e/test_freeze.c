/* test_freeze.c: parameters frozen by leaving them out of the optimizer (the guide's way; PyTorch's
 * requires_grad_(False), whose parameters have no gradient) under the trainer's clip_grad_norm.
 * torch.nn.utils.clip_grad_norm_(model.parameters(), c) measures and scales the gradients of the
 * parameters that train; the trainer measured the frozen ones' too, so it reported a larger norm
 * and clipped the trained layers harder than PyTorch (or clipped where PyTorch does not). Here a
 * features-16-10 MLP with its first layer frozen: a run without freezing or clipping gives the
 * gradients g; then, for accumulation 1 and 2, the frozen run's step must report the norm of the
 * trained layers' g alone, leave the first layer bitwise as it was, and move the trained layers
 * by -lr * min(1, c / (norm + 1e-6)) * g (SGD's first step: the momentum buffer is the gradient),
 * for a c that clips and for one above the trained layers' norm but below the whole model's. Under
 * mpirun each rank steps its share of the batch, and again with the optimizer sharded and each
 * gradient reduced to its owner (the frozen ones to rank 0, which measured them).
 * Args: [cpu|cuda] (cuda: exits 77 where no GPU is usable). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define N 64
#define F 12
#define B 32
#define H 16

static ls_ctx *C;
static ls_comm *W;
static int Rank, World;
static ls_dataset *D;
static int64_t Idx[B];
static const float LR = 0.1f;

/* The MLP (seed 77, the same weights on every call), SGD at LR over its parameters from index
 * first (first 2: the first layer frozen), sharded over the ranks when shard, and a trainer of
 * this rank's B / World samples in micro-batches of accum, clipping at clip (0: off). */
static ls_trainer *make(int first, int accum, double clip, int shard, ls_module **m, ls_optimizer **o) {
    int64_t sizes[3] = {F, H, 10};
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 3, sizes, LS_ACT_RELU, 77, m));
    ls_tensor *pa[4], *ga[4];
    int np = ls_module_num_params(*m);
    LS_REQUIRE(np == 4);
    for (int i = first; i < np; i++) {
        pa[i - first] = ls_module_param(*m, i);
        ga[i - first] = ls_module_grad(*m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = LR;
    if (shard) {
        oc.shard_rank = Rank;
        oc.shard_world = World;
    }
    LS_REQUIRE_OK(ls_optimizer_create(C, np - first, pa, ga, &oc, o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B / World / accum;
    tc.accum_steps = accum;
    tc.lr.base_lr = LR;
    tc.clip_grad_norm = clip;
    ls_trainer *t;
    tc.shard_reduce = shard; /* 1: each gradient reduced to its owner (frozen ones to rank 0) */
    LS_REQUIRE_OK(ls_trainer_create(C, W, *m, *o, &tc, &t));
    return t;
}

/* The gradients in parameter order (malloc'd), as params_to_host. */
static float *grads_to_host(ls_module *m) {
    LS_REQUIRE_OK(ls_ctx_synchronize(C));
    int64_t total = 0, off = 0;
    for (int i = 0; i < ls_module_num_params(m); i++) total += ls_tensor_numel(ls_module_grad(m, i));
    float *out = malloc(sizeof(float) * (size_t)total);
    LS_REQUIRE(out);
    for (int i = 0; i < ls_module_num_params(m); i++) {
        ls_tensor *g = ls_module_grad(m, i);
        LS_REQUIRE_OK(ls_allocator_copy(C->alloc, out + off, 0, g->data, C->device.type != LS_DEVICE_CPU,
                                        sizeof(float) * (size_t)ls_tensor_numel(g)));
        off += ls_tensor_numel(g);
    }
    return out;
}

static void free_run(ls_trainer *t, ls_optimizer *o, ls_module *m) {
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

int main(int argc, char **argv) {
    LS_REQUIRE_OK(ls_ctx_create(mlp_device_arg(argc, argv), NULL, &C));
    LS_REQUIRE_OK(ls_comm_create(C, NULL, &W)); /* under mpirun: this rank's samples are its share */
    Rank = ls_comm_rank(W);
    World = ls_comm_world(W);
    if (B % (2 * World) != 0) LS_SKIP("%d ranks: the world size must divide %d", World, B / 2);
    const int64_t mine = B / World, *my_idx = Idx + Rank * mine;
    int32_t y[N];
    float *x = mlp_points(N, F, 21, y);
    for (int i = 0; i < N * F; i++) x[i] *= 8; /* a first layer's gradient as large as the others' */
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &D));
    for (int i = 0; i < B; i++) Idx[i] = (i * 7 + 3) % N;
    const int64_t frozen = H * F + H; /* the first layer's weight and bias, first in the lists */
    for (int accum = 1; accum <= 2; accum++) {
        /* the gradients of a step from the initial weights, nothing frozen or clipped */
        ls_module *m;
        ls_optimizer *o;
        ls_trainer *t = make(0, accum, 0, 0, &m, &o);
        int64_t np;
        float *p0 = params_to_host(C, m, &np);
        ls_step_stats st;
        LS_REQUIRE_OK(ls_trainer_step(t, D, my_idx, mine, B, &st));
        float *g = grads_to_host(m);
        free_run(t, o, m);
        double trained = 0, all = 0;
        for (int64_t i = 0; i < np; i++) {
            all += (double)g[i] * g[i];
            if (i >= frozen) trained += (double)g[i] * g[i];
        }
        trained = sqrt(trained);
        all = sqrt(all);
        printf("accum %d: gradient norm %.6f of the trained layers, %.6f of the whole model\n", accum, trained, all);
        LS_REQUIRE(all > 1.1 * trained); /* the frozen layer's gradient is large enough to tell */
        const double clips[2] = {0.5 * trained, 0.5 * (trained + all)};
        for (int c = 0; c < 2 * (World > 1 ? 2 : 1); c++) { /* on several ranks, sharded too */
            const int shard = c >= 2;
            t = make(2, accum, clips[c % 2], shard, &m, &o);
            LS_REQUIRE_OK(ls_trainer_step(t, D, my_idx, mine, B, &st));
            float *p1 = params_to_host(C, m, &np);
            const double coef = fmin(1.0, clips[c % 2] / (trained + 1e-6));
            printf("  rank %d%s, clip %.6f: grad_norm %.6f (want %.6f), coefficient %.6f\n", Rank,
                   shard ? " (sharded)" : "", clips[c % 2], st.grad_norm, trained, coef);
            LS_EXPECT_NEAR(st.grad_norm, trained, 1e-5 * trained);
            LS_EXPECT(memcmp(p0, p1, sizeof(float) * (size_t)frozen) == 0);
            double worst = 0, scale = 0;
            for (int64_t i = frozen; i < np; i++) {
                double want = -(double)LR * coef * g[i];
                worst = fmax(worst, fabs(((double)p1[i] - p0[i]) - want));
                scale = fmax(scale, fabs(want));
            }
            printf("  update off by %.3g (largest %.3g)\n", worst, scale);
            LS_EXPECT(scale > 1e-4 && worst < 1e-4 * scale + 1e-7);
            free(p1);
            free_run(t, o, m);
        }
        free(p0);
        free(g);
    }
    ls_dataset_destroy(D);
    free(x);
    ls_comm_destroy(W);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
