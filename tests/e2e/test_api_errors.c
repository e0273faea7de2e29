/* test_api_errors.c: misuse of the C API that used to return LS_OK with a wrong result, or crash, is
 * an error naming the argument and the problem:
 * - a trainer given an optimizer made for another model (it stepped tensors nobody computed, and
 *   the model never learned), or a NULL optimizer or model (a crash at the first step);
 * - a learning-rate schedule with NaN or a negative rate, a NaN clipping norm, an unknown
 *   precision; an optimizer config whose kind is neither SGD nor AdamW (a crash at its step);
 * - global_count that does not count this rank's samples (the gradient's divisor);
 * - a NaN or inf in a data set made from arrays (ReLU turned it into a dead model with a finite
 *   loss), or in a byte set's lookup table;
 * - a checkpoint state that its own load would refuse (world_size 0), saved as if it were fine;
 * - a host allocation of SIZE_MAX bytes (rounding wrapped it to a 64-byte block);
 * - ls_trainer_evaluate with a negative count, NULL data sets and indices, and a bad index in a
 *   later chunk (the error, naming its place in idx, not in its chunk; then the same sums as
 *   before it), and a bad index in a step's third micro-batch (named by its place in idx);
 * - a sequential container given the same child twice (it was destroyed twice), or a NULL one; a
 *   residual block given one module as its body and shortcut (destroyed twice); the cnn.h builders
 *   given out NULL (a crash writing the module there) or a reshape no shape; the parsers (dtype,
 *   precision, schedule, optimizer, log level, memory size, device) given out NULL;
 * - a model with fewer outputs than the data set's classes (an error on some label, naming neither);
 * - a checkpoint saved without an optimizer (ls_ckpt_save wrote one its resume refused);
 * - ls_checkpoint_sequential of a model a trainer holds (the trainer went on with the freed
 *   container: a use after free);
 * - a NULL context given to a layer's builder (LS_OK, then a crash at the first forward), a linear
 *   layer of f16, bf16 or u8 parameters (a heap overflow before the refusal), a tensor of a dtype
 *   that is none;
 * - NULL objects given to the builders, forward, the optimizer's step (and a NaN lr), tensor,
 *   context and memory calls, the loss and the gradient norm;
 * - an optimizer given one parameter (or gradient) twice: stepped twice a step;
 * - a hand-filled data set without labels (a crash in the gather);
 * - a LOCKSTEP_TF32 or LOCKSTEP_GPU_MEMORY that means nothing (or repeats reserve or limit), at any context's creation (they
 *   were read, and checked, only on a GPU);
 * - a batch of INT64_MAX samples a step (the step losses' buffer size wrapped to 64 bytes);
 * - a LOCKSTEP_GATHER_THREADS that is no thread count (it was checked only where an f32 batch was
 *   staged for a GPU; now at trainer creation, on any device), a LOCKSTEP_CKPT_CRASH_AT that names
 *   no stage (the crash a test asked for never came).
 * Last, the right calls still work: an optimizer over some of the model's parameters (others
 * frozen) trains. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "cnn.h"
#include "data.h"
#include "log.h"
#include "mlp_run.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

enum { N = 64, F = 12 };

static ls_train_config config(void) {
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 8;
    tc.accum_steps = 1;
    tc.lr.base_lr = 0.05f;
    return tc;
}

int main(void) {
    ls_ctx *c = NULL;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    float *x = malloc(sizeof(float) * N * F);
    int32_t y[N];
    LS_REQUIRE(x);
    for (int i = 0; i < N * F; i++) x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < N; i++) y[i] = i % 10;
    ls_dataset *d = NULL;
    LS_REQUIRE_OK(ls_dataset_from_arrays(N, F, 10, x, y, &d));
    int64_t idx[8];
    for (int i = 0; i < 8; i++) idx[i] = i * 3;

    /* data: non-finite inputs */
    ls_dataset *bad = NULL;
    x[5 * F + 3] = NAN;
    LS_EXPECT_ERR(ls_dataset_from_arrays(N, F, 10, x, y, &bad), LS_ERR_INVALID_ARGUMENT,
                  "ls_dataset_from_arrays: sample 5, feature 3 is nan");
    x[5 * F + 3] = INFINITY;
    LS_EXPECT_ERR(ls_dataset_from_arrays(N, F, 10, x, y, &bad), LS_ERR_INVALID_ARGUMENT, "feature 3 is inf");
    x[5 * F + 3] = 0;
    LS_EXPECT(bad == NULL);
    uint8_t bytes[N * F] = {0};
    float lut[256] = {0};
    lut[200] = NAN;
    LS_EXPECT_ERR(ls_dataset_from_bytes(N, F, 10, bytes, lut, y, &bad), LS_ERR_INVALID_ARGUMENT,
                  "ls_dataset_from_bytes: lut[200] is nan");

    /* two models: the optimizer of B given with model A */
    ls_module *a = NULL, *b = NULL;
    ls_optimizer *oa = NULL, *ob = NULL;
    mlp_sgd(c, F, 0.05f, &a, &oa);
    mlp_sgd(c, F, 0.05f, &b, &ob);
    ls_train_config tc = config();
    ls_trainer *t = NULL;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, ob, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "the optimizer's parameter 0 ([40, 12] f32 cpu) is not one of the model's");
    LS_EXPECT(t == NULL);
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, NULL, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_create: the optimizer is NULL");
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, NULL, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_create: the model is NULL");
    /* an optimizer over the model's parameter 0 with model B's gradient for it */
    ls_tensor *p0 = ls_module_param(a, 0);
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    ls_optimizer *mixed = NULL;
    ls_tensor *g0 = ls_module_grad(a, 0);
    ls_tensor *pl[1] = {p0}, *gl[1] = {ls_module_grad(b, 0)};
    LS_REQUIRE_OK(ls_optimizer_create(c, 1, pl, gl, &oc, &mixed));
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, mixed, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "the optimizer's parameter 0 is the model's parameter 0, but its gradient is not "
                  "ls_module_grad(model, 0)");
    ls_optimizer_destroy(mixed);

    /* the optimizer config */
    oc.kind = (ls_optim_kind)9;
    LS_EXPECT_ERR(ls_optimizer_create(c, 1, pl, &g0, &oc, &mixed), LS_ERR_INVALID_ARGUMENT,
                  "optimizer: kind 9 is neither LS_OPTIM_SGD nor LS_OPTIM_ADAMW");
    oc = ls_optim_defaults(LS_OPTIM_SGD);
    ls_tensor *none[1] = {NULL};
    LS_EXPECT_ERR(ls_optimizer_create(c, 1, none, &g0, &oc, &mixed), LS_ERR_INVALID_ARGUMENT,
                  "optimizer: parameter 0 is NULL");
    /* a tensor listed twice would be stepped twice */
    ls_tensor *p1 = ls_module_param(a, 1), *g1 = ls_module_grad(a, 1);
    LS_EXPECT_ERR(ls_optimizer_create(c, 3, (ls_tensor *[]){p0, p1, p0}, (ls_tensor *[]){g0, g1, g0}, &oc, &mixed),
                  LS_ERR_INVALID_ARGUMENT, "optimizer: parameters 0 and 2 are the same tensor; list each once");
    LS_EXPECT_ERR(ls_optimizer_create(c, 2, (ls_tensor *[]){p0, p1}, (ls_tensor *[]){g0, g0}, &oc, &mixed),
                  LS_ERR_INVALID_ARGUMENT, "optimizer: gradients 0 and 1 are the same tensor");
    LS_EXPECT(mixed == NULL);

    /* the trainer's schedule and settings */
    tc.lr.base_lr = NAN;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "learning-rate schedule: base_lr is nan; it must be finite and >= 0");
    tc.lr.base_lr = -1;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT, "base_lr is -1");
    /* lr.base_lr left 0 (the optimizer's lr not copied): a valid schedule that never trains, so a
     * warning says it (there was none: every step left the weights as they were) */
    {
        tc.lr.base_lr = 0;
        fflush(stderr);
        FILE *cap = tmpfile();
        LS_REQUIRE(cap);
        int saved = dup(2);
        LS_REQUIRE(saved >= 0 && dup2(fileno(cap), 2) >= 0);
        ls_status s0 = ls_trainer_create(c, NULL, a, oa, &tc, &t);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char log[1024] = "";
        rewind(cap);
        log[fread(log, 1, sizeof log - 1, cap)] = '\0';
        fclose(cap);
        LS_EXPECT(s0 == LS_OK && strstr(log, "the trainer's lr.base_lr is 0 (the optimizer's lr is 0.05,"));
        ls_trainer_destroy(t);
        t = NULL;
    }
    tc = config();
    tc.lr.warmup_steps = -5;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "learning-rate schedule: warmup_steps is -5; it must be >= 0");
    tc = config();
    tc.clip_grad_norm = NAN;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "clip_grad_norm nan must be finite and >= 0 (0: off)");
    tc = config();
    tc.precision = (ls_precision)9;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "precision 9 is not LS_PRECISION_FP32");
    tc = config();
    tc.batch_per_rank = INT64_MAX / 2;
    tc.accum_steps = 4;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "x 4 accumulation steps is more than 2^40 samples a step");
    /* a batch whose product fits int64 but whose losses' buffer size wrapped: INT64_MAX x 1 was
     * accepted and evaluation wrote past a 64-byte buffer (ASan: heap-buffer-overflow) */
    tc.batch_per_rank = INT64_MAX;
    tc.accum_steps = 1;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "batch size 9223372036854775807 x 1 accumulation steps is more than 2^40 samples a step");
    tc.batch_per_rank = ((int64_t)1 << 39) + 1;
    tc.accum_steps = 2;
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "batch size 549755813889 x 2 accumulation steps is more than 2^40 samples a step");

    /* a variable read at creation, wherever it applies (here: never, on the CPU) */
    tc = config();
    setenv("LOCKSTEP_GATHER_THREADS", "0", 1);
    LS_EXPECT_ERR(ls_trainer_create(c, NULL, a, oa, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GATHER_THREADS='0': use a thread count from 1 to 64");
    unsetenv("LOCKSTEP_GATHER_THREADS");
    /* the GPU's variables, checked by every context: on the CPU, where they do nothing, a typo was
     * ignored, to fail only on the GPU machine */
    ls_ctx *c2 = NULL;
    setenv("LOCKSTEP_TF32", "yes", 1);
    LS_EXPECT_ERR(ls_ctx_create(ls_device_cpu(), NULL, &c2), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_TF32=yes: expected 1, on or true (TF32 tensor cores for f32 GEMMs), or 0, off or false");
    LS_EXPECT(c2 == NULL);
    setenv("LOCKSTEP_TF32", "on", 1);
    setenv("LOCKSTEP_GPU_MEMORY", "limit:48GiB,reserve", 1);
    LS_EXPECT_ERR(ls_ctx_create(ls_device_cpu(), NULL, &c2), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY: 'reserve' is not one of grow, reserve:FRACTION, reserve:SIZE, limit:SIZE");
    setenv("LOCKSTEP_GPU_MEMORY", " ", 1); /* it quoted the item as '' */
    LS_EXPECT_ERR(ls_ctx_create(ls_device_cpu(), NULL, &c2), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY=' ' holds an empty item");
    /* a repeated reserve or limit: the last one, or a size over a fraction, won without a word */
    setenv("LOCKSTEP_GPU_MEMORY", "reserve:0.9,limit:48GiB,reserve:0.5", 1);
    LS_EXPECT_ERR(ls_ctx_create(ls_device_cpu(), NULL, &c2), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_GPU_MEMORY=reserve:0.9,limit:48GiB,reserve:0.5: 'reserve:0.5' after 'reserve:0.9': give "
                  "reserve and limit at most once each");
    setenv("LOCKSTEP_GPU_MEMORY", "limit:48GiB,limit:2GiB", 1);
    LS_EXPECT_ERR(ls_ctx_create(ls_device_cpu(), NULL, &c2), LS_ERR_INVALID_ARGUMENT,
                  "'limit:2GiB' after 'limit:48GiB'");
    setenv("LOCKSTEP_GPU_MEMORY", "limit:48GiB,reserve:0.9", 1);
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c2));
    ls_ctx_destroy(c2);
    unsetenv("LOCKSTEP_TF32");
    unsetenv("LOCKSTEP_GPU_MEMORY");

    /* steps */
    LS_REQUIRE_OK(ls_trainer_create(c, NULL, a, oa, &tc, &t));
    ls_step_stats st;
    LS_EXPECT_ERR(ls_trainer_step(t, d, idx, 8, 4, &st), LS_ERR_INVALID_ARGUMENT,
                  "global_count 4 must be the samples of the step on all ranks: on one rank, 8, this rank's count");
    LS_EXPECT_ERR(ls_trainer_step(t, d, idx, 8, 800, &st), LS_ERR_INVALID_ARGUMENT, "global_count 800");
    LS_EXPECT_ERR(ls_trainer_step(t, d, idx, -1, 8, &st), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_step: count -1 is negative (0 or more samples)");
    LS_EXPECT_ERR(ls_trainer_step(t, NULL, idx, 8, 8, &st), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_step: the data set is NULL");
    LS_EXPECT_ERR(ls_trainer_step(t, d, NULL, 8, 8, &st), LS_ERR_INVALID_ARGUMENT, "ls_trainer_step: idx is NULL");
    { /* a bad index in the third micro-batch: named by its place in idx (it said "index 64 at
         * position 3", the place in its micro-batch, from ls_dataset_gather), before any work */
        ls_train_config tc3 = tc;
        tc3.accum_steps = 3;
        ls_trainer *t3 = NULL;
        LS_REQUIRE_OK(ls_trainer_create(c, NULL, a, oa, &tc3, &t3));
        int64_t ix[24];
        for (int i = 0; i < 24; i++) ix[i] = (i * 5) % N;
        ix[19] = N;
        LS_EXPECT_ERR(ls_trainer_step(t3, d, ix, 24, 24, &st), LS_ERR_INVALID_ARGUMENT,
                      "ls_trainer_step: idx[19] = 64 is outside the data set of 64 samples");
        ix[19] = -2;
        LS_EXPECT_ERR(ls_trainer_step(t3, d, ix, 24, 24, NULL), LS_ERR_INVALID_ARGUMENT,
                      "ls_trainer_step: idx[19] = -2 is outside the data set of 64 samples");
        LS_EXPECT(ls_trainer_num_steps(t3) == 0);
        ls_trainer_destroy(t3);
    }
    double loss = 0;
    int64_t correct = 0;
    LS_EXPECT_ERR(ls_trainer_evaluate(t, d, idx, -5, &loss, &correct), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_evaluate: count -5 < 0");
    LS_EXPECT_ERR(ls_trainer_evaluate(t, d, idx, 1, &loss, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_evaluate: correct is NULL"); /* named: it said "an output" */
    /* a bad index in the third chunk of 8, with two chunks' copies in flight: the error, then an
     * evaluate as if nothing had happened (the same sums as one evaluated before) */
    int64_t ev[21];
    for (int i = 0; i < 21; i++) ev[i] = (i * 7) % N;
    double loss0 = 0;
    int64_t correct0 = 0;
    LS_REQUIRE_OK(ls_trainer_evaluate(t, d, ev, 21, &loss0, &correct0));
    ev[19] = N;
    LS_EXPECT_ERR(ls_trainer_evaluate(t, d, ev, 21, &loss, &correct), LS_ERR_INVALID_ARGUMENT,
                  "ls_trainer_evaluate: idx[19] = 64 is outside the data set of 64 samples");
    ev[19] = (19 * 7) % N;
    LS_REQUIRE_OK(ls_trainer_evaluate(t, d, ev, 21, &loss, &correct));
    LS_EXPECT(loss == loss0 && correct == correct0 && loss0 > 0);
    LS_EXPECT_ERR(ls_trainer_prefetch(t, d, NULL, 8), LS_ERR_INVALID_ARGUMENT, "ls_trainer_prefetch: idx is NULL");
    LS_REQUIRE_OK(ls_trainer_step(t, d, idx, 8, 8, &st));
    ls_trainer_destroy(t);

    /* some parameters frozen: the optimizer over parameter 0 alone is fine, and only it moves */
    ls_optimizer *part = NULL;
    ls_tensor *pl0[1] = {p0}, *gl0[1] = {g0};
    LS_REQUIRE_OK(ls_optimizer_create(c, 1, pl0, gl0, &oc, &part));
    LS_REQUIRE_OK(ls_trainer_create(c, NULL, a, part, &tc, &t));
    int64_t n_before = 0;
    float *before = params_to_host(c, a, &n_before);
    LS_REQUIRE_OK(ls_trainer_step(t, d, idx, 8, 8, &st));
    int64_t n_after = 0;
    float *after = params_to_host(c, a, &n_after);
    int64_t n0 = ls_tensor_numel(p0), moved0 = 0, moved_rest = 0;
    for (int64_t i = 0; i < n_after; i++) {
        if (i < n0)
            moved0 += before[i] != after[i];
        else
            moved_rest += before[i] != after[i];
    }
    LS_EXPECT(moved0 > 0 && moved_rest == 0);
    free(before);
    free(after);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(part);

    /* a state its load would refuse */
    ls_ckpt_state cs;
    memset(&cs, 0, sizeof cs);
    cs.step = 3;
    cs.optim = oc;
    char dir[] = "/tmp/ls_api_errors_XXXXXX";
    LS_REQUIRE(mkdtemp(dir) != NULL);
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: state.world_size = 0 is outside [1, 2^53] (a load would refuse it)");
    cs.world_size = 1;
    cs.batch_per_rank = 8;
    cs.accum_steps = 1;
    cs.step = INT64_MAX;
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT, "state.step = ");
    cs.step = 3;
    /* a state that names another optimizer, or holds what its parse refuses: each checkpoint was
     * written (ok), and a resume skipped it as damaged, back to an older one */
    cs.optim.kind = LS_OPTIM_ADAMW;
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: state.optim.kind is 1 (adamw) but the optimizer is sgd: fill state.optim from "
                  "ls_optimizer_config");
    cs.optim.kind = (ls_optim_kind)4;
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "state.optim.kind is 4 (no optimizer) but the optimizer is sgd");
    cs.optim.kind = LS_OPTIM_SGD;
    cs.n_loss_scaler = 1;
    snprintf(cs.loss_scaler[0].key, sizeof cs.loss_scaler[0].key, "scale");
    cs.loss_scaler[0].value = NAN;
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: the state would not load back: 'state.json': \"scale\"");
    cs.loss_scaler[0].value = 1024;
    cs.n_loss_scaler = 2;
    cs.loss_scaler[1] = cs.loss_scaler[0];
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "loss-scaler key 'scale' appears twice");
    cs.n_loss_scaler = 0;
    cs.n_rng = 1;
    snprintf(cs.rng[0].name, sizeof cs.rng[0].name, "data");
    cs.rng[0].rng.avail = 99;
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: the state would not load back: 'state.json': ");
    cs.n_rng = 0;
    cs.n_settings = -1;
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: state.n_settings -1 is outside [0, 16]");
    cs.n_settings = 0;
    char latest[600];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    struct stat lsb;
    LS_EXPECT(stat(latest, &lsb) != 0);                    /* nothing written */
    setenv("LOCKSTEP_CKPT_CRASH_AT", "before-rename2", 1); /* would never fire: not a stage */
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "LOCKSTEP_CKPT_CRASH_AT='before-rename2' is not a stage of a save");
    unsetenv("LOCKSTEP_CKPT_CRASH_AT");
    char path[512];
    LS_REQUIRE_OK(ls_ckpt_save(NULL, c, dir, 1, a, oa, &cs, path, sizeof path));
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    LS_EXPECT(system(cmd) == 0);

    /* long names: kept whole (60 bytes were cut to 52 in a Sequential: weight and bias under one
     * name, refused only by the first checkpoint), refused where one does not fit */
    {
        char nm[130];
        memset(nm, 'n', sizeof nm);
        nm[60] = '\0';
        ls_module *l60 = NULL, *s60 = NULL;
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, 4, 4, 1, 5, nm, &l60));
        LS_REQUIRE_OK(ls_sequential_create(c, 1, (ls_module *[]){l60}, &s60));
        char want[160];
        snprintf(want, sizeof want, "0.%s.bias", nm);
        LS_EXPECT(strcmp(ls_module_param_name(s60, 1), want) == 0);
        ls_module_destroy(s60);
        nm[60] = 'n';
        nm[120] = '\0'; /* "<120>.weight": 127 bytes, the most */
        LS_REQUIRE_OK(ls_linear_create(c, LS_F32, 4, 4, 1, 5, nm, &l60));
        LS_EXPECT_ERR(ls_sequential_create(c, 1, (ls_module *[]){l60}, &s60), LS_ERR_INVALID_ARGUMENT,
                      "ls_sequential_create: the parameter name '0.nnnn");
        LS_EXPECT_ERR(ls_sequential_create(c, 1, (ls_module *[]){l60}, &s60), LS_ERR_INVALID_ARGUMENT,
                      "n.weight' is longer than the 127 bytes a parameter's can be");
        ls_module_destroy(l60);
        nm[120] = 'n';
        nm[121] = '\0'; /* "<121>.weight": 128 */
        LS_EXPECT_ERR(ls_linear_create(c, LS_F32, 4, 4, 1, 5, nm, &l60), LS_ERR_INVALID_ARGUMENT,
                      "n': the name is longer than the 127 bytes a parameter's can be with its '.weight'");
        LS_EXPECT_ERR(ls_conv2d_create(c, LS_F32, 1, 4, 3, 1, 1, 1, 1, 5, nm, &l60), LS_ERR_INVALID_ARGUMENT,
                      "n.weight': the name is longer than the 127 bytes a parameter's can be");
    }

    /* a container owns its children */
    ls_module *lin = NULL, *seq = NULL;
    LS_REQUIRE_OK(ls_linear_create(c, LS_F32, 4, 4, 1, 5, "lin", &lin));
    LS_EXPECT_ERR(ls_sequential_create(c, 2, (ls_module *[]){lin, lin}, &seq), LS_ERR_INVALID_ARGUMENT,
                  "ls_sequential_create: children 0 and 1 are the same module");
    LS_EXPECT_ERR(ls_sequential_create(c, 2, (ls_module *[]){lin, NULL}, &seq), LS_ERR_INVALID_ARGUMENT,
                  "ls_sequential_create: child 1 is NULL");
    LS_EXPECT(seq == NULL);
    ls_module_destroy(lin);
    /* a residual block owns its body and shortcut (also on error): one module as both would be
     * destroyed twice, its forward's output overwritten by its second forward */
    ls_module *res = NULL;
    LS_REQUIRE_OK(ls_linear_create(c, LS_F32, 4, 4, 1, 5, "lin", &lin));
    LS_EXPECT_ERR(ls_residual_create(c, lin, lin, 1, &res), LS_ERR_INVALID_ARGUMENT,
                  "ls_residual_create: the body and the shortcut are the same module");
    LS_EXPECT(res == NULL);

    /* the cnn.h builders given no place for the module (they crashed writing to NULL; a residual
     * block still takes its body and shortcut) */
    const ls_batchnorm_config bnc = ls_batchnorm_defaults();
    LS_EXPECT_ERR(ls_conv2d_create(c, LS_F32, 1, 4, 3, 1, 1, 1, 1, 5, "conv", NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_conv2d_create: out is NULL");
    LS_EXPECT_ERR(ls_batchnorm2d_create(c, LS_F32, 4, &bnc, "bn", NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_batchnorm2d_create: out is NULL");
    LS_EXPECT_ERR(ls_pool2d_create(c, LS_POOL_MAX, 2, 2, 0, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_pool2d_create: out is NULL");
    LS_EXPECT_ERR(ls_reshape_create(c, 1, (int64_t[]){4}, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_reshape_create: out is NULL");
    LS_EXPECT_ERR(ls_reshape_create(c, 1, NULL, &res), LS_ERR_INVALID_ARGUMENT,
                  "ls_reshape_create: the sample shape is NULL");
    LS_EXPECT_ERR(ls_cast_create(c, LS_F32, NULL), LS_ERR_INVALID_ARGUMENT, "ls_cast_create: out is NULL");
    LS_REQUIRE_OK(ls_linear_create(c, LS_F32, 4, 4, 1, 5, "lin", &lin));
    LS_EXPECT_ERR(ls_residual_create(c, lin, NULL, 1, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_residual_create: out is NULL");
    LS_EXPECT_ERR(ls_basic_block_create(c, LS_F32, 4, 4, 1, 5, &bnc, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_basic_block_create: out is NULL");
    LS_EXPECT(res == NULL);

    /* NULL objects: errors, not crashes */
    ls_module *none_m = NULL;
    LS_EXPECT_ERR(ls_mlp_create(c, LS_F32, 3, NULL, LS_ACT_RELU, 1, &none_m), LS_ERR_INVALID_ARGUMENT,
                  "ls_mlp_create: sizes is NULL");
    LS_EXPECT_ERR(ls_resnet_create(c, NULL, &none_m), LS_ERR_INVALID_ARGUMENT, "ls_resnet_create: cfg is NULL");
    LS_EXPECT_ERR(ls_checkpoint_sequential(NULL, 2, &none_m), LS_ERR_INVALID_ARGUMENT,
                  "ls_checkpoint_sequential: the module is NULL");
    const ls_tensor *out_t = NULL;
    LS_EXPECT_ERR(ls_module_forward(a, NULL, &out_t), LS_ERR_INVALID_ARGUMENT, "ls_module_forward: the input is NULL");
    LS_EXPECT(ls_module_num_params(NULL) == 0);
    LS_EXPECT_ERR(ls_optimizer_step(NULL, 0.1f), LS_ERR_INVALID_ARGUMENT, "ls_optimizer_step: the optimizer is NULL");
    LS_EXPECT_ERR(ls_optimizer_step(oa, NAN), LS_ERR_INVALID_ARGUMENT, "ls_optimizer_step: lr nan must be finite");
    ls_tensor *nt = NULL;
    LS_EXPECT_ERR(ls_tensor_create(NULL, LS_F32, 1, (int64_t[]){4}, "t", &nt), LS_ERR_INVALID_ARGUMENT,
                  "ls_tensor_create: the allocator is NULL");
    LS_EXPECT_ERR(ls_ctx_create(ls_device_cpu(), NULL, NULL), LS_ERR_INVALID_ARGUMENT, "ls_ctx_create: out is NULL");
    LS_EXPECT_ERR(ls_alloc(NULL, 16, "x", (void **)&nt), LS_ERR_INVALID_ARGUMENT, "ls_alloc: the allocator is NULL");

    /* the parsers given a name they know but no place for the value (a crash writing it to NULL) */
    LS_EXPECT_ERR(ls_dtype_parse("f32", NULL), LS_ERR_INVALID_ARGUMENT, "ls_dtype_parse: out is NULL");
    LS_EXPECT_ERR(ls_precision_parse("fp16", NULL), LS_ERR_INVALID_ARGUMENT, "ls_precision_parse: out is NULL");
    LS_EXPECT_ERR(ls_lr_kind_parse("cosine", NULL), LS_ERR_INVALID_ARGUMENT, "ls_lr_kind_parse: out is NULL");
    LS_EXPECT_ERR(ls_optim_kind_parse("sgd", NULL), LS_ERR_INVALID_ARGUMENT, "ls_optim_kind_parse: out is NULL");
    LS_EXPECT_ERR(ls_log_level_parse("warn", NULL), LS_ERR_INVALID_ARGUMENT, "ls_log_level_parse: out is NULL");
    LS_EXPECT_ERR(ls_memory_parse_size("1KiB", NULL), LS_ERR_INVALID_ARGUMENT, "ls_memory_parse_size: out is NULL");
    LS_EXPECT_ERR(ls_memory_parse_cap("1KiB", NULL), LS_ERR_INVALID_ARGUMENT, "ls_memory_parse_size: out is NULL");
    LS_EXPECT_ERR(ls_device_parse("cpu", NULL), LS_ERR_INVALID_ARGUMENT, "ls_device_parse: out is NULL");

    ls_xent *xe = NULL;
    LS_EXPECT_ERR(ls_xent_create(NULL, &xe), LS_ERR_INVALID_ARGUMENT, "ls_xent_create: the context is NULL");
    LS_EXPECT_ERR(ls_xent_backward(NULL, 1.0, &out_t), LS_ERR_INVALID_ARGUMENT, "ls_xent_backward: the loss is NULL");
    LS_EXPECT_ERR(ls_xent_read(NULL, &loss, NULL), LS_ERR_INVALID_ARGUMENT, "ls_xent_read: the loss is NULL");
    double ss = 0;
    LS_EXPECT_ERR(ls_grads_sumsq(c, 2, (ls_tensor *const[]){g0, NULL}, &ss, NULL), LS_ERR_INVALID_ARGUMENT,
                  "ls_grads_sumsq: tensor 1 is NULL");
    LS_EXPECT_ERR(ls_grads_sumsq(c, 1, &g0, NULL, NULL), LS_ERR_INVALID_ARGUMENT, "ls_grads_sumsq: host_sumsq is NULL");

    /* a data set filled by hand without labels: gathering its labels is an error, its images work */
    ls_dataset hand = *d;
    hand.labels = NULL;
    hand.id = 0;
    float row[F];
    int32_t lab = -1;
    LS_EXPECT_ERR(ls_dataset_gather(&hand, idx, 1, row, &lab), LS_ERR_INVALID_ARGUMENT,
                  "ls_dataset_gather: the data set has no labels");
    LS_REQUIRE_OK(ls_dataset_gather(&hand, idx + 1, 1, row, NULL));
    LS_EXPECT(memcmp(row, x + 3 * F, sizeof row) == 0);

    /* builders given a NULL context returned LS_OK and crashed at the first forward; a linear
     * layer of a 1- or 2-byte dtype wrote 4-byte floats past its buffer before refusing it */
    ls_module *mod = NULL;
    LS_EXPECT_ERR(ls_activation_create(NULL, LS_ACT_RELU, &mod), LS_ERR_INVALID_ARGUMENT,
                  "cannot create a ReLU module: the context is NULL");
    LS_EXPECT_ERR(ls_dropout_create(NULL, 0.1f, 1, &mod), LS_ERR_INVALID_ARGUMENT, "the context is NULL");
    LS_EXPECT_ERR(ls_flatten_create(NULL, &mod), LS_ERR_INVALID_ARGUMENT, "the context is NULL");
    LS_EXPECT_ERR(ls_global_avgpool_create(NULL, &mod), LS_ERR_INVALID_ARGUMENT, "the context is NULL");
    LS_EXPECT_ERR(ls_cast_create(NULL, LS_BF16, &mod), LS_ERR_INVALID_ARGUMENT, "the context is NULL");
    LS_EXPECT_ERR(ls_linear_create(NULL, LS_F32, 4, 4, 1, 1, "fc", &mod), LS_ERR_INVALID_ARGUMENT,
                  "ls_linear_create: the context is NULL");
    LS_EXPECT_ERR(ls_conv2d_create(NULL, LS_F32, 1, 4, 3, 1, 1, 1, 0, 1, "conv", &mod), LS_ERR_INVALID_ARGUMENT,
                  "the context is NULL");
    LS_EXPECT(mod == NULL);
    const ls_dtype narrow[3] = {LS_F16, LS_BF16, LS_U8};
    const char *narrow_names[3] = {"f16", "bf16", "u8"};
    for (int i = 0; i < 3; i++) {
        char want[96];
        snprintf(want, sizeof want, "linear layer fc: parameters must be f32 or f64, not %s", narrow_names[i]);
        LS_EXPECT_ERR(ls_linear_create(c, narrow[i], 64, 64, 1, 1, "fc", &mod), LS_ERR_UNSUPPORTED, want);
        LS_EXPECT_ERR(ls_mlp_create(c, narrow[i], 3, (int64_t[]){64, 64, 10}, LS_ACT_RELU, 1, &mod), LS_ERR_UNSUPPORTED,
                      "parameters must be f32 or f64");
    }
    LS_EXPECT_ERR(ls_basic_block_create(c, LS_F16, 4, 4, 1, 1, NULL, &mod), LS_ERR_UNSUPPORTED,
                  "conv2d: parameters must be f32 or f64, not f16");
    ls_tensor *odd = NULL;
    LS_EXPECT_ERR(ls_tensor_create(c->alloc, (ls_dtype)42, 1, (int64_t[]){8}, "odd", &odd), LS_ERR_INVALID_ARGUMENT,
                  "odd: unknown dtype 42");
    LS_EXPECT(odd == NULL);

    /* a model narrower than the data set's classes: named, at the step and in evaluation (the loss
     * said "label 4 of sample 0 is outside [0, 3)") */
    {
        ls_module *narrow_m = NULL;
        ls_optimizer *narrow_o = NULL;
        ls_trainer *narrow_t = NULL;
        LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 3, (int64_t[]){F, 8, 3}, LS_ACT_RELU, 1, &narrow_m));
        ls_tensor *np_[4], *ng_[4];
        for (int i = 0; i < 4; i++) {
            np_[i] = ls_module_param(narrow_m, i);
            ng_[i] = ls_module_grad(narrow_m, i);
        }
        ls_optim_config noc = ls_optim_defaults(LS_OPTIM_SGD);
        LS_REQUIRE_OK(ls_optimizer_create(c, 4, np_, ng_, &noc, &narrow_o));
        ls_train_config ntc = config();
        LS_REQUIRE_OK(ls_trainer_create(c, NULL, narrow_m, narrow_o, &ntc, &narrow_t));
        const char *want = "the model's output has 3 values a sample but the data set has 10 classes (labels 0 to "
                           "9): its last layer needs 10 outputs";
        ls_step_stats nst;
        /* invalid argument: one process's model and data (LS_ERR_MISMATCH is for ranks that disagree) */
        LS_EXPECT_ERR(ls_trainer_step(narrow_t, d, idx, 8, 8, &nst), LS_ERR_INVALID_ARGUMENT, want);
        double nl = 0;
        int64_t nc = 0;
        LS_EXPECT_ERR(ls_trainer_evaluate(narrow_t, d, idx, 8, &nl, &nc), LS_ERR_INVALID_ARGUMENT, want);
        ls_trainer_destroy(narrow_t);
        ls_optimizer_destroy(narrow_o);
        ls_module_destroy(narrow_m);
    }

    /* a checkpoint without its optimizer: it was written (an empty optimizer.safetensors), and its
     * resume failed on a missing "momentum" */
    ls_ckpt_state cst;
    memset(&cst, 0, sizeof cst);
    cst.world_size = cst.batch_per_rank = cst.accum_steps = cst.steps_per_epoch = 1;
    cst.optim = ls_optim_defaults(LS_OPTIM_ADAMW);
    LS_EXPECT_ERR(ls_ckpt_save(NULL, c, "/tmp/ls_api_no_opt", 1, a, NULL, &cst, NULL, 0), LS_ERR_INVALID_ARGUMENT,
                  "ls_ckpt_save: the optimizer is NULL");

    /* activation checkpointing after the trainer was made: ls_checkpoint_sequential consumed the
     * container the trainer holds (freed: its next step read freed memory, and named a parameter
     * with garbage); refused while a trainer holds the model, the model left as it was; once the
     * trainer is destroyed it wraps, and a new trainer trains the wrapped model */
    {
        int64_t ck_sizes[] = {F, 8, 10};
        ls_module *ck_m = NULL, *ck_w = NULL;
        ls_optimizer *ck_o = NULL;
        ls_trainer *ck_t = NULL;
        LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 3, ck_sizes, LS_ACT_RELU, 9, &ck_m));
        ls_tensor *ck_p[4], *ck_g[4];
        for (int i = 0; i < 4; i++) {
            ck_p[i] = ls_module_param(ck_m, i);
            ck_g[i] = ls_module_grad(ck_m, i);
        }
        const ls_optim_config ck_oc = ls_optim_defaults(LS_OPTIM_SGD);
        LS_REQUIRE_OK(ls_optimizer_create(c, 4, ck_p, ck_g, &ck_oc, &ck_o));
        ls_train_config ck_tc = config();
        ck_tc.lr.base_lr = ck_oc.lr;
        LS_REQUIRE_OK(ls_trainer_create(c, NULL, ck_m, ck_o, &ck_tc, &ck_t));
        ls_module *ck_held = ck_m;
        LS_EXPECT_ERR(ls_checkpoint_sequential(ck_m, 2, &ck_m), LS_ERR_INVALID_ARGUMENT,
                      "ls_checkpoint_sequential: the model is held by a trainer (ls_trainer_create), which would "
                      "go on with the container this call replaces: wrap the model before making the trainer");
        LS_EXPECT(ck_m == ck_held);
        LS_REQUIRE_OK(ls_trainer_step(ck_t, d, idx, 8, 8, NULL));
        ls_trainer_destroy(ck_t);
        ck_t = NULL;
        LS_REQUIRE_OK(ls_checkpoint_sequential(ck_m, 2, &ck_w));
        if (ck_w) ck_m = ck_w;
        LS_REQUIRE_OK(ls_trainer_create(c, NULL, ck_m, ck_o, &ck_tc, &ck_t));
        LS_REQUIRE_OK(ls_trainer_step(ck_t, d, idx, 8, 8, NULL));
        ls_trainer_destroy(ck_t);
        ls_optimizer_destroy(ck_o);
        ls_module_destroy(ck_m);
    }

    /* a device of no known type was named "cuda:0" */
    ls_ctx *odd_ctx = NULL;
    LS_EXPECT_ERR(ls_ctx_create((ls_device){(ls_device_type)7, 0}, NULL, &odd_ctx), LS_ERR_DEVICE,
                  "this build of lockstep has no backend for device 'unknown device type 7'");

    /* memory */
    void *p = NULL;
    LS_EXPECT_ERR(ls_alloc(c->alloc, SIZE_MAX, "a size that wraps", &p), LS_ERR_OUT_OF_MEMORY, "a size that wraps");
    LS_EXPECT(p == NULL);

    ls_trainer_destroy(NULL);
    ls_optimizer_destroy(oa);
    ls_optimizer_destroy(ob);
    ls_module_destroy(a);
    ls_module_destroy(b);
    ls_dataset_destroy(d);
    free(x);
    ls_ctx_destroy(c);
    LS_TEST_END();
}
