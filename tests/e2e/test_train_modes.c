/* test_train_modes.c: ls_trainer_evaluate turns dropout and batch norm's batch statistics off for
 * its forwards, and then puts back the modes the program had set, module by module. It set every
 * module to training mode afterwards, so a Dropout (or a frozen batch norm) the program had put in
 * eval mode trained in training mode after the first evaluation. Here a ReLU MLP with a Dropout(0.5)
 * that the program holds: with the Dropout in eval mode, a step's loss is the evaluation's loss of
 * the same batch at the same parameters, before and after an evaluation; in training mode (the
 * check that tells the two apart) it is not; the whole model in eval mode stays so too. Then a
 * small ResNet (ls_resnet_create) whose every BatchNorm2d a walk over ls_module_child finds and
 * puts in eval mode (a frozen batch norm, as in fine-tuning): its running statistics stay bitwise
 * through steps and evaluations; in training mode they move.
 * Args: [cpu|cuda] (cuda: exits 77 where no GPU is usable). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "data.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

#define N 64
#define F 12
#define B 32

static ls_ctx *C;
static ls_trainer *T;
static ls_dataset *D;
static int64_t Idx[B];

/* The evaluation's loss of the batch, then a step's (at the same parameters) */
static void eval_then_step(double *ev, double *step) {
    int64_t correct;
    LS_REQUIRE_OK(ls_trainer_evaluate(T, D, Idx, B, ev, &correct));
    ls_step_stats st;
    LS_REQUIRE_OK(ls_trainer_step(T, D, Idx, B, B, &st));
    *step = st.loss_sum;
}

/* SGD at lr 0.01 over every parameter of m, and a one-rank trainer of batch B */
static void sgd_trainer(ls_module *m, ls_optimizer **o, ls_trainer **t) {
    int np = ls_module_num_params(m);
    ls_tensor **pa = calloc((size_t)np, sizeof *pa), **ga = calloc((size_t)np, sizeof *ga);
    LS_REQUIRE(pa && ga);
    for (int i = 0; i < np; i++) {
        pa[i] = ls_module_param(m, i);
        ga[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    oc.lr = 0.01f;
    LS_REQUIRE_OK(ls_optimizer_create(C, np, pa, ga, &oc, o));
    free(pa);
    free(ga);
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = B;
    tc.accum_steps = 1;
    tc.lr.base_lr = 0.01f;
    LS_REQUIRE_OK(ls_trainer_create(C, NULL, m, *o, &tc, t));
}

/* Sets every BatchNorm2d in m (m too) to training mode `on`; returns how many it found. */
static int set_bn_training(ls_module *m, int on) {
    int n = 0;
    if (!strcmp(ls_module_kind(m), "BatchNorm2d")) {
        ls_module_set_training(m, on);
        n++;
    }
    for (int i = 0; i < ls_module_num_children(m); i++) n += set_bn_training(ls_module_child(m, i), on);
    return n;
}

/* m's buffers (the running statistics, f32) copied to the host */
static float *buffers_to_host(ls_module *m, int64_t *total) {
    LS_REQUIRE_OK(ls_ctx_synchronize(C));
    *total = 0;
    for (int i = 0; i < ls_cnn_num_buffers(m); i++) *total += ls_tensor_numel(ls_cnn_buffer(m, i, NULL, 0));
    float *out = malloc(sizeof(float) * (size_t)*total);
    LS_REQUIRE(out);
    int64_t off = 0;
    for (int i = 0; i < ls_cnn_num_buffers(m); i++) {
        ls_tensor *b = ls_cnn_buffer(m, i, NULL, 0);
        LS_REQUIRE(b->dtype == LS_F32);
        LS_REQUIRE_OK(ls_allocator_copy(C->alloc, out + off, 0, b->data, C->device.type != LS_DEVICE_CPU,
                                        sizeof(float) * (size_t)ls_tensor_numel(b)));
        off += ls_tensor_numel(b);
    }
    return out;
}

/* A ResNet's batch norms frozen through a walk of its modules */
static void frozen_resnet(void) {
    ls_resnet_config rc = {LS_F32, LS_F32, 1, 8, 8, 2, {4, 8}, 1, 10, 21, NULL, 0};
    ls_module *m;
    LS_REQUIRE_OK(ls_resnet_create(C, &rc, &m));
    LS_EXPECT(!strcmp(ls_module_kind(m), "Sequential"));
    LS_EXPECT(ls_module_child(m, -1) == NULL && ls_module_child(m, ls_module_num_children(m)) == NULL);
    LS_EXPECT(!strcmp(ls_module_kind(NULL), "?") && ls_module_num_children(NULL) == 0 && !ls_module_child(NULL, 0));
    int running_means = 0;
    for (int i = 0; i < ls_cnn_num_buffers(m); i++) {
        char name[128];
        ls_cnn_buffer(m, i, name, sizeof name);
        running_means += strstr(name, "running_mean") != NULL;
    }
    const int nbn = set_bn_training(m, 0);
    printf("resnet: %d BatchNorm2d found by the walk, %d running_mean buffers\n", nbn, running_means);
    LS_EXPECT(nbn == running_means && nbn >= 4);
    ls_optimizer *o;
    ls_trainer *t;
    sgd_trainer(m, &o, &t);
    int32_t y[N];
    float *x = mlp_points(N, 64, 8, y);
    ls_dataset *d;
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, 64, 10, x, y, &d));
    int64_t nb, nb2;
    float *before = buffers_to_host(m, &nb);
    for (int k = 0; k < 2; k++) {
        ls_step_stats st;
        LS_REQUIRE_OK(ls_trainer_step(t, d, Idx, B, B, &st));
        double ev;
        int64_t correct;
        LS_REQUIRE_OK(ls_trainer_evaluate(t, d, Idx, B, &ev, &correct));
    }
    float *after = buffers_to_host(m, &nb2);
    LS_EXPECT(nb == nb2 && !memcmp(before, after, sizeof(float) * (size_t)nb));
    /* in training mode the statistics move (the check above can tell) */
    LS_EXPECT(set_bn_training(m, 1) == nbn);
    ls_step_stats st;
    LS_REQUIRE_OK(ls_trainer_step(t, d, Idx, B, B, &st));
    float *trained = buffers_to_host(m, &nb2);
    LS_EXPECT(memcmp(after, trained, sizeof(float) * (size_t)nb) != 0);
    free(before);
    free(after);
    free(trained);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(d);
    free(x);
}

/* Twice (the second after an evaluation had run): a step's loss is the evaluation's, no dropout */
static void expect_no_dropout(const char *what) {
    for (int k = 0; k < 2; k++) {
        double ev, st;
        eval_then_step(&ev, &st);
        printf("%s, round %d: evaluate %.6f, step %.6f\n", what, k, ev, st);
        LS_EXPECT_NEAR(st, ev, 1e-5 * ev);
    }
}

int main(int argc, char **argv) {
    LS_REQUIRE_OK(ls_ctx_create(mlp_device_arg(argc, argv), NULL, &C));
    int32_t y[N];
    float *x = mlp_points(N, F, 5, y);
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &D));
    ls_module *layer[5], *m, *drop;
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, F, 64, 1, 11, "fc1", &layer[0]));
    LS_REQUIRE_OK(ls_activation_create(C, LS_ACT_RELU, &layer[1]));
    LS_REQUIRE_OK(ls_dropout_create(C, 0.5f, 3, &drop));
    layer[2] = drop;
    LS_REQUIRE_OK(ls_linear_create(C, LS_F32, 64, 10, 1, 12, "fc2", &layer[3]));
    LS_REQUIRE_OK(ls_sequential_create(C, 4, layer, &m));
    ls_optimizer *o;
    sgd_trainer(m, &o, &T);
    for (int i = 0; i < B; i++) Idx[i] = (i * 5) % N;

    double ev, st;
    /* training mode: the step's dropout changes the loss (the check below can tell) */
    eval_then_step(&ev, &st);
    printf("dropout in training mode: evaluate %.6f, step %.6f\n", ev, st);
    LS_EXPECT(fabs(st - ev) > 1e-3 * ev);
    /* the program's Dropout in eval mode: the step is the evaluation, twice (the second after an
     * evaluation had run) */
    ls_module_set_training(drop, 0);
    expect_no_dropout("dropout in eval mode");
    /* back in training mode */
    ls_module_set_training(drop, 1);
    eval_then_step(&ev, &st);
    LS_EXPECT(fabs(st - ev) > 1e-3 * ev);
    /* the whole model in eval mode */
    ls_module_set_training(m, 0);
    expect_no_dropout("model in eval mode");
    frozen_resnet();
    ls_trainer_destroy(T);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_dataset_destroy(D);
    free(x);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
