/* test_amp.c: mixed precision in the trainer, alone or under mpirun.
 * 1. fp16 with an overflow injected on the last rank at step 4 (LOCKSTEP_AMP_INJECT_INF, after
 *    the all-reduce, so only the combined found-inf flag can tell the other ranks): every rank
 *    skips exactly step 4, the loop's k = 3 (parameters unchanged across it), the scale halves from 65536 to 32768,
 *    and all ranks still hold identical parameters. Clipping's norm is inf/NaN where the
 *    gradients were, finite elsewhere.
 *    A LOCKSTEP_AMP_INJECT_INF that is not STEP[:RANK], or names a rank past the run's, is refused;
 *    one that differs between ranks fails the trainer's start on every rank, naming it.
 * 2. The scaler's state, kept on the device, set and read back (a resumed run's): a scale of 1024
 *    one clean step before growth is what the next backward uses (the step's loss_scale), then
 *    doubles; bad values and loss scaling in a bf16 trainer are refused with the reason. Every
 *    step overflowing halves the scale to its floor, 2^-126, not to 0 (which a resume refuses).
 * 3. The peak of the allocator over a training step at batch 4096 is lower in bf16 and fp16 than
 *    in fp32 (activations stored in 16 bits); printed and asserted (< 75%).
 * 4. The f16/bf16 weight copies: cast once per epoch of ls_module_cache_weight_casts (a weight
 *    changed inside an epoch is not seen, by contract; the next epoch casts it, bitwise what a
 *    forward without caching computes), and the trainer's steps and evaluations begin epochs of
 *    their own: weights set between them are what the next one computes with. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "data.h"
#include "nn.h"
#include "nn_impl.h" /* ls_module_cache_weight_casts */
#include "optim.h"
#include "testutil.h"
#include "train.h"

static ls_comm *W;
static ls_dataset *D;

static float checksum(ls_module *m) {
    double s = 0;
    for (int i = 0; i < ls_module_num_params(m); i++) {
        ls_tensor *p = ls_module_param(m, i);
        for (int64_t k = 0; k < ls_tensor_numel(p); k++) s += ((float *)p->data)[k] * (double)((k % 7) + 1);
    }
    return (float)s;
}

static double build_clip; /* the trainers' clip_grad_norm (0: off) */

static void build(ls_ctx *c, ls_comm *comm, ls_precision prec, int64_t b, ls_module **m, ls_optimizer **o,
                  ls_trainer **t) {
    int64_t sizes[4] = {784, 512, 256, 10};
    LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 4, sizes, LS_ACT_RELU, 11, m));
    ls_tensor *p[6], *g[6];
    for (int i = 0; i < 6; i++) {
        p[i] = ls_module_param(*m, i);
        g[i] = ls_module_grad(*m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = 0.05f;
    LS_REQUIRE_OK(ls_optimizer_create(c, 6, p, g, &oc, o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = b;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    tc.precision = prec;
    tc.clip_grad_norm = build_clip;
    LS_REQUIRE_OK(ls_trainer_create(c, comm, *m, *o, &tc, t));
}

static void overflow_case(void) {
    int rank = ls_comm_rank(W), world = ls_comm_world(W);
    build_clip = 1e30;
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    setenv("LOCKSTEP_AMP_INJECT_INF", "4", 1); /* the 4th step (k = 3, counted from 1 as --metrics), the last rank */
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    build(c, W, LS_PRECISION_FP16, 16, &m, &o, &t);
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    ls_sampler *s;
    LS_REQUIRE_OK(ls_sampler_create(D->n, rank, world, 3, 1, LS_SAMPLER_PAD, &s));
    int64_t idx[16];
    float before = 0;
    for (int k = 0; k < 6; k++) {
        int64_t count, global;
        ls_step_stats st;
        LS_REQUIRE_OK(ls_sampler_batch(s, k, 16, idx, &count, &global));
        float sum0 = checksum(m);
        LS_REQUIRE_OK(ls_trainer_step(t, D, idx, count, global, &st));
        float sum1 = checksum(m);
        LS_EXPECT(st.skipped == (k == 3));
        /* clipping (huge max_norm: no effect): the norm of the gradients the step saw, inf/NaN on
         * the last rank where it was skipped (as clip_grad_norm_ returns), finite elsewhere */
        LS_EXPECT((k == 3 && rank == world - 1) ? !isfinite(st.grad_norm) : st.grad_norm > 0 && isfinite(st.grad_norm));
        LS_EXPECT((sum0 == sum1) == (k == 3)); /* only the skipped step leaves the weights alone */
        LS_EXPECT(st.loss_scale == (k <= 3 ? 65536.0 : 32768.0));
        if (k == 3) before = sum0;
    }
    ls_loss_scaler sc;
    LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &sc));
    LS_EXPECT(sc.scale == 32768.0 && sc.growth_tracker == 2);
    LS_EXPECT(sc.skipped == 1);
    /* identical on every rank */
    float mine = checksum(m), r0 = mine;
    LS_REQUIRE_OK(ls_comm_broadcast_host(W, &r0, 1, LS_F32, 0));
    LS_EXPECT(mine == r0);
    LS_EXPECT(before != 0);
    if (rank == 0)
        printf("fp16: injected overflow on rank %d skipped step 4 on all %d ranks; scale 65536 -> 32768\n", world - 1,
               world);
    build_clip = 0;
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_sampler_destroy(s);
    ls_ctx_destroy(c);
}

/* A 784-10 MLP's trainer (SGD, batch 16) at this precision must fail to start with status and a
 * message holding msg; what was made for it is freed. */
static void expect_trainer_refused(ls_ctx *c, ls_precision precision, ls_status status, const char *msg) {
    int64_t sizes[2] = {784, 10};
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t = NULL;
    LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 2, sizes, LS_ACT_RELU, 11, &m));
    ls_tensor *p[2] = {ls_module_param(m, 0), ls_module_param(m, 1)},
              *g[2] = {ls_module_grad(m, 0), ls_module_grad(m, 1)};
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    LS_REQUIRE_OK(ls_optimizer_create(c, 2, p, g, &oc, &o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 16;
    tc.accum_steps = 1;
    tc.lr.base_lr = oc.lr;
    tc.precision = precision;
    LS_EXPECT_ERR(ls_trainer_create(c, W, m, o, &tc, &t), status, msg);
    LS_EXPECT(t == NULL);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

/* LOCKSTEP_AMP_INJECT_INF is read strictly: a rank that is not one of the run's, a sign, trailing
 * characters or a step past 2^63 are refused (they were taken, and injected nothing, silently). */
static void inject_parse_case(void) {
    const int world = ls_comm_world(W);
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    char past[32], msg[160];
    snprintf(past, sizeof past, "3:%d", world);
    const char *bad[] = {"3x", "3:", "3:-1", "-3", " 3", "0", "99999999999999999999", "3:1:2"};
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]) + 1; i++) {
        const char *v = i < (int)(sizeof bad / sizeof bad[0]) ? bad[i] : past;
        setenv("LOCKSTEP_AMP_INJECT_INF", v, 1);
        if (v == past)
            snprintf(msg, sizeof msg, "LOCKSTEP_AMP_INJECT_INF='%s': rank %d is not one of this run's %d (0 to %d)", v,
                     world, world, world - 1);
        else
            snprintf(msg, sizeof msg, "LOCKSTEP_AMP_INJECT_INF='%s' is not STEP[:RANK] (STEP from 1", v);
        expect_trainer_refused(c, LS_PRECISION_FP16, LS_ERR_INVALID_ARGUMENT, msg);
    }
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    ls_ctx_destroy(c);
}

/* LOCKSTEP_AMP_INJECT_INF set on some ranks only, or to different steps: the trainer's start fails
 * on every rank naming it. A rank with the hook checks its gradients for inf after every step, an
 * all-reduce the others never made (fp32: "MPI_Allreduce failed: MPI_ERR_TRUNCATE" in the next
 * collective, or a hang). */
static void inject_differs_case(void) {
    const int rank = ls_comm_rank(W), world = ls_comm_world(W);
    if (world < 2) return;
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    static const char *const here[] = {"3", "3", "3:0"}, *const there[] = {"", "4", "3:1"};
    static const char *const said_here[] = {"step 3, rank 1", "step 3, rank 1", "step 3, rank 0"},
                             *const said_there[] = {"unset", "step 4, rank 1", "step 3, rank 1"};
    for (int i = 0; i < 3; i++) {
        if (world != 2 && i) break; /* the default rank (the last) is 1 on 2 ranks */
        setenv("LOCKSTEP_AMP_INJECT_INF", rank == 0 ? here[i] : there[i], 1);
        char msg[200];
        snprintf(msg, sizeof msg, "LOCKSTEP_AMP_INJECT_INF) is '%s' on rank 1 but '%s' on rank 0", said_there[i],
                 said_here[i]);
        if (world != 2) snprintf(msg, sizeof msg, "LOCKSTEP_AMP_INJECT_INF) is 'unset' on rank 1");
        expect_trainer_refused(c, LS_PRECISION_FP32, LS_ERR_MISMATCH, msg);
    }
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    ls_ctx_destroy(c);
}

static void scaler_case(void) {
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    build(c, NULL, LS_PRECISION_FP16, 16, &m, &o, &t);
    ls_loss_scaler sc;
    LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &sc));
    LS_EXPECT(sc.enabled && sc.scale == 65536 && sc.growth_tracker == 0 && sc.skipped == 0);
    /* GradScaler's defaults (README, --help): x2 after 2000 clean steps, x0.5 on an overflow */
    LS_EXPECT(sc.growth_factor == 2 && sc.backoff_factor == 0.5 && sc.growth_interval == 2000);
    sc.scale = 1024;
    sc.growth_tracker = sc.growth_interval - 1;
    sc.skipped = 7;
    LS_REQUIRE_OK(ls_trainer_set_loss_scaler(t, &sc));
    int64_t idx[16];
    for (int i = 0; i < 16; i++) idx[i] = i;
    ls_step_stats st;
    LS_REQUIRE_OK(ls_trainer_step(t, D, idx, 16, 16, &st));
    LS_EXPECT(st.loss_scale == 1024 && !st.skipped);
    ls_loss_scaler after;
    LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &after));
    LS_EXPECT(after.scale == 2048 && after.growth_tracker == 0 && after.skipped == 7);
    sc.scale = NAN;
    LS_EXPECT_ERR(ls_trainer_set_loss_scaler(t, &sc), LS_ERR_INVALID_ARGUMENT,
                  "scale is nan; it must be finite and > 0");
    /* the backward scales by it in f32: a scale that is inf there would make every step overflow
     * (about 900 skipped from 1e300 before the halvings got it back into range) */
    sc.scale = 1e300;
    LS_EXPECT_ERR(ls_trainer_set_loss_scaler(t, &sc), LS_ERR_INVALID_ARGUMENT,
                  "scale is 1e+300; it must be finite and > 0, at most f32's largest value (3.40282e+38)");
    sc.scale = 1024, sc.backoff_factor = 1.5;
    LS_EXPECT_ERR(ls_trainer_set_loss_scaler(t, &sc), LS_ERR_INVALID_ARGUMENT,
                  "backoff factor is 1.5; it must be in (0, 1)");
    LS_EXPECT_ERR(ls_trainer_get_loss_scaler(t, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_get_loss_scaler: out is NULL");
    LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &sc));
    LS_EXPECT(sc.scale == 2048); /* a refused set changes nothing */
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    build(c, NULL, LS_PRECISION_BF16, 16, &m, &o, &t);
    LS_EXPECT_ERR(ls_trainer_set_loss_scaler(t, &sc), LS_ERR_INVALID_ARGUMENT,
                  "loss scaling is off in this trainer (bf16)");
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_ctx_destroy(c);
}

/* Every step overflows (a weight is NaN, as in a diverged run): the scale halves to its floor,
 * 2^-126, and stays there; a scale already below it (set by hand) stays too. It used to reach 0
 * after 1075 steps, a scale ls_trainer_set_loss_scaler (and so a resume) refuses. */
static void floor_case(void) {
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    unsetenv("LOCKSTEP_AMP_INJECT_INF");
    const double floor_scale = 0x1p-126, starts[2] = {0x1p-124, 0x1p-1074};
    for (int i = 0; i < 2; i++) {
        ls_module *m;
        ls_optimizer *o;
        ls_trainer *t;
        build(c, NULL, LS_PRECISION_FP16, 16, &m, &o, &t);
        ((float *)ls_module_param(m, 0)->data)[0] = NAN;
        ls_loss_scaler sc;
        LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &sc));
        sc.scale = starts[i];
        LS_REQUIRE_OK(ls_trainer_set_loss_scaler(t, &sc));
        int64_t idx[16];
        for (int k = 0; k < 16; k++) idx[k] = k;
        const double used[2][5] = {{0x1p-124, 0x1p-125, 0x1p-126, 0x1p-126, 0x1p-126},
                                   {0x1p-1074, 0x1p-1074, 0x1p-1074, 0x1p-1074, 0x1p-1074}};
        for (int k = 0; k < 5; k++) {
            ls_step_stats st;
            LS_REQUIRE_OK(ls_trainer_step(t, D, idx, 16, 16, &st));
            LS_EXPECT(st.skipped == 1);
            LS_EXPECT(st.loss_scale == used[i][k]);
        }
        LS_REQUIRE_OK(ls_trainer_get_loss_scaler(t, &sc));
        LS_EXPECT(sc.scale == (i == 0 ? floor_scale : starts[i]) && sc.skipped == 5 && sc.growth_tracker == 0);
        LS_EXPECT(ls_trainer_set_loss_scaler(t, &sc) == LS_OK); /* what a resume does with it */
        ls_trainer_destroy(t);
        ls_optimizer_destroy(o);
        ls_module_destroy(m);
    }
    ls_ctx_destroy(c);
}

static size_t step_peak(ls_precision prec) {
    ls_allocator *h;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &h));
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), h, &c));
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    int64_t B = 4096;
    build(c, NULL, prec, B, &m, &o, &t);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)B);
    for (int64_t i = 0; i < B; i++) idx[i] = i % D->n;
    LS_REQUIRE_OK(ls_trainer_step(t, D, idx, B, B, NULL));
    ls_memory_stats st;
    ls_allocator_stats(h, &st);
    free(idx);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_ctx_destroy(c);
    ls_allocator_destroy(h);
    return st.peak_bytes;
}

/* y of a forward of m (a bf16 input), copied out: n bf16 values. */
static void forward_bytes(ls_module *m, const ls_tensor *x, uint16_t *out, int64_t n) {
    const ls_tensor *y;
    LS_REQUIRE_OK(ls_module_forward(m, x, &y));
    LS_REQUIRE(y->dtype == LS_BF16 && ls_tensor_numel(y) == n);
    memcpy(out, y->data, sizeof(uint16_t) * (size_t)n);
}

static void weight_copies_case(void) {
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    enum { B = 4, IN = 24, OUT = 8, N = B * OUT };
    ls_module *lin;
    LS_REQUIRE_OK(ls_linear_create(c, LS_F32, IN, OUT, 1, 5, "fc", &lin));
    ls_tensor *x32, *x;
    LS_REQUIRE_OK(ls_tensor_create(c->alloc, LS_F32, 2, (int64_t[]){B, IN}, "input", &x32));
    LS_REQUIRE_OK(ls_tensor_create(c->alloc, LS_BF16, 2, (int64_t[]){B, IN}, "input", &x));
    for (int i = 0; i < B * IN; i++) ((float *)x32->data)[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    LS_REQUIRE_OK(ls_op_convert(c, x32, x));
    float *w = ls_module_param(lin, 0)->data;
    uint16_t y1[N], y2[N], y3[N], ref[N];
    LS_REQUIRE_OK(ls_module_cache_weight_casts(lin, 1));
    forward_bytes(lin, x, y1, N); /* no copies yet: cast here, kept for the epoch */
    for (int i = 0; i < IN * OUT; i++) w[i] *= 2.0f;
    forward_bytes(lin, x, y2, N);
    LS_EXPECT(memcmp(y1, y2, sizeof y1) == 0);           /* the epoch's copies, not the changed weight */
    LS_REQUIRE_OK(ls_module_cache_weight_casts(lin, 1)); /* a new epoch: every copy cast again */
    forward_bytes(lin, x, y3, N);
    LS_REQUIRE_OK(ls_module_cache_weight_casts(lin, 0));
    forward_bytes(lin, x, ref, N); /* cast at the forward */
    LS_EXPECT(memcmp(y3, ref, sizeof y3) == 0 && memcmp(y3, y1, sizeof y3) != 0);
    for (int i = 0; i < IN * OUT; i++) w[i] *= 0.5f;
    forward_bytes(lin, x, y2, N); /* off: every forward casts */
    LS_EXPECT(memcmp(y2, y1, sizeof y2) == 0);
    LS_EXPECT_ERR(ls_module_cache_weight_casts(NULL, 1), LS_ERR_INVALID_ARGUMENT, "the module is NULL");
    ls_tensor_destroy(x);
    ls_tensor_destroy(x32);
    ls_module_destroy(lin);

    /* the trainer: weights set between its calls are what the next step or evaluation uses */
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    build(c, NULL, LS_PRECISION_BF16, 16, &m, &o, &t);
    int64_t idx[64];
    for (int i = 0; i < 64; i++) idx[i] = i;
    ls_step_stats st;
    double loss;
    int64_t correct, zeros = 0;
    for (int i = 0; i < 64; i++) zeros += D->labels[i] == 0;
    LS_REQUIRE_OK(ls_trainer_step(t, D, idx, 16, 16, &st));
    LS_REQUIRE_OK(ls_trainer_evaluate(t, D, idx, 64, &loss, &correct)); /* copies cast before */
    LS_EXPECT(fabs(loss / 64 - log(10.0)) > 1e-3);
    for (int k = 4; k < 6; k++) { /* the last layer's weight and bias: zero logits */
        ls_tensor *p = ls_module_param(m, k);
        memset(p->data, 0, sizeof(float) * (size_t)ls_tensor_numel(p));
    }
    LS_REQUIRE_OK(ls_trainer_evaluate(t, D, idx, 64, &loss, &correct));
    /* every sample's loss is ln 10 (rounded to f32); argmax picks class 0 on the tie */
    printf("zero last layer: evaluation loss %.9f (ln 10 = %.9f), correct %lld (label 0: %lld)\n", loss / 64, log(10.0),
           (long long)correct, (long long)zeros);
    LS_EXPECT(fabs(loss / 64 - log(10.0)) < 1e-6 && correct == zeros);
    LS_REQUIRE_OK(ls_trainer_step(t, D, idx + 16, 16, 16, &st));
    LS_EXPECT(fabs(st.loss_sum / 16 - log(10.0)) < 1e-6);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_ctx_destroy(c);
}

int main(void) {
    ls_ctx *c0;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c0));
    LS_REQUIRE_OK(ls_comm_create(c0, NULL, &W));
    if (ls_fashion_mnist_load(getenv("LOCKSTEP_FASHION_DIR"), 1, 4096, &D) != LS_OK)
        LS_SKIP("Fashion-MNIST not available: %s", ls_last_error());
    overflow_case();
    inject_parse_case();
    inject_differs_case();
    if (ls_comm_rank(W) == 0) {
        scaler_case();
        floor_case();
        weight_copies_case();
        size_t p32 = step_peak(LS_PRECISION_FP32), pb = step_peak(LS_PRECISION_BF16), ph = step_peak(LS_PRECISION_FP16);
        printf("peak memory of a training step at batch 4096: fp32 %.1f MiB, bf16 %.1f MiB (%.0f%%), "
               "fp16 %.1f MiB (%.0f%%)\n",
               (double)p32 / 1048576, (double)pb / 1048576, 100.0 * (double)pb / (double)p32, (double)ph / 1048576,
               100.0 * (double)ph / (double)p32);
        LS_EXPECT(pb * 4 < p32 * 3);
        LS_EXPECT(ph * 4 < p32 * 3);
    }
    ls_dataset_destroy(D);
    ls_comm_destroy(W);
    ls_ctx_destroy(c0);
    LS_TEST_END();
}
