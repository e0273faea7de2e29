/* test_gradcheck_modules.c: an f64 MLP (ReLU and GELU) with the cross-entropy loss: every
 * parameter gradient from backward against central finite differences of the mean loss. */
#include <stdlib.h>

#include "../kernels/gradcheck.h"
#include "nn.h"

static ls_ctx *C;

typedef struct {
    ls_module *m;
    ls_xent *loss;
    ls_tensor *x, *labels;
} net_t;

static double net_loss(net_t *n) {
    const ls_tensor *y;
    double l;
    LS_REQUIRE_OK(ls_module_forward(n->m, n->x, &y));
    LS_REQUIRE_OK(ls_xent_forward(n->loss, y, n->labels, &l));
    return l;
}

static void check(ls_act act) {
    int64_t sizes[4] = {6, 8, 5, 4}, B = 7;
    net_t n;
    LS_REQUIRE_OK(ls_mlp_create(C, LS_F64, 4, sizes, act, 5, &n.m));
    LS_REQUIRE_OK(ls_xent_create(C, &n.loss));
    ls_rng r;
    ls_rng_init(&r, 17);
    n.x = gc_tensor(C, LS_F64, 2, (int64_t[]){B, 6});
    n.labels = gc_tensor(C, LS_I32, 1, (int64_t[]){B});
    gc_fill(&r, n.x, 0);
    for (int64_t i = 0; i < B; i++) ((int32_t *)n.labels->data)[i] = (int32_t)(i % 4);
    LS_EXPECT(ls_module_num_params(n.m) == 6);
    net_loss(&n);
    const ls_tensor *dl, *dx;
    LS_REQUIRE_OK(ls_module_zero_grad(n.m));
    LS_REQUIRE_OK(ls_xent_backward(n.loss, 1.0 / (double)B, &dl));
    LS_REQUIRE_OK(ls_module_backward(n.m, dl, 1, &dx));
    double *dxc = malloc(sizeof(double) * (size_t)(B * 6));
    memcpy(dxc, dx->data, sizeof(double) * (size_t)(B * 6));
    const double eps = 1e-6;
    for (int p = 0; p < ls_module_num_params(n.m); p++) {
        ls_tensor *w = ls_module_param(n.m, p), *g = ls_module_grad(n.m, p);
        double *wd = w->data, worst = 0;
        for (int64_t i = 0; i < ls_tensor_numel(w); i++) {
            double keep = wd[i];
            wd[i] = keep + eps;
            double up = net_loss(&n);
            wd[i] = keep - eps;
            double down = net_loss(&n);
            wd[i] = keep;
            double num = (up - down) / (2 * eps), an = ((double *)g->data)[i];
            worst = fmax(worst, fabs(num - an) / fmax(1e-5, fmax(fabs(num), fabs(an))));
        }
        if (worst > 1e-5) fprintf(stderr, "parameter %s: relative error %g\n", ls_module_param_name(n.m, p), worst);
        LS_EXPECT(worst < 1e-5);
    }
    double worst = 0, *xd = n.x->data;
    for (int64_t i = 0; i < B * 6; i++) {
        double keep = xd[i];
        xd[i] = keep + eps;
        double up = net_loss(&n);
        xd[i] = keep - eps;
        double down = net_loss(&n);
        xd[i] = keep;
        double num = (up - down) / (2 * eps);
        worst = fmax(worst, fabs(num - dxc[i]) / fmax(1e-5, fmax(fabs(num), fabs(dxc[i]))));
    }
    LS_EXPECT(worst < 1e-5);
    free(dxc);
    ls_tensor_destroy(n.x);
    ls_tensor_destroy(n.labels);
    ls_xent_destroy(n.loss);
    ls_module_destroy(n.m);
}

int main(void) {
    LS_REQUIRE_OK(ls_ctx_create(ls_device_cpu(), NULL, &C));
    check(LS_ACT_RELU);
    check(LS_ACT_GELU);
    ls_ctx_destroy(C);
    LS_TEST_END();
}
