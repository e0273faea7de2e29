/* test_ddp_equivalence.c: the core guarantee of data parallelism. Run under mpirun with N ranks
 * (or alone): every rank trains the MLP with a per-rank batch of B/N through the communicator and
 * the bucketed reducer; rank 0 also trains a private single-process replica with batch B. After
 * the steps, the parameters must agree (max relative difference <= 1e-5, fp32) and be identical on
 * every rank. Cases: SGD and AdamW, 20 steps each, over a 110-sample data set whose size does not
 * divide by the global batch (exact sampler: partial last batches, some ranks empty), and gradient
 * accumulation over 4 micro-steps against one big batch.
 * Args: [steps] (default 20). Small buckets (LOCKSTEP_BUCKET_MB) force several buckets. */
#include <stdlib.h>

#include "comm.h"
#include "data.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

static ls_ctx *C;
static ls_comm *W;
static ls_dataset *D;

typedef struct run {
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    ls_sampler *s;
} run;

static void setup(run *r, ls_comm *comm, int rank, int world, ls_optim_kind kind, int64_t b, int accum) {
    int64_t sizes[4] = {784, 64, 32, 10};
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 4, sizes, LS_ACT_RELU, 1000 + (uint64_t)rank * (comm ? 7 : 0), &r->m));
    /* ranks start from different weights on purpose: the broadcast from rank 0 must fix that */
    ls_tensor *p[6], *g[6];
    for (int i = 0; i < 6; i++) {
        p[i] = ls_module_param(r->m, i);
        g[i] = ls_module_grad(r->m, i);
    }
    ls_optim_config oc = ls_optim_defaults(kind);
    oc.lr = kind == LS_OPTIM_SGD ? 0.05f : 2e-3f;
    oc.weight_decay = 1e-3f;
    LS_REQUIRE_OK(ls_optimizer_create(C, 6, p, g, &oc, &r->o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = b;
    tc.accum_steps = accum;
    tc.lr = (ls_lr_schedule){oc.lr, 0, 3, 20};
    LS_REQUIRE_OK(ls_trainer_create(C, comm, r->m, r->o, &tc, &r->t));
    LS_REQUIRE_OK(ls_sampler_create(D->n, rank, world, 5, 1, LS_SAMPLER_EXACT, &r->s));
}

static void train(run *r, int64_t per_step, int steps) {
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)per_step);
    int64_t per_epoch = ls_sampler_steps(r->s, per_step), epoch = 0;
    for (int k = 0; k < steps; k++) {
        int64_t j = k % per_epoch, count, global;
        if (j == 0) LS_REQUIRE_OK(ls_sampler_set_epoch(r->s, epoch++));
        LS_REQUIRE_OK(ls_sampler_batch(r->s, j, per_step, idx, &count, &global));
        LS_REQUIRE_OK(ls_trainer_step(r->t, D, idx, count, global, NULL));
    }
    free(idx);
}

static void teardown(run *r) {
    ls_trainer_destroy(r->t);
    ls_optimizer_destroy(r->o);
    ls_module_destroy(r->m);
    ls_sampler_destroy(r->s);
}

/* Max relative difference between the replicas' parameters, per tensor: max |a - b| over the
 * tensor divided by max |b| of the tensor (the scale of the tensor; an elementwise ratio would
 * divide rounding noise by parameters that happen to sit near zero). Also checks that all ranks
 * hold identical parameters. */
static double compare(run *dp, run *ref) {
    double worst = 0;
    for (int i = 0; i < 6; i++) {
        ls_tensor *a = ls_module_param(dp->m, i);
        int64_t n = ls_tensor_numel(a);
        float *x = a->data;
        /* identical on every rank: rank 0's copy broadcast and compared */
        float *mine = malloc(sizeof(float) * (size_t)n);
        memcpy(mine, x, sizeof(float) * (size_t)n);
        LS_REQUIRE_OK(ls_comm_broadcast(W, mine, n, LS_F32, 0));
        int same = memcmp(mine, x, sizeof(float) * (size_t)n) == 0;
        LS_EXPECT(same);
        free(mine);
        if (ref) {
            float *y = ls_module_param(ref->m, i)->data;
            double diff = 0, scale = 0;
            for (int64_t k = 0; k < n; k++) {
                diff = fmax(diff, fabs((double)x[k] - y[k]));
                scale = fmax(scale, fabs((double)y[k]));
            }
            worst = fmax(worst, diff / scale);
        }
    }
    return worst;
}

static void check_case(const char *name, ls_optim_kind kind, int64_t global_b, int accum, int steps) {
    int rank = ls_comm_rank(W), world = ls_comm_world(W);
    int64_t b = global_b / world;
    run dp, ref;
    setup(&dp, W, rank, world, kind, b, accum);
    train(&dp, b * accum, steps);
    double worst = 0;
    if (rank == 0) {
        /* the reference: one process, whole batch, no accumulation */
        setup(&ref, NULL, 0, 1, kind, global_b * accum, 1);
        train(&ref, global_b * accum, steps);
        worst = compare(&dp, &ref);
        teardown(&ref);
    } else {
        compare(&dp, NULL);
    }
    LS_REQUIRE_OK(ls_comm_broadcast(W, &worst, 1, LS_F64, 0));
    if (rank == 0)
        printf("%s: %d ranks, global batch %lld x %d micro-steps, %d steps: max relative difference %.3g\n", name,
               world, (long long)global_b, accum, steps, worst);
    LS_EXPECT(worst <= 1e-5);
    teardown(&dp);
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    LS_REQUIRE_OK(ls_comm_create(C, NULL, &W));
    const char *dir = getenv("LOCKSTEP_FASHION_DIR");
    if (ls_fashion_mnist_load(dir, 1, 110, &D) != LS_OK) LS_SKIP("Fashion-MNIST not available: %s", ls_last_error());
    if (12 % ls_comm_world(W) != 0) LS_SKIP("the world size must divide 12");
    check_case("sgd", LS_OPTIM_SGD, 12, 1, steps);
    check_case("adamw", LS_OPTIM_ADAMW, 12, 1, steps);
    check_case("sgd+accumulation", LS_OPTIM_SGD, 12, 4, steps);
    ls_dataset_destroy(D);
    ls_comm_destroy(W);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
