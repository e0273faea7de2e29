/* test_modules.c: parameter lists and names, torch-like initialization bounds and determinism,
 * gradient accumulation, the gradient hook's order (last parameter first, right after its layer's
 * backward), shape errors, dropout keyed to samples, and that buffers are freed (allocator live bytes return to zero). */
#include "../kernels/gradcheck.h"
#include "nn.h"

static int order[16], n_order;
static ls_status hook(void *user, int i) {
    (void)user;
    order[n_order++] = i;
    return LS_OK;
}

/* One Dropout(0.5) forward of ones [rows, 64] in dtype t (f32 or bf16), its output as floats in out. */
static void drop(ls_module *d, ls_ctx *C, ls_dtype t, int64_t rows, float *out) {
    ls_tensor *x = gc_tensor(C, t, 2, (int64_t[]){rows, 64});
    for (int64_t i = 0; i < rows * 64; i++)
        if (t == LS_BF16)
            ((uint16_t *)x->data)[i] = 0x3F80; /* 1.0 */
        else
            ((float *)x->data)[i] = 1.0f;
    const ls_tensor *y;
    LS_REQUIRE_OK(ls_module_forward(d, x, &y));
    for (int64_t i = 0; i < rows * 64; i++)
        out[i] = t == LS_BF16 ? (((const uint16_t *)y->data)[i] == 0x4000 ? 2.0f
                                 : ((const uint16_t *)y->data)[i]         ? -1.0f
                                                                          : 0.0f)
                              : ((const float *)y->data)[i];
    ls_tensor_destroy(x);
}

/* Dropout keyed to samples (ls_module_key_dropout): a row's mask is a function of (seed, step,
 * sample) alone, whichever batch and position the sample is in, in f32 and bf16; the forward
 * must have as many rows as keys; unkeyed it draws from its own stream again. The MLP with
 * dropout is numbered as PyTorch's Sequential. */
static void test_dropout(ls_ctx *C) {
    int64_t sizes[4] = {784, 512, 256, 10};
    ls_module *m;
    LS_REQUIRE_OK(ls_mlp_create_dropout(C, LS_F32, 4, sizes, LS_ACT_RELU, 0.5f, 42, &m));
    LS_EXPECT(ls_module_num_params(m) == 6 && ls_module_num_dropouts(m) == 2);
    LS_EXPECT(strcmp(ls_module_param_name(m, 2), "3.weight") == 0 && strcmp(ls_module_param_name(m, 5), "6.bias") == 0);
    LS_EXPECT(ls_module_dropout_seed(m, 1) && !ls_module_dropout_seed(m, 2) && !ls_module_dropout_seed(m, -1));
    LS_EXPECT(*ls_module_dropout_seed(m, 0) != *ls_module_dropout_seed(m, 1));
    ls_module_destroy(m);
    ls_module *bad_m;
    LS_EXPECT_ERR(ls_mlp_create_dropout(C, LS_F32, 4, sizes, LS_ACT_RELU, 1.0f, 42, &bad_m), LS_ERR_INVALID_ARGUMENT,
                  "dropout probability 1 is outside [0, 1)");

    ls_module *d;
    LS_REQUIRE_OK(ls_dropout_create(C, 0.5f, 7, &d));
    float a[4 * 64], b[2 * 64], c[4 * 64], h[4 * 64];
    LS_REQUIRE_OK(ls_module_key_dropout(d, 3, (int64_t[]){10, 11, 12, 13}, 4));
    drop(d, C, LS_F32, 4, a);
    int zeros = 0;
    for (int i = 0; i < 4 * 64; i++) {
        LS_EXPECT(a[i] == 0.0f || a[i] == 2.0f);
        zeros += a[i] == 0.0f;
    }
    LS_EXPECT(zeros > 90 && zeros < 166); /* about half of 256 */
    LS_EXPECT(memcmp(a, a + 64, 64 * sizeof(float)) != 0);
    LS_REQUIRE_OK(ls_module_key_dropout(d, 3, (int64_t[]){12, 99}, 2)); /* sample 12 in another batch */
    drop(d, C, LS_F32, 2, b);
    LS_EXPECT(memcmp(b, a + 2 * 64, 64 * sizeof(float)) == 0);
    LS_REQUIRE_OK(ls_module_key_dropout(d, 3, (int64_t[]){10, 11, 12, 13}, 4));
    drop(d, C, LS_BF16, 4, h); /* the same masks in bf16 (2.0 exactly) */
    LS_EXPECT(memcmp(h, a, sizeof a) == 0);
    LS_REQUIRE_OK(ls_module_key_dropout(d, 4, (int64_t[]){10, 11, 12, 13}, 4)); /* the next step */
    drop(d, C, LS_F32, 4, c);
    LS_EXPECT(memcmp(c, a, 64 * sizeof(float)) != 0);
    ls_tensor *x = gc_tensor(C, LS_F32, 2, (int64_t[]){2, 64});
    const ls_tensor *y;
    LS_EXPECT_ERR(ls_module_forward(d, x, &y), LS_ERR_INVALID_ARGUMENT,
                  "dropout: its masks are keyed to 4 samples (ls_module_key_dropout) but the batch has 2");
    LS_EXPECT_ERR(ls_module_key_dropout(d, 4, NULL, 3), LS_ERR_INVALID_ARGUMENT, "ls_module_key_dropout: 3 sample ids");
    LS_REQUIRE_OK(ls_module_key_dropout(d, 0, NULL, 0));
    LS_REQUIRE_OK(ls_module_forward(d, x, &y));
    ls_tensor_destroy(x);
    ls_module_destroy(d);
}

int main(void) {
    ls_allocator *host;
    LS_REQUIRE_OK(ls_host_allocator_create(0, &host));
    ls_ctx *C;
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), host, &C));
    int64_t sizes[4] = {784, 512, 256, 10};
    ls_module *m, *m2;
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 4, sizes, LS_ACT_RELU, 42, &m));
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F32, 4, sizes, LS_ACT_RELU, 42, &m2));
    LS_EXPECT(ls_module_num_params(m) == 6);
    LS_EXPECT(ls_module_num_elements(m) == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
    LS_EXPECT(strcmp(ls_module_param_name(m, 0), "0.weight") == 0);
    LS_EXPECT(strcmp(ls_module_param_name(m, 3), "2.bias") == 0);
    LS_EXPECT(strcmp(ls_module_param_name(m, 5), "4.bias") == 0);
    LS_EXPECT(strcmp(ls_module_kind(m), "Sequential") == 0);
    /* U(-1/sqrt(784), 1/sqrt(784)), same seed same values */
    ls_tensor *w0 = ls_module_param(m, 0);
    float lo = 1, hi = -1;
    for (int64_t i = 0; i < ls_tensor_numel(w0); i++) {
        float v = ((float *)w0->data)[i];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    LS_EXPECT(lo >= -1.0f / 28 && hi <= 1.0f / 28 && lo < -0.035f && hi > 0.035f);
    LS_EXPECT(memcmp(w0->data, ls_module_param(m2, 0)->data, ls_tensor_nbytes(w0)) == 0);
    LS_EXPECT(memcmp(ls_module_param(m, 2)->data, w0->data, 64) != 0);

    /* accumulation: two backward passes give twice the gradient */
    ls_tensor *x = gc_tensor(C, LS_F32, 2, (int64_t[]){4, 784}), *lab = gc_tensor(C, LS_I32, 1, (int64_t[]){4});
    for (int64_t i = 0; i < 4 * 784; i++) ((float *)x->data)[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    ls_xent *loss;
    LS_REQUIRE_OK(ls_xent_create(C, &loss));
    const ls_tensor *y, *dl;
    double l;
    LS_REQUIRE_OK(ls_module_forward(m, x, &y));
    LS_REQUIRE_OK(ls_xent_forward(loss, y, lab, &l));
    LS_EXPECT(l > 2.0 && l < 2.6); /* about log(10) at init */
    LS_REQUIRE_OK(ls_xent_backward(loss, 0.25, &dl));
    ls_module_set_grad_hook(m, hook, NULL);
    LS_REQUIRE_OK(ls_module_backward(m, dl, 0, NULL));
    LS_EXPECT(n_order == 6);
    for (int i = 0; i < 6 && i < n_order; i++) LS_EXPECT(order[i] == 5 - i);
    ls_module_set_grad_hook(m, NULL, NULL);
    float g1 = ((float *)ls_module_grad(m, 4)->data)[17];
    LS_REQUIRE_OK(ls_module_backward(m, dl, 0, NULL));
    LS_EXPECT_NEAR(((float *)ls_module_grad(m, 4)->data)[17], 2 * g1, 1e-7);
    LS_EXPECT(g1 != 0);
    LS_REQUIRE_OK(ls_module_zero_grad(m));
    LS_EXPECT(((float *)ls_module_grad(m, 4)->data)[17] == 0);

    ls_tensor *bad = gc_tensor(C, LS_F32, 2, (int64_t[]){4, 100});
    LS_EXPECT_ERR(ls_module_forward(m, bad, &y), LS_ERR_INVALID_ARGUMENT,
                  "layer 0 (Linear): weight: input is [4, 100] f32 cpu, expected [batch, 784]");
    int64_t one[1] = {3};
    ls_module *bad_m;
    LS_EXPECT_ERR(ls_mlp_create(C, LS_F32, 1, one, LS_ACT_RELU, 1, &bad_m), LS_ERR_INVALID_ARGUMENT,
                  "at least 2 sizes");
    /* a size of 0 named by its index (it was "linear layer : sizes must be positive"), and an unknown
     * activation refused also where no hidden layer would use it (it was accepted with 2 sizes) */
    LS_EXPECT_ERR(ls_mlp_create(C, LS_F32, 3, (int64_t[]){4, 0, 3}, LS_ACT_RELU, 1, &bad_m), LS_ERR_INVALID_ARGUMENT,
                  "ls_mlp_create: sizes[1] is 0; every layer size must be >= 1");
    LS_EXPECT_ERR(ls_mlp_create(C, LS_F32, 2, (int64_t[]){4, 3}, (ls_act)7, 1, &bad_m), LS_ERR_INVALID_ARGUMENT,
                  "ls_mlp_create: unknown activation 7");
    test_dropout(C);
    ls_tensor_destroy(bad);
    ls_tensor_destroy(x);
    ls_tensor_destroy(lab);
    ls_xent_destroy(loss);
    ls_module_destroy(m);
    ls_module_destroy(m2);
    ls_memory_stats st;
    ls_allocator_stats(host, &st);
    LS_EXPECT(st.live_bytes == 0);
    /* two models, each with f32 parameters and gradients, were live at once */
    LS_EXPECT(st.peak_bytes >= 4 * 4 * (size_t)(784 * 512 + 512 * 256));
    ls_ctx_destroy(C);
    ls_allocator_destroy(host);
    LS_TEST_END();
}
