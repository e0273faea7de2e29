/* test_requires_grad.c: parameters frozen with ls_module_set_requires_grad (PyTorch's
 * requires_grad_(False)), against the guide's other way, leaving them out of the optimizer. For an
 * MLP, the same MLP checkpointed in 2 segments, and a small CNN (Conv2d, BatchNorm2d, a second of
 * each, Linear) with their first layers frozen:
 *  - training: 3 steps in f32, bf16 with clipping and fp16 (loss scaling) give bitwise the same
 *    parameters and batch-norm statistics either way, the frozen ones as they were;
 *  - backward alone: a frozen gradient poisoned beforehand is left as it was (its weight-gradient
 *    GEMM, its batch norm's sums not computed), the others and the input gradient (want_dx)
 *    bitwise those of the model with nothing frozen; a batch norm or Linear half frozen too;
 *  - the trainer's reducer (several ranks) holds the trained gradients only: its buckets are the
 *    frozen gradients' bytes smaller, and a frozen gradient set to a value of each rank's own keeps
 *    it through a step (not zeroed, not all-reduced), on one rank too;
 *  - a checkpoint of such a run resumes bitwise (the frozen weights are in it);
 *  - errors: a rank that freezes another set (LS_ERR_MISMATCH on every rank, naming parameter and
 *    rank), a frozen parameter in the optimizer, flags changed after ls_trainer_create, indices.
 * Under mpirun each rank steps its share of the batch. Args: [cpu|cuda] (cuda: exits 77 where no
 * GPU is usable). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cnn.h"
#include "data.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define N 64
#define F 36 /* 1 x 6 x 6 images for the CNN */
#define B 16

enum { MLP, MLP_CKPT, CNN, KINDS };
static const char *kind_name[KINDS] = {"mlp", "mlp checkpointed", "cnn"};
static const int kind_frozen[KINDS] = {2, 2, 3}; /* the first Linear; the first Conv2d and BatchNorm2d */
/* how the first kind_frozen parameters are frozen */
enum { NONE, OPTIM_ONLY, NO_GRAD, NO_GRAD_IN_OPTIM };

static ls_ctx *C;
static ls_comm *W;
static int Rank, World;
static ls_dataset *D;
static float *X;
static int32_t Y[N];

static ls_module *model(int kind) {
    ls_module *m;
    if (kind != CNN) {
        int64_t sizes[4] = {F, 16, 16, 10};
        LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 4, sizes, LS_ACT_RELU, 5, &m));
        if (kind == MLP_CKPT) LS_REQUIRE_OK(ls_checkpoint_sequential(m, 2, &m));
        return m;
    }
    ls_batchnorm_config relu = ls_batchnorm_defaults();
    relu.relu = 1;
    ls_module *l[7];
    LS_REQUIRE_OK(ls_reshape_create(C, 3, (int64_t[]){1, 6, 6}, &l[0]));
    LS_REQUIRE_OK(ls_conv2d_create(C, LS_F32, 1, 4, 3, 1, 1, 1, 0, 3, "", &l[1]));
    LS_REQUIRE_OK(ls_batchnorm2d_create(C, LS_F32, 4, &relu, "", &l[2]));
    LS_REQUIRE_OK(ls_conv2d_create(C, LS_F32, 4, 8, 3, 2, 1, 1, 1, 4, "", &l[3]));
    LS_REQUIRE_OK(ls_batchnorm2d_create(C, LS_F32, 8, &relu, "", &l[4]));
    LS_REQUIRE_OK(ls_global_avgpool_create(C, &l[5]));
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 8, 10, 1, 6, "", &l[6]));
    LS_REQUIRE_OK(ls_sequential_create(C, 7, l, &m));
    return m;
}

/* The model of kind with its first kind_frozen parameters frozen as mode says, SGD (momentum,
 * weight decay), and a trainer of this rank's B / World samples: the trainer's status. */
static ls_status make(int kind, int mode, double clip, ls_precision prec, ls_module **m, ls_optimizer **o,
                      ls_trainer **t) {
    *m = model(kind);
    const int nf = kind_frozen[kind], np = ls_module_num_params(*m);
    if (mode == NO_GRAD || mode == NO_GRAD_IN_OPTIM)
        for (int i = 0; i < nf; i++) LS_REQUIRE_OK(ls_module_set_requires_grad(*m, i, 0));
    const int first = mode == OPTIM_ONLY || mode == NO_GRAD ? nf : 0;
    ls_tensor *pa[16], *ga[16];
    for (int i = first; i < np; i++) {
        pa[i - first] = ls_module_param(*m, i);
        ga[i - first] = ls_module_grad(*m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = 0.05f;
    oc.momentum = 0.9f;
    oc.weight_decay = 1e-3f;
    LS_REQUIRE_OK(ls_optimizer_create(C, np - first, pa, ga, &oc, o));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B / World;
    tc.accum_steps = 1;
    tc.lr.base_lr = 0.05;
    tc.lr.kind = LS_LR_CONSTANT;
    tc.clip_grad_norm = clip;
    tc.precision = prec;
    *t = NULL;
    return ls_trainer_create(C, W, *m, *o, &tc, t);
}

static void free_run(ls_trainer *t, ls_optimizer *o, ls_module *m) {
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

/* Step k of a run: this rank's share of B samples. */
static void step(ls_trainer *t, int k) {
    int64_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = (i * 7 + 3 + 5 * k) % N;
    const int64_t mine = B / World;
    LS_REQUIRE_OK(ls_trainer_step(t, D, idx + Rank * mine, mine, B, NULL));
}

/* n floats of tensor t to host (malloc'd) or from host */
static float *to_host(const ls_tensor *t) {
    LS_REQUIRE_OK(ls_ctx_synchronize(C));
    size_t n = (size_t)ls_tensor_numel(t);
    float *h = malloc(sizeof(float) * (n ? n : 1));
    LS_REQUIRE(h);
    LS_REQUIRE_OK(ls_allocator_copy(C->alloc, h, 0, t->data, C->device.type != LS_DEVICE_CPU, sizeof(float) * n));
    return h;
}

static void fill(ls_tensor *t, float v) {
    size_t n = (size_t)ls_tensor_numel(t);
    float *h = malloc(sizeof(float) * n);
    LS_REQUIRE(h);
    for (size_t i = 0; i < n; i++) h[i] = v;
    LS_REQUIRE_OK(ls_allocator_copy(C->alloc, t->data, C->device.type != LS_DEVICE_CPU, h, 0, sizeof(float) * n));
    LS_REQUIRE_OK(ls_ctx_synchronize(C));
    free(h);
}

/* every element of t is v */
static int all_equal(const ls_tensor *t, float v) {
    float *h = to_host(t);
    int ok = 1;
    for (int64_t i = 0; i < ls_tensor_numel(t); i++) ok &= h[i] == v;
    free(h);
    return ok;
}

static int same_tensor(const ls_tensor *a, const ls_tensor *b) {
    float *ha = to_host(a), *hb = to_host(b);
    int same = memcmp(ha, hb, sizeof(float) * (size_t)ls_tensor_numel(a)) == 0;
    free(ha);
    free(hb);
    return same;
}

/* The batch norms' running statistics of m, concatenated (malloc'd; *n floats). */
static float *buffers_to_host(ls_module *m, int64_t *n) {
    int nb = ls_cnn_num_buffers(m);
    *n = 0;
    for (int i = 0; i < nb; i++) *n += ls_tensor_numel(ls_cnn_buffer(m, i, NULL, 0));
    float *out = malloc(sizeof(float) * (size_t)(*n + 1));
    LS_REQUIRE(out);
    for (int i = 0, off = 0; i < nb; i++) {
        const ls_tensor *b = ls_cnn_buffer(m, i, NULL, 0);
        float *h = to_host(b);
        memcpy(out + off, h, sizeof(float) * (size_t)ls_tensor_numel(b));
        off += (int)ls_tensor_numel(b);
        free(h);
    }
    return out;
}

static int64_t frozen_elements(ls_module *m, int nf) {
    int64_t n = 0;
    for (int i = 0; i < nf; i++) n += ls_tensor_numel(ls_module_param(m, i));
    return n;
}

/* (a) 3 steps frozen either way: the same bits; the frozen parameters as they were. */
static void check_training(int kind, ls_precision prec, double clip) {
    float *p[2], *buf[2], *p0 = NULL;
    int64_t np = 0, nb = 0, nf = 0;
    for (int r = 0; r < 2; r++) {
        ls_module *m;
        ls_optimizer *o;
        ls_trainer *t;
        LS_REQUIRE_OK(make(kind, r ? NO_GRAD : OPTIM_ONLY, clip, prec, &m, &o, &t));
        if (!p0) p0 = params_to_host(C, m, &np);
        nf = frozen_elements(m, kind_frozen[kind]);
        for (int k = 0; k < 3; k++) step(t, k);
        p[r] = params_to_host(C, m, &np);
        buf[r] = buffers_to_host(m, &nb);
        free_run(t, o, m);
    }
    int moved = 0;
    for (int64_t i = nf; i < np; i++) moved += p[1][i] != p0[i];
    const int same = memcmp(p[0], p[1], sizeof(float) * (size_t)np) == 0;
    const int kept = memcmp(p0, p[1], sizeof(float) * (size_t)nf) == 0;
    const int same_stats = memcmp(buf[0], buf[1], sizeof(float) * (size_t)nb) == 0;
    printf("rank %d %s %s clip %g: parameters %s, frozen %s, %d of %lld trained moved, batch-norm statistics %s\n",
           Rank, kind_name[kind], ls_precision_name(prec), clip, same ? "equal" : "DIFFER",
           kept ? "unchanged" : "CHANGED", moved, (long long)(np - nf), same_stats ? "equal" : "DIFFER");
    LS_EXPECT(same);
    LS_EXPECT(kept);
    LS_EXPECT(same_stats);
    LS_EXPECT(moved > (np - nf) / 2);
    for (int r = 0; r < 2; r++) {
        free(p[r]);
        free(buf[r]);
    }
    free(p0);
}

/* (c) one forward and backward of model a (nothing frozen) and of b (frozen[i]: parameter i),
 * b's frozen gradients poisoned first: they stay so, the others and the input gradient as a's. */
static void check_backward(int kind, const unsigned char *frozen, const char *what) {
    ls_module *a = model(kind), *b = model(kind);
    const int np = ls_module_num_params(a);
    for (int i = 0; i < np; i++)
        if (frozen[i]) LS_REQUIRE_OK(ls_module_set_requires_grad(b, i, 0));
    ls_tensor *x;
    LS_REQUIRE_OK(ls_tensor_create(C->alloc, LS_F32, 2, (int64_t[]){B, F}, "input", &x));
    LS_REQUIRE_OK(ls_allocator_copy(C->alloc, x->data, C->device.type != LS_DEVICE_CPU, X, 0, sizeof(float) * B * F));
    ls_tensor *labels;
    LS_REQUIRE_OK(ls_tensor_create(C->alloc, LS_I32, 1, (int64_t[]){B}, "labels", &labels));
    LS_REQUIRE_OK(
        ls_allocator_copy(C->alloc, labels->data, C->device.type != LS_DEVICE_CPU, Y, 0, sizeof(int32_t) * B));
    for (int want_dx = 0; want_dx <= 1; want_dx++) {
        const ls_tensor *dx[2] = {NULL, NULL};
        ls_xent *loss[2];
        for (int r = 0; r < 2; r++) {
            ls_module *m = r ? b : a;
            LS_REQUIRE_OK(ls_module_zero_grad(m));
            for (int i = 0; i < np; i++)
                if (r && frozen[i]) fill(ls_module_grad(m, i), 7.0f);
            const ls_tensor *y, *dl;
            LS_REQUIRE_OK(ls_xent_create(C, &loss[r]));
            LS_REQUIRE_OK(ls_module_forward(m, x, &y));
            LS_REQUIRE_OK(ls_xent_forward(loss[r], y, labels, NULL));
            LS_REQUIRE_OK(ls_xent_backward(loss[r], 1.0 / B, &dl));
            LS_REQUIRE_OK(ls_module_backward(m, dl, want_dx, &dx[r]));
        }
        int poisoned = 1, same = 1;
        for (int i = 0; i < np; i++) {
            if (frozen[i])
                poisoned &= all_equal(ls_module_grad(b, i), 7.0f);
            else
                same &= same_tensor(ls_module_grad(a, i), ls_module_grad(b, i));
        }
        const int same_dx = !want_dx || (dx[0] && dx[1] && same_tensor(dx[0], dx[1]));
        printf("%s, %s frozen, want_dx %d: frozen gradients %s, the others %s%s\n", kind_name[kind], what, want_dx,
               poisoned ? "untouched" : "OVERWRITTEN", same ? "equal" : "DIFFER",
               !want_dx  ? ""
               : same_dx ? ", input gradient equal"
                         : ", input gradient DIFFERS");
        LS_EXPECT(poisoned);
        LS_EXPECT(same);
        LS_EXPECT(same_dx);
        ls_xent_destroy(loss[0]);
        ls_xent_destroy(loss[1]);
    }
    ls_tensor_destroy(x);
    ls_tensor_destroy(labels);
    ls_module_destroy(a);
    ls_module_destroy(b);
}

/* (b) the reducer's buckets hold the trained gradients only; a frozen gradient is left alone. */
static void check_reducer(int kind) {
    size_t bytes[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
        ls_module *m;
        ls_optimizer *o;
        ls_trainer *t;
        LS_REQUIRE_OK(make(kind, r ? NO_GRAD : OPTIM_ONLY, 0, LS_PRECISION_FP32, &m, &o, &t));
        const ls_reducer *red = ls_trainer_reducer(t);
        LS_EXPECT((red != NULL) == (World > 1));
        for (int k = 0; red && k < ls_reducer_num_buckets(red); k++) {
            ls_reducer_bucket_info bi;
            LS_REQUIRE_OK(ls_reducer_bucket(red, k, &bi));
            bytes[r] += bi.bytes;
        }
        if (r) { /* each rank's own value in the frozen gradients, through a step */
            const int nf = kind_frozen[kind];
            for (int i = 0; i < nf; i++) fill(ls_module_grad(m, i), 100.0f + (float)Rank);
            step(t, 0);
            int kept = 1;
            for (int i = 0; i < nf; i++) kept &= all_equal(ls_module_grad(m, i), 100.0f + (float)Rank);
            printf("rank %d %s: frozen gradients %s after a step\n", Rank, kind_name[kind],
                   kept ? "keep this rank's value" : "CHANGED");
            LS_EXPECT(kept);
            size_t want = bytes[0] - sizeof(float) * (size_t)frozen_elements(m, nf);
            printf("rank %d %s: bucket bytes %zu with the first layers left out of the optimizer, %zu frozen "
                   "(want %zu)\n",
                   Rank, kind_name[kind], bytes[0], bytes[1], World > 1 ? want : 0);
            LS_EXPECT(bytes[1] == (World > 1 ? want : 0));
        }
        free_run(t, o, m);
    }
}

/* A checkpoint of a frozen run resumes bitwise, the frozen weights loaded from it. */
static void check_resume(void) {
    char dir[64];
    snprintf(dir, sizeof dir, "requires_grad_ckpt_w%d", World);
    if (Rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        LS_REQUIRE(system(cmd) == 0);
    }
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    int64_t np;
    LS_REQUIRE_OK(make(CNN, NO_GRAD, 0, LS_PRECISION_FP32, &m, &o, &t));
    float *p0 = params_to_host(C, m, &np);
    for (int k = 0; k < 2; k++) step(t, k);
    ls_ckpt_state st;
    memset(&st, 0, sizeof st);
    st.step = 2;
    st.world_size = World;
    st.batch_per_rank = B / World;
    st.accum_steps = 1;
    st.optim = ls_optimizer_config(o);
    char path[LS_CKPT_PATH_MAX];
    LS_REQUIRE_OK(ls_ckpt_save(W, C, dir, 1, m, o, &st, path, sizeof path));
    for (int k = 2; k < 4; k++) step(t, k);
    float *want = params_to_host(C, m, &np);
    float *want_buf;
    int64_t nb;
    want_buf = buffers_to_host(m, &nb);
    free_run(t, o, m);

    LS_REQUIRE_OK(make(CNN, NO_GRAD, 0, LS_PRECISION_FP32, &m, &o, &t));
    fill(ls_module_param(m, 0), 0.5f); /* the frozen weights must come from the checkpoint */
    ls_ckpt_state got;
    int found = 0;
    LS_REQUIRE_OK(ls_ckpt_load(W, C, dir, "auto", m, o, &got, &found, path, sizeof path));
    LS_EXPECT(found == 1);
    ls_trainer_set_num_steps(t, got.step);
    float *loaded = params_to_host(C, m, &np);
    const int64_t nf = frozen_elements(m, kind_frozen[CNN]);
    LS_EXPECT(memcmp(loaded, p0, sizeof(float) * (size_t)nf) == 0);
    for (int k = 2; k < 4; k++) step(t, k);
    float *p = params_to_host(C, m, &np), *buf = buffers_to_host(m, &nb);
    /* the batch-norm statistics are each rank's own, and a checkpoint holds rank 0's */
    const int same = memcmp(p, want, sizeof(float) * (size_t)np) == 0 &&
                     (Rank != 0 || memcmp(buf, want_buf, sizeof(float) * (size_t)nb) == 0);
    printf("rank %d: resumed run %s the uninterrupted one\n", Rank, same ? "bitwise" : "DIFFERS FROM");
    LS_EXPECT(same);
    free_run(t, o, m);
    free(p0);
    free(want);
    free(want_buf);
    free(loaded);
    free(p);
    free(buf);
}

static void check_errors(void) {
    ls_module *m;
    ls_optimizer *o;
    ls_trainer *t;
    char want[256];
    /* the flags through containers, and bad indices */
    m = model(MLP);
    LS_REQUIRE_OK(ls_module_set_requires_grad(ls_module_child(m, 0), -1, 0));
    LS_EXPECT(ls_module_requires_grad(m, 0) == 0 && ls_module_requires_grad(m, 1) == 0);
    LS_EXPECT(ls_module_requires_grad(m, 2) == 1 && ls_module_requires_grad(m, 5) == 1);
    LS_EXPECT(ls_module_requires_grad(m, 6) == -1 && ls_module_requires_grad(NULL, 0) == -1);
    LS_EXPECT_ERR(ls_module_set_requires_grad(m, 6, 0), LS_ERR_INVALID_ARGUMENT,
                  "parameter 6 of a Sequential with 6 parameters (-1: all of them)");
    LS_EXPECT_ERR(ls_module_set_requires_grad(m, -2, 0), LS_ERR_INVALID_ARGUMENT, "parameter -2 of a Sequential");
    LS_REQUIRE_OK(ls_checkpoint_sequential(m, 2, &m)); /* the flags are the layers': wrapped, the same */
    LS_EXPECT(ls_module_requires_grad(m, 1) == 0 && ls_module_requires_grad(m, 2) == 1);
    LS_REQUIRE_OK(ls_module_set_requires_grad(m, -1, 1));
    LS_EXPECT(ls_module_requires_grad(ls_module_child(m, 0), 0) == 1);
    ls_module_destroy(m);

    /* a frozen parameter in the optimizer: it would be stepped on a gradient never computed */
    LS_EXPECT_ERR(make(MLP, NO_GRAD_IN_OPTIM, 0, LS_PRECISION_FP32, &m, &o, &t), LS_ERR_INVALID_ARGUMENT,
                  "the model's parameter 0 (0.weight) needs no gradient (ls_module_set_requires_grad) but is the "
                  "optimizer's parameter 0");
    LS_EXPECT(t == NULL);
    free_run(t, o, m);

    /* frozen after the trainer was made */
    LS_REQUIRE_OK(make(MLP, NONE, 0, LS_PRECISION_FP32, &m, &o, &t));
    LS_REQUIRE_OK(ls_module_set_requires_grad(m, 2, 0));
    int64_t idx[B];
    for (int i = 0; i < B; i++) idx[i] = i;
    LS_EXPECT_ERR(ls_trainer_step(t, D, idx, B / World, B, NULL), LS_ERR_INVALID_ARGUMENT,
                  "the model's parameter 2 (2.weight) was frozen (ls_module_set_requires_grad) after the trainer was "
                  "made");
    free_run(t, o, m);

    /* the last rank freezes the first layer (no gradient), the others leave it out of the optimizer */
    if (World > 1) {
        ls_status s = make(MLP, Rank == World - 1 ? NO_GRAD : OPTIM_ONLY, 0, LS_PRECISION_FP32, &m, &o, &t);
        snprintf(want, sizeof want,
                 "parameter 0 (0.weight) is 'frozen (requires no gradient)' on rank %d but 'frozen (not in the "
                 "optimizer)' on rank 0",
                 World - 1);
        printf("rank %d: a frozen set of another rank: %s\n", Rank, ls_last_error());
        LS_EXPECT(s == LS_ERR_MISMATCH && strstr(ls_last_error(), want));
        free_run(t, o, m);
    }
}

int main(int argc, char **argv) {
    LS_REQUIRE_OK(ls_ctx_create(mlp_device_arg(argc, argv), NULL, &C));
    LS_REQUIRE_OK(ls_comm_create(C, NULL, &W)); /* under mpirun: this rank's samples are its share */
    Rank = ls_comm_rank(W);
    World = ls_comm_world(W);
    if (B % World != 0) LS_SKIP("%d ranks: the world size must divide %d", World, B);
    X = mlp_points(N, F, 31, Y);
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, X, Y, &D));

    for (int kind = 0; kind < KINDS; kind++) {
        check_training(kind, LS_PRECISION_FP32, 0);
        check_training(kind, LS_PRECISION_BF16, 0.05);
        check_training(kind, LS_PRECISION_FP16, 0);
    }
    unsigned char frozen[16] = {0};
    for (int kind = 0; kind < KINDS; kind += 2) { /* the MLP and the CNN */
        memset(frozen, 0, sizeof frozen);
        memset(frozen, 1, (size_t)kind_frozen[kind]);
        check_backward(kind, frozen, "the first layers");
        memset(frozen, 0, sizeof frozen);
        frozen[1] = 1; /* the batch norm's weight (its bias trains); the Linear's bias */
        check_backward(kind, frozen, kind == CNN ? "the first batch norm's weight" : "the first bias");
        memset(frozen, 0, sizeof frozen);
        frozen[kind == CNN ? 3 : 2] = 1; /* a weight in the middle (the layers before it train) */
        check_backward(kind, frozen, "the second layer's weight");
    }
    check_reducer(MLP);
    check_reducer(CNN);
    check_resume();
    check_errors();

    ls_dataset_destroy(D);
    free(X);
    ls_comm_destroy(W);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
