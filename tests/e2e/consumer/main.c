/* main.c: uses the installed headers and library: one linear layer forward on the CPU. Every
 * failure prints the library's error, so the install test never fails silently. */
#include <lockstep/nn.h>
#include <stdio.h>

static int fail(const char *what) {
    fprintf(stderr, "consumer: %s failed: %s\n", what, ls_last_error());
    return 1;
}

int main(void) {
    ls_ctx *ctx;
    ls_module *m;
    if (ls_ctx_create(ls_device_cpu(), NULL, &ctx) != LS_OK) return fail("ls_ctx_create");
    int64_t sizes[2] = {4, 3};
    if (ls_mlp_create(ctx, LS_F32, 2, sizes, LS_ACT_RELU, 1, &m) != LS_OK) return fail("ls_mlp_create");
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ls_tensor xt = ls_tensor_view(x, LS_F32, ls_device_cpu(), 2, (int64_t[]){2, 4});
    const ls_tensor *y;
    if (ls_module_forward(m, &xt, &y) != LS_OK) return fail("ls_module_forward");
    /* y belongs to the module: read everything needed before destroying it. */
    long long outputs = (long long)ls_tensor_numel(y), params = (long long)ls_module_num_elements(m);
    printf("consumer: %lld outputs, %lld parameters\n", outputs, params);
    ls_module_destroy(m);
    ls_ctx_destroy(ctx);
    return outputs == 6 ? 0 : 1;
}
