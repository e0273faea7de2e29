/* test_optim.c: the optimizer object over tensors (state slots, step count, errors), the
 * warmup + cosine schedule's values, and gradient clipping. */
#include "../kernels/gradcheck.h"
#include "optim.h"

int main(void) {
    ls_ctx *C;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    ls_tensor *p = gc_tensor(C, LS_F32, 1, (int64_t[]){3}), *g = gc_tensor(C, LS_F32, 1, (int64_t[]){3});
    float *pd = p->data, *gd = g->data;
    pd[0] = 1;
    pd[1] = 2;
    pd[2] = 3;
    gd[0] = 1;
    gd[1] = -1;
    gd[2] = 0.5f;
    ls_optim_config cfg = ls_optim_defaults(LS_OPTIM_SGD);
    cfg.momentum = 0.5f;
    ls_optimizer *o;
    LS_REQUIRE_OK(ls_optimizer_create(C, 1, &p, &g, &cfg, &o));
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.1f));
    LS_REQUIRE_OK(ls_optimizer_step(o, 0.1f));
    /* buf1 = g, buf2 = 0.5 g + g = 1.5 g: p = p0 - 0.1 g - 0.15 g */
    LS_EXPECT_NEAR(pd[0], 1 - 0.25, 1e-6);
    LS_EXPECT_NEAR(pd[2], 3 - 0.125, 1e-6);
    LS_EXPECT(ls_optimizer_num_steps(o) == 2);
    LS_EXPECT(ls_optimizer_state(o, 0, 0) != NULL && ls_optimizer_state(o, 0, 1) == NULL);
    LS_EXPECT_NEAR(((float *)ls_optimizer_state(o, 0, 0)->data)[0], 1.5, 1e-6);
    ls_optimizer_destroy(o);
    cfg = ls_optim_defaults(LS_OPTIM_ADAMW);
    LS_REQUIRE_OK(ls_optimizer_create(C, 1, &p, &g, &cfg, &o));
    LS_EXPECT(ls_optimizer_state(o, 0, 1) != NULL);
    float before = pd[1];
    LS_REQUIRE_OK(ls_optimizer_step(o, 1e-3f));
    /* first AdamW step moves each weight by about lr against the gradient's sign (plus decay) */
    LS_EXPECT_NEAR(pd[1], before * (1 - 1e-3 * 0.01) + 1e-3, 1e-6);
    ls_optimizer_destroy(o);
    cfg.beta1 = 1.5f;
    LS_EXPECT_ERR(ls_optimizer_create(C, 1, &p, &g, &cfg, &o), LS_ERR_INVALID_ARGUMENT, "invalid hyperparameters");
    ls_tensor *g2 = gc_tensor(C, LS_F32, 1, (int64_t[]){4});
    cfg = ls_optim_defaults(LS_OPTIM_SGD);
    LS_EXPECT_ERR(ls_optimizer_create(C, 1, &p, &g2, &cfg, &o), LS_ERR_INVALID_ARGUMENT,
                  "parameter 0 is [3] f32 cpu but its gradient is [4] f32 cpu");
    ls_optim_kind k;
    LS_EXPECT_ERR(ls_optim_kind_parse("lamb", &k), LS_ERR_INVALID_ARGUMENT, "'lamb' is not one of sgd, adamw");

    ls_lr_schedule s = {1.0f, 0.1f, 10, 110};
    LS_EXPECT_NEAR(ls_lr_at(&s, 0), 0.1, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 9), 1.0, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 10), 1.0, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 60), 0.55, 1e-6);
    LS_EXPECT_NEAR(ls_lr_at(&s, 110), 0.1, 1e-7);
    LS_EXPECT_NEAR(ls_lr_at(&s, 500), 0.1, 1e-7);

    /* clipping: norm of (3, 4) is 5; clip to 1 */
    gd[0] = 3;
    gd[1] = 4;
    gd[2] = 0;
    double norm;
    LS_REQUIRE_OK(ls_clip_grad_norm(C, 1, &g, 1.0, &norm));
    LS_EXPECT_NEAR(norm, 5, 1e-6);
    LS_EXPECT_NEAR(gd[0], 0.6, 1e-5);
    LS_EXPECT_NEAR(gd[1], 0.8, 1e-5);
    gd[2] = NAN;
    LS_REQUIRE_OK(ls_clip_grad_norm(C, 1, &g, 1.0, &norm));
    LS_EXPECT(isnan(norm));
    ls_tensor_destroy(p);
    ls_tensor_destroy(g);
    ls_tensor_destroy(g2);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
