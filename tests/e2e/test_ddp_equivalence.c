/* test_ddp_equivalence.c: the core guarantee of data parallelism. Run under mpirun with N ranks
 * (or alone): every rank trains the MLP with a per-rank batch of B/N through the communicator and
 * the bucketed reducer; rank 0 also trains a private single-process replica with batch B. After
 * the steps, the parameters must agree (max relative difference <= 1e-5, fp32) and be identical on
 * every rank. Cases: SGD and AdamW, 20 steps each, over a 110-sample data set whose size does not
 * divide by the global batch (exact sampler: partial last batches, some ranks empty), and gradient
 * accumulation over 4 micro-steps against one big batch. The ranks train twice, with gradients as
 * bucket views and copied into the buckets: bitwise the same parameters (on a GPU within 1e-6),
 * less memory with views; a third time with the optimizer sharded (ZeRO stage 1) and the
 * gradients all-reduced: bitwise the same (on a GPU within 1e-6), without the state of the other
 * ranks' parameters; and a fourth time sharded with each gradient reduced to its owner only (the
 * default): bitwise the same on 2 ranks, within 1e-5 on more (MPI's reduce sums in another order),
 * identical on every rank. Then SGD with the gradient norm clipped (sharded: the norm summed over
 * the owners), dropout keyed to the samples (SGD; AdamW with accumulation), and SGD with
 * gradients all-reduced in bf16, within 0.1. Alone, a trainer refuses an
 * optimizer sharded over several ranks; on several, models whose numbers of Dropouts differ (the
 * parameters alike) are refused on every rank.
 * Args: [steps] (default 20) [cpu|cuda]. Small buckets (LOCKSTEP_BUCKET_MB) force several buckets.
 * With cuda the ranks train on the GPU (several ranks may share one: LOCKSTEP_COMM=mpi stages
 * through the host; alone, LOCKSTEP_COMM=nccl runs a one-rank NCCL communicator) and the
 * reference stays on the CPU: the GPU's cuBLAS f32 sums in another order, so the bound is 1e-4.
 * Exits 77 there without a usable GPU. */
#include <stdlib.h>

#include "comm.h"
#include "data.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

static ls_ctx *C;   /* the ranks' device */
static ls_ctx *CPU; /* the reference's */
static ls_comm *W;
static double tolerance = 1e-5;
static double clip;   /* the cases' clip_grad_norm (0: off) */
static float dropout; /* the cases' dropout after each hidden layer (0: none) */
static ls_dataset *D;

typedef struct run {
    ls_ctx *ctx;
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    ls_sampler *s;
} run;

static void setup(run *r, ls_ctx *ctx, ls_comm *comm, int rank, int world, ls_optim_kind kind, int64_t b, int accum,
                  int shard) {
    int64_t sizes[4] = {784, 64, 32, 10};
    r->ctx = ctx;
    LS_REQUIRE_OK(ls_mlp_create_dropout(ctx, LS_F32, 4, sizes, LS_ACT_RELU, dropout,
                                        1000 + (uint64_t)rank * (comm ? 7 : 0), &r->m));
    /* ranks start from different weights (and dropout seeds) on purpose: the broadcast from rank 0
     * must fix that */
    ls_tensor *p[6], *g[6];
    for (int i = 0; i < 6; i++) {
        p[i] = ls_module_param(r->m, i);
        g[i] = ls_module_grad(r->m, i);
    }
    ls_optim_config oc = ls_optim_defaults(kind);
    oc.lr = kind == LS_OPTIM_SGD ? 0.05f : 2e-3f;
    oc.weight_decay = 1e-3f;
    if (shard) { /* ZeRO stage 1; 1: gradients reduced to their owners, -1 all-reduced */
        oc.shard_rank = rank;
        oc.shard_world = world;
    }
    LS_REQUIRE_OK(ls_optimizer_create(ctx, 6, p, g, &oc, &r->o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = b;
    tc.accum_steps = accum;
    tc.lr = (ls_lr_schedule){oc.lr, 0, 3, 20, LS_LR_COSINE};
    tc.shard_reduce = shard;
    tc.clip_grad_norm = clip;
    LS_REQUIRE_OK(ls_trainer_create(ctx, comm, r->m, r->o, &tc, &r->t));
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

/* Parameter i of r as host floats (copied off the device where there is one); free() it. */
static float *host_param(run *r, int i) {
    ls_tensor *a = ls_module_param(r->m, i);
    size_t bytes = sizeof(float) * (size_t)ls_tensor_numel(a);
    float *h = malloc(bytes ? bytes : 1);
    LS_REQUIRE(h);
    ls_ctx *c = r->ctx;
    LS_REQUIRE_OK(ls_ctx_synchronize(c));
    LS_REQUIRE_OK(ls_allocator_copy(c->alloc, h, 0, a->data, c->device.type != LS_DEVICE_CPU, bytes));
    return h;
}

/* Max relative difference between the replicas' parameters, per tensor: max |a - b| over the
 * tensor divided by max |b| of the tensor (the scale of the tensor; an elementwise ratio would
 * divide rounding noise by parameters that happen to sit near zero). Also checks that all ranks
 * hold identical parameters. */
static double compare(run *dp, run *ref) {
    double worst = 0;
    for (int i = 0; i < 6; i++) {
        int64_t n = ls_tensor_numel(ls_module_param(dp->m, i));
        float *x = host_param(dp, i);
        /* identical on every rank: rank 0's copy broadcast and compared */
        float *mine = malloc(sizeof(float) * (size_t)n);
        memcpy(mine, x, sizeof(float) * (size_t)n);
        LS_REQUIRE_OK(ls_comm_broadcast_host(W, mine, n, LS_F32, 0));
        int same = memcmp(mine, x, sizeof(float) * (size_t)n) == 0;
        LS_EXPECT(same);
        free(mine);
        if (ref) {
            float *y = host_param(ref, i);
            double diff = 0, scale = 0;
            for (int64_t k = 0; k < n; k++) {
                diff = fmax(diff, fabs((double)x[k] - y[k]));
                scale = fmax(scale, fabs((double)y[k]));
            }
            worst = fmax(worst, diff / scale);
            free(y);
        }
        free(x);
    }
    return worst;
}

/* Parameters of a and b: bitwise equal on the CPU; on a GPU within 1e-6 of each tensor's scale
 * (its library reductions promise the same bits run to run, but a failed promise should not cost
 * the device check a rerun). */
static int same_params(run *a, run *b) {
    int same = 1;
    for (int i = 0; i < 6; i++) {
        int64_t n = ls_tensor_numel(ls_module_param(a->m, i));
        float *x = host_param(a, i), *y = host_param(b, i);
        if (a->ctx->device.type == LS_DEVICE_CPU) {
            same &= memcmp(x, y, sizeof(float) * (size_t)n) == 0;
        } else {
            double diff = 0, scale = 0;
            for (int64_t k = 0; k < n; k++) {
                diff = fmax(diff, fabs((double)x[k] - y[k]));
                scale = fmax(scale, fabs((double)y[k]));
            }
            same &= diff <= 1e-6 * scale;
        }
        free(x);
        free(y);
    }
    return same;
}

static double check_case(const char *name, ls_optim_kind kind, int64_t global_b, int accum, int steps) {
    int rank = ls_comm_rank(W), world = ls_comm_world(W);
    int64_t b = global_b / world;
    run dp, dpc, ref;
    /* gradients as bucket views (the default) and copied into the buckets: the same steps, bit
     * for bit; the views take less memory (no gradient beside its bucket) where there is a reducer */
    ls_memory_stats m0, m1, m2;
    ls_allocator_stats(C->alloc, &m0);
    setenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW", "0", 1);
    setup(&dpc, C, W, rank, world, kind, b, accum, 0);
    unsetenv("LOCKSTEP_GRAD_AS_BUCKET_VIEW");
    ls_allocator_stats(C->alloc, &m1);
    setup(&dp, C, W, rank, world, kind, b, accum, 0);
    ls_allocator_stats(C->alloc, &m2);
    size_t copying = m1.live_bytes - m0.live_bytes, views = m2.live_bytes - m1.live_bytes;
    LS_EXPECT(world > 1 ? views < copying : views == copying);
    /* the optimizer sharded (ZeRO stage 1), gradients all-reduced: the same steps, bit for bit,
     * without the state of the other ranks' parameters */
    run dps, dpo;
    ls_memory_stats m3;
    setup(&dps, C, W, rank, world, kind, b, accum, -1);
    ls_allocator_stats(C->alloc, &m3);
    size_t sharded = m3.live_bytes - m2.live_bytes, others = 0;
    for (int i = 0; i < 6; i++)
        if (ls_optimizer_owner(dps.o, i) != (world > 1 ? rank : -1))
            others += ls_tensor_nbytes(ls_module_param(dps.m, i)) * (size_t)ls_optimizer_num_state_slots(dps.o);
    LS_EXPECT(world > 1 ? others > 0 && views - sharded >= others : sharded == views);
    /* sharded, each gradient reduced to its owner: on 2 ranks the same sums (a + b), so the same
     * bits (with clipping the norm's terms are added in another order); on more within rounding */
    setup(&dpo, C, W, rank, world, kind, b, accum, 1);
    train(&dp, b * accum, steps);
    train(&dpc, b * accum, steps);
    train(&dps, b * accum, steps);
    train(&dpo, b * accum, steps);
    LS_EXPECT(same_params(&dp, &dpc));
    LS_EXPECT(same_params(&dp, &dps));
    double owner_diff = compare(&dpo, &dp); /* also: identical on every rank */
    if (world <= 2 && clip == 0) LS_EXPECT(same_params(&dp, &dpo));
    if (rank == 0)
        printf("%s: sharded, gradients reduced to their owners: max relative difference %.3g from all-reduced\n", name,
               owner_diff);
    LS_EXPECT(owner_diff <= tolerance);
    teardown(&dpc);
    teardown(&dps);
    teardown(&dpo);
    double worst = 0;
    if (rank == 0) {
        /* the reference: one process, whole batch, no accumulation */
        setup(&ref, CPU, NULL, 0, 1, kind, global_b * accum, 1, 0);
        train(&ref, global_b * accum, steps);
        worst = compare(&dp, &ref);
        teardown(&ref);
    } else {
        compare(&dp, NULL);
    }
    LS_REQUIRE_OK(ls_comm_broadcast_host(W, &worst, 1, LS_F64, 0));
    if (rank == 0)
        printf("%s: %d ranks on %s (%s communicator), global batch %lld x %d micro-steps, %d steps: max relative "
               "difference %.3g (<= %g)\n",
               name, world, C->device.type == LS_DEVICE_CPU ? "cpu" : "cuda", ls_comm_backend_name(W),
               (long long)global_b, accum, steps, worst, tolerance);
    LS_EXPECT(worst <= tolerance);
    teardown(&dp);
    return worst;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 20;
    ls_rank_info ri;
    LS_REQUIRE_OK(ls_rank_discover(&ri));
    const char *dev = argc > 2 ? argv[2] : "cpu";
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &CPU));
    C = CPU;
    if (!strcmp(dev, "cuda")) {
        char why[256] = "";
        if (ls_device_cuda_count(why, sizeof why) == 0) LS_SKIP("no usable CUDA device: %s", why);
        LS_REQUIRE_OK(ls_ctx_create((ls_device){LS_DEVICE_CUDA, 0}, NULL, &C));
        tolerance = 1e-4;
    } else if (strcmp(dev, "cpu") != 0) {
        fprintf(stderr, "device '%s': use cpu or cuda\n", dev);
        return 2;
    }
    LS_REQUIRE_OK(ls_comm_create(C, NULL, &W));
    const char *dir = getenv("LOCKSTEP_FASHION_DIR");
    if (ls_fashion_mnist_load(dir, 1, 110, &D) != LS_OK) LS_SKIP("Fashion-MNIST not available: %s", ls_last_error());
    if (12 % ls_comm_world(W) != 0) LS_SKIP("the world size must divide 12");
    if (ls_comm_world(W) > 1) { /* rank 0's model ends in a Dropout, the others' do not */
        run r;
        ls_module *l[4];
        int k = 0;
        LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 784, 10, 1, 1, "", &l[k++]));
        if (ls_comm_rank(W) == 0) LS_REQUIRE_OK(ls_dropout_create(C, 0.5f, 3, &l[k++]));
        LS_REQUIRE_OK(ls_sequential_create(C, k, l, &r.m));
        ls_tensor *p[2] = {ls_module_param(r.m, 0), ls_module_param(r.m, 1)};
        ls_tensor *g[2] = {ls_module_grad(r.m, 0), ls_module_grad(r.m, 1)};
        ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
        LS_REQUIRE_OK(ls_optimizer_create(C, 2, p, g, &oc, &r.o));
        ls_train_config tc;
        memset(&tc, 0, sizeof tc);
        tc.batch_per_rank = 4;
        tc.accum_steps = 1;
        tc.lr = (ls_lr_schedule){0.1f, 0, 0, 0, LS_LR_CONSTANT};
        /* the layers' comparison finds it (before the dropout seeds' count did) */
        LS_EXPECT_ERR(ls_trainer_create(C, W, r.m, r.o, &tc, &r.t), LS_ERR_MISMATCH,
                      "the model's number of layers (activations, Dropouts, branches included) is 1 on rank 1 but 2 "
                      "on rank 0");
        ls_optimizer_destroy(r.o);
        ls_module_destroy(r.m);
    }
    if (ls_comm_world(W) == 1) { /* an optimizer sharded over 2 ranks, one rank to train it */
        run r;
        int64_t sizes[3] = {784, 8, 10};
        LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 3, sizes, LS_ACT_RELU, 1, &r.m));
        ls_tensor *p[4], *g[4];
        for (int i = 0; i < 4; i++) p[i] = ls_module_param(r.m, i), g[i] = ls_module_grad(r.m, i);
        ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
        LS_REQUIRE_OK(ls_optimizer_create(C, 4, p, g, &oc, &r.o));
        LS_REQUIRE_OK(ls_optimizer_shard(r.o, 0, 2));
        ls_train_config tc;
        memset(&tc, 0, sizeof tc);
        tc.batch_per_rank = 4;
        tc.accum_steps = 1;
        tc.lr = (ls_lr_schedule){0.1f, 0, 0, 0, LS_LR_CONSTANT};
        setenv("LOCKSTEP_SHARD_REDUCE", "sideways", 1);
        LS_EXPECT_ERR(ls_trainer_create(C, W, r.m, r.o, &tc, &r.t), LS_ERR_INVALID_ARGUMENT,
                      "LOCKSTEP_SHARD_REDUCE='sideways': expected owner");
        unsetenv("LOCKSTEP_SHARD_REDUCE");
        tc.shard_reduce = 2;
        LS_EXPECT_ERR(ls_trainer_create(C, W, r.m, r.o, &tc, &r.t), LS_ERR_INVALID_ARGUMENT, "shard_reduce 2");
        tc.shard_reduce = 0;
        LS_EXPECT_ERR(ls_trainer_create(C, W, r.m, r.o, &tc, &r.t), LS_ERR_INVALID_ARGUMENT,
                      "the optimizer is sharded over several ranks (ls_optimizer_shard) but the trainer has one");
        ls_optimizer_destroy(r.o);
        ls_module_destroy(r.m);
    }
    check_case("sgd", LS_OPTIM_SGD, 12, 1, steps);
    check_case("adamw", LS_OPTIM_ADAMW, 12, 1, steps);
    check_case("sgd+accumulation", LS_OPTIM_SGD, 12, 4, steps);
    clip = 0.05; /* below the gradients' norm (about 0.3-1 here): every step is clipped */
    check_case("sgd, clipped", LS_OPTIM_SGD, 12, 1, steps);
    clip = 0;
    /* dropout 0.3 after each hidden layer: the masks keyed to (step, sample) and every rank's seeds
     * rank 0's, so the ranks draw what one process draws for the same samples, micro-batches
     * included: within rounding, as without (the masks of a rank's own stream would differ) */
    dropout = 0.3f;
    check_case("sgd, dropout", LS_OPTIM_SGD, 12, 1, steps);
    check_case("adamw+accumulation, dropout", LS_OPTIM_ADAMW, 12, 4, steps);
    dropout = 0;
    /* gradients all-reduced in bf16 (8 significant bits): near the reference, not equal. With 4
     * ranks of 3 samples the ranks' gradients partly cancel, so their rounding shows: 6.7% of a
     * tensor's largest value after 20 steps here (0.4% with 2 ranks). A gross error (no averaging,
     * no conversion back) is far outside. */
    setenv("LOCKSTEP_GRAD_COMPRESS", "bf16", 1);
    double exact = tolerance;
    tolerance = 0.1;
    double w16 = check_case("sgd, bf16 all-reduce", LS_OPTIM_SGD, 12, 1, steps);
    if (ls_comm_world(W) > 1) LS_EXPECT(w16 > 1e-4); /* f32 gives 1e-7: the bf16 did happen */
    tolerance = exact;
    unsetenv("LOCKSTEP_GRAD_COMPRESS");
    ls_dataset_destroy(D);
    ls_comm_destroy(W);
    if (C != CPU) ls_ctx_destroy(C);
    ls_ctx_destroy(CPU);
    LS_TEST_END();
}
