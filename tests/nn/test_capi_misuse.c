/* test_capi_misuse.c: what a C program writing its own training loop may get wrong, each
 * well-defined and said:
 * - destroy order: ls_module_destroy of a module a trainer or an EMA still holds (it, or a module
 *   inside it) is refused with an error naming what to destroy first, and the module stays usable
 *   (it was freed under them: a use after free at their next call and at their destroy); after
 *   their destroy it is freed (the ASan build's leak check sees that). ls_checkpoint_sequential of
 *   a container an EMA holds is refused as for a trainer;
 * - the trainer's learning-rate schedule: min_lr above base_lr (it would rise, not decay), and
 *   min_lr with the constant schedule (never reached), are LS_ERR_INVALID_ARGUMENT naming both;
 *   AdamW's eps 0 (a zero gradient's update 0/0 = NaN) likewise;
 * - optimizers whose parameter lists do not match the trainer's model: another model's, a
 *   parameter with another's gradient, a parameter twice: refused; the model's own in another
 *   order: accepted;
 * - NULL objects given to the module getters and setters, ls_lr_at, ls_trainer_num_steps and
 *   ls_optimizer_set_num_steps (crashes): NULL, 0, NAN or nothing done; a negative step count set
 *   on an optimizer (AdamW's bias correction then made every weight NaN, silently): refused,
 *   logged, the count left as it was; NULL states given to ls_ckpt_warn_changes and
 *   ls_ckpt_resume_position (crashes): 0 differences, the start; ls_xent_mean of NULL losses or of
 *   an integer dtype (read as floats): NAN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "ema.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

static ls_ctx *ctx;

static ls_module *make_model(uint64_t seed) {
    ls_module *m;
    int64_t sizes[3] = {4, 8, 3};
    LS_REQUIRE_OK(ls_mlp_create(ctx, LS_F32, 3, sizes, LS_ACT_RELU, seed, &m));
    return m;
}

static ls_status make_opt_order(ls_module *m, ls_optim_kind kind, const int *order, ls_optimizer **o) {
    ls_tensor *p[4], *g[4];
    for (int i = 0; i < 4; i++) {
        p[i] = ls_module_param(m, order[i]);
        g[i] = ls_module_grad(m, order[i]);
    }
    ls_optim_config c = ls_optim_defaults(kind);
    return ls_optimizer_create(ctx, 4, p, g, &c, o);
}

static ls_optimizer *make_opt(ls_module *m, ls_optim_kind kind) {
    static const int in_order[4] = {0, 1, 2, 3};
    ls_optimizer *o;
    LS_REQUIRE_OK(make_opt_order(m, kind, in_order, &o));
    return o;
}

static ls_train_config config(void) {
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 4;
    tc.accum_steps = 1;
    tc.lr = (ls_lr_schedule){0.1f, 0, 0, 10, LS_LR_COSINE};
    return tc;
}

/* ls_module_destroy of m, whose refusal (and its log line) must name want. */
static void expect_refused_destroy(ls_module *m, const char *want) {
    char log[64];
    snprintf(log, sizeof log, "/tmp/ls_capi_misuse_%d.log", (int)getpid());
    int saved = ls_test_stderr_to(log);
    ls_module_destroy(m);
    ls_test_stderr_back(saved);
    char *said = ls_test_slurp(log);
    remove(log);
    LS_EXPECT(strstr(ls_last_error(), want) != NULL);
    LS_EXPECT(said && strstr(said, want) != NULL);
    if (!strstr(ls_last_error(), want)) fprintf(stderr, "last error: '%s', expected '%s'\n", ls_last_error(), want);
    free(said);
    /* still there: usable */
    LS_EXPECT(ls_module_num_params(m) == 4 && strcmp(ls_module_param_name(m, 0), "0.weight") == 0);
}

static void test_destroy_order(void) {
    ls_module *m = make_model(1);
    ls_optimizer *o = make_opt(m, LS_OPTIM_SGD);
    ls_train_config tc = config();
    ls_trainer *t;
    LS_REQUIRE_OK(ls_trainer_create(ctx, NULL, m, o, &tc, &t));
    expect_refused_destroy(m, "is still held by 1 trainer and 0 EMAs");
    expect_refused_destroy(m, "destroy them first (ls_trainer_destroy, ls_ema_destroy), then the module");
    LS_EXPECT(ls_trainer_num_steps(t) == 0);
    ls_trainer_destroy(t); /* writes into the model: it must still be there */

    /* an EMA of the model, and one of a module inside it */
    ls_ema *e, *ec;
    LS_REQUIRE_OK(ls_ema_create(ctx, m, 0.5, 0, &e));
    LS_REQUIRE_OK(ls_ema_create(ctx, ls_module_child(m, 0), 0.5, 0, &ec));
    expect_refused_destroy(m, "is still held by 0 trainers and 2 EMAs");
    LS_EXPECT(ls_ema_update(e) == LS_OK && ls_ema_update(ec) == LS_OK);
    ls_ema_destroy(e);
    expect_refused_destroy(m, "is still held by 0 trainers and 1 EMA ");
    ls_ema_destroy(ec);
    ls_optimizer_destroy(o);
    ls_module_destroy(m); /* freed now: ASan's leak check would name it otherwise */

    /* ls_checkpoint_sequential of a container an EMA holds (the EMA's destroy wrote into the freed one) */
    ls_module *s = make_model(2);
    LS_REQUIRE_OK(ls_ema_create(ctx, s, 0.5, 0, &e));
    ls_module *wrapped = NULL;
    LS_EXPECT_ERR(ls_checkpoint_sequential(s, 2, &wrapped), LS_ERR_INVALID_ARGUMENT,
                  "held by an EMA of its weights (ls_ema_create)");
    LS_EXPECT(wrapped == NULL);
    ls_ema_destroy(e);
    LS_REQUIRE_OK(ls_checkpoint_sequential(s, 2, &s));
    ls_module_destroy(s);
}

static void test_schedule(void) {
    ls_module *m = make_model(3);
    ls_optimizer *o = make_opt(m, LS_OPTIM_SGD);
    ls_trainer *t = NULL;
    ls_train_config tc = config();
    tc.lr.min_lr = 0.2f;
    LS_EXPECT_ERR(ls_trainer_create(ctx, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "learning-rate schedule: min_lr 0.2 is above base_lr 0.1");
    LS_EXPECT(t == NULL);
    tc = config();
    tc.lr.kind = LS_LR_CONSTANT;
    tc.lr.min_lr = 0.01f;
    LS_EXPECT_ERR(ls_trainer_create(ctx, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "learning-rate schedule: min_lr 0.01 with the constant schedule");
    /* equal is fine (compared in float, as the schedule uses them), as min_lr 0 with constant */
    tc = config();
    tc.lr.min_lr = tc.lr.base_lr;
    LS_EXPECT(ls_trainer_create(ctx, NULL, m, o, &tc, &t) == LS_OK);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);

    ls_optim_config c = ls_optim_defaults(LS_OPTIM_ADAMW);
    c.eps = 0;
    ls_tensor *p[1] = {ls_module_param(m, 0)}, *g[1] = {ls_module_grad(m, 0)};
    LS_EXPECT_ERR(ls_optimizer_create(ctx, 1, p, g, &c, &o), LS_ERR_INVALID_ARGUMENT,
                  "optimizer: AdamW's eps 0 must be > 0");
    c = ls_optim_defaults(LS_OPTIM_SGD);
    c.eps = 0; /* SGD has no use for it */
    LS_EXPECT(ls_optimizer_create(ctx, 1, p, g, &c, &o) == LS_OK);
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

static void test_param_lists(void) {
    ls_module *m = make_model(4), *other = make_model(5);
    ls_train_config tc = config();
    ls_trainer *t = NULL;
    ls_optimizer *o = make_opt(other, LS_OPTIM_SGD);
    LS_EXPECT_ERR(ls_trainer_create(ctx, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "the optimizer's parameter 0 ([8, 4] f32 cpu) is not one of the model's");
    ls_optimizer_destroy(o);
    static const int dup[4] = {0, 1, 1, 3};
    LS_EXPECT_ERR(make_opt_order(m, LS_OPTIM_SGD, dup, &o), LS_ERR_INVALID_ARGUMENT,
                  "parameters 1 and 2 are the same tensor");
    static const int reversed[4] = {3, 2, 1, 0};
    LS_REQUIRE_OK(make_opt_order(m, LS_OPTIM_SGD, reversed, &o));
    LS_EXPECT(ls_trainer_create(ctx, NULL, m, o, &tc, &t) == LS_OK);
    ls_trainer_destroy(t);
    ls_optimizer_destroy(o);
    /* a parameter with another parameter's gradient of the same shape: 0.weight of m, grad of other's */
    ls_tensor *p[4], *g[4];
    for (int i = 0; i < 4; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(i == 2 ? other : m, i);
    }
    ls_optim_config c = ls_optim_defaults(LS_OPTIM_SGD);
    LS_REQUIRE_OK(ls_optimizer_create(ctx, 4, p, g, &c, &o));
    LS_EXPECT_ERR(ls_trainer_create(ctx, NULL, m, o, &tc, &t), LS_ERR_INVALID_ARGUMENT,
                  "the optimizer's parameter 2 is the model's parameter 2, but its gradient is not");
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
    ls_module_destroy(other);
}

static void test_null_and_negative(void) {
    /* getters and setters given NULL */
    LS_EXPECT(ls_module_param(NULL, 0) == NULL);
    LS_EXPECT(ls_module_grad(NULL, 0) == NULL);
    LS_EXPECT(ls_module_param_name(NULL, 0) == NULL);
    LS_EXPECT(ls_module_num_elements(NULL) == 0);
    ls_module_set_training(NULL, 1);
    ls_module_set_grad_hook(NULL, NULL, NULL);
    LS_EXPECT(isnan(ls_lr_at(NULL, 3)));
    LS_EXPECT(ls_trainer_num_steps(NULL) == 0);
    ls_trainer_set_num_steps(NULL, 3);
    ls_optimizer_set_num_steps(NULL, 3);

    /* a negative step count: refused, the count as it was (AdamW's step made every weight NaN) */
    ls_module *m = make_model(6);
    ls_optimizer *o = make_opt(m, LS_OPTIM_ADAMW);
    for (int i = 0; i < 4; i++) {
        ls_tensor *g = ls_module_grad(m, i);
        for (int64_t k = 0; k < ls_tensor_numel(g); k++) ((float *)g->data)[k] = 0.5f;
    }
    ls_optimizer_set_num_steps(o, 7);
    ls_optimizer_set_num_steps(o, -5);
    LS_EXPECT(strstr(ls_last_error(), "ls_optimizer_set_num_steps: -5 steps is negative") != NULL);
    int64_t steps = -1;
    LS_REQUIRE_OK(ls_optimizer_get_num_steps(o, &steps));
    LS_EXPECT(steps == 7);
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.1f));
    const float *w = ls_module_param(m, 0)->data;
    LS_EXPECT(isfinite(w[0]));

    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

static void test_null_state_and_losses(void) {
    ls_ckpt_state st;
    memset(&st, 0, sizeof st);
    LS_EXPECT(ls_ckpt_warn_changes(NULL, &st) == 0 && ls_ckpt_warn_changes(&st, NULL) == 0);
    int64_t epoch = -1, step = -1;
    int exact = -1;
    ls_ckpt_resume_position(NULL, 64, 10, &epoch, &step, &exact);
    LS_EXPECT(epoch == 0 && step == 0 && exact == 1);
    LS_EXPECT(isnan(ls_xent_mean(LS_F32, NULL, 3)));
    const int32_t ints[2] = {1, 2};
    LS_EXPECT(isnan(ls_xent_mean(LS_I32, ints, 2)));
    const float losses[2] = {1, 2};
    LS_EXPECT(ls_xent_mean(LS_F32, losses, 2) == 1.5 && ls_xent_mean(LS_F32, NULL, 0) == 0);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    test_destroy_order();
    test_schedule();
    test_param_lists();
    test_null_and_negative();
    test_null_state_and_losses();
    ls_ctx_destroy(ctx);
    LS_TEST_END();
}
