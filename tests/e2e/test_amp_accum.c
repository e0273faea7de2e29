/* test_amp_accum.c: fp16's loss scaler against torch.cuda.amp.GradScaler's rules where a real
 * overflow (not LOCKSTEP_AMP_INJECT_INF) reaches one micro-batch of one rank, alone or under
 * mpirun (1-3 ranks), unsharded and with a sharded optimizer (ZeRO 1), with clipping:
 * - a sample of 1e6 (inf in f16) in the first of 2 micro-batches of step 3, on the last rank
 *   only: every rank skips step 3 (its parameters and the AdamW step count unchanged), the scale
 *   halves once (65536 -> 32768, not once per micro-batch), the growth tracker restarts, and all
 *   ranks end with the same parameters;
 * - the step's reported norm (clip_grad_norm_'s) is inf/NaN there, finite and of the unscaled
 *   gradients elsewhere (that of an fp32 run's first step within 1%);
 * - the learning-rate schedule advances over the skipped step (as PyTorch's scheduler.step()
 *   called every iteration): step k's lr is the schedule's at k whether or not a step before it
 *   was skipped, while AdamW's bias correction counts the steps taken. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "data.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define F 32 /* features */
#define B 4  /* micro-batch per rank */
#define A 2  /* micro-batches a step */
#define STEPS 5
#define BAD_STEP 2 /* k: the third step */

static ls_comm *W;
static double norm32; /* the fp32 run's first norm (clipping without effect) */

static double checksum(ls_module *m) {
    double s = 0;
    for (int i = 0; i < ls_module_num_params(m); i++) {
        ls_tensor *p = ls_module_param(m, i);
        for (int64_t k = 0; k < ls_tensor_numel(p); k++) s += ((float *)p->data)[k] * (double)((k % 7) + 1);
    }
    return s;
}

/* world ranks x STEPS steps x A micro-batches x B samples, each sample used once; sample
 * (rank, k, a, j) is index ((k * world + rank) * A + a) * B + j. */
static int64_t sample(int rank, int world, int k, int a, int j) {
    return (((int64_t)k * world + rank) * A + a) * B + j;
}

static void run(ls_precision prec, int shard, double clip) {
    const int rank = ls_comm_rank(W), world = ls_comm_world(W);
    const int64_t n = (int64_t)world * STEPS * A * B;
    float *x = malloc((size_t)n * F * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    LS_REQUIRE(x && y);
    for (int64_t i = 0; i < n; i++) {
        for (int f = 0; f < F; f++) x[i * F + f] = (float)sin(0.37 * (double)(i * F + f));
        y[i] = (int32_t)(i % 10);
    }
    /* one sample of the bad step's first micro-batch, on the last rank: 1e6 is inf in f16 */
    const int64_t bad = sample(world - 1, world, BAD_STEP, 0, 1);
    if (prec == LS_PRECISION_FP16)
        for (int f = 0; f < F; f++) x[bad * F + f] = 1e6f;
    ls_dataset *d;
    LS_REQUIRE_OK(ls_dataset_from_arrays(n, F, 10, x, y, &d));
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    int64_t sizes[3] = {F, 16, 10};
    ls_module *m;
    LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 3, sizes, LS_ACT_RELU, 5, &m));
    ls_tensor *p[4], *g[4];
    for (int i = 0; i < 4; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_ADAMW);
    oc.lr = 1e-3f;
    if (shard) oc.shard_rank = rank, oc.shard_world = world;
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(c, 4, p, g, &oc, &o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = A;
    tc.lr.base_lr = oc.lr;
    tc.lr.warmup_steps = 2;
    tc.lr.total_steps = STEPS;
    tc.precision = prec;
    tc.clip_grad_norm = clip;
    ls_trainer *t;
    LS_REQUIRE_OK(ls_trainer_create(c, W, m, o, &tc, &t));
    int64_t idx[A * B];
    for (int k = 0; k < STEPS; k++) {
        for (int a = 0; a < A; a++)
            for (int j = 0; j < B; j++) idx[a * B + j] = sample(rank, world, k, a, j);
        ls_step_stats st;
        const double before = checksum(m);
        int64_t taken0, taken1;
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(o, &taken0));
        LS_REQUIRE_OK(ls_trainer_step(t, d, idx, A * B, (int64_t)world * A * B, &st));
        LS_REQUIRE_OK(ls_optimizer_get_num_steps(o, &taken1));
        const int skip = prec == LS_PRECISION_FP16 && k == BAD_STEP;
        LS_EXPECT(st.skipped == skip);
        LS_EXPECT((checksum(m) == before) == skip);
        LS_EXPECT(taken1 == taken0 + !skip);
        LS_EXPECT(st.lr == ls_lr_at(&tc.lr, k)); /* the schedule's step k, skipped steps counted */
        if (prec == LS_PRECISION_FP16) LS_EXPECT(st.loss_scale == (k <= BAD_STEP ? 65536.0 : 32768.0));
        if (clip > 0) LS_EXPECT(skip ? !isfinite(st.grad_norm) : isfinite(st.grad_norm) && st.grad_norm > 0);
        if (clip > 0 && k == 0 && prec == LS_PRECISION_FP32) norm32 = st.grad_norm;
        if (clip > 0 && k == 0 && prec == LS_PRECISION_FP16) LS_EXPECT(fabs(st.grad_norm / norm32 - 1) < 0.01);
    }
    if (prec == LS_PRECISION_FP16) {
        ls_loss_scaler sc;
        LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &sc));
        LS_EXPECT(sc.scale == 32768.0 && sc.growth_tracker == STEPS - 1 - BAD_STEP && sc.skipped == 1);
    }
    /* every rank holds rank 0's parameters */
    double mine = checksum(m), r0 = mine;
    LS_REQUIRE_OK(ls_comm_broadcast_host(W, &r0, 1, LS_F64, 0));
    LS_EXPECT(mine == r0);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_ctx_destroy(c);
    ls_dataset_destroy(d);
    free(x);
    free(y);
}

int main(void) {
    ls_ctx *c0;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c0));
    LS_REQUIRE_OK(ls_comm_create(c0, NULL, &W));
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    run(LS_PRECISION_FP32, 0, 1e30);
    LS_REQUIRE(norm32 > 0);
    for (int shard = 0; shard <= (ls_comm_world(W) > 1); shard++) {
        run(LS_PRECISION_FP16, shard, 0);
        run(LS_PRECISION_FP16, shard, 1e30);
        run(LS_PRECISION_FP16, shard, 0.1);
    }
    ls_comm_destroy(W);
    ls_ctx_destroy(c0);
    LS_TEST_END();
}
