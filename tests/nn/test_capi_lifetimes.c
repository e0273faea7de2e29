/* test_capi_lifetimes.c: object lifetimes a C program may get wrong, each refused with an error
 * naming what to do instead of a double free or a use after free (the ASan build's leak check then
 * sees that each object is freed once the right order is kept):
 * - a module inside a container (Sequential, Checkpoint, Residual, a ResNet block) destroyed alone:
 *   refused, the module stays usable, the container frees it; a module put in a second container
 *   (ls_sequential_create, ls_checkpoint_create, ls_residual_create) or a Sequential inside a
 *   container given to ls_checkpoint_sequential: refused;
 * - ls_ctx_destroy while modules, losses, optimizers, trainers or EMAs made with the context are
 *   alive: refused, naming how many of each; freed after their destroys;
 * - ls_module_destroy of a module an optimizer is over, ls_tensor_destroy of a tensor one is over:
 *   refused; the optimizer still steps; freed after its destroy; ls_checkpoint_sequential of a
 *   model an optimizer is over frees the container it replaces (the parameters live on);
 * - ls_lr_at of a negative step or of a kind not in the enum: NAN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnn.h"
#include "ema.h"
#include "nn.h"
#include "optim.h"
#include "testutil.h"
#include "train.h"

static ls_ctx *ctx;

static ls_module *make_model(ls_ctx *c, uint64_t seed) {
    ls_module *m;
    int64_t sizes[3] = {4, 8, 3};
    LS_REQUIRE_OK(ls_mlp_create(c, LS_F32, 3, sizes, LS_ACT_RELU, seed, &m));
    return m;
}

static ls_optimizer *make_opt(ls_ctx *c, ls_module *m) {
    int n = ls_module_num_params(m);
    ls_tensor *p[8], *g[8];
    for (int i = 0; i < n; i++) {
        p[i] = ls_module_param(m, i);
        g[i] = ls_module_grad(m, i);
    }
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_SGD);
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(c, n, p, g, &oc, &o));
    return o;
}

/* The last error contains want (and is printed where it does not). */
static void expect_said(const char *want) {
    LS_EXPECT(strstr(ls_last_error(), want) != NULL);
    if (!strstr(ls_last_error(), want)) fprintf(stderr, "last error: '%s', expected '%s'\n", ls_last_error(), want);
}

static void test_containers(void) {
    /* a layer of a Sequential destroyed alone: refused (the container would free it again) */
    ls_module *seq = make_model(ctx, 1), *layer = ls_module_child(seq, 0);
    ls_error_clear();
    ls_module_destroy(layer);
    expect_said("ls_module_destroy: the module (Linear) is inside a Sequential, which owns it and frees it: "
                "destroy the outermost container instead");
    LS_EXPECT(ls_module_num_params(layer) == 2 && strcmp(ls_module_param_name(layer, 0), "weight") == 0);

    /* the same layer put in a second container: refused, whichever kind, nothing taken */
    ls_module *other = NULL;
    LS_EXPECT_ERR(ls_sequential_create(ctx, 1, &layer, &other), LS_ERR_INVALID_ARGUMENT,
                  "ls_sequential_create: module 0 (Linear) is already inside a Sequential, which owns it (a module "
                  "can be in one container)");
    LS_EXPECT(other == NULL);
    LS_EXPECT_ERR(ls_checkpoint_create(ctx, layer, &other), LS_ERR_INVALID_ARGUMENT,
                  "ls_checkpoint_create: module 0 (Linear) is already inside a Sequential");
    LS_EXPECT(other == NULL);
    /* a Residual takes its free branch on error (its contract) but leaves the other to its container */
    ls_module *shortcut;
    LS_REQUIRE_OK(ls_linear_create(ctx, LS_F32, 4, 8, 1, 9, "", &shortcut));
    LS_EXPECT_ERR(ls_residual_create(ctx, layer, shortcut, 0, &other), LS_ERR_INVALID_ARGUMENT,
                  "ls_residual_create: the body (Linear) is already inside a Sequential");
    LS_EXPECT(other == NULL && ls_module_num_params(layer) == 2);

    /* a Sequential inside a container given to ls_checkpoint_sequential (it would free it) */
    ls_module *outer, *inner = seq;
    LS_REQUIRE_OK(ls_sequential_create(ctx, 1, &inner, &outer));
    LS_EXPECT_ERR(ls_checkpoint_sequential(inner, 2, &other), LS_ERR_INVALID_ARGUMENT,
                  "ls_checkpoint_sequential: the Sequential is inside a Sequential, which owns it");
    LS_EXPECT(other == NULL);
    ls_error_clear();
    ls_module_destroy(inner);
    expect_said("the module (Sequential) is inside a Sequential");
    ls_module_destroy(outer); /* frees seq and its layers, once */

    /* checkpoint_sequential moves the layers into its segments: still the container's */
    seq = make_model(ctx, 2);
    LS_REQUIRE_OK(ls_checkpoint_sequential(seq, 2, &seq));
    ls_module *seg = ls_module_child(seq, 0), *wrapped_inner = ls_module_child(seg, 0);
    ls_module *l0 = ls_module_child(wrapped_inner, 0);
    LS_EXPECT(strcmp(ls_module_kind(seg), "Checkpoint") == 0 && strcmp(ls_module_kind(l0), "Linear") == 0);
    ls_error_clear();
    ls_module_destroy(l0);
    expect_said("the module (Linear) is inside a Sequential");
    ls_error_clear();
    ls_module_destroy(wrapped_inner);
    expect_said("the module (Sequential) is inside a Checkpoint");
    ls_module_destroy(seq);

    /* a ResNet block: its body is the Residual's */
    ls_module *block;
    LS_REQUIRE_OK(ls_basic_block_create(ctx, LS_F32, 4, 8, 2, 3, NULL, &block));
    ls_module *body = ls_module_child(block, 0), *conv = ls_module_child(body, 0);
    ls_error_clear();
    ls_module_destroy(body);
    expect_said("the module (Sequential) is inside a Residual, which owns it");
    ls_error_clear();
    ls_module_destroy(conv);
    expect_said("the module (Conv2d) is inside a Sequential");
    ls_module_destroy(block);
}

static void test_ctx_destroy(void) {
    ls_ctx *c;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &c));
    ls_module *m = make_model(c, 4); /* Linear, ReLU, Linear, Sequential */
    ls_optimizer *o = make_opt(c, m);
    ls_xent *loss;
    LS_REQUIRE_OK(ls_xent_create(c, &loss));
    ls_ema *e;
    LS_REQUIRE_OK(ls_ema_create(c, m, 0.5, 0, &e));
    ls_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.batch_per_rank = 4;
    tc.accum_steps = 1;
    tc.lr = (ls_lr_schedule){0.1f, 0, 0, 10, LS_LR_COSINE};
    ls_trainer *t;
    LS_REQUIRE_OK(ls_trainer_create(c, NULL, m, o, &tc, &t)); /* it makes a loss of its own */
    ls_error_clear();
    ls_ctx_destroy(c);
    expect_said("ls_ctx_destroy: objects made with this context are still alive (4 modules, those inside containers "
                "counted, 2 losses, 1 optimizer, 1 trainer, 1 EMA): destroy them first");
    LS_EXPECT(ls_ctx_synchronize(c) == LS_OK); /* still there */
    ls_trainer_destroy(t);
    ls_ema_destroy(e);
    ls_xent_destroy(loss);
    ls_optimizer_destroy(o);
    ls_error_clear();
    ls_ctx_destroy(c);
    expect_said("(4 modules, those inside containers counted, 0 losses, 0 optimizers, 0 trainers, 0 EMAs)");
    ls_module_destroy(m);
    ls_error_clear();
    ls_ctx_destroy(c); /* freed now: ASan's leak check would name it otherwise */
    LS_EXPECT(strcmp(ls_last_error(), "") == 0);
}

static void test_optimizer_holds(void) {
    ls_module *m = make_model(ctx, 5);
    ls_optimizer *o = make_opt(ctx, m);
    ls_error_clear();
    ls_module_destroy(m);
    expect_said("ls_module_destroy: the module's (Sequential) parameters are still held by 1 optimizer "
                "(ls_optimizer_create over them) not yet destroyed: destroy it first");
    ls_optimizer *o2 = make_opt(ctx, m);
    ls_error_clear();
    ls_module_destroy(m);
    expect_said("held by 2 optimizers (ls_optimizer_create over them) not yet destroyed: destroy them first");
    ls_optimizer_destroy(o2);
    /* the model is still there: a step reads and writes its tensors */
    ls_tensor *g = ls_module_grad(m, 0), *w = ls_module_param(m, 0);
    for (int64_t k = 0; k < ls_tensor_numel(g); k++) ((float *)g->data)[k] = 1.0f;
    float w0 = ((float *)w->data)[0];
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.5f));
    LS_EXPECT_NEAR(((float *)w->data)[0], w0 - 0.5f, 1e-6);
    ls_optimizer_destroy(o);
    ls_module_destroy(m); /* freed now */

    /* ls_checkpoint_sequential under an optimizer: the parameters move to the wrapped model, which
     * the optimizer then holds (the replaced container is freed: ASan's leak check) */
    m = make_model(ctx, 7);
    o = make_opt(ctx, m);
    LS_REQUIRE_OK(ls_checkpoint_sequential(m, 2, &m));
    ls_error_clear();
    ls_module_destroy(m);
    expect_said("the module's (Sequential) parameters are still held by 1 optimizer");
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.5f));
    ls_optimizer_destroy(o);
    ls_module_destroy(m);

    /* tensors of the caller's own */
    int64_t shape[1] = {3};
    ls_tensor *p, *pg;
    LS_REQUIRE_OK(ls_tensor_create(ctx->alloc, LS_F32, 1, shape, "p", &p));
    LS_REQUIRE_OK(ls_tensor_create(ctx->alloc, LS_F32, 1, shape, "g", &pg));
    ls_optim_config oc = ls_optim_defaults(LS_OPTIM_ADAMW);
    LS_REQUIRE_OK(ls_optimizer_create(ctx, 1, &p, &pg, &oc, &o));
    ls_error_clear();
    ls_tensor_destroy(p);
    expect_said("ls_tensor_destroy: the tensor ([3] f32 cpu) is still held by 1 object that uses it later (an "
                "optimizer over it, ls_optimizer_create): destroy it first");
    LS_EXPECT(ls_tensor_numel(p) == 3);
    ls_tensor_destroy(pg); /* the gradients are not held */
    ls_optimizer_destroy(o);
    ls_tensor_destroy(p);
}

static void test_lr_at(void) {
    ls_lr_schedule warm = {1.0f, 0.1f, 10, 110, LS_LR_COSINE}, lin = {1.0f, 0.0f, 0, 100, LS_LR_LINEAR};
    LS_EXPECT_NEAR(ls_lr_at(&warm, 0), 0.1, 1e-7);
    /* was -0.1 (a warmup's negative rate) */
    LS_EXPECT(isnan(ls_lr_at(&warm, -2)));
    LS_EXPECT(isnan(ls_lr_at(&warm, -1)));
    /* was 1.5 (above the peak) */
    LS_EXPECT(isnan(ls_lr_at(&lin, -50)));
    LS_EXPECT_NEAR(ls_lr_at(&lin, 50), 0.5, 1e-7);
    ls_lr_schedule odd = {1.0f, 0.1f, 0, 100, (ls_lr_kind)7};
    LS_EXPECT(isnan(ls_lr_at(&odd, 50)));
    odd.kind = (ls_lr_kind)-1;
    LS_EXPECT(isnan(ls_lr_at(&odd, 0)));
    /* a step refuses the NaN */
    ls_module *m = make_model(ctx, 6);
    ls_optimizer *o = make_opt(ctx, m);
    LS_EXPECT_ERR(ls_optimizer_step(o, ls_lr_at(&lin, -1)), LS_ERR_INVALID_ARGUMENT, "must be finite and >= 0");
    ls_optimizer_destroy(o);
    ls_module_destroy(m);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &ctx));
    test_containers();
    test_ctx_destroy();
    test_optimizer_holds();
    test_lr_at();
    ls_error_clear();
    ls_ctx_destroy(ctx); /* everything made with it was destroyed: no refusal */
    LS_EXPECT(strcmp(ls_last_error(), "") == 0);
    LS_TEST_END();
}
