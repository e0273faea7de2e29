/* test_ema.c: the exponential moving average of a model's weights (ema.h): timm's decay (the first
 * update a copy, then the decay or its warmup),
 * the averages start as copies of the parameters and buffers, each update is d * ema + (1 - d) *
 * value against a double reference (parameters and a ResNet's batch norm statistics), swap
 * exchanges the values bit for bit and twice restores them, reset, the update count, errors. */
#include <math.h>

#include "cnn.h"
#include "ema.h"
#include "testutil.h"

static void fill(ls_tensor *t, int salt) {
    float *d = t->data;
    for (int64_t i = 0; i < ls_tensor_numel(t); i++) d[i] = (float)((i * 7 + salt * 13) % 23) / 8.0f - 1.0f;
}

/* A copy of every tensor of e (averages) or of the model's (in e's order) into one host array. */
static float *snapshot(ls_ema *e, ls_module *m, int averages) {
    int np = m ? ls_module_num_params(m) : 0, n = ls_ema_num_tensors(e);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += ls_tensor_numel(ls_ema_tensor(e, i));
    float *out = malloc((size_t)total * sizeof *out), *p = out;
    LS_REQUIRE(out != NULL);
    for (int i = 0; i < n; i++) {
        ls_tensor *t = averages ? ls_ema_tensor(e, i)
                       : i < np ? ls_module_param(m, i)
                                : ls_cnn_buffer(m, i - np, NULL, 0);
        memcpy(p, t->data, ls_tensor_nbytes(t));
        p += ls_tensor_numel(t);
    }
    return out;
}

static int64_t total_of(ls_ema *e) {
    int64_t total = 0;
    for (int i = 0; i < ls_ema_num_tensors(e); i++) total += ls_tensor_numel(ls_ema_tensor(e, i));
    return total;
}

/* The largest difference between e's averages and d * before + (1 - d) * value, relative to 1 + it. */
static double update_error(ls_ema *e, const float *before, const float *value, double d) {
    float *now = snapshot(e, NULL, 1);
    double worst = 0;
    for (int64_t i = 0; i < total_of(e); i++) {
        double want = d * before[i] + (1 - d) * value[i];
        double err = fabs(now[i] - want) / (1 + fabs(want)); /* values of about 1: f32 rounding */
        if (err > worst) worst = err;
    }
    free(now);
    return worst;
}

int main(void) {
    ls_ctx *C;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));

    /* the decay of update t, as timm's ModelEmaV3.get_decay(t) with its training loop's t (1, 2, ...):
     * the first update copies (0), then the decay, or with warmup 1 - t^(-2/3) up to it */
    LS_EXPECT(ls_ema_decay_at(0.999, 0, 1) == 0 && ls_ema_decay_at(0.999, 1, 1) == 0);
    LS_EXPECT(ls_ema_decay_at(0.999, 0, 2) == 0.999 && ls_ema_decay_at(0.999, 0, 5000) == 0.999);
    LS_EXPECT_NEAR(ls_ema_decay_at(0.999, 1, 2), 1 - pow(2, -2.0 / 3), 1e-15);
    LS_EXPECT_NEAR(ls_ema_decay_at(0.999, 1, 100), 1 - pow(100, -2.0 / 3), 1e-15);
    LS_EXPECT(ls_ema_decay_at(0.999, 1, 100000000) == 0.999);
    LS_EXPECT(ls_ema_decay_at(0.3, 1, 2) == 0.3 && ls_ema_decay_at(0, 1, 7) == 0);

    /* an MLP: copies at create, then updates toward new values */
    ls_module *m;
    int64_t sizes[3] = {6, 5, 3};
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 3, sizes, LS_ACT_RELU, 3, &m));
    int np = ls_module_num_params(m);
    ls_ema *e;
    LS_REQUIRE_OK(ls_ema_create(C, m, 0.9, 0, &e));
    LS_EXPECT(ls_ema_num_tensors(e) == np && ls_ema_num_updates(e) == 0 && ls_ema_decay(e) == 0.9 &&
              ls_ema_warmup(e) == 0);
    float *params = snapshot(e, m, 0), *avg = snapshot(e, m, 1);
    LS_EXPECT(memcmp(params, avg, (size_t)total_of(e) * sizeof(float)) == 0);
    LS_EXPECT(ls_ema_tensor(e, 0)->data != ls_module_param(m, 0)->data && ls_ema_tensor(e, np) == NULL &&
              ls_ema_tensor(e, -1) == NULL);
    for (int i = 0; i < np; i++) fill(ls_module_param(m, i), i + 1);
    float *value = snapshot(e, m, 0);
    LS_REQUIRE_OK(ls_ema_update(e)); /* the first: a copy of the values */
    LS_EXPECT(update_error(e, avg, value, 0.0) == 0);
    LS_EXPECT(update_error(e, avg, value, 0.9) > 1e-3); /* the reference can tell them apart */
    LS_EXPECT(ls_ema_num_updates(e) == 1);
    free(avg);
    avg = snapshot(e, m, 1);
    LS_EXPECT(update_error(e, avg, value, 1.0) == 0);
    for (int i = 0; i < np; i++) fill(ls_module_param(m, i), i + 5);
    free(value);
    value = snapshot(e, m, 0);
    LS_REQUIRE_OK(ls_ema_update(e)); /* the second moves a tenth of the way toward new values */
    LS_EXPECT(update_error(e, avg, value, 0.9) < 1e-6);
    LS_EXPECT(update_error(e, params, value, 0.5) > 1e-3);

    /* swap: the averages into the model and back, bit for bit */
    free(avg);
    avg = snapshot(e, m, 1);
    LS_REQUIRE_OK(ls_ema_swap(e));
    float *model_now = snapshot(e, m, 0), *avg_now = snapshot(e, m, 1);
    size_t bytes = (size_t)total_of(e) * sizeof(float);
    LS_EXPECT(memcmp(model_now, avg, bytes) == 0 && memcmp(avg_now, value, bytes) == 0);
    free(model_now);
    free(avg_now);
    LS_REQUIRE_OK(ls_ema_swap(e));
    model_now = snapshot(e, m, 0);
    avg_now = snapshot(e, m, 1);
    LS_EXPECT(memcmp(model_now, value, bytes) == 0 && memcmp(avg_now, avg, bytes) == 0);
    free(model_now);
    free(avg_now);

    /* reset, the update count */
    ls_ema_set_num_updates(e, 41);
    LS_EXPECT(ls_ema_num_updates(e) == 41);
    ls_ema_set_num_updates(e, -1); /* ignored */
    LS_EXPECT(ls_ema_num_updates(e) == 41);
    LS_REQUIRE_OK(ls_ema_reset(e));
    avg_now = snapshot(e, m, 1);
    LS_EXPECT(memcmp(avg_now, value, bytes) == 0 && ls_ema_num_updates(e) == 0);
    free(avg_now);
    ls_ema_destroy(e);

    /* warmup: the first update copies, the second's decay is 1 - 2^(-2/3): mostly the new values */
    LS_REQUIRE_OK(ls_ema_create(C, m, 0.999, 1, &e));
    LS_REQUIRE_OK(ls_ema_update(e));
    free(value);
    value = snapshot(e, m, 1);
    for (int i = 0; i < np; i++) fill(ls_module_param(m, i), i + 9);
    free(params);
    params = snapshot(e, m, 0);
    LS_REQUIRE_OK(ls_ema_update(e));
    LS_EXPECT(update_error(e, value, params, 1 - pow(2, -2.0 / 3)) < 1e-6);
    LS_EXPECT(update_error(e, value, params, 0.999) > 1e-3);
    ls_ema_destroy(e);
    free(params);
    free(value);
    free(avg);

    /* a ResNet: the batch norm statistics are averaged too, after the parameters */
    ls_resnet_config cfg = {.param_dtype = LS_F32,
                            .act_dtype = LS_F32,
                            .in_channels = 1,
                            .in_h = 8,
                            .in_w = 8,
                            .n_stages = 2,
                            .widths = {4, 8},
                            .blocks = 1,
                            .num_classes = 3,
                            .seed = 5};
    ls_module *r;
    LS_REQUIRE_OK(ls_resnet_create(C, &cfg, &r));
    int rp = ls_module_num_params(r), rb = ls_cnn_num_buffers(r);
    LS_REQUIRE_OK(ls_ema_create(C, r, 0.8, 0, &e));
    ls_ema_set_num_updates(e, 1); /* past the first update (a copy): this one is 0.8 */
    LS_EXPECT(rb >= 2 && ls_ema_num_tensors(e) == rp + rb);
    for (int i = 0; i < rb; i++)
        LS_EXPECT(ls_tensor_same_shape(ls_ema_tensor(e, rp + i), ls_cnn_buffer(r, i, NULL, 0)));
    float *before = snapshot(e, r, 1);
    float x[4 * 64];
    for (int i = 0; i < 4 * 64; i++) x[i] = (float)((i * 37) % 23) / 7.0f - 1.5f;
    ls_tensor xt = ls_tensor_view(x, LS_F32, ls_device_cpu(), 2, (int64_t[]){4, 64});
    const ls_tensor *y;
    LS_REQUIRE_OK(ls_module_forward(r, &xt, &y)); /* training mode: the statistics move */
    float *after = snapshot(e, r, 0);
    int moved = 0;
    int64_t first_buffer = 0;
    for (int i = 0; i < rp; i++) first_buffer += ls_tensor_numel(ls_module_param(r, i));
    for (int64_t i = first_buffer; i < total_of(e); i++) moved += after[i] != before[i];
    LS_EXPECT(moved > 0);
    LS_REQUIRE_OK(ls_ema_update(e));
    LS_EXPECT(update_error(e, before, after, 0.8) < 1e-6);
    free(before);
    free(after);
    ls_ema_destroy(e);

    /* errors */
    LS_EXPECT_ERR(ls_ema_create(C, m, 1.0, 0, &e), LS_ERR_INVALID_ARGUMENT, "the EMA's decay 1 is not in [0, 1)");
    LS_EXPECT_ERR(ls_ema_create(C, m, -0.1, 0, &e), LS_ERR_INVALID_ARGUMENT, "not in [0, 1)");
    LS_EXPECT_ERR(ls_ema_create(C, m, NAN, 0, &e), LS_ERR_INVALID_ARGUMENT, "not in [0, 1)");
    LS_EXPECT_ERR(ls_ema_create(C, NULL, 0.5, 0, &e), LS_ERR_INVALID_ARGUMENT, "the model is NULL");
    LS_EXPECT_ERR(ls_ema_update(NULL), LS_ERR_INVALID_ARGUMENT, "NULL");
    ls_ema_destroy(NULL);
    ls_module_destroy(r);
    ls_module_destroy(m);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
