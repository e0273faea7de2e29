// consumer_cxx: lockstep's headers and library from C++.
#include <lockstep/nn.h>
#include <lockstep/train.h>

#include <cstdio>

int main() {
    ls_ctx *ctx = nullptr;
    if (ls_ctx_create(ls_device_cpu(), nullptr, &ctx) != LS_OK) {
        std::fprintf(stderr, "consumer_cxx: %s\n", ls_last_error());
        return 1;
    }
    int64_t sizes[3] = {4, 3, 2};
    ls_module *m = nullptr;
    ls_status s = ls_mlp_create(ctx, LS_F32, 3, sizes, LS_ACT_RELU, 1, &m);
    if (s == LS_OK) std::printf("consumer_cxx: %d parameters\n", (int)ls_module_num_elements(m));
    ls_module_destroy(m);
    ls_ctx_destroy(ctx);
    return s == LS_OK ? 0 : 1;
}
